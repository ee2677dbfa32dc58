"""The geo-distributed serving family: the model (``sim``, its simulator ``sim.cluster``), envs (``env_route``,
``env_window``) and the multi-agent env, ``parallel_env`` (PettingZoo; needs the ``marl`` extra, imported on use)."""

from __future__ import annotations

from typing import Any

#: the engine profile ``servegym geo validate`` replays by default (here, not in ``validate``, so the command's
#: ``--help`` need not import the engine)
DEFAULT_VALIDATION_PROFILE = "llama3.1-8b_a100-40gb_tp1"


def parallel_env(config: Any = None, render_mode: str | None = None, **overrides: Any) -> Any:
    """The multi-agent geo routing env, one agent per regional scheduler
    (:class:`servegym.envs.geo.parallel.GeoRouteParallelEnv`; PettingZoo's ``parallel_env`` convention)."""
    from servegym.envs.geo.parallel import GeoRouteParallelEnv

    return GeoRouteParallelEnv(config, render_mode=render_mode, **overrides)


__all__ = ["DEFAULT_VALIDATION_PROFILE", "parallel_env"]
