"""The NPU paper's Azure trace (2024 week): shipped series, replay statistics, days and splits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from servegym.envs.npu.sim import azure2024
from servegym.envs.npu.sim.workloads import make_workload

from servegym.errors import ConfigError


def test_week_mean_is_table4_rate() -> None:
    """Table 4's 1,667 req/min is the coding week's mean; the digitized series is within 1 % of it, and replaying
    the whole week at rate_rpm = 1,667 gives that mean."""
    assert azure2024.week_mean_rpm("coding") == pytest.approx(1667.0, rel=0.01)
    assert azure2024.week_mean_rpm("conversation") == pytest.approx(27_303_995 / 10_080, rel=0.01)
    t = azure2024.arrivals("coding", 0, 24.0 * 7, 1667.0, np.random.default_rng(1))
    assert t.size / (7 * 1440) == pytest.approx(1667.0, rel=0.01)


def test_weekdays_busier_than_weekend_and_splits_disjoint() -> None:
    rng = np.random.default_rng(0)
    for trace, days in azure2024.SPLIT_DAYS.items():
        flat = [d for v in days.values() for d in v]
        assert sorted(flat) == list(range(7))  # every day in exactly one split
        mean = {d: azure2024.arrivals(trace, d, 24.0, 1667.0, rng).size / 1440 for d in range(7)}
        assert max(mean[d] for d in days["weekend"]) < min(mean[d] for k in ("train", "validation", "test")
                                                            for d in days[k])
        for d in days["weekend"]:
            assert azure2024.day_label(trace, d)[:3] in ("Sat", "Sun")


def test_lengths_within_table4_bounds() -> None:
    i, o = azure2024.sample_lengths("coding", 100_000, np.random.default_rng(0))
    assert i.min() >= 1 and i.max() <= 7691 and o.min() >= 1 and o.max() <= 3500
    assert i.mean() == pytest.approx(2556, rel=0.05)  # Table 4's mean input (digitized: about 2,480)
    assert 10 < o.mean() < 30  # Table 4: 23; the CDF's first pixels span about 11 tokens


def test_replay_is_deterministic_and_not_bursty() -> None:
    a = make_workload("azure", hours=2.0, seed=3)
    b = make_workload("azure", hours=2.0, seed=3)
    assert np.array_equal(a.requests.arrival_s, b.requests.arrival_s)
    assert np.array_equal(a.requests.output_tokens, b.requests.output_tokens)
    assert "2024" in a.description and a.max_input_tokens == 7691
    # the 2024 minute series: 10-s peaks well under the tiled 2023 hour's (7.7-10.4x a 30-min mean)
    w = make_workload("azure", hours=1.0, seed=0, start_hour=12.0)
    c = np.bincount((w.requests.arrival_s // 10).astype(int))
    assert c.max() / c.mean() < 2.0
    old = make_workload("azure-2023", hours=1.0, seed=0, start_hour=12.0)
    c = np.bincount((old.requests.arrival_s // 10).astype(int))
    assert c.max() / c.mean() > 3.0


def test_segment_keeps_the_tiled_2023_hour() -> None:
    """A segment of the 2023 hour (the earlier splits' stand-in) stays the tiled scenario."""
    a = make_workload("azure", hours=0.5, seed=0, segment=(0.0, 0.6))
    assert "2023" in a.description
    with pytest.raises(ConfigError, match="day"):
        make_workload("azure", hours=0.5, seed=0, segment=(0.0, 0.6), day=1)
    with pytest.raises(ConfigError, match="day"):
        make_workload("azure", hours=0.5, day=9)
    lv = make_workload("lveval", hours=1.0, seed=0, day=1)
    assert "Sat 2024-05-11" in lv.description


def test_shipped_series_rebuild_identically(shared_data: Path, tmp_path: Path) -> None:
    from servegym.envs.data.build_azure2024 import OUT, build

    if not (shared_data / "azure_llm_2024").exists():
        pytest.skip("needs azure_llm_2024 in the raw data folder (only for rebuilding the shipped Azure 2024 "
                    "file); not needed to use servegym")
    for p in build(shared_data, tmp_path):
        assert p.read_bytes() == (OUT / p.name).read_bytes()


def test_within_day_wraps_to_the_same_day() -> None:
    """A replay that passes midnight reads the next day, unless within_day: then the same day's morning (the
    env's splits own their days); before midnight both are the same draw."""
    rng = lambda: np.random.default_rng(4)  # noqa: E731
    nxt = azure2024.arrivals("coding", 0, 4.0, 1667.0, rng(), start_hour=22.0)
    own = azure2024.arrivals("coding", 0, 4.0, 1667.0, rng(), start_hour=22.0, within_day=True)
    same = azure2024.arrivals("coding", 0, 2.0, 1667.0, rng(), start_hour=20.0, within_day=True)
    np.testing.assert_array_equal(same, azure2024.arrivals("coding", 0, 2.0, 1667.0, rng(), start_hour=20.0))
    # hours 2-4 of the replay: Saturday 00:00-02:00 (the weekend shift's day) vs Friday 00:00-02:00
    sat = azure2024.arrivals("coding", 1, 2.0, 1667.0, rng())
    fri = azure2024.arrivals("coding", 0, 2.0, 1667.0, rng())
    n_nxt, n_own = int((nxt >= 7200).sum()), int((own >= 7200).sum())
    assert abs(n_nxt - sat.size) < 0.1 * sat.size and abs(n_own - fri.size) < 0.1 * fri.size
    assert abs(n_nxt - n_own) > 0.1 * n_own  # Friday and Saturday nights differ (weekday vs weekend level)
