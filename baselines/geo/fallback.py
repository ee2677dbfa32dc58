"""The window schedulers' fallback (§V-A): what happens to a request no solve placed.

"When a solver fails or cannot place a request within capacity, the scheduler falls back to the
lowest-carbon SLO-feasible DC with headroom (i.e., greedy with α = 0), and to round-robin (RR) if
none exists." Our reading, request by request in window order:

1. among the DCs that are SLO-feasible for r (estimator) and still have at least one request of
   window headroom left (``headroom_left[d] >= 1``, the policy's ``H_d`` net of what this window
   already placed there), the one with the lowest estimated carbon ``c_{r,d}`` (ties: lowest
   index); its headroom drops by one;
2. otherwise the scheduler's round-robin pointer (one per scheduler, kept by the policy across
   windows) picks the DC and advances.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def fallback_assign(rows: NDArray[np.int64], carbon_g: NDArray[np.float64], feasible: NDArray[np.bool_],
                    headroom_left: NDArray[np.float64], scheduler: NDArray[np.int64],
                    rr_next: NDArray[np.int64]) -> tuple[NDArray[np.int64], int]:
    """DCs for the window rows ``rows`` (in order). Arrays (n, D) / (D,) / (n,) / (schedulers,).

    ``headroom_left`` and ``rr_next`` are updated in place. Returns (DC per row, how many of
    them went round-robin).
    """
    n_dcs = carbon_g.shape[1]
    out = np.empty(rows.size, dtype=np.int64)
    n_rr = 0
    for k, r in enumerate(rows):
        cand = feasible[r] & (headroom_left >= 1.0)
        if cand.any():
            d = int(np.argmin(np.where(cand, carbon_g[r], np.inf)))
            headroom_left[d] -= 1.0
        else:
            s = int(scheduler[r])
            d = int(rr_next[s])
            rr_next[s] = (d + 1) % n_dcs
            n_rr += 1
        out[k] = d
    return out, n_rr
