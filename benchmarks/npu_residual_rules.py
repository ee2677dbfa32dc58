"""Can a simple state-dependent rule around NeuScale beat it on the validation split? (the check before training
an agent around the strongest npu baseline): NPUAutoscaleResidual-v0 (reference NeuScale, the quick suite's 2-h
horizon) played on the validation split only with

- ``g<i> -1`` / ``g<i> +1``: one env group's count changed by one ladder level at every epoch (the other groups
  follow NeuScale; a group where NeuScale has no vPods is masked to 0 by the env), and
- gated rules that lower every live group of a phase by one level only when the observation says it has room:
  ``util``: the group's utilization below a threshold; ``cap``: its 30-min peak request rate at most a share of
  what one level fewer vPods serve (``vpod_rate`` x the lower count, both observation entries); the ``range:``
  rows read the group state over each group's whole length range (``group_state_obs="range"``: with the default
  reading, utilization is 0 wherever NeuScale's vPods sit inside a range rather than at its edge),

each against NeuScale (= ``follow``) under the protocol's paired verdict (:mod:`servegym.agents.verdict`)
(results stored before 2026-12-07 were judged with the earlier rule: episodes-only CIs, mean SLO within max(0.05 pp, 10 %)). Test episodes are not played: a rule
that won here would be the one to test.

    nice -n 15 python benchmarks/npu_residual_rules.py [--episodes 10] [--hours 2]

Writes ``benchmarks/results/learnability/npu_neuscale_rules_probe.{md,json}`` (atomically).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from npu_yardsticks import git_commit  # beside this script
from servegym.agents import benchmark as bm
from servegym.agents import protocol
from servegym.agents.families import family_for
from servegym.agents.rollout import play_episode, seeds_from
from servegym.envs.npu.env_config import RESIDUAL_STEPS

import servegym  # noqa: F401  (registers the ids)
from servegym.outputs import write_json, write_text

ENV = "servegym/NPUAutoscaleResidual-v0"
OUT = Path(__file__).resolve().parent / "results" / "learnability" / "npu_neuscale_rules_probe"
Act = Callable[[Any, Any, gym.Env], np.ndarray]


def group_act(g: int, step: int) -> Act:
    """Change env group ``g`` (prefill's first, then decode's) by ``step`` ladder levels at every epoch."""
    v = RESIDUAL_STEPS.index(step)

    def act(obs: Any, info: Any, env: gym.Env) -> np.ndarray:
        u = env.unwrapped
        a = np.zeros(u.action_space.shape, dtype=np.int64)
        if g < len(u.groups) and u.state.ref_counts[g] > 0:
            a[g] = v
        return a
    return act


def gated_act(phase: str, kind: str, thr: float) -> Act:
    """Lower each live ``phase`` group by one level when ``kind`` (util, cap) says it has room (module docstring)."""
    down = RESIDUAL_STEPS.index(-1)

    def act(obs: Any, info: Any, env: gym.Env) -> np.ndarray:
        u = env.unwrapped
        f = u.obs_fields.index
        a = np.zeros(u.action_space.shape, dtype=np.int64)
        levels = u.levels.astype(float)
        for g, (ph, edge) in enumerate(u.groups):
            if ph != phase or u.state.ref_counts[g] <= 0:
                continue
            key = f"{ph}[{edge}]"
            if kind == "util":
                a[g] = down if obs[f(key + ".util")] < thr else 0
                continue
            target = obs[f(key + ".reference_target/max_level")] * levels.max()
            lower = levels[levels < target - 1e-9]
            if lower.size and lower.max() >= 1:
                per_vpod, peak = obs[f(key + ".vpod_rate/mean_rate")], obs[f(key + ".rate_peak/mean_rate")]
                a[g] = down if per_vpod > 0 and peak <= thr * lower.max() * per_vpod else 0
        return a
    return act


def policies() -> dict[str, Act]:
    """Name -> action function; names starting ``range:`` are played with ``group_state_obs="range"``."""
    out: dict[str, Act] = {"follow": group_act(0, 0)}
    for g in range(10):
        for step in (-1, 1):
            out[f"g{g} {step:+d}"] = group_act(g, step)
    for thr in (0.3, 0.5, 0.7):
        out[f"decode util < {thr}"] = gated_act("decode", "util", thr)
    for thr in (0.5, 0.7, 0.9):
        out[f"decode cap {thr}"] = gated_act("decode", "cap", thr)
    for thr in (0.5, 0.7):
        out[f"prefill cap {thr}"] = gated_act("prefill", "cap", thr)
    for thr in (0.3, 0.5, 0.7, 0.9):
        out[f"range: decode util < {thr}"] = gated_act("decode", "util", thr)
    return out


def play(episodes: int, hours: float) -> dict[str, Any]:
    envs = {obs: gym.make(ENV, split="validation", config={"hours": hours, "group_state_obs": obs})
            for obs in ("bucket", "range")}
    env = envs["bucket"]
    seeds = seeds_from(bm.VALIDATION_SEED, episodes)
    metrics = family_for(ENV).metrics
    rows, base, groups = [], None, None
    try:
        for name, act in policies().items():
            c0 = os.times()
            on = envs["range" if name.startswith("range:") else "bucket"]
            res = [play_episode(on, act, s, name, metrics) for s in seeds]
            c1 = os.times()
            groups = groups or [f"{p}[{e}]" for p, e in env.unwrapped.groups]
            base = base or res
            v = protocol.paired_verdict(res, base, "energy_j", "neuscale")
            rows.append({"policy": name, "energy_mj": protocol.mean_metric(res, "energy_j") / 1e6,
                         "slo_violation_pct": protocol.mean_metric(res, protocol.SLO_METRIC),
                         "return": float(np.mean([r.reward for r in res])), "verdict": v.as_dict(),
                         "energy_diff_mj": [(r.metrics["energy_j"] - b.metrics["energy_j"]) / 1e6
                                            for r, b in zip(res, base, strict=True)],
                         "cpu_s": (c1.user - c0.user) + (c1.system - c0.system)})
    finally:
        for e in envs.values():
            e.close()
    return {"seeds": seeds, "groups": groups, "rows": rows}


def markdown(r: dict[str, Any]) -> str:
    lines = [f"# Rules around NeuScale on the validation split ({ENV}, {r['hours']:g}-h episodes)", "",
             f"`{r['command']}` at commit `{r['commit']}`; seeds {r['seeds'][0]}-{r['seeds'][-1]}. Env groups "
             f"g0-g{len(r['groups']) - 1}: {', '.join(r['groups'])} (NeuScale places vPods in only a few; a "
             "change of a group without vPods is masked to 0, so its row equals `follow`). Every row against "
             f"NeuScale (= `follow`) on the same episodes ({protocol.BEATS_RULE}). Return: the env's reward "
             "(relative to Base, misses at 50x).", "",
             "| policy | energy MJ | energy diff MJ [95 % CI] | per-episode energy diff MJ | SLO viol. % | "
             "SLO diff pp (tol.) | return | beats | CPU s |", "|---|---|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        v = row["verdict"]
        lines.append(f"| {row['policy']} | {row['energy_mj']:.1f} | {v['kpi_diff'] / 1e6:+.2f} "
                     f"[{v['kpi_diff_ci'][0] / 1e6:+.2f}, {v['kpi_diff_ci'][1] / 1e6:+.2f}] | "
                     f"{' '.join(f'{x:+.1f}' for x in row['energy_diff_mj'])} | {row['slo_violation_pct']:.2f} | "
                     f"{v['slo_diff_pp']:+.2f} ({v['slo_tolerance_pp']:.2f}) | {row['return']:.1f} | "
                     f"{'yes' if v['beats'] else 'no'} | {row['cpu_s']:.1f} |")
    lines += ["", f"Wall {r['wall_s']:.0f} s, CPU {r['cpu_s']:.0f} s (nice 15, shared 2-core machine).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--hours", type=float, default=2.0)
    args = ap.parse_args(argv)
    t0, c0 = time.perf_counter(), os.times()
    report: dict[str, Any] = {"hours": args.hours, "commit": git_commit(),
                              "command": f"python benchmarks/npu_residual_rules.py --episodes {args.episodes} "
                                         f"--hours {args.hours:g}", **play(args.episodes, args.hours)}
    c1 = os.times()
    report["wall_s"] = time.perf_counter() - t0
    report["cpu_s"] = (c1.user - c0.user) + (c1.system - c0.system)
    text = markdown(report)
    write_json(OUT.with_suffix(".json"), report, indent=1, default=float)
    write_text(OUT.with_suffix(".md"), text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
