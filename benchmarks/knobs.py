"""Do the scenario knobs that the yardstick audit found inert change anything today? Each knob is played against the plain
test split on the same reset seeds, with the leaderboard's configs, and the per-episode paired differences are
reported (mean with a 95 % bootstrap CI, and on how many episodes anything changed):

* npu ``osl_accuracy`` (the router's output-length prediction accuracy, NeuScale §3.4/§5.6, Figure 27;
  default 0.6) at 0.3 and 1.0, NPUAutoscale-v0 at the quick suite's 2-h horizon (the fluid default);
* geo ``ci_time_scale=120`` (a compressed grid clock: 30 s of the mini preset = one grid hour) on both geo ids.

    nice -n 15 python benchmarks/knobs.py [--episodes 10]

Writes ``benchmarks/results/knobs.{md,json}`` (atomically).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
from servegym.agents import benchmark as bm
from servegym.agents import protocol, protocol_stats
from servegym.agents.rollout import seeds_from

import servegym  # noqa: F401  (registers the ids)
from servegym.outputs import write_text

RESULTS = Path(__file__).resolve().parent / "results"
GEO_ROUTE = {"config": {"preset": "mini", "action_mode": "residual", "reference": "iter-ilp"}}
GEO_WINDOW = {"config": {"preset": "mini", "action_mode": "residual", "geo": {"poll_interval_s": 5.0}}}
#: (env id, leaderboard kwargs, knob changes, policies): each knob against the plain config.
CASES: tuple[tuple[str, dict[str, Any], dict[str, Any], tuple[str, ...]], ...] = (
    ("servegym/NPUAutoscale-v0", {"config": {"hours": 2.0}}, {"osl_accuracy": 0.3}, ("base", "neuscale")),
    ("servegym/NPUAutoscale-v0", {"config": {"hours": 2.0}}, {"osl_accuracy": 1.0}, ("base", "neuscale")),
    ("servegym/GeoRoute-v0", GEO_ROUTE, {"ci_time_scale": 120.0}, ("rr", "milp", "iter-ilp", "moer")),
    ("servegym/GeoRouteWindow-v0", GEO_WINDOW, {"ci_time_scale": 120.0}, ("rr", "milp", "green-llm", "moer")),
)


def _with(kwargs: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(kwargs)
    out["config"].update(changes)
    return out


def measure(env_id: str, kwargs: dict[str, Any], changes: dict[str, Any], policies: tuple[str, ...],
            seeds: list[int], cache: dict[tuple[str, str], Any]) -> dict[str, Any]:
    """Per policy: the paired differences knob - plain of the KPI, the SLO violation and the return."""
    key = (env_id, json.dumps(kwargs, sort_keys=True))
    if key not in cache:
        env = bm.make_split_env(env_id, "test", kwargs)
        try:
            cache[key] = (bm.run_policy_episodes(env_id, env, list(policies), seeds), protocol.kpi_metric(env))
        finally:
            env.close()
    plain, kpi = cache[key]
    env = bm.make_split_env(env_id, "test", _with(kwargs, changes))
    try:
        knob = bm.run_policy_episodes(env_id, env, list(policies), seeds)
    finally:
        env.close()
    rows = []
    for p in policies:
        a, b = plain[p], knob[p]
        out: dict[str, Any] = {"policy": p}
        for name, get in ((kpi, lambda r: r.metrics[kpi]), ("slo_violation_pct", lambda r: r.metrics["slo_violation_pct"]),
                          ("return", lambda r: r.reward)):
            d = np.array([get(y) - get(x) for x, y in zip(a, b, strict=True)])
            base = np.array([get(x) for x in a])
            out[name] = {"plain_mean": float(base.mean()), "diff_mean": float(d.mean()),
                         "diff_ci": list(protocol_stats._paired_ci([d], protocol_stats._mean_along)),
                         "rel_diff_mean": float(np.mean(d / np.where(base != 0, np.abs(base), 1.0)))}
        out["episodes_changed"] = int(sum(x.reward != y.reward or x.metrics != y.metrics for x, y in zip(a, b, strict=True)))
        rows.append(out)
    return {"env": env_id, "kwargs": kwargs, "changes": changes, "kpi": kpi, "episodes": len(seeds), "rows": rows}


def markdown(report: dict[str, Any]) -> str:
    lines = ["# Scenario knobs against the plain test split (`python benchmarks/knobs.py`)", "",
             f"{report['episodes']} test episodes (reset seeds 0-{report['episodes'] - 1}), the leaderboard's configs "
             "(npu: 2-h episodes, fluid default; geo: mini preset, residual mode), each knob against the same "
             "config without it. Differences are knob - plain per episode: mean [95 % paired bootstrap CI]; "
             "relative = mean of the per-episode difference over the plain value.", ""]
    for c in report["cases"]:
        kpi = c["kpi"]
        lines += [f"## {c['env']} with `{json.dumps(c['changes'])}`", "",
                  f"| policy | episodes changed | {kpi}: plain mean | {kpi} diff [95 % CI] | relative | "
                  "SLO viol. diff pp [95 % CI] | return diff [95 % CI] |", "|---|---|---|---|---|---|---|"]
        for r in c["rows"]:
            k, s, g = r[kpi], r["slo_violation_pct"], r["return"]
            lines.append(f"| {r['policy']} | {r['episodes_changed']} of {c['episodes']} | {k['plain_mean']:.6g} | "
                         f"{k['diff_mean']:+.4g} [{k['diff_ci'][0]:+.4g}, {k['diff_ci'][1]:+.4g}] | "
                         f"{100 * k['rel_diff_mean']:+.3f} % | {s['diff_mean']:+.4f} [{s['diff_ci'][0]:+.4f}, "
                         f"{s['diff_ci'][1]:+.4f}] | {g['diff_mean']:+.4g} [{g['diff_ci'][0]:+.4g}, {g['diff_ci'][1]:+.4g}] |")
        lines.append("")
    lines += [f"CPU time {report['cpu_s']:.0f} s (nice 15, shared 2-core machine).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--out", default=str(RESULTS / "knobs"))
    args = ap.parse_args(argv)
    c0 = os.times()
    seeds = seeds_from(bm.TEST_SEED, args.episodes)
    cache: dict[tuple[str, str], Any] = {}
    cases = []
    t0 = time.perf_counter()
    for env_id, kwargs, changes, policies in CASES:
        cases.append(measure(env_id, kwargs, changes, policies, seeds, cache))
        print(f"{env_id} {changes}: done ({time.perf_counter() - t0:.0f} s)", flush=True)
    c1 = os.times()
    report = {"episodes": args.episodes, "cases": cases, "cpu_s": (c1.user - c0.user) + (c1.system - c0.system)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out.with_suffix(".json"), json.dumps(report, indent=1, default=float) + "\n")
    write_text(out.with_suffix(".md"), markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
