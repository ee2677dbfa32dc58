"""Provisioning baselines on servegym/PDProvision-v0 and ``servegym pd compare``."""

from __future__ import annotations

import json

import numpy as np
import pytest
from servegym.baselines.pd import (
    MinPowerPareto,
    Policy,
    StaticPeak,
    ThresholdAutoscaler,
    compare_policies,
    default_policies,
    plot_deployments,
    run_policy,
)
from servegym.envs.pd.env import PDProvisionEnv
from servegym.envs.pd.sim.pareto import min_power_deployment

from servegym.errors import ConfigError


@pytest.fixture(scope="module")
def day_results() -> dict[str, object]:
    env = PDProvisionEnv({"split": None})  # the default day (both 2024 traces' Monday 13 May, the three-trace mix)
    # the paper's rule without the cap rule: static peak ignores the cap too, so energy and SLO compare like for like
    return {p.name: run_policy(env, p, seed=0) for p in (MinPowerPareto(lookahead=1, respect_cap=False), StaticPeak())}


def test_policies_satisfy_protocol() -> None:
    for p in default_policies():
        assert isinstance(p, Policy)
    assert [p.name for p in default_policies()] == ["min-power", "min-power+lookahead", "static-peak",
                                                    "threshold-hpa"]


def test_min_power_saves_energy_with_comparable_slo(day_results: dict) -> None:
    """Default day: the paper's rule (one-step lookahead) uses clearly less energy than static peak
    provisioning while its SLO violations stay within 3 percentage points (measured: 98.4 vs 125.8 kWh,
    1.3 % vs 0.04 %)."""
    mp, sp = day_results["min-power+lookahead"], day_results["static-peak"]
    assert mp.steps == sp.steps == 1440
    assert mp.energy_kwh < 0.9 * sp.energy_kwh
    assert mp.slo_violation_pct < sp.slo_violation_pct + 3.0
    assert mp.backlog_end < 50


def test_static_peak_is_static_and_covers_the_day(day_results: dict) -> None:
    sp = day_results["static-peak"]
    assert np.all(sp.series["n_p"] == sp.series["n_p"][0]) and np.all(sp.series["n_d"] == sp.series["n_d"][0])
    env = PDProvisionEnv()
    _, info = env.reset(seed=0)
    pol = StaticPeak()
    pol.reset(env, info)
    n_p, n_d = pol.deployment
    rates = env.forecast_rates(1440)
    mu = env.tables.mu[env.signals.mix_index, n_p, n_d]
    assert np.all(mu >= rates / 0.85 - 1e-9)


def test_min_power_matches_pareto_selection() -> None:
    env = PDProvisionEnv({"scenario": {"horizon_steps": 5}})
    obs, info = env.reset(seed=0)
    pol = MinPowerPareto(lookahead=0, drain_s=None, respect_cap=False)
    pol.reset(env, info)
    a = pol.act(obs, info)
    mix = info["mix_index"]
    grid = env.tables.grid(mix, env.config.gpu_budget)
    sel = min_power_deployment(grid, info["rate_rps"], 0.85, power_at="rate", model=env.tables.models[mix])
    assert (int(a[0]), int(a[1])) == (sel.n_p, sel.n_d)
    assert grid.mu[sel.index] >= info["rate_rps"] / 0.85


def test_min_power_respects_the_cap() -> None:
    # no split: the event at local hour 0 must cover the first periods
    env = PDProvisionEnv({"scenario": {"horizon_steps": 30, "dr_events": [(0.0, 1.0, 2_500.0)]}, "split": None})
    res = run_policy(env, MinPowerPareto(lookahead=1), seed=0)
    free = run_policy(env, MinPowerPareto(lookahead=1, respect_cap=False), seed=0)
    assert res.cap_excess_kwh < free.cap_excess_kwh


def test_threshold_autoscaler_follows_utilization() -> None:
    env = PDProvisionEnv({"scenario": {"horizon_steps": 5}})
    obs, info = env.reset(seed=0)
    pol = ThresholdAutoscaler(target=0.5, tolerance=0.0, scale_down_window_s=0.0)
    pol.reset(env, info)
    info = {**info, "target_p": 4, "target_d": 2, "prefill_util": 1.0, "decode_util": 0.25}
    a = pol.act(obs, info)
    assert (int(a[0]), int(a[1])) == (8, 1)
    with pytest.raises(ConfigError, match="target"):
        ThresholdAutoscaler(target=1.5)
    with pytest.raises(ConfigError, match="lookahead"):
        MinPowerPareto(lookahead=3)


def test_compare_is_deterministic_and_plots(tmp_path) -> None:
    a = [r.summary() for r in compare_policies(seed=4, max_steps=30)]
    b = compare_policies(seed=4, max_steps=30)
    assert a == [r.summary() for r in b]
    out = tmp_path / "deploy.png"
    plot_deployments(b, str(out))
    assert out.stat().st_size > 10_000


def test_compare_cli_json_keys(capsys) -> None:
    from servegym.cli import main

    assert main(["pd", "compare", "--steps", "15", "--seed", "1", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["min-power", "min-power+lookahead", "static-peak", "threshold-hpa"]
    for r in rows:
        assert {"policy", "energy_kwh", "carbon_g", "slo_violation_pct", "cap_excess_kwh"} <= set(r)
        assert r["energy_kwh"] > 0 and r["carbon_g"] > 0 and 0 <= r["slo_violation_pct"] <= 100
    assert main(["pd", "compare", "--steps", "0"]) != 0


@pytest.mark.slow
def test_fluid_and_request_modes_agree_on_energy_and_ranking() -> None:
    """Fluid vs request-level dynamics over the first 3 h of the configured day (split=None: a train-split
    draw can be a day with no SLO pressure, where both policies tie at zero violations). Measured: energy
    within 2 %, same SLO ranking; the fluid estimate of SLO violations is about half the simulated one for the reactive policies)."""
    out = {}
    for mode in ("fluid", "request"):
        env = PDProvisionEnv({"mode": mode, "split": None, "scenario": {"horizon_steps": 180}})
        out[mode] = {p.name: run_policy(env, p, seed=0) for p in (MinPowerPareto(lookahead=1), StaticPeak())}
    for name in out["fluid"]:
        assert out["request"][name].energy_kwh == pytest.approx(out["fluid"][name].energy_kwh, rel=0.05)
    for mode in out:
        assert out[mode]["static-peak"].slo_violation_pct < out[mode]["min-power+lookahead"].slo_violation_pct
        assert out[mode]["static-peak"].energy_kwh > out[mode]["min-power+lookahead"].energy_kwh
