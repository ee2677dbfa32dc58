"""Speed of servegym/PDProvision-v0 (fluid mode, and request mode briefly).

Usage: ``.venv/bin/python benchmarks/pd_env_speed.py [--steps N] [--request-steps M]``.
Reports env construction (tables cached after the first), reset, and steps/s with a fixed action
and with the min-power baseline in the loop. Target (issue 5): fluid mode >= 2,000 steps/s.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np
from servegym.baselines.pd import MinPowerPareto, run_policy
from servegym.envs.pd.env import PDProvisionEnv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=1440 * 3)
    ap.add_argument("--request-steps", type=int, default=30)
    args = ap.parse_args()
    t = time.perf_counter()
    env = PDProvisionEnv()
    t_first = time.perf_counter() - t
    t = time.perf_counter()
    PDProvisionEnv()
    t_cached = time.perf_counter() - t
    env.reset(seed=0)
    t = time.perf_counter()
    for _ in range(100):
        env.reset(seed=1)
    t_reset = (time.perf_counter() - t) / 100
    action = np.array([6, 3])
    n = 0
    t = time.perf_counter()
    while n < args.steps:
        env.reset(seed=n)
        for _ in range(min(1440, args.steps - n)):
            env.step(action)
            n += 1
    fixed = n / (time.perf_counter() - t)
    t = time.perf_counter()
    res = run_policy(env, MinPowerPareto(lookahead=1), seed=0)
    with_policy = res.steps / (time.perf_counter() - t)
    req = PDProvisionEnv({"mode": "request"})
    req.reset(seed=0)
    t = time.perf_counter()
    for _ in range(args.request_steps):
        req.step(action)
    request = args.request_steps / (time.perf_counter() - t)
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}")
    print(f"construct: first {t_first:.2f} s (trace moments + 96 mix tables), cached {t_cached * 1e3:.1f} ms")
    print(f"reset: {t_reset * 1e6:.0f} us")
    print(f"fluid step, fixed action: {fixed:,.0f} steps/s ({args.steps} steps)")
    print(f"fluid step + min-power+lookahead policy: {with_policy:,.0f} steps/s (one day)")
    print(f"request mode (PDSimulator), morning load: {request:,.1f} steps/s ({args.request_steps} steps)")


if __name__ == "__main__":
    main()
