"""Compiled bookkeeping around the fluid NPU model's serving kernel (:class:`~servegym.envs.npu.sim.fluid.FluidCluster`).

The fluid's per-interval Python around :func:`~servegym.envs.npu.sim.fluid_kernels.serve` (which vPods are live,
ready and serving, the arrivals of the interval, the totals) is dozens of numpy calls on arrays of a few to a few
hundred elements, where each call's dispatch costs more than its arithmetic; these loops do the same sums in the
same order (numpy's reductions over a leading axis and ``np.bincount`` add in element order from zero), so their
results equal the numpy formulation's bit for bit (tests/test_npu_fluid_speed.py). Without numba they run as plain
Python (correct, slower).

Times are seconds.
"""

from __future__ import annotations

import numpy as np
from servegym.envs.npu.sim.fluid_kernels import (
    R_E_D,
    R_E_P,
    R_EB_D,
    R_EB_P,
    R_TOKENS_D,
    R_TOKENS_P,
    R_USDB_D,
    R_USDB_P,
    njit,
)
from servegym.envs.npu.sim.pairwise_sums import pairwise_sum


@njit(cache=True)
def fleet_state(v_ready, v_gone, t0, t1):  # pragma: no cover - compiled
    """Of the vPods (ready time ``v_ready``, end of deletion ``v_gone``, inf while not deleting; s) live at ``t0``
    (``v_gone > t0``): how many, how many of them are ready at ``t0`` and whether the interval [t0, t1) is steady
    (every live vPod ready by ``t0`` or not before ``t1``, and held to ``t1``: :func:`~servegym.envs.npu.sim.
    fluid_fleet.fleet_view`). For fixed arrays both sets are threshold sets (of ``v_gone``, then of ``v_ready``),
    so the two counts name them."""
    n_live = 0
    n_ready = 0
    steady = True
    for i in range(v_gone.size):
        g = v_gone[i]
        if g > t0:
            n_live += 1
            r = v_ready[i]
            if r <= t0:
                n_ready += 1
            elif r < t1:
                steady = False
            if g < t1:
                steady = False
    return n_live, n_ready, steady


@njit(cache=True)
def arrivals(counts, tokens, cum_counts, bs, i0, i1, t0, t1):  # pragma: no cover - compiled
    """The interval [t0, t1)'s share of the profile bins ``i0`` <= i < ``i1`` (``bs`` s each; ``counts`` /
    ``tokens`` / ``cum_counts`` of :class:`~servegym.envs.npu.sim.fluid_profile.WorkloadProfile`): requests per
    (phase, bucket) (the weighted bins summed over the bins in order, as numpy's reduction over the leading axis),
    each bin's weight (its length within the span over ``bs``), start (s) and length (s), its prefill requests and
    tokens per input bucket (bins, 2, buckets), and the requests arrived by ``t1``."""
    nk = i1 - i0
    nb = counts.shape[2]
    cnt = np.empty((2, nb))
    w = np.empty(nk)
    k_start = np.empty(nk)
    k_len = np.empty(nk)
    k_pre = np.empty((nk, 2, nb))
    arrived = arrivals_into(counts, tokens, cum_counts, bs, i0, i1, t0, t1, cnt, w, k_start, k_len, k_pre)
    return cnt, w, arrived, k_start, k_len, k_pre


@njit(cache=True)
def arrivals_into(counts, tokens, cum_counts, bs, i0, i1, t0, t1, cnt, w, k_start, k_len,
                  k_pre):  # pragma: no cover - compiled
    """:func:`arrivals` written into the caller's arrays (``cnt`` 2 x buckets; ``w``, ``k_start``, ``k_len`` one
    entry per bin; ``k_pre`` bins x 2 x buckets; every entry written), returning the requests arrived by ``t1``:
    no array to hand back to Python (each costs a boxing)."""
    nk = i1 - i0
    nb = counts.shape[2]
    for k in range(nk):
        lo = float(i0 + k) * bs
        k_start[k] = max(lo, t0)
        k_len[k] = min(lo + bs, t1) - k_start[k]
        w[k] = k_len[k] / bs
    for p in range(2):
        for b in range(nb):
            s = w[0] * counts[i0, p, b]
            if p == 0:
                k_pre[0, 0, b] = s
            for k in range(1, nk):
                x = w[k] * counts[i0 + k, p, b]
                s += x
                if p == 0:
                    k_pre[k, 0, b] = x
            cnt[p, b] = s
    for k in range(nk):
        for b in range(nb):
            k_pre[k, 1, b] = w[k] * tokens[i0 + k, 0, b]
    last = i1 - 1
    return float(cum_counts[last]) + w[nk - 1] * float(cum_counts[last + 1] - cum_counts[last])


@njit(cache=True)
def settle(T, usd_s, chip_s, psa, tokens, batch_tok, energy, e_busy, acc_usd, acc_chip_s, acc_static_j, acc_tokens,
           acc_batch_tok, acc_energy_j, acc_energy_busy_j, res, m_energy_j, m_usd, m_energy_busy_j, m_usd_busy,
           m_tokens, q_req, q_pre, peak_queue):  # pragma: no cover - compiled
    """The interval's totals after :func:`~servegym.envs.npu.sim.fluid_kernels.serve` (``T`` s): adds the per-group
    figures (96 groups: rental USD/s ``usd_s``, chips ``chip_s`` and static W ``psa`` held, times ``T``; tokens,
    tokens x batch, energy and busy energy, J) to the group accumulators ``acc_*`` and the kernel's per-phase totals
    ``res`` and the phases' rental (numpy's pairwise sums of the 48 groups' USD) to the span's ``m_*``, and raises
    ``peak_queue`` (96) to each group's queue: a prefill group's observed job queue ``q_pre`` (48, its largest at
    the interval's chunk ends, :func:`~servegym.envs.npu.sim.fluid_kernels.ttft_misses`), a decode group's queued
    requests (``q_req[1]`` summed over request buckets, numpy's order). All arrays updated in place."""
    G = usd_s.size
    nb = G // 2
    usd_g = np.empty(G)
    for g in range(G):
        usd_g[g] = usd_s[g] * T
        acc_usd[g] += usd_g[g]
        acc_chip_s[g] += chip_s[g] * T
        acc_static_j[g] += psa[g] * T
        acc_tokens[g] += tokens[g]
        acc_batch_tok[g] += batch_tok[g]
        acc_energy_j[g] += energy[g]
        acc_energy_busy_j[g] += e_busy[g]
    m_energy_j[0] += res[R_E_P]
    m_energy_j[1] += res[R_E_D]
    m_usd[0] += pairwise_sum(usd_g, 0, nb)
    m_usd[1] += pairwise_sum(usd_g, nb, G)
    m_energy_busy_j[0] += res[R_EB_P]
    m_energy_busy_j[1] += res[R_EB_D]
    m_usd_busy[0] += res[R_USDB_P]
    m_usd_busy[1] += res[R_USDB_D]
    m_tokens[0] += res[R_TOKENS_P]
    m_tokens[1] += res[R_TOKENS_D]
    for p in range(2):
        for g in range(nb):
            q = q_pre[g] if p == 0 else pairwise_sum(q_req[p, g], 0, q_req.shape[2])
            i = p * nb + g
            pq = peak_queue[i]
            if not (pq >= q or pq != pq):  # np.maximum: the first unless the second is larger (NaN kept)
                peak_queue[i] = q


@njit(cache=True)
def carry_rates(rate, miss_b, n_b):  # pragma: no cover - compiled
    """``rate[n_b > 0] = miss_b[n_b > 0] / n_b[n_b > 0]`` (the other buckets keep their rate)."""
    for b in range(rate.size):
        if n_b[b] > 0.0:
            rate[b] = miss_b[b] / n_b[b]


@njit(cache=True)
def _unit(x):  # pragma: no cover - compiled
    """``np.clip(x, 0.0, 1.0)`` for a finite float."""
    return min(max(x, 0.0), 1.0)


@njit(cache=True)
def fleet_sums(live, v_group, v_cfg, v_ready, v_gone, t0, t1, static_w, usd_s_cfg, maxb, chips, tps, pw,
               G):  # pragma: no cover - compiled
    """The fleet aggregates of :func:`~servegym.envs.npu.sim.fluid_fleet._compute` over [t0, t1) for the vPods
    ``live`` (group, configuration, ready and deletion times; per-configuration static W ``static_w``, USD/s
    ``usd_s_cfg``, max batch ``maxb``, chips ``chips``; step tables ``tps`` / ``pw``, configuration x bucket x
    level), each per-group sum added in vPod order from 0.0 as ``np.bincount`` adds its weights: the live vPods'
    group, configuration, ready time, not-deleting flag and per-level tokens/s relative to their best level;
    per group (``G``) ready vPod-equivalents, static W of the ready / held vPods, USD/s of the held / ready ones,
    batch slots, chips held, the wait for the first ready vPod (s) and the dominant configuration (the first
    vPod of the group with the largest ready share, a serving one ahead at a tie; -1 without a vPod); per
    prefill group and level the capacity (best-level vPod-equivalents) and busy power (W)."""
    n = 0
    for i in range(live.size):
        if live[i]:
            n += 1
    nb = G // 2
    J = tps.shape[2]
    T = t1 - t0
    vg = np.empty(n, dtype=np.int64)
    vc = np.empty(n, dtype=np.int64)
    vr = np.empty(n)
    serving = np.empty(n, dtype=np.bool_)
    tps_v = np.empty((n, J))
    n_ready = np.zeros(G)
    psr = np.zeros(G)
    psa = np.zeros(G)
    usd_s = np.zeros(G)
    usd_ready = np.zeros(G)
    slots = np.zeros(G)
    chip_s = np.zeros(G)
    avail = np.full(G, np.inf)
    dom = np.full(G, -1, dtype=np.int64)
    best = np.empty(G)
    cap = np.zeros((nb, J))
    pbusy = np.zeros((nb, J))
    k = 0
    for i in range(live.size):
        if not live[i]:
            continue
        g = v_group[i]
        c = v_cfg[i]
        r = v_ready[i]
        gone = v_gone[i]
        vg[k] = g
        vc[k] = c
        vr[k] = r
        srv = gone == np.inf
        serving[k] = srv
        rf = _unit((t1 - max(r, t0)) / T) if srv else 0.0
        hf = _unit((min(gone, t1) - t0) / T)
        n_ready[g] += rf
        psr[g] += rf * static_w[c]
        psa[g] += hf * static_w[c]
        usd_s[g] += hf * usd_s_cfg[c]
        usd_ready[g] += rf * usd_s_cfg[c]
        slots[g] += rf * maxb[c]
        chip_s[g] += hf * chips[c]
        if srv:
            avail[g] = min(avail[g], max(r, t0))
        score = rf + 1e-3 * (1.0 if srv else 0.0)
        if dom[g] < 0 or score > best[g]:
            dom[g] = c
            best[g] = score
        b = g % nb
        top = max(tps[c, b, J - 1], 1e-300)
        for j in range(J):
            tps_v[k, j] = tps[c, b, j] / top
        if g < nb:
            for j in range(J):
                cap[g, j] += rf * tps_v[k, j]
                pbusy[g, j] += rf * pw[c, b, j]
        k += 1
    unavail = np.empty(G)
    for g in range(G):
        a = avail[g] if avail[g] < np.inf else t1
        unavail[g] = min(max(a - t0, 0.0), T)
    return vg, vc, vr, serving, tps_v, n_ready, psr, psa, usd_s, usd_ready, slots, chip_s, unavail, dom, cap, pbusy


@njit(cache=True)
def fleet_view_sums(live, v_group, v_cfg, v_ready, v_gone, t0, t1, static_w, usd_s_cfg, maxb, chips, tps, pw, G,
                    dom_targets, fallback):  # pragma: no cover - compiled
    """:func:`fleet_sums` with fewer arrays to hand back to Python (each returned array costs a boxing): the eight
    per-group sums as the rows of one (8, ``G``) array (ready vPod-equivalents, static W of the ready / held vPods,
    USD/s of the held / ready ones, batch slots, chips held, the wait for the first ready vPod), and the dominant
    configuration of a group without a vPod taken from ``dom_targets`` (its target's, -1 without one), else from
    ``fallback`` (the bucket's best fit), as :func:`~servegym.envs.npu.sim.fluid_fleet._compute` did with
    ``np.where``. Returns the live vPods' group, configuration, ready time, not-deleting flag and per-level tokens/s,
    the rows, the dominant configurations, and the prefill capacity and busy power per level."""
    (vg, vc, vr, serving, tps_v, n_ready, psr, psa, usd_s, usd_ready, slots, chip_s, unavail, dom, cap,
     pbusy) = fleet_sums(live, v_group, v_cfg, v_ready, v_gone, t0, t1, static_w, usd_s_cfg, maxb, chips, tps, pw, G)
    rows = np.empty((8, G))
    for g in range(G):
        rows[0, g] = n_ready[g]
        rows[1, g] = psr[g]
        rows[2, g] = psa[g]
        rows[3, g] = usd_s[g]
        rows[4, g] = usd_ready[g]
        rows[5, g] = slots[g]
        rows[6, g] = chip_s[g]
        rows[7, g] = unavail[g]
        if dom[g] < 0:
            dom[g] = dom_targets[g]
            if dom[g] < 0:
                dom[g] = fallback[g]
    return vg, vc, vr, serving, tps_v, rows, dom, cap, pbusy


@njit(cache=True)
def ready_count(v_ready, now):  # pragma: no cover - compiled
    """``np.count_nonzero(v_ready <= now)``."""
    n = 0
    for i in range(v_ready.size):
        if v_ready[i] <= now:
            n += 1
    return n


@njit(cache=True)
def ready_groups(v_group, v_ready, v_gone, now, G):  # pragma: no cover - compiled
    """``np.unique(v_group[(v_gone == inf) & (v_ready <= now)])`` for groups in [0, ``G``)."""
    have = np.zeros(G, dtype=np.bool_)
    n = 0
    for i in range(v_group.size):
        if v_gone[i] == np.inf and v_ready[i] <= now and not have[v_group[i]]:
            have[v_group[i]] = True
            n += 1
    out = np.empty(n, dtype=np.int64)
    k = 0
    for g in range(G):
        if have[g]:
            out[k] = g
            k += 1
    return out


@njit(cache=True)
def orphans(rows, act, keep):  # pragma: no cover - compiled
    """Groups (rows of ``rows``, groups x buckets, C-contiguous) outside the active ones ``act`` and not in ``keep``
    (bool per group) whose row sum (numpy's pairwise order) is positive, and whether there is any."""
    nb = rows.shape[0]
    out = np.zeros(nb, dtype=np.bool_)
    for g in range(nb):
        out[g] = not keep[g]
    for a in act:
        out[a] = False
    anyone = False
    n = rows.shape[1]
    # an element is != 0.0 (NaN included, -0.0 not) exactly when its bits less the sign bit are not all zero: an
    # integer OR over the row, which the compiler vectorizes (a compare per element with an early exit does not)
    bits = rows.view(np.uint64)
    one = np.uint64(1)
    for g in range(nb):
        if out[g]:
            # an all-zero row sums to 0.0: summed only when it holds something (most candidate rows are groups that
            # never served, and a decode row holds every cohort of every bucket)
            acc = np.uint64(0)
            for k in range(n):
                acc |= bits[g, k] << one
            out[g] = acc != 0 and pairwise_sum(rows[g], 0, n) > 0.0
            anyone = anyone or out[g]
    return out, anyone


@njit(cache=True)
def queue_orphans(q_req, act0, act1):  # pragma: no cover - compiled
    """:func:`orphans` of both phases' queued requests (``q_req[p]``, groups x buckets) outside their routable groups
    ``act0`` / ``act1`` (no group kept), in one call: per phase the mask and whether there is any (none for a phase
    without a routable group)."""
    nb = q_req.shape[1]
    none = np.zeros(nb, dtype=np.bool_)
    o0, a0 = orphans(q_req[0], act0, none) if act0.size else (none.copy(), False)
    o1, a1 = orphans(q_req[1], act1, none) if act1.size else (none.copy(), False)
    return o0, a0, o1, a1


@njit(cache=True)
def in_service_orphans(d_rows, act, is_ready, d_live, q_seg):  # pragma: no cover - compiled
    """The decode groups (``d_rows``: jobs in service per group, its cohorts as one row) with jobs in service
    outside the routable ones ``act`` and without a ready vPod (``is_ready``, 96 groups), scanning only the groups
    ``d_live`` marks (:func:`orphans`; the mask and whether any), and ``d_live`` cleared (in place) for the
    non-routable groups so scanned or skipped whose queued decode jobs ``q_seg`` are all zero (``q_seg.any(axis=1)``
    false): what :meth:`~servegym.envs.npu.sim.fluid.FluidCluster._reroute_in_service` read as numpy calls."""
    nb = d_live.size
    keep = np.empty(nb, dtype=np.bool_)
    for g in range(nb):
        keep[g] = is_ready[nb + g] or not d_live[g]
    out, anyone = orphans(d_rows, act, keep)
    emptied = np.empty(nb, dtype=np.bool_)
    for g in range(nb):
        emptied[g] = not keep[g]
    for a in act:
        emptied[a] = False
    for g in range(nb):
        if emptied[g]:
            nz = False
            for b in range(q_seg.shape[1]):
                if q_seg[g, b] != 0.0:
                    nz = True
                    break
            if not nz:
                d_live[g] = False
    return out, anyone


@njit(cache=True)
def alive_keys(v_group, v_cfg, v_gone, ncfg):  # pragma: no cover - compiled
    """The alive (``v_gone`` inf) vPods counted per key group x ``ncfg`` + configuration: the keys in order of first
    appearance in index order and their counts (``collections.Counter`` of the keys, as one pass)."""
    n = v_group.size
    keys = np.empty(n, dtype=np.int64)
    cnts = np.zeros(n, dtype=np.int64)
    m = 0
    for i in range(n):
        if v_gone[i] == np.inf:
            k = v_group[i] * ncfg + v_cfg[i]
            j = 0
            while j < m and keys[j] != k:
                j += 1
            if j == m:
                keys[m] = k
                m += 1
            cnts[j] += 1
    return keys[:m], cnts[:m]


@njit(cache=True)
def fleet_counts(v_group, v_cfg, v_ready, v_gone, now, maxb, G):  # pragma: no cover - compiled
    """Per group (``G``) the ready and the alive (not deleting) vPods and the ready ones' batch slots (``maxb`` per
    configuration), each added in vPod order from 0.0 as ``np.bincount`` adds (its counts are whole numbers, exact
    as floats): :meth:`~servegym.envs.npu.sim.cluster.NPUCluster._fleet_counts` in one pass."""
    ready = np.zeros(G)
    alive = np.zeros(G)
    slots = np.zeros(G)
    for i in range(v_group.size):
        if v_gone[i] == np.inf:
            g = v_group[i]
            alive[g] += 1.0
            if v_ready[i] <= now:
                ready[g] += 1.0
                slots[g] += maxb[v_cfg[i]]
    return ready, alive, slots


@njit(cache=True)
def held_by_version(v_cfg, v_gone, now, cfg_ver, cfg_chips, nver):  # pragma: no cover - compiled
    """Chips held (``v_gone > now``) per chip version (``nver``), added in vPod order from 0.0 as ``np.bincount``
    adds its weights: :meth:`~servegym.envs.npu.sim.cluster.NPUCluster.held_chips`'s sums in one pass."""
    out = np.zeros(nver)
    for i in range(v_cfg.size):
        if v_gone[i] > now:
            c = v_cfg[i]
            out[cfg_ver[c]] += cfg_chips[c]
    return out


@njit(cache=True)
def count_after(x, t):  # pragma: no cover - compiled
    """``np.count_nonzero(x > t)``."""
    n = 0
    for i in range(x.size):
        if x[i] > t:
            n += 1
    return n


@njit(cache=True)
def bin_capacity(vg, serving, vr, tps_v, k_start, k_len, nb):  # pragma: no cover - compiled
    """Per prefill group (``nb``), profile bin of the interval (``k_start`` / ``k_len``, s) and batch level: the
    capacity of its serving vPods (``vg`` group, ``vr`` ready time s, ``tps_v`` tokens/s per level), each for the
    share of the bin it is ready. The numpy form, ``np.add.at(cap3, vg[pre], clip((k_start + k_len -
    maximum(vr, k_start)) / k_len, 0, 1)[:, :, None] * tps_v[pre, None, :])``, in one pass: the same products added
    to each cell in the same (vPod) order, so the same values bit for bit."""
    nk = k_len.size
    L = tps_v.shape[1]
    cap3 = np.zeros((nb, nk, L))
    for v in range(vg.size):
        g = vg[v]
        if g >= nb or not serving[v]:
            continue
        for k in range(nk):
            a, b = vr[v], k_start[k]
            m = a if (a >= b or a != a) else b  # np.maximum: NaN kept
            x = (b + k_len[k] - m) / k_len[k]
            if x == x:  # np.clip's bounds, NaN kept
                x = x if x > 0.0 else 0.0
                x = x if x < 1.0 else 1.0
            for j in range(L):
                cap3[g, k, j] += x * tps_v[v, j]
    return cap3
