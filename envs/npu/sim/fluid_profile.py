"""The workload as the fluid NPU model sees it: per 10-s bin and length bucket, requests and tokens; per
bucket, the length moments and output-length distribution the fluid's SLO estimates read.

Built once per workload (one compiled pass over the requests,
:func:`profile_sums`, ~30 ms for a 24-h Azure day of 2.6 M requests) and
cached per process (bounded), so a fluid simulator never touches a request again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from servegym.envs.npu.sim import fluid_kernels as fk
from servegym.envs.npu.sim.workloads import NPUWorkload

#: Output-length grid of the per-bucket distribution: 8 points per doubling from 1 to 2^21 tokens.
OSL_GRID = 2.0 ** (np.arange(0, 21 * 8 + 1) / 8.0)
PROFILE_CACHE_MAX = 4
"""Workload profiles kept per process (the env's workload cache holds 2 workloads; a profile is ~15 MB
for a 24-h day: 8,640 bins x 2 phases x 48 buckets x 2 arrays of float64)."""


@dataclass(frozen=True)
class WorkloadProfile:
    """Arrays of one workload over length buckets ``edges`` (48) and bins of ``bin_s`` seconds.

    ``counts`` / ``tokens`` (bins, 2, 48): requests and tokens arriving per bin, prefill by input-length
    bucket (input tokens), decode by total-length bucket (output tokens). ``cum_counts`` (bins + 1,):
    requests arrived before each bin edge. ``in_given_tot`` (48, 48): share of a total-length bucket's
    requests per input-length bucket; ``isl_mean`` / ``osl_mean`` (48, 48): mean input / output tokens per
    (input bucket, total bucket) cell. ``isl_m1`` / ``isl_m2`` (48,): first and second moments of input
    tokens per input bucket. ``osl_cdf`` (48, len(OSL_GRID)): CDF of output tokens per total bucket.
    ``bk_p`` / ``bk_d`` (requests,): every request's input / total bucket (int16, for the oracle)."""

    bin_s: float
    counts: NDArray[np.float64]
    tokens: NDArray[np.float64]
    cum_counts: NDArray[np.int64]
    in_given_tot: NDArray[np.float64]
    isl_mean: NDArray[np.float64]
    osl_mean: NDArray[np.float64]
    isl_m1: NDArray[np.float64]
    isl_m2: NDArray[np.float64]
    osl_cdf: NDArray[np.float64]
    bk_p: NDArray[np.int16]
    bk_d: NDArray[np.int16]

    @property
    def n_bins(self) -> int:
        return int(self.counts.shape[0])


_LUTS: dict[tuple[int, ...], tuple[int, NDArray[np.int64]]] = {}
_OSL_TOP = int(OSL_GRID[-1])  # 2^21, exactly


def _osl_lut() -> NDArray[np.uint8]:
    """Grid index (first grid point >= x, at most the last) of every integer output length 0..2^21."""
    lut = _LUTS.get(())
    if lut is None:
        # uint8 (169 grid points): a 2-MB table, so the gather over millions of requests stays in cache
        lut = _LUTS[()] = (1, np.minimum(np.searchsorted(OSL_GRID, np.arange(_OSL_TOP + 1), side="left"),
                                         OSL_GRID.size - 1).astype(np.uint8))
    return lut[1]


def length_bucket(edges: NDArray[np.int64], x: NDArray[np.int64]) -> NDArray[np.int64]:
    """``np.searchsorted(edges, np.minimum(x, edges[-1]), side="left")`` for integer lengths ``x`` >= 0, by a
    table lookup (5-10x faster on the millions of requests of a day): with q the edges' greatest common divisor,
    edge_i >= x exactly when edge_i / q >= ceil(x / q), so the table has edges[-1] / q + 1 entries (8,193 for
    the DSE's buckets)."""
    key = tuple(int(e) for e in edges)
    hit = _LUTS.get(key)
    if hit is None:
        q = int(np.gcd.reduce(np.asarray(edges, dtype=np.int64)))
        top = int(edges[-1]) // q
        hit = _LUTS[key] = (q, np.searchsorted(np.asarray(edges) // q, np.arange(top + 1), side="left"))
    q, lut = hit
    return _lut_lookup(x, lut, int(edges[-1]), q)  # lut[(np.minimum(x, edges[-1]) + (q - 1)) // q], one pass


@fk.njit(cache=True)
def _lut_lookup(x, lut, top, q):  # pragma: no cover - compiled
    """``lut[(np.minimum(x, top) + (q - 1)) // q]`` for integer ``x`` >= 0 (exact integer arithmetic), without the
    temporaries of millions of values."""
    out = np.empty(x.size, dtype=lut.dtype)
    for i in range(x.size):
        out[i] = lut[(min(x[i], top) + (q - 1)) // q]
    return out


def _sums(kb: NDArray[np.int64], bk_p: NDArray[np.int64], bk_d: NDArray[np.int64], isl: NDArray[np.int64],
          osl: NDArray[np.int64], gi: NDArray[np.int64], n_bins: int, nb: int, g: int) -> tuple:
    """:func:`profile_sums` on contiguous int64 inputs."""
    c = [np.ascontiguousarray(a, dtype=np.int64) for a in (kb, bk_p, bk_d, isl, osl, gi)]
    return profile_sums(*c, int(n_bins), int(nb), int(g))


def _sums_numpy(kb: NDArray[np.int64], bk_p: NDArray[np.int64], bk_d: NDArray[np.int64], isl: NDArray[np.int64],
                osl: NDArray[np.int64], gi: NDArray[np.int64], n_bins: int, nb: int, g: int) -> tuple:
    """The same sums as :func:`profile_sums` by ``np.bincount`` (without numba;
    the reference the kernel is tested against)."""
    counts = np.zeros((n_bins, 2, nb))
    tokens = np.zeros((n_bins, 2, nb))
    size = n_bins * nb
    for p, bk, tok in ((0, bk_p, isl), (1, bk_d, osl)):
        idx = kb * nb + bk
        counts[:, p] = np.bincount(idx, minlength=size).reshape(n_bins, nb)
        tokens[:, p] = np.bincount(idx, weights=tok, minlength=size).reshape(n_bins, nb)
    cell = bk_p * nb + bk_d
    return (counts, tokens, np.bincount(cell, minlength=nb * nb), np.bincount(cell, weights=isl, minlength=nb * nb),
            np.bincount(cell, weights=osl, minlength=nb * nb), np.bincount(bk_p, minlength=nb),
            np.bincount(bk_p, weights=isl, minlength=nb), np.bincount(bk_p, weights=isl.astype(float) ** 2, minlength=nb),
            np.bincount(bk_d * g + gi, minlength=nb * g))


def build_profile(workload: NPUWorkload, edges: NDArray[np.int64], bin_s: float) -> WorkloadProfile:
    """The profile of ``workload`` (see :class:`WorkloadProfile`)."""
    nb = int(edges.size)
    r = workload.requests
    arr, isl, osl = r.arrival_s, r.input_tokens, r.output_tokens
    tot = isl + osl
    bk_p = length_bucket(edges, isl)
    bk_d = length_bucket(edges, tot)
    n_bins = int(np.ceil(max(workload.duration_s, float(arr[-1]) + 1e-9 if arr.size else 0.0) / bin_s)) + 1
    # the bin of every request, arr // bin_s (exact floor for these magnitudes), from the sorted arrivals' bin edges
    first = np.searchsorted(arr, np.arange(1, n_bins) * bin_s, side="left")
    kb = np.repeat(np.arange(n_bins), np.diff(np.concatenate([[0], first, [arr.size]])))
    g = OSL_GRID.size
    gi = _osl_lut()[np.minimum(osl, _OSL_TOP)].astype(np.int64)  # first grid point >= osl (the last beyond it)
    sums = _sums if fk.COMPILED else _sums_numpy  # one compiled pass over the requests, or ten bincounts
    counts, tokens, n_cell, isl_cell, osl_cell, n_in, isl_s1, isl_s2, hist = sums(kb, bk_p, bk_d, isl, osl, gi,
                                                                                  n_bins, nb, g)
    per_bin = counts[:, 0].sum(axis=1).astype(np.int64)
    cum = np.concatenate([[0], np.cumsum(per_bin)])
    n_cell = n_cell.reshape(nb, nb)
    safe = np.maximum(n_cell, 1)
    isl_mean = isl_cell.reshape(nb, nb) / safe
    osl_mean = osl_cell.reshape(nb, nb) / safe
    n_tot = n_cell.sum(axis=0)
    in_given_tot = np.where(n_tot[None, :] > 0, n_cell / np.maximum(n_tot, 1)[None, :], 0.0)
    n_in = np.maximum(n_in, 1)
    isl_m1 = isl_s1 / n_in
    isl_m2 = isl_s2 / n_in
    hist = hist.reshape(nb, g)
    cdf = np.cumsum(hist, axis=1) / np.maximum(hist.sum(axis=1, keepdims=True), 1)
    for a in (counts, tokens, cum, in_given_tot, isl_mean, osl_mean, isl_m1, isl_m2, cdf):
        a.setflags(write=False)
    bp, bd = bk_p.astype(np.int16), bk_d.astype(np.int16)
    bp.setflags(write=False)
    bd.setflags(write=False)
    return WorkloadProfile(float(bin_s), counts, tokens, cum, in_given_tot.T.copy(), isl_mean, osl_mean, isl_m1,
                           isl_m2, cdf, bp, bd)


_PROFILES: OrderedDict[tuple[int, float], tuple[NPUWorkload, WorkloadProfile]] = OrderedDict()


def workload_profile(workload: NPUWorkload, edges: NDArray[np.int64], bin_s: float) -> WorkloadProfile:
    """:func:`build_profile`, cached per (workload object, bin length); the oldest entry is dropped first."""
    key = (id(workload), float(bin_s))
    hit = _PROFILES.get(key)
    if hit is not None and hit[0] is workload:
        _PROFILES.move_to_end(key)
        return hit[1]
    while len(_PROFILES) >= PROFILE_CACHE_MAX:
        _PROFILES.popitem(last=False)
    prof = build_profile(workload, edges, bin_s)
    _PROFILES[key] = (workload, prof)
    return prof


def osl_share_below(cdf: NDArray[np.float64], bucket: NDArray[np.int64], x: NDArray[np.float64]) -> NDArray[np.float64]:
    """Share of a total-length bucket's requests with fewer than ``x`` output tokens (``cdf`` rows of
    :attr:`WorkloadProfile.osl_cdf`, interpolated on the log grid)."""
    lx = np.log2(np.clip(x, 1.0, OSL_GRID[-1])) * 8.0  # position on the grid (cdf[i] = P(osl <= grid[i]))
    lo = np.floor(lx).astype(np.int64)
    hi = np.minimum(lo + 1, OSL_GRID.size - 1)
    a, b = cdf[bucket, lo], cdf[bucket, hi]
    return np.where(x <= 1.0, 0.0, a + (b - a) * (lx - lo))


@fk.njit(cache=True)
def profile_sums(kb, bk_p, bk_d, isl, osl, gi, n_bins, nb, ng):  # pragma: no cover - compiled
    """One pass over a workload's requests for :func:`~servegym.envs.npu.sim.fluid_profile.build_profile`: per
    (bin ``kb``, phase, bucket) requests and tokens (prefill: input tokens by input bucket ``bk_p``; decode:
    output tokens by total bucket ``bk_d``); per (input, total) bucket cell the request count and input and
    output token sums; per input bucket the count and the sums of input tokens and their squares; per (total
    bucket, output-length grid point ``gi``) the count. Each sum runs over the requests in order from 0, as
    ``np.bincount`` sums its weights, so the arrays equal the bincount formulation bit for bit (tested)."""
    counts = np.zeros((n_bins, 2, nb))
    tokens = np.zeros((n_bins, 2, nb))
    n_cell = np.zeros(nb * nb, dtype=np.int64)
    isl_cell = np.zeros(nb * nb)
    osl_cell = np.zeros(nb * nb)
    n_in = np.zeros(nb, dtype=np.int64)
    isl_s1 = np.zeros(nb)
    isl_s2 = np.zeros(nb)
    hist = np.zeros(nb * ng, dtype=np.int64)
    for i in range(kb.size):
        k, p, d = kb[i], bk_p[i], bk_d[i]
        x = float(isl[i])
        y = float(osl[i])
        counts[k, 0, p] += 1.0
        tokens[k, 0, p] += x
        counts[k, 1, d] += 1.0
        tokens[k, 1, d] += y
        c = p * nb + d
        n_cell[c] += 1
        isl_cell[c] += x
        osl_cell[c] += y
        n_in[p] += 1
        isl_s1[p] += x
        isl_s2[p] += x * x
        hist[d * ng + gi[i]] += 1
    return counts, tokens, n_cell, isl_cell, osl_cell, n_in, isl_s1, isl_s2, hist
