"""numpy's float64 summation order, compiled, for per-step bookkeeping that must keep numpy's figures bit for bit.

``a.sum()`` of a contiguous float64 array, and each row of ``x.sum(axis=1)`` of a C-contiguous 2-D one, is numpy's
pairwise summation: below 8 values a loop from -0.0; up to 128 eight running sums combined as
((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)) and the remainder added in order; above, the two halves (the
first a multiple of 8 long) summed the same way and added; the reduction adds that to its identity, 0.0. :func:`pairwise_sum` is that order, so a loop of a few
small sums runs as one compiled call instead of a numpy call each (microseconds of dispatch apiece) and gives the
same float64 values (tested against numpy on random arrays of every length up to 300). Units are the caller's.
"""

from __future__ import annotations

import numpy as np
from servegym.envs.npu.sim.fluid_kernels import njit


@njit(cache=True)
def pairwise_sum(a, lo, hi):  # pragma: no cover - compiled
    """``a[lo:hi].sum()`` of a 1-D float64 array, in numpy's order (module docstring): the reduction starts from
    its identity, 0.0, so an empty or all -0.0 range sums to 0.0."""
    return 0.0 + _pairwise(a, lo, hi)


@njit(cache=True)
def _block(a, lo, hi):  # pragma: no cover - compiled
    """numpy's pairwise_sum of ``a[lo:hi]`` for at most 128 values (one block: no halving)."""
    n = hi - lo
    if n < 8:
        res = -0.0
        for i in range(lo, hi):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = lo + 8
    stop = hi - (n % 8)
    while i < stop:
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < hi:
        res += a[i]
        i += 1
    return res


@njit(cache=True)
def _pairwise(a, lo, hi):  # pragma: no cover - compiled
    """numpy's pairwise_sum of ``a[lo:hi]`` (without the reduction's identity). Above 128 values numpy sums the
    two halves recursively; this walks the same tree with explicit stacks (numba does not cache recursion)."""
    if hi - lo <= 128:
        return _block(a, lo, hi)
    t_lo = np.empty(256, dtype=np.int64)  # tasks: (lo, hi, combine?); depth <= 2 per halving level
    t_hi = np.empty(256, dtype=np.int64)
    t_comb = np.empty(256, dtype=np.bool_)
    vals = np.empty(128)
    nt = 1
    nv = 0
    t_lo[0], t_hi[0], t_comb[0] = lo, hi, False
    while nt:
        nt -= 1
        lo_, h = t_lo[nt], t_hi[nt]
        if t_comb[nt]:  # the two halves' sums are the last two values
            nv -= 1
            vals[nv - 1] = vals[nv - 1] + vals[nv]
        elif h - lo_ <= 128:
            vals[nv] = _block(a, lo_, h)
            nv += 1
        else:
            n2 = (h - lo_) // 2
            n2 -= n2 % 8
            t_lo[nt], t_hi[nt], t_comb[nt] = lo_, h, True  # combine after both halves
            t_lo[nt + 1], t_hi[nt + 1], t_comb[nt + 1] = lo_ + n2, h, False  # second half
            t_lo[nt + 2], t_hi[nt + 2], t_comb[nt + 2] = lo_, lo_ + n2, False  # first half, done first
            nt += 3
    return vals[0]


@njit(cache=True)
def peak_ratio(bins, phase, buckets, cap):  # pragma: no cover - compiled
    """Peak over the bins of the summed columns over the sum of the columns' own peaks, with column j =
    ``bins[:, phase, buckets[j]] / max(cap[j], 1e-300)`` for a C-contiguous float64 ``bins``: numpy's
    ``x = bins[:, phase, buckets] / np.maximum(cap, 1e-300)``, ``float(x.sum(axis=1).max()) / float(x.max(axis=0)
    .sum())``, in numpy's order; 1.0 when the peaks sum to 0 or less (:func:`servegym.baselines.npu.coincidence`).
    That ``x`` is Fortran-ordered (the advanced index's column axis is laid out last), so numpy sums each row
    in column order from 0.0 (one pass per column over all rows), unless it has one row (then it is also
    C-contiguous and summed pairwise); the column peaks are a new contiguous array, summed pairwise."""
    nb = bins.shape[0]
    k = buckets.size
    x = np.empty((nb, k))
    for j in range(k):
        c = max(cap[j], 1e-300)
        for i in range(nb):
            x[i, j] = bins[i, phase, buckets[j]] / c
    col = np.empty(k)
    for j in range(k):
        m = x[0, j]
        for i in range(1, nb):
            v = x[i, j]
            if v > m or v != v:  # np.max propagates NaN
                m = v
        col[j] = m
    peaks = pairwise_sum(col, 0, k)
    if not peaks > 0:
        return 1.0
    if nb == 1:
        return pairwise_sum(x[0], 0, k) / peaks
    best = 0.0
    for i in range(nb):
        s = 0.0
        for j in range(k):
            s += x[i, j]
        if i == 0 or s > best or s != s:
            best = s
    return best / peaks


@njit(cache=True)
def range_rates(rate_recent, rate_peak, tokens_per_req, phase, lo, hi, rr, rp, tpr):  # pragma: no cover - compiled
    """Per length range g (``phase[g]``, buckets ``lo[g]:hi[g]``) of C-contiguous (2, buckets) float64 arrays, in
    numpy's order: ``rr[g] = rate_recent[p, lo:hi].sum()``, ``rp[g] = rate_peak[p, lo:hi].sum()`` and ``tpr[g] =
    (w * tokens_per_req[p, lo:hi]).sum() / w.sum()`` with ``w = rate_peak[p, lo:hi]`` (0.0 when ``w.sum()`` is
    not positive): the env observation's rates and tokens per request of each group (req/s, tokens)."""
    buf = np.empty(rate_peak.shape[1])
    for g in range(phase.size):
        p, a, b = phase[g], lo[g], hi[g]
        rr[g] = pairwise_sum(rate_recent[p], a, b)
        w = pairwise_sum(rate_peak[p], a, b)
        rp[g] = w
        if w > 0:
            for i in range(a, b):
                buf[i - a] = rate_peak[p, i] * tokens_per_req[p, i]
            tpr[g] = pairwise_sum(buf, 0, b - a) / w
        else:
            tpr[g] = 0.0


@njit(cache=True)
def row_sums(x):  # pragma: no cover - compiled
    """``x.sum(axis=1)`` of a C-contiguous 2-D float64 array, each row in numpy's order (a new array)."""
    n = x.shape[1]
    out = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = pairwise_sum(x[i], 0, n)
    return out


@njit(cache=True)
def gathered_dot(counts, per, idx):  # pragma: no cover - compiled
    """``(counts * per[idx]).sum()`` for integer ``counts`` and bucket indices ``idx`` (same length) and a float64
    ``per``: each product as numpy forms it (the count as float64, times its bucket's value), summed in numpy's
    pairwise order, without the two temporary arrays of millions of values (the reward's oracle scale of a 24-h
    workload: tokens x J or USD per token of each request's bucket)."""
    n = counts.size
    prod = np.empty(n)
    for i in range(n):
        prod[i] = float(counts[i]) * per[idx[i]]
    return pairwise_sum(prod, 0, n)
