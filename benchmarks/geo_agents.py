"""Geo learned agents against the strongest baseline: ablation, generalization to the named shifts, and the
time to the strongest baseline's validation score.

    python benchmarks/geo_agents.py ablation RUN.json [RUN.json ...]        # stored suite runs (test split)
    python benchmarks/geo_agents.py shifts --models DIR --episodes 5         # the suite's agents on the shifts
    python benchmarks/geo_agents.py time RUN.json                            # validation curve vs strongest

``ablation`` reads stored suite runs (``benchmarks/results/suite_runs/quick/<id>.json``, or copies of
earlier ones) and prints, per run, the agent's and ``follow``'s score (0 = rr, 100 = oracle), the KPI
difference to the strongest baseline with its paired 95 % CI, the SLO difference, the verdict and the
training cost. ``shifts`` plays the selected models of a suite run (``<DIR>/GeoRoute-v0_<algo>_s<k>/best_model.zip``)
with ``follow`` and the id's strongest baseline on each named shift and prints the paired verdicts (KPI only:
the oracle is not played there). ``time`` plays the strongest baseline and the scale's references on the
validation seeds the training evaluated on, and reports, per training seed, the first evaluation whose
validation score reached the strongest baseline's, in environment steps and in CPU seconds (the run's CPU
time prorated over its steps; ``--cpu-s`` is the suite's measured user+sys).
Results are written with ``--out`` (markdown, atomically).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from servegym.agents import protocol
from servegym.agents.benchmark import (
    TEST_SEED,
    VALIDATION_SEED,
    SuiteEntry,
    leaderboard,
    make_split_env,
    run_policy_episodes,
)
from servegym.agents.families import family_for
from servegym.agents.rollout import agent_act_fn, play_episode, seeds_from
from servegym.agents.suite_runs import _tuple
from servegym.agents.train import load_agent

from servegym.outputs import write_text


def _load(path: Path) -> tuple[SuiteEntry, list[dict[str, Any]]]:
    data = json.loads(path.read_text())
    e = SuiteEntry(**{**data["entry"], "baselines": _tuple(data["entry"].get("baselines"))})
    return e, data["outputs"]


def ablation(paths: list[Path]) -> str:
    lines = ["| run | reference | warm start | steps x seeds | policy | score mean [95% CI] | KPI | KPI diff vs "
             "strongest [95% CI] | SLO agent / strongest % | beats strongest | train wall s (sum) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in paths:
        e, outs = _load(p)
        df, _ = leaderboard([e], outs)
        ref = e.env_kwargs.get("config", {}).get("reference", "milp")
        strong = df[df.role == "strongest"].iloc[0]
        for _, r in df[df.role.isin(["agent", "follow"])].iterrows():
            kpi = r["kpi"]
            lines.append(
                f"| {p.name} | {ref} | {e.hyperparams or 'no'} | {e.timesteps:,} x {e.seeds} | {r.policy} | "
                f"{r.score_mean:.1f} [{r.score_mean_lo:.1f}, {r.score_mean_hi:.1f}] | {kpi} {r[kpi]:.3f} | "
                f"{r.kpi_diff_vs_strongest:+.3f} [{r.kpi_diff_lo:+.3f}, {r.kpi_diff_hi:+.3f}] | "
                f"{r.slo_violation_pct:.3f} / {strong.slo_violation_pct:.3f} | "
                f"{'yes' if r.beats_strongest else 'no'} | {r.wall_s:.0f} |")
    return "\n".join(lines) + "\n"


def shifts(models: Path, env_id: str, kwargs: dict[str, Any], splits: list[str], episodes: int) -> str:
    fam = family_for(env_id)
    name = env_id.split("/")[-1]
    paths = sorted(models.glob(f"{name}_*_s*/best_model.zip"))
    if not paths:
        raise SystemExit(f"no {name}_*_s*/best_model.zip under {models}")
    strongest = protocol.yardsticks(env_id).strongest
    lines = [f"{len(paths)} agents ({', '.join(p.parent.name for p in paths)}), {episodes} episodes per shift "
             f"(reset seeds {TEST_SEED}..{TEST_SEED + episodes - 1}); strongest = `{strongest}` (chosen on validation); "
             "KPI differences are paired over the episodes (agents averaged over their seeds).", "",
             f"| split | {strongest} carbon_g, SLO | follow | agent | agent vs "
             f"{strongest}: KPI diff [95% CI], SLO diff pp | beats | follow vs {strongest} | CPU s |",
             "|---|---|---|---|---|---|---|---|"]
    agents = [load_agent(p, env_id=env_id, env_kwargs=kwargs) for p in paths]
    kpi = "carbon_g"
    for split in splits:
        t0 = time.process_time()
        env = make_split_env(env_id, split, kwargs)
        seeds = seeds_from(TEST_SEED, episodes)
        res = run_policy_episodes(env_id, env, [strongest, protocol.FOLLOW], seeds)
        agent_res = []
        for model, norm, _ in agents:
            act = agent_act_fn(model, norm)
            for s in seeds:
                r = play_episode(env, act, s, "agent", fam.metrics)
                agent_res.append(r)
        env.close()
        v = protocol.paired_verdict(agent_res, res[strongest], kpi, strongest)
        vf = protocol.paired_verdict(res[protocol.FOLLOW], res[strongest], kpi, strongest)

        def m(rs: list[Any]) -> str:
            return (f"{np.mean([r.metrics[kpi] for r in rs]):.3f} g, "
                    f"{np.mean([r.metrics[protocol.SLO_METRIC] for r in rs]):.3f} %")

        lines.append(f"| {split} | {m(res[strongest])} | {m(res[protocol.FOLLOW])} | {m(agent_res)} | "
                     f"{v.kpi_diff:+.3f} [{v.kpi_ci[0]:+.3f}, {v.kpi_ci[1]:+.3f}], {v.slo_diff_pp:+.3f} | "
                     f"{'yes' if v.beats else 'no'} | {vf.kpi_diff:+.3f} [{vf.kpi_ci[0]:+.3f}, {vf.kpi_ci[1]:+.3f}]"
                     f"{' beats' if vf.beats else ''} | {time.process_time() - t0:.0f} |")
        print(lines[-1], flush=True)
    return "\n".join(lines) + "\n"


def time_to_strongest(path: Path, cpu_s: float | None) -> str:
    e, outs = _load(path)
    trains = sorted((o for o in outs if o["kind"] == "train"), key=lambda o: o["seed"])
    refs = protocol.checkpoint_references(e.env_id) or {}
    strongest = protocol.yardsticks(e.env_id).strongest
    env = make_split_env(e.env_id, "validation", e.env_kwargs)
    seeds = seeds_from(VALIDATION_SEED, e.val_episodes)
    res = run_policy_episodes(e.env_id, env, [refs["naive"], refs["best"], strongest, protocol.FOLLOW], seeds)
    env.close()

    def score(rs: list[Any]) -> float:
        return float(np.mean(protocol.episode_scores(rs, res[refs["naive"]], res[refs["best"]])))

    s_strong, s_follow = score(res[strongest]), score(res[protocol.FOLLOW])
    total_wall = sum(o["train_s"] for o in trains)
    lines = [f"Validation ({e.val_episodes} episodes, seeds {seeds[0]}..{seeds[-1]}, the checkpoint-selection scale: "
             f"0 = `{refs['naive']}`, 100 = `{refs['best']}`): strongest `{strongest}` {s_strong:.1f}, "
             f"follow {s_follow:.1f}.", "",
             "| training seed | validation scores at evaluations (steps: score) | first >= strongest (steps) | "
             "CPU s to it |", "|---|---|---|---|"]
    for o in trains:
        hist = [(int(h["timesteps"]), float(h["normalized_score"])) for h in o["validation"]]
        first = next((t for t, s in hist if s >= s_strong), None)
        share = o["train_s"] / total_wall if total_wall else 0.0
        cpu = None if (first is None or cpu_s is None) else cpu_s * share * first / max(e.timesteps, 1)
        lines.append(f"| {o['seed']} | {', '.join(f'{t:,}: {s:.1f}' for t, s in hist)} | "
                     f"{'never' if first is None else f'{first:,}'} | {'-' if cpu is None else f'{cpu:.0f}'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("ablation")
    a.add_argument("runs", nargs="+", type=Path)
    s = sub.add_parser("shifts")
    s.add_argument("--models", type=Path, required=True)
    s.add_argument("--env", default="servegym/GeoRoute-v0")
    s.add_argument("--run", type=Path, required=True, help="the stored suite run (for the env kwargs)")
    s.add_argument("--splits", default="shift-stale,shift-load,shift-topology,shift-osl,shift-ci-forecast")
    s.add_argument("--episodes", type=int, default=5)
    t = sub.add_parser("time")
    t.add_argument("run", type=Path)
    t.add_argument("--cpu-s", type=float, default=None)
    for p in (a, s, t):
        p.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.cmd == "ablation":
        text = ablation(args.runs)
    elif args.cmd == "shifts":
        e, _ = _load(args.run)
        text = shifts(args.models, args.env, e.env_kwargs, args.splits.split(","), args.episodes)
    else:
        text = time_to_strongest(args.run, args.cpu_s)
    print(text)
    if args.out is not None:
        write_text(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
