"""Per-mix analytical tables of the PD environment, computed once per (scenario mixes, system, action grid).

For every distinct length mix of a :class:`~servegym.envs.pd.sim.scenario.DaySignals` this holds the
:class:`~servegym.envs.pd.sim.model.PDModel` and, for every deployment 0 <= n_P <= max_P, 0 <= n_D <= max_D,
the capacity ``mu`` (req/s; 0 when a pool is empty) and the operating batch at capacity, plus the
deployment-independent scalars the fluid dynamics read each step (mu_P, mu_D^max, E[t_P], the prefill
service-time CV^2, a_D, b_D, E[l_out - 1]) and 64 mid-quantiles of the prefill time t_P(l_in) under the mix
(for the TTFT tail). Nothing here depends on the episode seed, so tables are shared across resets and
environments in a process.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from servegym.envs.pd.sim.catalog import PDSystem
from servegym.envs.pd.sim.model import CapacityGrid, PDModel
from servegym.envs.pd.sim.scenario import MIX_COMPONENTS, mixture_moments

N_TP_QUANTILES = 64


@dataclass(frozen=True)
class MixTables:
    """Arrays indexed [mix] or [mix, n_P, n_D] (see module docstring)."""

    weights: NDArray[np.float64]  # (M, 3) request shares
    models: tuple[PDModel, ...]
    mu: NDArray[np.float64]  # (M, max_P + 1, max_D + 1) capacity, req/s
    batch: NDArray[np.float64]  # (M, max_P + 1, max_D + 1) operating batch at capacity, requests
    mu_d_op: NDArray[np.float64]  # (M, max_P + 1, max_D + 1) decode capacity per instance at that batch
    mu_p: NDArray[np.float64]  # (M,) req/s per prefill instance
    mu_d_max: NDArray[np.float64]  # (M,) req/s per decode instance (full KV pool)
    t_p_mean_s: NDArray[np.float64]  # (M,) E[t_P], s
    cv_s2: NDArray[np.float64]  # (M,) squared CV of t_P
    a_d: NDArray[np.float64]  # (M,) s
    b_d: NDArray[np.float64]  # (M,) s per request in the batch
    decode_tokens: NDArray[np.float64]  # (M,) E[l_out - 1]
    in_mean: NDArray[np.float64]  # (M,) E[l_in], tokens
    out_mean: NDArray[np.float64]  # (M,) E[l_out], tokens
    t_p_quantiles_s: NDArray[np.float64]  # (M, 64) mid-quantiles of t_P under the mix, s

    def grid(self, mix: int, budget: int) -> CapacityGrid:
        """Capacity grid of every deployment with n_P, n_D >= 1 within the action grid and n_P + n_D <= budget."""
        max_p, max_d = self.mu.shape[1] - 1, self.mu.shape[2] - 1
        n_p, n_d = np.meshgrid(np.arange(1, max_p + 1), np.arange(1, max_d + 1), indexing="ij")
        keep = (n_p + n_d) <= budget
        n_p, n_d = n_p[keep].astype(np.int64), n_d[keep].astype(np.int64)
        model = self.models[mix]
        mu = self.mu[mix, n_p, n_d]
        power = np.asarray(model.power_w(n_p, n_d, mu, mu=mu), dtype=float)
        return CapacityGrid(n_p=n_p, n_d=n_d, mu=mu, mu_d=self.mu_d_op[mix, n_p, n_d],
                            batch=self.batch[mix, n_p, n_d], power_w=power, mu_p=float(self.mu_p[mix]),
                            mu_d_max=float(self.mu_d_max[mix]))


@functools.cache
def _component_prefill_times(system: PDSystem) -> tuple[NDArray[np.float64], ...]:
    from servegym.envs.pd.sim.workload_moments import WorkloadMoments, trace_lengths

    probe = PDModel(WorkloadMoments.fixed(1024, 256), system)  # t_P(l) does not depend on the workload
    return tuple(np.sort(probe.prefill_time_s(trace_lengths(c)[0])) for c in MIX_COMPONENTS)


def _mixture_quantiles(samples: tuple[NDArray[np.float64], ...], w: NDArray[np.float64]) -> NDArray[np.float64]:
    vals = np.concatenate(samples)
    wts = np.concatenate([np.full(s.size, wi / s.size) for s, wi in zip(samples, w, strict=True)])
    order = np.argsort(vals, kind="stable")
    cdf = np.cumsum(wts[order])
    cdf /= cdf[-1]
    q = (np.arange(N_TP_QUANTILES) + 0.5) / N_TP_QUANTILES
    return vals[order][np.minimum(np.searchsorted(cdf, q), vals.size - 1)]


@functools.lru_cache(maxsize=8)
def _build(weights_key: bytes, n_mix: int, system: PDSystem, max_p: int, max_d: int) -> MixTables:
    weights = np.frombuffer(weights_key, dtype=np.float64).reshape(n_mix, len(MIX_COMPONENTS)).copy()
    tp_samples = _component_prefill_times(system)
    n_p, n_d = np.meshgrid(np.arange(1, max_p + 1), np.arange(1, max_d + 1), indexing="ij")
    shape = (n_mix, max_p + 1, max_d + 1)
    mu, batch, mu_d_op = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    models, scal = [], {k: np.zeros(n_mix) for k in ("mu_p", "mu_d_max", "t_p", "cv", "a_d", "b_d", "dec", "in",
                                                      "out")}
    tpq = np.zeros((n_mix, N_TP_QUANTILES))
    for m in range(n_mix):
        model = PDModel(mixture_moments(weights[m]), system)
        models.append(model)
        g = model.grid_for(n_p.ravel(), n_d.ravel())
        mu[m, 1:, 1:] = g.mu.reshape(n_p.shape)
        batch[m, 1:, 1:] = g.batch.reshape(n_p.shape)
        mu_d_op[m, 1:, 1:] = g.mu_d.reshape(n_p.shape)
        for k, v in (("mu_p", model.mu_p), ("mu_d_max", model.mu_d_max), ("t_p", model.t_p_mean_s),
                     ("cv", model.cv_s2), ("a_d", model.a_d), ("b_d", model.b_d), ("dec", model.decode_tokens),
                     ("in", model.workload.in_m1), ("out", model.workload.out_mean)):
            scal[k][m] = v
        tpq[m] = _mixture_quantiles(tp_samples, weights[m])
    for a in (mu, batch, mu_d_op, tpq, *scal.values()):
        a.setflags(write=False)
    return MixTables(weights=weights, models=tuple(models), mu=mu, batch=batch, mu_d_op=mu_d_op,
                     mu_p=scal["mu_p"], mu_d_max=scal["mu_d_max"], t_p_mean_s=scal["t_p"], cv_s2=scal["cv"],
                     a_d=scal["a_d"], b_d=scal["b_d"], decode_tokens=scal["dec"], in_mean=scal["in"],
                     out_mean=scal["out"], t_p_quantiles_s=tpq)


def mix_tables(weights: NDArray[np.float64], system: PDSystem, max_p: int, max_d: int) -> MixTables:
    """Tables for the mixes ``weights`` (rows of request shares), cached per process."""
    w = np.ascontiguousarray(weights, dtype=np.float64)
    return _build(w.tobytes(), int(w.shape[0]), system, int(max_p), int(max_d))
