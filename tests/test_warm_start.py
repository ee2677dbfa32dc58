"""Warm start by behaviour cloning of the residual mode's follow action (servegym.agents.warm_start), and the
suite's per-entry hyperparameter files."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from servegym.agents.benchmark import SUITE, shipped_hyperparams
from servegym.agents.hparams import load_hyperparams, parse_section
from servegym.agents.warm_start import WarmStart, follow_rollout, parse_warm_start

import servegym  # noqa: F401
from servegym.errors import ConfigError

GEO = "servegym/GeoRoute-v0"
TINY = {"config": {"preset": "mini", "action_mode": "residual", "reference": "iter-ilp",
                   "geo": {"duration_s": 1.5, "drain_s": 10.0}}}


def test_warm_start_section_is_checked_field_by_field() -> None:
    assert parse_section({"n_steps": 8}, "f.yml").warm_start is None
    assert parse_section({"warm_start": True}, "f.yml").warm_start == WarmStart()
    hp = parse_section({"warm_start": {"steps": 100, "epochs": 2, "learning_rate": 0.01}, "n_steps": 8}, "f.yml")
    assert hp.warm_start == WarmStart(steps=100, epochs=2, learning_rate=0.01)
    assert hp.algo_kwargs == {"n_steps": 8}  # not passed to the algorithm
    assert parse_warm_start(False, "f") is None
    for raw, msg in (({"steps": 0}, "warm_start.steps = 0"), ({"steps": 2.5}, "warm_start.steps = 2.5"),
                     ({"epochs": True}, "warm_start.epochs = True"), ({"lr": 1}, "warm_start.lr is not a field"),
                     ({"learning_rate": float("nan")}, "warm_start.learning_rate"), ("yes", "warm_start = 'yes'")):
        with pytest.raises(ConfigError, match=msg) as exc:
            parse_section({"warm_start": raw}, "f.yml")
        assert "\n" not in str(exc.value)


@pytest.mark.parametrize(("env_id", "algo"), [("servegym/GeoRouteWindow-v0", "ppo"),
                                             ("servegym/NPUAutoscaleResidual-v0", "maskable-ppo"),
                                             ("servegym/PDProvisionResidual-v0", "maskable-ppo"),
                                             ("servegym/PDProvisionFront-v0", "maskable-ppo"),
                                             ("servegym/PDProvision-v0", "maskable-ppo")])
def test_quick_hyperparameter_files_warm_start(env_id: str, algo: str) -> None:
    """The quick files that warm start (GeoRoute-v0's no longer does, geo_ablation.md) have a checked section."""
    name = env_id.split("/")[1] + ".quick.yml"
    hp = load_hyperparams(env_id, algo, shipped_hyperparams(name))
    assert hp.source.endswith(name) and hp.n_envs and hp.warm_start is not None
    assert hp.warm_start.steps >= 1024


def test_quick_georoute_file_has_no_warm_start() -> None:
    """GeoRoute-v0's quick entry trains without a clone (a cloned follow action never moved in 40k steps:
    geo_ablation.md) and acts around iter-ilp at its own windows."""
    e = next(e for e in SUITE["quick"] if e.env_id == GEO)
    hp = load_hyperparams(GEO, e.algo, shipped_hyperparams(e.hyperparams))
    assert hp.warm_start is None and hp.n_envs
    assert e.env_kwargs["config"]["reference"] == "iter-ilp" and e.env_kwargs["config"]["decide_at"] == "window"


def test_suite_entries_name_shipped_hyperparameter_files() -> None:
    for e in (e for entries in SUITE.values() for e in entries if e.hyperparams is not None):
        hp = load_hyperparams(e.env_id, e.algo, shipped_hyperparams(e.hyperparams))
        assert hp.source.endswith(e.hyperparams) and hp.n_envs
    with pytest.raises(ConfigError, match="no such shipped file"):
        shipped_hyperparams("absent.yml")


def test_follow_rollout_records_the_reference_and_masks() -> None:
    obs, act, masks = follow_rollout(lambda: gym.make(GEO, **TINY), 300, seed=3)
    env = gym.make(GEO, **TINY)
    assert obs.shape == (300, env.observation_space.shape[0]) and obs.dtype == np.float32
    assert (act == env.unwrapped.follow_action()).all()
    assert masks is not None and masks.shape == (300, env.action_space.n) and masks[:, -1].all()
    again = follow_rollout(lambda: gym.make(GEO, **TINY), 300, seed=3)
    assert np.array_equal(obs, again[0])  # deterministic


@pytest.mark.slow
def test_cloned_policy_plays_the_reference_exactly() -> None:
    """After behaviour cloning, the deterministic policy's episode equals the follow action's: the RL that
    follows starts from the reference's return (checked on an episode it was not cloned on)."""
    from sb3_contrib import MaskablePPO
    from servegym.agents.families import family_for
    from servegym.agents.protocol import follow_action
    from servegym.agents.rollout import agent_act_fn, play_episode
    from servegym.agents.warm_start import behaviour_clone

    env = gym.make(GEO, **TINY)
    model = MaskablePPO("MlpPolicy", env, seed=0, n_steps=64, batch_size=64, policy_kwargs={"net_arch": [32, 32]})
    stats = behaviour_clone(model, lambda: gym.make(GEO, **TINY), WarmStart(steps=1024, epochs=20), seed=0)
    assert stats["agreement"] >= 0.99 and stats["steps"] == 1024
    fam = family_for(GEO)
    agent = play_episode(env, agent_act_fn(model), 99, "agent", fam.metrics)
    ref = play_episode(env, lambda o, i, e: follow_action(e), 99, "follow", fam.metrics)
    assert agent.reward == pytest.approx(ref.reward) and agent.metrics == ref.metrics


@pytest.mark.slow
def test_pd_residual_multidiscrete_clone_with_normalized_observations() -> None:
    """PDProvisionResidual-v0 around the strongest baseline (MultiDiscrete, masks, VecNormalize): the
    running statistics start from the reference's states, and the cloned policy, reading observations
    normalized by them, follows the strongest baseline on a validation episode it was not cloned on."""
    from sb3_contrib import MaskablePPO
    from servegym.agents.rollout import agent_act_fn
    from servegym.agents.warm_start import behaviour_clone
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    pd_id = "servegym/PDProvisionResidual-v0"
    kw = {"config": {"reference": "min-power+forecast:0.97", "scenario": {"horizon_steps": 120}}}
    venv = VecNormalize(DummyVecEnv([lambda: gym.make(pd_id, **kw)]))
    model = MaskablePPO("MlpPolicy", venv, seed=0, n_steps=64, batch_size=64, policy_kwargs={"net_arch": [32, 32]})
    stats = behaviour_clone(model, lambda: gym.make(pd_id, **kw), WarmStart(steps=1024, epochs=40, batch_size=128, learning_rate=3e-3), seed=0)
    assert stats["agreement"] >= 0.95 and venv.obs_rms.count > 1024
    act = agent_act_fn(model, venv.normalize_obs)
    env = gym.make(pd_id, split="validation", **kw)
    obs, info = env.reset(seed=1000)
    same = 0
    for _ in range(120):
        a = act(obs, info, env)
        same += int(np.array_equal(np.asarray(a), env.unwrapped.follow_action()))
        obs, _, term, trunc, info = env.step(a)
        if term or trunc:
            break
    assert same >= 0.9 * 120


@pytest.mark.slow
def test_warm_started_run_evaluates_the_clone_before_rl(tmp_path) -> None:
    """servegym train with warm_start evaluates the cloned policy at step 0 (a checkpoint candidate: if RL only
    degrades it, validation selection keeps it), and run.json records the warm start."""
    import json

    from servegym.agents.train import TrainConfig, train

    hp = tmp_path / "hp.yml"
    hp.write_text("maskable-ppo:\n  n_envs: 2\n  n_timesteps: 64\n  normalize: true\n  n_steps: 32\n"
                  "  batch_size: 32\n  n_epochs: 1\n  policy_kwargs: {net_arch: [32, 32]}\n"
                  "  warm_start: {steps: 512, epochs: 2}\n")
    kw = {"config": {"reference": "min-power+forecast:0.97", "scenario": {"horizon_steps": 60}}}
    res = train(TrainConfig(env_id="servegym/PDProvisionResidual-v0", algo="maskable-ppo", hyperparams=str(hp),
                            env_kwargs=kw, eval_freq=0, eval_episodes=1, baselines="none", checkpoint_freq=0,
                            progress=False, verbose=0, tb=None, out=str(tmp_path / "m.zip")))
    run = json.loads(res.run_file.read_text())
    assert [h["timesteps"] for h in run["eval_history"]] == [0.0, 64.0]
    assert run["warm_start"]["steps"] == 512 and res.best_model_path is not None


@pytest.mark.parametrize("pd_id", ["servegym/PDProvision-v0", "servegym/PDProvisionFront-v0"])
def test_pd_teacher_is_the_reference_action_in_every_mode(pd_id: str) -> None:
    """The absolute and front modes have no follow action: the warm start's teacher is the env's
    reference_action(), and in the absolute mode that is the strongest baseline's own deployment."""
    from servegym.baselines.pd import MinPowerForecast

    kw = {"config": {"reference": "min-power+forecast:0.97", "scenario": {"horizon_steps": 60}}}
    obs, act, masks = follow_rollout(lambda: gym.make(pd_id, **kw), 80, seed=5)
    assert obs.shape[0] == act.shape[0] == 80 and masks is not None and masks.shape[0] == 80
    env = gym.make(pd_id, **kw)
    o, info = env.reset(seed=5)
    base = MinPowerForecast(rho_bar=0.97)
    base.reset(env.unwrapped, info)
    for k in range(60):  # the first episode: the recorded actions are the env's reference_action()
        ref = env.unwrapped.reference_action()
        assert np.array_equal(act[k], ref) and np.array_equal(obs[k], o)
        if pd_id.endswith("PDProvision-v0"):
            assert np.array_equal(ref, base.act(o, info))
        o, _, term, trunc, info = env.step(ref)
    assert term or trunc
