"""Wall time of a 24-hour episode of servegym/NPUAutoscale-v0 (288 steps of one 5-min epoch each).

Target: a 24-hour replay in <= 60 s wall. Drivers: random valid actions (uniform over each
dimension's unmasked values, a worst case: up to 64 vPods per group and configuration churn every
epoch), the env's heuristic (N_pod = ceil(R_peak / T_pod) on the fixed groups), and NeuScale's policy
(``servegym.baselines.npu.NeuScalePolicy``) deciding on the env's simulator observation, its per-bucket
decision projected onto the env's groups (``env.action_from_decision``; no 60-s emergency checks
between steps, as the absolute mode acts once per epoch) -- all in ``action_mode="absolute"`` with the
oracle-normalized reward; and in ``action_mode="residual"`` with the reward relative to Base:
``residual-zero`` (the all-zero action, i.e. NeuScale itself with its emergency layer) and
``residual-random`` (uniform valid changes). The reset is timed with the episode (the residual/Base mode
runs Base's whole episode in it). Env construction (DSE catalog + workload) is timed separately. Run:
    .venv/bin/python benchmarks/npu_env_speed.py [--hours 24]
        [--drivers random,heuristic,neuscale,residual-zero,residual-random]
        [--fidelity fluid,request] [--out benchmarks/results/npu_env_speed.md]
Each driver runs once per fidelity (``fluid``, the default, and ``request``; the ratio is measured in the same
process). Steps per CPU-second = steps / CPU seconds of the steps; the residual reset (Base's episode, computed
once per scenario and cached) is reported separately, and "with reset" divides the steps by the CPU seconds of
reset + steps. Before the timed runs every env takes one untimed step, so the fluid kernel's compilation (or its
load from numba's cache) is not timed. ``--split-episodes N`` adds N training-style episodes of the ``train``
split (a new scenario per reset: a new workload and, in residual mode, Base's episode on it), zero action, with
the reset's cost amortized over the episode.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np
from servegym.baselines.npu import NeuScalePolicy
from servegym.envs.npu.env import NPUAutoscaleEnv

RESIDUAL = {"action_mode": "residual", "reward_mode": "base"}


class MaskedSampler:
    """Uniform valid values of a MultiDiscrete action from its flat mask (``env.action_masks()``), every dimension
    in one numpy pass: the largest of iid uniforms over a dimension's valid values is each of them equally often.
    (Per-dimension ``rng.choice`` cost ~150 us a step, a tenth of the env's step, which the figure is about.)"""

    def __init__(self, nvec: np.ndarray) -> None:
        width = int(nvec.max())
        offsets = np.concatenate(([0], np.cumsum(nvec)[:-1]))
        self.pos = offsets[:, None] + np.arange(width)[None, :]  # flat mask index of (dimension, value)
        self.real = np.arange(width)[None, :] < nvec[:, None]  # values a dimension has
        self.pos[~self.real] = 0

    def __call__(self, rng: np.random.Generator, mask: np.ndarray) -> np.ndarray:
        ok = self.real & mask[self.pos]
        u = rng.random(ok.shape)
        u[~ok] = -1.0
        return u.argmax(axis=1)


def run(env: NPUAutoscaleEnv, driver: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    env.state.base_key = None  # time Base's rerun in every residual reset (it is cached per episode)
    t_r, c_r = time.perf_counter(), time.process_time()
    env.reset(seed=seed)
    reset_s, reset_cpu_s = time.perf_counter() - t_r, time.process_time() - c_r
    pol = None
    if driver == "neuscale":
        pol = NeuScalePolicy()
        pol.reset(env.sim)
    sample = MaskedSampler(env.action_space.nvec)
    t0, c0 = time.perf_counter(), time.process_time()
    ret = energy = usd = tokens = 0.0
    steps = 0
    vpods = []
    truncated = False
    while not truncated:
        if driver == "residual-zero":
            a = np.zeros(env.action_space.shape, dtype=np.int64)
        elif driver in ("random", "residual-random"):
            a = sample(rng, env.action_masks())
        elif driver == "heuristic":
            a = env.heuristic_action()
        else:
            assert pol is not None and env.last_ctx is not None
            a = env.action_from_decision(pol.decide(env.last_ctx))
        _, r, _, truncated, info = env.step(a)
        ret += r
        energy += info["energy_j"]
        usd += info["cost_usd"]
        tokens += info["tokens"]
        vpods.append(info["vpods"])
        steps += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = env.sim.summary()
    return {"driver": driver, "fidelity": env.config.fidelity, "steps_per_cpu_s": steps / max(cpu, 1e-9),
            "steps": steps, "reset_s": reset_s, "wall_s": wall, "cpu_s": cpu,
            "episode_s": reset_s + wall, "episode_cpu_s": reset_cpu_s + cpu, "ms_per_step": 1e3 * wall / steps,
            "return": ret, "tokens_per_j": tokens / energy, "tokens_per_usd": tokens / usd,
            "slo_violation_pct": s["slo_violation_pct"], "mean_vpods": float(np.mean(vpods)),
            "max_vpods": int(np.max(vpods))}


def split_run(mode: str, hours: float, episodes: int, seed: int) -> dict:
    """Training-style episodes of the train split (see the module docstring), zero action."""
    kw = {"hours": hours, "split": "train", **(RESIDUAL if mode == "residual" else {})}
    env = NPUAutoscaleEnv(kw)
    for s in range(12):  # warm the four models' catalogs (drawn uniformly) and the kernel
        env.reset(seed=10_000 + s)
    env.step(np.zeros(env.action_space.shape, dtype=np.int64))
    a = np.zeros(env.action_space.shape, dtype=np.int64)
    reset_cpu = step_cpu = 0.0
    steps = 0
    for e in range(episodes):
        c = time.process_time()
        env.reset(seed=seed + e)
        reset_cpu += time.process_time() - c
        c = time.process_time()
        truncated = False
        while not truncated:
            _, _, _, truncated, _ = env.step(a)
            steps += 1
        step_cpu += time.process_time() - c
    return {"mode": mode, "episodes": episodes, "steps": steps, "steps_per_cpu_s": steps / max(step_cpu, 1e-9),
            "with_reset": steps / max(step_cpu + reset_cpu, 1e-9), "reset_cpu_s": reset_cpu / max(episodes, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--drivers", default="random,heuristic,neuscale,residual-zero,residual-random")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fidelity", default="fluid,request")
    ap.add_argument("--out", default=None, help="write a markdown table here")
    ap.add_argument("--split-episodes", type=int, default=0, help="train-split episodes per mode (fluid only)")
    ap.add_argument("--split-hours", type=float, default=24.0, help="hours of a train-split episode")
    args = ap.parse_args()
    t0 = time.perf_counter()
    fids = args.fidelity.split(",")
    envs = {f: NPUAutoscaleEnv({"hours": args.hours, "split": None, "fidelity": f}) for f in fids}
    env = envs[fids[0]]
    t_init = time.perf_counter() - t0
    res_envs = {f: NPUAutoscaleEnv({"hours": args.hours, "split": None, "fidelity": f, **RESIDUAL}) for f in fids}
    res_env = res_envs[fids[0]]
    for e in [*envs.values(), *res_envs.values()]:  # untimed: compile or load the fluid kernel, warm the caches
        e.reset(seed=args.seed + 1)  # another seed: the timed residual reset still runs Base's episode
        e.step(np.zeros(e.action_space.shape, dtype=np.int64))
    print(json.dumps({"init_s": t_init, "groups": env.groups, "nvec": env.action_space.nvec.tolist(),
                      "obs_dim": env.observation_space.shape[0], "requests": len(env.workload.requests)}), flush=True)
    rows = []
    for d in args.drivers.split(","):
        for f in fids:
            rows.append(run(res_envs[f] if d.startswith("residual") else envs[f], d, args.seed))
            print(json.dumps(rows[-1]), flush=True)
    split_rows = [split_run(mode, args.split_hours, args.split_episodes, args.seed) for mode in ("absolute", "residual")
                  if args.split_episodes > 0]
    for r in split_rows:
        print(json.dumps(r), flush=True)
    if args.out:
        cfg = env.config
        lines = [f"# NPUAutoscale-v0 episode speed ({platform.processor() or platform.machine()}, shared 2-core dev "
                 "machine, other jobs running)", "",
                 f"Command: `.venv/bin/python benchmarks/npu_env_speed.py --hours {args.hours:g} --drivers "
                 f"{args.drivers} --split-episodes {args.split_episodes} --split-hours {args.split_hours:g} --out {args.out}`",
                 "",
                 f"Default scenario: {cfg.model}, trace {cfg.trace} at Table 4's rate ({len(env.workload.requests)} "
                 f"requests in {args.hours:g} h), {env.horizon} steps of 5 min, groups {env.groups}, action "
                 f"MultiDiscrete({env.action_space.nvec.tolist()}) (residual: "
                 f"{res_env.action_space.nvec.tolist()}), observation Box({env.observation_space.shape[0]}). "
                 f"Env construction (DSE catalog with {cfg.n_candidates} Pareto candidates per bucket + workload): "
                 f"{t_init:.1f} s, once per process (cached). Target: one 24-h episode in <= 60 s wall. Load average "
                 f"at the end: {os.getloadavg()[0]:.1f} on 2 cores, so CPU time is given beside wall time. BLAS threads: "
                 f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset (library default)')}; the "
                 "simulator's group sums use np.bincount, so its speed does not depend on it.", "",
                 "| driver | fidelity | steps/CPU-s | with reset | steps | reset s | steps wall s | episode wall s | episode CPU s | ms/step | return | "
                 "tokens/J | tokens/USD | SLO viol. % | mean vPods | max vPods |",
                 "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['driver']} | {r['fidelity']} | {r['steps_per_cpu_s']:,.0f} | "
                         f"{r['steps'] / r['episode_cpu_s']:,.0f} | {r['steps']} | {r['reset_s']:.1f} | {r['wall_s']:.1f} | {r['episode_s']:.1f} | "
                         f"{r['episode_cpu_s']:.1f} | {r['ms_per_step']:.0f} | "
                         f"{r['return']:.0f} | {r['tokens_per_j']:.3f} | {r['tokens_per_usd']:.3g} | "
                         f"{r['slo_violation_pct']:.2f} | {r['mean_vpods']:.1f} | {r['max_vpods']} |")
        lines += ["", "random: uniform over each dimension's unmasked values (all dimensions in one numpy pass, "
                  "`MaskedSampler`); heuristic: `env.heuristic_action()`; "
                  "neuscale: `NeuScalePolicy.decide` on `env.last_ctx`, projected with `env.action_from_decision` "
                  "(once per epoch, no emergency scale-out between steps); these three in the absolute mode, return "
                  "normalized by the oracle. residual-zero / residual-random: `action_mode='residual'`, "
                  "`reward_mode='base'` (all-zero = NeuScale with its emergency layer; uniform valid changes), "
                  "return relative to Base (0 = Base); their reset runs Base's episode. Episode = reset + 288 steps."]
        if split_rows:
            lines += ["", f"Training-style episodes (`--split-episodes {args.split_episodes}`): `split='train'`, "
                      f"{args.split_hours:g} h, fluid, zero action (absolute: the smallest count of option 0, masked counts "
                      "adjusted; residual: NeuScale), reset(seed=s) for new seeds after warming the four models' "
                      "catalogs, so every reset draws a new scenario and builds its workload (and, in residual mode, "
                      "runs Base's episode on it).", "",
                      "| mode | episodes | steps/CPU-s | with reset | reset CPU-s (mean) |", "|---|---:|---:|---:|---:|"]
            for r in split_rows:
                lines.append(f"| {r['mode']} | {r['episodes']} | {r['steps_per_cpu_s']:,.0f} | "
                             f"{r['with_reset']:,.0f} | {r['reset_cpu_s']:.2f} |")
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
