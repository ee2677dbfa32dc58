"""Carbon-weighted greedy scheduling (§IV-A) and MOER routing (§V-A, [43]).

For each request r the scheduler keeps the SLO-feasible DCs ``F_r`` (estimated TTFT and TPOT
within budget, the shared estimator of ``servegym.envs.geo.estimator``) and picks the lowest

    score_{r,d} = α · Lat_{r,d} / max_{d'∈F_r} Lat_{r,d'} + (1 − α) · G_d / max_{d'∈F_r} G_{d'}

Definitions (ours; the paper leaves them implicit):

- ``Lat_{r,d} = TTFT_{r,d} + OSL_r · TPOT_{r,d}`` (s): the estimated end-to-end latency, so that
  both the queueing (TTFT) and the batch pressure (TPOT) the paper's latency term steers away
  from count.
- ``G_d = PUE_d · CI_d`` (gCO2 per IT kWh): the paper's ``CI_d`` times the DC's PUE. With the
  paper's uniform PUE this ranks DCs exactly as ``CI_d``; with per-site PUEs it ranks by the
  carbon the DC actually emits per kWh of engine energy.
- Ties go to the lowest DC index.
- No feasible DC (``F_r`` empty): the request goes to the DC with the lowest estimated
  ``Lat_{r,d}`` over all DCs (the least-late choice; carbon is not considered once the SLO is
  already lost). This is our choice; the paper does not state one.

The policy reads only the snapshot-based estimates, so its choice for a request does not
depend on the other requests of the poll interval: it is ``batchable`` and fully vectorized.

MOER routing ("the lowest-CI SLO-feasible DC", [43]) coincides with greedy at α = 0; it is
provided as :class:`MOER` with its own name.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from servegym.envs.geo.decisions import BasePolicy, DecisionContext

from servegym.errors import ConfigError


def greedy_choice(alpha: float, ttft_s: NDArray, tpot_s: NDArray, osl: NDArray, feasible: NDArray,
                  g: NDArray) -> NDArray[np.int64]:
    """The greedy DC per request (see the module docstring); arrays (n, D), ``osl`` (n,), ``g`` (D,)."""
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
        est = ctx.estimates
        snap = ctx.snapshot
        return greedy_choice(self.alpha, est.ttft_s, est.tpot_s, ctx.osl_estimate, est.feasible,
                             snap.pue * snap.ci_g_per_kwh)


class MOER(Greedy):
    """MOER-based routing [43]: the lowest-CI SLO-feasible DC (greedy at α = 0)."""

    def __init__(self) -> None:
        super().__init__(0.0)
        self.name = "moer"
