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


def check_env_id(env_id: Any, source: str = "--env", *, quote: bool = True) -> str:
    """``env_id`` as Gymnasium's registry knows it (a ``servegym:`` prefix dropped), or a one-line
    :class:`ConfigError` naming ``source`` and the servegym ids. Never imports the module of a prefix.
    ``quote=False``: the error shows nothing of ``env_id`` (nor a near miss), for ids read from a file the
    user did not name (a model folder's run.json)."""
    import gymnasium as gym

    import servegym  # noqa: F401  (registers the ids)

    allowed = f"allowed: {', '.join(servegym_ids())} or another id already registered with Gymnasium"
    named = f"{source} = {shown(env_id)}" if quote else source
    if not isinstance(env_id, str) or not env_id or len(env_id) > MAX_ID_CHARS:
        raise ConfigError(f"{named} is not an env id; {allowed}")
    if ":" in env_id:
        module, _, rest = env_id.partition(":")
        if module != "servegym":
            what = f" ({shown(module)})" if quote else ""
            raise ConfigError(f"{named} names a module to import{what}; servegym never imports code named in an "
                              f"env id; {allowed}")
        env_id = rest
    if env_id not in gym.registry:
        from servegym.errors import near_miss

        ids = servegym_ids()
        hint = (near_miss(env_id, ids) or near_miss(f"servegym/{env_id}", ids)) if quote else ""
        raise ConfigError(f"{named} is not a registered env id{hint}; {allowed}")
    return env_id
