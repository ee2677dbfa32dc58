"""The geo simulator's decision API: what a scheduler sees, and what a policy returns.

One loop, two drivers (DESIGN principle 1). :class:`~servegym.envs.geo.sim.cluster.GeoSimulation`
exposes its scheduling decisions as :class:`DecisionContext` objects:

- ``mode == "request"``: requests arriving at their regional schedulers, decided one by one
  (``sim.next_decision()`` gives one request; ``sim.next_batch()`` gives every arrival up to the
  next provisioner poll at once, to be decided as if one by one in order: a policy may accept it
  when it declares ``batchable = True``);
- ``mode == "window"``: the requests one scheduler collected over a window of ``window_s`` or
  ``window_max_requests`` requests, decided jointly.

``sim.apply(ctx, dc_indices, sched_delay_s)`` places them. A policy loop (``sim.run(policy)``)
and a Gymnasium env drive the same loop; a policy implements :class:`GeoPolicy`.

A driver that decides a context row by row (GeoRoute-v0) or window by window (GeoRouteWindow-v0) keeps what it
has decided so far in a :class:`GeoDecisionState`, the state its action types read (never the env's own
attributes); a window's decision is a :class:`WindowPlacement`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray
from servegym.envs.geo.sim.estimator import Estimates, Estimator
from servegym.envs.geo.sim.provisioner import Snapshot

from servegym.errors import ActionError


@dataclass(frozen=True, eq=False)
class DecisionContext:
    """One decision point. Per-request arrays have shape (n,), estimate arrays (n, D).

    Fields:
        mode: ``"request"`` or ``"window"``.
        time_s: simulated time of the decision (s): the (last) arrival in request mode, the
            window's close in window mode.
        request_id: ids of the requests to place (index into the run's request stream).
        scheduler: the regional scheduler (region index) each request arrived at.
        arrival_s: arrival times at the scheduler (s).
        decision_s: when each request is decided (s); ``>= arrival_s``.
        input_tokens: prompt lengths ISL (tokens).
        osl_estimate: the output length the estimator used (tokens): the workload mean, or
            the true OSL in oracle mode.
        output_tokens: the true OSL, only in oracle mode (``None`` otherwise).
        snapshot: the provisioner's latest snapshot.
        dispatched: (regions, D) requests each scheduler placed on each DC since that DC's last
            poll, before this context (what a scheduler knows of its own dispatches, which the
            snapshot does not show yet); read-only.
        estimates: the shared estimator's TTFT/TPOT/energy/carbon/feasibility per (request, DC)
            (computed on first access: a policy that never reads them, like round-robin, pays nothing).
        dc_names: names of the DCs (sites), index = DC index.
        token: identifies this context; ``apply`` accepts only the outstanding one.
        estimator: the run's shared :class:`~servegym.envs.geo.sim.estimator.Estimator` (what the
            estimates came from), for policies that re-estimate on a projected snapshot
            (``snapshot.replace``) or need the batch-slot headroom ``H_d``; ``None`` if unset.
        osl_feedback: (requests finished, the sum of their OSL estimates, the sum of their true OSLs in
            tokens) over every request that finished up to the latest poll: what the responses already
            returned tell a scheduler about its OSL estimates (the estimator's own residuals), causal.
    """

    mode: str
    time_s: float
    request_id: NDArray[np.int64]
    scheduler: NDArray[np.int64]
    arrival_s: NDArray[np.float64]
    decision_s: NDArray[np.float64]
    input_tokens: NDArray[np.int64]
    osl_estimate: NDArray[np.float64]
    output_tokens: NDArray[np.int64] | None
    snapshot: Snapshot
    dispatched: NDArray[np.int64]
    estimate_fn: Callable[[], Estimates] = field(repr=False)
    dc_names: tuple[str, ...] = ()
    token: int = 0
    estimator: Estimator | None = field(default=None, repr=False)
    osl_feedback: tuple[int, float, float] = (0, 0.0, 0.0)

    @property
    def estimates(self) -> Estimates:
        cached = self.__dict__.get("_estimates")
        if cached is None:
            cached = self.estimate_fn()
            object.__setattr__(self, "_estimates", cached)
        return cached

    @property
    def n_requests(self) -> int:
        return int(self.request_id.shape[0])

    @property
    def n_dcs(self) -> int:
        return len(self.dc_names)

    def action_mask(self) -> NDArray[np.bool_]:
        """(n, D) SLO-feasible DCs under the estimator; a row with none feasible allows every DC."""
        return self.estimates.mask


@runtime_checkable
class GeoPolicy(Protocol):
    """A scheduling policy on the decision API.

    Attributes:
        name: label used in results.
        batchable: ``True`` if ``decide`` on a multi-request ``"request"`` context returns what
            deciding its rows one at a time, in order, would (lets ``sim.run`` decide a whole
            poll interval in one call).
    """

    name: str
    batchable: bool

    def reset(self, n_dcs: int, n_schedulers: int, seed: int) -> None:
        """Called by ``sim.run`` before the first decision."""

    def decide(self, ctx: DecisionContext) -> ArrayLike:
        """DC index per request of ``ctx``, shape (n,)."""

    def sched_delay_s(self, ctx: DecisionContext) -> float:
        """Modelled scheduling delay (s) this decision adds before the requests leave the scheduler."""


class BasePolicy:
    """Defaults for a policy: no state to reset, no scheduling delay, not batchable."""

    name = "policy"
    batchable = False

    def reset(self, n_dcs: int, n_schedulers: int, seed: int) -> None:
        self.n_dcs = n_dcs
        self.n_schedulers = n_schedulers

    def decide(self, ctx: DecisionContext) -> ArrayLike:  # pragma: no cover - abstract
        raise NotImplementedError

    def sched_delay_s(self, ctx: DecisionContext) -> float:
        return 0.0


def validate_actions(ctx: DecisionContext, dc_indices: Any) -> NDArray[np.int64]:
    """``dc_indices`` as an int64 array of shape (n,), or :class:`ActionError` naming the problem."""
    n, d = ctx.n_requests, len(ctx.dc_names)
    if n == 1 and isinstance(dc_indices, (int, np.integer)) and not isinstance(dc_indices, bool):
        # one request, one plain index: the per-request (Gymnasium) path, kept cheap
        if 0 <= dc_indices < d:
            return np.array([dc_indices], dtype=np.int64)
        raise ActionError(f"dc index {int(dc_indices)} is out of range; allowed: [0, {d - 1}]")
    try:
        a = np.asarray(dc_indices)
    except Exception as exc:  # pragma: no cover - numpy accepts nearly anything
        raise ActionError(f"dc_indices must be integers in [0, {d - 1}]: {exc}") from exc
    if a.ndim == 0:
        a = a.reshape(1)
    if a.shape != (n,):
        raise ActionError(f"dc_indices has shape {a.shape}; allowed: ({n},) DC indices, one per request of the context")
    if a.dtype.kind not in "iu":
        if a.dtype.kind == "f" and np.all(np.isfinite(a)) and np.all(a == np.round(a)):
            a = a.astype(np.int64)
        else:
            raise ActionError(f"dc_indices must be integers in [0, {d - 1}]; got dtype {a.dtype}")
    a = a.astype(np.int64, copy=False)
    if n and (a.min() < 0 or a.max() >= d):
        bad = a[(a < 0) | (a >= d)][0]
        raise ActionError(f"dc index {int(bad)} is out of range; allowed: [0, {d - 1}]")
    return a


def _empty(dtype: type[np.generic]) -> NDArray[Any]:
    """A fresh empty array (a field's default before the first context)."""
    return np.zeros(0, dtype=dtype)


@dataclass(slots=True, eq=False)
class GeoDecisionState:
    """What a driver of the decision API has decided so far in the outstanding context: the state a geo env's
    action type reads (never the env's own attributes). The env holds one and updates it as its agent decides;
    :meth:`begin_interval` / :meth:`begin_window` load the next context.

    Fields:
        ctx: the outstanding :class:`DecisionContext`; ``None`` when the run has no decision left.
        i: the row of ``ctx`` being decided (a request driver's cursor; 0 for a window).
        n: rows of ``ctx`` (0 without one).
        dispatched: (regions, D) requests each scheduler placed on each DC since that DC's last poll, the rows
            of ``ctx`` decided so far included (float64, as the observation scales them); a request driver's.
        scheduler: the scheduler (region index) of each row of ``ctx``, as Python ints (read once per step).
        feasible: (n, D) the estimator's action mask of ``ctx``'s rows (``Estimates.mask``: all DCs where none
            is SLO-feasible); a request driver's.
        placed: (n,) the DC of each decided row (rows ``>= i`` not decided yet); a request driver's.
        headroom: (D,) the estimator's batch-slot headroom ``H_d`` of ``ctx``'s snapshot (requests, whole DC;
            ``Estimator.headroom_requests``); a window driver's.
    """

    ctx: DecisionContext | None = None
    i: int = 0
    n: int = 0
    dispatched: NDArray[np.float64] = field(default_factory=lambda: _empty(np.float64))
    scheduler: list[int] = field(default_factory=list)
    feasible: NDArray[np.bool_] = field(default_factory=lambda: _empty(np.bool_))
    placed: NDArray[np.int64] = field(default_factory=lambda: _empty(np.int64))
    headroom: NDArray[np.float64] = field(default_factory=lambda: _empty(np.float64))

    def begin_interval(self, ctx: DecisionContext | None) -> None:
        """A request driver's next context (a poll interval's arrivals, ``sim.next_batch()``): nothing decided."""
        self.ctx = ctx
        if ctx is None:
            self.n = 0
            return
        n = ctx.n_requests
        self.feasible = np.array(ctx.estimates.mask, dtype=bool)
        self.scheduler = np.asarray(ctx.scheduler, dtype=np.int64).tolist()
        self.dispatched = np.asarray(ctx.dispatched, dtype=np.float64).copy()
        self.placed = np.empty(n, dtype=np.int64)
        self.n = n
        self.i = 0

    def record(self, i: int, dc: int) -> None:
        """Row ``i`` goes to DC ``dc``: its scheduler's own-dispatch count at ``dc`` grows by one."""
        self.placed[i] = dc
        self.dispatched[self.scheduler[i], dc] += 1.0

    def begin_window(self, ctx: DecisionContext | None, headroom: NDArray[np.float64] | None) -> None:
        """A window driver's next context (``sim.next_decision()``) and ``H_d`` of its snapshot."""
        self.ctx = ctx
        self.i = 0
        self.n = 0 if ctx is None else ctx.n_requests
        if headroom is not None:
            self.headroom = headroom

    def own_headroom(self) -> NDArray[np.float64]:
        """``H'_d``: the headroom less what the window's scheduler dispatched to d since d's poll (requests)."""
        ctx = self.ctx
        assert ctx is not None
        return np.maximum(0.0, self.headroom - ctx.dispatched[int(ctx.scheduler[0])])


@dataclass(frozen=True, eq=False)
class WindowPlacement:
    """A window's decision, what ``sim.apply(ctx, dc, sched_delay_s)`` takes.

    Fields:
        dc: (n,) the DC of each request of the window.
        sched_delay_s: the modelled scheduling delay (s) before the requests leave the scheduler.
        overflow: requests placed beyond the window's admission caps (a capped placement's fallback; else 0).
    """

    dc: NDArray[np.int64]
    sched_delay_s: float = 0.0
    overflow: int = 0
