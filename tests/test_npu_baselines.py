"""NeuScale's scaling rules (§3.4), Base, the Ideal oracle and the ``npu compare`` CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from servegym.baselines.npu import (
    BasePolicy,
    NeuScalePolicy,
    _CountRule,
    compare,
    ideal_metrics,
    run_policy,
)
from servegym.envs.npu.cluster import (
    NB,
    ClusterConfig,
    ConfigCatalog,
    NPUCluster,
    Observation,
    ScalingDecision,
)
from servegym.envs.npu.workloads import make_workload

from servegym.errors import ConfigError

MODEL = "Llama3-8B"


@pytest.fixture(scope="module")
def cat() -> ConfigCatalog:
    return ConfigCatalog(ClusterConfig(model=MODEL, n_candidates=1))


@pytest.fixture(scope="module")
def wl():
    return make_workload("azure", hours=0.5, seed=2, rate_rpm=600)


def _sim(cat: ConfigCatalog, wl, **kw) -> NPUCluster:
    cfg = ClusterConfig(model=MODEL, n_candidates=1, **kw)
    return NPUCluster(cfg, wl, seed=0, catalog=ConfigCatalog(cfg, table=cat.table) if kw else cat)


def _obs(sim: NPUCluster, **arrays) -> Observation:
    base = sim.observe()
    fields = dict(base.__dict__)
    fields["at_epoch_boundary"] = True
    fields.update(arrays)
    return Observation(**fields)


def test_count_rule_doubles_at_most_and_halves_per_window() -> None:
    r = _CountRule(halve_window_s=1800.0)
    key = ("prefill", 1024)
    assert r.limit(key, 10, 2, now=0.0) == 4  # x2 per epoch
    assert r.limit(key, 10, 0, now=0.0) == 10  # a new group starts at its N_pod
    r = _CountRule(halve_window_s=1800.0)
    assert r.limit(key, 8, 8, now=0.0) == 8
    assert r.limit(key, 0, 8, now=300.0) == 4  # ÷2 within the window
    assert r.limit(key, 0, 4, now=600.0) == 4  # still the same window: no further halving
    assert r.limit(key, 0, 4, now=1800.0) == 2  # a new window halves again
    assert r.limit(key, 0, 1, now=3600.0) == 0  # and a group can reach 0 (eviction)
    # a group created in a window keeps its count until the window ends, then halves
    r = _CountRule(halve_window_s=1800.0)
    assert r.limit(key, 3, 0, now=0.0) == 3
    assert r.limit(key, 0, 3, now=300.0) == 3
    assert r.limit(key, 6, 3, now=600.0) == 6  # scaling out is still allowed (x2)
    assert r.limit(key, 0, 6, now=1800.0) == 3


def test_ewma_scales_in_fast_and_out_at_once() -> None:
    r = _CountRule(alpha=0.5)

    class C:
        epoch_peak = np.zeros((2, NB))

    c = C()
    c.epoch_peak[0, 3] = 10.0
    assert r.signal(c)[0, 3] == 10.0  # a burst enters at once
    c.epoch_peak = np.zeros((2, NB))
    assert r.signal(c)[0, 3] == 5.0
    assert r.signal(c)[0, 3] == 2.5


def test_coalescing_merges_small_group_only_with_spare_capacity(cat: ConfigCatalog, wl) -> None:
    sim = _sim(cat, wl)
    pol = NeuScalePolicy()
    pol.reset(sim)
    e = sim.edges
    small, big = int(np.searchsorted(e, 128)), int(np.searchsorted(e, 8192))
    assert sim.candidates("decode", 128)[0] != sim.candidates("decode", 8192)[0]
    cap_small = sim.max_rps(sim.candidates("decode", 128)[0], "decode", 128, 1.0)
    cap_big = sim.max_rps(sim.candidates("decode", 8192)[0], "decode", 8192, 1.0)
    tpr = np.zeros((2, NB))
    tpr[1, [small, big]] = 100.0
    sig = np.zeros((2, NB))
    # small: N_L = 0.2; big: 1.5 vPods of load -> 2 vPods with 0.5 spare, which absorbs the small group
    sig[1, small] = 0.2 * cap_small / 100.0
    sig[1, big] = 1.5 * cap_big / 100.0
    ctx = _obs(sim, tokens_per_req=tpr)
    groups = pol.groups(ctx, 1, sig)
    assert [g[0] for g in groups] == [big]
    # no spare capacity in the larger group: no merge
    sig[1, big] = 2.0 * cap_big / 100.0
    pol2 = NeuScalePolicy()
    pol2.reset(sim)
    assert [g[0] for g in pol2.groups(ctx, 1, sig)] == [small, big]
    # above the N_L threshold: no merge either
    sig[1, small] = 0.6 * cap_small / 100.0
    sig[1, big] = 1.2 * cap_big / 100.0
    assert [g[0] for g in pol2.groups(ctx, 1, sig)] == [small, big]
    # coalescing disabled
    pol3 = NeuScalePolicy(coalescing=False)
    pol3.reset(sim)
    sig[1, small] = 0.1 * cap_small / 100.0
    assert [g[0] for g in pol3.groups(ctx, 1, sig)] == [small, big]


def test_neuscale_n_pod_is_ceil_rpeak_over_tpod(cat: ConfigCatalog, wl) -> None:
    sim = _sim(cat, wl)
    pol = NeuScalePolicy(coalescing=False)
    pol.reset(sim)
    b = int(np.searchsorted(sim.edges, 2048))
    cid = sim.candidates("prefill", 2048)[0]
    t_pod = sim.max_rps(cid, "prefill", 2048, 2000.0)
    peak = np.zeros((2, NB))
    peak[0, b] = 3.4 * t_pod
    tpr = np.zeros((2, NB))
    tpr[0, b] = 2000.0
    dec = pol.decide(_obs(sim, epoch_peak=peak, rate_peak=peak, tokens_per_req=tpr))
    assert dec.targets[("prefill", 2048)] == {cid: 4}


def test_emergency_bypasses_doubling(cat: ConfigCatalog, wl) -> None:
    sim = _sim(cat, wl)
    pol = NeuScalePolicy()
    pol.reset(sim)
    cid = sim.candidates("decode", 2048)[0]
    sim.provision(ScalingDecision({("decode", 2048): {cid: 1}}))
    pol.targets = {("decode", 2048): {cid: 1}}
    q = np.zeros((2, NB))
    b = int(np.searchsorted(sim.edges, 2048))
    q[1, b] = 5.5 * sim.configs[cid].max_batch
    ctx = _obs(sim, peak_queue=q, at_epoch_boundary=False)
    dec = pol.decide(ctx)
    assert dec.targets[("decode", 2048)][cid] == 1 + math.ceil(4.5) > 2  # more than x2 in one step
    # no queue: no change between epochs
    pol.targets = {("decode", 2048): {cid: 1}}
    assert pol.decide(_obs(sim, at_epoch_boundary=False)).targets == {}


def test_failover_and_eviction_under_quota(cat: ConfigCatalog, wl) -> None:
    sim0 = _sim(cat, wl)
    best = sim0.candidates("prefill", 2048)[0]
    v = sim0.configs[best].version
    sim = _sim(cat, wl, quota_chips={v: 0})
    pol = NeuScalePolicy(coalescing=False)
    pol.reset(sim)
    b = int(np.searchsorted(sim.edges, 2048))
    peak = np.zeros((2, NB))
    peak[0, b] = 1.0
    tpr = np.zeros((2, NB))
    tpr[0, b] = 2000.0
    dec = pol.decide(_obs(sim, epoch_peak=peak, rate_peak=peak, tokens_per_req=tpr))
    tgt = dec.targets[("prefill", 2048)]
    assert tgt and all(sim.configs[c].version != v for c in tgt)  # failed over to another version
    # eviction: quota fits only one vPod; the group with the lower R_peak gets none
    chips = sim0.configs[best].chips
    sim2 = _sim(cat, wl, quota_chips={"NPU-A": 0, "NPU-B": 0, "NPU-C": 0, "NPU-D": 0, v: chips})
    pol2 = NeuScalePolicy(coalescing=False)
    pol2.reset(sim2)
    b2 = int(np.searchsorted(sim2.edges, 1024))
    peak[0, b2] = 0.1
    tpr[0, b2] = 900.0
    dec = pol2.decide(_obs(sim2, epoch_peak=peak, rate_peak=peak, tokens_per_req=tpr))
    used = sum(sim2.configs[c].chips * n for t in dec.targets.values() for c, n in t.items())
    assert used <= chips
    assert dec.targets.get(("prefill", 1024), {}) == {}
    assert sum(dec.targets[("prefill", 2048)].values()) == 1


def test_base_is_homogeneous_and_ideal_bounds_efficiency(cat: ConfigCatalog, wl) -> None:
    sim = _sim(cat, wl)
    s_base = run_policy(sim, BasePolicy(), hours=0.25)
    cfgs = {(k[0], c) for h in [sim.observe()] for k, t in h.counts.items() for c in t}
    assert len({c for ph, c in cfgs if ph == "prefill"}) == 1
    assert len({c for ph, c in cfgs if ph == "decode"}) == 1
    assert len(sim.observe().counts) == 2
    ideal = ideal_metrics(sim, hours=0.25)
    assert ideal["oracle"] == 1.0 and ideal["slo_satisfaction"] == 1.0
    assert ideal["energy_efficiency"] > s_base["energy_efficiency"]
    assert ideal["cost_efficiency"] > s_base["cost_efficiency"]


def test_compare_errors() -> None:
    with pytest.raises(ConfigError, match="policy"):
        compare(MODEL, "azure", 0.25, ("base", "magic"))
    with pytest.raises(ConfigError, match="trace"):
        compare(MODEL, "netflix", 0.25, ("base",))
    with pytest.raises(ConfigError, match="hours"):
        compare(MODEL, "azure", 0.01, ("base",))


def test_compare_cli_json(capsys, tmp_path) -> None:
    from servegym.cli import main

    rc = main(["npu", "compare", "--model", MODEL, "--hours", "0.25", "--rate-rpm", "300", "--json",
               "--policies", "base,neuscale,ideal", "--plot-dir", str(tmp_path)])
    assert rc == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["base", "neuscale", "ideal"]
    for r in rows:
        for k in ("energy_efficiency", "cost_efficiency", "slo_satisfaction"):
            assert k in r and r[k] >= 0
        assert 0.0 <= r["slo_satisfaction"] <= 1.0
    assert rows[2]["oracle"] is True and rows[0]["oracle"] is False
    assert (tmp_path / "vpods_over_time.png").stat().st_size > 0
    assert (tmp_path / "energy_vs_slo.png").stat().st_size > 0
    assert main(["npu", "compare", "--policies", "base,foo", "--hours", "0.25"]) != 0
