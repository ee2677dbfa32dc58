"""NPUAutoscale-v0 in the agents layer: the family's baselines run on the agent's episodes."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from servegym.agents.adapters import NPU_BASELINES
from servegym.agents.families import family_for, resolve_baselines, run_baseline_episodes
from servegym.baselines.npu import ideal_metrics, make_policy, run_policy
from servegym.envs.npu.env import BASELINES, NPUAutoscaleEnv
from servegym.envs.npu.sim.cluster import NPUCluster
from servegym.envs.npu.sim.fluid import make_cluster

from servegym.errors import ConfigError

ENV_ID = "servegym/NPUAutoscale-v0"
# openthoughts: long outputs spread over several decode groups, so NeuScale's routing depends on the seed
CONFIG = {"model": "Llama-3-8B", "trace": "openthoughts", "hours": 0.5, "n_candidates": 1, "rate_rpm": 600.0,
          "split": None}  # a configured scenario (no split draw)


@pytest.fixture(scope="module")
def env() -> NPUAutoscaleEnv:
    return NPUAutoscaleEnv(CONFIG)


def test_npu_family_lists_its_baselines() -> None:
    fam = family_for(ENV_ID)
    assert fam.name == "npu" and fam.run_baseline is not None
    assert set(fam.baselines) == {"base", "neuscale", "ideal", "hindsight"} == set(BASELINES) == set(NPU_BASELINES)
    assert resolve_baselines(fam, "all") == list(fam.baselines)
    with pytest.raises(ConfigError, match="allowed: all, none or a comma list of base, neuscale, ideal, hindsight"):
        resolve_baselines(fam, "rr")


def test_simulation_seed_follows_the_reset_seed(env: NPUAutoscaleEnv) -> None:
    env.reset(seed=5)
    a = env.simulation_seed
    env.reset(seed=6)
    assert env.simulation_seed != a
    env.reset(seed=5)
    assert env.simulation_seed == a and isinstance(a, int)


@pytest.mark.parametrize(("name", "fresh_trace"), [("neuscale", False), ("base", True)])
def test_run_baseline_replays_the_envs_episode(env: NPUAutoscaleEnv, name: str, fresh_trace: bool) -> None:
    if fresh_trace:  # the workload is drawn from the reset seed too
        env = NPUAutoscaleEnv({**CONFIG, "workload_seed": None})
    out = env.run_baseline(name, 4)
    # directly: the episode reset(seed=4) produces, driven by the policy
    env.reset(seed=4)
    sim = make_cluster(env.cluster_config, env.workload, seed=env.simulation_seed, catalog=env.catalog,
                       fidelity=env.config.fidelity)
    direct = run_policy(sim, make_policy(name), hours=CONFIG["hours"])
    assert out["summary"] == direct
    assert out["simulation_seed"] == env.simulation_seed and out["length"] == env.horizon == len(out["infos"])
    infos = out["infos"]
    assert sum(i["energy_j"] for i in infos) == pytest.approx(direct["energy_j"], rel=1e-12)
    assert sum(i["cost_usd"] for i in infos) == pytest.approx(direct["usd"], rel=1e-12)
    assert sum(i["tokens"] for i in infos) == pytest.approx(direct["tokens"], rel=1e-12)
    fin = sum(i["finished"] for i in infos)
    assert fin == round(direct["requests_finished"])  # the fluid's finished count is fractional
    assert out["reward"] == pytest.approx(sum(i["reward_objective"] + i["reward_slo"] for i in infos))
    # another seed is another episode (routing and creation times; with fresh_trace, the requests)
    assert env.run_baseline(name, 5)["summary"] != direct


def test_ideal_on_the_envs_workload(env: NPUAutoscaleEnv) -> None:
    out = env.run_baseline("ideal", 4)
    env.reset(seed=4)
    sim = NPUCluster(env.cluster_config, env.workload, seed=env.simulation_seed, catalog=env.catalog)
    assert out["summary"] == ideal_metrics(sim, hours=CONFIG["hours"])
    # the oracle at its own mean epoch costs exactly 1 per epoch (the reward's reference)
    assert out["reward"] == pytest.approx(-env.horizon)
    with pytest.raises(ConfigError, match="allowed: base, neuscale, ideal"):
        env.run_baseline("rr", 0)


def test_family_runner_gives_the_agents_metrics_on_the_same_seeds() -> None:
    fam = family_for(ENV_ID)
    env = gym.make(ENV_ID, config=CONFIG)
    res = run_baseline_episodes(fam, env, ["neuscale", "ideal"], [2, 3])
    assert [r.seed for r in res["neuscale"]] == [2, 3]
    ns = res["neuscale"][0]
    assert set(ns.metrics) == set(fam.metric_keys())
    direct = env.unwrapped.run_baseline("neuscale", 2)
    assert ns.metrics["energy_j"] == pytest.approx(direct["summary"]["energy_j"], rel=1e-12)
    assert ns.metrics["cost_usd"] == pytest.approx(direct["summary"]["usd"], rel=1e-12)
    assert ns.reward == pytest.approx(direct["reward"]) and ns.length == env.unwrapped.horizon
    # the oracle uses less energy than the simulated policy, with no SLO misses
    idl = res["ideal"][0]
    assert idl.metrics["energy_j"] < ns.metrics["energy_j"] and idl.metrics["slo_misses"] == 0.0
    assert "chips" not in idl.metrics and "emergency_scaleouts" not in idl.metrics
    # agent-side aggregation of the same keys: the env's own step infos on the same seed
    env.reset(seed=2)
    a = env.unwrapped.heuristic_action()
    steps = [env.step(a)[4] for _ in range(env.unwrapped.horizon)]
    assert {"energy_j", "cost_usd", "tokens", "slo_violation_pct", "slo_misses", "chips", "finished"} <= set(steps[-1])
    assert set(direct["infos"][-1]) >= {"energy_j", "cost_usd", "tokens", "slo_violation_pct", "slo_misses", "chips",
                                        "finished"}
    assert np.isfinite(ns.reward)


def test_family_serves_the_residual_mode_relative_to_base() -> None:
    """Residual actions with the reward relative to Base: Base scores 0, and the all-zero agent (played
    through the same rollout loop as a trained agent) scores exactly NeuScale's return and KPIs."""
    from servegym.agents.adapters import NPU_METRICS
    from servegym.agents.rollout import play_episode

    fam = family_for(ENV_ID)
    env = gym.make(ENV_ID, config={**CONFIG, "action_mode": "residual", "reward_mode": "base"})
    res = run_baseline_episodes(fam, env, ["base", "neuscale"], [3])
    assert res["base"][0].reward == pytest.approx(0.0, abs=1e-9)
    zero = play_episode(env, lambda _o, _i, e: np.zeros(e.action_space.shape, dtype=np.int64), 3, "zero",
                        NPU_METRICS)
    ns = res["neuscale"][0]
    assert zero.reward == pytest.approx(ns.reward, rel=1e-12, abs=1e-9)
    assert zero.metrics["energy_j"] == ns.metrics["energy_j"] and zero.metrics["slo_misses"] == ns.metrics["slo_misses"]
    assert zero.metrics["emergency_scaleouts"] >= 0


@pytest.mark.parametrize("env_id", ["servegym/NPUAutoscale-v0", "servegym/NPUAutoscaleResidual-v0"])
@pytest.mark.parametrize("algo", ["maskable-ppo", "ppo"])
def test_shipped_hyperparams_give_200_updates_on_the_quick_budget(env_id: str, algo: str) -> None:
    """>= 200 PPO updates per seed on the shipped budget, observations and rewards
    normalized."""
    from servegym.agents.hparams import load_hyperparams

    hp = load_hyperparams(env_id, algo)
    assert hp.source.endswith(env_id.split("/")[1] + ".yml")
    assert hp.n_timesteps is not None and hp.n_envs is not None
    assert hp.n_timesteps // (hp.n_envs * hp.algo_kwargs["n_steps"]) >= 200
    assert hp.normalize == {"norm_obs": True, "norm_reward": True}
    assert family_for(env_id).name == "npu"


def test_residual_id_is_the_env_in_residual_mode_relative_to_base() -> None:
    env = gym.make("servegym/NPUAutoscaleResidual-v0", config={"hours": 0.25})
    cfg = env.unwrapped.config
    assert (cfg.action_mode, cfg.reward_mode, cfg.hours) == ("residual", "base", 0.25)
    assert env.action_space.nvec.tolist() == [5] * len(env.unwrapped.groups)
    # keyword overrides, as for any gym.make(id, key=value)
    other = gym.make("servegym/NPUAutoscaleResidual-v0", config={"hours": 0.25}, action_mode="absolute")
    assert other.unwrapped.config.action_mode == "absolute" and other.unwrapped.config.reward_mode == "base"


def test_vecnormalize_discounts_rewards_with_the_algorithms_gamma(tmp_path, monkeypatch) -> None:
    """VecNormalize's return estimate uses the algorithm's gamma (item 3: rewards normalized with a
    matched discount): the trainer passes the hyperparameters' gamma to it."""
    from servegym.agents.train import TrainConfig, train
    from stable_baselines3.common import vec_env

    seen: list[float] = []

    class Spy(vec_env.VecNormalize):
        def __init__(self, venv, **kw) -> None:
            seen.append(kw["gamma"])
            super().__init__(venv, **kw)

    monkeypatch.setattr(vec_env, "VecNormalize", Spy)
    hp = tmp_path / "hp.yml"
    hp.write_text("ppo:\n  n_envs: 1\n  n_steps: 32\n  batch_size: 32\n  n_epochs: 1\n  gamma: 0.93\n"
                  "  normalize: true\n  policy_kwargs: {net_arch: [8]}\n")
    train(TrainConfig(env_id="CartPole-v1", algo="ppo", timesteps=32, hyperparams=str(hp), out=str(tmp_path / "m.zip"),
                      eval_freq=0, checkpoint_freq=0, eval_episodes=1, baselines="none", progress=False, verbose=0))
    assert seen == [0.93]
