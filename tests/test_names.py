"""One naming scheme for models and hardware (servegym.names), used by geo, pd and npu."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from servegym.envs.geo.sim.config import PAPER_MODELS, preset
from servegym.envs.npu.sim.catalog import CHIPS, MODELS, chip, model
from servegym.envs.pd.sim import catalog as pd_catalog

from servegym.errors import ConfigError
from servegym.names import HARDWARE_ALIASES, MODEL_ALIASES, NameTable, name_key, resolve

ALL_MODELS = (*PAPER_MODELS, *MODELS, *pd_catalog.MODELS)
ALL_HARDWARE = (*CHIPS, *pd_catalog.HARDWARE, "A100-40GB")


def test_every_family_uses_the_canonical_spellings() -> None:
    assert set(ALL_MODELS) <= set(MODEL_ALIASES)
    assert set(ALL_HARDWARE) <= set(HARDWARE_ALIASES)
    assert list(MODELS) == ["Llama-3-8B", "Llama-3-70B", "Llama-3.1-405B", "DeepSeek-V3-671B"]
    assert list(PAPER_MODELS) == ["Llama-3.1-8B", "Llama-3.1-8B-TP2", "Qwen2.5-7B", "Mixtral-8x7B"]
    assert [m.name for m in MODELS.values()] == list(MODELS)


@pytest.mark.parametrize(("given_name", "canonical"), [
    ("deepseek-v3-671b", "DeepSeek-V3-671B"), ("DeepSeekV3-671B", "DeepSeek-V3-671B"),
    ("deepseek-v3", "DeepSeek-V3-671B"), ("llama3-70b", "Llama-3-70B"), ("Meta-Llama-3-70B", "Llama-3-70B"),
    ("LLAMA 3.1 405B", "Llama-3.1-405B"), ("llama3.1-405b", "Llama-3.1-405B"),
])
def test_npu_models_resolve_case_insensitively_and_by_alias(given_name: str, canonical: str) -> None:
    assert MODELS.resolve(given_name) == canonical
    assert model(given_name).name == canonical


@pytest.mark.parametrize(("given_name", "canonical"), [
    ("llama-3.1-8b", "Llama-3.1-8B"), ("llama3.1-8b", "Llama-3.1-8B"), ("LLAMA_3.1_8B", "Llama-3.1-8B"),
    ("llama3.1-8b-tp2", "Llama-3.1-8B-TP2"), ("mixtral-8x7b", "Mixtral-8x7B"), ("qwen2.5-7b", "Qwen2.5-7B"),
])
def test_geo_models_resolve_case_insensitively(given_name: str, canonical: str) -> None:
    assert PAPER_MODELS.resolve(given_name) == canonical
    assert preset("mini", model=given_name) == preset("mini", model=canonical)


def test_hardware_resolves_by_name_and_tpu_alias() -> None:
    assert chip("npu-d").name == "NPU-D"
    assert chip("TPU v6e").name == "NPU-D" and chip("tpu-v4").name == "NPU-A"
    assert pd_catalog.HARDWARE["h200"].name == "H200"
    assert pd_catalog.MODELS["qwen3-32b"].name == "Qwen3-32B"


def test_llama_3_and_3_1_stay_apart() -> None:
    assert name_key("Llama-3.1-8B") != name_key("Llama-3-8B")
    with pytest.raises(ConfigError):
        MODELS.resolve("llama-3.1-8b")  # an 8B Llama 3.1 is a geo model, not an npu one


def test_configs_store_the_canonical_spelling() -> None:
    from servegym.envs.geo.env_common import GeoEnvConfig
    from servegym.envs.npu.env import NPUEnvConfig
    from servegym.envs.npu.sim.cluster import ClusterConfig

    assert ClusterConfig(model="deepseek-v3-671b", versions=("npu-c", "NPU-D")).model == "DeepSeek-V3-671B"
    assert ClusterConfig(versions=("npu-c", "tpu-v6e")).versions == ("NPU-C", "NPU-D")
    assert ClusterConfig(quota_chips={"npu-c": 8}).quota_chips == {"NPU-C": 8}
    assert NPUEnvConfig(model="llama3-8b", split=None).model == "Llama-3-8B"
    assert NPUEnvConfig(split_models=("llama3-8b",)).split_models == ("Llama-3-8B",)
    assert GeoEnvConfig(model="mixtral-8x7b").model == "Mixtral-8x7B"


@pytest.mark.parametrize(("lookup", "field", "allowed"), [
    (lambda n: model(n), "model", "Llama-3-8B, Llama-3-70B, Llama-3.1-405B, DeepSeek-V3-671B"),
    (lambda n: PAPER_MODELS[n], "model", "Llama-3.1-8B, Llama-3.1-8B-TP2, Qwen2.5-7B, Mixtral-8x7B"),
    (lambda n: chip(n), "version", "NPU-A, NPU-B, NPU-C, NPU-D"),
    (lambda n: pd_catalog.MODELS[n], "model", "Qwen3-32B"),
])
def test_one_error_format(lookup, field: str, allowed: str) -> None:
    with pytest.raises(ConfigError) as e:
        lookup("gpt-5")
    assert str(e.value) == f"{field} = 'gpt-5' is unknown; allowed: {allowed} (case and '-', '_', ' ' are ignored)"


def test_name_table_is_a_mapping() -> None:
    t = NameTable({"Llama-3-8B": 1}, field="model")
    assert "llama3-8b" in t and "llama-3.1-8b" not in t and 3 not in t
    assert t.get("LLAMA-3-8B") == 1 and t.get("nope", 0) == 0
    assert dict(t) == {"Llama-3-8B": 1} and len(t) == 1


@given(st.sampled_from(sorted(set(MODEL_ALIASES) | set(HARDWARE_ALIASES))), st.data())
def test_any_case_and_separator_variant_resolves(canonical: str, data: st.DataObject) -> None:
    flips = data.draw(st.lists(st.booleans(), min_size=len(canonical), max_size=len(canonical)))
    sep = data.draw(st.sampled_from(["-", "_", " ", ""]))
    variant = "".join(c.upper() if f else c.lower() for c, f in zip(canonical, flips, strict=True)).replace("-", sep)
    allowed = MODEL_ALIASES if canonical in MODEL_ALIASES else HARDWARE_ALIASES
    assert resolve(variant, allowed) == canonical
