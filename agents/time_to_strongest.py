"""Time to the strongest baseline, read from stored training runs (no retraining).

A suite training run evaluates its policy every ``eval_freq`` environment steps on the same validation
episodes (its ``validation`` history: ``timesteps``, ``mean_reward``, ``normalized_score`` and, in runs made
since this module, ``cpu_s``). The score there is the checkpoint scale, ``100 (R - R_naive) / G`` with G the
pooled paper - naive gap of those episodes, linear in the mean return. The strongest baseline's score on the
same scale and episodes is 100 where the strongest is the paper's method; otherwise it comes from the run's
``validation_baselines`` (runs made since this module play it) or, for older runs, from
``benchmarks/time_to_strongest.py``, which replays it. The time to the strongest of one training seed is
its first evaluation whose score is at least the strongest's; a seed that never reaches it within its budget
is "never". Over seeds: the median of the seeds that reached it, and how many did.

CPU-s: the evaluation's recorded ``cpu_s`` (process CPU from the start of the run, warm start and the
baselines' validation episodes included) where the run has it; otherwise an estimate from a
:class:`CpuModel` measured by rerunning the same entry's first evaluations (labelled ``estimated``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: The file of ``benchmarks/time_to_strongest.py`` (in the leaderboard's folder): per env id, the stored
#: run's entry, the strongest's validation score on its validation episodes and the measured CPU model.
RESULT_FILE = "time_to_strongest.json"
#: The leaderboard's column header, and the sentence that explains it.
MD_HEADER = "to strongest (validation)"
LEADERBOARD_NOTE = ("To strongest (validation): the environment steps and CPU-s until a seed's validation score first "
                    "reached the strongest baseline's on the same validation episodes, median over the seeds that "
                    "reached it, and how many did (\"never\": none within the budget); \"est.\": CPU-s estimated "
                    "from a timing rerun of the entry's first evaluations, since the stored run has no CPU record "
                    "(benchmarks/time_to_strongest.py).")
#: Relative tolerance of "reaches": a clone of the strongest that plays it exactly can differ from the
#: strongest's score by float rounding only.
REACH_REL_TOL = 1e-9


@dataclass(frozen=True)
class CpuModel:
    """Measured (environment steps, CPU-s) at the evaluations of a timing run of one suite entry; CPU-s
    at other steps by linear interpolation, beyond the last point by the last segment's slope."""

    steps: tuple[float, ...]
    cpu_s: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.steps or len(self.steps) != len(self.cpu_s) or list(self.steps) != sorted(self.steps):
            raise ValueError("CpuModel: steps (ascending) and cpu_s must be non-empty and of one length")

    def at(self, steps: float) -> float:
        """Estimated CPU-s from the run's start to the end of the evaluation at ``steps``."""
        x, y = np.asarray(self.steps, dtype=float), np.asarray(self.cpu_s, dtype=float)
        if len(x) == 1 or steps <= x[-1]:
            return float(np.interp(steps, x, y))
        slope = (y[-1] - y[-2]) / (x[-1] - x[-2]) if x[-1] > x[-2] else 0.0
        return float(y[-1] + slope * (steps - x[-1]))


@dataclass(frozen=True)
class SeedReach:
    """One training seed: the first evaluation at or above the strongest's validation return (steps,
    CPU-s and where the CPU-s comes from: ``recorded`` | ``estimated`` | ``unknown``), or never."""

    seed: int
    reached: bool
    steps: float | None
    cpu_s: float | None
    cpu_source: str
    budget_steps: float
    best_margin: float  # best evaluation's validation score minus the strongest's (>= 0 where reached)

    def as_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "reached": self.reached, "steps": self.steps, "cpu_s": self.cpu_s,
                "cpu_source": self.cpu_source, "budget_steps": self.budget_steps, "best_margin": self.best_margin}


def reaches(value: float, target: float) -> bool:
    """``value >= target`` up to :data:`REACH_REL_TOL` of their magnitude."""
    return value >= target - REACH_REL_TOL * max(abs(value), abs(target), 1.0)


def seed_reach(seed: int, history: Sequence[Mapping[str, Any]], target: float,
               cpu_model: CpuModel | None = None) -> SeedReach:
    """The time to ``target`` (the strongest's validation score) of one seed's evaluation history."""
    # a history entry without a score (None: the validation scale was undefined, e.g. the paper's method below the
    # naive baseline on those episodes) cannot reach anything
    rows = sorted((h for h in history if h.get("normalized_score") is not None
                   and math.isfinite(float(h["normalized_score"]))), key=lambda h: float(h["timesteps"]))
    if not rows:
        return SeedReach(seed, False, None, None, "unknown", math.nan, math.nan)
    budget = float(rows[-1]["timesteps"])
    margin = max(float(h["normalized_score"]) for h in rows) - target
    for h in rows:
        if reaches(float(h["normalized_score"]), target):
            steps = float(h["timesteps"])
            cpu = h.get("cpu_s")
            if isinstance(cpu, (int, float)) and math.isfinite(cpu):
                return SeedReach(seed, True, steps, float(cpu), "recorded", budget, margin)
            if cpu_model is not None:
                return SeedReach(seed, True, steps, cpu_model.at(steps), "estimated", budget, margin)
            return SeedReach(seed, True, steps, None, "unknown", budget, margin)
    return SeedReach(seed, False, None, None, "-", budget, margin)


@dataclass(frozen=True)
class TimeToStrongest:
    """Every seed's :class:`SeedReach` against one target; medians over the seeds that reached it."""

    strongest: str
    target_score: float
    seeds: tuple[SeedReach, ...]

    @property
    def reached(self) -> list[SeedReach]:
        return [s for s in self.seeds if s.reached]

    @property
    def steps_median(self) -> float:
        r = self.reached
        return float(np.median([s.steps for s in r])) if r else math.nan

    @property
    def cpu_s_median(self) -> float:
        r = [s.cpu_s for s in self.reached if s.cpu_s is not None]
        return float(np.median(r)) if r and len(r) == len(self.reached) else math.nan

    @property
    def cpu_source(self) -> str:
        """``recorded`` or ``estimated`` when every reaching seed's CPU-s is; else ``mixed`` / ``unknown``."""
        kinds = {s.cpu_source for s in self.reached}
        return kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "-")

    def text(self) -> str:
        """The leaderboard cell: ``10,240 steps, 21 CPU-s est. (5/5 seeds)`` or ``never (0/5 seeds)``."""
        n, k = len(self.seeds), len(self.reached)
        if not k:
            return f"never ({k}/{n} seeds)"
        cpu = self.cpu_s_median
        cpu_txt = "CPU-s n/a" if not math.isfinite(cpu) else (
            f"{cpu:,.0f} CPU-s" + (" est." if self.cpu_source == "estimated" else ""))
        return f"{self.steps_median:,.0f} steps, {cpu_txt} ({k}/{n} seeds)"

    def as_dict(self) -> dict[str, Any]:
        def f(v: float) -> float | None:
            return v if math.isfinite(v) else None

        return {"strongest": self.strongest, "target_score": self.target_score,
                "steps_median": f(self.steps_median), "cpu_s_median": f(self.cpu_s_median),
                "cpu_source": self.cpu_source, "seeds_reached": len(self.reached), "seeds": len(self.seeds),
                "text": self.text(), "per_seed": [s.as_dict() for s in self.seeds]}


def strongest_validation_score(train_outputs: Sequence[Mapping[str, Any]], roles: Mapping[str, str]
                               ) -> float | None:
    """The strongest's score on the runs' validation scale (naive and paper ordered on those episodes, as the
    runs' checkpoint scale is: :func:`servegym.agents.protocol.checkpoint_scale`) from the runs'
    ``validation_baselines`` (every seed plays the references on the same episodes; the first run that has all
    three); where the runs predate them, 100 if the strongest is the paper's method, else None. ``roles``: naive,
    paper and strongest names."""
    from servegym.agents.protocol import checkpoint_scale, reference_gap

    for o in train_outputs:
        got = o.get("validation_baselines") or {}
        if all(got.get(roles[k]) for k in ("naive", "paper", "strongest")):
            by = {k: {int(r["seed"]): float(r["reward"]) for r in got[roles[k]]} for k in ("naive", "paper", "strongest")}
            seeds = sorted(by["strongest"])
            # the runs' own scale: naive and paper ordered on these episodes (protocol.checkpoint_scale)
            scale = checkpoint_scale({"naive": "naive", "best": "paper"},
                                     {k: [by[k][s] for s in seeds] for k in ("naive", "paper")})
            if roles["strongest"] == roles["paper"] and scale["best"] == "paper":
                return 100.0
            by["naive"], by["paper"] = by[scale["naive"]], by[scale["best"]]
            gap = reference_gap([by["naive"][s] for s in seeds], [by["paper"][s] for s in seeds])
            mean = float(np.mean([by["strongest"][s] - by["naive"][s] for s in seeds]))
            return 100.0 * mean / gap if math.isfinite(gap) else None
    return 100.0 if roles["strongest"] == roles["paper"] else None


def time_to_strongest(train_outputs: Sequence[Mapping[str, Any]], roles: Mapping[str, str],
                      target: float | None = None, cpu_model: CpuModel | None = None) -> TimeToStrongest | None:
    """The time to the strongest of one env id's training runs (``kind == "train"`` outputs); ``target``
    (the strongest's validation score) where the runs do not carry it. None without a target."""
    stored = strongest_validation_score(train_outputs, roles)
    goal = stored if stored is not None else target
    if goal is None or not math.isfinite(goal):
        return None
    seeds = tuple(seed_reach(int(o["seed"]), o.get("validation") or [], goal, cpu_model)
                  for o in sorted(train_outputs, key=lambda o: int(o["seed"])))
    return TimeToStrongest(roles["strongest"], float(goal), seeds)


@dataclass(frozen=True)
class Reference:
    """What an id's stored runs may lack: the strongest's validation score and a CPU model."""

    target: float | None = None
    cpu_model: CpuModel | None = None


def _same_entry(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return json.dumps(dict(a), sort_keys=True, default=list) == json.dumps(dict(b), sort_keys=True, default=list)


def stored_references(path: Path, entries: Sequence[Any]) -> dict[str, Reference]:
    """The :class:`Reference` of each of ``entries`` (suite entries) that ``path`` (:data:`RESULT_FILE`) holds
    for the same entry; an id measured for another entry (kwargs, budget) is left out. {} without the file."""
    if not path.is_file():
        return {}
    ids = json.loads(path.read_text()).get("ids", {})
    out = {}
    for e in entries:
        d = ids.get(getattr(e, "section", e.env_id))  # keyed by section: an id on a stress track is its own entry
        if not isinstance(d, dict) or not _same_entry(d.get("entry", {}), e.__dict__):
            continue
        cm = d.get("cpu_model")
        model = CpuModel(tuple(cm["steps"]), tuple(cm["cpu_s"])) if cm else None
        target = d.get("target_score")
        out[getattr(e, "section", e.env_id)] = Reference(float(target) if target is not None else None, model)
    return out


def csv_fields(reach: TimeToStrongest | None) -> dict[str, Any]:
    """The leaderboard's columns of one row (empty for a non-agent row or a run without a target)."""
    if reach is None:
        return {"time_to_strongest": "", "tts_steps_median": math.nan, "tts_cpu_s_median": math.nan,
                "tts_cpu_source": "", "tts_seeds_reached": math.nan, "tts_seeds": math.nan}
    return {"time_to_strongest": reach.text(), "tts_steps_median": reach.steps_median,
            "tts_cpu_s_median": reach.cpu_s_median, "tts_cpu_source": reach.cpu_source,
            "tts_seeds_reached": len(reach.reached), "tts_seeds": len(reach.seeds)}
