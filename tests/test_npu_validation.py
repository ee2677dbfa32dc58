"""Cheap held-out checks against the NeuScale paper's secondary results (the full ones are in
``benchmarks/npu_validation.py``) and the Fig. 26 group limit."""

from __future__ import annotations

import pytest
from servegym.baselines.npu import BasePolicy, NeuScalePolicy, run_policy
from servegym.calibration.npu import PAPER_SPREADS, spread_verdict, version_spreads
from servegym.envs.npu.sim.cluster import ClusterConfig, ConfigCatalog, NPUCluster
from servegym.envs.npu.sim.workloads import make_workload

from servegym.errors import ConfigError


def test_prefill_energy_spread_across_versions_overlaps_section_2_4() -> None:
    """§2.4: the best NPU version is 3.5-7.9x more energy-efficient than the worst for prefill (held out)."""
    rows = version_spreads(models=("Llama-3-70B", "Llama-3.1-405B"), lengths=(4096,))
    rows = [r for r in rows if r["objective"] == "energy"]
    v = {(x["objective"], x["phase"]): x for x in spread_verdict(rows)}
    lo, hi = PAPER_SPREADS[("energy", "prefill")]
    ours = v[("energy", "prefill")]["ours"]
    assert ours[0] <= hi and ours[1] >= lo
    for r in rows:
        assert r["spread"] > 1.5
        if r["phase"] == "prefill":
            assert r["best"] == "NPU-D"  # compute-bound: best TFLOP/J


def test_max_groups_limits_neuscale_groups() -> None:
    with pytest.raises(ConfigError, match="max_groups"):
        NeuScalePolicy(max_groups=0)
    cfg = ClusterConfig(model="Llama-3-8B", n_candidates=1)
    cat = ConfigCatalog(cfg)
    wl = make_workload("lveval", hours=1.0, seed=0)
    counts = {}
    for k in (1, 2, None):
        sim = NPUCluster(cfg, wl, seed=0, catalog=cat)
        pol = NeuScalePolicy(max_groups=k)
        run_policy(sim, pol)
        ctx = sim.observe()
        sig = pol.rule.signal(ctx)
        # the grouping at the end of the replay (groups that lost their traffic may still be shrinking)
        counts[k] = max(len(pol.groups(ctx, p, sig)) for p in (0, 1))
    assert counts[1] == 1 and counts[2] == 2 and counts[None] > 2


def test_energy_gain_follows_cost_gain_through_the_static_share() -> None:
    """The structural identity: energy gain - 1 ~= f (cost gain - 1), f = NeuScale's static share of energy,
    when dynamic energy per token hardly depends on the configuration (one 2-h replay pair)."""
    cfg = ClusterConfig(model="Llama-3-70B", n_candidates=1)
    cat = ConfigCatalog(cfg)
    wl = make_workload("azure", hours=2.0, seed=0, start_hour=8)
    sims = {}
    out = {}
    for name, pol in (("base", BasePolicy()), ("neuscale", NeuScalePolicy())):
        sims[name] = NPUCluster(cfg, wl, seed=0, catalog=cat)
        out[name] = run_policy(sims[name], pol)
    ph = "prefill"
    ge = out["neuscale"][f"energy_efficiency_{ph}"] / out["base"][f"energy_efficiency_{ph}"]
    gc = out["neuscale"][f"cost_efficiency_{ph}"] / out["base"][f"cost_efficiency_{ph}"]
    f = sims["neuscale"].decomposition()["totals"][ph]["static_share"]
    assert 0.0 < f < 1.0
    assert 1.0 + f * (gc - 1.0) == pytest.approx(ge, rel=0.1)
