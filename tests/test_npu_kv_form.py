"""The KV-cache form knob (``kv_form``: an MLA model's latent or its expanded per-head K and V): the default unchanged,
the ablation changes what it says it changes (Base's trace-peak count is tested in test_npu_baselines.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from servegym.envs.npu.sim.catalog import VPod, model
from servegym.envs.npu.sim.cluster import ClusterConfig, ConfigCatalog
from servegym.envs.npu.sim.roofline import RooflineParams, evaluate, space_for

from servegym.errors import ConfigError

DS = model("DeepSeek-V3-671B")


def test_kv_bytes_per_form() -> None:
    assert DS.kv_bytes_per_token_layer_as() == DS.kv_bytes_per_token_layer == (512 + 64) * 2
    assert DS.kv_bytes_per_token_layer_as("expanded") == 128 * (128 + 64 + 128) * 2  # 81,920 B: 71x the latent
    llama = model("Llama-3-70B")  # no MLA: one form
    assert llama.kv_bytes_per_token_layer_as("expanded") == llama.kv_bytes_per_token_layer == 2 * 8 * 128 * 2
    with pytest.raises(ConfigError, match="kv_form"):
        DS.kv_bytes_per_token_layer_as("compressed")
    with pytest.raises(ConfigError, match="kv_form"):
        RooflineParams(kv_form="compressed")
    with pytest.raises(ConfigError, match="kv_form"):
        ClusterConfig(kv_form="compressed")


def test_default_is_latent_and_the_form_reaches_both_step_models() -> None:
    c = ClusterConfig(model="DeepSeek-V3-671B")
    assert c.kv_form == "latent" and all(p.kv_form == "latent" for p in c.step_params())
    assert RooflineParams() == replace(RooflineParams(), kv_form="latent")
    e = replace(c, kv_form="expanded")
    assert all(p.kv_form == "expanded" for p in e.step_params())
    assert ConfigCatalog.key_of(c) != ConfigCatalog.key_of(e)


def _decode(m, form: str, vp: VPod, ctx: int, batches: list[int]):
    return evaluate(space_for(m, [vp], RooflineParams(kv_form=form)), "decode", ctx, batches)


def test_expanded_cache_shrinks_deepseek_decode_batch_and_leaves_llama_alone() -> None:
    vp = VPod("NPU-C", (4, 4, 4), tp=64, pp=1, ep=64)
    bs = [1, 16, 64, 128, 256, 512, 720]
    lat, exp = _decode(DS, "latent", vp, 12288, bs), _decode(DS, "expanded", vp, 12288, bs)
    # the latent holds a batch of 720 at 12K tokens of context on 64 NPU-C chips; the expanded cache about 64
    assert lat.feasible[0].all()
    assert exp.feasible[0, :3].all() and not exp.feasible[0, 3:].any()
    assert (exp.mem_bytes > lat.mem_bytes).all()
    # decode reads each head's K and V: slower per step than the latent (compute-light, 71x the bytes)
    assert exp.latency_s[0, 2] > lat.latency_s[0, 2]
    llama = model("Llama-3-70B")
    vl = VPod("NPU-C", (2, 2, 2), tp=8, pp=1)
    a, b = _decode(llama, "latent", vl, 4096, bs), _decode(llama, "expanded", vl, 4096, bs)
    for f in ("latency_s", "energy_j", "mem_bytes"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))


def test_compare_cli_passes_the_kv_form(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import servegym.baselines.npu as npu

    from servegym.cli import main

    seen: list[dict] = []
    monkeypatch.setattr(npu, "compare", lambda *a, **kw: seen.append(kw) or [])
    assert main(["npu", "compare", "--hours", "1", "--json", "--kv-form", "expanded"]) == 0
    assert main(["npu", "compare", "--hours", "1", "--json"]) == 0
    assert seen[0]["kv_form"] == "expanded" and "kv_form" not in seen[1]  # the default passes nothing
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["npu", "compare", "--kv-form", "compressed"])
    assert e.value.code == 2
