"""The pd stress track ``stress-delay`` (``track`` config key, :mod:`servegym.envs.pd.tracks`): the fields it sets,
its days, its persistence forecast, its errors, and the causal reference it is measured with
(:class:`servegym.baselines.pd.MinPowerExpectedForecast`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from servegym.agents.adapters import _pd_policy
from servegym.baselines.pd import MinPowerExpectedForecast, expected_rates, run_policy
from servegym.envs.pd import tracks
from servegym.envs.pd.env import PDProvisionEnv
from servegym.envs.pd.env_config import PDEnvConfig
from servegym.envs.pd.sim.scenario import persistence_forecast

from servegym import splits
from servegym.errors import ConfigError

SHORT = {"scenario": {"horizon_steps": 90}}


def _env(split: str | None, track: str | None = "stress-delay", **cfg: object) -> PDProvisionEnv:
    return PDProvisionEnv({**SHORT, **cfg, "split": split, "track": track})


def test_track_is_documented_with_its_reason() -> None:
    assert splits.tracks_of("pd") == ("stress-delay", "stress-long-delay") == tuple(tracks.TRACK_FIELDS)
    doc = " ".join(tracks.__doc__.split())
    for name, (desc, why) in splits.FAMILY_TRACKS["pd"].items():
        assert f"``{name}``: {' '.join(desc.split())}. Why: {' '.join(why.split())}" in doc


def test_track_sets_its_fields_on_the_splits_own_days() -> None:
    """The config carries the track's values (so the baselines and the oracle read them); the scenario draw is the
    base split's (same grid day, start hour, 2024 day), at twice the peak and the full band; idempotent."""
    for split in ("train", "validation", "test"):
        env, plain = _env(split), _env(split, None)
        c = env.config
        assert (c.startup_delay_s, c.gpu_budget, c.scenario.peak_rate_rps, c.scenario.burstiness) == (300.0, 12, 28.0, 1.0)
        assert replace(c) == c and PDEnvConfig.from_dict({**SHORT, "split": split, "track": "stress-delay",
                                                          "gpu_budget": 12}) == c
        _, info = env.reset(seed=5)
        _, base = plain.reset(seed=5)
        rec, b = info["scenario"], base["scenario"]
        for key in ("ci_day", "start_hour", "pattern_day", "rate_scale"):
            assert rec[key] == b[key]
        assert rec["peak_rate_rps"] == pytest.approx(2.0 * b["peak_rate_rps"])
        assert (rec["track"], rec["forecast"], rec["burstiness"]) == ("stress-delay", "persistence", 1.0)
        assert (b["track"], b["forecast"]) == (None, "exact")
    days = {s: {_env(s).reset(seed=k)[1]["scenario"]["pattern_day"] for k in range(6)} for s in ("train", "validation", "test")}
    assert not days["test"] & (days["train"] | days["validation"]) and not days["train"] & days["validation"]


def test_long_delay_track_is_stress_delay_at_600_s() -> None:
    env, short = _env("test", "stress-long-delay"), _env("test")
    assert replace(env.config, startup_delay_s=300.0, track="stress-delay") == short.config
    assert env.params.lookahead == 11  # the oracle's exact state holds up to 11 periods of lead
    _, info = env.reset(seed=1)
    assert info["scenario"]["forecast"] == "persistence" and info["scenario"]["track"] == "stress-long-delay"


def test_track_forecast_is_persistence_and_deterministic() -> None:
    env = _env("validation")
    _, info = env.reset(seed=2)
    base, rates = env.signals.base_rate_rps, env.state.rates
    for _ in range(12):
        k = env.step_index
        fc = env.forecast_rates(env.params.lookahead)
        assert env.params.lookahead == 6  # 300-s start-up: the coming period and the 5 before an instance serves
        np.testing.assert_allclose(fc, persistence_forecast(base, rates, k, k + fc.size))
        assert info["forecast_max_rps"] == pytest.approx(fc.max())
        _, _, _, _, info = env.step(np.array([info["reference_p"], info["reference_d"]]))
    a = run_policy(_env("validation"), MinPowerExpectedForecast(0.85), seed=3)
    b = run_policy(_env("validation"), MinPowerExpectedForecast(0.85), seed=3)
    assert (a.energy_kwh, a.slo_violation_pct, a.reward) == (b.energy_kwh, b.slo_violation_pct, b.reward)


def test_track_errors_are_one_line_config_errors() -> None:
    cases = [({"split": "shift-burst", "track": "stress-delay"}, r"track = 'stress-delay' with split = 'shift-burst'"),
             ({"track": "stress-load"}, r"track = 'stress-load' is not allowed; allowed: None, stress-delay, stress-long-delay"),
             ({"track": "stress-delay", "startup_delay_s": 120}, r"startup_delay_s = 120 is set by track"),
             ({"track": "stress-delay", "gpu_budget": 8}, r"gpu_budget = 8 is set by track"),
             ({"track": "stress-delay", "scenario": {"burstiness": 0.5}}, r"scenario.burstiness = 0.5 is set by track")]
    for cfg, msg in cases:
        with pytest.raises(ConfigError, match=msg) as e:
            PDProvisionEnv({**SHORT, **cfg})
        assert "\n" not in str(e.value)


def test_expected_rates_are_the_mean_of_the_per_minute_draws() -> None:
    """The causal reference's forecast is the conditional expectation of the period rates (the draws are i.i.d.
    uniform): the mean over many episodes' realized rates of the same day converges to it, and the smooth rate
    is it at burstiness 0 (at 1 it is the band's midpoint, near the smooth median where the band is symmetric)."""
    env = _env(None, None, scenario={"horizon_steps": 90, "burstiness": 1.0})
    draws = []
    for s in range(300):
        env.reset(seed=s)
        draws.append(env.state.rates.copy())
    exp = expected_rates(env)
    np.testing.assert_allclose(np.mean(draws, axis=0), exp, rtol=0.02)
    flat = _env(None, None, scenario={"horizon_steps": 90, "burstiness": 0.0})
    flat.reset(seed=0)
    np.testing.assert_allclose(expected_rates(flat), flat.signals.base_rate_rps)


def test_tuned_rule_names_parse() -> None:
    assert _pd_policy("threshold-hpa:0.8").target == 0.8 and _pd_policy("threshold-hpa:0.8").name == "threshold-hpa:0.8"
    assert _pd_policy("threshold-hpa").name == "threshold-hpa"
    assert _pd_policy("min-power+expected:0.9").name == "min-power+expected:0.9"


def test_stress_render_keeps_the_sections_of_tracks_not_measured_here(tmp_path, monkeypatch) -> None:
    """benchmarks/stress_tracks.py rewrites its block from the stored cells; a track without a stored cell keeps its
    shipped section (a checkout that measured pd alone must not drop the geo sections)."""
    import json
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(bench))
    sys.modules.pop("stress_tracks", None)
    import stress_tracks as st

    cell = {"track": "pd/stress-delay", "env_id": "servegym/PDProvision-v0", "name": "stress-delay", "episodes": 2,
            "cpu_s": 1.0, "env_kwargs": {}, "kpi": "energy_kwh", "strongest": "a", "causal_reference": "c",
            "strongest_kpi": 10.0, "strongest_slo_pct": 0.0, "strongest_return": -10.0,
            "validation_rules": [], "validation_causal": [],
            "rows": [{"policy": p, "role": r, "kpi_diff": -1.0, "kpi_diff_ci": [-1.1, -0.9], "kpi_diff_pct": -10.0,
                      "slo_diff_pp": 0.0, "slo_diff_ci": [0.0, 0.0], "slo_tolerance_pp": 0.01, "return_diff": 1.0,
                      "return_diff_ci": [0.9, 1.1], "outcome": "beats"} for p, r in (("o", "oracle"),
                                                                                       ("c", "causal reference"))]}
    state = tmp_path / "state"
    state.mkdir()
    (state / "pd__stress-delay.json").write_text(json.dumps(cell))
    out = tmp_path / "headroom.md"
    geo = "### servegym/GeoRoute-v0, track `stress-load` (30 validation + 30 test episodes, 1 CPU-s)\n\ngeo body\n"
    out.write_text(f"# Headroom\n\nintro\n\n{st.STRESS_BEGIN}\nold intro\n\n{geo}\n{st.STRESS_END}\n\nrest\n")
    st.render(out, state)
    text = out.read_text()
    assert "geo body" in text and "### servegym/PDProvision-v0, track `stress-delay`" in text and "rest" in text
    assert text.index("geo body") < text.index("track `stress-delay`") < text.index(st.STRESS_END)
    st.render(out, state)
    assert out.read_text() == text  # idempotent
