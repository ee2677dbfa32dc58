"""The benchmark protocol's statistics (:mod:`servegym.agents.protocol` states them): IQM and mean with
stratified-bootstrap CIs, probability of improvement, performance profiles, headroom and the share of the gap
closed, the KPI means and the record one policy's benchmark prints."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from servegym.agents.families import EpisodeResult, Family, family_for
from servegym.agents.verdict import (
    BOOTSTRAP_REPS,
    CONFIDENCE,
    _json_float,
    crossed_ci,
    crossed_iqm_ci,
    value_table,
)


# --------------------------------------------------------------------------------------- statistics
def _iqm(x: np.ndarray) -> float:
    from rliable import metrics

    return float(metrics.aggregate_iqm(np.asarray(x, dtype=np.float64).reshape(-1, 1)))


def _mean(x: np.ndarray) -> float:
    return float(np.mean(x))


def _iqm_along(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """rliable's IQM (``scipy.stats.trim_mean`` cutting 25 % per side) along ``axis``, for the
    vectorized bootstrap (tests check it equals :func:`rliable.metrics.aggregate_iqm`)."""
    from scipy import stats

    return stats.trim_mean(x, proportiontocut=0.25, axis=axis)


def _mean_along(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x, axis=axis)


def _poi_along(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """P(X > Y) + P(X = Y) / 2 over all pairs (rliable's Mann-Whitney form for one task), vectorized."""
    x = np.moveaxis(np.asarray(x), axis, -1)[..., :, None]
    y = np.moveaxis(np.asarray(y), axis, -1)[..., None, :]
    return ((x > y) + 0.5 * (x == y)).mean(axis=(-2, -1))


def _bootstrap_ci(samples: Sequence[np.ndarray], statistic: Any, seed: int = 0) -> tuple[float, float]:
    """Percentile CI of the vectorized ``statistic(*samples, axis=-1)``, resampling each sample
    independently (a stratified bootstrap: one stratum per sample)."""
    from scipy import stats

    xs = tuple(np.asarray(s, dtype=np.float64) for s in samples)
    if any(x.size == 0 for x in xs):
        return (math.nan, math.nan)
    if all(x.size < 2 or np.all(x == x[0]) for x in xs):  # nothing to resample: the point estimate
        v = float(statistic(*xs, axis=-1))
        return (v, v)
    res = stats.bootstrap(xs, statistic, n_resamples=BOOTSTRAP_REPS, confidence_level=CONFIDENCE,
                          method="percentile", vectorized=True, batch=500, rng=np.random.default_rng(seed))
    return (float(res.confidence_interval.low), float(res.confidence_interval.high))


@dataclass(frozen=True)
class ScoreStats:
    """The normalized-score statistics of one policy on one env id (:mod:`servegym.agents.protocol`)."""

    n: int
    undefined: int
    mean: float
    mean_ci: tuple[float, float]
    iqm: float
    iqm_ci: tuple[float, float]


def score_stats(scores: Sequence[float], seed: int = 0, results: Sequence[EpisodeResult] | None = None
                ) -> ScoreStats:
    """IQM and mean with 95 % bootstrap CIs of one policy's scores (NaN scores left out).

    With ``results`` (the runs the scores belong to, in order) and more than one training seed among them,
    the runs are not independent: the CIs come from the crossed bootstrap over training seeds and test
    episodes (:mod:`servegym.agents.verdict`) on the seeds x episodes table of scores (episodes every seed
    played with a finite score); the point estimates stay those of all finite runs."""
    x = np.asarray(scores, dtype=np.float64)
    ok = x[np.isfinite(x)]
    if ok.size == 0:
        return ScoreStats(0, int(x.size), math.nan, (math.nan, math.nan), math.nan, (math.nan, math.nan))
    table = _unit_table(results, x) if results is not None else None
    if table is not None:
        mean_ci, iqm_ci = crossed_ci(table, seed), crossed_iqm_ci(table, seed)
    else:
        mean_ci, iqm_ci = _bootstrap_ci([ok], _mean_along, seed), _bootstrap_ci([ok], _iqm_along, seed)
    return ScoreStats(n=int(ok.size), undefined=int(x.size - ok.size), mean=_mean(ok), mean_ci=mean_ci,
                      iqm=_iqm(ok), iqm_ci=iqm_ci)


def _unit_table(results: Sequence[EpisodeResult], scores: np.ndarray) -> np.ndarray | None:
    """The (training seeds, episodes) table of ``scores`` (None with one seed or no complete episode)."""
    if len(results) != len(scores):
        raise ValueError(f"score_stats: {len(scores)} scores for {len(results)} runs")
    scored = [replace(r, reward=float(v)) for r, v in zip(results, scores, strict=True)]
    t = value_table(scored, "reward")
    if len(t) < 2:
        return None
    eps = sorted(set.intersection(*(set(v) for v in t.values())))
    if not eps:
        return None
    return np.array([[t[u][e] for e in eps] for u in sorted(t)], dtype=np.float64)


def probability_of_improvement(x: Sequence[float], y: Sequence[float], seed: int = 0
                               ) -> tuple[float, tuple[float, float]]:
    """P(a run of X scores above a run of Y) (rliable's Mann-Whitney form, ties count 1/2) and its
    bootstrap CI, X and Y resampled independently."""
    from rliable import metrics

    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size == 0 or b.size == 0:
        return math.nan, (math.nan, math.nan)

    point = float(metrics.probability_of_improvement(a.reshape(-1, 1), b.reshape(-1, 1)))
    return point, _bootstrap_ci([a, b], _poi_along, seed)


def performance_profile(scores: Sequence[float], taus: np.ndarray, seed: int = 0
                        ) -> tuple[np.ndarray, np.ndarray]:
    """Fraction of runs with score > tau at each tau, and its (2, len(taus)) bootstrap CI."""
    x = np.asarray(scores, dtype=np.float64)
    x = x[np.isfinite(x)]
    taus = np.asarray(taus, dtype=np.float64)
    prof = (x[:, None] > taus[None, :]).mean(axis=0) if x.size else np.full(taus.size, np.nan)
    if x.size < 2:
        return prof, np.vstack([prof, prof])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(BOOTSTRAP_REPS, x.size))
    boot = (x[idx][:, :, None] > taus[None, None, :]).mean(axis=1)
    lo, hi = np.percentile(boot, [50 * (1 - CONFIDENCE), 100 - 50 * (1 - CONFIDENCE)], axis=0)
    return prof, np.vstack([lo, hi])


def plot_performance_profiles(scores: Mapping[str, Sequence[float]], path: str | Path, title: str) -> Path:
    """rliable's performance-profile plot of every policy's scores (tau from -50 to 150)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rliable import plot_utils

    taus = np.linspace(-50.0, 150.0, 81)
    profiles, cis = {}, {}
    for name, s in scores.items():
        profiles[name], cis[name] = performance_profile(s, taus)
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    plot_utils.plot_performance_profiles(profiles, taus, performance_profile_cis=cis, ax=ax,
                                         xlabel=r"normalized score $\tau$ (0 = naive, 100 = best)",
                                         ylabel=r"fraction of episodes with score $> \tau$")
    ax.set_title(title, fontsize=10)
    ax.legend(loc="lower left", fontsize=8, frameon=False)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    from servegym.outputs import save_figure

    save_figure(fig, out, dpi=110)
    plt.close(fig)
    return out


# -------------------------------------------------------------------------------------------- beats
def mean_metric(results: Sequence[EpisodeResult], key: str) -> float:
    vals = [r.metrics[key] for r in results if key in r.metrics and math.isfinite(r.metrics[key])]
    return float(np.mean(vals)) if vals else math.nan


def _paired_ci(samples: Sequence[np.ndarray], statistic: Any, seed: int = 0) -> tuple[float, float]:
    """Percentile CI of ``statistic(*samples, axis=-1)`` resampling the aligned samples together (paired)."""
    from scipy import stats

    xs = tuple(np.asarray(x, dtype=np.float64) for x in samples)
    if xs[0].size == 0:
        return (math.nan, math.nan)
    point = float(statistic(*xs, axis=-1))
    if xs[0].size < 2 or all(np.all(x == x[0]) for x in xs):  # nothing to resample: the point estimate
        return (point, point)
    res = stats.bootstrap(xs, statistic, paired=True, n_resamples=BOOTSTRAP_REPS, confidence_level=CONFIDENCE,
                          method="percentile", vectorized=True, batch=500, rng=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else (point, point)


# ---------------------------------------------------------------------------------- headroom and gap
def _gap_closed_along(a: np.ndarray, s: np.ndarray, axis: int = -1) -> np.ndarray:
    ma, ms = np.mean(a, axis=axis), np.mean(s, axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (ma - ms) / (100.0 - ms)


def headroom(strongest_scores: Mapping[int, float] | Sequence[float], seed: int = 0
             ) -> tuple[float, tuple[float, float]]:
    """Oracle minus the strongest baseline on the oracle scale: mean of 100 - S_strongest over the
    episodes and its bootstrap CI (NaN where the scale has no oracle)."""
    vals = strongest_scores.values() if isinstance(strongest_scores, Mapping) else strongest_scores
    x = np.asarray([v for v in vals if math.isfinite(v)], dtype=np.float64)
    if x.size == 0:
        return math.nan, (math.nan, math.nan)
    h = 100.0 - x
    return float(np.mean(h)), _paired_ci([h], _mean_along, seed)


def gap_closed(policy_scores: Mapping[int, float], strongest_scores: Mapping[int, float], seed: int = 0
               ) -> tuple[float, tuple[float, float]]:
    """Share of the gap between the strongest baseline and the oracle that a policy closes,
    (S - S_strongest) / (100 - S_strongest) of the mean scores on the scenarios both played (per-scenario
    scores: an agent's averaged over its training seeds), with a paired bootstrap CI over scenarios."""
    seeds = sorted(s for s in set(policy_scores) & set(strongest_scores)
                   if math.isfinite(policy_scores[s]) and math.isfinite(strongest_scores[s]))
    if not seeds:
        return math.nan, (math.nan, math.nan)
    a = np.array([policy_scores[s] for s in seeds])
    b = np.array([strongest_scores[s] for s in seeds])
    point = float(_gap_closed_along(a, b))
    if not math.isfinite(point):
        return math.nan, (math.nan, math.nan)
    return point, _paired_ci([a, b], _gap_closed_along, seed)


def seed_scores(results: Sequence[EpisodeResult], scores: Sequence[float]) -> dict[int, float]:
    """Reset seed -> mean score of that scenario's runs (NaN runs left out)."""
    acc: dict[int, list[float]] = {}
    for r, v in zip(results, scores, strict=True):
        if math.isfinite(v):
            acc.setdefault(r.seed, []).append(float(v))
    return {s: float(np.mean(v)) for s, v in acc.items()}


# ------------------------------------------------------------------------------------------ records
def kpi_means(results: Sequence[EpisodeResult], family: Family) -> dict[str, float]:
    """Mean of every domain KPI of the family over the episodes (keys as the family's metrics)."""
    out = {}
    for key in family.metric_keys():
        v = mean_metric(results, key)
        if math.isfinite(v):
            out[key] = v
    return out


def benchmark_record(env_id: str, policy: str, split: str | None, results: Sequence[EpisodeResult],
                     scores: Sequence[float]) -> dict[str, Any]:
    """The machine-readable result of one policy on one env id: exactly ``env``,
    ``policy``, ``split``, ``episodes``, ``score_mean``, ``score_iqm``, ``score_ci`` (the IQM's 95 % CI,
    [low, high]) and ``kpis`` (the domain KPIs' means)."""
    st = score_stats(scores, results=results)
    return {"env": env_id, "policy": policy, "split": split, "episodes": len(results),
            "score_mean": _json_float(st.mean), "score_iqm": _json_float(st.iqm),
            "score_ci": [_json_float(st.iqm_ci[0]), _json_float(st.iqm_ci[1])],
            "kpis": {k: _json_float(v) for k, v in kpi_means(results, family_for(env_id)).items()}}
