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
    for p in range(P):
        for b in range(nb):
            i = (bin_index - 1) % nw
            s = bin_counts[i, p, b]
            e = bin_counts[i, p, b] / rate_bin_s
            for k in range(1, nb_epoch):
                i = (bin_index - 1 - k) % nw
                x = bin_counts[i, p, b]
                s += x
                r = x / rate_bin_s
                if not (e >= r or e != e):  # np.maximum's reduction: NaN kept
                    e = r
            recent[p, b] = s / epoch_s
            epeak[p, b] = e
            c = bin_counts[0, p, b]
            t = bin_tokens[0, p, b]
            m = bin_counts[0, p, b]
            for j in range(1, nw):
                x = bin_counts[j, p, b]
                c += x
                t += bin_tokens[j, p, b]
                if not (m >= x or m != m):
                    m = x
            tpr[p, b] = t / max(c, 1.0) if c > 0 else 0.0
            peak[p, b] = m / rate_bin_s
    return toks, recent, tpr, peak, epeak
