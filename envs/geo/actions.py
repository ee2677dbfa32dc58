"""The action modes of the geo envs as small classes (``action_mode``, ``decide_at``).

Each class owns its action space, its mask, how an action becomes the simulator's decision, what it adds to
the observation and the scheduling delay its placements leave with; :func:`route_action_type` and
:func:`window_action_type` pick one from the config, so neither env's ``reset`` nor ``step`` branches on the
mode. A new mode is a new class here and a line in its factory. The modes themselves are described in the
envs' module docstrings (:mod:`~servegym.envs.geo.env_route`, :mod:`~servegym.envs.geo.env_window`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray
from servegym.envs.geo.observations import squash
from servegym.envs.geo.reference import ReferencePlanner, make_reference
from servegym.envs.geo.sim.decisions import DecisionContext

from servegym.errors import ConfigError

if TYPE_CHECKING:
    from servegym.envs.geo.env_config import GeoEnvConfig
    from servegym.envs.geo.env_window import GeoRouteWindowEnv
    from servegym.envs.geo.sim.cluster import GeoSimulation
    from servegym.envs.geo.sim.config import GeoConfig


# ------------------------------------------------------------------------------------- GeoRoute-v0
class RouteDirect:
    """``direct``: ``Discrete(D)``, the DC index of the current request."""

    residual = False
    #: the simulator's decision mode: one poll interval's arrivals per context
    simulator_mode = "request"
    #: observation values this mode adds after the base blocks
    extra_dims = 0

    def space(self, n_dcs: int) -> spaces.Discrete:
        return spaces.Discrete(n_dcs)

    def reset(self, sim: GeoSimulation) -> None:
        """A new episode on ``sim``."""

    def load(self, ctx: DecisionContext, rows: NDArray[np.float32], base_dim: int) -> None:
        """A new poll interval ``ctx`` whose observation rows are ``rows``."""

    def decide(self, i: int, a: int, dispatched: NDArray[np.float64]) -> int:
        """The DC that action ``a`` places row ``i`` on (``dispatched``: the scheduler's counts before it)."""
        return a

    def mask(self, feasible: NDArray[np.bool_]) -> NDArray[np.bool_]:
        """The action mask from the row's SLO-feasible DCs (a fresh array)."""
        return feasible.copy()

    def write(self, row: NDArray[np.float32], base_dim: int, i: int, dispatched: NDArray[np.float64]) -> None:
        """This mode's observation block of row ``i`` (after ``base_dim``)."""

    def delay_s(self) -> float:
        """The scheduling delay (s) the interval's placements leave with."""
        return 0.0

    def follow_action(self, n_dcs: int) -> int:
        raise ConfigError("follow_action() needs action_mode = 'residual'; allowed: a residual GeoRoute-v0")


class RouteResidual(RouteDirect):
    """``residual``: ``Discrete(D + 1)``; action ``D`` is the reference scheduler's choice for the request
    (:class:`~servegym.envs.geo.reference.ReferencePlanner`), shown as a one-hot after the base blocks."""

    residual = True

    def __init__(self, reference: str, window_s: float, window_max_requests: int, n_dcs: int) -> None:
        self.planner = ReferencePlanner(reference, window_s, window_max_requests)
        self.n_dcs = n_dcs
        self.extra_dims = n_dcs

    def space(self, n_dcs: int) -> spaces.Discrete:
        return spaces.Discrete(n_dcs + 1)

    def reset(self, sim: GeoSimulation) -> None:
        self.planner.reset(sim.n_dcs, sim.n_regions, sim.seed)

    def load(self, ctx: DecisionContext, rows: NDArray[np.float32], base_dim: int) -> None:
        rows[:, base_dim:] = 0.0
        self.planner.load(ctx)

    def decide(self, i: int, a: int, dispatched: NDArray[np.float64]) -> int:
        ref = self.planner.choice_for(i, dispatched)
        if a == self.n_dcs:
            return ref
        if a != ref:
            self.planner.deviated(i)
        return a

    def mask(self, feasible: NDArray[np.bool_]) -> NDArray[np.bool_]:
        out = np.empty(feasible.size + 1, dtype=bool)  # np.append's result without its generic path (per step)
        out[:-1] = feasible
        out[-1] = True  # the reference's choice is always allowed
        return out

    def write(self, row: NDArray[np.float32], base_dim: int, i: int, dispatched: NDArray[np.float64]) -> None:
        row[base_dim:] = 0.0
        row[base_dim + self.planner.choice_for(i, dispatched)] = 1.0

    def follow_action(self, n_dcs: int) -> int:
        return int(n_dcs)


class RouteResidualWindow(RouteResidual):
    """``residual`` with ``decide_at = "window"``: the simulator hands out the reference's windows and each
    leaves after the reference's modelled solve delay, so following is the reference's own run."""

    simulator_mode = "window"

    def delay_s(self) -> float:
        return self.planner.delay_s


def route_action_class(config: GeoEnvConfig) -> type[RouteDirect]:
    """The GeoRoute-v0 action mode of ``config`` (``action_mode``, ``decide_at``)."""
    if config.action_mode == "direct":
        return RouteDirect
    return RouteResidualWindow if config.decide_at == "window" else RouteResidual


def route_action_type(config: GeoEnvConfig, geo: GeoConfig, n_dcs: int) -> RouteDirect:
    """A fresh action mode object for GeoRoute-v0 (its reference from ``config``, windows from ``geo``)."""
    cls = route_action_class(config)
    if cls is RouteDirect:
        return RouteDirect()
    return cls(config.reference, geo.window_s, geo.window_max_requests, n_dcs)


# ------------------------------------------------------------------------------- GeoRouteWindow-v0
class WindowDirect:
    """``direct``: per-DC shares of headroom, placed by :func:`~servegym.envs.geo.env_window.assign_within_caps`."""

    residual = False
    #: per-DC observation blocks this mode adds after the window block
    extra_blocks = 0

    def reset(self, sim: GeoSimulation) -> None:
        """A new episode on ``sim``."""

    def place(self, env: GeoRouteWindowEnv, ctx: DecisionContext, share: NDArray[np.float64]
              ) -> tuple[NDArray[np.int64], int, float]:
        """(DC per request, requests placed beyond the caps, scheduling delay in s) for ``share``."""
        from servegym.envs.geo.env_window import assign_within_caps

        dc, overflow = assign_within_caps(ctx.estimates.carbon_g, ctx.action_mask(), env._caps(ctx, share))
        return dc, overflow, 0.0

    def placements(self, env: GeoRouteWindowEnv, ctx: DecisionContext, action: Any) -> NDArray[np.int64]:
        """The DCs :meth:`place` would choose for ``action`` (checked by the env), changing nothing."""
        return self.place(env, ctx, env._check_action(action))[0]

    def write(self, obs: NDArray[np.float32], o: int, ctx: DecisionContext, sim: GeoSimulation) -> int:
        """This mode's observation block at offset ``o``; returns the offset after it."""
        return o


class WindowResidual(WindowDirect):
    """``residual``: the action scales the reference window scheduler's admission capacity, which then solves
    the window itself; ``ref_cap[d]`` (its capacities) is observed after the window block."""

    residual = True
    extra_blocks = 1

    def __init__(self, reference: str) -> None:
        self.policy: Any = make_reference(reference)
        if getattr(self.policy, "decision_mode", "request") != "window":
            raise ConfigError(f"reference = {reference!r} is not a window scheduler; allowed "
                              "for GeoRouteWindow-v0's residual mode: ['milp', 'ilp', 'iter-ilp']")
        self.policy.capacity_hook = self.scaled_capacity
        self.scale: NDArray[np.float64] = np.zeros(0)

    def reset(self, sim: GeoSimulation) -> None:
        self.policy.reset(sim.n_dcs, sim.n_regions, sim.seed)

    def place(self, env: GeoRouteWindowEnv, ctx: DecisionContext, share: NDArray[np.float64]
              ) -> tuple[NDArray[np.int64], int, float]:
        self.scale = 2.0 * share - 1.0  # the action itself, in [-1, 1]
        dc = np.asarray(self.policy.decide(ctx), dtype=np.int64)
        return dc, 0, self.policy.sched_delay_s(ctx)

    def placements(self, env: GeoRouteWindowEnv, ctx: DecisionContext, action: Any) -> NDArray[np.int64]:
        raise ConfigError("placements() is for action_mode='direct'; the residual mode's placements are "
                          "the reference scheduler's solve, made by step()")

    def scaled_capacity(self, ctx: DecisionContext, cap: NDArray[np.float64]) -> NDArray[np.float64]:
        """The residual mode's ``H'_d`` from the scheduler's ``H_d`` (GeoRouteWindow-v0's module docstring)."""
        a = self.scale
        if not a.any():
            return cap  # exactly the reference's capacities
        n = ctx.n_requests
        return np.where(a < 0.0, np.floor(cap * (1.0 + a)), cap + np.floor(np.maximum(a, 0.0) * n))

    def write(self, obs: NDArray[np.float32], o: int, ctx: DecisionContext, sim: GeoSimulation) -> int:
        from servegym.baselines.geo.ilp import window_headroom

        d = sim.n_dcs
        obs[o:o + d] = squash(window_headroom(ctx, sim.estimator) / max(ctx.n_requests, 1))
        return o + d


def window_action_type(config: GeoEnvConfig) -> WindowDirect:
    """A fresh action mode object for GeoRouteWindow-v0 (``action_mode``, ``reference``)."""
    return WindowResidual(config.reference) if config.action_mode == "residual" else WindowDirect()
