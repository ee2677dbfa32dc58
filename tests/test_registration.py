"""Every registered servegym id: registration, Gymnasium and SB3 checkers, spawned processes, vector envs."""

from __future__ import annotations

import importlib
import multiprocessing as mp
import warnings
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import servegym
from servegym.registration import ENV_SPECS, register_envs

IDS = [entry.id for entry in ENV_SPECS]
GEO_IDS = ["servegym/GeoRoute-v0", "servegym/GeoRouteWindow-v0"]
#: Short geo runs for the process / vector tests (the checker test uses every id's defaults).
GEO_QUICK: dict[str, Any] = {"config": {"preset": "mini", "geo": {"duration_s": 2.0}}}


def test_import_registers_every_id_idempotently() -> None:
    assert IDS, "ENV_SPECS is empty"
    assert len(set(IDS)) == len(IDS)
    assert set(GEO_IDS) <= set(IDS)
    before = {i: gym.registry[i] for i in IDS}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # re-registering would warn
        assert register_envs() == IDS
        importlib.reload(servegym)
    assert all(gym.registry[i] is before[i] for i in IDS)


@pytest.mark.parametrize("entry", ENV_SPECS, ids=lambda e: e.id)
def test_entry_point_is_a_gymnasium_env(entry) -> None:
    module, cls = entry.entry_point.split(":")
    assert issubclass(getattr(importlib.import_module(module), cls), gym.Env)


#: The npu ids' defaults draw a model per seed (a catalog each) and a 24-h episode per reset (the residual id
#: also replays Base's): 30 and 210 CPU-s of checker resets, so they run with the slow tests. The fast suite
#: checks every id on its smallest scenario (tests/test_clients.py) and the npu env's own modes.
HEAVY_DEFAULTS = {"servegym/NPUAutoscale-v0", "servegym/NPUAutoscaleResidual-v0"}


@pytest.mark.parametrize("env_id", [pytest.param(i, marks=pytest.mark.slow) if i in HEAVY_DEFAULTS else i
                                    for i in IDS])
def test_every_id_makes_and_passes_the_checkers(env_id: str) -> None:
    """The registered defaults, through gym.make with the module prefix (what a user types)."""
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = gym.make(f"servegym:{env_id}")
    assert env.spec is not None and env.spec.id == env_id
    check_env(env.unwrapped)  # with a spec: also every declared render mode
    sb3_check_env(env.unwrapped, warn=True)
    env.close()


def _rollout(env_id: str, kwargs: dict[str, Any], seed: int, steps: int) -> list[float]:
    """Obs sums and rewards of a short rollout with fixed actions (runs in a spawned child too)."""
    import gymnasium as gym

    env = gym.make(f"servegym:{env_id}", **kwargs)
    obs, _ = env.reset(seed=seed)
    out = [float(obs.sum())]
    space = env.action_space
    for k in range(steps):
        a = k % space.n if isinstance(space, gym.spaces.Discrete) else np.full(space.shape, 0.5 - (k % 3) / 2)
        obs, r, _, truncated, _ = env.step(a)
        out += [float(obs.sum()), float(r)]
        if truncated:
            obs, _ = env.reset()
    return out


@pytest.mark.slow  # a fresh interpreter imports numpy/pandas/numba: ~10 s on a loaded 2-core box
def test_spawned_child_process_makes_the_envs() -> None:
    """A fresh interpreter (spawn) registers the ids on import and reproduces the parent's rollout."""
    ctx = mp.get_context("spawn")
    jobs = [(env_id, GEO_QUICK, 3, 30) for env_id in GEO_IDS]
    with ctx.Pool(1) as pool:
        child = [pool.apply(_rollout, job) for job in jobs]
    assert child == [_rollout(*job) for job in jobs]


@pytest.mark.slow  # two spawned children importing torch (SB3's worker)
@pytest.mark.parametrize("env_id", GEO_IDS)
def test_sb3_subproc_vec_env_with_spawn(env_id: str) -> None:
    from stable_baselines3.common.vec_env import SubprocVecEnv

    # the "servegym:" prefix makes the child import servegym, which registers the ids
    venv = SubprocVecEnv([partial(gym.make, f"servegym:{env_id}", **GEO_QUICK)] * 2, start_method="spawn")
    try:
        venv.seed(7)
        obs = venv.reset()
        assert obs.shape == (2, *venv.observation_space.shape)
        for _ in range(5):
            if env_id.endswith("GeoRoute-v0"):
                masks = np.stack(venv.env_method("action_masks"))
                assert masks.shape == (2, venv.action_space.n) and masks.any(axis=1).all()
                actions = masks.argmax(axis=1)
            else:
                actions = np.zeros((2, *venv.action_space.shape), dtype=np.float32)
            obs, rewards, _, infos = venv.step(actions)
            assert np.all(np.isfinite(obs)) and rewards.shape == (2,)
            assert all("carbon_g" in info for info in infos)
        # both copies were seeded alike (7 and 8 differ): the rows differ, each is in the space
        assert all(venv.observation_space.contains(o) for o in obs)
    finally:
        venv.close()


@pytest.mark.parametrize("mode", ["sync", pytest.param("async", marks=pytest.mark.slow)])
def test_gym_make_vec(mode: str) -> None:
    for env_id in GEO_IDS:
        kwargs = {"vector_kwargs": {"context": "spawn"}} if mode == "async" else {}
        venv = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode, **kwargs, **GEO_QUICK)
        try:
            obs, _ = venv.reset(seed=[1, 2])
            assert obs.shape == (2, *venv.single_observation_space.shape)
            assert not np.array_equal(obs[0], obs[1])
            for _ in range(4):
                obs, _, terminated, _, infos = venv.step(venv.action_space.sample())
                assert venv.observation_space.contains(obs)
                assert not terminated.any()
                assert "carbon_g" in infos
        finally:
            venv.close()
