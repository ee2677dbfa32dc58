"""Compiled per-window work of GeoRouteWindow-v0 (:mod:`~servegym.envs.geo.env_window`).

A window holds about 16 requests on the small preset: its observation's per-DC blocks and the placement
within the caps are each a dozen numpy operations on arrays of a few dozen values, so numpy's dispatch
costs more than the arithmetic. Here the same expressions are loops compiled with numba (``cache=True``, as
the engine's kernels; without numba they run as plain Python, correct and slower).

Bit-identical to the numpy forms, which :mod:`~servegym.envs.geo.env_window` keeps as the references
(``assign_within_caps_numpy``, ``GeoRouteWindowEnv._window_block_numpy``; tested against these): each value
comes from the same operations in the same order (numba compiles without fast-math), ``argmin`` keeps
numpy's first minimum (or first NaN), and the per-DC means sum the requests in row order, which is numpy's
order for a column sum ``x.sum(axis=0)`` of a C-ordered (n, D) array with D >= 2 (with D = 1 numpy sums
pairwise, so the env keeps the numpy form there).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from servegym.envs.geo.sim.engine_kernels import njit  # numba's, or a pure-Python stand-in without numba
from servegym.envs.geo.sim.estimator_kernels import first_argmin


@njit(cache=True)
def assign_within_caps_into(carbon_g: NDArray[np.float64], candidates: NDArray[np.bool_], cap: NDArray[np.int64],
                            out: NDArray[np.int64]) -> int:
    """:func:`~servegym.envs.geo.env_window.assign_within_caps` into ``out`` (n,); returns the overflow count.

    Each round, every unplaced request (in arrival order) proposes its lowest-cost candidate among the DCs
    with capacity left at the round's start; a DC admits its first ``remaining_d`` proposers (the numpy
    form's rank in arrival order); capacities are charged after the round."""
    n, d = carbon_g.shape
    remaining = cap.copy()
    cost = np.empty((n, d))
    for i in range(n):
        out[i] = -1
        for j in range(d):
            cost[i, j] = carbon_g[i, j] if candidates[i, j] else np.inf
    c = np.empty(d)
    taken = np.zeros(d, dtype=np.int64)
    for _ in range(d + 1):
        todo = 0
        any_ok = False
        taken[:] = 0
        for i in range(n):
            if out[i] >= 0:
                continue
            todo += 1
            for j in range(d):
                c[j] = cost[i, j] if remaining[j] > 0 else np.inf
            best = first_argmin(c)
            if not np.isfinite(c[best]):
                continue
            any_ok = True
            if taken[best] < remaining[best]:
                out[i] = best
                taken[best] += 1
        if todo == 0 or not any_ok:
            break
        for j in range(d):
            remaining[j] -= taken[j]
    left = 0
    for i in range(n):
        if out[i] < 0:
            out[i] = first_argmin(cost[i])
            left += 1
    return left


@njit(cache=True)
def window_dc_block_into(obs: NDArray[np.float32], lo: int, time_s: float, polled_at_s: NDArray[np.float64],
                         poll_interval_s: float, own: NDArray[np.int64], inv_e: float, ttft_s: NDArray[np.float64],
                         tpot_s: NDArray[np.float64], carbon_g: NDArray[np.float64], feasible: NDArray[np.bool_],
                         scales: NDArray[np.float64], local_rtt_s: NDArray[np.float64],
                         headroom: NDArray[np.float64]) -> None:
    """The window observation's per-DC values from ``age`` to ``capacity`` (8 blocks of D, from ``obs[lo]``):
    ``age``, ``own_dispatched``, then ``feasible_frac``, ``ttft_mean``, ``tpot_mean``, ``carbon_mean``, ``local``
    and ``capacity`` (GeoRouteWindowEnv._observation's expressions; ``scales`` = TTFT SLO, TPOT SLO, c_ref;
    ``own`` the scheduler's dispatches, ``headroom`` the estimator's H_d, ``local_rtt_s`` its RTT row)."""
    n, d = ttft_s.shape
    inv_n = 1.0 / n
    sums = np.empty((3, d))
    for j in range(d):
        sums[0, j] = ttft_s[0, j]
        sums[1, j] = tpot_s[0, j]
        sums[2, j] = carbon_g[0, j]
    for i in range(1, n):
        for j in range(d):
            sums[0, j] += ttft_s[i, j]
            sums[1, j] += tpot_s[i, j]
            sums[2, j] += carbon_g[i, j]
    for j in range(d):
        obs[lo + j] = min(max((time_s - polled_at_s[j]) / poll_interval_s, 0.0), 1.0)
        x = own[j] * inv_e
        obs[lo + d + j] = x / (1.0 + x)
        count = 0
        for i in range(n):
            if feasible[i, j]:
                count += 1
        obs[lo + 2 * d + j] = count * inv_n
        for k in range(3):
            r = np.fmin(sums[k, j] * inv_n / scales[k], 1e9)
            obs[lo + (3 + k) * d + j] = r / (1.0 + r)
        obs[lo + 6 * d + j] = 1.0 if local_rtt_s[j] == 0.0 else 0.0
        h = max(0.0, headroom[j] - own[j]) / max(n, 1)
        obs[lo + 7 * d + j] = h / (1.0 + h)
