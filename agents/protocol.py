"""The benchmark protocol: reference policies, normalized scores, the "beats" rule and
rliable statistics, shared by ``servegym benchmark``, the training callback and the suite.

**Reference policies.** Every env id names a ``naive`` and a ``best`` policy among its family's
shipped baselines (:data:`REFERENCES`); ``naive`` and ``best`` are accepted wherever a policy name is,
next to every other baseline (:func:`policy_names`, :func:`resolve_policy`):

=========================================  ===================  ==============================================
env ids                                    ``naive``            ``best`` (the paper's strongest, own mode)
=========================================  ===================  ==============================================
GeoRoute-v0, GeoRouteWindow-v0             ``rr`` (round robin)  ``milp`` (the facility MILP of the geo paper)
PDProvision-v0 (+ Residual, Front)         ``static-peak``       ``min-power+lookahead`` (problem (1) + forecast)
NPUAutoscale-v0                            ``base``              ``neuscale`` (the NPU paper's method)
=========================================  ===================  ==============================================

**Normalized score** of an episode with return R: ``100 (R - R_naive) / G``, with R_naive the naive
reference's return on the *same* scenario (same split and reset seed) and G the mean reference gap
``mean(R_best - R_naive)`` over the evaluated scenarios (each test seed once). So the naive policy scores
0 on every episode and the paper's best 100 on average, by construction; every other policy's score is
paired with the naive reference episode by episode. Baselines that decide outside the env's loop (the geo
ILP/MILP windows while GeoRoute-v0 decides requests; NeuScale's 60-s loop) get R from their KPIs through
the env's return-equals-KPI identity, on exactly the scenario the env's ``reset(seed)`` draws
(``run_baseline`` of each family).

Why the gap is pooled and not per episode (the first formulation divided by ``R_best - R_naive`` of
the same episode): the references can tie or swap on single scenarios. On NPUAutoscale-v0's 2-h test
scenarios NeuScale's return is below Base's on 6 of 10 episodes (Base meets the SLO cheaply at low
load; NeuScale wins by a wide margin where Base collapses to 100 % violations), and on seed 0 the two
are within 0.03 % of the return. A per-episode denominator then turns a policy far worse than both
references into a large *positive* score (measured: +3,681 IQM for an absolute-mode agent that used
35x Base's energy). The pooled gap keeps the scale of the split. Where G is not positive by at least
:data:`REFERENCE_GAP_MIN` of the references' mean magnitude (``best`` does not beat ``naive`` on these
scenarios, e.g. pd's configured day with ``split=None``, where min-power+lookahead misses SLOs that
static peak meets), the score is undefined: NaN for every episode, counted in ``undefined``.

**Beats.** An agent beats a baseline when its mean KPI (geo: gCO2; pd: the objective's energy, carbon or
cost; npu: energy or cost) is lower *and* its mean SLO violation is no higher than the baseline's plus
:data:`SLO_TOLERANCE_PP` percentage points, on the same episodes. A high score bought with SLO
violations is therefore never a win.

**Statistics** (Agarwal et al., "Deep RL at the Edge of the Statistical Precipice", NeurIPS 2021, with
its ``rliable`` library): IQM and mean of the normalized scores with 95 % stratified-bootstrap
percentile CIs (2,000 resamples; the runs of each task are resampled independently, scipy's
multi-sample bootstrap), probability of improvement over ``best`` (Mann-Whitney, with its bootstrap CI),
and performance profiles (fraction of runs with score > tau). The aggregate functions and the profile
plot are rliable's (:mod:`rliable.metrics`, :mod:`rliable.plot_utils`); the resampling is scipy's,
because ``rliable.library`` imports ``arch``, whose releases allowed by rliable 1.2 (< 8) fail to import
with pandas 3. One run is one evaluation episode: an agent's runs are its training seeds x test
episodes, a baseline's its test episodes (deterministic policies differ only by scenario), so every CI
reflects the spread over scenarios and, for agents, over seeds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from servegym.agents.families import EpisodeResult, Family, family_accepts, family_for

from servegym.errors import ConfigError

#: Env id -> {"naive": baseline, "best": baseline} (module docstring).
REFERENCES: dict[str, dict[str, str]] = {
    "servegym/GeoRoute-v0": {"naive": "rr", "best": "milp"},
    "servegym/GeoRouteWindow-v0": {"naive": "rr", "best": "milp"},
    "servegym/PDProvision-v0": {"naive": "static-peak", "best": "min-power+lookahead"},
    "servegym/PDProvisionResidual-v0": {"naive": "static-peak", "best": "min-power+lookahead"},
    "servegym/PDProvisionFront-v0": {"naive": "static-peak", "best": "min-power+lookahead"},
    "servegym/NPUAutoscale-v0": {"naive": "base", "best": "neuscale"},
    "servegym/NPUAutoscaleResidual-v0": {"naive": "base", "best": "neuscale"},
}
#: Smallest mean reference gap mean(R_best - R_naive) / mean(max(|R_naive|, |R_best|)) that gives a set of
#: scenarios a scale (module docstring).
REFERENCE_GAP_MIN = 1e-3
#: The stated tolerance of the "beats" rule: SLO violation may exceed the baseline's by this many
#: percentage points (module docstring).
SLO_TOLERANCE_PP = 0.5
#: Bootstrap resamples and confidence of every CI.
BOOTSTRAP_REPS = 2000
CONFIDENCE = 0.95
#: The SLO metric every family reports (violation %, servegym's one SLO convention).
SLO_METRIC = "slo_violation_pct"


def references(env_id: str) -> dict[str, str]:
    """``{"naive": ..., "best": ...}`` of ``env_id``; ConfigError for an id without references."""
    if env_id not in REFERENCES:
        raise ConfigError(f"env = {env_id!r} has no reference policies; allowed: {sorted(REFERENCES)}")
    return dict(REFERENCES[env_id])


def policy_names(env_id: str) -> list[str]:
    """Every policy name ``env_id`` accepts: ``naive``, ``best``, then the family's baselines."""
    return ["naive", "best", *family_for(env_id).baselines]


def resolve_policy(env_id: str, name: str) -> str:
    """The baseline ``name`` stands for (``naive``/``best`` -> the env's reference, a baseline -> itself)."""
    refs = references(env_id)
    if name in refs:
        return refs[name]
    fam = family_for(env_id)
    if family_accepts(fam, name):
        return name
    raise ConfigError(f"--policy = {name!r} is unknown for {env_id}; allowed: {', '.join(policy_names(env_id))}")


def kpi_metric(env: Any) -> str:
    """The KPI the env optimizes, as a family metric key: geo ``carbon_g``; pd the objective's
    ``energy_kwh``/``carbon_g``/``cost_usd``; npu ``energy_j``/``cost_usd``."""
    fam = family_for(env.spec.id if getattr(env, "spec", None) is not None else "")
    cfg = getattr(env.unwrapped, "config", None)
    objective = getattr(cfg, "objective", "energy")
    if fam.name == "geo":
        return "carbon_g"
    if fam.name == "pd":
        return {"energy": "energy_kwh", "carbon": "carbon_g", "cost": "cost_usd"}[objective]
    if fam.name == "npu":
        return "energy_j" if objective == "energy" else "cost_usd"
    return fam.saving_metric or "reward"


# ------------------------------------------------------------------------------------------- scores
def reference_gap(naive: Sequence[float], best: Sequence[float]) -> float:
    """The mean reference gap G = mean(R_best - R_naive) over scenario-aligned reference returns, or NaN
    where it is below :data:`REFERENCE_GAP_MIN` of the references' mean magnitude (no scale)."""
    n, b = (np.asarray(x, dtype=np.float64) for x in (naive, best))
    if n.shape != b.shape or n.size == 0:
        raise ConfigError(f"naive {n.shape} and best {b.shape} must be non-empty and episode-aligned")
    gap = float(np.mean(b - n))
    scale = max(float(np.mean(np.maximum(np.abs(b), np.abs(n)))), 1e-12)
    return gap if gap > REFERENCE_GAP_MIN * scale else math.nan


def normalized_scores(returns: Sequence[float], naive: Sequence[float], best: Sequence[float],
                      gap: float | None = None) -> np.ndarray:
    """Per-episode ``100 (R - R_naive) / G`` with G :func:`reference_gap` of the aligned references
    (or ``gap``); all NaN where G is undefined."""
    r, n, b = (np.asarray(x, dtype=np.float64) for x in (returns, naive, best))
    if not r.shape == n.shape == b.shape:
        raise ConfigError(f"returns {r.shape}, naive {n.shape} and best {b.shape} must be episode-aligned")
    g = reference_gap(n, b) if gap is None else gap
    if not math.isfinite(g):
        return np.full(r.shape, np.nan)
    return 100.0 * (r - n) / g


def episode_scores(results: Sequence[EpisodeResult], naive: Sequence[EpisodeResult],
                   best: Sequence[EpisodeResult]) -> np.ndarray:
    """Normalized scores of ``results`` against the references' episodes of the same seeds; G is pooled
    over the distinct seeds of ``results`` (each scenario once, however many training seeds replay it)."""
    rn = {r.seed: r.reward for r in naive}
    rb = {r.seed: r.reward for r in best}
    missing = sorted({r.seed for r in results} - (set(rn) & set(rb)))
    if missing:
        raise ConfigError(f"the references have no episode for seeds {missing}; run them on the same seeds")
    seeds = sorted({r.seed for r in results})
    gap = reference_gap([rn[s] for s in seeds], [rb[s] for s in seeds]) if seeds else math.nan
    return normalized_scores([r.reward for r in results], [rn[r.seed] for r in results],
                             [rb[r.seed] for r in results], gap=gap)


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
    """The normalized-score statistics of one policy on one env id (module docstring)."""

    n: int
    undefined: int
    mean: float
    mean_ci: tuple[float, float]
    iqm: float
    iqm_ci: tuple[float, float]


def score_stats(scores: Sequence[float], seed: int = 0) -> ScoreStats:
    """IQM and mean with 95 % bootstrap CIs of one policy's scores (NaN scores left out)."""
    x = np.asarray(scores, dtype=np.float64)
    ok = x[np.isfinite(x)]
    if ok.size == 0:
        return ScoreStats(0, int(x.size), math.nan, (math.nan, math.nan), math.nan, (math.nan, math.nan))
    return ScoreStats(n=int(ok.size), undefined=int(x.size - ok.size), mean=_mean(ok),
                      mean_ci=_bootstrap_ci([ok], _mean_along, seed), iqm=_iqm(ok),
                      iqm_ci=_bootstrap_ci([ok], _iqm_along, seed))


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
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


# -------------------------------------------------------------------------------------------- beats
def mean_metric(results: Sequence[EpisodeResult], key: str) -> float:
    vals = [r.metrics[key] for r in results if key in r.metrics and math.isfinite(r.metrics[key])]
    return float(np.mean(vals)) if vals else math.nan


def beats(agent: Sequence[EpisodeResult], baseline: Sequence[EpisodeResult], kpi: str,
          tolerance_pp: float = SLO_TOLERANCE_PP) -> bool:
    """The protocol's "beats" rule on the same episodes (module docstring)."""
    a_kpi, b_kpi = mean_metric(agent, kpi), mean_metric(baseline, kpi)
    a_slo, b_slo = mean_metric(agent, SLO_METRIC), mean_metric(baseline, SLO_METRIC)
    if not all(math.isfinite(v) for v in (a_kpi, b_kpi, a_slo, b_slo)):
        return False
    return a_kpi < b_kpi and a_slo <= b_slo + tolerance_pp


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
    st = score_stats(scores)
    return {"env": env_id, "policy": policy, "split": split, "episodes": len(results),
            "score_mean": _json_float(st.mean), "score_iqm": _json_float(st.iqm),
            "score_ci": [_json_float(st.iqm_ci[0]), _json_float(st.iqm_ci[1])],
            "kpis": {k: _json_float(v) for k, v in kpi_means(results, family_for(env_id)).items()}}


def _json_float(v: float) -> float | None:
    """JSON has no NaN: an undefined statistic is null."""
    return float(v) if math.isfinite(v) else None
