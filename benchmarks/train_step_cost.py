"""CPU cost of one training step (env + learner) on the configs of the full budget, against the env's own step.

Usage: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/train_step_cost.py [--steps S] [--envs N,...] [--write]``.
For each case (the full suite's configs, :data:`servegym.agents.benchmark.SUITE` ``full``): the suite's algorithm
with SB3's default hyperparameters (``n_steps`` = 2048 / N, so one rollout is 2,048 steps at every N), N envs in a
``DummyVecEnv`` (``make_vec_env``), ``learn`` of 256 steps untimed (kernels loaded, first resets), then ``learn``
of S steps timed in CPU seconds (``time.process_time``, one process): rollouts (the env's steps and resets and
the policy's forward passes) and the updates. ``env_ms`` is the env alone on the same config: the same number of
steps with actions sampled from the action space (masked where the env has masks), resets included. The figure
that :data:`servegym.agents.benchmark.FULL_COST_S_PER_SEED` uses is ``ms/step`` at N = 1. ``--write`` writes
``benchmarks/results/train_step_cost.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from typing import Any

import gymnasium as gym
import numpy as np

import servegym  # noqa: F401 (registers the ids)
from servegym.outputs import atomic_path

#: name -> (env id, env kwargs, algorithm): the full budget's configs of the two families the speed work touched
CASES: dict[str, tuple[str, dict[str, Any], str]] = {
    "NPUAutoscaleResidual-v0 24 h": ("servegym/NPUAutoscaleResidual-v0", {"config": {"hours": 24.0}}, "maskable-ppo"),
    "NPUAutoscale-v0 24 h": ("servegym/NPUAutoscale-v0", {"config": {"hours": 24.0}}, "maskable-ppo"),
    "GeoRouteWindow-v0 residual (small, poll 5 s)": (
        "servegym/GeoRouteWindow-v0", {"config": {"action_mode": "residual", "geo": {"poll_interval_s": 5.0}}}, "ppo"),
}


def learner_cost(env_id: str, kw: dict[str, Any], algo: str, steps: int, n_envs: int) -> float:
    """CPU seconds per training step of ``algo`` on ``n_envs`` envs of ``env_id``."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    cls = MaskablePPO if algo == "maskable-ppo" else PPO
    venv = make_vec_env(env_id, n_envs=n_envs, seed=0, env_kwargs=kw)
    model = cls("MlpPolicy", venv, n_steps=2048 // n_envs, seed=0, verbose=0, device="cpu")
    model.learn(256)
    c = time.process_time()
    model.learn(steps, reset_num_timesteps=False)
    cpu = time.process_time() - c
    venv.close()
    return cpu / steps


def env_cost(env_id: str, kw: dict[str, Any], steps: int) -> float:
    """CPU seconds per env step with sampled (masked) actions, resets included."""
    env = gym.make(env_id, **kw)
    env.action_space.seed(0)
    masked = hasattr(env.unwrapped, "action_masks")
    env.reset(seed=0)
    c = time.process_time()
    for _ in range(steps):
        if masked:
            m = env.unwrapped.action_masks()
            nvec = env.action_space.nvec
            parts = np.split(m.astype(np.int8), np.cumsum(nvec)[:-1])
            a = env.action_space.sample(mask=tuple(parts))
        else:
            a = env.action_space.sample()
        _, _, term, trunc, _ = env.step(a)
        if term or trunc:
            env.reset()
    cpu = time.process_time() - c
    env.close()
    return cpu / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=4096, help="timed training steps per run (default 4096)")
    ap.add_argument("--envs", default="1,8", help="numbers of envs in the VecEnv (default 1,8)")
    ap.add_argument("--write", action="store_true", help="write benchmarks/results/train_step_cost.md")
    args = ap.parse_args()
    ns = [int(x) for x in args.envs.split(",")]
    rows = []
    for name, (env_id, kw, algo) in CASES.items():
        e = env_cost(env_id, kw, args.steps)
        for n in ns:
            t = learner_cost(env_id, kw, algo, args.steps, n)
            rows.append((name, algo, n, 1e3 * t, 1e3 * e))
            print(f"{name} | {algo} | N={n} | {1e3 * t:.2f} ms/step | {1 / t:,.0f} steps/CPU-s | env {1e3 * e:.2f} ms",
                  flush=True)
    if args.write:
        lines = ["# Training step cost: env + learner (x86_64, 2-core dev machine)", "",
                 f"Command: `OMP_NUM_THREADS=1 .venv/bin/python benchmarks/train_step_cost.py --steps {args.steps} "
                 f"--envs {args.envs} --write`. CPU time of one process; load average at the end: "
                 f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores ({platform.machine()}).", "",
                 "| config | algorithm | envs | train ms/step | train steps/CPU-s | env ms/step | learner share |",
                 "|---|---|---:|---:|---:|---:|---:|"]
        for name, algo, n, t, e in rows:
            lines.append(f"| {name} | {algo} | {n} | {t:.2f} | {1e3 / t:,.0f} | {e:.2f} | {max(1 - e / t, 0):.0%} |")
        lines += ["", "train: `learn` of the timed steps after 256 untimed ones, SB3's default hyperparameters "
                  "(n_steps 2048 / N, batch 64, 10 epochs), rollouts and updates; env: the same config stepped "
                  "alone with sampled valid actions, resets included. learner share = 1 - env / train."]
        with atomic_path("benchmarks/results/train_step_cost.md") as tmp:
            tmp.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
