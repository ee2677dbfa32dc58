"""The geo hindsight oracle: what it knows, that it is a real run of the scenario, and that every geo split
gives it a margin over the naive reference."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from servegym.agents.adapters import run_geo_baseline
from servegym.baselines.geo import make_policy
from servegym.baselines.geo.oracle import ORACLE_CANDIDATES, HindsightMILP, oracle_config
from servegym.envs.geo.sim.cluster import GeoSimulation
from servegym.envs.geo.sim.config import preset

import servegym  # noqa: F401  (registers the ids)
from servegym.errors import ActionError, ConfigError

#: The leaderboard's configs of the two geo ids (benchmarks/results/leaderboard.md), shortened for speed.
ROUTE = {"preset": "mini", "action_mode": "residual", "reference": "milp"}
WINDOW = {"preset": "mini", "action_mode": "residual", "geo": {"poll_interval_s": 5.0}}
#: Every named geo split and scenario variant the benchmark reports (test split unless named).
SPLITS = [("test", {}), ("shift-load", {}), ("shift-stale", {}), ("shift-topology", {}), ("test", {"load": "high"}),
          ("test", {"ci_time_scale": 120.0})]
#: The scenario variants of the test split (the splits themselves: tests/test_yardsticks.py, one short episode
#: of every split of both ids).
VARIANTS = [("test", {"load": "high"}), ("test", {"ci_time_scale": 120.0})]


def _env(env_id: str, base: dict, split: str, extra: dict, duration_s: float | None = None) -> gym.Env:
    cfg = {**base, **extra, "split": split}
    if duration_s is not None:
        cfg["geo"] = {**cfg.get("geo", {}), "duration_s": duration_s}
    return gym.make(env_id, config=cfg)


def test_hindsight_milp_needs_true_output_lengths() -> None:
    cfg = preset("mini", load="moderate", duration_s=2.0)
    with pytest.raises(ConfigError, match="true output lengths"):
        GeoSimulation(cfg, seed=0).run(HindsightMILP())
    res = GeoSimulation(oracle_config(cfg), seed=0).run(HindsightMILP())
    assert res.summary["arrived"] > 0


def test_oracle_config_is_what_it_knows() -> None:
    cfg = preset("mini", load="moderate", poll_interval_s=5.0, decision_mode="window")
    o = oracle_config(cfg)
    assert (o.osl_mode, o.poll_interval_s, o.decision_mode) == ("oracle", 0.5, "request")
    # same arrivals, fleet and grid
    assert (o.rate_rps, o.duration_s, o.topology, o.ci_start, o.seed) == (cfg.rate_rps, cfg.duration_s, cfg.topology,
                                                                          cfg.ci_start, cfg.seed)
    assert oracle_config(cfg.replace(poll_interval_s=0.25)).poll_interval_s == 0.25


def test_idle_until_charges_the_coarser_poll_grid() -> None:
    """A run polled every 0.5 s, kept idle to the 5-s grid, is charged the drain the 5-s run is charged
    (round robin ignores the snapshots, so both runs place every request alike)."""
    cfg = preset("mini", load="moderate", duration_s=3.0)
    fine = GeoSimulation(cfg.replace(poll_interval_s=0.5), seed=1)
    fine.run(make_policy("rr"))
    coarse = GeoSimulation(cfg.replace(poll_interval_s=5.0), seed=1)
    coarse.run(make_policy("rr"))
    assert fine.now_s < coarse.now_s
    fine.idle_until(coarse.now_s)
    assert fine.now_s == coarse.now_s
    assert fine.carbon_g == pytest.approx(coarse.carbon_g, rel=1e-9)
    with pytest.raises(ActionError, match="complete run"):
        GeoSimulation(cfg, seed=1).idle_until(10.0)


def test_specs() -> None:
    assert make_policy("hindsight-milp:1.5").cap_scale == 1.5
    assert make_policy("oracle").candidates == ORACLE_CANDIDATES
    assert make_policy("hindsight-milp:3:1").passes == 1
    assert make_policy("hindsight-milp:1:3:stall").stall
    for bad in ("hindsight-milp:0", "hindsight-milp:x", "hindsight-milp:101", "hindsight-milp:1:0", "hindsight-milp:1:2:3"):
        with pytest.raises(ConfigError, match="hindsight-milp"):
            make_policy(bad)


def test_oracle_is_the_best_candidate_and_deterministic() -> None:
    env = _env("servegym/GeoRoute-v0", ROUTE, "test", {}, duration_s=6.0)
    ora = run_geo_baseline(env, "oracle", 3)
    cands = {c: run_geo_baseline(env, c, 3).reward for c in ORACLE_CANDIDATES}
    assert ora.reward == pytest.approx(max(cands.values()), abs=1e-9)
    assert run_geo_baseline(env, "oracle", 3).reward == ora.reward


@pytest.mark.parametrize("env_id,base", [("servegym/GeoRoute-v0", ROUTE), ("servegym/GeoRouteWindow-v0", WINDOW)])
@pytest.mark.parametrize("split,extra", VARIANTS)
def test_oracle_beats_naive_on_every_variant(env_id: str, base: dict, split: str, extra: dict) -> None:
    """One short episode of each scenario variant: the oracle's return is above round robin's."""
    env = _env(env_id, base, split, extra, duration_s=8.0)
    assert run_geo_baseline(env, "oracle", 0).reward - run_geo_baseline(env, "rr", 0).reward > 0


@pytest.mark.slow
@pytest.mark.parametrize("env_id,base", [("servegym/GeoRoute-v0", ROUTE), ("servegym/GeoRouteWindow-v0", WINDOW)])
@pytest.mark.parametrize("split,extra", SPLITS)
def test_oracle_margin_over_naive_is_significant(env_id: str, base: dict, split: str, extra: dict) -> None:
    """Full-size episodes (6 seeds): the paired oracle - naive margin's 95 % bootstrap CI excludes 0."""
    env = _env(env_id, base, split, extra)
    diff = np.array([run_geo_baseline(env, "oracle", s).reward - run_geo_baseline(env, "rr", s).reward
                     for s in range(6)])
    rng = np.random.default_rng(0)
    boot = diff[rng.integers(0, diff.size, size=(2000, diff.size))].mean(axis=1)
    assert np.percentile(boot, 2.5) > 0
