"""The geo envs' reward and running metrics: :class:`EpisodeTracker` (the reward modes and the return identity
are described in :mod:`servegym.envs.geo.env_common`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray
from servegym.envs.geo.observations import RESIDUAL_EMA
from servegym.envs.geo.sim.cluster import GeoSimulation

if TYPE_CHECKING:
    from servegym.envs.geo.env_config import GeoEnvConfig


class EpisodeTracker:
    """Reward and running metrics of one episode, read from the simulator's public counters.

    Dense credit (module docstring): the driver records, for every request it applies, the
    estimated carbon and SLO risk it already paid (:meth:`record`); :meth:`update` then settles
    the requests that finished since the previous call against the measured cost. TTFTs of
    finished requests are gathered incrementally (``sim.finished_batches``) so that the running p99
    costs O(finished) once per poll interval, not per step.
    """

    def __init__(self, sim: GeoSimulation, cfg: GeoEnvConfig) -> None:
        self.sim = sim
        self.w_carbon = float(cfg.w_carbon)
        self.w_slo = float(cfg.w_slo)
        self.dense = cfg.reward == "dense"
        self.carbon_prev = sim.carbon_g
        self.viol_prev = sim.n_finished_violations
        n = max(sim.n_requests, 1)
        self._ttft = np.empty(n, dtype=np.float64)
        # Per request: what its decision already paid (w-weighted cost, > 0), settled at its finish.
        self._paid = np.zeros(n, dtype=np.float64)
        self._paid_open = 0.0  # paid by requests not settled yet
        self._pred = np.full((2, n), np.nan) if cfg.observe_residuals else None
        self._resid = np.zeros((2, sim.n_dcs))
        self.final_settled = False
        self._n_ttft = 0
        self._n_batches = 0
        self._p99 = 0.0
        self.info: dict[str, Any] = {}
        self.steps = 0
        self.update()

    def dense_costs(self, carbon_g: NDArray[np.float64], feasible: NDArray[np.bool_]) -> NDArray[np.float64]:
        """The dense per-decision cost ``w_carbon * c + w_slo * (1 - feasible)`` (same shape)."""
        return self.w_carbon * carbon_g + self.w_slo * (~np.asarray(feasible, dtype=bool))

    def record(self, request_id: NDArray[np.int64], cost: NDArray[np.float64],
               ttft_s: NDArray[np.float64] | None = None, tpot_s: NDArray[np.float64] | None = None) -> None:
        """Requests just applied, the dense cost each one's decision paid (rewards of ``-cost``)
        and, when residuals are observed, the TTFT/TPOT (s) the estimator predicted at their DC."""
        if self.dense and request_id.size:
            self._paid[request_id] = cost
            self._paid_open += float(cost.sum())
        if self._pred is not None and ttft_s is not None and tpot_s is not None:
            self._pred[0, request_id] = ttft_s
            self._pred[1, request_id] = tpot_s

    def residual_features(self) -> NDArray[np.float64]:
        """(2 D,) :data:`RESIDUAL_FEATURES` (zeros before any request finished at a DC)."""
        return np.tanh(self._resid).ravel()

    def _update_residuals(self, fin: Any) -> None:
        sim = self.sim
        rid = np.asarray(fin.request_id, dtype=np.int64)
        dc = sim.placed_dc[rid]
        cfg = sim.config
        d = sim.n_dcs
        for k, (real, slo) in enumerate(((fin.ttft_s, cfg.ttft_slo_s), (fin.tpot_s, cfg.tpot_slo_s))):
            err = (np.asarray(real, dtype=np.float64) - self._pred[k, rid]) / slo
            ok = np.isfinite(err)  # a one-token request has no TPOT
            cnt = np.bincount(dc[ok], minlength=d)
            mean = np.bincount(dc[ok], weights=err[ok], minlength=d) / np.maximum(cnt, 1)
            self._resid[k] = np.where(cnt > 0, (1 - RESIDUAL_EMA) * self._resid[k] + RESIDUAL_EMA * mean,
                                      self._resid[k])

    def update(self) -> float:
        """Reward accrued since the previous call (the poll settlement in dense mode); refreshes :attr:`info`."""
        sim = self.sim
        carbon = sim.carbon_g
        viol = sim.n_finished_violations
        reward = -self.w_carbon * (carbon - self.carbon_prev) - self.w_slo * (viol - self.viol_prev)
        self.carbon_prev, self.viol_prev = carbon, viol
        new = sim.finished_batches(self._n_batches)
        if new:
            self._n_batches += len(new)
            for fin in new:
                k = len(fin.ttft_s)
                self._ttft[self._n_ttft:self._n_ttft + k] = fin.ttft_s
                self._n_ttft += k
                if self._pred is not None:
                    self._update_residuals(fin)
                if self.dense:
                    settled = float(self._paid[np.asarray(fin.request_id, dtype=np.int64)].sum())
                    reward += settled
                    self._paid_open -= settled
            self._p99 = float(np.percentile(self._ttft[:self._n_ttft], 99))
        fin_n = sim.n_finished
        unfinished = 0
        if sim.done:
            # Requests that never finished are misses (as episode_metrics counts them); in dense
            # mode their paid estimates are settled now.
            unfinished = sim.n_requests - fin_n
            if not self.final_settled:
                reward += -self.w_slo * unfinished + (self._paid_open if self.dense else 0.0)
                self._paid_open = 0.0
                self.final_settled = True
        # 0.0 before any request finished (not NaN: infos must compare equal across identical runs)
        p99 = self._p99 if self._n_ttft else 0.0
        self.info = {
            "carbon_g": carbon,
            "finished": fin_n,
            "slo_violations": viol,
            "slo_violation_pct": 100.0 * viol / fin_n if fin_n else 0.0,
            "unfinished": unfinished,
            "slo_misses": viol + unfinished,
            "ttft_p99_s": p99,
            "sim_time_s": sim.now_s,
            "osl_mode": sim.config.osl_mode,
        }
        return float(reward)
