"""The algorithms ``servegym train`` offers, the action spaces each accepts, and model loading.

The table is plain data (no torch import); :func:`algo_class` imports stable-baselines3 or
sb3-contrib on demand.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from gymnasium import spaces

from servegym.errors import ConfigError


@dataclass(frozen=True)
class AlgoSpec:
    """One algorithm: ``target`` is ``"module:Class"``; ``action_spaces`` the gymnasium space classes
    it supports; ``needs_masks`` whether the env must expose ``action_masks()``."""

    name: str
    target: str
    action_spaces: tuple[str, ...]
    on_policy: bool
    needs_masks: bool = False


ALGOS: dict[str, AlgoSpec] = {
    a.name: a
    for a in (
        AlgoSpec("ppo", "stable_baselines3:PPO", ("Discrete", "MultiDiscrete", "MultiBinary", "Box"), True),
        AlgoSpec("maskable-ppo", "sb3_contrib:MaskablePPO", ("Discrete", "MultiDiscrete", "MultiBinary"), True,
                 needs_masks=True),
        AlgoSpec("a2c", "stable_baselines3:A2C", ("Discrete", "MultiDiscrete", "MultiBinary", "Box"), True),
        AlgoSpec("dqn", "stable_baselines3:DQN", ("Discrete",), False),
        AlgoSpec("sac", "stable_baselines3:SAC", ("Box",), False),
        AlgoSpec("td3", "stable_baselines3:TD3", ("Box",), False),
    )
}


def get_algo(name: str) -> AlgoSpec:
    spec = ALGOS.get(name.lower())
    if spec is None:
        raise ConfigError(f"--algo = {name!r} is unknown; allowed: {', '.join(ALGOS)}")
    return spec


def check_algo(name: str, action_space: spaces.Space[Any], env_id: str, has_masks: bool) -> AlgoSpec:
    """The algorithm's spec, or a one-line :class:`ConfigError` when it cannot act in ``action_space``."""
    spec = get_algo(name)
    kind = type(action_space).__name__
    if kind not in spec.action_spaces:
        fits = [a.name for a in ALGOS.values() if kind in a.action_spaces and (has_masks or not a.needs_masks)]
        raise ConfigError(f"--algo = {spec.name!r} cannot act in {env_id}'s {kind} action space "
                          f"(it supports {', '.join(spec.action_spaces)}); allowed for this env: {', '.join(fits)}")
    if spec.needs_masks and not has_masks:
        raise ConfigError(f"--algo = {spec.name!r} needs an env with action_masks(); {env_id} has none; "
                          "allowed: ppo, a2c")
    return spec


def algo_class(name: str) -> type[Any]:
    """The SB3 class of an algorithm (imports torch)."""
    module, _, cls = get_algo(name).target.partition(":")
    try:
        return getattr(importlib.import_module(module), cls)
    except ImportError as exc:  # the rl extra is missing
        raise ConfigError(f"--algo = {name!r} needs {module} (pip install 'servegym[rl]'): {exc}") from exc
