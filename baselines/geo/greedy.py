"""Carbon-weighted greedy scheduling (§IV-A) and MOER routing (§V-A, [43]).

For each request r the scheduler keeps the SLO-feasible DCs ``F_r`` and picks the lowest

    score_{r,d} = α · Lat_{r,d} / max_{d'∈F_r} Lat_{r,d'} + (1 − α) · G_d / max_{d'∈F_r} G_{d'}

Definitions (ours; the paper leaves them implicit):

- ``Lat_{r,d} = TTFT_{r,d} + OSL_r · TPOT_{r,d}`` (s): the estimated end-to-end latency, so that
  both the queueing (TTFT) and the batch pressure (TPOT) the paper's latency term steers away
  from count.
- ``G_d = PUE_d · CI_d`` (gCO2 per IT kWh): the paper's ``CI_d`` times the DC's PUE. With the
  paper's uniform PUE this ranks DCs exactly as ``CI_d``; with per-site PUEs it ranks by the
  carbon the DC actually emits per kWh of engine energy.
- Ties go to the lowest DC index.

Own placements (the rule, per request r of scheduler s, decided in arrival order). Let
``n_d = ctx.dispatched[s, d]`` plus the requests of this context that s placed on d before r
(the requests s sent to d since d's last poll), ``R`` the number of schedulers and ``E`` the
engines per DC. As least-loaded and the window ILPs do, each own placement counts ``R`` times:
a scheduler knows only its own dispatches and assumes the other ``R − 1``, fed the same share of
the load, placed as many.

1. Projection. ``TTFT_{r,d}`` and ``TPOT_{r,d}`` come from the shared estimator on the snapshot
   with ``m_d = E · ⌊R · n_d / E⌋`` requests of mean prompt ``Ī`` projected onto d by the
   iterative ILP's :func:`~servegym.baselines.geo.ilp.project_assignment` (per engine
   ``⌊R · n_d / E⌋`` whole requests: those that fit d's free batch slots join ``B_d``/``KV_d``,
   the rest queue in ``Q_d``). The projection moves in whole requests per engine (levels), so
   the estimates change only every ``E / R`` own placements on a DC and can be tabled per level.
2. ``F_r``: the DCs whose estimated TTFT and TPOT (step 1) are within the SLO, as in the paper
   (§IV-A). There is no separate headroom filter: the TTFT estimate already includes ``W_d``, the
   wait for a batch slot, so a DC whose slots the projection has filled drops out of ``F_r``
   once that wait (or the fuller batch's TPOT) breaks the SLO.
3. No feasible DC (``F_r`` empty): r goes to the DC with the lowest projected ``Lat_{r,d}`` over
   all DCs (the least-late choice; carbon is not considered once the SLO is already lost). This
   is our choice; the paper does not state one.

The rule depends only on the snapshot, ``ctx.dispatched`` and r's own features, so deciding a
poll period's requests one by one (``next_decision``) or as one context (``next_batch``) gives
the same placements: the policy is ``batchable`` (tested). A batch is decided in blocks: the
block's estimates tabled over a few levels ahead in one compiled pass
(:func:`~servegym.envs.geo.sim.estimator_kernels.projected_latency_into`), then its requests
decided one by one from the tables, compiled (:func:`greedy_rows`). The vectorized numpy form
(a fixed-point pass over the block's own counts, ``Greedy._decide_scheduler_numpy``) is kept as
the reference the compiled one is tested against, to the bit. Cost at the paper preset, 4000
req/s, 10 s simulated (whole simulation): ~0.012 CPU s per simulated second at α = 0 and 0.009
at α = 0.5 (round-robin: 0.003); the numpy form took 0.16 and 0.12 (back to back on the quiet
shared 2-core machine, 2026-12-06). Without a ``ctx.estimator`` (a context built by hand) the
policy falls back to the snapshot-only rule: the context's own estimates, no projection.

MOER routing ("the lowest-CI SLO-feasible DC", [43]) coincides with greedy at α = 0; it is
provided as :class:`MOER` with its own name.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from servegym.baselines.geo.ilp import project_assignment
from servegym.envs.geo.sim.decisions import BasePolicy, DecisionContext
from servegym.envs.geo.sim.engine_kernels import njit  # numba's, or a pure-Python stand-in without numba
from servegym.envs.geo.sim.estimator import Estimator
from servegym.envs.geo.sim.estimator_kernels import first_argmin, projected_latency_into
from servegym.envs.geo.sim.provisioner import Snapshot

from servegym.errors import ConfigError

#: Requests per block of estimator calls when a batch is decided.
BLOCK = 128
#: Projected levels above the block's first that its estimate tables cover.
LEVELS_AHEAD = 4
#: Fixed-point passes per attempt to decide the rest of a block.
FIXED_POINT_PASSES = 6


def greedy_choice(alpha: float, ttft_s: NDArray, tpot_s: NDArray, osl: NDArray, feasible: NDArray,
                  g: NDArray) -> NDArray[np.int64]:
    """The greedy DC per request on fixed estimates (score and rules 2-3 of the module docstring);
    arrays (n, D), ``osl`` (n,), ``g`` (D,)."""
    lat = ttft_s + np.asarray(osl, dtype=np.float64)[:, None] * tpot_s
    feas = np.asarray(feasible, dtype=bool)
    n, d = lat.shape
    out = np.empty(n, dtype=np.int64)
    any_f = feas.any(axis=1)
    if n == 0:
        return out
    # Normalizers over F_r only; infeasible entries get +inf scores.
    lat_max = np.where(feas, lat, -np.inf).max(axis=1, keepdims=True)
    g_row = np.broadcast_to(np.asarray(g, dtype=np.float64)[None, :], (n, d))
    g_max = np.where(feas, g_row, -np.inf).max(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        lat_term = np.where(lat_max > 0, lat / lat_max, 0.0)
        g_term = np.where(g_max > 0, g_row / g_max, 0.0)
    score = np.where(feas, alpha * lat_term + (1.0 - alpha) * g_term, np.inf)
    out[any_f] = np.argmin(score[any_f], axis=1)
    out[~any_f] = np.argmin(lat[~any_f], axis=1)
    return out


@njit(cache=True)
def greedy_rows(ttft_t: NDArray[np.float64], tpot_t: NDArray[np.float64], feas_t: NDArray[np.bool_],
                osl: NDArray[np.float64], g: NDArray[np.float64], alpha: float, r: float, e: float,
                base: NDArray[np.float64], own: NDArray[np.float64], lo: int, hi: int, out: NDArray[np.int64]) -> int:
    """Rules 1-3 for rows ``lo:hi`` one by one, from the block's tables (levels, rows of the block, D) at the
    projected levels ``base + o``: row k's level offset per DC is ``⌊R · own_d / E⌋ − base_d`` with ``own``
    its scheduler's counts before it (updated in place), and its choice :func:`greedy_choice`'s on those
    entries. Returns ``hi``, or the first row whose level is past the tables (the caller tables a new block
    from it)."""
    n_dcs = own.shape[0]
    top = ttft_t.shape[0] - 1
    lat = np.empty(n_dcs)
    score = np.empty(n_dcs)
    lev = np.empty(n_dcs, dtype=np.int64)
    for k in range(lo, hi):
        for d in range(n_dcs):
            off = np.floor(r * own[d] / e) - base[d]
            if off > top:
                return k
            lev[d] = np.int64(off)
        j = k - lo
        any_f = False
        lat_max = -np.inf
        g_max = -np.inf
        for d in range(n_dcs):
            lat[d] = ttft_t[lev[d], j, d] + osl[k] * tpot_t[lev[d], j, d]
            if feas_t[lev[d], j, d]:
                any_f = True
                lat_max = max(lat_max, lat[d])
                g_max = max(g_max, g[d])
        if any_f:
            for d in range(n_dcs):
                if feas_t[lev[d], j, d]:
                    lat_term = lat[d] / lat_max if lat_max > 0 else 0.0
                    g_term = g[d] / g_max if g_max > 0 else 0.0
                    score[d] = alpha * lat_term + (1.0 - alpha) * g_term
                else:
                    score[d] = np.inf
            c = first_argmin(score)
        else:
            c = first_argmin(lat)
        out[k] = c
        own[c] += 1.0
    return hi


def projected_snapshot(snap: Snapshot, estimator: Estimator, level: NDArray[np.float64]) -> Snapshot:
    """``snap`` with ``level[d]`` whole requests per engine (of mean prompt ``Ī``) projected onto
    each DC d by :func:`~servegym.baselines.geo.ilp.project_assignment` (rule 1)."""
    per_dc = (np.asarray(level, dtype=np.float64) * snap.engines_per_dc).astype(np.int64)
    assign = np.repeat(np.arange(snap.n_dcs, dtype=np.int64), per_dc)
    return project_assignment(snap, estimator, assign, np.full(assign.size, estimator.isl_mean))


class Greedy(BasePolicy):
    """Carbon-weighted greedy with weight ``alpha`` in [0, 1] on latency (module docstring).

    Scheduling delay: none modelled (the paper measures it below 1 ms per request).
    """

    batchable = True
    decision_mode = "request"

    def __init__(self, alpha: float) -> None:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= float(alpha) <= 1.0:
            raise ConfigError(f"alpha = {alpha!r} is out of range; allowed: a number in [0, 1]")
        self.alpha = float(alpha)
        self.name = f"greedy:{self.alpha:g}"

    def decide(self, ctx: DecisionContext) -> NDArray[np.int64]:
        snap = ctx.snapshot
        g = snap.pue * snap.ci_g_per_kwh
        estimator = ctx.estimator
        if estimator is None or ctx.n_requests == 0:
            est = ctx.estimates
            return greedy_choice(self.alpha, est.ttft_s, est.tpot_s, ctx.osl_estimate, est.feasible, g)
        sched = ctx.scheduler
        if (sched == sched[0]).all():  # one scheduler (the residual reference plans one at a time): no split
            return self._decide_scheduler(ctx, estimator, int(sched[0]), np.arange(ctx.n_requests), g)
        out = np.empty(ctx.n_requests, dtype=np.int64)
        for s in np.unique(ctx.scheduler):
            rows = np.flatnonzero(ctx.scheduler == s)
            out[rows] = self._decide_scheduler(ctx, estimator, int(s), rows, g)
        return out

    def _decide_scheduler(self, ctx: DecisionContext, estimator: Estimator, s: int, rows: NDArray[np.int64],
                          g: NDArray[np.float64]) -> NDArray[np.int64]:
        """Rules 1-3 for scheduler ``s``'s rows of ``ctx``, in order: the one-by-one rule, compiled.

        The rows are cut into the blocks of :meth:`_decide_scheduler_numpy` (a block of at most
        :data:`BLOCK` rows from the first whose level is past the current tables), each tabled by
        :meth:`_tables`; :func:`greedy_rows` then decides the block's rows one by one from the tables,
        so the placements are the vectorized form's to the bit (tested) without its fixed-point passes.
        """
        snap = ctx.snapshot
        r = float(ctx.dispatched.shape[0])
        e = float(snap.engines_per_dc)
        own = ctx.dispatched[s].astype(np.float64)
        out = np.empty(rows.size, dtype=np.int64)
        osl = np.asarray(ctx.osl_estimate[rows], dtype=np.float64)
        g = np.asarray(g, dtype=np.float64)
        k = 0
        while k < rows.size:
            lo, hi = k, min(rows.size, k + BLOCK)
            blk = rows[lo:hi]
            base = np.floor(r * own / e)
            ttft_t, tpot_t, feas_t = self._tables(ctx, estimator, base, blk,
                                                  blk if rows.size < ctx.n_requests else slice(lo, hi))
            k = greedy_rows(ttft_t, tpot_t, feas_t, osl, g, self.alpha, r, e, base, own, lo, hi, out)
        return out

    def _decide_scheduler_numpy(self, ctx: DecisionContext, estimator: Estimator, s: int, rows: NDArray[np.int64],
                                g: NDArray[np.float64]) -> NDArray[np.int64]:
        """:meth:`_decide_scheduler` as numpy expressions, the reference its compiled form is tested against.

        Vectorized: for a block of rows the estimates are tabled at the projected levels
        ``level_d + o``, ``o = 0..LEVELS_AHEAD`` (each estimator column depends on its own DC
        only), and the block is decided by fixed-point iteration: decide every row from the own
        counts the previous pass implies for it, until they agree. The rows up to the first whose
        counts still disagree (or whose level is past the table) stand; each pass fixes at least
        one more row. The result is the one-by-one rule's exactly.
        """
        snap = ctx.snapshot
        r = float(ctx.dispatched.shape[0])
        e = float(snap.engines_per_dc)
        n_dcs = snap.n_dcs
        own = ctx.dispatched[s].astype(np.float64)
        out = np.empty(rows.size, dtype=np.int64)
        osl = ctx.osl_estimate
        k = lo = hi = 0
        base = np.floor(r * own / e)
        ttft_t = tpot_t = feas_t = np.empty((0, 0, n_dcs))
        cols = np.arange(n_dcs)
        while k < rows.size:
            if k >= hi or np.any(np.floor(r * own / e) - base > LEVELS_AHEAD):
                lo, hi = k, min(rows.size, k + BLOCK)
                blk = rows[lo:hi]
                base = np.floor(r * own / e)
                # the block's own estimates by slice when the scheduler has every row (no copy)
                ttft_t, tpot_t, feas_t = self._tables(ctx, estimator, base, blk,
                                                      blk if rows.size < ctx.n_requests else slice(lo, hi))
            j0 = k - lo
            m = hi - k
            rr_ = np.arange(m)[:, None]
            jj = j0 + rr_
            before = np.broadcast_to(own, (m, n_dcs))
            for _ in range(FIXED_POINT_PASSES):
                off = np.floor(r * before / e) - base
                o = np.minimum(off, LEVELS_AHEAD).astype(np.int64)
                choice = greedy_choice(self.alpha, ttft_t[o, jj, cols], tpot_t[o, jj, cols], osl[rows[k:hi]],
                                       feas_t[o, jj, cols], g)
                onehot = np.zeros((m, n_dcs))
                onehot[np.arange(m), choice] = 1.0
                implied = own + np.cumsum(onehot, axis=0) - onehot
                same = np.all(implied == before, axis=1) & np.all(off <= LEVELS_AHEAD, axis=1)
                if same.all():
                    break
                before = implied
            bad = np.flatnonzero(~same)
            n_ok = int(bad[0]) if bad.size else m  # row 0 always stands (nothing placed before it)
            out[k:k + n_ok] = choice[:n_ok]
            own = own + onehot[:n_ok].sum(axis=0)
            k += n_ok
        return out


    @staticmethod
    def _tables(ctx: DecisionContext, estimator: Estimator, base: NDArray[np.float64], blk: NDArray[np.int64],
                sel: NDArray[np.int64] | slice) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_]]:
        """TTFT, TPOT and feasibility (LEVELS_AHEAD + 1, block, D) of the block ``blk`` (``sel`` of the context's
        rows) at the projected levels ``base + o`` (rule 1), compiled
        (:func:`~servegym.envs.geo.sim.estimator_kernels.projected_latency_into`): the estimator on
        :func:`projected_snapshot` to the bit (tested); level 0 with nothing projected is the context's own
        estimates."""
        snap = ctx.snapshot
        shape = (LEVELS_AHEAD + 1, blk.size, snap.n_dcs)
        ttft, tpot, feas = np.empty(shape), np.empty(shape), np.empty(shape, dtype=bool)
        o_lo = 0
        if not base.any():
            est0 = ctx.estimates.rows(sel)
            ttft[0], tpot[0], feas[0] = est0.ttft_s, est0.tpot_s, est0.feasible
            o_lo = 1
        projected_latency_into(snap.batch, snap.queued_tokens, snap.kv_tokens, snap.prefill_duty, snap.pue,
                               snap.ci_g_per_kwh, snap.rtt_s, snap.engines_per_dc, base, o_lo,
                               np.asarray(ctx.input_tokens[blk], dtype=np.float64),
                               np.maximum(np.asarray(ctx.osl_estimate[blk], dtype=np.float64), 1.0),
                               np.asarray(ctx.scheduler[blk], dtype=np.int64), estimator.par, ttft, tpot, feas)
        return ttft, tpot, feas


class MOER(Greedy):
    """MOER-based routing [43]: the lowest-CI SLO-feasible DC (greedy at α = 0)."""

    def __init__(self) -> None:
        super().__init__(0.0)
        self.name = "moer"
