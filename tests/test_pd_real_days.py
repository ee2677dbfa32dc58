"""pd's days are real days of the 2024 Azure week: no split tiles a segment shorter than a day, the splits own
disjoint days, the weekend is a shift of its own, and the legacy 2023-hour tiling is a named fixed scenario."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from servegym.envs import azure_week
from servegym.envs.pd.env import PDProvisionEnv
from servegym.envs.pd.sim import day_shape
from servegym.envs.pd.sim.scenario import LEGACY_PATTERN, DayScenario, build_signals, draw_scenario

from servegym import splits
from servegym.errors import ConfigError

SPLITS = splits.splits_of("pd")


def _shortest_repeat(x: np.ndarray) -> int | None:
    """The smallest lag L < x.size at which x repeats itself on most periods (x[k + L] == x[k]), else None."""
    for lag in range(1, x.size):
        if np.mean(np.isclose(x[lag:], x[:-lag], rtol=1e-9, atol=0.0)) > 0.5:
            return lag
    return None


@pytest.mark.parametrize("split", SPLITS)
def test_no_split_tiles_a_segment_shorter_than_a_day(split: str) -> None:
    """Over a full day (1440 one-minute periods) the per-period fluctuation around the smooth rate never
    repeats at a lag under a day. (The tiled 2023 hour repeated every 12-34 periods: a policy with that much
    memory predicted every minute.)"""
    env = PDProvisionEnv({"split": split})
    for seed in (0, 1):
        env.reset(seed=seed)
        factor = env.state.rates / env.signals.base_rate_rps
        assert _shortest_repeat(factor) is None, (split, seed)
        assert env.day.pattern_trace != LEGACY_PATTERN


def test_the_legacy_tiling_is_named_fixed_and_still_tiles() -> None:
    """``legacy-azure-2023`` replays the former day (its 57-min pattern tiled), with split None only."""
    env = PDProvisionEnv({"split": None, "scenario": {"pattern_trace": LEGACY_PATTERN}})
    _, info = env.reset(seed=0)
    lag = _shortest_repeat(env.state.rates / env.signals.base_rate_rps)
    assert lag == env.signals.pattern.size < 60 and "phase" in info["scenario"]
    with pytest.raises(ConfigError, match=r"legacy-azure-2023.* split = None only"):
        PDProvisionEnv({"split": "train", "scenario": {"pattern_trace": LEGACY_PATTERN}})
    for split in SPLITS:
        for seed in range(5):
            assert draw_scenario(DayScenario(), split, splits.scenario_rng(split, seed))[0].pattern_trace in (
                "azure-code", "azure-conv")


def test_split_days_are_disjoint_and_the_weekend_is_its_own_shift() -> None:
    """40 draws per split: train, validation, test and the weekend read disjoint dates of the 2024 week; only
    shift-weekend reads a Saturday or Sunday, and every shift but it reads the test days."""
    dates: dict[str, set[str]] = {}
    for split in SPLITS:
        seen = set()
        for seed in range(40):
            day, rec = draw_scenario(DayScenario(), split, splits.scenario_rng(split, seed))
            (trace,) = day_shape.WEEK_TRACES[day.pattern_trace]
            weekend = pd.Timestamp(day.pattern_day).day_of_week >= 5
            assert weekend == (split == "shift-weekend"), (split, day.pattern_day)
            want = {"train": "train", "validation": "validation", "shift-weekend": "weekend"}.get(split, "test")
            assert azure_week.day_index(trace, day.pattern_day) in azure_week.SPLIT_DAYS[trace][want]
            assert rec["pattern_day"] == day.pattern_day and rec["day_label"][:3] in ("Mon", "Tue", "Wed", "Thu",
                                                                                      "Fri", "Sat", "Sun")
            seen.add(day.pattern_day)
        dates[split] = seen
    base = ("train", "validation", "test", "shift-weekend")
    for i, a in enumerate(base):
        for b in base[i + 1:]:
            assert not dates[a] & dates[b], (a, b)
    assert dates["test"] == {"2024-05-10", "2024-05-17"} and dates["shift-code"] == {"2024-05-10"}
    assert dates["shift-weekend"] == {"2024-05-11", "2024-05-12", "2024-05-18"}
    assert len(dates["train"]) == 3 and dates["validation"] == {"2024-05-16"}


def test_same_seed_and_split_same_rates() -> None:
    for split in ("train", "shift-burst", "shift-weekend"):
        a, b = PDProvisionEnv({"split": split}), PDProvisionEnv({"split": split})
        _, ia = a.reset(seed=11)
        _, ib = b.reset(seed=11)
        assert ia["scenario"] == ib["scenario"]
        np.testing.assert_array_equal(a.state.rates, b.state.rates)
        a.reset(seed=12)
        assert not np.array_equal(a.state.rates, b.state.rates)


def test_the_day_is_the_2024_series_scaled_to_the_peak_rate() -> None:
    """The smooth rate is the day's column medians over the week peak x peak_rate_rps, wrapping at midnight;
    period means integrate the per-minute rates exactly, whatever the period."""
    sc = DayScenario(pattern_trace="azure-conv", pattern_day="2024-05-14", start_hour=22.0, horizon_steps=240)
    sig = build_signals(sc)
    band = day_shape.day_band("azure-conv", "2024-05-14")
    assert band[0, 1].max() == pytest.approx(1.0)  # Tue 14 holds the conversation trace's week peak
    mid = band[0, 1] * sc.peak_rate_rps
    np.testing.assert_allclose(sig.base_rate_rps, np.concatenate([mid[22 * 60:], mid[:120]]))  # 22:00 -> 02:00
    day90 = build_signals(DayScenario(period_s=90.0, horizon_steps=960, mix_block_s=900.0))
    day60 = build_signals(DayScenario())
    assert day90.base_rate_rps.mean() == pytest.approx(day60.base_rate_rps.mean(), rel=1e-12)
    # the per-minute spread stays within the plotted band (burstiness 1, one-minute periods from a whole hour)
    env = PDProvisionEnv({"split": "shift-burst"})
    env.reset(seed=3)
    h = int(env.day.start_hour) * 60
    b = env.signals.band.sum(axis=0)
    idx = (h + np.arange(1440)) % 1440
    assert np.all(env.state.rates >= b[0, idx] - 1e-9) and np.all(env.state.rates <= b[2, idx] + 1e-9)


@pytest.mark.parametrize(("scenario", "match"), [
    ({"pattern_day": "2024-05-19"}, r"scenario.pattern_day = '2024-05-19' is not a day of pattern_trace 'azure'"),
    ({"pattern_trace": "azure-conv", "pattern_day": "2024-05-10"}, r"allowed: 2024-05-12, 2024-05-13"),
    ({"pattern_day": 13}, r"scenario.pattern_day = 13 \(int\) is not allowed"),
    ({"pattern_trace": "azure-2023"}, r"scenario.pattern_trace = 'azure-2023'"),
])
def test_pattern_config_errors_are_one_line(scenario: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        PDProvisionEnv({"split": None, "scenario": scenario})
    assert "\n" not in str(err.value)


def test_a_split_owns_the_pattern_day() -> None:
    with pytest.raises(ConfigError, match=r"scenario.pattern_day = '2024-05-14' is drawn by split = 'test'") as err:
        PDProvisionEnv({"split": "test", "scenario": {"pattern_day": "2024-05-14"}})
    assert "\n" not in str(err.value)


def test_the_legacy_day_replays_the_former_default_day() -> None:
    """Static peak on the legacy day (split None, seed 0) uses the energy measured on the former default day
    before the real days (benchmarks/results/pd_env_speed.md of 2026-12-03: 135.7 kWh, 0.05 % SLO violation)."""
    from servegym.baselines.pd import StaticPeak, run_policy

    env = PDProvisionEnv({"split": None, "scenario": {"pattern_trace": LEGACY_PATTERN}})
    res = run_policy(env, StaticPeak(), seed=0)
    assert res.energy_kwh == pytest.approx(135.7, abs=0.05) and res.slo_violation_pct == pytest.approx(0.05, abs=0.005)


def test_the_weekend_shift_is_scaled_to_the_test_day_peak() -> None:
    """shift-weekend replays a weekend day at its trace's test-day peak: its smooth maximum equals the test day's
    at the same peak-rate draw (x level_scale > 1), where its own level would fit the smallest deployment."""
    for seed in range(4):
        day, rec = draw_scenario(DayScenario(), "shift-weekend", splits.scenario_rng("shift-weekend", seed))
        (trace,) = day_shape.WEEK_TRACES[day.pattern_trace]
        test_date = azure_week.day_date(trace, azure_week.SPLIT_DAYS[trace]["test"][0])
        want = day_shape.day_peak(day.pattern_trace, test_date) * DayScenario().peak_rate_rps * rec["rate_scale"]
        assert day_shape.day_peak(day.pattern_trace, day.pattern_day) * day.peak_rate_rps == pytest.approx(want,
                                                                                                            rel=1e-6)
        assert rec["level_scale"] > 1.4
