"""Scheduling delay of the window schedulers: modelled solve time (default) or measured.

The paper charges each window the solver's real wall time (§V-C, Fig. 6a). Real time makes a
run depend on the machine and its load, so by default we charge a deterministic cost per solve,
fitted from solve times measured by ``benchmarks/geo_solver_speed.py`` on windows recorded from
runs of the paper and small presets (the solving thread's CPU time, which other jobs sharing the
cores do not inflate; least absolute deviations, so that the rare windows that need branching do
not set the typical cost) and stored with their provenance in ``solve_time.json`` next to this
module:

    t_solve(n, D) = a + b · n · D        (s; n requests in the window, D DCs)

one ``(a, b)`` per model kind (``"lp"``: the assignment ILP solved as an LP; ``"milp"``: the facility
MILP in its strong formulation, warm start included). The iterative ILP pays one ``"lp"`` cost
per solve it makes.

``timing="measured"`` charges the measured wall time of the policy's own ``decide`` work instead
(estimation on projected snapshots, model build, solve, fallback); results then depend on the
machine, and the policy's name carries ``@measured``.

Queueing. Each regional scheduler solves its windows one after another: a window closing at
``t`` starts solving at ``max(t, free_s)``, where ``free_s`` is when the scheduler's previous
solve finished, and its requests leave at ``start + t_solve``. Their scheduling delay is that
finish time minus ``t`` (this is how the iterative ILP's repeated solves "saturate the solver").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from servegym.errors import ConfigError

TIMING_MODES = ("modelled", "measured")
SOLVE_TIME_FILE = Path(__file__).with_name("solve_time.json")


@dataclass(frozen=True)
class LinearSolveTime:
    """``t = a_s + b_s_per_cell · n · D`` seconds."""

    a_s: float
    b_s_per_cell: float

    def __call__(self, n: int, d: int) -> float:
        return max(0.0, self.a_s + self.b_s_per_cell * n * d)


@lru_cache(maxsize=4)
def load_solve_time_models(path: str | None = None) -> dict[str, LinearSolveTime]:
    """The fitted models by kind (``"lp"``, ``"milp"``) from ``solve_time.json`` (or ``path``)."""
    p = Path(path) if path is not None else SOLVE_TIME_FILE
    try:
        data: dict[str, Any] = json.loads(p.read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"solve-time model file {p} is missing; run benchmarks/geo_solver_speed.py") from exc
    return {k: LinearSolveTime(float(v["a_s"]), float(v["b_s_per_cell"])) for k, v in data["models"].items()}


def check_timing(timing: str) -> str:
    if timing not in TIMING_MODES:
        raise ConfigError(f"timing = {timing!r} is not allowed; allowed: {', '.join(map(str, TIMING_MODES))}")
    return timing


class SolverQueue:
    """Per-scheduler solver availability (s) and the delay it implies for a window."""

    def __init__(self, n_schedulers: int) -> None:
        self.free_s = np.zeros(n_schedulers, dtype=np.float64)

    def delay(self, scheduler: int, close_s: float, busy_s: float) -> float:
        """Delay (s) of a window of ``scheduler`` closing at ``close_s`` that keeps the solver
        busy ``busy_s``; books the solver."""
        start = max(close_s, float(self.free_s[scheduler]))
        finish = start + max(0.0, busy_s)
        self.free_s[scheduler] = finish
        return finish - close_s
