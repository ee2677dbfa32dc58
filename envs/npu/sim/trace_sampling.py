"""Sampling of the npu workloads' request streams from the Azure 2024 trace (:mod:`~servegym.envs.npu.sim.azure2024`),
compiled, with numpy's values bit for bit: the arrival times of each minute's requests, sorted (:func:`minute_arrivals`),
and the request lengths by inverse-CDF lookup (:func:`interp_unit`, :func:`sample_tokens`). A 24-h day holds 2.6 M
requests, so each numpy step over it (a temporary array, a sort, a binary search per draw) costs tens of ms of a
training reset.

Lengths: ``np.interp`` finds each draw's interval by a binary search over the CDF's few hundred points (about 34 ns
a draw, 0.18 of a 24-h train-split reset's 0.43 CPU-s for two length columns). Here the interval comes from a table
of :data:`BUCKETS` equal slices of [0, 1): a draw ``v`` starts at the last point at or below its slice's start
``floor(v K) / K`` (exact: K is a power of two, so ``v K`` is) and steps forward over the few points between, which
ends at numpy's own index, the largest ``j`` with ``cdf[j] <= v``. The value is then numpy's arithmetic as written
in ``arr_interp`` (numpy/_core/src/multiarray/compiled_base.c): the slope ``(fp[j+1] - fp[j]) / (xp[j+1] - xp[j])``,
``slope * (v - xp[j]) + fp[j]``, ``fp[j]`` where ``v`` is a point or the last one, its two NaN fallbacks, ``left``
below the first point and ``fp[-1]`` above the last (tested equal to ``np.interp`` bit for bit:
tests/test_npu_trace_sampling.py). Probabilities are fractions, lengths tokens, times seconds.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from servegym.envs.npu.sim.fluid_kernels import njit

BUCKETS = 1024
"""Slices of [0, 1) in the start table: a power of two (so a draw's slice is exact), several per CDF point."""


def start_table(xp: NDArray[np.float64]) -> NDArray[np.int64]:
    """Per slice k of [0, 1): the last index ``j`` with ``xp[j] <= k / BUCKETS`` (-1 where none), so a draw in
    that slice has its interval at or after it."""
    return np.searchsorted(xp, np.arange(BUCKETS) / BUCKETS, side="right") - 1


@njit(cache=True)
def interp_unit(u, xp, fp, left, start):  # pragma: no cover - compiled
    """``np.interp(u, xp, fp, left=left)`` for draws ``u`` in [0, 1) (others, NaN included, as numpy treats them)
    with ``xp`` non-decreasing and ``start`` = :func:`start_table` of ``xp`` (module docstring)."""
    n = xp.size
    out = np.empty(u.size)
    right = fp[n - 1]
    if n == 1:  # numpy's one-point form: comparisons only (a NaN draw gets the point's value)
        for i in range(u.size):
            v = u[i]
            out[i] = left if v < xp[0] else (right if v > xp[0] else fp[0])
        return out
    for i in range(u.size):
        v = u[i]
        if v != v:
            out[i] = v
            continue
        if v < xp[0]:
            out[i] = left
            continue
        if v > xp[n - 1]:
            out[i] = right
            continue
        j = 0
        if 0.0 <= v < 1.0:
            j = max(start[int(v * BUCKETS)], 0)
        while j + 1 < n and xp[j + 1] <= v:
            j += 1
        if j == n - 1 or xp[j] == v:
            out[i] = fp[j]
            continue
        slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j])
        r = slope * (v - xp[j]) + fp[j]
        if r != r:
            r = slope * (v - xp[j + 1]) + fp[j + 1]
            if r != r and fp[j] == fp[j + 1]:
                r = fp[j]
        out[i] = r
    return out


@njit(cache=True)
def sample_tokens(u, xp, fp, start, cap):  # pragma: no cover - compiled
    """Token counts of draws ``u`` from the length CDF (``xp`` probabilities, ``fp`` tokens, ``start`` its
    :func:`start_table`): ``np.minimum(np.maximum(np.rint(np.interp(u, xp, fp, left=1.0)), 1.0), cap)`` as int64
    in one pass (``cap`` < 0: no cap), the same values (round half to even, as ``np.rint``; finite draws)."""
    t = interp_unit(u, xp, fp, 1.0, start)
    out = np.empty(u.size, dtype=np.int64)
    for i in range(u.size):
        x = max(np.rint(t[i]), 1.0)
        if cap >= 0.0:
            x = min(x, cap)
        out[i] = np.int64(x)
    return out


@njit(cache=True)
def minute_times(counts, u):  # pragma: no cover - compiled
    """``(np.repeat(np.arange(M, dtype=float), counts) + u) * 60``: each of minute m's ``counts[m]`` requests at
    ``(m + u) * 60`` s for its uniform draw ``u``, in the draws' order, without the two temporaries."""
    t = np.empty(u.size)
    k = 0
    for m in range(counts.size):
        for j in range(k, k + counts[m]):
            t[j] = (float(m) + u[j]) * 60.0
        k += counts[m]
    return t


def minute_arrivals(counts: NDArray[np.int64], u: NDArray[np.float64], horizon_s: float) -> NDArray[np.float64]:
    """Arrival times (s), sorted, below ``horizon_s``: numpy's ``t = (np.repeat(np.arange(M, dtype=float), counts) +
    u) * 60; t.sort(); t[t < horizon_s]`` (:func:`minute_times`, numpy's own sort; the times below the horizon are a
    prefix of the sorted array, a view of it)."""
    t = minute_times(counts, u)
    t.sort()
    return t[:int(np.searchsorted(t, horizon_s, side="left"))]
