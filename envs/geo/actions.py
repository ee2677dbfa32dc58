"""The action modes of the geo envs as :class:`~servegym.envs.action_type.ActionType` classes (``action_mode``,
``decide_at``).

Each class owns its action space, its mask, the decoding of an action into the simulator's decision, the
reference's action, what it adds to the observation and the scheduling delay its placements leave with. It
reads the model's :class:`~servegym.envs.geo.sim.decisions.GeoDecisionState` (the outstanding decision
context and what the env has decided of it), never the env. :func:`route_action_type` and
:func:`window_action_type` pick one from the config, so neither env's ``reset`` nor ``step`` branches on the
mode. A new mode is a new class here and a line in its factory. The modes themselves are described in the
envs' module docstrings (:mod:`~servegym.envs.geo.env_route`, :mod:`~servegym.envs.geo.env_window`).

Registry keys (:func:`~servegym.envs.action_type.register`, family ``"geo"``): both envs take
``action_mode = "direct"`` or ``"residual"``, so the keys name the env too. GeoRoute-v0's keep the config's
value (``"direct"``, ``"residual"``; ``"residual-decide-at-window"`` for ``decide_at = "window"``), and
GeoRouteWindow-v0's carry a ``window-`` prefix (``"window-direct"``, ``"window-residual"``).

Decisions (``decode``): GeoRoute-v0's is the DC index of the current request (``state.i``);
GeoRouteWindow-v0's a :class:`~servegym.envs.geo.sim.decisions.WindowPlacement` (the window's DCs, scheduling
delay and overflow). A residual mode's ``decode`` advances its reference's plan (the route's planner replans a
scheduler after a deviation; the window's scheduler solves the window), so an env calls it once per decision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray
from servegym.envs.action_type import ActionType, register
from servegym.envs.geo.observations import squash
from servegym.envs.geo.reference import ReferencePlanner, is_causal, make_reference
from servegym.envs.geo.sim.decisions import DecisionContext, GeoDecisionState, WindowPlacement

from servegym.errors import ActionError, ConfigError

if TYPE_CHECKING:
    from servegym.envs.geo.env_config import GeoEnvConfig
    from servegym.envs.geo.sim.cluster import GeoSimulation
    from servegym.envs.geo.sim.config import GeoConfig

DecisionT = TypeVar("DecisionT", covariant=True)


class GeoActionType(ActionType[GeoDecisionState, DecisionT]):
    """A geo action mode: the interface, plus what both geo envs ask of a mode (an episode's start, the
    residual modes' follow action).

    Args:
        n_dcs: the DCs of the env's topology (the space's size).
    """

    family = "geo"
    #: whether the mode acts around a reference scheduler
    residual: ClassVar[bool] = False
    #: the error of :meth:`follow_action` in a mode without a reference
    no_follow: ClassVar[str] = "follow_action() needs a residual action mode"

    def __init__(self, n_dcs: int) -> None:
        self.n_dcs = int(n_dcs)

    def reset(self, sim: GeoSimulation) -> None:
        """A new episode on ``sim``."""

    def follow_action(self) -> Any:
        """The residual mode's "do what the reference does" action (the benchmark's ``follow`` policy)."""
        raise ConfigError(self.no_follow)


# ------------------------------------------------------------------------------------- GeoRoute-v0
class RouteActionType(GeoActionType[int]):
    """A GeoRoute-v0 mode: one request per step (the row ``state.i`` of a poll interval's context)."""

    #: the simulator's decision mode: one poll interval's arrivals per context
    simulator_mode: ClassVar[str] = "request"
    no_follow = "follow_action() needs action_mode = 'residual'; allowed: a residual GeoRoute-v0"

    def __init__(self, n_dcs: int) -> None:
        super().__init__(n_dcs)
        #: observation values this mode adds after the base blocks
        self.extra_dims = 0
        self.n_actions = self.n_dcs

    def space(self) -> spaces.Discrete:
        return spaces.Discrete(self.n_actions)

    def check(self, action: Any) -> int:
        """``action`` as an int in the space, or :class:`ActionError` (nothing changes)."""
        d = self.n_actions
        if type(action) is int and 0 <= action < d:
            return action  # a plain in-range int, checked cheaply: what the multi-agent env passes again
        if isinstance(action, (int, np.integer)) and not isinstance(action, (bool, np.bool_)):
            a = int(action)
        elif isinstance(action, np.ndarray) and action.size == 1 and action.ndim <= 1 and action.dtype.kind in "iu":
            a = int(action.reshape(-1)[0])
        else:
            raise ActionError(f"action = {action!r} is not a DC index; allowed: an integer in [0, {d - 1}]")
        if not 0 <= a < d:
            raise ActionError(f"action = {a} is out of range; allowed: an integer in [0, {d - 1}]")
        return a

    def load(self, state: GeoDecisionState, rows: NDArray[np.float32], base_dim: int) -> None:
        """A new poll interval (``state.ctx``) whose observation rows are ``rows`` (the mode's block after
        ``base_dim``)."""

    def write(self, state: GeoDecisionState, row: NDArray[np.float32], base_dim: int, i: int) -> None:
        """This mode's observation block (after ``base_dim``) of row ``i``'s observation ``row``."""

    def delay_s(self, state: GeoDecisionState) -> float:
        """The scheduling delay (s) the interval's placements leave with."""
        return 0.0


@register
class RouteDirect(RouteActionType):
    """``direct``: ``Discrete(D)``, the DC index of the current request."""

    mode = "direct"

    def mask(self, state: GeoDecisionState) -> NDArray[np.bool_]:
        """The current row's SLO-feasible DCs (a fresh array)."""
        return state.feasible[state.i].copy()

    def decode(self, state: GeoDecisionState, action: Any) -> int:
        return self.check(action)


@register
class RouteResidual(RouteActionType):
    """``residual``: ``Discrete(D + 1)``; action ``D`` is the reference scheduler's choice for the request
    (:class:`~servegym.envs.geo.reference.ReferencePlanner`), shown as a one-hot after the base blocks."""

    mode = "residual"
    residual = True

    def __init__(self, reference: str, window_s: float, window_max_requests: int, n_dcs: int) -> None:
        super().__init__(n_dcs)
        self.planner = ReferencePlanner(reference, window_s, window_max_requests)
        self.extra_dims = self.n_dcs
        self.n_actions = self.n_dcs + 1

    def reset(self, sim: GeoSimulation) -> None:
        self.planner.reset(sim.n_dcs, sim.n_regions, sim.seed)

    def load(self, state: GeoDecisionState, rows: NDArray[np.float32], base_dim: int) -> None:
        rows[:, base_dim:] = 0.0
        assert state.ctx is not None
        self.planner.load(state.ctx)

    def mask(self, state: GeoDecisionState) -> NDArray[np.bool_]:
        feasible = state.feasible[state.i]
        out = np.empty(feasible.size + 1, dtype=bool)  # np.append's result without its generic path (per step)
        out[:-1] = feasible
        out[-1] = True  # the reference's choice is always allowed
        return out

    def decode(self, state: GeoDecisionState, action: Any) -> int:
        """The DC; a deviation from the reference makes its planner replan the scheduler's later rows, and a
        dead-reckoned reference counts the placement made."""
        a = self.check(action)
        i = state.i
        ref = self.planner.choice_for(i, state.dispatched)
        if a == self.n_dcs:
            a = ref
        elif a != ref:
            self.planner.deviated(i)
        self.planner.placed(a)
        return a

    def write(self, state: GeoDecisionState, row: NDArray[np.float32], base_dim: int, i: int) -> None:
        row[base_dim:] = 0.0
        row[base_dim + self.planner.choice_for(i, state.dispatched)] = 1.0

    def reference_action(self, state: GeoDecisionState) -> int:
        return self.follow_action()

    def follow_action(self) -> int:
        return self.n_dcs


@register
class RouteResidualWindow(RouteResidual):
    """``residual`` with ``decide_at = "window"``: the simulator hands out the reference's windows and each
    leaves after the reference's modelled solve delay, so following is the reference's own run."""

    mode = "residual-decide-at-window"
    simulator_mode = "window"

    def delay_s(self, state: GeoDecisionState) -> float:
        return self.planner.delay_s


def route_action_class(config: GeoEnvConfig) -> type[RouteActionType]:
    """The GeoRoute-v0 action mode of ``config`` (``action_mode``, ``decide_at``)."""
    if config.action_mode == "direct":
        return RouteDirect
    return RouteResidualWindow if config.decide_at == "window" else RouteResidual


def route_action_type(config: GeoEnvConfig, geo: GeoConfig, n_dcs: int) -> RouteActionType:
    """A fresh action mode object for GeoRoute-v0 (its reference from ``config``, windows from ``geo``)."""
    cls = route_action_class(config)
    if issubclass(cls, RouteResidual):
        return cls(config.reference, geo.window_s, geo.window_max_requests, n_dcs)
    return cls(n_dcs)


# ------------------------------------------------------------------------------- GeoRouteWindow-v0
def window_share(action: Any, d: int) -> NDArray[np.float64]:
    """``share_d = (a_d + 1) / 2`` of a Box action of ``d`` real values in [-1, 1], or :class:`ActionError`."""
    # Real numbers only: numpy would parse strings and drop imaginary parts if asked for float64.
    raw = np.asarray(action) if not isinstance(action, np.ndarray) else action
    if raw.dtype.kind not in "iuf":
        raise ActionError(f"action = {str(action)[:80]} has dtype {raw.dtype}; allowed: {d} real values in "
                          "[-1, 1]")
    a = raw.astype(np.float64)
    if a.shape != (d,):
        raise ActionError(f"action has shape {a.shape}; allowed: ({d},), one value in [-1, 1] per DC")
    if not np.all(np.isfinite(a)):
        raise ActionError(f"action = {a.tolist()} has non-finite values; allowed: finite values in [-1, 1]")
    if a.min() < -1.0 or a.max() > 1.0:
        raise ActionError(f"action = {a.tolist()} is out of range; allowed: values in [-1, 1] "
                          "(share of headroom = (a + 1) / 2)")
    return 0.5 * (a + 1.0)


class WindowActionType(GeoActionType[WindowPlacement]):
    """A GeoRouteWindow-v0 mode: ``Box(-1, 1, (D,))``, one window (``state.ctx``) per step."""

    #: per-DC observation blocks this mode adds after the window block
    extra_blocks: ClassVar[int] = 0
    no_follow = "follow_action() needs action_mode = 'residual'; allowed: a residual GeoRouteWindow-v0"

    def space(self) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, shape=(self.n_dcs,), dtype=np.float32)

    def mask(self, state: GeoDecisionState) -> NDArray[np.bool_]:
        """All true: a continuous space has no invalid value."""
        return np.ones(self.n_dcs, dtype=bool)

    def placements(self, state: GeoDecisionState, action: Any) -> NDArray[np.int64]:
        """The DCs :meth:`decode` would choose for ``action``, changing nothing."""
        return self.decode(state, action).dc

    def write(self, state: GeoDecisionState, obs: NDArray[np.float32], o: int) -> int:
        """This mode's observation block at offset ``o``; returns the offset after it."""
        return o


@register
class WindowDirect(WindowActionType):
    """``direct``: per-DC shares of headroom, placed by :func:`~servegym.envs.geo.env_window.assign_within_caps`."""

    mode = "window-direct"

    def decode(self, state: GeoDecisionState, action: Any) -> WindowPlacement:
        from servegym.envs.geo.env_window import assign_within_caps

        share = window_share(action, self.n_dcs)
        ctx = state.ctx
        assert ctx is not None
        caps = np.floor(share * state.own_headroom()).astype(np.int64)
        dc, overflow = assign_within_caps(ctx.estimates.carbon_g, ctx.action_mask(), caps)
        return WindowPlacement(dc, 0.0, overflow)


@register
class WindowResidual(WindowActionType):
    """``residual``: the action scales the reference window scheduler's admission capacity, which then solves
    the window itself; ``ref_cap[d]`` (its capacities) is observed after the window block."""

    mode = "window-residual"
    residual = True
    extra_blocks = 1

    def __init__(self, reference: str, n_dcs: int) -> None:
        super().__init__(n_dcs)
        self.policy: Any = make_reference(reference)
        # a causal wrapper would hide the scheduler's capacity hook (and its observed capacities would not be
        # the ones it solves with): GeoRouteWindow-v0 scales the plain window schedulers only
        if getattr(self.policy, "decision_mode", "request") != "window" or is_causal(self.policy):
            raise ConfigError(f"reference = {reference!r} is not a window scheduler; allowed "
                              "for GeoRouteWindow-v0's residual mode: ['milp', 'ilp', 'iter-ilp']")
        self.policy.capacity_hook = self.scaled_capacity
        self.scale: NDArray[np.float64] = np.zeros(0)

    def reset(self, sim: GeoSimulation) -> None:
        self.policy.reset(sim.n_dcs, sim.n_regions, sim.seed)

    def decode(self, state: GeoDecisionState, action: Any) -> WindowPlacement:
        """The reference scheduler's solve of the window under the scaled capacities (advances its state)."""
        share = window_share(action, self.n_dcs)
        ctx = state.ctx
        assert ctx is not None
        self.scale = 2.0 * share - 1.0  # the action itself, in [-1, 1]
        dc = np.asarray(self.policy.decide(ctx), dtype=np.int64)
        return WindowPlacement(dc, self.policy.sched_delay_s(ctx), 0)

    def placements(self, state: GeoDecisionState, action: Any) -> NDArray[np.int64]:
        raise ConfigError("placements() is for action_mode='direct'; the residual mode's placements are "
                          "the reference scheduler's solve, made by step()")

    def scaled_capacity(self, ctx: DecisionContext, cap: NDArray[np.float64]) -> NDArray[np.float64]:
        """The residual mode's ``H'_d`` from the scheduler's ``H_d`` (GeoRouteWindow-v0's module docstring)."""
        a = self.scale
        if not a.any():
            return cap  # exactly the reference's capacities
        n = ctx.n_requests
        return np.where(a < 0.0, np.floor(cap * (1.0 + a)), cap + np.floor(np.maximum(a, 0.0) * n))

    def write(self, state: GeoDecisionState, obs: NDArray[np.float32], o: int) -> int:
        from servegym.baselines.geo.ilp import window_headroom

        ctx = state.ctx
        assert ctx is not None and ctx.estimator is not None
        d = self.n_dcs
        obs[o:o + d] = squash(window_headroom(ctx, ctx.estimator) / max(ctx.n_requests, 1))
        return o + d

    def reference_action(self, state: GeoDecisionState) -> NDArray[np.float32]:
        return self.follow_action()

    def follow_action(self) -> NDArray[np.float32]:
        """The all-zero action: the reference's own capacities, so its own placements (module docstring)."""
        return np.zeros(self.n_dcs, dtype=np.float32)


def window_action_type(config: GeoEnvConfig, n_dcs: int) -> WindowActionType:
    """A fresh action mode object for GeoRouteWindow-v0 (``action_mode``, ``reference``)."""
    if config.action_mode == "residual":
        return WindowResidual(config.reference, n_dcs)
    return WindowDirect(n_dcs)
