"""The facility MILP's model arrays (:func:`~servegym.baselines.geo.solver.solve_facility`), compiled.

Building the strong formulation's compressed columns is some thirty numpy operations on arrays of a few
hundred entries per window, so their dispatch costs more than HiGHS' own LP on a small window. Here the same
arrays are filled by loops compiled with numba (``cache=True``; without numba they run as plain Python):
every entry the numpy form (``solver._facility_model_numpy``, kept as the reference and tested equal) writes,
in its order: pairs r-major (``np.nonzero``), each column's entries in the order of its triplets (the stable
column sort of ``solver._csc``). Costs in gCO2 before scaling; indices as HiGHS takes them (int32).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from servegym.envs.geo.sim.engine_kernels import njit  # numba's, or a pure-Python stand-in without numba


@njit(cache=True)
def facility_model(cost: NDArray[np.float64], feas: NDArray[np.bool_], cap: NDArray[np.float64],
                   awake: NDArray[np.bool_], wake: NDArray[np.float64]):
    """(pr, pd, scale, cap, nf, n_link, start, index, value, col_cost, row_lo, row_hi, free) of the facility
    model on ``cost`` (n, D) finite on ``feas``, capacities ``cap`` (floored, >= 0), ``awake`` DCs and wake
    costs; ``col_cost``'s slack entries (``m .. m + n``) are left to the caller (their ``big`` sums the wake
    costs in numpy's order)."""
    n, d = cost.shape
    cap = cap.copy()
    m = 0
    for j in range(d):
        k = 0
        for i in range(n):
            if feas[i, j]:
                k += 1
        cap[j] = min(cap[j], k)
    for i in range(n):
        for j in range(d):
            if feas[i, j]:
                m += 1
    pr = np.empty(m, dtype=np.int64)
    pd_ = np.empty(m, dtype=np.int64)
    c = np.empty(m)
    k = 0
    scale = 0.0
    for i in range(n):
        for j in range(d):
            if feas[i, j]:
                pr[k], pd_[k] = i, j
                c[k] = cost[i, j]
                scale = max(scale, abs(c[k]))
                k += 1
    if m == 0 or not scale > 0:
        scale = 1.0
    free_pos = np.full(d, -1, dtype=np.int64)
    awake_pos = np.full(d, -1, dtype=np.int64)
    nf = 0
    na = 0
    for j in range(d):
        if awake[j]:
            awake_pos[j] = na
            na += 1
        else:
            free_pos[j] = nf
            nf += 1
    free = np.empty(nf, dtype=np.int64)
    awake_idx = np.empty(na, dtype=np.int64)
    for j in range(d):
        if awake[j]:
            awake_idx[awake_pos[j]] = j
        else:
            free[free_pos[j]] = j
    n_link = 0
    for k in range(m):
        if free_pos[pd_[k]] >= 0:
            n_link += 1
    n_cols = m + n + nf
    n_nz = 2 * m + n_link + n + nf + n_link
    start = np.zeros(n_cols + 1, dtype=np.int32)
    index = np.empty(n_nz, dtype=np.int32)
    value = np.empty(n_nz)
    col_cost = np.empty(n_cols)
    p = 0
    link_k = 0
    for k in range(m):  # x columns: assignment row, capacity row, then the linking row of a free DC
        j = pd_[k]
        index[p] = pr[k]
        index[p + 1] = n + free_pos[j] if free_pos[j] >= 0 else n + nf + n_link + awake_pos[j]
        value[p] = 1.0
        value[p + 1] = 1.0
        p += 2
        if free_pos[j] >= 0:
            index[p] = n + nf + link_k
            value[p] = 1.0
            p += 1
            link_k += 1
        start[k + 1] = p
        col_cost[k] = c[k] / scale
    for r in range(n):  # slack columns
        index[p] = r
        value[p] = 1.0
        p += 1
        start[m + r + 1] = p
    for f in range(nf):  # y columns: -cap in the capacity row, -1 in each of the DC's linking rows
        index[p] = n + f
        value[p] = -cap[free[f]]
        p += 1
        link_k = 0
        for k in range(m):
            if free_pos[pd_[k]] >= 0:
                if free_pos[pd_[k]] == f:
                    index[p] = n + nf + link_k
                    value[p] = -1.0
                    p += 1
                link_k += 1
        start[m + n + f + 1] = p
        col_cost[m + n + f] = wake[free[f]] / scale
    n_rows = n + nf + n_link + na
    row_lo = np.full(n_rows, -np.inf)
    row_hi = np.zeros(n_rows)
    for r in range(n):
        row_lo[r] = 1.0
        row_hi[r] = 1.0
    for a in range(na):
        row_hi[n + nf + n_link + a] = cap[awake_idx[a]]
    return pr, pd_, scale, cap, nf, n_link, start, index, value, col_cost, row_lo, row_hi, free
