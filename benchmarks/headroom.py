"""Headroom in the user's units, per id and split: how far the strongest non-learned baseline is from what
hindsight reaches, and how much of that a perfect short-term forecast already closes.

For each track (an id with its quick-suite env kwargs) and split (test and the family's named shifts), on the
same episodes (reset seeds from 0), paired differences to the strongest baseline (chosen on validation by the
verdict, :data:`servegym.agents.protocol.YARDSTICKS`) in the KPI's units and in %, with the SLO difference,
mean [95 % CI] over episodes:

* **oracle - strongest**: the hindsight bound that is the scale's 100 (pd the exact DP optimum over backlog-free
  plans; geo a feasible hindsight policy; npu the Ideal, a relaxation);
* pd **relaxation - strongest** in return units (the oracle's start-up-free relaxation, an upper bound on any
  backlog-free plan; it has no KPI) and npu **hindsight - strongest** (the feasible hindsight provisioning plan);
* **causal - strongest**: the causal reference, a rule deciding step by step with a perfect forecast of the
  next minutes (pd ``min-power+perfect``: the true arrivals of the coming period and the start-up horizon;
  geo: the strongest rule given the true output lengths, or fresh 0.5-s snapshots, or both, which is part of
  what the geo oracle knows; npu ships none). learnable headroom = causal - strongest: what a policy
  with a better forecast could take; oracle - causal is what only hindsight over the episode knows.

    python benchmarks/headroom.py [--episodes 30] [--tracks pd,geo-route,geo-window,npu] [--splits test,...]

Writes ``benchmarks/results/headroom.md`` and the measured cells to ``runs/headroom.json`` (``--state``) atomically
after every (track, split); a rerun resumes from the state file.
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
from servegym.agents.families import EpisodeResult
from servegym.agents.rollout import seeds_from

import servegym  # noqa: F401  (registers the ids)
from servegym.errors import ConfigError
from servegym.outputs import write_text
from servegym.splits import FAMILY_SPLITS

RESULTS = Path(__file__).resolve().parent / "results"
_QUICK = {e.env_id: e.env_kwargs for e in bm.SUITE["quick"] if e.track is None}  # the ids' own sections, no track
#: track -> (env id, family). The ids of a family that share their model config share their baselines' rows.
TRACKS = {"pd": ("servegym/PDProvision-v0", "pd"), "geo-route": ("servegym/GeoRoute-v0", "geo"),
          "geo-window": ("servegym/GeoRouteWindow-v0", "geo"), "npu": ("servegym/NPUAutoscale-v0", "npu")}
#: geo causal references: the strongest rule played with part of what the geo oracle knows (GeoConfig fields).
GEO_CAUSAL = {"true lengths": {"osl_mode": "oracle"}, "fresh state": {"poll_interval_s": 0.5},
              "true lengths + fresh state": {"osl_mode": "oracle", "poll_interval_s": 0.5}}


def _with_geo(kwargs: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    cfg = dict(kwargs.get("config", {}))
    cfg["geo"] = {**cfg.get("geo", {}), **extra}
    return {**kwargs, "config": cfg}


def _runs(env_id: str, split: str, kwargs: dict[str, Any], names: list[str], seeds: list[int]
          ) -> tuple[dict[str, list[EpisodeResult]], str]:
    env = bm.make_split_env(env_id, split, kwargs)
    try:
        return bm.run_policy_episodes(env_id, env, names, seeds), protocol.kpi_metric(env)
    finally:
        env.close()


def _diff(name: str, what: str, res: list[EpisodeResult], strong: list[EpisodeResult], kpi: str) -> dict[str, Any]:
    v = protocol.paired_verdict(res, strong, kpi, "strongest")
    return {"row": name, "what": what, "kpi_diff": v.kpi_diff, "kpi_diff_ci": list(v.kpi_ci), "kpi_diff_pct": v.kpi_diff_pct,
            "slo_diff_pp": v.slo_diff_pp, "slo_diff_ci": list(v.slo_ci), "return_diff": v.return_diff,
            "return_diff_ci": list(v.return_ci), "episodes": v.episodes}


def measure(track: str, split: str, episodes: int) -> dict[str, Any]:
    """One track on one split (module docstring)."""
    env_id, fam = TRACKS[track]
    y = protocol.yardsticks(env_id)
    kwargs = _QUICK[env_id]
    seeds = seeds_from(bm.TEST_SEED, episodes)
    t0 = time.process_time()
    names = [y.roles()["strongest"], *([y.oracle] if y.oracle else []), *([y.causal] if y.causal else []),
             *([y.hindsight] if y.hindsight else [])]
    runs, kpi = _runs(env_id, split, kwargs, list(dict.fromkeys(names)), seeds)
    strong = runs[names[0]]
    rows = []
    if y.oracle:
        rows.append(_diff(f"oracle ({y.oracle}, {y.oracle_kind})", y.oracle_knows, runs[y.oracle], strong, kpi))
    if y.hindsight:
        rows.append(_diff(f"hindsight ({y.hindsight}, {y.hindsight_kind})", y.hindsight_knows, runs[y.hindsight],
                          strong, kpi))
    if y.causal:
        rows.append(_diff(f"causal ({y.causal})", y.causal_knows, runs[y.causal], strong, kpi))
    if fam == "pd":
        rows.append(_relaxation(split, seeds, strong))
    if fam == "geo":
        for what, extra in GEO_CAUSAL.items():
            try:
                r, _ = _runs(env_id, split, _with_geo(kwargs, extra), [names[0]], seeds)
            except ConfigError:  # the split sets that field itself (shift-osl's OSL predictor): not defined there
                continue
            rows.append(_diff(f"causal ({names[0]} + {what})", f"{names[0]} given {what} ({json.dumps(extra)})",
                              r[names[0]], strong, kpi))
    return {"track": track, "env_id": env_id, "split": split, "episodes": episodes, "kpi": kpi,
            "strongest": names[0], "strongest_kpi": protocol.mean_metric(strong, kpi),
            "strongest_slo_pct": protocol.mean_metric(strong, protocol.SLO_METRIC), "rows": rows,
            "cpu_s": time.process_time() - t0}


def _relaxation(split: str, seeds: list[int], strong: list[EpisodeResult]) -> dict[str, Any]:
    """pd: the oracle's start-up-free relaxation minus the strongest, in return units (it has no KPI)."""
    import numpy as np
    from servegym.baselines.pd_oracle import solve_oracle

    env = bm.make_split_env("servegym/PDProvision-v0", split, _QUICK["servegym/PDProvision-v0"])
    try:
        rel = {}
        for s in seeds:
            env.reset(seed=s)
            rel[s] = solve_oracle(env.unwrapped).relaxed_return
    finally:
        env.close()
    by = {r.seed: r.reward for r in strong}
    d = np.array([rel[s] - by[s] for s in seeds])
    lo, hi = protocol.crossed_ci(d.reshape(1, -1))
    return {"row": "relaxation (oracle without start-up delay, an upper bound)", "what": "return units",
            "kpi_diff": math.nan, "kpi_diff_ci": [math.nan, math.nan], "kpi_diff_pct": math.nan,
            "slo_diff_pp": math.nan, "slo_diff_ci": [math.nan, math.nan], "return_diff": float(d.mean()),
            "return_diff_ci": [lo, hi], "episodes": len(seeds)}


def _f(v: float, fmt: str) -> str:
    return "-" if v is None or not math.isfinite(v) else format(v, fmt)


def markdown(report: dict[str, Any]) -> str:
    lines = ["# Headroom in the KPI's units (`python benchmarks/headroom.py`)", "",
             "Per id and split, on the same episodes: each bound or reference minus the strongest baseline "
             "(negative KPI = less than the strongest), mean [95 % CI] over episodes, in % of the strongest's KPI, "
             "with the SLO and return differences. Learnable headroom = causal - strongest (a rule with a perfect "
             "forecast of the next minutes, deciding step by step); oracle - causal is what only hindsight over the "
             "episode knows.", ""]
    for key in sorted(report["cells"]):
        c = report["cells"][key]
        lines += [f"## {c['env_id']}, {c['split']} ({c['episodes']} episodes, {c['cpu_s']:.0f} CPU-s)", "",
                  f"Strongest `{c['strongest']}`: {c['strongest_kpi']:.4g} {c['kpi']}, SLO violation "
                  f"{c['strongest_slo_pct']:.4f} %.", "",
                  f"| minus the strongest | {c['kpi']} [95 % CI] | % | SLO pp [95 % CI] | return [95 % CI] |",
                  "|---|---|---|---|---|"]
        for r in c["rows"]:
            lines.append(f"| {r['row']} | {_f(r['kpi_diff'], '+.4g')} [{_f(r['kpi_diff_ci'][0], '+.4g')}, "
                         f"{_f(r['kpi_diff_ci'][1], '+.4g')}] | {_f(r['kpi_diff_pct'], '+.2f')} | "
                         f"{_f(r['slo_diff_pp'], '+.4f')} [{_f(r['slo_diff_ci'][0], '+.4f')}, {_f(r['slo_diff_ci'][1], '+.4f')}] | "
                         f"{_f(r['return_diff'], '+.4g')} [{_f(r['return_diff_ci'][0], '+.4g')}, "
                         f"{_f(r['return_diff_ci'][1], '+.4g')}] |")
        lines.append("")
    return "\n".join(lines)


#: The markers of the stress-track block (benchmarks/stress_tracks.py writes it; a rerun here keeps it).
STRESS_BEGIN, STRESS_END = "<!-- stress-tracks:begin -->", "<!-- stress-tracks:end -->"


def splice_stress(text: str, block: str) -> str:
    """``text`` with its stress-track block replaced by ``block`` (inserted after the intro paragraph if absent)."""
    if STRESS_BEGIN in text and STRESS_END in text:
        return text[:text.index(STRESS_BEGIN)] + block + text[text.index(STRESS_END) + len(STRESS_END):]
    head, sep, rest = text.partition("\n\n")
    intro, sep2, rest2 = rest.partition("\n\n")
    return head + sep + intro + sep2 + block + "\n\n" + rest2


def _keep_stress_tracks(out: Path, text: str) -> str:
    """``text`` with the stress-track block of the current ``out`` kept."""
    old = out.read_text() if out.exists() else ""
    if STRESS_BEGIN not in old or STRESS_END not in old:
        return text
    return splice_stress(text, old[old.index(STRESS_BEGIN):old.index(STRESS_END) + len(STRESS_END)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=30)
    ap.add_argument("--tracks", default=",".join(TRACKS))
    ap.add_argument("--splits", default=None, help="comma list (default: test and every named shift of the family)")
    ap.add_argument("--out", default=str(RESULTS / "headroom.md"), help="the report (markdown)")
    ap.add_argument("--state", default=str(RESULTS.parents[1] / "runs" / "headroom.json"),
                    help="the measured cells (JSON), read back to resume; outside the results folder")
    args = ap.parse_args(argv)
    tracks = [t for t in args.tracks.split(",") if t]
    if any(t not in TRACKS for t in tracks) or args.episodes < 2:
        print(f"--tracks: allowed {', '.join(TRACKS)}; --episodes >= 2", file=sys.stderr)
        return 2
    out, js = Path(args.out), Path(args.state)
    js.parent.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = json.loads(js.read_text()) if js.exists() else {"cells": {}}
    for t in tracks:
        fam = TRACKS[t][1]
        splits = args.splits.split(",") if args.splits else ["test", *(s for s in FAMILY_SPLITS[fam] if s.startswith("shift"))]
        for sp in splits:
            key = f"{t}/{sp}"
            old = report["cells"].get(key)
            if old and old["episodes"] == args.episodes:
                continue
            print(f"{key}: {args.episodes} episodes", file=sys.stderr, flush=True)
            try:
                report["cells"][key] = measure(t, sp, args.episodes)
            except ConfigError as exc:  # a split the id's config does not define (geo shift-topology on some presets)
                print(f"{key}: skipped ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)
                continue
            write_text(js, json.dumps(report, indent=1, default=float) + "\n")
            write_text(out, _keep_stress_tracks(out, markdown(report)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
