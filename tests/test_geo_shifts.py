"""The geo shifts of the schedulers' signals: ``shift-osl`` (the paper's OSL predictor instead of the mean) and
``shift-ci-forecast`` (snapshots carry a day-ahead persistence forecast of the grid CI; carbon is charged at the
realized CI)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from servegym.baselines.geo import make_policy
from servegym.baselines.geo.oracle import oracle_config
from servegym.envs.geo.sim.cluster import GeoSimulation
from servegym.envs.geo.sim.config import preset

import servegym  # noqa: F401  (registers the ids)
from servegym.errors import ConfigError

MINI = {"preset": "mini", "geo": {"duration_s": 4.0}}


def test_shifts_set_the_schedulers_signals_and_refuse_a_conflicting_key() -> None:
    osl = gym.make("servegym/GeoRoute-v0", config={**MINI, "split": "shift-osl"}).unwrapped
    ci = gym.make("servegym/GeoRoute-v0", config={**MINI, "split": "shift-ci-forecast"}).unwrapped
    assert osl.geo_config.osl_mode == "predicted" and osl.geo_config.ci_signal == "realized"
    assert ci.geo_config.ci_signal == "day-ahead" and ci.geo_config.osl_mode == "mean"
    assert oracle_config(ci.geo_config).ci_signal == "realized"  # the oracle knows the realized grid
    for split, key, value in (("shift-osl", "osl_mode", "oracle"), ("shift-ci-forecast", "ci_signal", "realized")):
        with pytest.raises(ConfigError, match=f"geo.{key} = '{value}' is set by split = '{split}'"):
            gym.make("servegym/GeoRoute-v0", config={"preset": "mini", "split": split, "geo": {key: value}})
    with pytest.raises(ConfigError, match="ci_signal = 'day-ahead' needs ci_mode = 'hourly'"):
        preset("mini", ci_signal="day-ahead", ci_mode="fixed")


def test_day_ahead_snapshots_report_yesterday_and_carbon_stays_realized() -> None:
    """Round robin ignores the snapshots, so a day-ahead run places every request as the realized run does:
    the carbon charged is identical, while every snapshot reported the series 24 h earlier."""
    env = gym.make("servegym/GeoRoute-v0", config={**MINI, "split": "shift-ci-forecast"}).unwrapped
    env.reset(seed=3)
    cfg, seed = env.episode_config, env.scenario["sim_seed"]
    fc = env.make_simulation(cfg, seed)
    real = env.make_simulation(cfg.replace(ci_signal="realized"), seed)
    clock = env._clock
    np.testing.assert_array_equal(fc.snapshot.ci_g_per_kwh, clock.day_ahead_at(0.0))
    np.testing.assert_array_equal(real.snapshot.ci_g_per_kwh, clock.ci_at(0.0))
    assert not np.array_equal(clock.day_ahead_at(0.0), clock.ci_at(0.0))
    fc.run(make_policy("rr"))
    real.run(make_policy("rr"))
    assert fc.carbon_g == pytest.approx(real.carbon_g, rel=1e-12)
    # without an env clock the simulator reads its topology's series a day earlier itself
    base = preset("mini", ci_mode="hourly", ci_start="2024-03-02T05:00Z", duration_s=2.0)
    own = GeoSimulation(base.replace(ci_signal="day-ahead"), seed=0)
    np.testing.assert_array_equal(own.snapshot.ci_g_per_kwh,
                                  GeoSimulation(base.replace(ci_start="2024-03-01T05:00Z"), seed=0).snapshot.ci_g_per_kwh)
    with pytest.raises(ConfigError, match="needs ci_seen_at"):
        GeoSimulation(base.replace(ci_signal="day-ahead"), seed=0, ci_at=clock.ci_at)
