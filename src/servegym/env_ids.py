"""Checking an env id before Gymnasium sees it.

``gym.make("pkg.mod:Name-v0")`` imports ``pkg.mod`` first (Gymnasium's ``module:`` prefix), so an id taken
from a sweep file, a model folder's ``run.json`` or the command line could run any module on the path,
including a ``.py`` file lying beside the sweep file. :func:`check_env_id` refuses every such prefix
(``servegym:`` excepted, which names this package, already imported) and accepts only ids already in
Gymnasium's registry: servegym's own (registered by ``import servegym``) and those registered by code
that was imported on purpose, such as Gymnasium's built-in ``CartPole-v1``. Nothing is imported here.
"""

from __future__ import annotations

from typing import Any

from servegym.errors import ConfigError, shown

#: Longest env id accepted (the registered ones are under 40 characters).
MAX_ID_CHARS = 200



def servegym_ids() -> list[str]:
    from servegym.registration import ENV_SPECS

    return [e.id for e in ENV_SPECS]


def check_env_id(env_id: Any, source: str = "--env") -> str:
    """``env_id`` as Gymnasium's registry knows it (a ``servegym:`` prefix dropped), or a one-line
    :class:`ConfigError` naming ``source`` and the servegym ids. Never imports the module of a prefix."""
    import gymnasium as gym

    import servegym  # noqa: F401  (registers the ids)

    allowed = f"allowed: {', '.join(servegym_ids())} or another id already registered with Gymnasium"
    if not isinstance(env_id, str) or not env_id or len(env_id) > MAX_ID_CHARS:
        raise ConfigError(f"{source} = {shown(env_id)} is not an env id; {allowed}")
    if ":" in env_id:
        module, _, rest = env_id.partition(":")
        if module != "servegym":
            raise ConfigError(f"{source} = {shown(env_id)} names a module to import ({shown(module)}); servegym "
                              f"never imports code named in an env id; {allowed}")
        env_id = rest
    if env_id not in gym.registry:
        from servegym.errors import near_miss

        ids = servegym_ids()
        hint = near_miss(env_id, ids) or near_miss(f"servegym/{env_id}", ids)
        raise ConfigError(f"{source} = {shown(env_id)} is not a registered env id{hint}; {allowed}")
    return env_id
