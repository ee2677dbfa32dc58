"""The pd shifts drawn from the real days themselves: ``shift-burst`` (the plotted band's per-minute spread at
full amplitude) and ``shift-forecast`` (the same days seen through a persistence forecast)."""

from __future__ import annotations

import numpy as np
import pytest
from servegym.baselines.pd import MinPowerForecast, run_policy
from servegym.envs.pd.env import PDProvisionEnv
from servegym.envs.pd.sim.scenario import DayScenario, draw_scenario, persistence_forecast

from servegym.errors import ConfigError
from servegym.splits import scenario_rng

SHORT = {"scenario": {"horizon_steps": 120}}


def test_burst_shift_keeps_the_band_at_full_amplitude() -> None:
    """shift-burst plays the test days at burstiness 1: its per-minute rates over the smooth day spread over the
    whole band (the spread at 0.25 on test is a quarter of it, so its standard deviation is ~4x smaller)."""
    spread = {}
    for split, b in (("test", 0.25), ("shift-burst", 1.0), ("shift-forecast", 1.0)):
        day, rec = draw_scenario(DayScenario(), split, scenario_rng(split, 4))
        assert day.burstiness == b == rec["burstiness"]
        assert rec["day_label"] in ("Fri 2024-05-10", "Fri 2024-05-17")
        assert rec["forecast"] == ("persistence" if split == "shift-forecast" else "exact")
        env = PDProvisionEnv({"split": split, **SHORT})
        env.reset(seed=4)
        spread[split] = float(np.std(env.state.rates / env.signals.base_rate_rps))
    assert spread["shift-burst"] > 3.0 * spread["test"] > 0
    with pytest.raises(ConfigError, match=r"scenario.burstiness = 0.5 is set by split = 'shift-burst'"):
        PDProvisionEnv({"split": "shift-burst", "scenario": {"burstiness": 0.5}})


def test_forecast_shift_sees_a_persistence_forecast_of_the_realized_trace() -> None:
    """On shift-forecast every forecast a policy reads (info, observation, reference) is the smooth mean times
    the last completed period's realized / smooth ratio; the realized mean rates (and so the arrivals the oracle
    knows) keep their spread. On shift-burst the forecast is the realized mean itself."""
    exact = PDProvisionEnv({"split": "shift-burst", **SHORT})
    _, info = exact.reset(seed=2)
    for _ in range(30):
        assert info["forecast_rate_rps"] == pytest.approx(exact.state.rates[exact.step_index])
        _, _, _, _, info = exact.step(np.array([info["reference_p"], info["reference_d"]]))
    env = PDProvisionEnv({"split": "shift-forecast", **SHORT})
    _, info = env.reset(seed=2)
    base, rates = env.signals.base_rate_rps, env.state.rates
    errors = []
    for _ in range(60):
        k = env.step_index
        want = base[k] * rates[k - 1] / base[k - 1]  # k = 0: the day's last period (the day wraps)
        assert info["forecast_rate_rps"] == pytest.approx(want)
        fc = env.forecast_rates(env.params.lookahead)
        assert info["forecast_max_rps"] == pytest.approx(fc.max())
        np.testing.assert_allclose(fc, persistence_forecast(base, rates, k, k + fc.size))
        errors.append(env.state.rates[k] - want)
        _, _, _, _, info = env.step(np.array([info["reference_p"], info["reference_d"]]))
    assert np.std(errors) > 0.02 * np.mean(env.state.rates[:60])  # the forecast really errs
    again = PDProvisionEnv({"split": "shift-forecast", **SHORT})
    _, info2 = again.reset(seed=2)
    assert info2["forecast_rate_rps"] == env.reset(seed=2)[1]["forecast_rate_rps"]  # deterministic by seed


def test_forecast_error_costs_the_forecast_baseline() -> None:
    """The same forecast-aware rule does worse on a 2-h window when it sees the persistence forecast than with
    the exact one (a shift that changes nothing would be a knob that does not matter)."""
    runs = {}
    for split in ("shift-burst", "shift-forecast"):
        env = PDProvisionEnv({"split": split, **SHORT})
        runs[split] = run_policy(env, MinPowerForecast(0.97), seed=1)
    assert runs["shift-forecast"].slo_violation_pct > runs["shift-burst"].slo_violation_pct
