"""Best fit at the operating point (servegym.envs.npu.sim.selection) and its wiring into the catalog and policies."""

from __future__ import annotations

import numpy as np
import pytest
from servegym.baselines.npu import BasePolicy, NeuScalePolicy, run_policy
from servegym.envs.npu.sim.catalog import VPod, model
from servegym.envs.npu.sim.cluster import ClusterConfig, ConfigCatalog, NPUCluster
from servegym.envs.npu.sim.dse import run_dse
from servegym.envs.npu.sim.roofline import RooflineParams, evaluate, space_for
from servegym.envs.npu.sim.selection import DEMAND_LEVELS, level_index, operating_fits
from servegym.envs.npu.sim.workloads import make_workload

from servegym.errors import ConfigError


def test_selection_op_shards_the_mla_latent_by_batch() -> None:
    """The operating-point selection model shards DeepSeek-V3's MLA KV by batch where cheaper, so the latent is no
    longer replicated on every TP chip: less HBM per chip at a large batch than the plain selection model."""
    ds = model("DeepSeek-V3-671B")
    vp = VPod("NPU-C", (2, 2, 4), tp=16, pp=1, ep=16)
    plain = evaluate(space_for(ds, [vp], RooflineParams.selection()), "decode", 8192, [256])
    op = evaluate(space_for(ds, [vp], RooflineParams.selection_op()), "decode", 8192, [256])
    assert op.mem_bytes[0, 0] < 0.5 * plain.mem_bytes[0, 0]
    # the collective term: the operating-point model is slower than the plain roofline at batch 1
    p1 = evaluate(space_for(ds, [vp], RooflineParams.selection()), "decode", 8192, [1])
    o1 = evaluate(space_for(ds, [vp], RooflineParams.selection_op()), "decode", 8192, [1])
    assert o1.latency_s[0, 0] > p1.latency_s[0, 0]


@pytest.fixture(scope="module")
def fits() -> tuple[dict, object]:
    t = run_dse("Llama-3-8B", seq_lens=[1024, 8192])
    return operating_fits(model("Llama-3-8B"), "energy", t.slo_s, [1024, 8192]), t


def test_low_demand_picks_fewer_chips_and_meets_the_slo(fits) -> None:
    picks, table = fits
    for key, row in picks.items():
        assert len(row) == DEMAND_LEVELS.size and all(e is not None and e.meets_slo for e in row)
        assert all(e.latency_s <= table.slo_s[key] for e in row)
        # static power dominates at 1 token/s: the fewest chips that meet the SLO; never more chips than at the
        # highest demand
        assert row[0].chips <= row[-1].chips
        assert row[0].chips <= table.lookup(*key).chips


def test_level_index_rounds_up() -> None:
    assert level_index(0.0) == 0 and level_index(1.0) == 0 and level_index(1.5) == 1
    assert level_index(1e12) == DEMAND_LEVELS.size - 1


def test_fit_at_is_validated_and_switchable() -> None:
    with pytest.raises(ConfigError, match="fit_at"):
        ClusterConfig(fit_at="best")
    assert ClusterConfig().fit_at == "best-batch"


@pytest.fixture(scope="module")
def op_catalog() -> tuple[ClusterConfig, ConfigCatalog]:
    cfg = ClusterConfig(model="Llama-3-8B", n_candidates=1, fit_at="operating")
    return cfg, ConfigCatalog(cfg)


def test_operating_point_cluster_runs_deterministically(op_catalog) -> None:
    cfg, cat = op_catalog
    wl = make_workload("azure", hours=0.25, seed=0, start_hour=10.0)
    out = []
    for _ in range(2):
        sims = {}
        for pol in (NeuScalePolicy(), BasePolicy()):
            sim = NPUCluster(cfg, wl, seed=0, catalog=cat)
            sims[pol.name] = run_policy(sim, pol)
            if pol.name == "base":
                assert all(cat.configs[c].entry.role in ("operating", "best") for c in pol.cfg.values())
        out.append(sims)
    assert out[0] == out[1]
    assert out[0]["neuscale"]["tokens"] > 0 and out[0]["base"]["tokens"] > 0
    sim = NPUCluster(cfg, wl, seed=0, catalog=cat)
    lo, hi = sim.op_fit("decode", 1024, 1.0), sim.op_fit("decode", 1024, 1e6)
    assert sim.configs[lo].chips <= sim.configs[hi].chips
    assert np.isfinite(sim.max_rps(lo, "decode", 1024, 1.0))


def test_operating_picks_are_fixed_before_the_run(op_catalog) -> None:
    """With fit_at = operating NeuScale's per-bucket configurations come from the trace's peak demand before the
    run (§5.1: best fits generated "before running the experiments") and do not follow the epoch's demand: a group
    whose pick changed with every demand level recreated its vPods, and the backlog of the boot set off emergency
    scale-outs of one batch-1 vPod per queued request (1,475 decode vPods on the focal scenario)."""
    from servegym.baselines.npu import operating_picks, trace_peak

    cfg, cat = op_catalog
    wl = make_workload("azure", hours=0.25, seed=0, start_hour=10.0)
    sim = NPUCluster(cfg, wl, seed=0, catalog=cat)
    peak, share, mean_tok = trace_peak(sim)
    # the per-bucket shares split each phase's mean tokens per request
    assert np.allclose(share.sum(axis=1), mean_tok)
    assert peak * 10.0 >= 1.0
    picks = operating_picks(sim)
    b = int(np.argmax(share[1]))
    # the bucket's group: the run of consecutive buckets with traffic that share its allocation; its pick is the
    # top bucket's at the group's summed demand
    alloc = [sim.configs[picks[(1, x)]].entry.alloc_index for x in range(len(sim.edges))]
    live = np.flatnonzero(share[1] > 0).tolist()
    i = j = live.index(b)
    while i > 0 and alloc[live[i - 1]] == alloc[b]:
        i -= 1
    while j + 1 < len(live) and alloc[live[j + 1]] == alloc[b]:
        j += 1
    run = live[i:j + 1]
    w = peak * share[1, run].sum()
    assert picks[(1, b)] == sim.op_fit("decode", int(sim.edges[run[-1]]), w)
    assert w >= peak * share[1, b]
    pol = NeuScalePolicy()
    run_policy(sim, pol)
    assert pol.fixed == picks
    ctx = sim.observe()
    # the pick ignores the demand it is asked at
    assert pol._pick(ctx, 1, b, 1.0) == pol._pick(ctx, 1, b, 1e6) == picks[(1, b)]
