"""The npu selection/scoring step models: calibration provenance, held-out anchors, wiring."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from servegym.calibration.npu import (
    POPE_ANCHORS,
    decode_cost_curve,
    fit_collective_launch,
    fit_ring_step_latency,
    pope_report,
    v6e_decode_attention_fit,
)
from servegym.envs.npu.sim.catalog import VPod, model
from servegym.envs.npu.sim.cluster import ClusterConfig, ConfigCatalog, NPUCluster
from servegym.envs.npu.sim.roofline import RooflineParams, evaluate, space_for
from servegym.envs.npu.sim.workloads import make_workload

from servegym.errors import ConfigError

P = RooflineParams()


def test_collective_step_latency_is_the_pope_decode_fit() -> None:
    """PROVENANCE of the ring collectives' ici_step_latency_s (no launch cost) and of the hop model's
    collective_launch_s: each refit to Pope et al.'s PaLM 540B decode step (batch 64, int8, 14 % MFU)."""
    assert P.collectives == "ring" and P.collective_launch_s == 0.0
    assert P.ici_step_latency_s == pytest.approx(fit_ring_step_latency(), rel=0.01)
    hop = RooflineParams.hop()
    assert hop.collective_launch_s == pytest.approx(fit_collective_launch(hop), rel=0.01)
    fitted = [a for a in POPE_ANCHORS if a.fitted]
    assert len(fitted) == 1 and fitted[0].step_s == pytest.approx(0.029, rel=0.04)  # the abstract's 29 ms/token


def test_held_out_pope_anchors() -> None:
    """The held-out Pope et al. points: low-latency prefill and batch-512 decode within 25 %; the 512 x 2,048-token
    prefill (76 % MFU) within 45 % -- a known miss: our prefill runs in 8,192-token chunks with collectives not
    overlapped, where Pope et al. gather weights over the whole batch and overlap communication."""
    rep = {r["anchor"]: r for r in pope_report()}
    assert abs(rep["decode, low latency"]["scoring_err"]) < 0.01
    assert abs(rep["prefill, low latency"]["scoring_err"]) < 0.25
    assert abs(rep["decode, high throughput"]["scoring_err"]) < 0.25
    assert abs(rep["prefill, high throughput"]["scoring_err"]) < 0.45
    # the selection model misses the fitted point by the ICI and launch time it leaves out
    assert rep["decode, low latency"]["selection_s"] < 0.8 * rep["decode, low latency"]["published_s"]


def test_pope_decode_cost_latency_shape() -> None:
    """Pope et al. §5 (held out): the minimum decode latency is about 3x below the batch-512 latency, and the
    cost per token keeps falling up to batch 512."""
    curve = {r["batch"]: r for r in decode_cost_curve()}
    ratio = curve[512]["step_s"] / min(r["step_s"] for r in curve.values())
    assert 2.0 < ratio < 4.5
    costs = [curve[b]["chip_s_per_token"] for b in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)]
    assert all(a > b for a, b in itertools.pairwise(costs))


def test_layer_floor_is_the_v6e_decode_attention_intercept(shared_data: Path) -> None:
    """PROVENANCE of layer_floor_s: the intercept of the measured v6e decode-attention time; its slope (3.5x the
    KV-read roofline) is documented and not applied (kv_read_factor = 1, see calibration/npu.py)."""
    fit = v6e_decode_attention_fit(shared_data)
    assert P.layer_floor_s == pytest.approx(fit["intercept_s"], rel=0.05)
    assert 3.0 < fit["roofline_multiple"] < 4.0
    assert P.kv_read_factor == 1.0


def test_selection_model_is_blind_to_ici() -> None:
    """§3.3: the selection model counts FLOPs and HBM bytes only -- its step time does not depend on the ICI,
    the scoring model's does."""
    m = model("Llama-3-70B")
    vp = [VPod("NPU-D", (4, 4), 16, 1), VPod("NPU-C", (2, 2, 4), 8, 2)]
    for ph, L, b in (("decode", 2048, [1, 64]), ("prefill", 4096, [1, 4])):
        sel = evaluate(space_for(m, vp, RooflineParams.selection()), ph, L, b).latency_s
        sel2 = evaluate(space_for(m, vp, RooflineParams.selection(eta_ici=0.05)), ph, L, b).latency_s
        sco = evaluate(space_for(m, vp, P), ph, L, b).latency_s
        sco2 = evaluate(space_for(m, vp, replace(P, eta_ici=0.05)), ph, L, b).latency_s
        np.testing.assert_array_equal(sel, sel2)
        assert np.all(sco2 > sco)


def test_legacy_params_are_the_single_model_before_the_split() -> None:
    """``legacy``: 1D all-reduces at ICI bandwidth plus 1 µs per hop -- hand-computed for one decode step."""
    m = model("Llama-3-8B")
    vp = VPod("NPU-D", (1, 4), 4, 1)
    one = evaluate(space_for(m, [vp], RooflineParams.legacy()), "decode", 1024, [8]).latency_s[0, 0]
    sel = evaluate(space_for(m, [vp], RooflineParams.selection()), "decode", 1024, [8]).latency_s[0, 0]
    link = 112e9 * 0.8 * 2  # one used axis of 4: its two links
    wire = 2 * 2 * 3 / 4 * 8 * m.hidden * 2  # two ring all-reduces of 8 tokens x hidden, bf16
    hops = 2 * 2 * 3 * 1e-6  # two all-reduces x 2 x (axis - 1) hops x 1 µs
    assert one - sel == pytest.approx(m.layers * (wire / link + hops), rel=1e-6)


def test_paper_catalog_chooses_with_selection_and_charges_scoring() -> None:
    cfg = ClusterConfig(model="Llama-3-70B", n_candidates=1, step_models="paper")
    cat = ConfigCatalog(cfg)
    eta = cfg.serving_efficiency
    assert cat.table.space.params == replace(RooflineParams.selection(), serving_prefill=eta, serving_decode=eta)
    assert cat.scoring_table.space.params == replace(P, serving_prefill=eta, serving_decode=eta)
    P_ = cat.scoring_table.space.params
    assert cat.table.slo_s == cat.scoring_table.slo_s  # the SLO is set on the scoring model (§2.4)
    for (ph, s), e in cat.best_fit.items():
        cid = cat.cand[(ph, s)][0]
        scored = evaluate(space_for(cat.model, [e.vpod], P_), ph, s, [e.batch])
        j = int(np.searchsorted(np.minimum([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], e.batch), e.batch))
        assert cat.lat[cid, int(np.searchsorted(cat.edges, s)), j] == pytest.approx(float(scored.latency_s[0, 0]))
        # tested before deployment: a best fit that claims the SLO meets it on the scoring model
        if e.meets_slo:
            assert float(scored.latency_s[0, 0]) <= cat.table.slo_s[(ph, s)] * (1 + 1e-9)
    # Ideal's best fits are the scoring model's
    assert all(cat.ideal_fit[k] == cat.scoring_table.best[k] for k in cat.ideal_fit)


@pytest.mark.parametrize("name", ["Llama-3-70B", "DeepSeek-V3-671B"])
def test_default_picks_are_not_beaten_on_the_scoring_model(name: str) -> None:
    """Selection sees what scoring sees (the default ``step_models = "scoring"``): for each bucket, no allowed
    alternative (an allocation x batch that fits in HBM and meets the bucket's SLO on the scoring model) has a lower
    J/token on the scoring model than the pick -- Figure 11's "near-ideal" picks. The roofline-only selection
    (``paper``) fails this: collectives and all-to-all it does not see make some of its picks worse."""
    from servegym.envs.npu.sim.dse import BATCH_BUCKETS

    def beaten(cat: ConfigCatalog, edges: list[int]) -> list[tuple[str, int, float]]:
        sco = cat.scoring_table
        out = []
        for ph in ("prefill", "decode"):
            for s in edges:
                pick = cat.best_fit[(ph, s)]
                if not pick.meets_slo:
                    continue
                sm = evaluate(sco.space, ph, s, BATCH_BUCKETS)
                ok = sm.feasible & (sm.latency_s <= sco.slo_s[(ph, s)] * (1 + 1e-12))
                mine = evaluate(space_for(cat.model, [pick.vpod], sco.space.params), ph, s, [pick.batch])
                e_pick = float(mine.energy_j[0, 0] / mine.tokens[0, 0])
                best = float(np.where(ok, sm.energy_j / sm.tokens, np.inf).min())
                if best < e_pick * (1 - 1e-9):
                    out.append((ph, s, e_pick / best))
        return out

    edges = [256, 1024, 2048, 4096, 16384]
    assert beaten(ConfigCatalog(ClusterConfig(model=name, n_candidates=1)), edges) == []
    if name == "DeepSeek-V3-671B":  # the roofline-only selection's short-prompt pick is beaten by over 10 %
        worse = beaten(ConfigCatalog(ClusterConfig(model=name, n_candidates=1, step_models="paper")), edges)
        assert any(r > 1.1 for _, _, r in worse), worse


def test_step_models_is_validated() -> None:
    with pytest.raises(ConfigError, match="step_models"):
        ClusterConfig(step_models="xla")
    cat = ConfigCatalog(ClusterConfig(model="Llama-3-8B", n_candidates=1))
    with pytest.raises(ConfigError, match="step-model parameters"):
        ConfigCatalog(ClusterConfig(model="Llama-3-8B", n_candidates=1, step_models="legacy"), table=cat.table)


def test_decomposition_adds_up_to_the_summary() -> None:
    """Per-group tokens, energy and cost sum to the run's totals; the realized batch is within the levels."""
    from servegym.baselines.npu import make_policy, run_policy

    cfg = ClusterConfig(model="Llama-3-8B", n_candidates=1)
    sim = NPUCluster(cfg, make_workload("azure", hours=0.5, seed=1, rate_rpm=300), seed=0)
    s = run_policy(sim, make_policy("neuscale"))
    d = sim.decomposition()
    for ph in ("prefill", "decode"):
        rows = [g for g in d["groups"] if g["phase"] == ph]
        assert sum(g["tokens"] for g in rows) == pytest.approx(s[f"tokens_{ph}"], rel=1e-9)
        assert sum(g["energy_j"] for g in rows) == pytest.approx(s[f"energy_j_{ph}"], rel=1e-9)
        assert sum(g["usd"] for g in rows) == pytest.approx(s[f"usd_{ph}"], rel=1e-9)
        t = d["totals"][ph]
        assert 1.0 <= t["batch"] <= 1024.0 and 0.0 < t["static_share"] <= 1.0
        assert t["groups_max"] >= 1 and t["vpods_max"] >= t["vpods_mean"] > 0
    assert len(d["series"]["t_s"]) == len(sim.history)
