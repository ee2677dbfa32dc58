"""Short NPU replays emit no RuntimeWarning (no inf x 0 or 0/0 in the simulator's arithmetic)."""

from __future__ import annotations

import warnings

import numpy as np
from servegym.baselines.npu import make_policy, run_policy
from servegym.envs.npu.env import NPUAutoscaleEnv
from servegym.envs.npu.sim.cluster import ClusterConfig, ConfigCatalog, NPUCluster
from servegym.envs.npu.sim.workloads import make_workload


def test_policy_replays_emit_no_runtime_warning() -> None:
    cfg = ClusterConfig(model="Llama-3-8B", n_candidates=1)
    cat = ConfigCatalog(cfg)
    wl = make_workload("azure", hours=0.5, seed=1, rate_rpm=600)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for name in ("neuscale", "base"):
            s = run_policy(NPUCluster(cfg, wl, seed=0, catalog=cat), make_policy(name))
            assert all(np.isfinite(v) for v in s.values()), name


def test_random_action_episode_emits_no_runtime_warning() -> None:
    # random valid actions churn configurations every epoch, so decode jobs sit in groups whose vPods
    # are still booting (no ready vPod): the case that multiplied an infinite TPOT by zero progress
    env = NPUAutoscaleEnv({"model": "Llama-3-8B", "hours": 1.0, "n_candidates": 2, "rate_rpm": 600.0, "split": None})
    rng = np.random.default_rng(0)
    splits = np.cumsum(env.action_space.nvec)[:-1]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for seed in (0, 1):
            env.reset(seed=seed)
            truncated = False
            while not truncated:
                a = np.array([rng.choice(np.flatnonzero(m)) for m in np.split(env.action_masks(), splits)])
                _, r, _, truncated, _ = env.step(a)
                assert np.isfinite(r)
            assert env.sim is not None
            assert all(np.isfinite(v) for v in env.sim.summary().values())
