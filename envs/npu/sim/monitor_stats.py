"""The rate monitor's window statistics for :meth:`~servegym.envs.npu.sim.cluster.NPUCluster.observe`, compiled.

``observe`` reads the monitor's window (``window_s / rate_bin_s`` bins of requests and tokens per phase and
length bucket) five ways: the last epoch's bins newest first, their mean rate, the window's tokens per request,
the window's and the epoch's peak rates. As numpy calls that is a gather, three reductions over the window and
several element-wise passes (tens of microseconds per observation, for both fidelities); here one pass. Sums run
over the bins in the order numpy's reductions over the leading axis add them (first bin first), so the arrays
equal the numpy formulation's bit for bit (tests/test_npu_fluid_books.py). Rates are requests per second.
"""

from __future__ import annotations

import numpy as np
from servegym.envs.npu.sim.fluid_kernels import njit


@njit(cache=True)
def window_stats(bin_counts, bin_tokens, bin_index, nb_epoch, rate_bin_s, epoch_s):  # pragma: no cover - compiled
    """Of the monitor's window (``bin_counts`` / ``bin_tokens``: bins x 2 x buckets, ring buffer whose next bin is
    ``bin_index`` modulo its length): the last ``nb_epoch`` bins' tokens newest first (nb_epoch x 2 x buckets), and
    per (phase, bucket) their requests per second over ``epoch_s``, the window's tokens per request (0 without
    requests), the window's peak rate and the last epoch's peak rate (a bin's requests / ``rate_bin_s``)."""
    nw, P, nb = bin_counts.shape
    toks = np.empty((nb_epoch, P, nb))
    recent = np.empty((P, nb))
    tpr = np.empty((P, nb))
    peak = np.empty((P, nb))
    epeak = np.empty((P, nb))
    for k in range(nb_epoch):
        i = (bin_index - 1 - k) % nw
        for p in range(P):
            for b in range(nb):
                toks[k, p, b] = bin_tokens[i, p, b]
    # bins outermost so each pass reads a bin's contiguous (phase, bucket) row; every (phase, bucket) still adds its
    # bins in the order the per-element loops did (newest first for the epoch, first bin first for the window)
    i = (bin_index - 1) % nw
    for p in range(P):
        for b in range(nb):
            recent[p, b] = bin_counts[i, p, b]
            epeak[p, b] = bin_counts[i, p, b] / rate_bin_s
    for k in range(1, nb_epoch):
        i = (bin_index - 1 - k) % nw
        for p in range(P):
            for b in range(nb):
                x = bin_counts[i, p, b]
                recent[p, b] += x
                r = x / rate_bin_s
                e = epeak[p, b]
                if not (e >= r or e != e):  # np.maximum's reduction: NaN kept
                    epeak[p, b] = r
    c = bin_counts[0].copy()
    t = bin_tokens[0].copy()
    m = bin_counts[0].copy()
    for j in range(1, nw):
        for p in range(P):
            for b in range(nb):
                x = bin_counts[j, p, b]
                c[p, b] += x
                t[p, b] += bin_tokens[j, p, b]
                mm = m[p, b]
                if not (mm >= x or mm != mm):
                    m[p, b] = x
    for p in range(P):
        for b in range(nb):
            recent[p, b] = recent[p, b] / epoch_s
            tpr[p, b] = t[p, b] / max(c[p, b], 1.0) if c[p, b] > 0 else 0.0
            peak[p, b] = m[p, b] / rate_bin_s
    return toks, recent, tpr, peak, epeak
