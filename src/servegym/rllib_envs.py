"""servegym's envs as RLlib (Ray's RL library) environments, single- and multi-agent.

RLlib builds each env runner's environments from a registered creator ``creator(env_config)``; Ray ships the
creator to every node by reference, so servegym must be installed on each node (the same version and Python
as the driver). Two creators:

- :func:`make_env` (name ``"servegym"``): any registered id, ``env_config = {"id": ID, "kwargs": {...}}``
  (``kwargs`` go to ``gymnasium.make``, e.g. ``{"config": {...}}``).
- :func:`make_geo_multi_agent` (name ``"servegym-geo-ma"``): the multi-agent geo env
  (:func:`servegym.envs.geo.parallel_env`, one agent per regional scheduler) through RLlib's PettingZoo
  wrapper ``ParallelPettingZooEnv``; ``env_config = {"config": {...}}``.

::

    from servegym.rllib_envs import register
    register()
    config = PPOConfig().environment("servegym", env_config={"id": "servegym/PDProvision-v0"})

Plain RLlib PPO ignores action masks: an invalid action is adjusted by the env and reported in
``info["action_adjusted"]``. RLlib's action-masking modules read ``obs["action_mask"]``, which
:class:`servegym.wrappers.ActionMaskObservation` adds (``env_config["action_mask_obs"] = True``).
``ray[rllib]`` pins an older gymnasium than servegym's default install; see the ``rllib`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servegym.errors import ConfigError, UnexpectedKeywordError

#: Names the creators are registered under (:func:`register`).
SINGLE_AGENT = "servegym"
GEO_MULTI_AGENT = "servegym-geo-ma"


def _plain(env_config: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> dict[str, Any]:
    """RLlib's ``EnvContext`` (a dict with runner attributes) as a plain dict with only ``allowed`` keys."""
    cfg = dict(env_config)
    unknown = sorted(set(cfg) - set(allowed))
    if unknown:
        raise UnexpectedKeywordError(f"{where}() got an unexpected keyword argument {unknown[0]!r}; "
                                     f"allowed: {', '.join(allowed)}")
    return cfg


def make_env(env_config: Mapping[str, Any]) -> Any:
    """One servegym env for an RLlib env runner: ``gymnasium.make(env_config["id"], **env_config["kwargs"])``,
    wrapped in :class:`~servegym.wrappers.ActionMaskObservation` when ``env_config["action_mask_obs"]``."""
    import gymnasium as gym

    import servegym  # noqa: F401 (registers the ids in this worker process)
    from servegym.wrappers import ActionMaskObservation

    cfg = _plain(env_config, ("id", "kwargs", "action_mask_obs"), "make_env")
    env_id = cfg.get("id")
    if not isinstance(env_id, str) or not env_id.startswith("servegym/"):
        raise ConfigError(f"env_config.id = {env_id!r}; allowed: a servegym id such as 'servegym/PDProvision-v0'")
    kwargs = cfg.get("kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise ConfigError(f"env_config.kwargs = {kwargs!r}; allowed: a mapping of gymnasium.make keyword arguments")
    env = gym.make(env_id, **dict(kwargs))
    return ActionMaskObservation(env) if cfg.get("action_mask_obs") else env


def make_geo_multi_agent(env_config: Mapping[str, Any]) -> Any:
    """The multi-agent geo env in RLlib's ``ParallelPettingZooEnv`` (``env_config = {"config": {...}}``)."""
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

    from servegym.envs.geo import parallel_env

    cfg = _plain(env_config, ("config",), "make_geo_multi_agent")
    return ParallelPettingZooEnv(parallel_env(config=cfg.get("config")))


def register() -> None:
    """Register both creators with Ray's Tune registry (idempotent)."""
    from ray.tune.registry import register_env

    register_env(SINGLE_AGENT, make_env)
    register_env(GEO_MULTI_AGENT, make_geo_multi_agent)
