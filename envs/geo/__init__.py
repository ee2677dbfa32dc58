"""The geo-distributed serving family: simulator (``cluster``), envs (``env_route``, ``env_window``)
and the multi-agent env, ``parallel_env`` (PettingZoo; needs the ``marl`` extra, imported on use)."""

from __future__ import annotations

from typing import Any


def parallel_env(config: Any = None, render_mode: str | None = None, **overrides: Any) -> Any:
    """The multi-agent geo routing env, one agent per regional scheduler
    (:class:`servegym.envs.geo.parallel.GeoRouteParallelEnv`; PettingZoo's ``parallel_env`` convention)."""
    from servegym.envs.geo.parallel import GeoRouteParallelEnv

    return GeoRouteParallelEnv(config, render_mode=render_mode, **overrides)


__all__ = ["parallel_env"]
