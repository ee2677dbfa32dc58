"""servegym dataset: Minari datasets of baselines' episodes, loaded back and cloned by a behaviour policy."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

minari = pytest.importorskip(
    "minari", reason="minari is not installed: the offline-dataset tests need the optional extra "
                     "(pip install \"servegym[offline]\"); nothing else depends on it")
pytest.importorskip("jax", reason="jax is not installed: minari records episodes through jax.tree_util "
                                  "(pip install \"servegym[offline]\" brings it)")

from servegym.agents import protocol  # noqa: E402
from servegym.agents.adapters import PD_METRICS  # noqa: E402
from servegym.agents.dataset import dataset_id, record_dataset  # noqa: E402
from servegym.agents.rollout import play_episode  # noqa: E402

import servegym  # noqa: E402,F401
from servegym.cli import main  # noqa: E402
from servegym.errors import ConfigError  # noqa: E402

PD = "servegym/PDProvision-v0"


@pytest.fixture(scope="module")
def strongest(tmp_path_factory: pytest.TempPathFactory):
    """Two train-split episodes of the pd ids' strongest baseline, recorded into a temporary Minari root."""
    root = tmp_path_factory.mktemp("minari")
    rec = record_dataset(PD, policy="strongest", episodes=2, split="train", seed=0, out=root)
    return root, rec


def _load(root: Path, ds_id: str, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return minari.load_dataset(ds_id)


def test_dataset_ids_follow_minari_rules() -> None:
    from minari.dataset.minari_dataset import parse_dataset_id

    ds_id = dataset_id(PD, "min-power+forecast:0.97", "test")
    assert ds_id == "servegym/pdprovision-v0/min-power-forecast-0_97-test-v0"
    assert parse_dataset_id(ds_id) == ("servegym/pdprovision-v0", "min-power-forecast-0_97-test", 0)
    assert parse_dataset_id(dataset_id("servegym/GeoRoute-v0", "agent:maskable-ppo", "shift-load"))[2] == 0


def test_strongest_dataset_loads_with_kpis(strongest, monkeypatch: pytest.MonkeyPatch) -> None:
    root, rec = strongest
    assert rec.dataset_id == dataset_id(PD, protocol.resolve_policy(PD, "strongest"), "train")
    ds = _load(root, rec.dataset_id, monkeypatch)
    env = gym.make(PD)
    assert ds.observation_space == env.observation_space and ds.action_space == env.action_space
    # the stored spec is the env's own (no recording wrapper), so Minari can rebuild the env
    assert ds.spec.env_spec.additional_wrappers == () and ds.spec.env_spec.kwargs == {"split": "train"}
    assert ds.recover_environment().unwrapped.action_mode == "absolute"
    meta = ds.storage.metadata
    eps = json.loads(meta["servegym_episodes"])
    assert [e["seed"] for e in eps] == [0, 1] and meta["servegym_kpi"] == "energy_kwh"
    assert ds.total_episodes == 2 and ds.total_steps == sum(e["length"] for e in eps) == rec.steps
    for ep, kpis in zip(ds.iterate_episodes(), eps, strict=True):
        # the recorded rewards add up to the return the metadata reports; energy and SLO are there too
        assert float(np.sum(ep.rewards)) == pytest.approx(kpis["return"], rel=1e-9, abs=1e-9)
        assert kpis["energy_kwh"] > 0 and 0 <= kpis["slo_violation_pct"] <= 100
        assert ep.truncations[-1] or ep.terminations[-1]
    assert json.loads(meta["servegym_kpi_means"])["energy_kwh"] == pytest.approx(
        np.mean([e["energy_kwh"] for e in eps]))


def test_behaviour_cloning_beats_random(strongest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Least-squares behaviour cloning (linear in the observation, rounded to the action grid) on the
    strongest baseline's dataset, played on a test episode, against uniformly random actions."""
    root, rec = strongest
    ds = _load(root, rec.dataset_id, monkeypatch)
    x = np.concatenate([ep.observations[:-1] for ep in ds.iterate_episodes()]).astype(np.float64)
    y = np.concatenate([ep.actions for ep in ds.iterate_episodes()]).astype(np.float64)
    a = np.hstack([x, np.ones((len(x), 1))])
    w, *_ = np.linalg.lstsq(a, y, rcond=None)
    hi = ds.action_space.nvec - 1

    def bc(obs, info, env):
        return np.clip(np.rint(np.append(obs, 1.0) @ w), 0, hi).astype(np.int64)

    def rand(obs, info, env):
        return env.action_space.sample()

    assert np.mean(np.all(np.clip(np.rint(a @ w), 0, hi) == y, axis=1)) > 0.5  # it does imitate
    env = gym.make(PD, split="test")
    env.action_space.seed(0)
    cloned = play_episode(env, bc, 0, "bc", PD_METRICS)
    random = play_episode(env, rand, 0, "random", PD_METRICS)
    assert cloned.metrics["energy_kwh"] < random.metrics["energy_kwh"]
    assert cloned.metrics["slo_violation_pct"] <= random.metrics["slo_violation_pct"]
    assert cloned.reward > random.reward


def test_never_overwrites_without_force(strongest, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    root, rec = strongest
    before = next(_load(root, rec.dataset_id, monkeypatch).iterate_episodes())
    code = main(["dataset", "--env", PD, "--policy", "strongest", "--episodes", "1", "--out", str(root)])
    err = capsys.readouterr().err
    assert code == 2 and "already exists" in err and "--force" in err and len(err.strip().splitlines()) == 1
    # --force replaces it; the same seed records the same episode (deterministic)
    again = record_dataset(PD, policy="strongest", episodes=1, split="train", seed=0, out=root, force=True)
    ds = _load(root, again.dataset_id, monkeypatch)
    assert ds.total_episodes == 1
    ep = next(ds.iterate_episodes())
    np.testing.assert_array_equal(ep.actions, before.actions)
    np.testing.assert_array_equal(ep.observations, before.observations)
    assert not [p for p in root.iterdir() if p.name.startswith(".servegym-dataset-")]  # no temp folder left


def test_follow_records_on_the_residual_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_id = "servegym/PDProvisionResidual-v0"
    rec = record_dataset(env_id, policy="follow", episodes=1, split="validation", out=tmp_path, score=True)
    ds = _load(tmp_path, rec.dataset_id, monkeypatch)
    assert rec.dataset_id == "servegym/pdprovisionresidual-v0/follow-validation-v0"
    lv = gym.make(env_id).unwrapped.config.residual_levels
    assert (next(ds.iterate_episodes()).actions == lv).all()
    # --score: on the oracle scale, the reference's own choices sit between naive (0) and the oracle (100)
    (ep,) = json.loads(ds.storage.metadata["servegym_episodes"])
    assert 0 < ep["score"] < 100 and "oracle" in ds.storage.metadata["servegym_scale"]


@pytest.mark.parametrize("policy", ["static-peak", "strongest"])
def test_refuses_policies_the_env_action_cannot_express(tmp_path: Path, policy: str, capsys) -> None:
    code = main(["dataset", "--env", "servegym/PDProvisionResidual-v0", "--policy", policy, "--episodes", "1",
                 "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "cannot be recorded" in err and "allowed: follow, or --model PATH" in err
    assert not list(tmp_path.iterdir())


def test_bad_inputs_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="exactly one of"):
        record_dataset(PD, episodes=1, out=tmp_path)
    with pytest.raises(ConfigError, match="unknown"):
        record_dataset(PD, policy="nope", episodes=1, out=tmp_path)


def test_saved_agent_is_recorded_with_its_own_actions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model folder as servegym train leaves it (model.zip + run.json), loaded by the safe loader: the
    recorded actions are the agent's deterministic choices on the recorded observations."""
    sb3 = pytest.importorskip("stable_baselines3", reason="saved agents need the rl extra (stable-baselines3)")
    d = tmp_path / "run"
    d.mkdir()
    model = sb3.PPO("MlpPolicy", gym.make(PD), n_steps=16, batch_size=16, seed=0, device="cpu",
                    policy_kwargs={"net_arch": [8]})
    model.save(d / "model.zip")
    (d / "run.json").write_text(json.dumps({"env_id": PD, "algo": "ppo", "env_kwargs": {}}))
    rec = record_dataset(PD, model=str(d / "model.zip"), episodes=1, split="test", out=tmp_path / "ds")
    assert rec.dataset_id == "servegym/pdprovision-v0/agent-ppo-test-v0" and rec.steps > 0
    ep = next(_load(tmp_path / "ds", rec.dataset_id, monkeypatch).iterate_episodes())
    expected, _ = model.predict(ep.observations[:-1], deterministic=True)
    np.testing.assert_array_equal(ep.actions, expected)
