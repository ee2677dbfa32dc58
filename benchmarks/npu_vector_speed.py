"""Steps per CPU-second of the npu vector env (``make_vec`` vector entry point) against SyncVectorEnv and one env.

Usage: ``nice -n 15 .venv/bin/python benchmarks/npu_vector_speed.py [--steps S] [--write]``. For each npu id
(fluid mode, the default) and N in 1, 16, 256: ``gym.make_vec(id, N, vectorization_mode="vector_entry_point")``
(:class:`servegym.envs.npu.vector.NPUVectorEnv`) and ``vectorization_mode="sync"`` each stepped until about S env
steps (at least 2 vector steps) with the all-zero action (absolute: the smallest count of option 0, masked counts
adjusted; residual: NeuScale itself), after one untimed reset; the single env stepped S times. 1-hour episodes of
one model (the train split's scenarios), so that episodes end and reset inside the timed runs. One untimed step
first loads the fluid kernel (numba's cache) and the catalog. Env steps per CPU
second (``time.process_time``), one process. ``--write`` writes ``benchmarks/results/npu_vector_speed.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import gymnasium as gym
import numpy as np

import servegym  # noqa: F401 (registers the ids)
from servegym.outputs import atomic_path

IDS = ("servegym/NPUAutoscale-v0", "servegym/NPUAutoscaleResidual-v0")
NS = (1, 16, 256)
KW = {"hours": 1.0, "split_models": ["Llama-3-70B"]}


def rate_vec(env_id: str, n: int, mode: str, steps: int) -> float:
    venv = gym.make_vec(env_id, num_envs=n, vectorization_mode=mode, **KW)
    venv.reset(seed=0)
    act = np.zeros(venv.action_space.shape, dtype=np.int64)
    k = max(2, steps // n)
    c = time.process_time()
    for _ in range(k):
        venv.step(act)
    cpu = time.process_time() - c
    venv.close()
    return k * n / max(cpu, 1e-9)


def rate_single(env_id: str, steps: int) -> float:
    env = gym.make(env_id, **KW)
    env.reset(seed=0)
    act = np.zeros(env.action_space.shape, dtype=np.int64)
    c = time.process_time()
    for _ in range(steps):
        _, _, te, tr, _ = env.step(act)
        if te or tr:
            env.reset()
    return steps / max(time.process_time() - c, 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=512)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    rows = []
    warm = gym.make(IDS[0], **KW)  # untimed: load (or compile) the fluid kernel and the model's catalog
    warm.reset(seed=0)
    warm.step(np.zeros(warm.action_space.shape, dtype=np.int64))
    for env_id in IDS:
        single = rate_single(env_id, args.steps)
        for n in NS:
            v = rate_vec(env_id, n, "vector_entry_point", args.steps)
            s = rate_vec(env_id, n, "sync", args.steps)
            rows.append((env_id, n, single, s, v))
            print(env_id, n, f"single {single:.0f} sync {s:.0f} vector {v:.0f}", flush=True)
    if args.write:
        lines = [f"# npu vector env speed ({platform.processor() or platform.machine()}, shared 2-core machine)", "",
                 f"Command: `nice -n 15 .venv/bin/python benchmarks/npu_vector_speed.py --steps {args.steps} --write`."
                 f" Env steps per CPU-second, fluid mode, 1-h episodes of Llama-3-70B, all-zero action. Load average "
                 f"at the end: {os.getloadavg()[0]:.1f}.", "",
                 "| id | N | single | sync | vector | vector/sync |", "|---|---:|---:|---:|---:|---:|"]
        for env_id, n, single, s, v in rows:
            lines.append(f"| {env_id} | {n} | {single:,.0f} | {s:,.0f} | {v:,.0f} | {v / s:.2f}x |")
        with atomic_path("benchmarks/results/npu_vector_speed.md") as tmp:
            tmp.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
