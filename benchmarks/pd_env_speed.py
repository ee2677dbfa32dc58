"""Speed of servegym/PDProvision-v0 (fluid mode, and request mode briefly), plus the baseline table.

Usage: ``.venv/bin/python benchmarks/pd_env_speed.py [--steps N] [--request-steps M] [--write]``.
Reports env construction (tables cached after the first), reset, and steps/s (wall and CPU time of this
process, median of 3 runs) with a fixed action (absolute, residual and front action modes; an episode that
terminates on the backlog limit is reset) and with the min-power baseline in the loop; ``--write``
also runs the baselines (seed 0, whole day; the configured day and the train split's draw) and writes
``benchmarks/results/pd_env_speed.md``.
Target: fluid mode >= 2,000 steps/s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from servegym.baselines.pd import MinPowerPareto, compare_policies, run_policy
from servegym.envs.pd.env import PDEnvConfig, PDProvisionEnv


def _timed(fn: Callable[[], int], repeats: int = 3) -> tuple[float, float]:
    """(median steps per wall s, median steps per CPU s) of ``fn`` returning its step count."""
    wall, cpu = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        n = fn()
        wall.append(n / (time.perf_counter() - t))
        cpu.append(n / max(time.process_time() - c, 1e-9))
    return statistics.median(wall), statistics.median(cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=1440 * 2)
    ap.add_argument("--request-steps", type=int, default=20)
    ap.add_argument("--write", action="store_true", help="write benchmarks/results/pd_env_speed.md")
    args = ap.parse_args()
    t = time.perf_counter()
    env = PDProvisionEnv()
    t_first = time.perf_counter() - t
    t = time.perf_counter()
    PDProvisionEnv()
    t_cached = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(100):
        env.reset(seed=1)
    t_reset = (time.perf_counter() - t) / 100
    action = np.array([6, 3])

    def loop(e: PDProvisionEnv, act: object) -> Callable[[], int]:
        def run() -> int:
            n = 0
            e.reset(seed=n)
            while n < args.steps:
                _, _, term, trunc, _ = e.step(act)
                n += 1
                if term or trunc:
                    e.reset(seed=n)
            return n
        return run

    fixed_wall, fixed_cpu = _timed(loop(env, action))
    lv = PDEnvConfig().residual_levels
    res_wall, res_cpu = _timed(loop(PDProvisionEnv({"action_mode": "residual"}), np.array([lv, lv])))
    front_wall, front_cpu = _timed(loop(PDProvisionEnv({"action_mode": "front"}), 12))
    pol_wall, pol_cpu = _timed(lambda: run_policy(env, MinPowerPareto(lookahead=1), seed=0).steps)
    req = PDProvisionEnv({"mode": "request"})
    req.reset(seed=0)

    def request() -> int:
        for _ in range(args.request_steps):
            req.step(action)
        return args.request_steps

    req_wall, _ = _timed(request, repeats=1)
    lines = [
        f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}, {os.cpu_count()} CPUs",
        f"construct: first {t_first:.2f} s (trace moments + mix tables), cached {t_cached * 1e3:.1f} ms",
        f"reset: {t_reset * 1e6:.0f} us",
        f"fluid step, fixed action: {fixed_wall:,.0f} steps/s wall, {fixed_cpu:,.0f} steps/CPU-s",
        f"fluid step, residual mode, zero change: {res_wall:,.0f} steps/s wall, {res_cpu:,.0f} steps/CPU-s",
        f"fluid step, front mode, fixed slot 12: {front_wall:,.0f} steps/s wall, {front_cpu:,.0f} steps/CPU-s",
        f"fluid step + min-power+lookahead policy: {pol_wall:,.0f} steps/s wall, {pol_cpu:,.0f} steps/CPU-s",
        f"request mode (PDSimulator), first {args.request_steps} periods: {req_wall:,.1f} steps/s wall",
    ]
    print("\n".join(lines))
    if not args.write:
        return
    def table(config: dict | None) -> str:
        rows = [r.summary() for r in compare_policies(config, seed=0)]
        out = ["| policy | energy kWh | carbon g | cost USD | SLO violations % | cap excess kWh |",
               "|---|---:|---:|---:|---:|---:|"]
        out += [f"| {r['policy']} | {r['energy_kwh']:.1f} | {r['carbon_g']:,.0f} | {r['cost_usd']:.2f} | "
                f"{r['slo_violation_pct']:.2f} | {r['cap_excess_kwh']:.3f} |" for r in rows]
        return "\n".join(out)

    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = (f"# PDProvision-v0 speed and baselines\n\n{stamp}; produced by `benchmarks/pd_env_speed.py --write` "
            "(CPUs shared with other jobs: the CPU-time figures are the steadier ones). The speed loops use the "
            "default config (split 'train': each reset draws a day).\n\n"
            + "\n".join(f"- {line}" for line in lines)
            + "\n\n## Baselines on the configured day (`split=None`: both 2024 Azure traces' Monday 13 May, the "
              "illustrative three-trace mix), seed 0, "
              "fluid mode\n\n" + table({"split": None})
            + "\n\n## Baselines on the train split's day for seed 0 (azure-conv), fluid mode\n\n"
            + table(None) + "\n")
    out = Path(__file__).parent / "results" / "pd_env_speed.md"
    out.write_text(text)
    print(f"written {out}")


if __name__ == "__main__":
    main()
