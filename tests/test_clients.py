"""Every registered id with the RL clients a researcher reaches for, as the clients call them (no glue).

SB3, Gymnasium's vector envs and PettingZoo are in the dev extra and always run; TorchRL, Tianshou and
rl-zoo3 are in the optional ``clients`` extra (``pip install -e ".[clients]"``) and their tests skip with the
reason when absent. Nothing is installed at run time. ``benchmarks/clients_compat.py`` runs this module and
writes the compatibility table (benchmarks/results/clients_compat.md). Each id runs its smallest scenario.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from servegym.errors import ConfigError
from servegym.registration import ENV_SPECS
from servegym.wrappers import ActionMaskObservation, mask_size

IDS = [entry.id for entry in ENV_SPECS]
#: Each family's smallest scenario (seconds of simulated traffic, an hour of periods, half an hour of epochs).
SMALL: dict[str, dict[str, Any]] = {
    "geo": {"preset": "mini", "geo": {"duration_s": 2.0}},
    "pd": {"scenario": {"horizon_steps": 24}},
    "npu": {"hours": 0.5, "split": None, "rate_rpm": 120.0, "count_levels": [0, 1, 2, 4]},
}
CLIENTS_EXTRA = "pip install -e '.[clients]'"


def family(env_id: str) -> str:
    return {"Geo": "geo", "PDP": "pd", "NPU": "npu"}[env_id.split("/")[1][:3]]


def small(env_id: str) -> dict[str, Any]:
    """``gym.make`` keyword arguments of ``env_id``'s smallest scenario."""
    return {"config": SMALL[family(env_id)]}


def masked_action(env: gym.Env[Any, Any], rng: np.random.Generator) -> Any:
    """A random allowed action of ``env`` (wrapped or not), sampled with int8 masks as Gymnasium requires
    (any action of a space without masks: GeoRouteWindow-v0's Box)."""
    space = env.action_space
    if not has_masks(env_id_of(env)):
        return space.sample()
    mask = np.asarray(env.get_wrapper_attr("action_masks")(), dtype=np.int8)
    assert mask.shape == (mask_size(space),)
    if isinstance(space, gym.spaces.Discrete):
        return int(rng.choice(np.flatnonzero(mask)))
    parts = np.split(mask, np.cumsum(space.nvec)[:-1])
    return np.array([rng.choice(np.flatnonzero(p)) for p in parts], dtype=np.int64)


def env_id_of(env: gym.Env[Any, Any]) -> str:
    spec = env.unwrapped.spec
    assert spec is not None
    return spec.id


def has_masks(env_id: str) -> bool:
    """Whether ``env_id`` has ``action_masks()`` (every id but GeoRouteWindow-v0, whose action is a Box)."""
    return not env_id.endswith("Window-v0")


def _vec_actions(venv: Any, rng: np.random.Generator) -> np.ndarray:
    """One allowed action per copy of an SB3 VecEnv (masks from each copy's ``action_masks()``)."""
    space = venv.action_space
    if not isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return np.stack([space.sample() for _ in range(venv.num_envs)])
    out = []
    for mask in venv.env_method("action_masks"):
        m = np.asarray(mask, dtype=np.int8)
        if isinstance(space, gym.spaces.Discrete):
            out.append(int(rng.choice(np.flatnonzero(m))))
        else:
            out.append([rng.choice(np.flatnonzero(p)) for p in np.split(m, np.cumsum(space.nvec)[:-1])])
    return np.array(out)


# --------------------------------------------------------------------------------------- constructors
@pytest.mark.parametrize("env_id", IDS)
def test_unknown_keyword_is_a_type_error_in_pythons_words(env_id: str) -> None:
    """TorchRL's GymEnv passes frameskip and SB3's make_vec_env render_mode, and both retry without the
    argument only on a TypeError with Python's wording; the error is also a ConfigError (one CLI line)."""
    with pytest.raises(TypeError, match=r"__init__\(\) got an unexpected keyword argument 'frameskip'") as err:
        gym.make(env_id, frameskip=1, **small(env_id))
    assert isinstance(err.value, ConfigError)
    assert "allowed: config, render_mode" in str(err.value)
    with pytest.raises(ConfigError, match="unknown config key"):  # a misspelt key inside config stays a ConfigError
        gym.make(env_id, config={**SMALL[family(env_id)], "frameskip": 1})


@pytest.mark.parametrize("env_id", IDS)
def test_a_misspelt_keyword_gets_a_did_you_mean(env_id: str) -> None:
    """gym.make(id, action_mod=...) names the keyword it was probably meant to be (a far miss gets no hint)."""
    with pytest.raises(TypeError, match=r"argument 'action_mod' \(did you mean 'action_mode'\?\); allowed: "):
        gym.make(env_id, action_mod="residual", **small(env_id))
    with pytest.raises(TypeError, match=r"argument 'frameskip'; allowed: "):
        gym.make(env_id, frameskip=1, **small(env_id))


@pytest.mark.parametrize("env_id", IDS)
def test_spec_max_episode_steps_never_cuts_the_default_episode(env_id: str) -> None:
    """The TimeLimit gym.make adds is the default config's length (pd, npu) or a bound over the named
    scenarios (geo: the episode length is the Poisson draw of requests or windows)."""
    spec = gym.spec(env_id)
    assert spec.max_episode_steps is not None
    if family(env_id) == "pd":
        from servegym.envs.pd.env import PDEnvConfig

        assert spec.max_episode_steps == PDEnvConfig().scenario.horizon_steps
    elif family(env_id) == "npu":
        from servegym.envs.npu.env import NPUEnvConfig

        assert spec.max_episode_steps == NPUEnvConfig().horizon_epochs
    else:
        from servegym.envs.geo.env_common import SHIFT_LOAD_FACTOR, GeoEnvConfig
        from servegym.envs.geo.sim.config import LOADS, PAPER_MODELS, PRESETS
        from servegym.envs.grid import get_topology

        worst = 0.0
        for preset in PRESETS:
            for load in LOADS:
                for model in PAPER_MODELS:
                    g = GeoEnvConfig.from_dict({"preset": preset, "load": load, "model": model}).geo_config(
                        "window" if env_id.endswith("Window-v0") else "request")
                    n = g.rate_rps * g.duration_s * SHIFT_LOAD_FACTOR
                    n += 10.0 * np.sqrt(n)  # ten standard deviations of the Poisson count
                    if env_id.endswith("Window-v0"):  # windows start >= window_s apart or close full
                        n_sched = len(get_topology(g.topology).regions)
                        n = n_sched * (g.duration_s / g.window_s + 1.0) + n / g.window_max_requests
                    worst = max(worst, n)
        assert worst <= spec.max_episode_steps < 2 * worst


# --------------------------------------------------------------------------------------- rendering
@pytest.mark.parametrize("env_id", IDS)
def test_rgb_array_is_a_small_picture_of_the_state(env_id: str) -> None:
    env = gym.make(env_id, render_mode="rgb_array", **small(env_id))
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    first = env.render()
    assert isinstance(first, np.ndarray) and first.dtype == np.uint8
    assert first.ndim == 3 and first.shape[2] == 3 and first.shape[0] <= 128 and first.shape[1] <= 1024
    assert (first != 255).any()  # something is drawn
    changed = False
    for _ in range(500):  # geo: the picture is the poll snapshot, which moves when a poll interval closes
        _, _, term, trunc, _ = env.step(masked_action(env, rng))
        frame = env.render()
        assert frame.shape == first.shape and frame.dtype == np.uint8
        changed = not np.array_equal(frame, first)
        if changed or term or trunc:
            break
    assert changed, "the picture does not follow the state"
    env.close()


# --------------------------------------------------------------------------------------- pickling
@pytest.mark.parametrize("env_id", IDS)
def test_env_pickles_after_reset_and_continues_identically(env_id: str) -> None:
    env = gym.make(env_id, **small(env_id))
    rng = np.random.default_rng(1)
    env.reset(seed=5)
    for _ in range(3):
        env.step(masked_action(env, rng))
    blob = pickle.dumps(env)
    # the state, not the workload or the catalogs (npu: the replay record; geo: the request arrays)
    assert len(blob) < {"geo": 3_000_000, "pd": 500_000, "npu": 100_000}[family(env_id)]
    twin = pickle.loads(blob)
    for _ in range(3):
        a = masked_action(env, rng)
        x, y = env.step(a), twin.step(a)
        np.testing.assert_array_equal(x[0], y[0])
        assert x[1:4] == y[1:4]
    env.close()
    twin.close()


# --------------------------------------------------------------------------------------- masks
@pytest.mark.parametrize("env_id", IDS)
def test_action_mask_observation_wrapper(env_id: str) -> None:
    from gymnasium.utils.env_checker import check_env

    if not has_masks(env_id):
        with pytest.raises(ConfigError, match="has no action mask"):
            ActionMaskObservation(gym.make(env_id, **small(env_id)))
        return
    env = ActionMaskObservation(gym.make(env_id, **small(env_id)))
    check_env(env.unwrapped)
    obs, _ = env.reset(seed=2)
    rng = np.random.default_rng(2)
    for _ in range(4):
        assert env.observation_space.contains(obs)
        assert obs["action_mask"].dtype == np.int8
        np.testing.assert_array_equal(obs["action_mask"], env.get_wrapper_attr("action_masks")())
        sample = env.action_space.sample(
            np.int8(obs["action_mask"]) if isinstance(env.action_space, gym.spaces.Discrete)
            else tuple(np.split(obs["action_mask"], np.cumsum(env.action_space.nvec)[:-1])))
        assert env.action_space.contains(sample)
        obs, *_ = env.step(masked_action(env, rng))
    env.close()


@pytest.mark.parametrize("env_id", IDS)
def test_action_masks_reach_through_the_wrappers_gym_make_adds(env_id: str) -> None:
    """Gymnasium's get_wrapper_attr path finds action_masks() under TimeLimit/OrderEnforcing/PassiveEnvChecker,
    and it is the env's own mask (GeoRouteWindow-v0, a Box action, has none and says so)."""
    env = gym.make(env_id, **small(env_id))
    assert env is not env.unwrapped  # the wrappers gym.make adds are really there
    # Gymnasium 1.x wrappers do not forward attributes (README and docs/clients.md say so, and name the two ways)
    assert not hasattr(env, "action_masks")
    env.reset(seed=0)
    if not has_masks(env_id):
        with pytest.raises(AttributeError):
            env.get_wrapper_attr("action_masks")
        return
    for _ in range(3):
        got = env.get_wrapper_attr("action_masks")()
        np.testing.assert_array_equal(got, env.unwrapped.action_masks())
        assert got.dtype == np.bool_ and got.shape == (mask_size(env.action_space),) and got.any()
        env.step(masked_action(env, np.random.default_rng(0)))


@pytest.mark.parametrize("env_id", IDS)
def test_sb3_contrib_finds_the_masks_through_gym_make(env_id: str) -> None:
    """sb3-contrib's get_action_masks / is_masking_supported (what MaskablePPO calls) on a gym.make env and on
    an SB3 DummyVecEnv of it."""
    pytest.importorskip("sb3_contrib", reason="sb3-contrib is in the rl extra: pip install -e '.[rl]'")
    from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
    from stable_baselines3.common.vec_env import DummyVecEnv

    env = gym.make(env_id, **small(env_id))
    env.reset(seed=0)
    venv = DummyVecEnv([lambda: gym.make(env_id, **small(env_id))])
    venv.reset()
    assert is_masking_supported(env) is has_masks(env_id)
    assert is_masking_supported(venv) is has_masks(env_id)
    if has_masks(env_id):
        np.testing.assert_array_equal(get_action_masks(env), env.unwrapped.action_masks())
        assert get_action_masks(venv).shape == (1, mask_size(env.action_space))
    venv.close()


@pytest.mark.parametrize("env_id", IDS)
def test_action_mask_for_sample_is_the_form_space_sample_takes(env_id: str) -> None:
    """servegym.action_mask_for_sample: int8, a tuple per dimension for MultiDiscrete; every action that
    action_space.sample(mask=...) draws with it passes the env's own per-dimension masks and steps."""
    import servegym

    env = gym.make(env_id, **small(env_id))
    env.reset(seed=1)
    env.action_space.seed(1)
    if not has_masks(env_id):
        with pytest.raises(ConfigError, match=r"GeoRouteWindow-v0 has no action_masks\(\)"):
            servegym.action_mask_for_sample(env)
        return
    space = env.action_space
    for _ in range(3):
        mask = servegym.action_mask_for_sample(env)
        flat = env.unwrapped.action_masks()
        if isinstance(space, gym.spaces.Discrete):
            assert isinstance(mask, np.ndarray) and mask.dtype == np.int8 and mask.shape == (space.n,)
            samples = [space.sample(mask=mask) for _ in range(20)]
            assert all(flat[int(a)] for a in samples)
        else:
            assert isinstance(mask, tuple) and len(mask) == space.nvec.size
            assert all(m.dtype == np.int8 and m.size == n for m, n in zip(mask, space.nvec, strict=True))
            samples = [space.sample(mask=mask) for _ in range(20)]
            offsets = np.concatenate([[0], np.cumsum(space.nvec)[:-1]])
            assert all(flat[offsets + a].all() for a in samples)
        env.step(samples[0])


@pytest.mark.parametrize("env_id", IDS)
def test_sample_masked_action_is_never_adjusted(env_id: str) -> None:
    """servegym.sample_masked_action, the documented masked sampling, never sends an action the env adjusts
    (pd's GPU budget included): info["action_adjusted"] stays False and the episode count at 0, for a whole
    small episode; the same draw is reproducible from the action space's seed."""
    import servegym

    env = gym.make(env_id, **small(env_id))
    env.reset(seed=3)
    env.action_space.seed(3)
    first = servegym.sample_masked_action(env)
    env.action_space.seed(3)
    np.testing.assert_array_equal(servegym.sample_masked_action(env), first)
    assert env.action_space.contains(first)
    info: dict[str, Any] = {}
    for _ in range(40):
        _, _, terminated, truncated, info = env.step(servegym.sample_masked_action(env))
        assert not info.get("action_adjusted", False)
        if terminated or truncated:
            break
    if family(env_id) != "geo":  # geo never adjusts an action (it has no such info key)
        assert info["episode_adjusted_actions"] == 0


# --------------------------------------------------------------------------------------- SB3
@pytest.mark.parametrize("env_id", IDS)
def test_sb3_check_env_and_make_vec_env(env_id: str) -> None:
    """make_vec_env(id) as SB3 documents it: it asks for rgb_array rendering, which every id supports."""
    from gymnasium.utils.env_checker import check_env as gym_check_env
    from stable_baselines3.common.env_checker import check_env
    from stable_baselines3.common.env_util import make_vec_env

    made = gym.make(env_id, **small(env_id))
    gym_check_env(made.unwrapped)  # with a spec: every declared render mode too
    check_env(made.unwrapped, warn=True)
    venv = make_vec_env(env_id, n_envs=2, seed=3, env_kwargs=small(env_id))
    try:
        assert venv.get_attr("render_mode") == ["rgb_array", "rgb_array"]
        obs = venv.reset()
        assert obs.shape == (2, *venv.observation_space.shape)
        rng = np.random.default_rng(3)
        for _ in range(3):
            obs, rewards, _, infos = venv.step(_vec_actions(venv, rng))
            assert np.isfinite(obs).all() and np.isfinite(rewards).all() and len(infos) == 2
        assert all(img.dtype == np.uint8 for img in venv.get_images())
    finally:
        venv.close()


def _warm(env_id: str) -> None:
    """Build ``env_id``'s small scenario once here, so that forked workers inherit the process caches (npu
    catalogs, workloads, compiled geo kernels) instead of each building them again."""
    gym.make(env_id, **small(env_id)).reset(seed=0)


@pytest.mark.slow  # forked workers (about 1-8 s per id)
@pytest.mark.parametrize("env_id", IDS)
def test_sb3_make_vec_env_subproc(env_id: str) -> None:
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv

    _warm(env_id)
    venv = make_vec_env(env_id, n_envs=2, seed=4, env_kwargs=small(env_id), vec_env_cls=SubprocVecEnv,
                        vec_env_kwargs={"start_method": "fork"})
    try:
        obs = venv.reset()
        rng = np.random.default_rng(4)
        for _ in range(3):
            obs, rewards, _, _ = venv.step(_vec_actions(venv, rng))
        assert obs.shape == (2, *venv.observation_space.shape) and np.isfinite(rewards).all()
    finally:
        venv.close()


# --------------------------------------------------------------------------------------- Gymnasium vector
@pytest.mark.parametrize("mode", ["sync", pytest.param("async", marks=pytest.mark.slow)])
@pytest.mark.parametrize("env_id", IDS)
def test_gymnasium_make_vec(env_id: str, mode: str) -> None:
    kwargs = {"vector_kwargs": {"context": "fork"}} if mode == "async" else {}
    if mode == "async":
        _warm(env_id)
    venv = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode, **kwargs, **small(env_id))
    try:
        obs, _ = venv.reset(seed=[1, 2])
        assert venv.observation_space.contains(obs)
        for _ in range(3):
            obs, rewards, _, _, _ = venv.step(venv.action_space.sample())
            assert venv.observation_space.contains(obs) and rewards.shape == (2,)
    finally:
        venv.close()


# --------------------------------------------------------------------------------------- PettingZoo
def _parallel_env() -> Any:
    from servegym.envs.geo import parallel_env

    return parallel_env(config=SMALL["geo"])


def test_pettingzoo_parallel_api_and_seed_tests() -> None:
    from pettingzoo.test import parallel_api_test, parallel_seed_test

    parallel_api_test(_parallel_env(), num_cycles=200)
    parallel_seed_test(_parallel_env)


def test_pettingzoo_aec_api_test_through_parallel_to_aec() -> None:
    """AEC clients sample with infos[agent]["action_mask"], which must be int8."""
    from pettingzoo.test import api_test
    from pettingzoo.utils.conversions import parallel_to_aec

    env = parallel_to_aec(_parallel_env())
    api_test(env, num_cycles=200)
    env.reset(seed=0)
    info = env.infos[env.agent_selection]
    assert info["action_mask"].dtype == np.int8


# --------------------------------------------------------------------------------------- optional clients
@pytest.mark.parametrize("env_id", IDS)
def test_torchrl_gym_env(env_id: str) -> None:
    """TorchRL's GymEnv(id) (it passes frameskip and retries without it on the TypeError) and its spec
    check; masks reach TorchRL through ActionMaskObservation."""
    pytest.importorskip("torchrl", reason=f"TorchRL is not installed (optional client: {CLIENTS_EXTRA})")
    from torchrl.envs import GymEnv, GymWrapper, TransformedEnv
    from torchrl.envs.transforms import ActionMask
    from torchrl.envs.utils import check_env_specs

    env = GymEnv(env_id, **small(env_id))
    check_env_specs(env, seed=0)
    assert env.rollout(3).batch_size[0] >= 1
    env.close()
    if not has_masks(env_id):
        return
    masked = TransformedEnv(GymWrapper(ActionMaskObservation(gym.make(env_id, **small(env_id)), torchrl=True),
                                       categorical_action_encoding=True), ActionMask())
    td = masked.rollout(4)
    space = gym.make(env_id, **small(env_id)).action_space
    offsets = np.concatenate([[0], np.cumsum(space.nvec)[:-1]]) if hasattr(space, "nvec") else np.zeros(1, int)
    n = len(td["action"])
    for action, mask in zip(td["action"].numpy().reshape(n, -1), td["action_mask"].numpy().reshape(n, -1),
                            strict=True):
        assert mask[offsets + action].all(), "TorchRL sampled a masked action"
    masked.close()


@pytest.mark.parametrize("env_id", IDS)
def test_tianshou_collector(env_id: str) -> None:
    pytest.importorskip("tianshou", reason=f"Tianshou is not installed (optional client: {CLIENTS_EXTRA})")
    from tianshou.env import DummyVectorEnv

    runs = []
    for _ in range(2):  # the same seeds give the same rollout
        venv = DummyVectorEnv([partial(gym.make, env_id, **small(env_id))] * 2)
        venv.seed([0, 1])
        obs, _ = venv.reset()
        assert obs.shape[0] == 2
        rows = [obs]
        for k in range(3):
            acts = np.stack([venv.action_space[i].sample() * 0 + (k % 2) for i in range(2)])
            obs, rew, _, _, _ = venv.step(acts)
            assert rew.shape == (2,)
            rows += [obs, rew]
        venv.close()
        runs.append(rows)
    for a, b in zip(*runs, strict=True):
        np.testing.assert_array_equal(a, b)


def _zoo_ids() -> list[str]:
    import yaml

    from servegym.registration import ENV_SPECS as specs

    conf = yaml.safe_load(ZOO_CONF.read_text())
    return [e.id for e in specs if e.id in conf]


ZOO_CONF = Path(__file__).resolve().parents[1] / "benchmarks" / "rl_zoo3" / "ppo.yml"


def _zoo_policy_kwargs(text: str) -> dict[str, Any]:
    """rl-zoo3's ``"dict(net_arch=[64, 64])"`` as a mapping, read as literals (rl-zoo3 itself evaluates it)."""
    import ast

    call = ast.parse(text, mode="eval").body
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "dict", text
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg is not None}


@pytest.mark.parametrize("env_id", IDS)
def test_rl_zoo3_conf_has_every_id_with_the_shipped_ppo_settings(env_id: str) -> None:
    """benchmarks/rl_zoo3/ppo.yml has an entry for every id, equal to the ppo section servegym train uses
    (train-only env kwargs aside: rl-zoo3 has no such key, the file's header says how to pass them)."""
    import yaml
    from servegym.agents.hparams import load_hyperparams, parse_section

    entry = yaml.safe_load(ZOO_CONF.read_text()).get(env_id)
    assert isinstance(entry, dict), f"{env_id} has no entry in {ZOO_CONF.name}"
    entry["policy_kwargs"] = _zoo_policy_kwargs(entry["policy_kwargs"])
    zoo = parse_section(entry, "rl-zoo3")
    ours = load_hyperparams(env_id, "ppo")
    assert ours.source != "defaults"
    for name in ("policy", "n_envs", "n_timesteps", "normalize", "env_kwargs", "policy_kwargs", "algo_kwargs"):
        assert getattr(zoo, name) == getattr(ours, name), (env_id, name)


@pytest.mark.slow  # two fresh interpreters (train, enjoy) per id, about 25 CPU-s
@pytest.mark.parametrize("env_id", _zoo_ids())
def test_rl_zoo3_train_and_enjoy(env_id: str, tmp_path: Path) -> None:
    """rl-zoo3's own commands with the conf file docs/clients.md gives (one PPO rollout, then a replay)."""
    pytest.importorskip("rl_zoo3", reason=f"rl-zoo3 is not installed (optional client: {CLIENTS_EXTRA})")
    kwargs = f"config:{small(env_id)['config']!r}"
    common = ["--algo", "ppo", "--env", env_id, "--gym-packages", "servegym", "-f", str(tmp_path / "logs"),
              "--env-kwargs", kwargs]
    train = subprocess.run([sys.executable, "-m", "rl_zoo3.train", *common, "--conf-file", str(ZOO_CONF),
                            "-n", "64", "--eval-freq", "-1", "--seed", "0"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert train.returncode == 0, train.stderr[-2000:]
    enjoy = subprocess.run([sys.executable, "-m", "rl_zoo3.enjoy", *common, "-n", "500", "--no-render"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert enjoy.returncode == 0, enjoy.stderr[-2000:]
    # at least one whole episode replayed (the longest small episode, GeoRoute-v0's mini run, has ~230 steps)
    assert "Episode Length" in enjoy.stdout
