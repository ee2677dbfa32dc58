"""NPU chip catalog (Table 2, prices), model shapes and the vPod unit."""

from __future__ import annotations

import pytest
from servegym.envs.npu.sim.catalog import CHIPS, MODELS, VERSIONS, VPod, chip, model

from servegym.errors import ConfigError


def test_table2_and_prices() -> None:
    d = chip("NPU-D")
    assert (d.tflops, d.tflop_per_j, d.systolic_width, d.hbm_gbps, d.hbm_gb, d.hbm_gb_per_j) == (
        918.0, 3.50, 256, 1640.0, 32.0, 13.52)
    assert (d.ici_gbps_per_link, d.ici_links, d.torus_dims, d.dcn_gbps, d.max_chips_per_pod) == (112.0, 4, 2, 100.0, 256)
    c = chip("NPU-C")
    assert (c.tflops, c.hbm_gbps, c.hbm_gb, c.hbm_gb_per_j, c.torus_dims, c.max_chips_per_pod) == (
        459.0, 2765.0, 95.0, 18.51, 3, 6144)
    assert {v: CHIPS[v].usd_per_chip_hour for v in VERSIONS} == {
        "NPU-A": 3.22, "NPU-B": 1.20, "NPU-C": 4.20, "NPU-D": 2.70}
    assert [CHIPS[v].tpu for v in VERSIONS] == ["TPU v4", "TPU v5e", "TPU v5p", "TPU v6e"]
    # §2.4's premise: D has the best compute energy efficiency, C the best HBM energy efficiency
    assert max(VERSIONS, key=lambda v: CHIPS[v].tflop_per_j) == "NPU-D"
    assert max(VERSIONS, key=lambda v: CHIPS[v].hbm_gb_per_j) == "NPU-C"


@pytest.mark.parametrize(("name", "billions"), [
    ("Llama-3-8B", 8.03), ("Llama-3-70B", 70.55), ("Llama-3.1-405B", 405.85), ("DeepSeek-V3-671B", 671.0)])
def test_parameter_counts_match_the_model_cards(name: str, billions: float) -> None:
    assert model(name).total_params / 1e9 == pytest.approx(billions, rel=0.005)


def test_moe_and_mla_fields() -> None:
    ds = model("DeepSeek-V3-671B")
    assert ds.is_moe and ds.is_mla and ds.moe_layers == 58 and ds.hot_expert_factor == 7.0
    assert ds.kv_bytes_per_token_layer == (512 + 64) * 2
    llama = model("Llama-3-70B")
    assert not llama.is_moe and llama.kv_bytes_per_token_layer == 2 * 8 * 128 * 2


def test_vpod_valid_and_label() -> None:
    vp = VPod("NPU-C", (2, 2, 4), tp=8, pp=2, max_batch=64)
    assert vp.chips == 16 and vp.label == "NPU-C_2x2x4_tp8_pp2"
    assert VPod("NPU-D", (4, 8), tp=32, pp=1, ep=32).label.endswith("_ep32")


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"version": "NPU-Z", "shape": (1, 1), "tp": 1, "pp": 1}, "version"),
    ({"version": "NPU-D", "shape": (2, 2, 2), "tp": 8, "pp": 1}, "shape"),
    ({"version": "NPU-D", "shape": (3, 2), "tp": 6, "pp": 1}, "shape"),
    ({"version": "NPU-D", "shape": (2, 32), "tp": 64, "pp": 1}, "shape"),
    ({"version": "NPU-A", "shape": (8, 16, 16), "tp": 128, "pp": 16}, "chips"),
    ({"version": "NPU-D", "shape": (2, 4), "tp": 4, "pp": 1}, "tp * pp"),
    ({"version": "NPU-D", "shape": (2, 4), "tp": 8, "pp": 1, "ep": 4}, "ep"),
    ({"version": "NPU-D", "shape": (2, 4), "tp": 8, "pp": 1, "max_batch": 0}, "max_batch"),
])
def test_vpod_rejects_bad_input(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace("*", r"\*")):
        VPod(**kwargs)


def test_unknown_names_list_allowed_values() -> None:
    with pytest.raises(ConfigError, match="Llama-3-8B"):
        model("GPT-5")
    with pytest.raises(ConfigError, match="NPU-A"):
        chip("H100")
    assert set(MODELS) == {"Llama-3-8B", "Llama-3-70B", "Llama-3.1-405B", "DeepSeek-V3-671B"}
