"""Every env's per-step reward stays within the bound its docstring states (issue #15, defect 7), on
random and on overloading play. The bounds are derived in the env modules; this checks them on episodes."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import servegym  # noqa: F401  (registers the ids)
from servegym.errors import ActionError

GEO = {"preset": "mini", "geo": {"duration_s": 2.0, "drain_s": 10.0}}


def _geo_episode(env_id: str, config: dict, policy: str, seed: int) -> tuple[float, list[float]]:
    env = gym.make(env_id, config=config)
    env.reset(seed=seed)
    bound = env.unwrapped.per_step_reward_bound()
    rng = np.random.default_rng(seed)
    rewards: list[float] = []
    done = False
    while not done:
        if env_id.endswith("Window-v0"):
            a = rng.uniform(-1, 1, env.action_space.shape).astype(np.float32) if policy == "random" else \
                np.ones(env.action_space.shape, dtype=np.float32)
        else:
            a = int(rng.integers(env.action_space.n)) if policy == "random" else 0
        _, r, terminated, truncated, _ = env.step(a)
        rewards.append(float(r))
        done = terminated or truncated
    env.close()
    return bound, rewards


@pytest.mark.parametrize("env_id", ["servegym/GeoRoute-v0", "servegym/GeoRouteWindow-v0"])
@pytest.mark.parametrize("reward", ["dense", "poll"])
@pytest.mark.parametrize(("policy", "load", "w_slo"), [("random", "moderate", 1.0), ("overload", "high", 1.0),
                                                       ("overload", "high", 1e4)])
def test_geo_rewards_stay_within_the_stated_bound(env_id: str, reward: str, policy: str, load: str,
                                                  w_slo: float) -> None:
    cfg = {**GEO, "load": load, "reward": reward, "w_slo": w_slo}
    bound, rewards = _geo_episode(env_id, cfg, policy, seed=1)
    assert math.isfinite(bound) and bound > 0
    assert max(abs(r) for r in rewards) <= bound
    # a bound that is not vacuous by orders of magnitude beyond what the episode's return could reach
    assert bound < 1e3 * (abs(sum(rewards)) + w_slo * 100)


def test_geo_bound_needs_an_episode() -> None:
    with pytest.raises(ActionError, match="reset"):
        gym.make("servegym/GeoRoute-v0", config=GEO).unwrapped.per_step_reward_bound()


@pytest.mark.parametrize("config", [{}, {"objective": "carbon", "slo_weight": 1e6}, {"objective": "cost"},
                                    {"mode": "request", "scenario": {"peak_rate_rps": 2.0}}])
def test_pd_rewards_stay_within_the_stated_bound(config: dict) -> None:
    cfg = {**config, "scenario": {"horizon_steps": 30, **config.get("scenario", {})}}
    env = gym.make("servegym/PDProvision-v0", config=cfg)
    env.reset(seed=0)
    env.action_space.seed(0)
    bound = env.unwrapped.per_step_reward_bound()
    assert math.isfinite(bound) and bound > 0
    done, k = False, 0
    while not done:
        _, r, terminated, truncated, _ = env.step(env.action_space.sample())
        k += 1
        done = terminated or truncated
        if terminated:  # the terminating step adds the termination penalty (module docstring)
            pen = env.unwrapped.config.termination_penalty
            assert r >= -bound * (1 + 30 - k) - (pen or 0.0)
        else:
            assert -bound <= r <= 0.0


def test_npu_rewards_stay_within_the_stated_bound() -> None:
    env = gym.make("servegym/NPUAutoscale-v0", config={"model": "Llama3-8B", "hours": 0.5, "n_candidates": 1,
                                                       "split": None, "rate_rpm": 1e-3})
    with pytest.raises(ActionError, match="reset"):
        env.unwrapped.per_step_reward_bound()
    env.reset(seed=0)
    env.action_space.seed(0)
    bound = env.unwrapped.per_step_reward_bound()
    assert math.isfinite(bound)
    done = False
    while not done:
        _, r, terminated, truncated, _ = env.step(env.action_space.sample())
        assert abs(r) <= bound
        done = terminated or truncated
