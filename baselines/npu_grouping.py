"""NeuScale's per-epoch grouping (:meth:`servegym.baselines.npu.NeuScalePolicy.groups`) as one compiled call.

The policy forms its groups every epoch for both phases: runs of consecutive live buckets sharing a best-fit
allocation, each group's demand W (tokens/s), per-vPod capacity C (tokens/s) and R_peak (req/s) scaled by its
coincidence factor, then the coalescing cascade (smallest N_L = W / C first, into the next larger group when it has
the spare capacity, meets the SLO and is not a worse fit). In Python that is a few hundred small dict, list and
numpy-scalar operations per phase (about 40 % of the residual env's step outside the simulator);
:func:`neuscale_groups` runs the same steps in the same order on per-run tables (:func:`grouping_tables`), so every
sum, product and comparison is the same IEEE float64 operation and the groups are identical bit for bit (tested
against the Python method, which stays the reference and the fallback, in tests/test_npu_grouping.py):

* sums accumulate bucket by bucket from 0.0 in the live buckets' order, as the Python loop's ``+=``;
* the coincidence factor is :func:`~servegym.envs.npu.sim.pairwise_sums.peak_ratio`, the function
  :func:`~servegym.baselines.npu.coincidence` calls for the observation's bins;
* ``np.searchsorted`` (the operating batch level of the fit check) is numpy's binary search for one key, with its
  NaN-aware ``less``;
* Python's ``max(1, math.ceil(x))`` and ``max(x, 0.0)`` keep the first argument unless the second is larger, as
  written out below; ``math.ceil`` is ``np.ceil``, a float of the same integer value.

Where the Python method would raise (a zero capacity, a non-finite N_L) or needs what the kernel does not model
(``max_groups``), the kernel reports it and the Python method runs instead. Units: tokens/s, requests/s.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from servegym.envs.npu.sim.fluid_kernels import njit
from servegym.envs.npu.sim.pairwise_sums import peak_ratio

OK, FALLBACK = 0, 1


def grouping_tables(sim, fixed: dict[tuple[int, int], int]) -> dict[str, NDArray]:
    """Per-run tables of ``sim``'s catalog the kernel reads: ``pick`` (2, buckets) the configuration of each
    (phase, bucket) (``fixed`` with ``fit_at = "operating"``, else the DSE's best fit; -1 where a bucket has no
    candidate), ``alloc`` (configs,) each configuration's allocation, ``full_tps`` (configs, buckets) tokens/s of
    one vPod at its max batch, ``slo_ok`` (2, configs, buckets) whether a vPod meets the bucket's SLO at its max
    batch (TTFT for prefill, TPOT for decode: the check of ``_serves_within_slo``)."""
    nb = sim.edges.size
    pick = np.full((2, nb), -1, dtype=np.int64)
    for p, ph in enumerate(("prefill", "decode")):
        for b in range(nb):
            if sim.config.fit_at == "operating":
                pick[p, b] = fixed[(p, b)]
            else:
                cand = sim.cand.get((ph, int(sim.edges[b])))
                if cand:
                    pick[p, b] = cand[0]
    jmax = np.ascontiguousarray(sim.jmax, dtype=np.int64)
    tps = np.ascontiguousarray(sim.tps, dtype=np.float64)
    full = np.ascontiguousarray(np.take_along_axis(tps, jmax[:, :, None], axis=2)[:, :, 0])
    last = sim.lat[:, :, -1]
    slo_ok = np.stack([last <= sim.slo_p[None, :] + 1e-12, last <= sim.slo_d[None, :] + 1e-12])
    per_s = sim.cfg_usd_s if sim.config.objective == "cost" else sim.cfg_static_w
    return {"pick": pick, "alloc": np.array([cf.entry.alloc_index for cf in sim.configs], dtype=np.int64),
            "full_tps": full, "slo_ok": np.ascontiguousarray(slo_ok), "tps": tps, "jmax": jmax,
            "pow": np.ascontiguousarray(sim.pow, dtype=np.float64),
            "static_w": np.ascontiguousarray(sim.cfg_static_w, dtype=np.float64),
            "per_s": np.ascontiguousarray(per_s, dtype=np.float64)}


@njit(cache=True)
def _searchsorted_left(a, v):  # pragma: no cover - compiled
    """``np.searchsorted(a, v)`` (side left) for one float64 key: numpy's binary search with its ``less``
    (a < b, or b is NaN and a is not), so the index is numpy's for any row, sorted or not."""
    lo = 0
    hi = a.size
    while lo < hi:
        mid = lo + ((hi - lo) >> 1)
        m = a[mid]
        if m < v or (v != v and m == m):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _rate(cost, tps, pw, jmax, static_w, cid, b, w, n):  # pragma: no cover - compiled
    """``NeuScalePolicy._rate``: dynamic J/s that ``w`` tokens/s add on ``n`` vPods of ``cid`` at bucket ``b``
    (0.0 for the cost objective); NaN when the Python method would divide by zero (the caller falls back)."""
    if cost:
        return 0.0
    nn = n
    if 1.0 > nn:  # max(n, 1)
        nn = 1.0
    row = tps[cid, b]
    j = _searchsorted_left(row, w / nn - 1e-12)
    if j > jmax[cid, b]:
        j = jmax[cid, b]
    d = pw[cid, b, j] - static_w[cid]
    if 0.0 > d:  # max(d, 0.0)
        d = 0.0
    t = tps[cid, b, j]
    if t == 0.0:
        return np.nan
    return d / t * w


@njit(cache=True)
def _ceil_at_least_1(x):  # pragma: no cover - compiled
    """``max(1, math.ceil(x))`` as a float (the same integer value)."""
    c = np.ceil(x)
    return c if c > 1.0 else 1.0


@njit(cache=True)
def neuscale_groups(phase, tpr, sig, bins, use_bins, sticky, prev_bucket, coalescing, coalesce_below, slo_aware,
                    fit_aware, cost, pick, alloc, full_tps, slo_ok, tps, pw, jmax, static_w, per_s,
                    out_b, out_w, out_c, out_cid, out_r, merged_b, merged_t):  # pragma: no cover - compiled
    """:meth:`NeuScalePolicy.groups` for ``phase`` (module docstring): ``tpr``, ``sig`` the phase's tokens per
    request and EWMA R_peak per bucket (float64, buckets,); ``pick`` the phase's row of :func:`grouping_tables`;
    ``bins`` the observation's epoch token bins (used when ``use_bins``); ``prev_bucket[a]`` the bucket of the
    policy's current group of allocation ``a`` (-1: none; read when ``sticky``, i.e. ``fit_at = "operating"``);
    ``slo_ok`` the phase's (configs, buckets) table. Writes the groups (top bucket, W, C, configuration, R_peak) in
    bucket order to ``out_*`` and each merge's (absorbed, absorbing) top bucket to ``merged_*``; returns (groups,
    merges, status), status :data:`FALLBACK` where the Python method must run instead."""
    nb = tpr.size
    live = np.empty(nb, dtype=np.int64)
    nl = 0
    for b in range(nb):
        if tpr[b] > 0 and sig[b] > 0:
            if pick[b] < 0:
                return 0, 0, FALLBACK
            live[nl] = b
            nl += 1
    # runs of consecutive live buckets with one allocation, keyed by their largest bucket
    run_of = np.empty(nl, dtype=np.int64)
    ends = np.empty(nl, dtype=np.int64)
    nr = 0
    for i in range(nl):
        b = live[i]
        if i > 0 and alloc[pick[b]] != alloc[pick[live[i - 1]]]:
            ends[nr] = live[i - 1]
            nr += 1
        run_of[i] = nr
    if nl > 0:
        ends[nr] = live[nl - 1]
        nr += 1
    top = np.empty(nr, dtype=np.int64)
    for r in range(nr):
        top[r] = ends[r]
        if sticky:
            hb = prev_bucket[alloc[pick[ends[r]]]]
            nxt = ends[r + 1] if r + 1 < nr else nb
            if hb >= 0 and ends[r] <= hb < nxt:
                top[r] = hb
    cid = np.empty(nr, dtype=np.int64)
    for r in range(nr):
        cid[r] = pick[top[r]]
        if cid[r] < 0:
            return 0, 0, FALLBACK
    W = np.zeros(nr)
    V = np.zeros(nr)
    R = np.zeros(nr)
    C = np.empty(nr)
    caps = np.empty(nl)
    for i in range(nl):
        b = live[i]
        r = run_of[i]
        cap = full_tps[cid[r], b]
        if cap == 0.0:
            return 0, 0, FALLBACK
        w = sig[b] * tpr[b]
        V[r] += w / cap
        W[r] += w
        R[r] += sig[b]
        caps[i] = cap
    # coincidence per group, on its members in bucket order
    start = 0
    for r in range(nr):
        stop = start
        while stop < nl and run_of[stop] == r:
            stop += 1
        k = 1.0
        if use_bins:
            k = peak_ratio(bins, phase, live[start:stop].copy(), caps[start:stop].copy())
        W[r] = W[r] * k
        R[r] = R[r] * k
        if V[r] > 0:
            d = V[r] * k
            if d == 0.0:
                return 0, 0, FALLBACK
            C[r] = W[r] / d
        else:
            C[r] = 1.0
        start = stop
    # coalescing (members: the group each live bucket is in now)
    grp = run_of.copy()
    alive = np.ones(nr, dtype=np.bool_)
    nm = 0
    order = np.empty(nr, dtype=np.int64)
    ratio = np.empty(nr)
    while coalescing:
        na = 0
        for r in range(nr):
            if alive[r]:
                if C[r] == 0.0:
                    return 0, 0, FALLBACK
                ratio[r] = W[r] / C[r]
                if not np.isfinite(ratio[r]):
                    return 0, 0, FALLBACK
                # insertion by (N_L, top): the order of Python's sorted() on those keys (they are distinct)
                pos = na
                while pos > 0 and (ratio[order[pos - 1]] > ratio[r]
                                   or (ratio[order[pos - 1]] == ratio[r] and top[order[pos - 1]] > top[r])):
                    order[pos] = order[pos - 1]
                    pos -= 1
                order[pos] = r
                na += 1
        merged = False
        for q in range(na):
            b = order[q]
            w = W[b]
            if ratio[b] >= coalesce_below:
                break
            t = -1
            for u in range(b + 1, nr):  # the next larger group (groups are in bucket order)
                if alive[u]:
                    t = u
                    break
            if t < 0:
                continue
            wt, ct = W[t], C[t]
            x = wt / ct
            if not np.isfinite(x):
                return 0, 0, FALLBACK
            spare = _ceil_at_least_1(x) * ct - wt
            if not spare >= w:
                continue
            if slo_aware:
                ok = True
                for i in range(nl):
                    if grp[i] == b and not slo_ok[cid[t], live[i]]:
                        ok = False
                        break
                if not ok:
                    continue
            if fit_aware:
                xb, xt = w / C[b] - 1e-9, wt / ct - 1e-9
                if not (np.isfinite(xb) and np.isfinite(xt)):
                    return 0, 0, FALLBACK
                n_b = _ceil_at_least_1(xb)
                n_t = _ceil_at_least_1(xt)
                own = n_b * per_s[cid[b]] + _rate(cost, tps, pw, jmax, static_w, cid[b], top[b], w, n_b)
                if wt > 0:
                    moved = (_rate(cost, tps, pw, jmax, static_w, cid[t], top[b], w + wt, n_t)
                             - _rate(cost, tps, pw, jmax, static_w, cid[t], top[b], wt, n_t))
                else:
                    moved = _rate(cost, tps, pw, jmax, static_w, cid[t], top[b], w, n_t)
                if moved != moved or own != own:
                    return 0, 0, FALLBACK
                if not moved <= own + 1e-12:
                    continue
            W[t] = wt + w
            R[t] += R[b]
            alive[b] = False
            for i in range(nl):
                if grp[i] == b:
                    grp[i] = t
            merged_b[nm] = top[b]
            merged_t[nm] = top[t]
            nm += 1
            merged = True
            break
        if not merged:
            break
    ng = 0
    for r in range(nr):
        if alive[r]:
            out_b[ng] = top[r]
            out_w[ng] = W[r]
            out_c[ng] = C[r]
            out_cid[ng] = cid[r]
            out_r[ng] = R[r]
            ng += 1
    return ng, nm, OK
