"""The paired "beats" verdict of a policy against a baseline, with training seeds and test episodes both
in its confidence intervals.

**Data.** A policy's runs form a table: one row per *unit* (an agent's training seed; a deterministic
baseline has one unit) and one column per test episode (the reset seed, the same scenario for both
policies). The baseline's runs are averaged per episode. Every difference is policy - baseline on the same
episode, for three quantities: the KPI (geo gCO2; pd the objective's energy, carbon or cost; npu energy or
cost), the SLO violation (percentage points) and the env's own return.

**Hierarchical (crossed) bootstrap.** Units and episodes are crossed (every training seed plays every test
episode), so a resample draws units *and* episodes with replacement, independently, and takes the mean of
the selected cells (Owen 2007, "The pigeonhole bootstrap", Annals of Applied Statistics 1(2), 386-411;
Agarwal et al. 2021 likewise count an RL agent's runs over seeds). The percentile 95 % CI of
:data:`BOOTSTRAP_REPS` resamples is the interval of each difference. An agent whose gain comes from one
lucky seed of five gets a CI that reaches the clones' value, since a third of the resamples
((4/5)^5) leave that seed out; averaging the seeds first and resampling episodes only (the earlier rule)
declared such a seed fluke a win.

**Beats** (:func:`paired_verdict`), all three on the same episodes:

1. the KPI is lower: the CI of the KPI difference lies below 0;
2. the SLO violation is not worse beyond the tolerance, a non-inferiority test on the CI: the CI's upper
   bound of the SLO difference is at most ``max(10 % of the baseline's violation, one request's share of
   an episode)`` (:func:`slo_tolerance_pp`). The second term is what an episode can resolve: the violation
   is a share of the requests an episode counts (``slo_requests``, the mean over the baseline's episodes;
   one request is 100 / N pp), so a difference below it is below the measurement's granularity. There is
   no fixed floor: a baseline with 0.0007 % violation allows 0.00007 pp or one request, not 0.05 pp;
3. the env's return is not lower: the mean return difference is >= 0 (its CI is reported), so a policy
   that wins the KPI by spending the reward's other terms (SLO penalties, cap excess, termination) does
   not beat.

The outcome (:attr:`Verdict.outcome`) names which held: ``beats``; ``tie`` (the KPI difference's CI
contains 0: neither is shown better); ``worse`` (the KPI is higher beyond noise); ``slo`` (lower KPI, SLO
beyond the tolerance); ``return`` (lower KPI and SLO within tolerance, but a lower return); ``no-ci`` (fewer
than two paired episodes). Beside the pooled verdict, ``seeds_beating`` counts the units whose own
verdict (that unit's row alone, episodes resampled) is ``beats``: "k of n seeds beat".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from servegym.agents.families import EpisodeResult

#: Bootstrap resamples and confidence level of every interval of the protocol.
BOOTSTRAP_REPS = 2000
CONFIDENCE = 0.95
#: The SLO violation metric (percent of requests) every family reports.
SLO_METRIC = "slo_violation_pct"
#: How many requests an episode's SLO share counts (geo arrived, pd arrived, npu finished).
SLO_COUNT_METRIC = "slo_requests"
#: The SLO tolerance's share of the baseline's violation.
SLO_TOL_REL = 0.10
#: The key of the return in :func:`value_table`.
RETURN = "reward"
#: Outcomes of a verdict (module docstring).
OUTCOMES = ("beats", "tie", "worse", "slo", "return", "no-ci")


def _value(r: EpisodeResult, key: str) -> float:
    v = r.reward if key == RETURN else r.metrics.get(key, math.nan)
    return float(v)


def value_table(results: Sequence[EpisodeResult], key: str) -> dict[int, dict[int, float]]:
    """Unit -> episode (reset seed) -> value of ``key`` (``"reward"`` or a metric), finite values only.

    A run's unit is its ``train_seed`` when set (>= 0); otherwise the k-th run of an episode is unit k
    (models are played one after the other over the same episodes). Repeated (unit, episode) runs are
    averaged."""
    acc: dict[int, dict[int, list[float]]] = {}
    seen: dict[int, int] = {}
    for r in results:
        k = seen.get(r.seed, 0)
        seen[r.seed] = k + 1
        unit = r.train_seed if r.train_seed >= 0 else k
        v = _value(r, key)
        if math.isfinite(v):
            acc.setdefault(unit, {}).setdefault(r.seed, []).append(v)
    return {u: {e: float(np.mean(v)) for e, v in eps.items()} for u, eps in acc.items()}


def per_seed_means(results: Sequence[EpisodeResult], key: str) -> dict[int, float]:
    """Episode (reset seed) -> mean of ``key`` over the runs of that scenario (all units), finite values only."""
    acc: dict[int, list[float]] = {}
    for r in results:
        v = _value(r, key)
        if math.isfinite(v):
            acc.setdefault(r.seed, []).append(v)
    return {s: float(np.mean(v)) for s, v in acc.items()}


def crossed_resamples(table: np.ndarray, seed: int = 0, reps: int = BOOTSTRAP_REPS) -> np.ndarray:
    """``reps`` bootstrap means of a (units, episodes) table, units and episodes drawn with replacement
    independently (module docstring). A dimension of size 1 is not resampled."""
    x = np.asarray(table, dtype=np.float64)
    n_u, n_e = x.shape
    rng = np.random.default_rng(seed)
    wu = rng.multinomial(n_u, np.full(n_u, 1.0 / n_u), size=reps) / n_u
    we = rng.multinomial(n_e, np.full(n_e, 1.0 / n_e), size=reps) / n_e
    return np.einsum("bi,ij,bj->b", wu, x, we)


def crossed_ci(table: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """Percentile CI of the mean of a (units, episodes) table under the crossed bootstrap; the point
    estimate twice where there is nothing to resample."""
    x = np.asarray(table, dtype=np.float64)
    if x.size == 0:
        return (math.nan, math.nan)
    point = float(x.mean())
    if x.size < 2 or np.all(x == x.flat[0]):
        return (point, point)
    boot = crossed_resamples(x, seed)
    a = 50.0 * (1.0 - CONFIDENCE)
    lo, hi = np.percentile(boot, [a, 100.0 - a])
    return float(min(lo, point)), float(max(hi, point))


def crossed_iqm_ci(table: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """Percentile CI of the IQM (25 % trimmed mean) of a (units, episodes) table's cells under the
    crossed bootstrap (the cells of the drawn units and episodes, with multiplicity)."""
    from scipy import stats

    x = np.asarray(table, dtype=np.float64)
    if x.size == 0:
        return (math.nan, math.nan)
    point = float(stats.trim_mean(x.ravel(), 0.25))
    if x.size < 2 or np.all(x == x.flat[0]):
        return (point, point)
    n_u, n_e = x.shape
    rng = np.random.default_rng(seed)
    iu = rng.integers(0, n_u, size=(BOOTSTRAP_REPS, n_u))
    ie = rng.integers(0, n_e, size=(BOOTSTRAP_REPS, n_e))
    cells = x[iu[:, :, None], ie[:, None, :]].reshape(BOOTSTRAP_REPS, -1)
    boot = stats.trim_mean(cells, 0.25, axis=1)
    a = 50.0 * (1.0 - CONFIDENCE)
    lo, hi = np.percentile(boot, [a, 100.0 - a])
    return float(min(lo, point)), float(max(hi, point))


def slo_resolution_pp(requests_per_episode: float) -> float:
    """One request's share of an episode in percentage points (100 / N); 0 where N is unknown."""
    n = float(requests_per_episode)
    return 100.0 / n if math.isfinite(n) and n >= 1.0 else 0.0


def slo_tolerance_pp(baseline_slo_pct: float, resolution_pp: float = 0.0) -> float:
    """How far (percentage points) the CI's upper bound of the SLO difference may reach above 0 and still
    count as no worse: max(10 % of the baseline's violation, one request's share of an episode)."""
    return max(SLO_TOL_REL * max(float(baseline_slo_pct), 0.0), max(float(resolution_pp), 0.0))


@dataclass(frozen=True)
class Verdict:
    """The paired verdict of a policy against a baseline on the same episodes (module docstring); every
    difference is policy - baseline."""

    baseline: str
    kpi: str
    episodes: int  # test episodes both played
    seeds: int  # the policy's units (training seeds)
    kpi_diff: float
    kpi_ci: tuple[float, float]
    kpi_diff_pct: float  # the KPI difference in % of the baseline's mean KPI
    slo_diff_pp: float
    slo_ci: tuple[float, float]
    slo_tolerance_pp: float
    slo_resolution_pp: float
    return_diff: float
    return_ci: tuple[float, float]
    seeds_beating: int
    outcome: str

    @property
    def beats(self) -> bool:
        return self.outcome == "beats"

    def as_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "kpi": self.kpi, "episodes": self.episodes, "seeds": self.seeds,
                "kpi_diff": _json_float(self.kpi_diff), "kpi_diff_ci": [_json_float(v) for v in self.kpi_ci],
                "kpi_diff_pct": _json_float(self.kpi_diff_pct),
                "slo_diff_pp": _json_float(self.slo_diff_pp), "slo_diff_ci": [_json_float(v) for v in self.slo_ci],
                "slo_tolerance_pp": _json_float(self.slo_tolerance_pp),
                "slo_resolution_pp": _json_float(self.slo_resolution_pp),
                "return_diff": _json_float(self.return_diff),
                "return_diff_ci": [_json_float(v) for v in self.return_ci],
                "seeds_beating": self.seeds_beating, "outcome": self.outcome, "beats": self.beats}

    @property
    def within_noise(self) -> bool:
        """The KPI difference's CI includes 0 (or there is no CI): no difference is shown either way."""
        return self.outcome in ("tie", "no-ci")

    def reason(self) -> str:
        """Why the verdict is what it is, in a few words."""
        return {"beats": f"lower {self.kpi} beyond noise, SLO within tolerance, return not lower",
                "no-ci": "fewer than two paired episodes: no CI, never a win",
                "tie": f"tie: the {self.kpi} difference's 95 % CI includes 0",
                "slo": f"lower {self.kpi} but the SLO difference's CI reaches above the tolerance",
                "return": f"lower {self.kpi} and SLO within tolerance, but a lower return",
                "worse": f"higher {self.kpi} beyond noise"}[self.outcome]

    def text(self, policy: str) -> str:
        word = {"beats": "beats", "tie": "ties with"}.get(self.outcome, "does not beat")
        return (f"{policy} {word} {self.baseline} ({self.reason()}): {self.kpi} {self.kpi_diff:+.4g} "
                f"[{self.kpi_ci[0]:+.4g}, {self.kpi_ci[1]:+.4g}] ({self.kpi_diff_pct:+.3g} %), SLO violation "
                f"{self.slo_diff_pp:+.3g} pp [{self.slo_ci[0]:+.3g}, {self.slo_ci[1]:+.3g}] (tolerance "
                f"{self.slo_tolerance_pp:.3g} pp), return {self.return_diff:+.4g} [{self.return_ci[0]:+.4g}, "
                f"{self.return_ci[1]:+.4g}]; {self.seeds_beating} of {self.seeds} seeds beat; "
                f"{self.episodes} paired episodes")


#: One line stating the rule, for tables and terminal reports.
BEATS_RULE = ("beats = on the same episodes, KPI lower with the 95 % CI of the difference below 0, the SLO "
              "difference's CI upper bound within max(10 % of the baseline's violation, one request of an "
              "episode), and the mean return not lower; CIs resample training seeds and test episodes "
              "(crossed bootstrap)")


def _outcome(n_e: int, kci: tuple[float, float], sci_hi: float, tol: float, ret_diff: float) -> str:
    if n_e < 2:
        return "no-ci"
    if kci[0] > 0.0:
        return "worse"
    if not kci[1] < 0.0:
        return "tie"
    if not sci_hi <= tol:
        return "slo"
    if ret_diff < 0.0:
        return "return"
    return "beats"


def _diff_table(pt: dict[int, dict[int, float]], bt: dict[int, float], units: Sequence[int],
                episodes: Sequence[int]) -> np.ndarray:
    """(units, episodes) table of policy - baseline from their value tables."""
    return np.array([[pt[u][e] - bt[e] for e in episodes] for u in units], dtype=np.float64).reshape(
        len(units), len(episodes))


def paired_verdict(policy: Sequence[EpisodeResult], baseline: Sequence[EpisodeResult], kpi: str,
                   baseline_name: str = "", seed: int = 0) -> Verdict:
    """The protocol's "beats" rule (module docstring) with its crossed-bootstrap CIs."""
    keys = (kpi, SLO_METRIC, RETURN)
    tables = {k: value_table(policy, k) for k in keys}
    base = {k: per_seed_means(baseline, k) for k in keys}
    units = sorted(set.intersection(*(set(t) for t in tables.values()))) if policy else []
    common = set.intersection(*(set(b) for b in base.values())) if baseline else set()
    for k in keys:
        for u in units:
            common &= set(tables[k][u])
    episodes = sorted(common)
    name = baseline_name or (baseline[0].policy if baseline else "")
    nan2 = (math.nan, math.nan)
    if not episodes or not units:
        return Verdict(name, kpi, 0, len(units), math.nan, nan2, math.nan, math.nan, nan2, math.nan, math.nan,
                       math.nan, nan2, 0, "no-ci")
    dk, ds, dr = (_diff_table(tables[k], base[k], units, episodes) for k in keys)
    b_slo = float(np.mean([base[SLO_METRIC][e] for e in episodes]))
    counts = per_seed_means(baseline, SLO_COUNT_METRIC) or per_seed_means(policy, SLO_COUNT_METRIC)
    res_pp = slo_resolution_pp(float(np.mean(list(counts.values()))) if counts else math.nan)
    tol = slo_tolerance_pp(b_slo, res_pp)
    kci, sci, rci = crossed_ci(dk, seed), crossed_ci(ds, seed + 1), crossed_ci(dr, seed + 2)
    b_kpi = float(np.mean([base[kpi][e] for e in episodes]))
    pct = 100.0 * float(dk.mean()) / abs(b_kpi) if b_kpi != 0.0 else math.nan
    k_beat = 0
    for i in range(len(units)):  # each unit's own verdict, its row alone
        row = slice(i, i + 1)
        if _outcome(len(episodes), crossed_ci(dk[row], seed), crossed_ci(ds[row], seed + 1)[1], tol,
                    float(dr[row].mean())) == "beats":
            k_beat += 1
    out = _outcome(len(episodes), kci, sci[1], tol, float(dr.mean()))
    return Verdict(name, kpi, len(episodes), len(units), float(dk.mean()), kci, pct, float(ds.mean()), sci, tol,
                   res_pp, float(dr.mean()), rci, k_beat, out)


def beats(agent: Sequence[EpisodeResult], baseline: Sequence[EpisodeResult], kpi: str) -> bool:
    """The protocol's "beats" rule on the same episodes (:func:`paired_verdict`)."""
    return paired_verdict(agent, baseline, kpi).beats


@dataclass(frozen=True)
class Ranked:
    """One candidate of :func:`verdict_ranking`: which candidates beat it and which it beats under the verdict."""

    policy: str
    beaten_by: tuple[str, ...]
    beats: tuple[str, ...]
    kpi: float  # mean over the episodes
    slo_violation_pct: float
    mean_return: float


def rank_key(beaten_by: int, mean_return: float, beats: int) -> tuple[float, float, float]:
    """The ranking's sort key (:func:`verdict_ranking`): fewest candidates that beat it, then the highest
    mean return, then the most candidates it beats."""
    return (beaten_by, -mean_return if math.isfinite(mean_return) else math.inf, -beats)


def verdict_ranking(runs: Mapping[str, Sequence[EpisodeResult]], kpi: str, seed: int = 0) -> list[Ranked]:
    """Rank candidates by the verdict itself: every candidate against every other with :func:`paired_verdict`,
    strongest first (:func:`rank_key`): fewest candidates that beat it, then the highest mean return, then the
    most candidates it beats.

    The verdict is a partial order: a rule tuned for less energy at a little more SLO violation and one tuned
    the other way round do not beat each other (the SLO condition stops one, the KPI the other), so several
    candidates may be beaten by none, a front of energy against SLO. Among them the env's own return decides,
    the trade-off between the KPI and the SLO that the env's reward states; counting wins would favour a
    candidate that happens to sit next to weak ones. The first is beaten by no other candidate whenever any
    candidate is (the verdict is never both ways round), so "the strongest" is a policy no candidate beats under
    the rule the leaderboard applies."""
    names = list(runs)
    won: dict[str, list[str]] = {n: [] for n in names}
    lost: dict[str, list[str]] = {n: [] for n in names}
    for a in names:
        for b in names:
            if a != b and paired_verdict(runs[a], runs[b], kpi, b, seed).beats:
                won[a].append(b)
                lost[b].append(a)

    def mean(res: Sequence[EpisodeResult], key: str) -> float:
        v = [_value(r, key) for r in res]
        v = [x for x in v if math.isfinite(x)]
        return float(np.mean(v)) if v else math.nan

    out = [Ranked(n, tuple(lost[n]), tuple(won[n]), mean(runs[n], kpi), mean(runs[n], SLO_METRIC),
                  mean(runs[n], RETURN)) for n in names]
    return sorted(out, key=lambda r: rank_key(len(r.beaten_by), r.mean_return, len(r.beats)))


def _json_float(v: float) -> float | None:
    """JSON has no NaN: an undefined statistic is null."""
    return float(v) if math.isfinite(v) else None
