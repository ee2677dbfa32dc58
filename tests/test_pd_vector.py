"""The native pd VectorEnv: make_vec's vector entry point, and results identical to N separate envs."""

from __future__ import annotations

import pickle
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from servegym.envs.pd.env import PDProvisionEnv
from servegym.envs.pd.vector import PDVectorEnv

import servegym  # noqa: F401 (registers the ids)
from servegym.errors import ActionError, ConfigError

PD_IDS = ("servegym/PDProvision-v0", "servegym/PDProvisionResidual-v0", "servegym/PDProvisionFront-v0")
# Short episodes (a 25-period curriculum stage), random starts, a tight backlog limit so that random actions
# terminate some episodes, and a start-up delay of 1.5 periods so that periods split at different instants in
# different envs (several pieces per period, batched in rounds).
SMALL: dict[str, Any] = {"curriculum": ((25, 0),), "random_start": True, "backlog_limit_s": 20.0,
                         "startup_delay_s": 90.0}


def _assert_same(a: Any, b: Any, path: str = "") -> None:
    """Exact equality of nested infos (dicts, arrays, scalars), naming the first differing key."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: keys {sorted(set(a) ^ set(b))}"
        for key in a:
            _assert_same(a[key], b[key], f"{path}.{key}")
    elif isinstance(a, np.ndarray) and a.dtype == object:
        assert isinstance(b, np.ndarray) and a.shape == b.shape, path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same(x, y, f"{path}[{i}]")
    else:
        assert np.array_equal(np.asarray(a), np.asarray(b)), f"{path}: {a!r} != {b!r}"


def _actions(space: gym.Space, masks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random actions; every third env plays the smallest valid deployment to force backlogs."""
    acts = space.sample()
    n = acts.shape[0]
    for i in range(0, n, 3):
        first = np.flatnonzero(masks[i])[0]
        acts[i] = first if acts.ndim == 1 else np.array([first, first])
    if rng.random() < 0.5:  # also masked actions (adjusted by the env), half of the steps
        acts = space.sample()
    return acts


@pytest.mark.parametrize("env_id", PD_IDS)
def test_make_vec_vector_entry_point_equals_sync(env_id: str) -> None:
    n = 5
    venv = gym.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point", **SMALL)
    sync = gym.make_vec(env_id, num_envs=n, vectorization_mode="sync", **SMALL)
    assert isinstance(venv.unwrapped, PDVectorEnv)
    assert venv.observation_space == sync.observation_space and venv.action_space == sync.action_space
    assert venv.metadata["autoreset_mode"] == sync.metadata["autoreset_mode"]
    venv.action_space.seed(7)
    rng = np.random.default_rng(7)
    obs_v, info_v = venv.reset(seed=11)
    obs_s, info_s = sync.reset(seed=11)
    assert np.array_equal(obs_v, obs_s)
    _assert_same(info_v, info_s)
    ends = 0
    for _ in range(70):
        masks = venv.unwrapped.action_masks()
        assert np.array_equal(masks, np.stack(sync.call("action_masks")))
        acts = _actions(venv.action_space, masks, rng)
        out_v, out_s = venv.step(acts), sync.step(acts)
        for x, y in zip(out_v[:4], out_s[:4], strict=True):
            assert np.array_equal(x, y)
        assert out_v[1].dtype == out_s[1].dtype and out_v[2].dtype == out_s[2].dtype
        _assert_same(out_v[4], out_s[4])
        ends += int(out_v[2].sum() + out_v[3].sum())
    assert ends >= n  # episodes ended (both ways) and autoreset ran
    venv.close()
    sync.close()


def test_terminations_truncations_and_time_limit_match_separate_envs() -> None:
    """Against N plain envs stepped by hand with Gymnasium's next-step autoreset and a TimeLimit of 7."""
    n, limit = 4, 7
    venv = PDVectorEnv(n, max_episode_steps=limit, **SMALL)
    envs = [gym.make("servegym/PDProvision-v0", max_episode_steps=limit, **SMALL) for _ in range(n)]
    venv.action_space.seed(3)
    obs, _ = venv.reset(seed=[5, 6, 7, 8])
    assert np.array_equal(obs, np.stack([e.reset(seed=5 + i)[0] for i, e in enumerate(envs)]))
    done = np.zeros(n, dtype=bool)
    kinds = set()
    for _ in range(30):
        acts = venv.action_space.sample()
        acts[::2] = 1  # the smallest deployment in half of the envs: backlogs grow, episodes terminate
        obs, rew, term, trunc, _ = venv.step(acts)
        for i, e in enumerate(envs):
            if done[i]:
                o, r, te, tr = e.reset()[0], 0.0, False, False
            else:
                o, r, te, tr, _ = e.step(acts[i])
            assert np.array_equal(obs[i], o) and rew[i] == r and term[i] == te and trunc[i] == tr
        kinds |= {"term"} if term.any() else set()
        kinds |= {"trunc"} if trunc.any() else set()
        done = term | trunc
    assert kinds == {"term", "trunc"}


def test_reset_mask_pickle_and_errors() -> None:
    venv = PDVectorEnv(3, **SMALL)
    venv.reset(seed=0)
    venv.step(venv.action_space.sample())
    obs, info = venv.reset(seed=[None, 9, None], options={"reset_mask": np.array([False, True, False])})
    single = PDProvisionEnv(**SMALL)
    assert np.array_equal(obs[1], single.reset(seed=9)[0])
    assert list(info["_step"]) == [False, True, False]
    twin = pickle.loads(pickle.dumps(venv))
    acts = venv.action_space.sample()
    a, b = venv.step(acts), twin.step(acts)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    one = PDVectorEnv(1, max_episode_steps=1, **SMALL)  # a step where every env resets (none is stepped)
    one.reset(seed=4)
    assert one.step(np.array([[6, 3]]))[3].all()
    obs, rew, term, trunc, _ = one.step(np.array([[6, 3]]))
    assert rew[0] == 0.0 and not (term[0] or trunc[0])
    with pytest.raises(TypeError):
        PDVectorEnv(2, no_such_option=1)
    with pytest.raises(ConfigError):
        PDVectorEnv(0)
    with pytest.raises(ValueError):
        venv.reset(seed=[1, 2])
    # an invalid action anywhere leaves every env as it was: the next steps equal those of a copy taken before
    bad = venv.action_space.sample()
    good = bad.copy()
    bad[2] = [-1, 0]
    before = pickle.loads(pickle.dumps(venv))
    with pytest.raises(ActionError, match="out of range"):
        venv.step(bad)
    for _ in range(3):
        a, b = venv.step(good), before.step(good)
        assert all(np.array_equal(x, y) for x, y in zip(a[:4], b[:4], strict=True))


def test_sb3_adapter_equals_dummy_vec_env() -> None:
    """SB3's same-step autoreset over the vector env equals DummyVecEnv over separate envs, and PPO trains on it."""
    pytest.importorskip("stable_baselines3", reason="needs the rl extra: pip install -e '.[rl]'")
    from servegym.envs.pd.sb3_vector import PDSB3VecEnv
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    n = 3
    ours = PDSB3VecEnv(PDVectorEnv(n, max_episode_steps=1440, **SMALL))
    ref = DummyVecEnv([lambda: gym.make("servegym/PDProvision-v0", **SMALL) for _ in range(n)])
    ours.seed(21)
    ref.seed(21)
    assert np.array_equal(ours.reset(), ref.reset())
    rng = np.random.default_rng(2)
    dones = 0
    for _ in range(60):
        acts = rng.integers(ours.action_space.nvec, size=(n, 2))
        acts[0] = 1  # env 0 at the smallest deployment: its episodes terminate
        (o1, r1, d1, i1), (o2, r2, d2, i2) = ours.step(acts), ref.step(acts)
        assert np.array_equal(o1, o2) and np.array_equal(r1, r2) and np.array_equal(d1, d2)
        for a, b in zip(i1, i2, strict=True):
            _assert_same(a, b)
        dones += int(d1.sum())
    assert dones >= 2
    assert np.array_equal(np.stack(ours.env_method("action_masks")), np.stack(ref.env_method("action_masks")))
    PPO("MlpPolicy", ours, n_steps=16, batch_size=24, n_epochs=1, seed=0).learn(48)
