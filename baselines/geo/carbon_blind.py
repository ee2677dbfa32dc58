"""Carbon-blind baselines of the geo paper (§V-A): round-robin (RR) and least-loaded (LL).

Both decide each request on its own (``batchable``: a whole poll interval of arrivals is decided
in one vectorized call, with exactly the per-request semantics) and report no scheduling delay.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from servegym.envs.geo.sim.decisions import BasePolicy, DecisionContext


def _rank_within(keys: NDArray[np.int64], n_keys: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(rank of each row among the rows with its key, in order; count per key)."""
    counts = np.bincount(keys, minlength=n_keys)
    order = np.argsort(keys, kind="stable")
    starts = np.cumsum(counts) - counts
    rank = np.empty(keys.size, dtype=np.int64)
    rank[order] = np.arange(keys.size) - starts[keys[order]]
    return rank, counts


class RoundRobin(BasePolicy):
    """Each regional scheduler cycles through every DC in index order, one request each."""

    name = "rr"
    batchable = True

    def reset(self, n_dcs: int, n_schedulers: int, seed: int) -> None:
        super().reset(n_dcs, n_schedulers, seed)
        self._next = np.zeros(n_schedulers, dtype=np.int64)

    def decide(self, ctx: DecisionContext) -> NDArray[np.int64]:
        s = ctx.scheduler
        rank, counts = _rank_within(s, self.n_schedulers)
        dc = (self._next[s] + rank) % self.n_dcs
        self._next = (self._next + counts) % self.n_dcs
        return dc


class LeastLoaded(BasePolicy):
    """Each request goes to the DC with the fewest requests per engine.

    The load of DC d as scheduler s sees it is the snapshot's ``in_flight[d]`` (requests running
    or queued per engine) plus ``R/E`` for every request s itself placed on d since d was polled
    (``ctx.dispatched``; ``R`` schedulers, ``E`` engines per DC). Stateless: it reads only the
    decision context. A scheduler knows only its own dispatches; counting
    each as ``R`` assumes the other schedulers, fed the same share by the load generator's
    round-robin, dispatch alike. Counting them as ``1/E`` instead lets all R schedulers pile onto
    the DC that looked emptiest at the last poll (at the paper's high load that herding alone
    caused ~13% SLO violations). Ties go to the lowest DC index.
    """

    name = "ll"
    batchable = True

    def decide(self, ctx: DecisionContext) -> NDArray[np.int64]:
        snap = ctx.snapshot
        r = ctx.dispatched.shape[0]
        u = r / snap.engines_per_dc
        out = np.empty(ctx.n_requests, dtype=np.int64)
        d_idx = np.arange(snap.n_dcs)
        for s in np.unique(ctx.scheduler):
            rows = np.flatnonzero(ctx.scheduler == s)
            n = rows.size
            # Sequential argmin with an increment of u per placement == taking the n smallest
            # "slots" v_d + k·u (k = own count onward) ordered by (value, DC index).
            k = ctx.dispatched[s][:, None] + np.arange(n)[None, :]
            values = snap.in_flight[:, None] + k * u
            dcs = np.broadcast_to(d_idx[:, None], values.shape)
            order = np.lexsort((dcs.ravel(), values.ravel()))[:n]
            out[rows] = dcs.ravel()[order]
        return out
