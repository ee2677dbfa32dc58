"""Progress lines of the long commands: a start line, a measured estimate, timestamped lines in a log."""

from __future__ import annotations

import re

import pytest

from servegym import progress


def test_progress_in_a_log_prints_start_estimate_and_done(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    clock = iter([0.0, 0.5, 6.0, 17.0, 17.5, 30.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    with progress.Progress(4, "sweep", "cell", what="grid x: 2 policies", estimate_s=120.0, basis="measured") as bar:
        for _ in bar.iterate(range(4)):
            pass
    lines = capsys.readouterr().err.splitlines()
    assert all(re.match(r"\[\d\d:\d\d:\d\d\] sweep: ", ln) for ln in lines), lines
    assert "grid x: 2 policies; 4 cells; estimated 2.0 min (measured)" in lines[0]
    assert "2/4 cells in 6 s: about 6 s left" in lines[1]
    assert "3/4 cells, 17 s elapsed, about 6 s left" in lines[2]
    assert lines[-1].endswith("4/4 cells done in 30 s")


def test_train_estimate_and_durations() -> None:
    est, basis = progress.train_estimate("servegym/PDProvision-v0", 51_600)
    assert est == pytest.approx(100.0) and "quick leaderboard suite" in basis
    assert progress.train_estimate("CartPole-v1", 100)[0] is None
    assert [progress.duration(s) for s in (45, 190, 7200, float("nan"))] == ["45 s", "3.2 min", "2.0 h", "unknown"]
