"""Per split: is the env id's one ``strongest`` baseline (chosen on the validation split) also the best
non-learned baseline there? Shared by the families' yardstick scripts (pd_yardsticks.py, npu_yardsticks.py,
geo_oracle.py), which play every shipped non-oracle baseline on each split's episodes and pass their
per-episode scores on the oracle scale here.

The best baseline of a split is the one with the highest mean score over the episodes every candidate
scored (an episode without a scale is left out for all); best - strongest is paired by episode, with the
protocol's 95 % bootstrap CI, and the headroom over the best is 100 - its mean score.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from servegym.agents import protocol_stats


def best_baseline(scores: Mapping[str, Mapping[int, float]], strongest: str) -> dict[str, Any]:
    """``scores``: baseline -> reset seed -> score (oracle scale) on one split, ``strongest`` among them.
    Returns the ranking (mean score per baseline), the best baseline and its mean and CI, the strongest's
    mean, the paired difference best - strongest with its CI, and the headroom over the best."""
    if strongest not in scores:
        raise KeyError(f"strongest baseline {strongest!r} not among the candidates {sorted(scores)}")
    seeds = sorted(set.intersection(*(set(s) for s in scores.values())))
    seeds = [s for s in seeds if all(math.isfinite(v[s]) for v in scores.values())]
    if not seeds:
        raise ValueError("no episode every candidate scored")
    means = {name: float(np.mean([v[s] for s in seeds])) for name, v in scores.items()}
    ranking = sorted(means.items(), key=lambda kv: -kv[1])
    best = ranking[0][0]
    b = np.array([scores[best][s] for s in seeds])
    st = np.array([scores[strongest][s] for s in seeds])
    diff_ci = protocol_stats._paired_ci([b - st], protocol_stats._mean_along)
    best_ci = protocol_stats._paired_ci([b], protocol_stats._mean_along)
    return {"episodes": len(seeds), "ranking": [[n, m] for n, m in ranking], "best": best,
            "best_score": means[best], "best_ci": list(best_ci), "strongest": strongest,
            "strongest_score": means[strongest], "best_minus_strongest": float((b - st).mean()),
            "best_minus_strongest_ci": list(diff_ci), "headroom_over_best": 100.0 - means[best],
            "headroom_over_best_ci": [100.0 - best_ci[1], 100.0 - best_ci[0]]}


def _f(v: float) -> str:
    return "nan" if not math.isfinite(v) else f"{v:,.1f}"


def markdown(rows: Sequence[tuple[str, dict[str, Any]]], env: str) -> list[str]:
    """A table of (split label, :func:`best_baseline` result) rows, with a line saying on which splits the
    id's strongest baseline is not the best."""
    lines = [f"## Best non-learned baseline per split ({env})", "",
             "The id's `strongest` is one baseline, chosen on the validation split; per split, the best is the "
             "highest mean score among every shipped non-oracle baseline on the same episodes (naive included). "
             "best - strongest is paired by episode (95 % bootstrap CI); headroom over best = 100 - its score.", "",
             "| split | strongest, score | best baseline, score [95 % CI] | best - strongest [95 % CI] | "
             "headroom over best | runners-up |", "|---|---|---|---|---|---|"]
    not_best = []
    for label, r in rows:
        # baselines that play the same episodes alike (geo greedy:0 and moer) tie: name them together
        tied = [n for n, m in r["ranking"] if abs(m - r["best_score"]) <= 1e-9 * max(1.0, abs(m))]
        ru = ", ".join(f"`{n}` {_f(m)}" for n, m in r["ranking"][len(tied):len(tied) + 3])
        lines.append(f"| {label} | `{r['strongest']}` {_f(r['strongest_score'])} | {' = '.join(f'`{n}`' for n in tied)} "
                     f"{_f(r['best_score'])} [{_f(r['best_ci'][0])}, {_f(r['best_ci'][1])}] | "
                     f"{_f(r['best_minus_strongest'])} [{_f(r['best_minus_strongest_ci'][0])}, "
                     f"{_f(r['best_minus_strongest_ci'][1])}] | {_f(r['headroom_over_best'])} | {ru} |")
        if r["strongest"] not in tied:
            sig = r["best_minus_strongest_ci"][0] > 0
            not_best.append(f"{label} ({' = '.join(f'`{n}`' for n in tied)}{'' if sig else ', within noise'})")
    lines += ["", ("The strongest is the best baseline on every split." if not not_best else
                   "The strongest is not the best baseline on: " + "; ".join(not_best) + "."), ""]
    return lines
