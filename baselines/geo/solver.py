"""HiGHS model builders of the window schedulers (§IV-B, §IV-C), one ``passModel`` call each.

Both models place the ``n`` requests of a window on ``D`` DCs. Inputs (numpy arrays):

- ``cost`` (n, D): ``c_{r,d}``, the carbon (gCO2) of serving r at d;
- ``feasible`` (n, D): the SLO-feasible pairs ``F_r`` (only these get a column);
- ``capacity`` (D,): ``H_d``, requests d may take from this window (floored to an integer);
- for the facility MILP, ``wake`` (D,): ``f_d`` (gCO2), and ``awake`` (D,) bool: DCs whose
  ``y_d`` is fixed to 1 (they already serve work, so waking them costs nothing).

Assignment model (:func:`solve_assignment`, Eq. (2))::

    min  Σ_{(r,d)∈F} c_{r,d} x_{r,d} + M Σ_r u_r
    s.t. Σ_d x_{r,d} + u_r = 1          ∀ r      (u_r: r is left to the fallback)
         Σ_r x_{r,d}       ≤ ⌊H_d⌋      ∀ d
         0 ≤ x, u ≤ 1

The unplaced slack ``u_r`` (cost ``M = (n + 1)·max c``, above any placement's cost) keeps the
model feasible when the window does not fit: the most requests that fit are placed, then at the
least carbon. The constraint matrix is the incidence matrix of a bipartite graph plus unit
columns, hence totally unimodular, and the right-hand sides are integers: every vertex of the LP
is integral, so the dual simplex (which returns a vertex) gives the integer optimum without
branching. :func:`solve_assignment` checks the integrality of what it returns
(``SolveResult.integral``) and re-solves as a MIP if it ever fails.

Facility model (:func:`solve_facility`, §IV-C)::

    min  Σ c_{r,d} x_{r,d} + Σ_d f_d y_d + M Σ_r u_r
    s.t. Σ_d x_{r,d} + u_r = 1                   ∀ r
         Σ_r x_{r,d} ≤ min(⌊H_d⌋, |{r: (r,d)∈F}|) · y_d      ∀ d
         x_{r,d} ≤ y_d                             ∀ (r,d)∈F with y_d free  (strong linking)
         y_d = 1 for awake d;  y_d ∈ {0, 1} otherwise;  0 ≤ x, u ≤ 1 continuous

Only the ``y`` are integer: for any fixed integral ``y`` the rest is the totally unimodular
assignment model above (bounds ``x ≤ y`` are then 0/1 column bounds), so its simplex vertex is
integral and branching on ``y`` alone suffices. The disaggregated linking rows ``x ≤ y`` make the
LP relaxation tight (with only the aggregated capacity row, ``y_d = Σ_r x_{r,d} / H_d`` is
fractional and small, so the relaxation charges almost none of ``f_d``: the naive model's large
gaps). The capacity is tightened to the number of requests that may go to d at all. Strategy:

1. solve the LP relaxation (dual simplex); if its ``y`` are integral it is optimal (and its ``x``
   integral, being a vertex of the TU face ``y = const``);
2. otherwise round ``y`` at 1/2, and then every positive ``y`` up, re-solving with ``y`` fixed
   (hot-started LPs): integral solutions; accept the best if within ``mip_rel_gap`` of the
   relaxation's bound;
3. otherwise branch on the ``y`` (HiGHS MIP), started from that rounded solution, within what is
   left of the time limit; the rounded solution is kept if the search finds nothing better.

:func:`solve_facility_naive` poses the textbook model (x binary, no linking
rows, every ``y`` free, no warm start) for the speed benchmark.

Columns are built directly in compressed-column form from numpy arrays (no modelling layer).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from dataclasses import dataclass

import highspy
import numpy as np
from numpy.typing import NDArray
from servegym.baselines.geo.solver_kernels import facility_model

from servegym.errors import ConfigError

#: Tolerance for calling an LP value integral.
INTEGRALITY_TOL = 1e-6

#: HiGHS presolve setting of the facility MILP's branching step (step 3).
MIP_PRESOLVE = "choose"

_COLWISE = 1  # HiGHS MatrixFormat::kColwise
_MINIMIZE = 1  # HiGHS ObjSense::kMinimize


@dataclass(frozen=True)
class SolveResult:
    """Outcome of one window solve.

    Fields:
        assign: (n,) DC index per request, ``-1`` where the model left it unplaced (or where no
            solution was found at all: every entry ``-1`` then).
        status: HiGHS model status as text (``"Optimal"``, ``"Time limit reached"``, ...).
        ok: a primal solution was obtained (optimal, or feasible at the time limit).
        objective: model objective in gCO2 (slack penalties included), NaN without a solution.
        mip_gap: relative MIP gap at return (0 for the LP; NaN if unknown).
        integral: every x of the returned solution was within ``INTEGRALITY_TOL`` of 0 or 1.
        time_s: wall time of build + solve + extraction (s, measured).
        cpu_s: CPU time of the calling thread over the same span (s; HiGHS runs single-threaded
            in it): unlike ``time_s`` it does not grow when other processes share the cores.
        n_cols, n_rows, n_nz: model size.
    """

    assign: NDArray[np.int64]
    status: str
    ok: bool
    objective: float
    mip_gap: float
    integral: bool
    time_s: float
    cpu_s: float
    n_cols: int
    n_rows: int
    n_nz: int


_banner_shown = False


def _quiet_highs() -> highspy.Highs:
    """``highspy.Highs()``; the first one in a process prints a banner to the C stdout before
    any option can be set, which would corrupt a CLI's ``--json`` output: send it to /dev/null."""
    global _banner_shown
    if _banner_shown:
        return highspy.Highs()
    _banner_shown = True
    sys.stdout.flush()
    try:
        saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    except OSError:  # no usable fd 1: nothing to protect
        return highspy.Highs()
    try:
        os.dup2(devnull, 1)
        h = highspy.Highs()
        try:
            ctypes.CDLL(None).fflush(None)
        except (OSError, AttributeError):
            pass
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
    return h


def _new_highs(time_limit_s: float, threads: int = 1) -> highspy.Highs:
    h = _quiet_highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", int(threads))
    h.setOptionValue("time_limit", float(time_limit_s))
    # Deterministic runs: no random seed variation between calls.
    h.setOptionValue("random_seed", 0)
    # The assignment LPs have nothing to presolve away; skipping presolve halves their solve time.
    h.setOptionValue("presolve", "off")
    return h


def _limit(h: highspy.Highs, time_limit_s: float) -> float:
    """HiGHS checks ``time_limit`` against its run clock, which accumulates over every ``run``
    of the same instance: a per-solve limit is the clock's current reading plus the budget."""
    return float(h.getRunTime()) + float(time_limit_s)


def _check_inputs(cost: NDArray, feasible: NDArray, capacity: NDArray) -> tuple[int, int]:
    cost = np.asarray(cost)
    if cost.ndim != 2:
        raise ConfigError(f"cost must be a 2-D (requests, DCs) array; got shape {cost.shape}")
    n, d = cost.shape
    if np.asarray(feasible).shape != (n, d):
        raise ConfigError(f"feasible must have shape {(n, d)}; got {np.asarray(feasible).shape}")
    if np.asarray(capacity).shape != (d,):
        raise ConfigError(f"capacity must have shape ({d},); got {np.asarray(capacity).shape}")
    if not np.all(np.isfinite(cost[np.asarray(feasible, dtype=bool)])):
        raise ConfigError("cost must be finite on the feasible pairs")
    return n, d


def _csc(cols: NDArray[np.int64], rows: NDArray[np.int64], vals: NDArray[np.float64], n_cols: int
         ) -> tuple[NDArray[np.int32], NDArray[np.int32], NDArray[np.float64]]:
    """Compressed-column arrays from triplets (stable within a column)."""
    order = np.argsort(cols, kind="stable")
    counts = np.bincount(cols, minlength=n_cols)
    start = np.zeros(n_cols + 1, dtype=np.int32)
    np.cumsum(counts, out=start[1:])
    return start, rows[order].astype(np.int32), vals[order]


def _status_text(h: highspy.Highs) -> str:
    return h.modelStatusToString(h.getModelStatus())


def _extract(h: highspy.Highs, n: int, pr: NDArray[np.int64], pd_: NDArray[np.int64], scale: float
             ) -> tuple[NDArray[np.int64], bool, float, bool]:
    """(assign, ok, objective in g, integral) from the solver's primal values."""
    info = h.getInfo()
    ok = int(info.primal_solution_status) == 2  # kSolutionStatusFeasible
    assign = np.full(n, -1, dtype=np.int64)
    if not ok:
        return assign, False, float("nan"), False
    x = np.asarray(h.getSolution().col_value, dtype=np.float64)[: pr.size]
    on = x > 0.5
    integral = bool(np.all(np.minimum(np.abs(x), np.abs(1.0 - x)) <= INTEGRALITY_TOL))
    assign[pr[on]] = pd_[on]
    return assign, True, float(info.objective_function_value) * scale, integral


def _assignment_arrays(cost: NDArray, feasible: NDArray, cap: NDArray[np.float64]):
    """Shared pieces: feasible pairs, scaled costs, slack penalty."""
    feas = np.asarray(feasible, dtype=bool)
    pr, pd_ = np.nonzero(feas)  # r-major pairs
    c = np.asarray(cost, dtype=np.float64)[pr, pd_]
    scale = float(np.max(np.abs(c))) if c.size else 1.0
    scale = scale if scale > 0 else 1.0
    return pr.astype(np.int64), pd_.astype(np.int64), c / scale, scale


def solve_assignment(cost: NDArray, feasible: NDArray, capacity: NDArray, *, time_limit_s: float = 0.25,
                     highs: highspy.Highs | None = None) -> SolveResult:
    """The window assignment ILP of Eq. (2), solved as an LP (see the module docstring).

    Args:
        cost: (n, D) c_{r,d} in gCO2. feasible: (n, D) bool. capacity: (D,) H_d (requests).
        time_limit_s: HiGHS time limit (s); 0 makes the solver stop before any solution
            (``ok == False``), which the policies treat as a solver failure.
        highs: a ``highspy.Highs`` to reuse (its model is replaced).
    """
    t0, c0 = time.perf_counter(), time.thread_time()
    n, d = _check_inputs(cost, feasible, capacity)
    cap = np.floor(np.maximum(np.asarray(capacity, dtype=np.float64), 0.0))
    pr, pd_, c, scale = _assignment_arrays(cost, feasible, cap)
    m = pr.size
    big = float(n + 1)  # > n x the largest scaled cost: placing more always wins
    n_cols, n_rows = m + n, n + d
    # x columns: rows r and n + d; u columns: row r.
    x_cols = np.repeat(np.arange(m), 2)
    x_rows = np.empty(2 * m, dtype=np.int64)
    x_rows[0::2] = pr
    x_rows[1::2] = n + pd_
    cols = np.concatenate([x_cols, m + np.arange(n)])
    rows = np.concatenate([x_rows, np.arange(n)])
    start, index, value = _csc(cols, rows, np.ones(cols.size), n_cols)
    col_cost = np.concatenate([c, np.full(n, big)])
    row_lo = np.concatenate([np.ones(n), np.full(d, -np.inf)])
    row_hi = np.concatenate([np.ones(n), cap])
    h = highs if highs is not None else _new_highs(time_limit_s)
    h.setOptionValue("time_limit", _limit(h, time_limit_s))
    h.setOptionValue("solver", "simplex")
    h.passModel(n_cols, n_rows, index.size, _COLWISE, _MINIMIZE, 0.0, col_cost, np.zeros(n_cols),
                np.ones(n_cols), row_lo, row_hi, start, index, value, np.zeros(n_cols, dtype=np.int32))
    h.run()
    status = _status_text(h)
    assign, ok, obj, integral = _extract(h, n, pr, pd_, scale)
    if ok and not integral:
        # Never expected (total unimodularity); solve the same model as a MIP to be safe.
        h.changeColsIntegrality(m, np.arange(m, dtype=np.int32), np.ones(m, dtype=np.uint8))
        h.run()
        status = _status_text(h)
        assign, ok, obj, integral = _extract(h, n, pr, pd_, scale)
    return SolveResult(assign, status, ok, obj, 0.0 if ok else float("nan"), integral,
                       time.perf_counter() - t0, time.thread_time() - c0, n_cols, n_rows, int(index.size))


def solve_facility(cost: NDArray, feasible: NDArray, capacity: NDArray, wake: NDArray, awake: NDArray | None = None,
                   *, time_limit_s: float = 0.25, mip_rel_gap: float = 0.01, warm_start: bool = True,
                   highs: highspy.Highs | None = None) -> SolveResult:
    """The facility MILP of §IV-C in the strong formulation (see the module docstring).

    Args:
        wake: (D,) f_d in gCO2 (>= 0). awake: (D,) bool, DCs whose y_d is fixed to 1 (their
            ``wake`` is not charged); ``None``: none.
        mip_rel_gap: HiGHS relative gap at which the search stops (0.01 = 1%).
        warm_start: give the MIP of step 3 the rounded solution of step 2 as a start.
    """
    t0, c0 = time.perf_counter(), time.thread_time()
    n, d = _check_inputs(cost, feasible, capacity)
    wake = np.asarray(wake, dtype=np.float64)
    if wake.shape != (d,) or not np.all(np.isfinite(wake)) or (wake.size and wake.min() < 0):
        raise ConfigError(f"wake must be ({d},) finite costs >= 0 gCO2")
    awake_b = np.zeros(d, dtype=bool) if awake is None else np.asarray(awake, dtype=bool)
    if awake_b.shape != (d,):
        raise ConfigError(f"awake must have shape ({d},)")
    # A DC with no wake cost behaves as awake: fixing its y loses nothing.
    awake_b = awake_b | (wake <= 0)
    cap = np.floor(np.maximum(np.asarray(capacity, dtype=np.float64), 0.0))
    model = facility_model(np.asarray(cost, dtype=np.float64), np.asarray(feasible, dtype=bool), cap, awake_b, wake)
    pr, pd_, scale, _cap, nf, _n_link, start, index, value, col_cost, row_lo, row_hi, _free = model
    m = pr.size
    col_cost[m:m + n] = float(n + 1) + float(wake[~awake_b].sum() / scale)  # the slack's big-M
    n_cols, n_rows = col_cost.size, row_lo.size
    h = highs if highs is not None else _new_highs(time_limit_s)
    h.setOptionValue("time_limit", _limit(h, time_limit_s))  # one budget for every run below
    h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
    h.setOptionValue("solver", "simplex")
    n_nz = int(index.size)
    # 1. The strong LP relaxation: a lower bound, and usually already integral.
    h.passModel(n_cols, n_rows, n_nz, _COLWISE, _MINIMIZE, 0.0, col_cost, np.zeros(n_cols), np.ones(n_cols),
                row_lo, row_hi, start, index, value, np.zeros(n_cols, dtype=np.int32))
    h.run()
    ycols = (m + n + np.arange(nf)).astype(np.int32)

    def result(assign, status, ok, obj, gap, integral) -> SolveResult:
        return SolveResult(assign, status, ok, obj, gap, integral, time.perf_counter() - t0, time.thread_time() - c0,
                           n_cols, n_rows, n_nz)

    assign, ok, lb, integral = _extract(h, n, pr, pd_, scale)
    if not ok:
        return result(assign, _status_text(h), False, float("nan"), float("nan"), False)
    y = np.asarray(h.getSolution().col_value, dtype=np.float64)[m + n:]
    if integral and np.all(np.minimum(y, 1.0 - y) <= INTEGRALITY_TOL):
        return result(assign, "Optimal (integral LP relaxation)", True, lb, 0.0, True)
    # 2. Round the fractional y (at 1/2, then every positive y up) and re-solve with y fixed
    #    (hot-started LPs): integral solutions, upper bounds; keep the best.
    r_ok, ub, r_assign, r_int, start_sol = False, np.inf, assign, False, None
    for thr in (0.5, INTEGRALITY_TOL):
        open_ = (y > thr).astype(np.float64)
        h.changeColsBounds(nf, ycols, open_, open_)
        h.run()
        a2, ok2, ub2, int2 = _extract(h, n, pr, pd_, scale)
        if ok2 and int2 and ub2 < ub:
            r_ok, ub, r_assign, r_int = True, ub2, a2, int2
            start_sol = np.asarray(h.getSolution().col_value, dtype=np.float64)
        if r_ok and ub - lb <= mip_rel_gap * max(abs(ub), 1e-12):
            gap = (ub - lb) / max(abs(ub), 1e-12)
            return result(r_assign, "Optimal within gap (rounded LP relaxation)", True, ub, gap, True)
    # 3. Branch on y only (x stays continuous: integral for integral y), from the rounded solution,
    #    on a fresh instance given what is left of the time limit (a reused instance's MIP search
    #    was seen to overrun its limit).
    left = time_limit_s - (time.perf_counter() - t0)
    if left <= 0.0:
        if r_ok:
            gap = (ub - lb) / max(abs(ub), 1e-12)
            return result(r_assign, "Time limit reached (rounded LP relaxation kept)", True, ub, gap, r_int)
        return result(assign, "Time limit reached", False, float("nan"), float("nan"), False)
    integrality = np.zeros(n_cols, dtype=np.int32)
    integrality[ycols] = 1
    h = _new_highs(left)
    h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
    h.setOptionValue("presolve", MIP_PRESOLVE)
    h.passModel(n_cols, n_rows, n_nz, _COLWISE, _MINIMIZE, 0.0, col_cost, np.zeros(n_cols), np.ones(n_cols),
                row_lo, row_hi, start, index, value, integrality)
    if warm_start and start_sol is not None:
        hs = highspy.HighsSolution()
        hs.col_value = start_sol
        hs.value_valid = True
        h.setSolution(hs)
    h.run()
    m_assign, m_ok, obj, m_int = _extract(h, n, pr, pd_, scale)
    status = _status_text(h)
    if m_ok and (not r_ok or obj <= ub):
        # The relaxation's bound from step 1 is valid too; report the tighter of the two gaps.
        own = (obj - lb) / max(abs(obj), 1e-12)
        hg = float(h.getInfo().mip_gap)
        return result(m_assign, status, True, obj, min(own, hg) if np.isfinite(hg) else own, m_int)
    if r_ok:
        gap = (ub - lb) / max(abs(ub), 1e-12)
        return result(r_assign, status + " (rounded LP relaxation kept)", True, ub, gap, r_int)
    return result(m_assign, status, False, float("nan"), float("nan"), False)


def _facility_model_numpy(cost: NDArray, feasible: NDArray, capacity: NDArray, wake: NDArray[np.float64],
                          awake_b: NDArray[np.bool_]) -> tuple:
    """The facility model's arrays as numpy expressions (the reference of
    :func:`~servegym.baselines.geo.solver_kernels.facility_model`, tested equal): the same tuple, with the
    slack's big-M filled in ``col_cost``."""
    n, d = np.asarray(cost).shape
    cap = np.floor(np.maximum(np.asarray(capacity, dtype=np.float64), 0.0))
    feas = np.asarray(feasible, dtype=bool)
    cap = np.minimum(cap, feas.sum(axis=0))
    pr, pd_, c, scale = _assignment_arrays(cost, feas, cap)
    m = pr.size
    big = float(n + 1) + float(wake[~awake_b].sum() / scale)
    free = np.flatnonzero(~awake_b)
    nf = free.size
    free_pos = np.full(d, -1, dtype=np.int64)
    free_pos[free] = np.arange(nf)
    link = free_pos[pd_] >= 0  # x columns that need an x <= y row
    n_link = int(link.sum())
    n_cols = m + n + nf
    n_rows = n + nf + n_link  # awake DCs: plain capacity row bound; free DCs: Σx - cap·y <= 0
    # Row layout: [0, n) assignment, [n, n + nf) capacity of free DCs, then linking rows.
    # Capacity of awake DCs is a row too (appended after linking rows) to keep x columns uniform.
    awake_idx = np.flatnonzero(awake_b)
    na = awake_idx.size
    awake_pos = np.full(d, -1, dtype=np.int64)
    awake_pos[awake_idx] = np.arange(na)
    n_rows += na
    cap_row = np.where(free_pos >= 0, n + free_pos, n + nf + n_link + awake_pos)
    link_row = np.full(m, -1, dtype=np.int64)
    link_row[link] = n + nf + np.arange(n_link)
    xi = np.arange(m)
    cols = [np.repeat(xi, 2), xi[link], m + np.arange(n)]
    rows_x = np.empty(2 * m, dtype=np.int64)
    rows_x[0::2] = pr
    rows_x[1::2] = cap_row[pd_]
    rows = [rows_x, link_row[link], np.arange(n)]
    vals = [np.ones(2 * m), np.ones(n_link), np.ones(n)]
    # y columns: -cap_d in the capacity row, -1 in each of its linking rows.
    ycol = m + n + free_pos[pd_[link]]
    cols += [m + n + np.arange(nf), ycol]
    rows += [n + np.arange(nf), link_row[link]]
    vals += [-cap[free], -np.ones(n_link)]
    start, index, value = _csc(np.concatenate(cols), np.concatenate(rows), np.concatenate(vals), n_cols)
    col_cost = np.concatenate([c, np.full(n, big), wake[free] / scale])
    row_lo = np.concatenate([np.ones(n), np.full(nf + n_link + na, -np.inf)])
    row_hi = np.concatenate([np.ones(n), np.zeros(nf + n_link), cap[awake_idx]])
    return pr, pd_, scale, cap, nf, n_link, start, index, value, col_cost, row_lo, row_hi, free


def solve_facility_naive(cost: NDArray, feasible: NDArray, capacity: NDArray, wake: NDArray, *,
                         time_limit_s: float = 0.25, mip_rel_gap: float = 1e-4,
                         highs: highspy.Highs | None = None) -> SolveResult:
    """The facility MILP as usually posed (benchmark reference): x and y binary, only the
    aggregated capacity row ``Σ_r x_{r,d} ≤ ⌊H_d⌋ y_d``, every y free, no warm start."""
    t0, c0 = time.perf_counter(), time.thread_time()
    n, d = _check_inputs(cost, feasible, capacity)
    wake = np.asarray(wake, dtype=np.float64)
    cap = np.floor(np.maximum(np.asarray(capacity, dtype=np.float64), 0.0))
    pr, pd_, c, scale = _assignment_arrays(cost, feasible, cap)
    m = pr.size
    big = float(n + 1) + float(wake.sum() / scale)
    n_cols, n_rows = m + n + d, n + d
    x_rows = np.empty(2 * m, dtype=np.int64)
    x_rows[0::2] = pr
    x_rows[1::2] = n + pd_
    cols = np.concatenate([np.repeat(np.arange(m), 2), m + np.arange(n), m + n + np.arange(d)])
    rows = np.concatenate([x_rows, np.arange(n), n + np.arange(d)])
    vals = np.concatenate([np.ones(2 * m + n), -cap])
    start, index, value = _csc(cols, rows, vals, n_cols)
    col_cost = np.concatenate([c, np.full(n, big), wake / scale])
    integrality = np.ones(n_cols, dtype=np.int32)
    h = highs if highs is not None else _new_highs(time_limit_s)
    h.setOptionValue("time_limit", _limit(h, time_limit_s))
    h.setOptionValue("mip_rel_gap", float(mip_rel_gap))
    h.setOptionValue("solver", "choose")
    h.setOptionValue("presolve", "choose")
    h.passModel(n_cols, n_rows, index.size, _COLWISE, _MINIMIZE, 0.0, col_cost, np.zeros(n_cols), np.ones(n_cols),
                np.concatenate([np.ones(n), np.full(d, -np.inf)]), np.concatenate([np.ones(n), np.zeros(d)]),
                start, index, value, integrality)
    h.run()
    h.setOptionValue("presolve", "off")
    status = _status_text(h)
    assign, ok, obj, integral = _extract(h, n, pr, pd_, scale)
    gap = float(h.getInfo().mip_gap) if ok else float("nan")
    return SolveResult(assign, status, ok, obj, gap, integral, time.perf_counter() - t0, time.thread_time() - c0,
                       n_cols, n_rows,
                       int(index.size))


def new_highs(time_limit_s: float = 0.25) -> highspy.Highs:
    """A quiet single-threaded ``highspy.Highs`` for a policy to reuse across windows."""
    return _new_highs(time_limit_s)
