"""Geo scheduling policies on the decision API of ``servegym.envs.geo`` (carbon-blind baselines here;
the paper's carbon-aware schedulers join them in the next geo issue)."""

from __future__ import annotations

from servegym.baselines.geo.carbon_blind import LeastLoaded, RoundRobin

__all__ = ["LeastLoaded", "RoundRobin"]
