"""Per-family adapter table: which env ids belong to a family, which ``info`` keys are its domain
scalars, and how each of the family's baselines plays one episode of the same env.

This module imports neither torch nor stable-baselines3: the CLI, the sweep workers and the
baselines use it without a learning stack. A family's baseline runner gets a freshly made env
(same id and kwargs as the agent's) and a seed, and returns an :class:`EpisodeResult` whose
``metrics`` use the same keys as the agent's final ``info``, so agent and baselines are measured
by the same simulator on the same work (DESIGN principle 2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from servegym.errors import ConfigError, ServegymError


@dataclass(frozen=True)
class MetricSpec:
    """One domain scalar read from the final ``info`` of an episode.

    Fields:
        key: the name used in tables and TensorBoard tags (units in the name: ``_g``, ``_s``, ``_w``).
        info_keys: the ``info`` keys tried in order (the first present, finite one is used).
        lower_is_better: direction of improvement (used in reports and plots).
        label: a short human label with the unit.
        agg: how the episode value is formed from the per-step infos: ``"last"`` (the env reports a
            running episode metric), ``"sum"`` (a per-step quantity, e.g. the period's energy),
            ``"mean"`` (per-step average, e.g. power) or ``"wmean"`` (average weighted by
            ``weight_key``, e.g. a period's violation share weighted by its arrivals).
        weight_key: the ``info`` key of the weight for ``"wmean"``.
        scale: multiplies the aggregated value (e.g. 100 for a share reported as a percentage).
    """

    key: str
    info_keys: tuple[str, ...]
    lower_is_better: bool = True
    label: str = ""
    agg: str = "last"
    weight_key: str | None = None
    scale: float = 1.0


@dataclass(frozen=True)
class EpisodeResult:
    """One episode of one policy: ``reward`` is the undiscounted return, ``metrics`` the domain scalars,
    ``train_seed`` the training seed of the agent that played it (-1: a baseline, or not recorded)."""

    policy: str
    seed: int
    reward: float
    length: int
    metrics: dict[str, float] = field(default_factory=dict)
    train_seed: int = -1

    def row(self) -> dict[str, Any]:
        return {"policy": self.policy, "seed": self.seed, "reward": self.reward, "length": self.length,
                **self.metrics}


# A baseline runner plays one episode of ``env`` (already made, not reset) with the named baseline.
BaselineRunner = Callable[[gym.Env, str, int], EpisodeResult]


@dataclass(frozen=True)
class Family:
    """The agents layer's view of one environment family.

    Fields:
        name: family name (``geo``, ``pd``, ``npu``).
        env_ids: the registered ids of the family.
        metrics: its domain scalars, in display order.
        baselines: names of the baselines compared by default (``--baselines all``).
        run_baseline: plays one episode of a named baseline (``None``: the family has none yet).
        reference: the baseline savings are measured against (``saving_vs_<reference>_pct``),
            e.g. ``"rr"`` for geo; ``None`` for no saving column.
        saving_metric: the metric whose relative saving vs ``reference`` is reported.
        recommended_algo: per env id, the algorithm the learnability benchmark trains.
        causal_references: names of reference rules that know what no policy knows a little ahead (a
            perfect forecast of the next periods): accepted wherever a baseline name is, never in the
            default lists and never a candidate for the strongest baseline.
        track_baselines: names of rules that read what only a stress track's observation has (the pd tracks'
            day-level estimate): accepted wherever a baseline name is and candidates for a track's strongest,
            never in the default lists (they refuse the base splits' envs).
    """

    name: str
    env_ids: tuple[str, ...]
    metrics: tuple[MetricSpec, ...]
    baselines: tuple[str, ...] = ()
    run_baseline: BaselineRunner | None = None
    reference: str | None = None
    saving_metric: str | None = None
    recommended_algo: Mapping[str, str] = field(default_factory=dict)
    causal_references: tuple[str, ...] = ()
    track_baselines: tuple[str, ...] = ()

    def metric_keys(self) -> tuple[str, ...]:
        return tuple(m.key for m in self.metrics)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, np.ndarray) and value.size == 1:
        return _finite(value.item())
    return None


# Nested dicts searched before the top level: an env's end-of-run summary (``episode_metrics``,
# the figures its baselines report) wins over the running values of the last step.
NESTED_POOLS = ("episode_metrics", "metrics")


def _lookup(info: Mapping[str, Any], spec: MetricSpec) -> float | None:
    for pool in (*(info.get(k) for k in NESTED_POOLS), info):
        if isinstance(pool, Mapping):
            for k in spec.info_keys:
                v = _finite(pool.get(k))
                if v is not None:
                    return v
    return None


class EpisodeAccumulator:
    """Forms the episode's domain scalars from the infos of its steps (see :attr:`MetricSpec.agg`).

    Specs whose keys never appear are left out of :meth:`result`, so one spec list serves env
    variants that report different subsets.
    """

    def __init__(self, metrics: Sequence[MetricSpec]) -> None:
        self.metrics = tuple(metrics)
        self.only_last = all(m.agg == "last" for m in self.metrics)
        self.reset()

    def reset(self) -> None:
        self._num: dict[str, float] = {}
        self._den: dict[str, float] = {}

    def add(self, info: Mapping[str, Any]) -> None:
        for spec in self.metrics:
            v = _lookup(info, spec)
            if v is None:
                continue
            if spec.agg == "last":
                self._num[spec.key], self._den[spec.key] = v, 1.0
            elif spec.agg == "sum":
                self._num[spec.key] = self._num.get(spec.key, 0.0) + v
                self._den[spec.key] = 1.0
            elif spec.agg == "mean":
                self._num[spec.key] = self._num.get(spec.key, 0.0) + v
                self._den[spec.key] = self._den.get(spec.key, 0.0) + 1.0
            else:  # wmean
                w = _finite(info.get(spec.weight_key or "")) or 0.0
                self._num[spec.key] = self._num.get(spec.key, 0.0) + v * w
                self._den[spec.key] = self._den.get(spec.key, 0.0) + w

    def result(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for spec in self.metrics:
            if spec.key in self._num:
                den = self._den[spec.key]
                out[spec.key] = spec.scale * self._num[spec.key] / den if den > 0 else 0.0
        return out


def extract_metrics(infos: Sequence[Mapping[str, Any]], metrics: Sequence[MetricSpec]) -> dict[str, float]:
    """Domain scalars of an episode from its per-step infos (for ``"last"`` specs only the final one counts)."""
    acc = EpisodeAccumulator(metrics)
    for info in infos:
        acc.add(info)
    return acc.result()


def saving_pct(value: float, reference: float) -> float:
    """Relative saving of ``value`` against ``reference`` in percent (positive = lower than reference)."""
    if not math.isfinite(reference) or reference == 0.0:
        return float("nan")
    return 100.0 * (1.0 - value / reference)


_FAMILIES: dict[str, Family] = {}


def register_family(family: Family) -> None:
    """Add or replace a family in the table (the family modules below call this)."""
    _FAMILIES[family.name] = family


def families() -> dict[str, Family]:
    _load_family_adapters()
    return dict(_FAMILIES)


def family_for(env_id: str) -> Family:
    """The family of a registered servegym id; a generic one for any other Gymnasium id.

    The generic family reports no domain scalars and has no baselines: training and evaluation
    still work (reward only), which lets the layer run on any env.
    """
    _load_family_adapters()
    for fam in _FAMILIES.values():
        if env_id in fam.env_ids:
            return fam
    return Family(name="generic", env_ids=(env_id,), metrics=())


def resolve_baselines(family: Family, spec: str | None) -> list[str]:
    """``all`` (or ``None``) -> every default baseline; ``none`` -> []; else a comma list checked
    against the family's baselines."""
    if spec is None or spec == "all":
        return list(family.baselines) if family.run_baseline is not None else []
    if spec in ("", "none"):
        return []
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if family.run_baseline is None:
        raise ConfigError(f"--baselines = {spec!r}: family {family.name!r} has no baselines; allowed: none")
    unknown = [n for n in names if not family_accepts(family, n)]
    if unknown:
        raise ConfigError(f"--baselines = {','.join(unknown)!r} unknown for family {family.name!r}; "
                          f"allowed: all, none or a comma list of {', '.join(family.baselines)}")
    return names


def family_accepts(family: Family, name: str) -> bool:
    """A baseline name is accepted when listed, or when it parameterizes a listed one (``greedy:0.3``)."""
    head = name.split(":", 1)[0]
    known = (*family.baselines, *family.causal_references, *family.track_baselines)
    return name in known or any(b.split(":", 1)[0] == head for b in known)


_LOADED = False


def _load_family_adapters() -> None:
    """Import the family adapter modules once (they register themselves; cheap, no env import)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    from servegym.agents import adapters  # noqa: F401  (registers the families)


def run_baseline_episodes(family: Family, env: gym.Env, names: Sequence[str], seeds: Sequence[int],
                          strict: bool = True, progress: Any = None) -> dict[str, list[EpisodeResult]]:
    """Every named baseline on every seed. With ``strict=False`` (``--baselines all``) a baseline that
    cannot run here (a :class:`ServegymError`, e.g. a missing solver-time model) is skipped with a
    warning on stderr instead of failing the whole run."""
    import sys

    out: dict[str, list[EpisodeResult]] = {}
    if family.run_baseline is None:
        return out
    for name in names:
        try:
            res = []
            for s in seeds:
                res.append(family.run_baseline(env, name, s))
                if progress is not None:
                    progress.update(1)
        except ServegymError as exc:
            if strict:
                raise
            print(f"servegym: warning: baseline {name!r} skipped: {exc}", file=sys.stderr)
            continue
        out[name] = res
    return out
