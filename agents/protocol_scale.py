"""The benchmark protocol's normalized score (:mod:`servegym.agents.protocol` defines it): the checkpoint scale
of training, the paper-anchored pooled scale and the per-episode oracle scale of an env id (:class:`Scale`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from servegym.agents.families import EpisodeResult
from servegym.agents.protocol_yardsticks import scale_name, yardsticks

from servegym.errors import ConfigError

#: Smallest anchor gap (oracle - naive per episode, or the pooled paper - naive) relative to the anchors'
#: mean magnitude that gives an episode or a set of scenarios a scale (:mod:`servegym.agents.protocol`).
REFERENCE_GAP_MIN = 1e-3


# ------------------------------------------------------------------------------------------- scores
def checkpoint_scale(refs: Mapping[str, str], returns: Mapping[str, Sequence[float]]) -> dict[str, str]:
    """The checkpoint scale's endpoints ``{"naive": <0>, "best": <100>}`` on a set of evaluation episodes:
    ``refs`` (:func:`checkpoint_references`) ordered by the two policies' mean returns there (``returns``: name ->
    the returns of the same episodes), the lower one at 0. Where the paper's method returns less than the naive
    baseline on those episodes (GeoRoute-v0's ``stress-load`` track: milp below rr), the unordered scale would have
    no positive gap and every validation score would be undefined; ordered, 100 (R - R_low) / G stays linear in the
    mean return, so it ranks checkpoints as the mean return does and the strongest's validation score exists."""
    naive, best = refs["naive"], refs["best"]
    if float(np.mean(returns[best])) < float(np.mean(returns[naive])):
        return {**refs, "naive": best, "best": naive}
    return dict(refs)


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


def oracle_scores(returns: Sequence[float], naive: Sequence[float], oracle: Sequence[float]) -> np.ndarray:
    """Per-episode ``100 (R - N) / (O - N)`` of episode-aligned returns (:mod:`servegym.agents.protocol`); NaN for an
    episode whose gap O - N is below :data:`REFERENCE_GAP_MIN` of max(|N|, |O|)."""
    r, n, o = (np.asarray(x, dtype=np.float64) for x in (returns, naive, oracle))
    if not r.shape == n.shape == o.shape:
        raise ConfigError(f"returns {r.shape}, naive {n.shape} and oracle {o.shape} must be episode-aligned")
    gap = o - n
    ok = gap > REFERENCE_GAP_MIN * np.maximum(np.maximum(np.abs(o), np.abs(n)), 1e-12)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, 100.0 * (r - n) / np.where(ok, gap, 1.0), np.nan)


@dataclass(frozen=True)
class Scale:
    """The scale of one env id on a set of scenarios (:mod:`servegym.agents.protocol`): the naive and top (oracle, or
    the paper's method as the fallback) returns per reset seed."""

    env_id: str
    naive: Mapping[int, float]
    top: Mapping[int, float]
    oracle: bool  # True: per-episode oracle scale; False: the pooled paper-anchored fallback
    name: str

    def scores(self, results: Sequence[EpisodeResult]) -> np.ndarray:
        """The normalized score of every episode of ``results`` (paired with the anchors by seed)."""
        missing = sorted({r.seed for r in results} - (set(self.naive) & set(self.top)))
        if missing:
            raise ConfigError(f"the references have no episode for seeds {missing}; run them on the same seeds")
        rets = [r.reward for r in results]
        n = [self.naive[r.seed] for r in results]
        t = [self.top[r.seed] for r in results]
        if self.oracle:
            return oracle_scores(rets, n, t)
        seeds = sorted({r.seed for r in results})
        gap = reference_gap([self.naive[s] for s in seeds], [self.top[s] for s in seeds]) if seeds else math.nan
        return normalized_scores(rets, n, t, gap=gap)


def make_scale(env_id: str, naive: Sequence[EpisodeResult], paper: Sequence[EpisodeResult],
               oracle: Sequence[EpisodeResult] | None = None) -> Scale:
    """The scale of ``env_id`` from its anchors' episodes: per-episode oracle-anchored where the id has an
    oracle and its episodes are given, else the pooled paper-anchored fallback (``name`` says which)."""
    y = yardsticks(env_id)
    have = y.oracle is not None and oracle is not None and len(oracle) > 0
    top = oracle if have else paper
    assert top is not None
    name = scale_name(env_id)
    if y.oracle is not None and not have:
        name = (f"0 = naive ({y.naive}), 100 = the paper's method ({y.paper}) pooled: the oracle "
                f"({y.oracle}) was not run on these episodes, so the paper-anchored fallback")
    return Scale(env_id=env_id, naive={r.seed: r.reward for r in naive}, top={r.seed: r.reward for r in top},
                 oracle=have, name=name)
