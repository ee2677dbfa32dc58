"""Steps per second of the geo routing environments, against the bare simulator loop.

Target: ``servegym/GeoRoute-v0`` steps at >= 10k steps/s with random masked actions on
its default preset (small, Llama-3.1-8B, moderate load): SB3 itself runs ~2.5k steps/s here, so
the env must not be the bottleneck. Every row runs whole episodes (one full request stream of
the preset, reset excluded) with the same policy: a uniformly random DC among
``action_masks()`` (drawn from a pre-generated uniform stream, so the policy costs the same in
every row). Rows:

- ``sim next_decision+apply``: the simulator's own per-request loop, no estimates (the floor);
- ``sim next_decision+mask+apply``: the same with the estimator's mask per request (what a
  masked agent driving the simulator by hand pays);
- ``GeoRouteEnv`` (unwrapped) and ``gym.make`` (with Gymnasium's OrderEnforcing and
  PassiveEnvChecker wrappers): observation, mask, reward and info per step;
- ``GeoRouteWindow-v0``: random Box actions, one step per window (steps/s and requests/s);
- the learning modes: ``reward="poll"`` (the former reward, for comparison with the
  dense default), ``action_mode="residual"`` with the MILP window plan and greedy as reference
  (random masked actions among D + 1, so about one step in D + 1 follows the reference and the rest
  deviate), GeoRouteWindow-v0 residual (a MILP solve per window), and the multi-agent
  ``parallel_env`` (one parallel step decides one request per scheduler; steps/s counts agent steps).

Wall time and this process's CPU time are both reported: the machine's 2 cores are shared with
other jobs, and CPU time is the steadier figure. The median of ``--repeats`` episodes is kept.

    .venv/bin/python benchmarks/geo_env_speed.py [--repeats 3] [--profile]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from servegym.envs.geo.env_common import GeoEnvConfig
from servegym.envs.geo.env_route import GeoRouteEnv
from servegym.envs.geo.sim.cluster import GeoSimulation

import servegym  # noqa: F401  (registers the ids)

U = np.random.default_rng(0).random(2_000_000)


def _timed(fn: Callable[[], int]) -> dict[str, float]:
    w0, c0 = time.perf_counter(), time.process_time()
    steps = fn()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return {"steps": steps, "wall_s": wall, "cpu_s": cpu, "steps_per_s": steps / wall, "steps_per_cpu_s": steps / cpu}


def sim_loop(cfg: GeoEnvConfig, seed: int, masks: bool) -> dict[str, float]:
    sim = GeoSimulation(cfg.geo_config("request"), seed=seed)

    def run() -> int:
        n = 0
        while (ctx := sim.next_decision()) is not None:
            if masks:
                idx = ctx.action_mask()[0].nonzero()[0]
                a = int(idx[int(U[n] * idx.size)])
            else:
                a = n % sim.n_dcs
            sim.apply(ctx, a)
            n += 1
        return n

    return _timed(run)


def env_loop(env: gym.Env, seed: int) -> dict[str, float]:
    env.reset(seed=seed)
    masks = env.unwrapped.action_masks

    def run() -> int:
        n = 0
        while True:
            idx = masks().nonzero()[0]
            _, _, _, truncated, _ = env.step(idx[int(U[n] * idx.size)])
            n += 1
            if truncated:
                return n

    return _timed(run)


def window_loop(env: gym.Env, seed: int) -> dict[str, float]:
    env.reset(seed=seed)
    env.action_space.seed(seed)
    out: dict[str, Any] = {}

    def run() -> int:
        n = 0
        while True:
            _, _, _, truncated, info = env.step(env.action_space.sample())
            n += 1
            if truncated:
                out["requests"] = info["episode_metrics"]["arrived"]
                return n

    res = _timed(run)
    res["requests_per_s"] = out["requests"] / res["wall_s"]
    return res


def parallel_loop(cfg: dict[str, Any], seed: int) -> dict[str, float]:
    from servegym.envs.geo import parallel_env

    env = parallel_env(config=cfg)
    _, infos = env.reset(seed=seed)

    def run() -> int:
        n = 0
        nonlocal infos
        while env.agents:
            acts = {}
            for a in env.agents:
                idx = infos[a]["action_mask"].nonzero()[0]
                acts[a] = int(idx[int(U[n % U.size] * idx.size)])
                n += 1
            _, _, _, _, infos = env.step(acts)
        return n

    return _timed(run)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="print a pyinstrument profile of one GeoRoute episode")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args()

    default = GeoEnvConfig()
    high = GeoEnvConfig(load="high")
    mini = GeoEnvConfig(preset="mini")
    # warm-up: numba loads/compiles the engine kernels once per process
    env_loop(GeoRouteEnv(config={"preset": "mini", "geo": {"duration_s": 2.0}}), 0)

    rows: list[tuple[str, Callable[[int], dict[str, float]]]] = [
        ("sim next_decision+apply (small, moderate)", lambda s: sim_loop(default, s, masks=False)),
        ("sim next_decision+mask+apply (small, moderate)", lambda s: sim_loop(default, s, masks=True)),
        ("GeoRouteEnv unwrapped (small, moderate) [default]", lambda s: env_loop(GeoRouteEnv(), s)),
        ("gym.make GeoRoute-v0 (small, moderate) [default]", lambda s: env_loop(gym.make("servegym/GeoRoute-v0"), s)),
        ("gym.make GeoRoute-v0 (small, high)", lambda s: env_loop(gym.make("servegym/GeoRoute-v0", config=high), s)),
        ("gym.make GeoRoute-v0 (mini, moderate)", lambda s: env_loop(gym.make("servegym/GeoRoute-v0", config=mini), s)),
        ("gym.make GeoRouteWindow-v0 (small, moderate)",
         lambda s: window_loop(gym.make("servegym/GeoRouteWindow-v0"), s)),
        ("GeoRoute-v0 reward=poll (small, moderate)",
         lambda s: env_loop(gym.make("servegym/GeoRoute-v0", reward="poll"), s)),
        ("GeoRoute-v0 residual, reference milp (small, moderate)",
         lambda s: env_loop(gym.make("servegym/GeoRoute-v0", action_mode="residual", reference="milp"), s)),
        ("GeoRoute-v0 residual, reference greedy:0 (small, moderate)",
         lambda s: env_loop(gym.make("servegym/GeoRoute-v0", action_mode="residual", reference="greedy:0"), s)),
        ("GeoRouteWindow-v0 residual (MILP) (small, moderate)",
         lambda s: window_loop(gym.make("servegym/GeoRouteWindow-v0", action_mode="residual"), s)),
        ("geo parallel_env, 2 agents (small, moderate)", lambda s: parallel_loop({}, s)),
    ]
    results = []
    for label, fn in rows:
        runs = [fn(seed) for seed in range(args.repeats)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        med["label"] = label
        results.append(med)
        extra = f"  {med['requests_per_s']:9.0f} req/s" if "requests_per_s" in med else ""
        print(f"{label:52s} {med['steps']:7.0f} steps  {med['steps_per_s']:8.0f} steps/s  "
              f"(cpu {med['steps_per_cpu_s']:8.0f}/s, {1e6 / med['steps_per_cpu_s']:5.1f} us/step){extra}", flush=True)

    if args.profile:
        from pyinstrument import Profiler

        env = GeoRouteEnv()
        prof = Profiler(interval=0.0002)
        prof.start()
        env_loop(env, 0)
        prof.stop()
        print(prof.output_text(unicode=False, color=False))

    meta = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared with other jobs), {platform.python_version()}",
        "repeats": args.repeats,
        "load_average": os.getloadavg()[0],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "geo_env_speed.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    lines = [
        "# Geo environment speed",
        "",
        f"{meta['date_utc']}, {meta['machine']}, 1-min load average {meta['load_average']:.1f} at the end. "
        f"Whole episodes (reset excluded), random masked actions (GeoRoute) or random Box actions "
        f"(GeoRouteWindow), median of {args.repeats} seeds. `steps/s` is per wall second, `steps/CPU s` per "
        "CPU second of this process (steadier on the shared machine). Target: GeoRoute-v0 >= 10,000 steps/s "
        "on its default preset. Produced by `benchmarks/geo_env_speed.py`.",
        "",
        "| loop | steps/episode | steps/s | steps/CPU s | us/step (CPU) | requests/s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        req = f"{r['requests_per_s']:,.0f}" if "requests_per_s" in r else ""
        lines.append(f"| {r['label']} | {r['steps']:,.0f} | {r['steps_per_s']:,.0f} | {r['steps_per_cpu_s']:,.0f} | "
                     f"{1e6 / r['steps_per_cpu_s']:.1f} | {req} |")
    (args.out / "geo_env_speed.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
