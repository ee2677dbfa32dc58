"""Steps per CPU-second of the native pd vector env against the single env and Gymnasium's SyncVectorEnv.

Usage: ``.venv/bin/python benchmarks/pd_vector_speed.py [--steps S] [--repeats R] [--write]``.
For each action mode (the three pd ids) and N in 1, 16, 256: the single env stepped S times (one
``PDProvisionEnv``, reset when an episode ends), ``gym.make_vec(id, N, vectorization_mode="sync")`` and
``gym.make_vec(id, N, vectorization_mode="vector_entry_point")`` (:class:`servegym.envs.pd.vector.PDVectorEnv`)
each stepped until they have made about S env steps (at least 4 vector steps), all with the same fixed
action, from one reset before the timed runs (episodes that end are reset inside them: the single env's
loop and the vector envs' next-step autoreset). Env steps per CPU-second of this process
(``time.process_time``; the machine is shared, so CPU time is the steadier figure), best of R runs, all in
one process so that the ratios compare like with like.
``--write`` writes ``benchmarks/results/pd_vector_speed.md`` (temp file + rename).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
from servegym.envs.pd.env import PDProvisionEnv

import servegym  # noqa: F401 (registers the ids)

IDS = {"absolute": "servegym/PDProvision-v0", "residual": "servegym/PDProvisionResidual-v0",
       "front": "servegym/PDProvisionFront-v0"}
NS = (1, 16, 256)


def _action(env: PDProvisionEnv) -> object:
    """A fixed mid-range action of the env's mode (what benchmarks/pd_env_speed.py steps with)."""
    if env.action_mode == "absolute":
        return np.array([6, 3])
    if env.action_mode == "residual":
        return env.follow_action()
    return min(12, env.front_slots - 1)


def _cpu_rate(fn: Callable[[], int], repeats: int) -> float:
    """Best env steps per CPU-second of ``fn`` (which returns its env-step count) over ``repeats`` runs."""
    best = 0.0
    for _ in range(repeats):
        c = time.process_time()
        n = fn()
        best = max(best, n / max(time.process_time() - c, 1e-9))
    return best


def _single(env_id: str, steps: int) -> Callable[[], int]:
    env = gym.make(env_id).unwrapped
    act = _action(env)
    env.reset(seed=0)

    def run() -> int:
        for i in range(steps):
            _, _, term, trunc, _ = env.step(act)
            if term or trunc:
                env.reset(seed=i + 1)
        return steps
    return run


def _vector(env_id: str, n: int, steps: int, mode: str) -> tuple[Callable[[], int], float]:
    """(the stepping loop, construction CPU seconds) of ``make_vec(env_id, n, mode)``."""
    c = time.process_time()
    venv = gym.make_vec(env_id, num_envs=n, vectorization_mode=mode)
    build = time.process_time() - c
    one = gym.make(env_id).unwrapped
    acts = np.stack([np.asarray(_action(one))] * n)
    iters = max(4, steps // n)
    venv.reset(seed=0)

    def run() -> int:
        for _ in range(iters):
            venv.step(acts)
        return iters * n
    return run, build


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=4096, help="env steps per timed run (default 4096)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--write", action="store_true", help="write benchmarks/results/pd_vector_speed.md")
    args = ap.parse_args()
    rows = []
    for mode, env_id in IDS.items():
        single = _cpu_rate(_single(env_id, args.steps), args.repeats)
        for n in NS:
            sync_run, sync_build = _vector(env_id, n, args.steps, "sync")
            vec_run, vec_build = _vector(env_id, n, args.steps, "vector_entry_point")
            sync = _cpu_rate(sync_run, args.repeats)
            vec = _cpu_rate(vec_run, args.repeats)
            rows.append((mode, n, single, sync, vec, sync_build, vec_build))
            print(f"{mode:9s} N={n:4d}  single {single:8.0f}  sync {sync:8.0f}  vector {vec:8.0f} steps/CPU-s  "
                  f"vector/sync {vec / sync:5.2f}x  vector/single {vec / single:5.2f}x  "
                  f"build sync {sync_build:.2f} s vector {vec_build:.2f} s", flush=True)
    if args.write:
        _write(rows, args)


def _write(rows: list[tuple], args: argparse.Namespace) -> None:
    lines = [
        "# pd native vector env: env steps per CPU-second", "",
        f"`benchmarks/pd_vector_speed.py --steps {args.steps} --repeats {args.repeats} --write`, "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, Python {platform.python_version()}, "
        f"numpy {np.__version__}, gymnasium {gym.__version__}, {os.cpu_count()} CPUs (shared with other jobs: "
        "CPU time of this process, best of the runs; every figure of a row comes from the same process).", "",
        "Fluid mode, default config (train split, 1,440-period days), a fixed mid-range action. *single*: one "
        "`PDProvisionEnv` stepped in a loop; *sync*: `gym.make_vec(id, N, vectorization_mode=\"sync\")` "
        "(Gymnasium's SyncVectorEnv over N `gym.make` envs); *vector*: `vectorization_mode=\"vector_entry_point\"` "
        "(`servegym.envs.pd.vector.PDVectorEnv`, N fluid periods per numpy batch). Results of the vector env "
        "equal the sync env's bit for bit (`tests/test_pd_vector.py`). Build: CPU seconds to construct the "
        "vector env (N envs; day tables are cached per process).", "",
        "| id | N | single | sync | vector | vector / sync | vector / single | build sync (s) | build vector (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for mode, n, single, sync, vec, sb, vb in rows:
        lines.append(f"| {IDS[mode]} | {n} | {single:,.0f} | {sync:,.0f} | {vec:,.0f} | {vec / sync:.2f}x | "
                     f"{vec / single:.2f}x | {sb:.2f} | {vb:.2f} |")
    out = Path(__file__).resolve().parent / "results" / "pd_vector_speed.md"
    tmp = out.with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
