"""Bit-identity check of the geo envs for speed work that must change no figure.

Plays a fixed set of seeded whole episodes on the ``small`` preset (16 DCs, the benchmarks' preset) and
records one sha256 per episode of every step's action, observation, reward, flags and whole ``info`` (its
KPI entries and ``episode_metrics`` included; floats hashed exactly, :func:`layout_fingerprint.canon`):

* ``GeoRouteWindow-v0`` direct (random Box actions from the env's action space seeded per episode), test
  split, seeds 0-2, and one episode with the residual and forecast observation blocks;
* ``GeoRouteWindow-v0`` residual around the MILP (seed 0, whole 60-s run) and around the standard ILP (20 s);
* ``GeoRoute-v0`` residual with the ``greedy:0`` reference (seeds 0 and 1, 15-s runs: a random agent
  deviates on most steps, so the greedy reference replans almost every step), with ``greedy:0.5`` (10 s),
  and with the ``milp`` reference (whole 60-s run); the follow action half of the time, a random masked DC
  otherwise; plus a direct GeoRoute-v0 episode;
* the geo baselines through the benchmark's runner (``run_geo_baseline``: greedy:0, greedy:0.5, moer, ilp,
  iter-ilp, milp) on 10-s scenarios of the test split.

Usage (the first run records, a later run compares and exits 1 naming every item that differs)::

    OMP_NUM_THREADS=1 python benchmarks/geo_identity.py --out /tmp/geo_ident_before.json
    OMP_NUM_THREADS=1 python benchmarks/geo_identity.py --check /tmp/geo_ident_before.json

About 60 CPU-s on the shared 2-core machine. Digests are those of this machine's numpy/numba builds: compare
runs made on the same install, before and after a change.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layout_fingerprint import canon, identity_main

ROUTE, WINDOW = "servegym/GeoRoute-v0", "servegym/GeoRouteWindow-v0"


def play(env: Any, seed: int, rng_seed: int, follow_p: float = 0.5) -> str:
    """The digest of one whole episode: reset, then every step's (action, obs, reward, flags, info).

    Box action spaces are sampled from the env's own space seeded with ``rng_seed``; Discrete ones take the
    residual follow action with probability ``follow_p`` (residual mode) and a random masked DC otherwise.
    Hashed step by step (an episode of the greedy reference holds thousands of steps)."""
    h = hashlib.sha256()

    def add(value: Any) -> None:
        h.update(json.dumps(canon(value), sort_keys=True).encode())

    rng = np.random.default_rng(rng_seed)
    base = env.unwrapped
    space = env.action_space
    space.seed(rng_seed)
    obs, info = env.reset(seed=seed)
    add((obs, info))
    residual = getattr(base.config, "action_mode", "direct") == "residual"
    while True:
        if hasattr(space, "n"):
            n = int(space.n)
            if residual and rng.random() < follow_p:
                a: Any = n - 1
            else:
                a = int(rng.choice(np.flatnonzero(base.action_masks())))
        else:
            a = space.sample()
        obs, r, term, trunc, info = env.step(a)
        add((a, obs, r, term, trunc, info))
        if term or trunc:
            return h.hexdigest()


def items() -> Iterator[tuple[str, Any]]:
    import gymnasium as gym

    import servegym  # noqa: F401  (registers the ids)

    for seed in (0, 1, 2):
        env = gym.make(WINDOW, config={"split": "test"})
        yield f"window direct test seed {seed}", play(env, seed, 100 + seed)
    env = gym.make(WINDOW, config={"split": "train", "observe_residuals": True, "ci_forecast_h": 2,
                                   "reward": "poll", "geo": {"duration_s": 20.0}})
    yield "window direct residual+forecast obs, poll reward", play(env, 3, 7)
    env = gym.make(WINDOW, config={"split": "test", "action_mode": "residual"})
    yield "window residual milp seed 0", play(env, 0, 11)
    env = gym.make(WINDOW, config={"split": "test", "action_mode": "residual", "reference": "ilp",
                                   "geo": {"duration_s": 20.0}})
    yield "window residual ilp seed 1", play(env, 1, 12)

    for seed in (0, 1):
        env = gym.make(ROUTE, config={"split": "test", "action_mode": "residual", "reference": "greedy:0",
                                      "geo": {"duration_s": 15.0}})
        yield f"route residual greedy:0 seed {seed}", play(env, seed, 200 + seed)
    env = gym.make(ROUTE, config={"split": "test", "action_mode": "residual", "reference": "greedy:0.5",
                                  "geo": {"duration_s": 10.0}})
    yield "route residual greedy:0.5 seed 2", play(env, 2, 202, follow_p=0.8)
    env = gym.make(ROUTE, config={"split": "test", "action_mode": "residual", "reference": "milp"})
    yield "route residual milp seed 0", play(env, 0, 210)
    env = gym.make(ROUTE, config={"split": "test"})
    yield "route direct seed 0", play(env, 0, 220)

    from servegym.agents.adapters import run_geo_baseline

    env = gym.make(ROUTE, config={"split": "test", "geo": {"duration_s": 10.0}})
    for name in ("greedy:0", "greedy:0.5", "moer", "ilp", "iter-ilp", "milp"):
        res = run_geo_baseline(env, name, 0)
        yield f"baseline {name} seed 0", (res.policy, res.seed, res.reward, res.length, res.metrics)


def main(argv: list[str] | None = None) -> int:
    return identity_main("geo", items, __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    sys.exit(main())
