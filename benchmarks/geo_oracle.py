"""Geo yardsticks on every split: naive (rr), the paper's method (milp), moer, the strongest baseline,
follow (the residual mode's zero action) and the hindsight oracle, on the leaderboard's configs.

For each geo env id and each test split / named shift / scenario variant it plays the same episodes
(reset seeds 0..N-1) with every yardstick and reports, as cost = -return (gCO2 with drain + one g per
SLO miss, the envs' return identity): the means with 95 % bootstrap CIs, the scores on the oracle scale
(per episode 100 (R - R_naive) / (R_oracle - R_naive), ``servegym.agents.protocol.oracle_scores``), the
oracle's margin over naive and its headroom over the strongest baseline (paired bootstrap CIs), which
oracle candidate won each episode, and the oracle's CPU seconds per episode (all candidate runs; of
which in the hindsight MILPs' solves). ``--select`` first picks the strongest non-learned baseline of
each id on the validation split (mean return over the episodes; every family baseline but the oracle).

``--best JSON`` adds to an earlier full result every non-oracle baseline per split and names the best one
beside the strongest (``split_best``), reusing the stored oracle costs after replaying a check.

Usage: python benchmarks/geo_oracle.py [--episodes 10] [--select-episodes 10] [--selection JSON] [--only LABELS]
[--best JSON] [--out benchmarks/results/geo_oracle]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import split_best  # the sibling module (benchmarks/ is on sys.path when run as a script)

import servegym  # noqa: F401  (registers the ids)

#: The leaderboard's config of each geo id (benchmarks/results/leaderboard.md).
CONFIGS: dict[str, dict[str, Any]] = {
    "servegym/GeoRoute-v0": {"preset": "mini", "action_mode": "residual", "reference": "milp"},
    "servegym/GeoRouteWindow-v0": {"preset": "mini", "action_mode": "residual", "geo": {"poll_interval_s": 5.0}},
}
#: (label, split, config changes): the test split, every named shift, and the scenario variants.
VARIANTS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("test", "test", {}),
    ("shift-load", "shift-load", {}),
    ("shift-stale", "shift-stale", {}),
    ("shift-topology", "shift-topology", {}),
    ("test load=high", "test", {"load": "high"}),
    ("test ci_time_scale=120", "test", {"ci_time_scale": 120.0}),
    ("shift-osl", "shift-osl", {}),
    ("shift-ci-forecast", "shift-ci-forecast", {}),
)
PAPER, NAIVE, MOER = "milp", "rr", "moer"
REPS = 2000


def _ci(x: np.ndarray, seed: int = 0) -> tuple[float, float]:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size < 2:
        v = float(x.mean()) if x.size else math.nan
        return (v, v)
    rng = np.random.default_rng(seed)
    boot = x[rng.integers(0, x.size, size=(REPS, x.size))].mean(axis=1)
    return (float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5)))


def _env(env_id: str, split: str, extra: dict[str, Any]) -> gym.Env:
    return gym.make(env_id, config={**CONFIGS[env_id], **extra, "split": split})


def _baseline(env: gym.Env, name: str, seed: int) -> dict[str, float]:
    from servegym.agents.adapters import run_geo_baseline

    c0 = time.process_time()
    r = run_geo_baseline(env, name, seed)
    return {"cost": -r.reward, "carbon_g": r.metrics["carbon_g"], "slo_pct": r.metrics["slo_violation_pct"],
            "cpu_s": time.process_time() - c0}


def _follow(env_id: str, env: gym.Env, seed: int) -> dict[str, float]:
    from servegym.agents import protocol
    from servegym.agents.adapters import GEO_METRICS
    from servegym.agents.rollout import play_episode

    c0 = time.process_time()
    r = play_episode(env, lambda obs, info, e: protocol.follow_action(e), seed, "follow", GEO_METRICS)
    return {"cost": -r.reward, "carbon_g": r.metrics["carbon_g"], "slo_pct": r.metrics["slo_violation_pct"],
            "cpu_s": time.process_time() - c0}


def _oracle(env: gym.Env, seed: int) -> dict[str, Any]:
    from servegym.agents.adapters import geo_return
    from servegym.baselines.geo.oracle import HindsightOracle

    base = env.unwrapped
    cfg, scen = base.episode_scenario(seed)
    ep = HindsightOracle().play(base.make_simulation, cfg, scen["sim_seed"],
                                lambda s, summary: geo_return(base.config, s, summary))
    s = ep.results.summary
    return {"cost": -geo_return(base.config, ep.sim, s), "carbon_g": float(s["carbon_g"]),
            "slo_pct": float(s["slo_violation_pct"]), "cpu_s": ep.cpu_s, "solver_cpu_s": ep.solver_cpu_s,
            "chosen": ep.chosen, "lp_gap": ep.lp_gap, "candidates": {k: -v for k, v in ep.returns.items()}}


def select_strongest(episodes: int) -> dict[str, Any]:
    """Mean cost of every family baseline (but the oracle) on the validation split, per id."""
    from servegym.agents.adapters import GEO_BASELINES

    out: dict[str, Any] = {}
    for env_id in CONFIGS:
        env = _env(env_id, "validation", {})
        means = {}
        for name in GEO_BASELINES:
            if name == "oracle":
                continue
            means[name] = float(np.mean([_baseline(env, name, s)["cost"] for s in range(episodes)]))
            print(f"  validation {env_id} {name}: {means[name]:.3f}", file=sys.stderr, flush=True)
        best = min(means, key=means.get)
        out[env_id] = {"strongest": best, "episodes": episodes, "mean_cost": means}
    return out


def run_variant(env_id: str, split: str, extra: dict[str, Any], episodes: int, strongest: str) -> dict[str, Any]:
    env = _env(env_id, split, extra)
    names = [NAIVE, PAPER, MOER] + ([strongest] if strongest not in (NAIVE, PAPER, MOER) else [])
    eps: dict[str, list[dict[str, Any]]] = {n: [] for n in [*names, "follow", "oracle"]}
    for s in range(episodes):
        for n in names:
            eps[n].append(_baseline(env, n, s))
        eps["follow"].append(_follow(env_id, env, s))
        eps["oracle"].append(_oracle(env, s))
    from servegym.agents.protocol import oracle_scores

    cost = {n: np.array([e["cost"] for e in v]) for n, v in eps.items()}
    naive, orc = cost[NAIVE], cost["oracle"]
    rows: dict[str, Any] = {}
    for n, c in cost.items():
        sc = oracle_scores(-c, -naive, -orc)
        rows[n] = {"cost_mean": float(c.mean()), "cost_ci": _ci(c), "score_mean": float(np.nanmean(sc)),
                   "score_ci": _ci(sc), "carbon_g": float(np.mean([e["carbon_g"] for e in eps[n]])),
                   "slo_pct": float(np.mean([e["slo_pct"] for e in eps[n]])),
                   "cpu_s": float(np.mean([e["cpu_s"] for e in eps[n]]))}
    strong = cost[strongest]
    chosen: dict[str, int] = {}
    for e in eps["oracle"]:
        chosen[e["chosen"]] = chosen.get(e["chosen"], 0) + 1
    gaps = [e["lp_gap"] for e in eps["oracle"] if np.isfinite(e["lp_gap"])]
    return {
        "env": env_id, "split": split, "extra": extra, "episodes": episodes, "strongest": strongest, "policies": rows,
        "margin_g": float((naive - orc).mean()), "margin_ci": _ci(naive - orc),
        "headroom_g": float((strong - orc).mean()), "headroom_ci": _ci(strong - orc),
        "headroom_moer_g": float((cost[MOER] - orc).mean()), "headroom_moer_ci": _ci(cost[MOER] - orc),
        "paper_gap_g": float((naive - cost[PAPER]).mean()),
        "oracle_cpu_s": float(np.mean([e["cpu_s"] for e in eps["oracle"]])),
        "oracle_cpu_s_max": float(np.max([e["cpu_s"] for e in eps["oracle"]])),
        "solver_cpu_s": float(np.mean([e["solver_cpu_s"] for e in eps["oracle"]])),
        "chosen": chosen, "lp_gap_max": float(max(gaps)) if gaps else math.nan,
        "oracle_candidates": [e["candidates"] for e in eps["oracle"]],
    }


def add_best(result: dict[str, Any]) -> None:
    """Per stored variant, every non-oracle family baseline on the same reset seeds, scored on the oracle
    scale with the stored per-episode oracle costs (the oracle's cost is its best candidate's, which the
    result keeps), and the best baseline beside the strongest (``split_best``). The oracle is replayed on
    the first seed of each variant and rr on all, and both must equal the stored costs (else the stored
    result is stale: rerun the whole script)."""
    from servegym.agents.adapters import GEO_BASELINES
    from servegym.agents.protocol import oracle_scores

    for v in result["variants"]:
        env = _env(v["env"], v["split"], v["extra"])
        seeds = range(v["episodes"])
        orc = np.array([min(c.values()) for c in v["oracle_candidates"]])
        again = _oracle(env, 0)["cost"]
        if abs(again - orc[0]) > 1e-9 * max(1.0, abs(again)):
            raise SystemExit(f"geo_oracle --best: {v['env']} {v['label']}: the oracle's seed-0 cost is {again:.6f} "
                             f"today against {orc[0]:.6f} stored; rerun without --best")
        cost = {n: np.array([_baseline(env, n, s)["cost"] for s in seeds]) for n in GEO_BASELINES if n != "oracle"}
        if abs(float(cost[NAIVE].mean()) - v["policies"][NAIVE]["cost_mean"]) > 1e-9 * max(1.0, float(cost[NAIVE].mean())):
            raise SystemExit(f"geo_oracle --best: {v['env']} {v['label']}: rr differs from the stored run; rerun without --best")
        scores = {n: dict(enumerate(oracle_scores(-c, -cost[NAIVE], -orc).tolist())) for n, c in cost.items()}
        v["best"] = split_best.best_baseline(scores, v["strongest"])
        print(f"{v['env']} {v['label']}: best {v['best']['best']} {v['best']['best_score']:.1f}, strongest "
              f"{v['strongest']} {v['best']['strongest_score']:.1f}", file=sys.stderr, flush=True)


def _f(x: float, nd: int = 2) -> str:
    return "n/a" if not np.isfinite(x) else f"{x:,.{nd}f}"


def _fci(m: float, ci: tuple[float, float], nd: int = 2) -> str:
    return f"{_f(m, nd)} [{_f(ci[0], nd)}, {_f(ci[1], nd)}]"


def markdown(result: dict[str, Any]) -> str:
    lines = ["# Geo yardsticks: the hindsight oracle on every split", "",
             "Generated by `python benchmarks/geo_oracle.py` "
             f"({result['episodes']} episodes per row, reset seeds 0-{result['episodes'] - 1}; "
             f"wall {result['wall_s']:.0f} s on the shared 2-core machine). Configs: the leaderboard's "
             "(mini preset, residual mode; GeoRouteWindow-v0 with 5-s polls). Cost = -return = gCO2 with drain "
             "+ 1 g per SLO miss (lower is better), mean [95 % bootstrap CI]. Score: per episode "
             "100 (R - R_rr) / (R_oracle - R_rr), mean [CI] (0 = naive rr, 100 = oracle). Margin = rr - oracle "
             "cost; headroom = strongest - oracle cost (paired CIs). Oracle CPU: all candidate runs per "
             "episode (mean / max), of which the hindsight MILPs' decisions (estimates, model build, HiGHS).", ""]
    sel = result.get("selection", {})
    for env_id, s in sel.items():
        ranked = sorted(s["mean_cost"].items(), key=lambda kv: kv[1])
        lines.append(f"- strongest of {env_id} on the validation split ({s['episodes']} episodes, mean cost): "
                     + ", ".join(f"`{k}` {v:.2f}" for k, v in ranked))
    lines.append("")
    for env_id in CONFIGS:
        lines += [f"## {env_id}", "",
                  "| split | rr cost | milp cost | moer cost | follow cost | oracle cost | milp score | moer score | "
                  "follow score | margin oracle-rr (g) | headroom vs strongest (g) | headroom vs strongest (score) | "
                  "oracle CPU s/ep (solver) | oracle picks |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for v in result["variants"]:
            if v["env"] != env_id:
                continue
            p = v["policies"]
            st = p[v["strongest"]]
            picks = ", ".join(f"{k} {n}" for k, n in sorted(v["chosen"].items(), key=lambda kv: -kv[1]))
            lines.append(
                f"| {v['label']} | {_fci(p['rr']['cost_mean'], p['rr']['cost_ci'])} | "
                f"{_fci(p['milp']['cost_mean'], p['milp']['cost_ci'])} | {_fci(p['moer']['cost_mean'], p['moer']['cost_ci'])} | "
                f"{_fci(p['follow']['cost_mean'], p['follow']['cost_ci'])} | "
                f"{_fci(p['oracle']['cost_mean'], p['oracle']['cost_ci'])} | "
                f"{_fci(p['milp']['score_mean'], p['milp']['score_ci'], 1)} | "
                f"{_fci(p['moer']['score_mean'], p['moer']['score_ci'], 1)} | "
                f"{_fci(p['follow']['score_mean'], p['follow']['score_ci'], 1)} | "
                f"{_fci(v['margin_g'], v['margin_ci'])} | {_fci(v['headroom_g'], v['headroom_ci'])} (`{v['strongest']}`) | "
                f"{_fci(100.0 - st['score_mean'], (100.0 - st['score_ci'][1], 100.0 - st['score_ci'][0]), 1)} | "
                f"{v['oracle_cpu_s']:.1f} / {v['oracle_cpu_s_max']:.1f} ({v['solver_cpu_s']:.2f}) | {picks} |")
        lines += ["", "KPIs (mean carbon over the serving window g / SLO violation %):", ""]
        for v in result["variants"]:
            if v["env"] != env_id:
                continue
            lines.append(f"- {v['label']}: " + "; ".join(
                f"{n} {r['carbon_g']:.2f} / {r['slo_pct']:.2f}" for n, r in v["policies"].items())
                + f"; largest LP-relaxation gap of the chosen hindsight MILP's windows: {_f(v['lp_gap_max'], 4)}")
        lines.append("")
        best = [(v["label"], v["best"]) for v in result["variants"] if v["env"] == env_id and "best" in v]
        if best:
            lines += split_best.markdown(best, env_id)
    return "\n".join(lines) + "\n"


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--select-episodes", type=int, default=10)
    ap.add_argument("--only", default=None, help="';'-separated variant labels to run (default: all)")
    ap.add_argument("--selection", default=None, help="JSON of an earlier --select run to reuse")
    ap.add_argument("--env", default=None, help="one env id only (default: both)")
    ap.add_argument("--merge", nargs="+", default=None, help="combine the JSON results of earlier partial runs")
    ap.add_argument("--best", default=None, metavar="JSON",
                    help="add, to an earlier full result, every baseline per split and the best beside the strongest")
    ap.add_argument("--out", default="benchmarks/results/geo_oracle")
    args = ap.parse_args(argv)
    if not 1 <= args.episodes <= 1000 or not 1 <= args.select_episodes <= 1000:
        print("geo_oracle: --episodes and --select-episodes must be in [1, 1000]", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    if args.merge is not None:
        parts = [json.loads(Path(p).read_text()) for p in args.merge]
        order = {(e, lab): i for i, (e, lab) in enumerate((e, v[0]) for e in CONFIGS for v in VARIANTS)}
        variants = sorted((v for p in parts for v in p["variants"]), key=lambda v: order[(v["env"], v["label"])])
        result = {"episodes": parts[0]["episodes"], "selection": parts[0]["selection"], "variants": variants,
                  "wall_s": max(p["wall_s"] for p in parts)}
        out = Path(args.out)
        _write_atomic(out.with_suffix(".json"), json.dumps(result, indent=1, default=float) + "\n")
        _write_atomic(out.with_suffix(".md"), markdown(result))
        print(markdown(result))
        return 0
    if args.best is not None:
        result = json.loads(Path(args.best).read_text())
        add_best(result)
        result["best_wall_s"] = time.perf_counter() - t0
        out = Path(args.out)
        _write_atomic(out.with_suffix(".json"), json.dumps(result, indent=1, default=float) + "\n")
        _write_atomic(out.with_suffix(".md"), markdown(result))
        print(markdown(result))
        return 0
    if args.selection is not None:
        selection = json.loads(Path(args.selection).read_text())
    else:
        selection = select_strongest(args.select_episodes)
    only = None if args.only is None else {s.strip() for s in args.only.split(";")}
    variants = []
    for env_id in CONFIGS:
        if args.env is not None and env_id != args.env:
            continue
        for label, split, extra in VARIANTS:
            if only is not None and label not in only:
                continue
            print(f"{env_id} {label} ...", file=sys.stderr, flush=True)
            v = run_variant(env_id, split, extra, args.episodes, selection[env_id]["strongest"])
            v["label"] = label
            variants.append(v)
    result = {"episodes": args.episodes, "selection": selection, "variants": variants,
              "wall_s": time.perf_counter() - t0}
    out = Path(args.out)
    _write_atomic(out.with_suffix(".json"), json.dumps(result, indent=1, default=float) + "\n")
    _write_atomic(out.with_suffix(".md"), markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
