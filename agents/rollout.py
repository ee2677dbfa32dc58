"""Playing seeded episodes: one loop for agents and for baselines that act through the env.

A rollout resets the env with an explicit seed, so an agent and every baseline meet the same
episode (same arrivals, same grid signals). Nothing here imports torch: an agent is any object
with SB3's ``predict(obs, deterministic=..., [action_masks=...])``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from servegym.agents.families import EpisodeAccumulator, EpisodeResult, MetricSpec
from servegym.agents.model_io import ObsNormalizer

from servegym.errors import ConfigError

# act(obs, info, env) -> action: the latest observation and info, and the (wrapped) env being played
# (for action masks or, for baselines, the simulator state the observation summarizes).
ActFn = Callable[[Any, dict[str, Any], gym.Env], Any]
# on_reset(env, info): called after the seeded reset (a baseline policy resets its own state here).
ResetFn = Callable[[gym.Env, dict[str, Any]], None]

# Guard against an env that never ends (an episode longer than this is a bug in the env config).
MAX_EPISODE_STEPS = 10_000_000


def play_episode(env: gym.Env, act: ActFn, seed: int, policy: str, metrics: Sequence[MetricSpec],
                 max_steps: int | None = None, on_reset: ResetFn | None = None) -> EpisodeResult:
    """Reset ``env`` with ``seed`` and step it with ``act`` until terminated or truncated."""
    obs, info = env.reset(seed=int(seed))
    if on_reset is not None:
        on_reset(env, info)
    acc = EpisodeAccumulator(metrics)
    total = 0.0
    steps = 0
    limit = MAX_EPISODE_STEPS if max_steps is None else max_steps
    done = False
    while not done and steps < limit:
        obs, reward, terminated, truncated, info = env.step(act(obs, info, env))
        total += float(reward)
        steps += 1
        done = bool(terminated or truncated)
        if not acc.only_last or done:
            acc.add(info)
    return EpisodeResult(policy=policy, seed=int(seed), reward=total, length=steps, metrics=acc.result())


def has_action_masks(env: gym.Env) -> bool:
    try:
        env.get_wrapper_attr("action_masks")
    except AttributeError:
        return False
    return True


def agent_act_fn(model: Any, normalizer: ObsNormalizer | Callable[[Any], Any] | None = None,
                 deterministic: bool = True, masked: bool | None = None) -> ActFn:
    """An :data:`ActFn` for an SB3 model; ``masked`` (default: the model is a MaskablePPO) passes the
    env's ``action_masks()``."""
    if masked is None:
        masked = type(model).__name__.startswith("Maskable")

    def act(obs: Any, info: dict[str, Any], env: gym.Env) -> Any:
        x = normalizer(obs) if normalizer is not None else obs
        if masked:
            masks = np.asarray(env.get_wrapper_attr("action_masks")())
            action, _ = model.predict(x, deterministic=deterministic, action_masks=masks)
        else:
            action, _ = model.predict(x, deterministic=deterministic)
        # Discrete actions come back as 0-d arrays; envs expect a plain int.
        if isinstance(env.action_space, gym.spaces.Discrete):
            return int(np.asarray(action).reshape(()))
        return action

    return act


def seeds_from(seed: int, episodes: int) -> list[int]:
    """The evaluation seeds ``seed, seed+1, ...`` (``episodes`` >= 1)."""
    if episodes < 1:
        raise ConfigError(f"episodes = {episodes} is out of range; allowed: >= 1")
    return [int(seed) + k for k in range(episodes)]
