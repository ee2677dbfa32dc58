"""The strongest non-learned baseline of every leaderboard id, chosen by the verdict's own rule on validation.

Each id's candidates are its family's tuned variants: pd ``min-power+forecast`` over a utilization-target grid
(0.80-1.00) beside the family's other rules; geo ``greedy`` over an alpha grid (0-1 in steps of 0.1) beside
rr, ll, moer, the ILP variants (ilp, iter-ilp, milp) and green-llm; npu Base and NeuScale (the family ships
no other rule). The pd causal reference (``min-power+perfect``: the forecast rule given the next periods' true
arrivals) is tuned over the same grid as its own track, ``pd-causal``; it is never a strongest candidate. Every candidate plays the same validation episodes (reset seeds from
:data:`servegym.agents.benchmark.VALIDATION_SEED`, never the test split) with the id's quick-suite env
kwargs, and :func:`servegym.agents.benchmark.select_strongest` ranks them by
:func:`servegym.agents.verdict.verdict_ranking`: every candidate against every other under the leaderboard's
"beats" rule; strongest first = beaten by the fewest, then the highest mean return, then beating the most.

Baselines do not act through an id's action mode, so the ids of one family that share a model config share
their baseline episodes: pd's three ids are measured on PDProvision-v0 with the suite's pd kwargs, npu's two
on NPUAutoscale-v0 at the suite's 2-h horizon; the geo ids differ in their simulator config (5-s polls on
GeoRouteWindow-v0) and are measured each.

    python benchmarks/strongest_by_verdict.py [--episodes 30] [--ids pd,geo-route,geo-window,npu] [--force]

Writes ``benchmarks/results/strongest_by_verdict.{json,md}`` atomically after every id; a rerun skips the ids
already stored with the same episodes and candidates (``--force`` replays them).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from servegym.agents import benchmark as bm
from servegym.agents import protocol
from servegym.agents.verdict import rank_key

import servegym  # noqa: F401  (registers the ids)
from servegym.outputs import write_text

RESULTS = Path(__file__).resolve().parent / "results"
RHO_GRID = (0.80, 0.85, 0.90, 0.95, 0.96, 0.97, 0.98, 0.99, 1.0)
ALPHA_GRID = tuple(round(0.1 * i, 1) for i in range(11))
_QUICK = {e.env_id: e.env_kwargs for e in bm.SUITE["quick"] if e.track is None}  # the ids' own sections, no track
#: Measured id -> (the ids it stands for, its candidates).
TRACKS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "pd": ("servegym/PDProvision-v0",
           ("servegym/PDProvision-v0", "servegym/PDProvisionResidual-v0", "servegym/PDProvisionFront-v0"),
           ("static-peak", "threshold-hpa", "min-power", "min-power+lookahead", "min-power+forecast",
            *(f"min-power+forecast:{r:g}" for r in RHO_GRID))),
    "geo-route": ("servegym/GeoRoute-v0", ("servegym/GeoRoute-v0",),
                  ("rr", "ll", *(f"greedy:{a:g}" for a in ALPHA_GRID), "moer", "ilp", "iter-ilp", "milp", "green-llm")),
    "geo-window": ("servegym/GeoRouteWindow-v0", ("servegym/GeoRouteWindow-v0",),
                   ("rr", "ll", *(f"greedy:{a:g}" for a in ALPHA_GRID), "moer", "ilp", "iter-ilp", "milp",
                    "green-llm")),
    # the causal reference (not a strongest candidate: it knows the next periods' true arrivals), tuned alike
    "pd-causal": ("servegym/PDProvision-v0",
                  ("servegym/PDProvision-v0", "servegym/PDProvisionResidual-v0", "servegym/PDProvisionFront-v0"),
                  tuple(f"min-power+perfect:{r:g}" for r in RHO_GRID)),
    "npu": ("servegym/NPUAutoscale-v0", ("servegym/NPUAutoscale-v0", "servegym/NPUAutoscaleResidual-v0"),
            ("base", "neuscale")),
}


def measure(track: str, episodes: int) -> dict[str, Any]:
    """Rank one track's candidates on ``episodes`` validation episodes (module docstring)."""
    env_id, ids, cands = TRACKS[track]
    t0, c0 = time.perf_counter(), time.process_time()
    ranked = bm.select_strongest(env_id, list(cands), episodes=episodes, env_kwargs=_QUICK[env_id])
    env = bm.make_split_env(env_id, "validation", _QUICK[env_id])
    kpi = protocol.kpi_metric(env)
    env.close()
    return {"env_id": env_id, "ids": list(ids), "episodes": episodes, "candidates": list(cands), "kpi": kpi,
            "env_kwargs": _QUICK[env_id], "strongest": ranked[0].policy,
            "registered": protocol.yardsticks(env_id).roles()["strongest"],
            "ranking": [{"policy": c.policy, "beaten_by": list(c.beaten_by), "beats": list(c.beats), "kpi": c.kpi,
                         "slo_violation_pct": c.slo_violation_pct, "mean_return": c.mean_return,
                         "score_mean": c.score_mean, "score_ci": list(c.score_ci)} for c in ranked],
            "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}


def _f(v: float, fmt: str = ".2f") -> str:
    return "nan" if v is None or not math.isfinite(v) else format(v, fmt)


def markdown(report: dict[str, Any]) -> str:
    lines = ["# The strongest baseline per id, chosen by the verdict (`python benchmarks/strongest_by_verdict.py`)",
             "", f"Validation split only (reset seeds from {bm.VALIDATION_SEED}), the quick suite's env kwargs. "
             "Ranking: every candidate against every other under the leaderboard's rule "
             f"({protocol.BEATS_RULE}); strongest first = beaten by the fewest, then the highest mean return (the "
             "env's own trade-off of KPI against SLO), then beating the most. Score: 0 = naive, 100 = the id's "
             "oracle, mean [95 % CI] (shown, not used to rank).", ""]
    for track, r in report["tracks"].items():
        kpi = r["kpi"]
        lines += [f"## {track}: {', '.join(f'`{i}`' for i in r['ids'])}", "",
                  f"{r['episodes']} validation episodes of `{r['env_id']}` with `{json.dumps(r['env_kwargs'])}`; " +
                  (f"the causal reference's tuned target (best by the same ranking; it knows the next periods' "
                   f"true arrivals, so it is no strongest candidate): **{r['strongest']}**. " if track.endswith("-causal")
                   else f"strongest by the verdict: **{r['strongest']}** (registered before: `{r['registered']}`). ") +
                  f"{r['cpu_s']:.0f} CPU-s.", "",
                  f"| rank | candidate | beaten by | beats | {kpi} mean | SLO viol. % | mean return | score mean [95% CI] |",
                  "|---|---|---|---|---|---|---|---|"]
        for i, c in enumerate(r["ranking"], 1):
            by = ", ".join(c["beaten_by"]) if c["beaten_by"] else "-"
            lines.append(f"| {i} | {c['policy']} | {by} | {len(c['beats'])} | {_f(c['kpi'], '.4g')} | "
                         f"{_f(c['slo_violation_pct'], '.4f')} | {_f(c['mean_return'], '.4g')} | "
                         f"{_f(c['score_mean'], '.1f')} [{_f(c['score_ci'][0], '.1f')}, {_f(c['score_ci'][1], '.1f')}] |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=30)
    ap.add_argument("--ids", default=",".join(TRACKS), help=f"tracks, comma-separated; allowed: {', '.join(TRACKS)}")
    ap.add_argument("--out", default=str(RESULTS / "strongest_by_verdict"))
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    tracks = [t.strip() for t in args.ids.split(",") if t.strip()]
    bad = [t for t in tracks if t not in TRACKS]
    if bad or args.episodes < 2:
        print(f"--ids {bad} / --episodes {args.episodes}: allowed tracks {', '.join(TRACKS)}, episodes >= 2",
              file=sys.stderr)
        return 2
    out = Path(args.out)
    js = out.with_suffix(".json")
    report: dict[str, Any] = json.loads(js.read_text()) if js.exists() else {"tracks": {}}
    for t in tracks:
        old = report["tracks"].get(t)
        if (not args.force and old and old["episodes"] == args.episodes
                and old["candidates"] == list(TRACKS[t][2])):
            print(f"{t}: stored, skipped", file=sys.stderr)
            continue
        print(f"{t}: {len(TRACKS[t][2])} candidates x {args.episodes} validation episodes", file=sys.stderr, flush=True)
        report["tracks"][t] = measure(t, args.episodes)
        print(f"{t}: strongest {report['tracks'][t]['strongest']} ({report['tracks'][t]['cpu_s']:.0f} CPU-s)",
              file=sys.stderr, flush=True)
        write_text(js, json.dumps(rerank(report), indent=1, default=float) + "\n")
        write_text(out.with_suffix(".md"), markdown(report))
    if report["tracks"]:  # the stored tracks ranked by the current rule (no episode replayed)
        write_text(js, json.dumps(rerank(report), indent=1, default=float) + "\n")
        write_text(out.with_suffix(".md"), markdown(report))
    return 0


def rerank(report: dict[str, Any]) -> dict[str, Any]:
    """Each stored track's candidates in the order of :func:`servegym.agents.verdict.rank_key` (the pairwise
    verdicts are stored, so a change of the ranking key needs no episode replayed)."""
    for r in report["tracks"].values():
        r["ranking"].sort(key=lambda c: rank_key(len(c["beaten_by"]), c["mean_return"], len(c["beats"])))
        r["strongest"] = r["ranking"][0]["policy"]
    return report


if __name__ == "__main__":
    raise SystemExit(main())
