"""Loading a saved agent never runs code from the files (issue #15, defect 1).

A real SB3 model is saved beside files an attacker could plant: a ``_vecnormalize.pkl`` whose
unpickling opens (creates) a marker file, a model zip whose pickled ``data`` entries and tensor file
carry the same payload. Loading must leave no marker: the pickle is ignored beside the safe ``.npz``
and refused alone; the zip's pickled entries are replaced before SB3 could decode them.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import servegym  # noqa: F401  (registers the ids)
from servegym.cli import main
from servegym.errors import ConfigError

pytest.importorskip("stable_baselines3", reason="the rl extra (stable-baselines3) is not installed")

ENV_ID = "servegym/PDProvision-v0"
ENV_KWARGS = {"config": {"scenario": {"horizon_steps": 24}}}


class _Payload:
    """Unpickling this creates ``path``: the stand-in for an attacker's shell command."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def _pickled_payload(marker: Path) -> bytes:
    return pickle.dumps(_Payload(marker))


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    import torch.nn as nn
    from servegym.agents.model_io import save_obs_stats
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    d = tmp_path_factory.mktemp("model")
    venv = VecNormalize(DummyVecEnv([lambda: gym.make(ENV_ID, **ENV_KWARGS)]))
    venv.reset()
    for _ in range(5):
        venv.step(np.array([venv.action_space.sample()]))
    # activation_fn makes SB3 pickle policy_kwargs: the allowlist path is exercised too.
    model = PPO("MlpPolicy", venv, n_steps=16, batch_size=16, seed=0, device="cpu",
                policy_kwargs={"net_arch": [8], "activation_fn": nn.Tanh})
    model.save(d / "model.zip")
    save_obs_stats(venv, d / "model_vecnormalize.npz")
    (d / "run.json").write_text(json.dumps({"env_id": ENV_ID, "algo": "ppo", "env_kwargs": ENV_KWARGS}))
    obs = venv.get_original_obs()[0]
    return {"dir": d, "venv": venv, "obs": obs, "expected": venv.normalize_obs(obs),
            "action": model.predict(venv.normalize_obs(obs), deterministic=True)[0]}


def _copy(saved: dict, tmp_path: Path, stats: bool = True) -> Path:
    for name in ("model.zip", "run.json", *(["model_vecnormalize.npz"] if stats else [])):
        (tmp_path / name).write_bytes((saved["dir"] / name).read_bytes())
    return tmp_path / "model.zip"


def test_planted_pickle_beside_safe_stats_is_ignored(saved: dict, tmp_path: Path) -> None:
    from servegym.agents.train import load_agent

    model_path = _copy(saved, tmp_path)
    marker = tmp_path / "pwned"
    (tmp_path / "model_vecnormalize.pkl").write_bytes(_pickled_payload(marker))
    model, norm, info = load_agent(model_path)
    assert not marker.exists()
    assert info["algo"] == "ppo" and norm is not None
    # The .npz reproduces VecNormalize's own normalization, and the model acts as it did before saving.
    np.testing.assert_allclose(norm(saved["obs"]), saved["expected"], rtol=1e-6)
    np.testing.assert_array_equal(model.predict(norm(saved["obs"]), deterministic=True)[0], saved["action"])


def test_planted_pickle_alone_is_refused(saved: dict, tmp_path: Path, capsys) -> None:
    from servegym.agents.train import load_agent

    model_path = _copy(saved, tmp_path, stats=False)
    marker = tmp_path / "pwned"
    (tmp_path / "model_vecnormalize.pkl").write_bytes(_pickled_payload(marker))
    with pytest.raises(ConfigError, match="refusing to unpickle"):
        load_agent(model_path)
    assert main(["evaluate", "--model", str(model_path), "--episodes", "1", "--baselines", "none"]) == 2
    err = capsys.readouterr().err
    assert "refusing to unpickle" in err and len(err.strip().splitlines()) == 1
    assert not marker.exists()


def _rewrite_zip(src: Path, dst: Path, edit) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            zout.writestr(item, edit(item.filename, zin.read(item.filename)))


def test_pickled_entries_inside_the_model_zip_are_never_decoded(saved: dict, tmp_path: Path) -> None:
    from servegym.agents.train import load_agent

    model_path = _copy(saved, tmp_path)
    marker = tmp_path / "pwned"
    evil = {":type:": "<class 'str'>", ":serialized:": base64.b64encode(_pickled_payload(marker)).decode()}

    def edit(name: str, raw: bytes) -> bytes:
        if name != "data":
            return raw
        data = json.loads(raw)
        for key in ("policy_class", "lr_schedule", "clip_range"):
            data[key] = dict(evil)
        for key in ("observation_space", "action_space"):  # the payload behind the attributes the spaces check reads
            data[key] = {**data[key], ":serialized:": evil[":serialized:"]}
        data["policy_kwargs"] = {**evil, "net_arch": [8], "activation_fn": "<class 'torch.nn.modules.activation.Tanh'>"}
        data["an_extra_entry"] = dict(evil)
        return json.dumps(data).encode()

    crafted = tmp_path / "crafted.zip"
    _rewrite_zip(model_path, crafted, edit)
    (tmp_path / "crafted_vecnormalize.npz").write_bytes((tmp_path / "model_vecnormalize.npz").read_bytes())
    model, norm, _ = load_agent(crafted)
    assert not marker.exists()
    np.testing.assert_array_equal(model.predict(norm(saved["obs"]), deterministic=True)[0], saved["action"])


def test_policy_kwargs_naming_an_unlisted_class_is_refused(saved: dict, tmp_path: Path) -> None:
    from servegym.agents.train import load_agent

    model_path = _copy(saved, tmp_path)

    def edit(name: str, raw: bytes) -> bytes:
        if name != "data":
            return raw
        data = json.loads(raw)
        data["policy_kwargs"]["activation_fn"] = "<class 'os.system'>"
        return json.dumps(data).encode()

    crafted = tmp_path / "crafted.zip"
    _rewrite_zip(model_path, crafted, edit)
    with pytest.raises(ConfigError, match=r"policy_kwargs\.activation_fn"):
        load_agent(crafted)


def test_tensor_file_with_a_pickle_payload_is_refused(saved: dict, tmp_path: Path) -> None:
    import torch
    from servegym.agents.train import load_agent

    model_path = _copy(saved, tmp_path)
    marker = tmp_path / "pwned"
    buf = io.BytesIO()
    torch.save({"x": _Payload(marker)}, buf)

    crafted = tmp_path / "crafted.zip"
    _rewrite_zip(model_path, crafted, lambda name, raw: buf.getvalue() if name == "policy.pth" else raw)
    with pytest.raises(ConfigError, match="does not load"):
        load_agent(crafted)
    assert not marker.exists()


@pytest.mark.parametrize("content", [
    lambda tmp: np.savez(tmp, norm_obs=True, clip_obs=10.0, epsilon=1e-8, mean=np.array([object()], dtype=object),
                         var=np.ones(1)),
    lambda tmp: np.savez(tmp, norm_obs=True, clip_obs=10.0, epsilon=1e-8, mean=np.full(3, np.nan), var=np.ones(3)),
    lambda tmp: Path(tmp).write_bytes(b"not a zip"),
])
def test_malformed_stats_are_clear_errors(tmp_path: Path, content) -> None:
    from servegym.agents.model_io import ObsNormalizer

    f = tmp_path / "m_vecnormalize.npz"
    content(f)
    with pytest.raises(ConfigError, match=r"m_vecnormalize\.npz"):
        ObsNormalizer.load(f)


def test_reward_only_normalization_saves_and_loads(tmp_path: Path) -> None:
    """VecNormalize(norm_obs=False) (GeoRoute-v0's recommended setting) keeps no observation
    statistics: saving its best model must not fail, and the loaded normalizer passes obs through."""
    from servegym.agents.model_io import ObsNormalizer, save_obs_stats
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    vn = VecNormalize(DummyVecEnv([lambda: gym.make("CartPole-v1")]), norm_obs=False, norm_reward=True)
    path = save_obs_stats(vn, tmp_path / "s.npz")
    for norm in (ObsNormalizer.load(path), ObsNormalizer.from_vecnormalize(vn)):
        obs = np.array([0.5, -1.0, 2.0, 0.1], dtype=np.float32)
        np.testing.assert_array_equal(norm(obs), obs)
