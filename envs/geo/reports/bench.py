"""Speed benchmark of the geo simulator: simulated seconds per wall second.

``speed_bench`` builds a preset scenario at a given arrival rate, runs it with a carbon-blind
policy (round-robin by default: it adds no decision cost, so the figure is the simulator's own)
and reports:

- ``speedup``: simulated seconds per wall-clock second of the run (set-up excluded);
  ``speedup_cpu`` divides by this process's CPU time instead, steadier when other jobs share
  the cores;
- ``requests_per_s``: requests simulated per wall second;
- ``engine_iterations_per_s``: engine steps (prefill steps plus decode steps, summed over
  engines) per wall second;
- ``setup_s``: wall time to build the simulation (request stream, pool);
- ``warmup_s``: a short run first, which compiles the engine kernels (one-off per process).

Wall-clock time is measured here only: it never enters the dynamics.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from servegym.errors import ConfigError


def _policy(name: str):
    from servegym.baselines.geo import LeastLoaded, RoundRobin

    table = {"rr": RoundRobin, "ll": LeastLoaded}
    if name not in table:
        raise ConfigError(f"policy = {name!r} is not allowed in the speed bench; allowed: {', '.join(map(str, sorted(table)))}")
    return table[name]()


def engine_iterations(pool: Any) -> int:
    """Engine steps the pool has run, prefill and decode, summed over engines."""
    return int(np.sum(pool.prefill_steps) + np.sum(pool.decode_steps))


def speed_bench(preset_name: str = "paper", rate_rps: float | None = 4000.0, sim_seconds: float = 10.0,
                model: str = "Llama-3.1-8B", policy: str = "rr", seed: int = 0, **overrides: Any) -> dict[str, Any]:
    """Run ``sim_seconds`` of the preset at ``rate_rps`` (``None``: the preset's) and time it.

    ``overrides`` are GeoConfig fields (e.g. ``decision_mode="window"``). The run stops at the
    end of the arrivals (``drain_s = 0``); requests still in flight then are ``unfinished_at_end``.
    """
    from servegym.envs.geo.sim.cluster import GeoSimulation
    from servegym.envs.geo.sim.config import preset

    kw: dict[str, Any] = {"duration_s": float(sim_seconds), "drain_s": 0.0, "seed": seed}
    if rate_rps is not None:
        kw["rate_rps"] = float(rate_rps)
    kw.update(overrides)
    cfg = preset(preset_name, model=model, **kw)
    # The engine kernels are compiled (numba) on first use; compile them on a short run first so
    # the figure is the steady speed, and report the one-off cost separately.
    tw = time.perf_counter()
    GeoSimulation(cfg.replace(duration_s=0.2, rate_rps=min(cfg.rate_rps, 500.0))).run(_policy(policy))
    warmup = time.perf_counter() - tw
    t0 = time.perf_counter()
    sim = GeoSimulation(cfg)
    t1 = time.perf_counter()
    c1 = time.process_time()
    res = sim.run(_policy(policy))
    t2 = time.perf_counter()
    cpu = max(time.process_time() - c1, 1e-9)
    wall = max(t2 - t1, 1e-9)
    sim_s = float(res.summary["sim_time_s"])
    iters = engine_iterations(sim.pool)
    return {
        "preset": preset_name,
        "model": model,
        "policy": policy,
        "rate_rps": cfg.rate_rps,
        "engines": sim.n_engines,
        "dcs": sim.n_dcs,
        "sim_seconds": sim_s,
        "wall_s": wall,
        "setup_s": t1 - t0,
        "warmup_s": warmup,
        "speedup": sim_s / wall,
        "speedup_cpu": sim_s / cpu,
        "requests": int(res.summary["arrived"]),
        "requests_per_s": res.summary["arrived"] / wall,
        "engine_iterations": iters,
        "engine_iterations_per_s": iters / wall,
        "unfinished_at_end": int(res.summary["unfinished"]),
        "carbon_g": res.summary["carbon_g"],
    }
