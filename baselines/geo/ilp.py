"""Window schedulers on the assignment ILP (§IV-B): the standard ILP and the iterative ILP.

Both decide one scheduler's window (the simulator's ``decision_mode="window"``: Δw = 100 ms or
300 requests, whichever closes first) on the provisioner's snapshot. Definitions:

- ``c_{r,d}`` (gCO2): the shared estimator's carbon of serving r at d,
  ``c_{r,d} = E_{r,d} · PUE_d · CI_d / 3.6e6`` with ``E_{r,d}`` (J) r's prefill energy plus
  ``OSL_r`` decode steps, each charging r its share ``e0_dec / (B_d + 1)`` of the fixed step
  energy, its per-request energy ``e_d`` and its mean cache read ``e_k (ISL_r + OSL_r / 2)``
  (``servegym.envs.geo.sim.estimator``; ``OSL_r`` is the run's OSL estimate).
- ``F_r``: the DCs whose estimated TTFT and TPOT meet the budgets.
- ``H_d`` (requests): the window's batch-slot headroom at d,
  ``H_d = ⌊max(0, H_d(t) − R · n^own_{s,d})⌋`` where

  * ``H_d(t)`` is the estimator's ``headroom_requests`` (free batch slots of all d's ``E``
    engines net of its queued prompts, ``E · max(0, S_d − B_d − Q_d / Ī)``) evaluated on the
    snapshot with the batch drained for the snapshot's age ``a_d = t − polled_at_d`` at the rate
    the estimator assumes for ``W_d`` (``B_d / (Ō · τ_d)`` requests per engine-second, ``τ_d``
    the decode iteration time with prefill stalls): ``B'_d = B_d · max(0, 1 − a_d / (Ō · τ_d))``,
    ``KV'_d = KV_d · B'_d / B_d`` (the mean context per running request is kept). Without that
    credit the ~10 windows a scheduler decides on one 1 s snapshot would see none of the slots
    that free meanwhile (a request lives ``Ō · τ_d``, about 2-3 s at the paper's loads);
  * ``n^own_{s,d}`` is the number of requests this scheduler s already sent to d since d's last
    poll (``ctx.dispatched``) and ``R`` the number of schedulers. A scheduler knows only its own
    dispatches; counting each as ``R`` assumes the others, fed the same share of the load, placed
    as many (the correction least-loaded uses). Without it the ~40 windows that share one
    snapshot at the paper's high load would each fill the same headroom.

Placement. The model (``servegym.baselines.geo.solver.solve_assignment``) places as many
requests as fit, at least carbon; requests left unplaced, or every request when the solve fails
(no solution, e.g. at a time limit of 0), go to :mod:`~servegym.baselines.geo.fallback`.

Iterative ILP. After solve t the assignment counts ``n_d`` (and their mean prompt ``ī_d``) are
projected onto d's snapshot as if dispatched: per engine ``a_d = n_d / E`` requests, of which
``adm_d = min(a_d, H^snap_d / E)`` fit a free batch slot (``B_d += adm_d``,
``KV_d += adm_d · ī_d``) and the rest queue (``Q_d += (a_d − adm_d) · ī_d``). The estimator
then refreshes ``F_r`` and ``c_{r,d}`` on the projected snapshot and the model is re-solved
(same ``H_d``: each solve re-places the whole window), until two consecutive solves give the
same assignment or ``T_max = 3`` solves were made. The admitted prompts' prefill work is not
projected (it shows in ``duty_d`` at the next poll).

Scheduling delay: see :mod:`~servegym.baselines.geo.timing` (modelled by default).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray
from servegym.baselines.geo.fallback import fallback_assign
from servegym.baselines.geo.solver import new_highs, solve_assignment
from servegym.baselines.geo.timing import SolverQueue, check_timing, load_solve_time_models
from servegym.envs.geo.sim.decisions import BasePolicy, DecisionContext
from servegym.envs.geo.sim.estimator import MAX_DUTY, Estimates, Estimator
from servegym.envs.geo.sim.estimator_kernels import drained_headroom_into
from servegym.envs.geo.sim.provisioner import Snapshot

from servegym.errors import ConfigError

#: Iteration limit of the iterative ILP (Table II).
T_MAX = 3
#: HiGHS time limit per solve (s, Table II's MILP limit, used for every model).
TIME_LIMIT_S = 0.25


def drained_snapshot(snap: Snapshot, estimator: Estimator, t_s: float) -> Snapshot:
    """``snap`` with each DC's batch drained for its age at ``t_s`` (module docstring, ``H_d``)."""
    prof = estimator.profile
    b = snap.batch
    duty = np.minimum(snap.prefill_duty, MAX_DUTY)
    tau = prof.decode(np.maximum(b, 1.0), snap.kv_tokens) / (1.0 - duty)
    age = np.maximum(0.0, t_s - snap.polled_at_s)
    keep = np.maximum(0.0, 1.0 - age / (estimator.osl_mean * tau))
    return snap.replace(batch=b * keep, kv_tokens=snap.kv_tokens * keep)


def window_headroom(ctx: DecisionContext, estimator: Estimator) -> NDArray[np.float64]:
    """``H_d`` of the module docstring (requests, integral floats), for ctx's scheduler. ``H_d(t)`` compiled
    (:func:`~servegym.envs.geo.sim.estimator_kernels.drained_headroom_into`), bit-identical to
    :func:`window_headroom_numpy` (tested)."""
    snap = ctx.snapshot
    h = np.empty(snap.n_dcs)
    drained_headroom_into(snap.batch, snap.queued_tokens, snap.kv_tokens, snap.prefill_duty, snap.polled_at_s,
                          float(ctx.time_s), float(snap.engines_per_dc), estimator.par, h)
    if ctx.n_requests == 0:
        return np.floor(h)
    s = int(ctx.scheduler[0])
    r = ctx.dispatched.shape[0]
    return np.floor(np.maximum(0.0, h - r * ctx.dispatched[s]))


def window_headroom_numpy(ctx: DecisionContext, estimator: Estimator) -> NDArray[np.float64]:
    """:func:`window_headroom` on the numpy :func:`drained_snapshot`: the reference formulation."""
    snap = ctx.snapshot
    h = estimator.headroom_requests(drained_snapshot(snap, estimator, ctx.time_s))
    if ctx.n_requests == 0:
        return np.floor(h)
    s = int(ctx.scheduler[0])
    r = ctx.dispatched.shape[0]
    return np.floor(np.maximum(0.0, h - r * ctx.dispatched[s]))


def project_assignment(snap: Snapshot, estimator: Estimator, assign: NDArray[np.int64],
                       isl: NDArray[np.int64]) -> Snapshot:
    """The snapshot with a window's assignment projected onto B_d, KV_d and Q_d (module docstring)."""
    d = snap.n_dcs
    e = float(snap.engines_per_dc)
    ok = assign >= 0
    n_d = np.bincount(assign[ok], minlength=d).astype(np.float64)
    tok = np.bincount(assign[ok], weights=np.asarray(isl, dtype=np.float64)[ok], minlength=d)
    mean_isl = np.where(n_d > 0, tok / np.maximum(n_d, 1.0), 0.0)
    a = n_d / e
    free = estimator.headroom_requests(snap) / e
    adm = np.minimum(a, free)
    return snap.replace(batch=snap.batch + adm, kv_tokens=snap.kv_tokens + adm * mean_isl,
                        queued_tokens=snap.queued_tokens + (a - adm) * mean_isl)


class WindowPolicy(BasePolicy):
    """Common machinery of the window schedulers: headroom, fallback, delay, statistics.

    Args:
        timing: ``"modelled"`` (fitted solve-time model, deterministic) or ``"measured"``
            (wall time of ``decide``; the name gets ``@measured``).
        time_limit_s: HiGHS time limit per solve (s).
        solve_time_path: optional JSON replacing the shipped solve-time fit.

    ``stats`` (after a run): windows, solves, requests, fallback requests (placed by the
    fallback), round-robin requests, failed solves, measured solve seconds.
    """

    batchable = False
    decision_mode = "window"
    kind = "lp"
    base_name = "window"
    #: Optional ``(ctx, H) -> H'``: replaces the window's capacities ``H_d`` before the solve and
    #: the fallback (GeoRouteWindow-v0's residual mode scales them; ``None``: the paper's ``H_d``).
    capacity_hook: Callable[[DecisionContext, NDArray[np.float64]], NDArray[np.float64]] | None = None

    def __init__(self, *, timing: str = "modelled", time_limit_s: float = TIME_LIMIT_S,
                 solve_time_path: str | None = None) -> None:
        self.timing = check_timing(timing)
        if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float)) or not 0.0 <= time_limit_s <= 60.0:
            raise ConfigError(f"time_limit_s = {time_limit_s!r} is out of range; allowed: [0, 60] s")
        self.time_limit_s = float(time_limit_s)
        self._time_model = load_solve_time_models(solve_time_path)[self.kind] if timing == "modelled" else None
        self.name = self.base_name + ("@measured" if timing == "measured" else "")
        self.reset(1, 1, 0)

    def reset(self, n_dcs: int, n_schedulers: int, seed: int) -> None:
        super().reset(n_dcs, n_schedulers, seed)
        self._rr = np.zeros(n_schedulers, dtype=np.int64)
        self._queue = SolverQueue(n_schedulers)
        self._highs = new_highs(self.time_limit_s)
        self._delay: tuple[int, float] = (-1, 0.0)
        self.stats: dict[str, Any] = {"windows": 0, "solves": 0, "requests": 0, "fallback_requests": 0,
                                      "rr_requests": 0, "failed_solves": 0, "solve_time_s": 0.0}

    def __getstate__(self) -> dict[str, Any]:
        # A HiGHS instance cannot be pickled (vector envs copy envs that hold a policy): every solve
        # passes its whole model, so a fresh instance after unpickling solves the same way.
        state = self.__dict__.copy()
        state.pop("_highs", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._highs = new_highs(self.time_limit_s)

    # Subclasses: (assignment with -1 for unplaced, solves made, solves failed, model kind cells).
    def _solve(self, ctx: DecisionContext, est: Estimates, estimator: Estimator,
               cap: NDArray[np.float64]) -> tuple[NDArray[np.int64], int, int]:
        raise NotImplementedError

    def decide(self, ctx: DecisionContext) -> NDArray[np.int64]:
        if ctx.mode != "window":
            raise ConfigError(f"policy {self.name!r} decides windows; allowed: decision_mode = 'window' "
                              f"(got a {ctx.mode!r} context)")
        if ctx.estimator is None:
            raise ConfigError(f"policy {self.name!r} needs DecisionContext.estimator (set by GeoSimulation)")
        t0 = time.perf_counter()
        n, d = ctx.n_requests, ctx.n_dcs
        if self._rr.size < int(ctx.dispatched.shape[0]) or self.n_dcs != d:
            self.reset(d, int(ctx.dispatched.shape[0]), 0)
        est = ctx.estimates
        cap = window_headroom(ctx, ctx.estimator)
        if self.capacity_hook is not None:
            cap = self.capacity_hook(ctx, cap)
        t_solve = time.perf_counter()
        assign, n_solves, n_failed = self._solve(ctx, est, ctx.estimator, cap)
        self.stats["solve_time_s"] += time.perf_counter() - t_solve
        left = np.flatnonzero(assign < 0)
        if left.size:
            placed = assign >= 0
            room = cap - np.bincount(assign[placed], minlength=d)
            fb, n_rr = fallback_assign(left, est.carbon_g, est.feasible, room, ctx.scheduler, self._rr)
            assign[left] = fb
            self.stats["fallback_requests"] += int(left.size)
            self.stats["rr_requests"] += n_rr
        if self._time_model is None:
            busy = time.perf_counter() - t0
        else:
            busy = n_solves * self._time_model(n, d)
        s = int(ctx.scheduler[0]) if n else 0
        self._delay = (ctx.token, self._queue.delay(s, ctx.time_s, busy))
        self.stats["windows"] += 1
        self.stats["solves"] += n_solves
        self.stats["failed_solves"] += n_failed
        self.stats["requests"] += n
        return assign

    def sched_delay_s(self, ctx: DecisionContext) -> float:
        token, delay = self._delay
        return delay if token == ctx.token else 0.0


class StandardILP(WindowPolicy):
    """The standard ILP: one solve per window on the pre-window snapshot."""

    base_name = "ilp"

    def _solve(self, ctx, est, estimator, cap):  # type: ignore[override]
        res = solve_assignment(est.carbon_g, est.feasible, cap, time_limit_s=self.time_limit_s, highs=self._highs)
        if not res.ok:
            return np.full(ctx.n_requests, -1, dtype=np.int64), 1, 1
        return res.assign.copy(), 1, 0


class IterativeILP(WindowPolicy):
    """The iterative ILP: re-estimate on the projected snapshot and re-solve, up to ``t_max`` solves."""

    base_name = "iter-ilp"

    def __init__(self, *, t_max: int = T_MAX, **kw: Any) -> None:
        if isinstance(t_max, bool) or not isinstance(t_max, int) or t_max < 1:
            raise ConfigError(f"t_max = {t_max!r} is out of range; allowed: an integer >= 1")
        self.t_max = t_max
        super().__init__(**kw)

    def _solve(self, ctx, est, estimator, cap):  # type: ignore[override]
        carbon, feas = est.carbon_g, est.feasible
        best: NDArray[np.int64] | None = None
        solves = failed = 0
        for t in range(self.t_max):
            res = solve_assignment(carbon, feas, cap, time_limit_s=self.time_limit_s, highs=self._highs)
            solves += 1
            if not res.ok:
                failed += 1
                break
            if best is not None and np.array_equal(res.assign, best):
                break
            best = res.assign.copy()
            if t + 1 == self.t_max:
                break
            snap = project_assignment(ctx.snapshot, estimator, best, ctx.input_tokens)
            e2 = estimator.estimate(snap, ctx.input_tokens, ctx.osl_estimate, ctx.scheduler)
            carbon, feas = e2.carbon_g, e2.feasible
        if best is None:
            return np.full(ctx.n_requests, -1, dtype=np.int64), solves, failed
        return best, solves, failed
