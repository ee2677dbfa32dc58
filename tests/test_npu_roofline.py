"""Roofline step model: hand-checked limits, memory feasibility, efficiency provenance, invariants."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from servegym.envs.npu.sim.catalog import CHIPS, VPod, model
from servegym.envs.npu.sim.roofline import (
    RooflineParams,
    enumerate_allocations,
    evaluate,
    pod_shapes,
    space_for,
    step_cost,
    tp_subshape,
    weight_bytes_per_chip,
)

from servegym.errors import ConfigError

PROFILE = Path("npu/llmservingsim_tpu_v6e/profiler/v0/perf_models/TPU-v6e-1/meta-llama/Llama-3.1-8B/tp1/layers.csv.gz")
P = RooflineParams()


def test_efficiency_factors_are_the_v6e_profile_medians(shared_data: Path) -> None:
    """eta_compute / eta_memory are recomputed from the measured v6e GEMM latencies (module docstring)."""
    import pandas as pd

    d = pd.read_csv(shared_data / PROFILE)
    shapes = {"q_proj": (4096, 4096), "o_proj": (4096, 4096), "gate_proj": (4096, 14336),
              "up_proj": (4096, 14336), "down_proj": (14336, 4096), "lm_head": (4096, 128256)}
    d = d[d.layer_name.isin(shapes)]
    n = d.layer_name.map(lambda x: shapes[x][0])
    k = d.layer_name.map(lambda x: shapes[x][1])
    t = d["input"]
    tflops = 2 * t * n * k / d["latency(ns)"] / 1e3
    gbps = 2 * (n * k + t * (n + k)) / d["latency(ns)"]
    eta_c = tflops[t >= 1024].median() / CHIPS["NPU-D"].tflops
    mem_rows = (t <= 64) & d.layer_name.isin(["gate_proj", "up_proj", "down_proj", "lm_head"])
    eta_m = gbps[mem_rows].median() / CHIPS["NPU-D"].hbm_gbps
    assert P.eta_compute == pytest.approx(eta_c, abs=0.005)
    assert P.eta_memory == pytest.approx(eta_m, abs=0.005)


def test_decode_batch1_single_chip_is_weight_streaming() -> None:
    m = model("Llama-3-8B")
    c = step_cost(m, VPod("NPU-C", (1, 1, 1), 1, 1), "decode", 128, 1)
    weights = m.weight_bytes - m.embed_params * 2  # the input embedding is gathered, not streamed
    expect = weights / (CHIPS["NPU-C"].hbm_gbps * 1e9 * P.eta_memory)
    assert c.feasible
    assert c.latency_s == pytest.approx(expect, rel=0.03)
    assert c.tokens == 1 and c.period_s == c.latency_s


def test_prefill_single_chip_is_compute_bound() -> None:
    m = model("Llama-3-8B")
    L = 4096
    c = step_cost(m, VPod("NPU-D", (1, 1), 1, 1), "prefill", L, 1)
    linear = 2.0 * (m.total_params - 2 * m.embed_params) * L
    attn = 4.0 * m.heads * m.head_dim * (L / 2) * L * m.layers
    expect = (linear + attn) / (CHIPS["NPU-D"].tflops * 1e12 * P.eta_compute)
    assert c.latency_s == pytest.approx(expect, rel=0.05)
    assert c.tokens == L


def test_energy_limits_match_table2() -> None:
    """Dynamic energy per FLOP / per byte follows TFLOP/J and GB/J; static power adds chips x time."""
    m = model("Llama-3-8B")
    vp = VPod("NPU-D", (1, 1), 1, 1)
    zero_static = RooflineParams(static_power_frac=0.0)
    c = step_cost(m, vp, "prefill", 4096, 1, zero_static)
    flops = 2.0 * (m.total_params - 2 * m.embed_params) * 4096 + 4.0 * 32 * 128 * 2048 * 4096 * 32
    # compute energy dominates a compute-bound prefill; HBM traffic (weights, activations) adds < 20%
    assert flops / 3.5e12 < c.energy_j < 1.2 * flops / 3.5e12
    c_static = step_cost(m, vp, "prefill", 4096, 1)
    # chip power counted once: the idle floor (0.35 of the 262 W whole-chip power) over the period, and 0.35 less
    # compute energy per FLOP (the floor is part of Table 2's TFLOP/J, not added on top of it)
    # E(f) = E(0) + f x (whole power x period - compute energy): linear in the floor's fraction f
    added = c_static.energy_j - c.energy_j
    c_07 = step_cost(m, vp, "prefill", 4096, 1, RooflineParams(static_power_frac=0.7))
    assert c_07.energy_j - c.energy_j == pytest.approx(2.0 * added, rel=1e-9)
    compute_j = 918 / 3.5 * c.period_s - added / 0.35
    assert flops / 3.5e12 <= compute_j < 1.2 * flops / 3.5e12
    assert c_static.energy_j < c.energy_j + 0.35 * 918 / 3.5 * c.period_s  # the floor is not added on top
    assert c_static.usd == pytest.approx(2.70 / 3600 * c.period_s)


@pytest.mark.parametrize("version", ["NPU-A", "NPU-B", "NPU-C", "NPU-D"])
def test_chip_at_peak_compute_draws_table2_power_once(version: str) -> None:
    """Table 2's TFLOPS / (TFLOP/J) is the whole chip's power at peak compute: the idle floor plus the compute's
    energy above it at the peak rate add up to exactly that, for every version and floor."""
    from servegym.envs.npu.sim.roofline import space_for

    for frac in (0.0, 0.35, 0.6):
        p = RooflineParams(static_power_frac=frac, eta_compute=1.0)
        a = space_for(model("Llama-3-8B"), [VPod(version, (1, 1) if version in ("NPU-B", "NPU-D") else (1, 1, 1),
                                                 1, 1)], p).arrays
        spec = CHIPS[version]
        at_peak_w = a["static_w"][0] + a["j_per_flop"][0] * a["flops_peak"][0]
        assert at_peak_w == pytest.approx(spec.tflops / spec.tflop_per_j, rel=1e-12)
        assert a["static_w"][0] == pytest.approx(frac * spec.tflops / spec.tflop_per_j, rel=1e-12)


def test_memory_feasibility_rejects_small_pods_and_accepts_larger() -> None:
    m = model("Llama-3-70B")  # 141 GB of bf16 weights
    for shape, tp, ok in [((1, 1), 1, False), ((1, 2), 2, False), ((2, 2), 4, False), ((2, 4), 8, True),
                          ((4, 4), 16, True)]:
        assert step_cost(m, VPod("NPU-D", shape, tp, 1), "decode", 1024, 1).feasible is ok, shape
    # per-chip memory falls as the pod grows, and a huge KV cache makes the same pod infeasible
    mems = [step_cost(m, VPod("NPU-C", s, n, 1), "decode", 1024, 1).mem_bytes
            for s, n in [((1, 1, 2), 2), ((1, 2, 2), 4), ((2, 2, 2), 8)]]
    assert mems[0] > mems[1] > mems[2]
    assert step_cost(m, VPod("NPU-C", (2, 2, 2), 8, 1), "decode", 1 << 20, 64).feasible is False
    ds = model("DeepSeek-V3-671B")
    assert not step_cost(ds, VPod("NPU-C", (2, 2, 2), 8, 1), "decode", 1024, 1).feasible
    assert step_cost(ds, VPod("NPU-C", (2, 2, 4), 16, 1), "decode", 1024, 1).feasible


def test_enumeration_respects_limits() -> None:
    space = enumerate_allocations(model("Llama-3-8B"))
    for vp in space.vpods:
        assert vp.chips <= min(1024, CHIPS[vp.version].max_chips_per_pod)
        assert vp.tp <= 32 and vp.pp <= 32 and vp.tp * vp.pp == vp.chips
    assert {vp.version for vp in space.vpods} == set(CHIPS)
    ds = enumerate_allocations(model("DeepSeek-V3-671B"), versions=["NPU-C"])
    assert {vp.ep for vp in ds.vpods if vp.tp == 16} == {1, 16}
    assert all(len(s) == 2 for s in pod_shapes("NPU-D")) and max(np.prod(s) for s in pod_shapes("NPU-D")) == 256
    assert max(np.prod(s) for s in pod_shapes("NPU-C")) == 1024
    assert tp_subshape((2, 4, 4), 8) == (2, 2, 2) and tp_subshape((1, 1, 16), 4) == (1, 1, 4)


def test_hot_expert_slows_expert_parallel_only() -> None:
    """With EP = TP the chip holding the hottest expert (7x the average load, §4) bounds the step;
    tensor-sharded experts (EP = 1) split every expert over all chips, so the skew does not matter."""
    ds = model("DeepSeek-V3-671B")
    flat = replace(ds, hot_expert_factor=1.0)
    vps = [VPod("NPU-D", (8, 8), 64, 1, ep=1), VPod("NPU-D", (8, 8), 64, 1, ep=64)]
    hot = evaluate(space_for(ds, vps), "prefill", 8192, [1])
    even = evaluate(space_for(flat, vps), "prefill", 8192, [1])
    assert hot.latency_s[1, 0] > even.latency_s[1, 0]
    assert hot.latency_s[0, 0] == even.latency_s[0, 0]
    assert hot.energy_j[1, 0] > even.energy_j[1, 0]  # static power over the longer step


def test_step_cost_matches_the_vectorized_space() -> None:
    m = model("Llama-3.1-405B")
    space = enumerate_allocations(m, versions=["NPU-A"])
    sm = evaluate(space, "decode", 4096, [1, 16, 256])
    for i in (0, len(space) // 2, len(space) - 1):
        vp = space.vpods[i]
        for j, b in enumerate([1, 16, 256]):
            c = step_cost(m, vp, "decode", 4096, b)
            assert c.latency_s == sm.latency_s[i, j] and c.energy_j == sm.energy_j[i, j]
            assert c.feasible == sm.feasible[i, j]


@settings(max_examples=40, deadline=None)
@example(idx=9999, l1=4275, l2=8193, b=1, phase="prefill")  # a prompt just over one chunk
@given(idx=st.integers(0, 10_000), l1=st.integers(1, 1 << 19), l2=st.integers(1, 1 << 19),
       b=st.sampled_from([1, 2, 8, 16, 64, 512]), phase=st.sampled_from(["prefill", "decode"]))
def test_invariants(idx: int, l1: int, l2: int, b: int, phase: str) -> None:
    lo, hi = sorted((l1, l2))
    for space in (_space_70b(), _space_70b(RooflineParams.selection())):
        i = idx % len(space)
        a = evaluate(space, phase, lo, [b])
        z = evaluate(space, phase, hi, [b])
        for sm in (a, z):
            assert np.all(sm.latency_s > 0) and np.all(sm.energy_j > 0) and np.all(sm.usd > 0)
            assert np.all(sm.period_s <= sm.latency_s * (1 + 1e-12))
        # more context never makes a step faster (the scoring model takes the fastest layout at each length)
        assert z.latency_s[i, 0] >= a.latency_s[i, 0] * (1 - 1e-12)
        if space.params.layouts:
            continue
        # with the layout fixed (selection model) it never needs less memory nor energy either; with the
        # layout chosen by time, memory and energy drop where KV sharded by batch takes over from a replicated
        # head shard
        assert z.mem_bytes[i, 0] >= a.mem_bytes[i, 0]
        assert z.energy_j[i, 0] >= a.energy_j[i, 0] * (1 - 1e-12)


_SPACE: dict = {}


def _space_70b(params: RooflineParams | None = None):
    key = params or RooflineParams()
    if key not in _SPACE:
        _SPACE[key] = enumerate_allocations(model("Llama-3-70B"), params=params)
    return _SPACE[key]


@pytest.mark.parametrize("kwargs", [{"eta_compute": 0.0}, {"eta_memory": 1.5}, {"static_power_frac": -0.1},
                                    {"prefill_chunk_tokens": 0}])
def test_params_reject_out_of_range(kwargs: dict) -> None:
    with pytest.raises(ConfigError, match=next(iter(kwargs))):
        RooflineParams(**kwargs)


def test_evaluate_rejects_bad_input() -> None:
    space = space_for(model("Llama-3-8B"), [VPod("NPU-D", (1, 1), 1, 1)])
    with pytest.raises(ConfigError, match="phase"):
        evaluate(space, "train", 128, [1])
    with pytest.raises(ConfigError, match="seq_len"):
        evaluate(space, "decode", 0, [1])
    with pytest.raises(ConfigError, match="batch"):
        evaluate(space, "decode", 128, [0])
    with pytest.raises(ConfigError, match="tp"):
        space_for(model("Llama-3-8B"), [VPod("NPU-C", (4, 4, 4), 64, 1)])
    with pytest.raises(ConfigError, match="ep"):
        space_for(model("Llama-3-8B"), [VPod("NPU-D", (2, 2), 4, 1, ep=4)])


def test_weight_bytes_per_chip() -> None:
    m = model("Llama-3-70B")
    assert weight_bytes_per_chip(m, VPod("NPU-D", (2, 4), 8, 1)) == pytest.approx(m.weight_bytes / 8)
    # with PP the largest stage holds its layers plus one of the embedding / LM-head tables
    assert weight_bytes_per_chip(m, VPod("NPU-D", (2, 4), 4, 2)) == pytest.approx(m.weight_bytes / 8)
    per_stage = weight_bytes_per_chip(m, VPod("NPU-D", (4, 4), 1, 16))
    assert per_stage == pytest.approx((m.weight_bytes - 2 * 2 * m.embed_params) / 16 + 2 * m.embed_params)
