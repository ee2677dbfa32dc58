"""Bit-identity check of the npu env for speed work that must change no figure.

Plays a fixed set of seeded episodes and records one sha256 per episode of every step's observation, reward,
flags and info (floats hashed exactly, :func:`layout_fingerprint.digest`), plus the final simulator summary:

* ``NPUAutoscale-v0`` (absolute) and ``NPUAutoscaleResidual-v0`` (residual, reward relative to Base), each with
  ``group_state_obs`` = ``bucket`` and ``range``, seeds 0 and 3, on the test and train splits (fluid, 6 h):
  absolute with the heuristic's action 2 steps in 3 and random valid actions otherwise; residual with the
  all-zero action (NeuScale itself) 2 steps in 3 and random valid changes otherwise;
* a residual episode with ``residual_options``, one with ``reference="base"`` and one under a chip quota;
* both ids at the request level (1 h, seed 0);
* ``run_baseline`` of Base and NeuScale (fluid, 6 h, seed 0) and a fluid ``compare`` with ``fit_at="operating"``.

Usage (the first run records, a later run compares and exits 1 naming every item that differs)::

    OMP_NUM_THREADS=1 python benchmarks/npu_identity.py --out /tmp/npu_ident_before.json
    OMP_NUM_THREADS=1 python benchmarks/npu_identity.py --check /tmp/npu_ident_before.json

About 60 CPU-s on the shared 2-core machine. Digests are those of this machine's numpy/numba builds.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layout_fingerprint import identity_main

ABS, RES = "servegym/NPUAutoscale-v0", "servegym/NPUAutoscaleResidual-v0"


def play(env: Any, seed: int, rng_seed: int) -> dict[str, Any]:
    """One episode (see the module docstring for the actions); every step's returns and the summary."""
    rng = np.random.default_rng(rng_seed)
    base = env.unwrapped
    obs, info = env.reset(seed=seed)
    steps = []
    splits = np.cumsum(env.action_space.nvec)[:-1]
    done = False
    while not done:
        if rng.random() < 2 / 3:
            a = (np.zeros(env.action_space.shape, dtype=np.int64) if base.residual else base.heuristic_action())
        else:
            a = np.array([rng.choice(np.flatnonzero(m)) for m in np.split(base.action_masks(), splits)])
        obs, r, term, trunc, info = env.step(a)
        steps.append((a, obs, r, term, trunc, info))
        done = term or trunc
    return {"reset": (obs, info), "steps": steps, "summary": base.sim.summary()}


def items() -> Iterator[tuple[str, Any]]:
    import gymnasium as gym

    import servegym  # noqa: F401  (registers the ids)

    for env_id in (ABS, RES):
        for gso in ("bucket", "range"):
            for split in ("test", "train"):
                for seed in (0, 3):
                    env = gym.make(env_id, hours=6.0, split=split, group_state_obs=gso)
                    yield f"{env_id} {gso} {split} seed {seed}", play(env, seed, rng_seed=seed + 11)
                    env.close()
    for label, kw in (("residual_options", {"residual_options": True}), ("reference base", {"reference": "base"}),
                      ("quota", {"split": None, "quota_chips": {"NPU-C": 96, "NPU-D": 64}})):
        env = gym.make(RES, hours=6.0, **({"split": "test"} | kw))
        yield f"{RES} {label}", play(env, 1, rng_seed=5)
        env.close()
    for env_id in (ABS, RES):
        env = gym.make(env_id, hours=1.0, split="test", fidelity="request")
        yield f"{env_id} request", play(env, 0, rng_seed=2)
        env.close()
    env = gym.make(ABS, hours=6.0, split="test")
    for pol in ("base", "neuscale"):
        out = env.unwrapped.run_baseline(pol, seed=0)
        yield f"run_baseline {pol}", (out["reward"], out["infos"], out["summary"])
    env.close()
    from servegym.baselines.npu import compare

    res = compare("Llama-3-8B", hours=2.0, policies=("base", "neuscale"), fidelity="fluid", fit_at="operating")
    yield "compare fluid operating", [(r.policy, r.summary, r.alive, r.energy_j_per_epoch, r.slo_per_epoch)
                                      for r in res]


def main(argv: list[str] | None = None) -> int:
    return identity_main("npu", items, __doc__.split("\n\n")[0], argv)


if __name__ == "__main__":
    sys.exit(main())
