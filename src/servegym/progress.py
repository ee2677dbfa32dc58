"""Progress of the long commands (train, evaluate, benchmark, sweep, dataset, the compare commands).

Every command that can take more than ~10 s uses :class:`Progress`: a line when it starts saying what it does,
how many units (episodes, cells, steps) and the estimated time; one line with the measured estimate once the
first units are done; then a tqdm bar on a terminal, or timestamped lines (at most one per
:data:`LOG_INTERVAL_S`) when stderr goes to a file, so a log shows progress as it happens. Every line goes to
stderr and is flushed at once; the results stay on stdout.

Standard library only at import time (tqdm is imported when a bar is drawn): ``--help`` imports this module.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO, TypeVar

T = TypeVar("T")

#: seconds between progress lines when stderr is not a terminal
LOG_INTERVAL_S = 10.0
#: the estimate from the measured pace is printed once this much time has passed (or a tenth of the units,
#: or one unit when units are coarse)
ESTIMATE_AFTER_S = 5.0

#: Training steps per second (PPO or MaskablePPO included) measured in the quick leaderboard suite
#: (``train_s`` and ``env_steps`` of benchmarks/results/suite_runs/quick/<id>.json, median over 5 seeds, one
#: process per seed on the 2-core dev machine with both cores busy). Those runs used the quick configs (geo mini
#: preset, npu 2-h episodes); other configs of an id run at a different pace, so the start line calls it a
#: rough estimate and the measured one follows after the first steps.
TRAIN_STEPS_PER_S: dict[str, float] = {
    "servegym/GeoRoute-v0": 1_494.0,
    "servegym/GeoRouteWindow-v0": 365.0,
    "servegym/PDProvision-v0": 516.0,
    "servegym/PDProvisionResidual-v0": 753.0,
    "servegym/PDProvisionFront-v0": 729.0,
    "servegym/NPUAutoscale-v0": 24.0,
    "servegym/NPUAutoscaleResidual-v0": 15.0,
}


def stamp() -> str:
    """The wall-clock time as ``HH:MM:SS`` (local time)."""
    return time.strftime("%H:%M:%S")


def duration(seconds: float) -> str:
    """``seconds`` for a person: ``45 s``, ``3.2 min``, ``1.5 h``."""
    if seconds != seconds or seconds < 0:  # NaN or negative: unknown
        return "unknown"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def say(message: str, file: TextIO | None = None) -> None:
    """One timestamped line on stderr (or ``file``), flushed at once."""
    out = sys.stderr if file is None else file
    print(f"[{stamp()}] {message}", file=out, flush=True)


#: Training steps per CPU-s of configs a newcomer runs first, keyed by (id, the ``--env-kwargs`` JSON with sorted
#: keys). The README's three-command example (GeoRoute-v0, mini preset, residual around the facility MILP): on a
#: fresh clone on 2026-12-05 it trained 20,480 steps in 107 CPU-s, about 20 of them the evaluations (their estimate),
#: so ~235 steps per CPU-s, 6x slower than the quick suite's GeoRoute-v0 config (its reference plans per window with
#: iter-ilp; milp solves a facility MILP).
TRAIN_STEPS_PER_S_CONFIG: dict[tuple[str, str], float] = {
    ("servegym/GeoRoute-v0", '{"config": {"action_mode": "residual", "preset": "mini", "reference": "milp"}}'): 235.0,
}


def train_estimate(env_id: str, timesteps: int, env_kwargs: dict[str, Any] | None = None) -> tuple[float | None, str]:
    """Estimated seconds to train ``timesteps`` steps on ``env_id`` (with ``env_kwargs``) and what it rests on."""
    import json

    key = (env_id, json.dumps(env_kwargs or {}, sort_keys=True))
    if key in TRAIN_STEPS_PER_S_CONFIG:
        rate = TRAIN_STEPS_PER_S_CONFIG[key]
        return timesteps / rate, (f"training steps only, at the {rate:,.0f} steps per CPU-s measured for this id and "
                                  "config on a fresh clone; a busy machine differs, evaluations add to it")
    rate = TRAIN_STEPS_PER_S.get(env_id)
    if rate is None:
        return None, "no measured rate for this id"
    return timesteps / rate, (f"training steps only, at the {rate:,.0f} steps/s measured for this id in the quick "
                              "leaderboard suite; other configs and a busy machine differ, evaluations add to it")


class Progress:
    """Progress over ``total`` units named ``unit``, as the module docstring describes.

    ``what`` is the start line's description; ``estimate_s`` (with ``basis``, what it rests on) the estimate
    known before any unit runs (None: the estimate comes from the first units). Use as a context manager or
    call :meth:`close`; :meth:`iterate` wraps an iterable.
    """

    def __init__(self, total: int, desc: str, unit: str, *, what: str = "", estimate_s: float | None = None,
                 basis: str = "", disable: bool = False, leave: bool = True) -> None:
        self.total, self.desc, self.unit, self.disable = max(int(total), 0), desc, unit, disable
        self.n = 0
        self.t0 = time.monotonic()
        self._last_line = self.t0
        self._estimated = False
        self._bar: Any = None
        if disable:
            return
        if estimate_s is not None:
            when = f"estimated {duration(estimate_s)}" + (f" ({basis})" if basis else "")
        else:
            when = f"estimate after the first {unit}s" if self.total > 1 else "one step"
        say(f"{desc}: {what + '; ' if what else ''}{self.total:,} {unit}{'s' if self.total != 1 else ''}; {when}")
        if sys.stderr.isatty():
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, desc=desc, unit=unit, leave=leave, dynamic_ncols=True, file=sys.stderr)

    def update(self, n: int = 1) -> None:
        """``n`` more units done."""
        self.n += n
        if self.disable:
            return
        if self._bar is not None:
            self._bar.update(n)
        now = time.monotonic()
        elapsed = now - self.t0
        if not self._estimated and 0 < self.n < self.total and (
                elapsed >= ESTIMATE_AFTER_S or (self.n * 10 >= self.total and elapsed >= 1.0)):
            self._estimated = True
            left = elapsed / self.n * (self.total - self.n)
            finish = time.strftime("%H:%M", time.localtime(time.time() + left))
            self.write(f"{self.desc}: {self.n:,}/{self.total:,} {self.unit}s in {duration(elapsed)}: about "
                       f"{duration(left)} left (done near {finish}, at the pace measured so far)")
            self._last_line = now
        elif self._bar is None and (now - self._last_line >= LOG_INTERVAL_S) and self.n < self.total:
            left = elapsed / self.n * (self.total - self.n) if self.n else float("nan")
            self.write(f"{self.desc}: {self.n:,}/{self.total:,} {self.unit}s, {duration(elapsed)} elapsed, "
                       f"about {duration(left)} left")
            self._last_line = now

    def restart_clock(self) -> None:
        """Measure the pace from now: work done before the first unit (``train``'s evaluator playing the baselines
        after the start line) would otherwise make the first measured estimate far too long."""
        self.t0 = self._last_line = time.monotonic()

    def write(self, message: str) -> None:
        """A timestamped line on stderr that does not break the bar."""
        if self._bar is not None:
            self._bar.write(f"[{stamp()}] {message}", file=sys.stderr)
            sys.stderr.flush()
        else:
            say(message)

    def close(self) -> None:
        if self.disable:
            return
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        word = "done" if self.n >= self.total else "stopped"
        say(f"{self.desc}: {self.n:,}/{self.total:,} {self.unit}s {word} in {duration(time.monotonic() - self.t0)}")
        self.disable = True

    def iterate(self, items: Iterable[T]) -> Iterator[T]:
        """Yield ``items``, counting one unit after each."""
        for item in items:
            yield item
            self.update()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["ESTIMATE_AFTER_S", "LOG_INTERVAL_S", "TRAIN_STEPS_PER_S", "TRAIN_STEPS_PER_S_CONFIG", "Progress", "duration", "say", "stamp",
           "train_estimate"]
