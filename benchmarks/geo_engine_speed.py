"""Speed of the geo EnginePool alone: engines fed a Poisson stream, as the cluster would drive them.

Default: 512 engines of the Llama-3.1-8B TP1 profile, 4000 req/s in total (7.8 req/s per engine,
the paper's high load), CNN-DailyMail-like lengths, requests submitted round-robin every
``--window`` s of simulated time (ready after a 1 ms scheduling delay), ``poll()`` every
``--poll`` s and ``drain_finished()`` after each poll. Reports simulated seconds per wall second
(``speedup``; ``speedup_cpu`` uses this process's CPU time, which is steadier when other jobs
share the cores) and engine steps (prefill + decode) per wall second. The first ``--warmup`` simulated
seconds are run but not timed (the engines fill up; numba compiles or loads its cache).

    .venv/bin/python benchmarks/geo_engine_speed.py [--engines 512] [--rate 4000] [--sim-seconds 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from servegym.envs.geo.reports.validate import cnn_dailymail_lengths
from servegym.envs.geo.sim.engine import EnginePool
from servegym.envs.geo.sim.profile import load_profile


def run(profile: str, engines: int, rate: float, sim_seconds: float, warmup: float, window: float,
        poll: float, seed: int) -> dict:
    prof = load_profile(profile)
    pool = EnginePool(prof, engines)
    rng = np.random.default_rng(seed)
    lengths, lengths_name = cnn_dailymail_lengths()
    total = warmup + sim_seconds
    n_win = round(total / window)
    per_poll = max(1, round(poll / window))
    rid = 0
    rr = 0
    steps0 = 0
    t0 = c0 = 0.0
    finished = 0
    submitted = 0
    for k in range(n_win):
        if k == round(warmup / window):
            t0 = time.perf_counter()
            c0 = time.process_time()
            steps0 = int(pool.prefill_steps.sum() + pool.decode_steps.sum())
            finished = 0
            submitted = 0
        lo = k * window
        n = rng.poisson(rate * window)
        arr = np.sort(rng.uniform(lo, lo + window, n))
        isl, osl = lengths.sample(n, rng)
        eng = (rr + np.arange(n)) % engines
        rr = (rr + n) % engines
        pool.submit(eng, np.arange(rid, rid + n), arr, arr + 1e-3, isl, osl)
        rid += n
        submitted += n
        pool.advance(lo + window)
        if (k + 1) % per_poll == 0:
            pool.poll()
            finished += len(pool.drain_finished())
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    steps = int(pool.prefill_steps.sum() + pool.decode_steps.sum()) - steps0
    stats = pool.poll()
    return {
        "profile": prof.name,
        "lengths": lengths_name,
        "engines": engines,
        "rate_rps": rate,
        "sim_seconds": sim_seconds,
        "wall_s": wall,
        "speedup": sim_seconds / wall,
        "cpu_s": cpu,
        "speedup_cpu": sim_seconds / cpu,
        "requests_per_wall_s": submitted / wall,
        "engine_steps_per_sim_s": steps / sim_seconds,
        "engine_steps_per_wall_s": steps / wall,
        "finished": finished,
        "mean_batch_end": float(stats.batch.mean()),
        "mean_queued_end": float(stats.queued.mean()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="llama3.1-8b_a100-40gb_tp1")
    ap.add_argument("--engines", type=int, default=512)
    ap.add_argument("--rate", type=float, default=4000.0, help="total req/s")
    ap.add_argument("--sim-seconds", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--window", type=float, default=0.1, help="submit/advance cadence (s)")
    ap.add_argument("--poll", type=float, default=1.0, help="poll cadence (s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = run(a.profile, a.engines, a.rate, a.sim_seconds, a.warmup, a.window, a.poll, a.seed)
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        for k, v in res.items():
            print(f"{k:>24}: {v:.4g}" if isinstance(v, float) else f"{k:>24}: {v}")


if __name__ == "__main__":
    main()
