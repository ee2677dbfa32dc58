"""NeuScale against Base on the npu env's test split, episode by episode: is the yardstick well-posed?

Each test episode of ``servegym/NPUAutoscale-v0`` (the env's defaults: 24-h episodes on a 2024 Azure test
weekday, reward per the Ideal oracle's mean epoch) is played by Base and by NeuScale with
:meth:`NPUAutoscaleEnv.run_baseline` (their own 60-s decision loop on the episode's workload and simulator
seed). Per episode: the drawn scenario, the return, whole-pool energy (MJ) and cost (USD), and SLO violation
(% of requests missing TTFT or TPOT), and how many episodes NeuScale's return is above Base's.

    nice -n 15 python benchmarks/npu_test_split.py [--episodes 10] [--hours 24] [--split test] [--out NAME]

Writes ``benchmarks/results/<NAME>.{md,json}`` (default ``npu_test_split``; atomically).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import servegym  # noqa: F401  (registers the ids)
from servegym.outputs import write_json, write_text

ENV = "servegym/NPUAutoscale-v0"
RESULTS = Path(__file__).resolve().parent / "results"
POLICIES = ("base", "neuscale")


def episode(env: Any, policy: str, seed: int) -> dict[str, Any]:
    """One episode of ``policy`` on reset seed ``seed``: return and whole-episode KPIs."""
    out = env.run_baseline(policy, seed=seed)
    s = out["summary"]
    return {"return": float(out["reward"]), "energy_mj": float(s["energy_j"]) / 1e6, "usd": float(s["usd"]),
            "slo_violation_pct": float(s["slo_violation_pct"]), "tokens": float(s["tokens"]),
            "misses": float(sum(i["slo_misses"] for i in out["infos"]))}


def run(episodes: int, hours: float, split: str) -> dict[str, Any]:
    env = gym.make(ENV, split=split, hours=hours).unwrapped
    rows = []
    t0 = time.process_time()
    for seed in range(episodes):
        env.reset(seed=seed)
        sc = {k: env.scenario[k] for k in ("model", "azure_trace", "day_label", "start_hour", "rate_rpm")}
        res = {p: episode(env, p, seed) for p in POLICIES}
        rows.append({"seed": seed, "scenario": sc, **res})
        b, n = res["base"], res["neuscale"]
        print(f"seed {seed} {sc['model']} {sc['azure_trace']} {sc['day_label']} {sc['start_hour']:.0f}h: return "
              f"{b['return']:.1f} -> {n['return']:.1f}, energy {b['energy_mj']:.1f} -> {n['energy_mj']:.1f} MJ, "
              f"SLO {b['slo_violation_pct']:.2f} -> {n['slo_violation_pct']:.2f} %", flush=True)
    wins = sum(r["neuscale"]["return"] > r["base"]["return"] for r in rows)
    ratio = {k: [r["neuscale"][k] / r["base"][k] for r in rows if r["base"][k] > 0] for k in ("energy_mj", "usd")}
    return {"env": ENV, "split": split, "hours": hours, "episodes": episodes, "rows": rows,
            "neuscale_return_above_base": int(wins),
            "median_energy_ratio": float(np.median(ratio["energy_mj"])) if ratio["energy_mj"] else float("nan"),
            "median_cost_ratio": float(np.median(ratio["usd"])) if ratio["usd"] else float("nan"),
            "cpu_s": round(time.process_time() - t0, 1)}


def markdown(r: dict[str, Any]) -> str:
    lines = [f"# NeuScale vs Base on the npu env's {r['split']} split",
             "",
             f"`{r['env']}` defaults, split `{r['split']}`, {r['hours']:g}-h episodes, reset seeds 0-{r['episodes'] - 1};"
             " each policy via `run_baseline` (its own 60-s loop on the episode's workload and simulator seed). "
             "Return: the env's reward (oracle mode: -energy per the Ideal's mean epoch - 50 x misses per mean "
             "epoch's arrivals). Energy and cost are whole-pool (idle and booting vPods included).",
             "",
             "| seed | model | trace | day | start h | return Base | return NS | energy MJ Base | NS | USD Base | NS |"
             " SLO viol. % Base | NS |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        sc, b, n = row["scenario"], row["base"], row["neuscale"]
        lines.append(f"| {row['seed']} | {sc['model']} | {sc['azure_trace']} | {sc['day_label']} | "
                     f"{sc['start_hour']:.0f} | {b['return']:.1f} | {n['return']:.1f} | {b['energy_mj']:.1f} | "
                     f"{n['energy_mj']:.1f} | {b['usd']:.0f} | {n['usd']:.0f} | {b['slo_violation_pct']:.2f} | "
                     f"{n['slo_violation_pct']:.2f} |")
    lines += ["",
              f"NeuScale's return is above Base's on **{r['neuscale_return_above_base']} of {r['episodes']}** "
              f"episodes; median NeuScale/Base energy {r['median_energy_ratio']:.3f}, cost "
              f"{r['median_cost_ratio']:.3f}. {r['cpu_s']:.0f} CPU-s.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--split", default="test")
    ap.add_argument("--out", default="npu_test_split")
    a = ap.parse_args(argv)
    r = run(a.episodes, a.hours, a.split)
    RESULTS.mkdir(exist_ok=True)
    write_json(RESULTS / f"{a.out}.json", r)
    write_text(RESULTS / f"{a.out}.md", markdown(r))
    print(markdown(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
