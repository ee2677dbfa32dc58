"""Compiled serving step of the fluid NPU model (:class:`~servegym.envs.npu.sim.fluid.FluidCluster`).

The fluid's serving step is a few hundred small array operations per interval over 48 groups x 48 buckets x
batch levels; as numpy calls each costs microseconds of dispatch, more than its arithmetic, so the step
is written once here as loops and compiled with numba (``cache=True``, as the geo engine's kernels: the
first import compiles once, later processes load the cached machine code). Without numba the same
functions run as plain Python (correct, much slower). The model is the one :mod:`~servegym.envs.npu.sim.fluid`
documents (prefill token fluid, TTFT misses per profile bin, decode by Little's law with the jobs in service
carried across intervals, miss shares from the output-length CDF, requests past their SLO); the caller passes
the fleet view (:mod:`~servegym.envs.npu.sim.fluid_fleet`), the interval's arrivals and the queues, and the
kernel updates the queues, the jobs in service and per-group accumulators in place. Sums run in loop order, so
the figures equal the earlier numpy formulation's to rounding (relative 1e-12; tested), apart from the changes
of the model made since (the recorded figures in tests/test_npu_fluid_speed.py name them).

Times are seconds, energies joules, power watts, tokens and requests counts (fractional: a fluid).
"""

from __future__ import annotations

import math

import numpy as np

try:
    from numba import njit

    COMPILED = True
except ImportError:  # pragma: no cover - numba is a core dependency; this keeps a pure-Python fallback
    COMPILED = False

    def njit(*args, **kwargs):  # type: ignore[no-redef]
        if args and callable(args[0]):
            return args[0]
        return lambda f: f


from servegym.envs.npu.sim.fluid_cohorts import _any_positive, _level_index, decode_in_service
from servegym.envs.npu.sim.fluid_tail import bin_tail, residual_share  # TTFT tail and its bound (ttft_misses)

# slots of the kernel's scalar results (``res``)
(R_MISS_P, R_SERVED_P, R_TOKENS_P, R_TOKENS_D, R_FIN, R_MISS_D, R_LATE_P, R_LATE_D, R_E_P, R_E_D, R_EB_P, R_EB_D,
 R_USDB_P, R_USDB_D) = range(14)
N_RES = 14


@njit(cache=True)
def _osl_share(cdf, b, x):  # pragma: no cover - compiled
    """Share of total-length bucket ``b``'s requests with fewer than ``x`` output tokens
    (:func:`~servegym.envs.npu.sim.fluid_profile.osl_share_below` for one value)."""
    if x <= 1.0:
        return 0.0
    g = cdf.shape[1]
    top = 2.0 ** ((g - 1) / 8.0)
    lx = math.log2(min(x, top)) * 8.0
    lo = math.floor(lx)
    hi = min(lo + 1, g - 1)
    a = cdf[b, lo]
    return a + (cdf[b, hi] - a) * (lx - lo)


@njit(cache=True)
def _cap(cap, cap3, steady, g, k, j):  # pragma: no cover - compiled
    return cap[g, j] if steady else cap3[g, k, j]


@njit(cache=True)
def _recent(nkg, k_len, g, k, dt):  # pragma: no cover - compiled
    """Jobs of group ``g`` arriving in the last ``dt`` s up to bin ``k``'s end (``nkg``: per bin and group, evenly
    within the bin)."""
    left = dt
    n = 0.0
    i = k
    while i >= 0 and left > 0.0:
        w = min(left, k_len[i])
        if k_len[i] > 0.0:
            n += nkg[i, g] * w / k_len[i]
        left -= w
        i -= 1
    return n


@njit(cache=True)
def ttft_misses(T, dt, steady, k_len, k_pre, q0p, gp, dom, cap, cap3, tps_best, lat, slo_p, isl_m1,
                isl_m2, finite, miss_b, check_s, q_job, q0r, n_job, q_obs):  # pragma: no cover - compiled
    """Expected TTFT misses among the interval's prefill arrivals (the fluid module's model): per profile bin,
    the wait ahead (the job queue below), the share of the bin's arrivals that find more than their slack ahead,
    and, in bins where the largest level keeps up, the M/G/1 tail of the wait at the operating level given the
    bin's realized work (:func:`bin_tail`); at least the share that waits out the rest of a longer job in service
    (:func:`residual_share`, a lower bound the queue's diffusion misses where one prompt holds the server for
    seconds). Also writes the misses per input bucket into ``miss_b`` (48).

    The job queue is the request level's (serving._start_prefill): a group's operating level follows its token
    fluid (backlog + arrivals, a Lindley recursion at the largest level's capacity), but each job's service time is
    its work over the group's capacity at the level of the sub-step it arrives in, or, for a job still waiting at a
    ``check_s`` chunk's start, at that chunk's first level; the server works through those service times FCFS, one
    second per second. Under sustained overload the two part: jobs arriving while the token fluid has caught up get
    the low level's long service times and keep them when the level rises, so the queue drains below the largest
    level's rate (Llama-3-70B LVEval NeuScale, group 37 at 4,980 s: 111 vPod-s of token backlog, 216 of queued job
    work). So per group the queue ``q`` (s) starts as the waiting work ``q_job`` (best-level vPod-s, at least the
    token backlog) over the first bin's capacity, each bin adds its arrivals' work over its level's capacity and
    drains its length; at a chunk's start the waiting work is repriced at that bin's level. Its token content is
    kept for the repricing (FCFS: the bin's own arrivals leave last, the older part at its mean price) and written
    back to ``q_job`` (48, updated in place) for the next interval. ``check_s``: the request level's chunk (s).

    The same FCFS bookkeeping carries the waiting jobs' count ``n_job`` (48, updated in place; at least the token
    backlog's requests ``q0r``, 48 groups x 48 buckets, at the interval's start): the jobs left are the bin's
    arrivals and the newest part of the older queue, in proportion to their work. It is the prefill queue the
    policies observe: the request level's queue at a chunk's end is the jobs not started yet less those that arrived
    in its last sub-step (``dt``; serving._queue: the fluid serves a sub-step's arrivals together), FCFS the newest,
    so ``q_obs[0]`` (48) is the count at the interval's end less the last ``dt`` s of arrivals and ``q_obs[1]`` its
    largest value at the ``check_s`` chunk ends within the interval (the request level's peak queue is taken there).
    The token fluid's queued requests, which the observation read before, only hold what exceeds the largest level's
    capacity, so a queue of jobs priced at a low level went unseen by the emergency scale-out: on Llama-3-70B LVEval
    NeuScale (2023) the SLO row went from -1.93 to -0.99 pp.

    Carrying the queue is most of the effect: the serving step's token fluid (:func:`serve`) serves the interval's
    work at one level over the whole interval and keeps only what exceeds its capacity, so a backlog built in an
    interval's last bins was gone at the next interval's start, while the request level's queue runs on across
    decision points. On the cross-check's LVEval NeuScale rows (2023) the fluid went from -3.66 / -1.78 pp (70B /
    DeepSeek) to -3.40 / -1.24 with the queue priced at the capacity jobs arrive at (vPods turning ready within an
    interval) and to -1.89 / +0.19 with it also carried; pricing at the level rather than the largest one changes
    nothing there (a long prompt's prefill runs at the same tokens/s at every batch level)."""
    nb = gp.size
    nk = k_len.size
    J = cap.shape[1]
    rt = np.empty(nb)
    for b in range(nb):
        rt[b] = tps_best[gp[b], b]
    # per bin and group: arriving work d and what the largest level serves in the bin (cmax)
    d = np.zeros((nk, nb))
    nkg = np.zeros((nk, nb))  # arriving jobs
    cmax = np.empty((nk, nb))
    arrives = np.zeros(nb, dtype=np.bool_)  # any job or token arriving at the group within the interval
    for k in range(nk):
        for b in range(nb):
            d[k, gp[b]] += k_pre[k, 1, b] / rt[b]
            nkg[k, gp[b]] += k_pre[k, 0, b]
            if k_pre[k, 0, b] != 0.0 or k_pre[k, 1, b] != 0.0:
                arrives[gp[b]] = True
        for g in range(nb):
            cmax[k, g] = _cap(cap, cap3, steady, g, k, J - 1) * k_len[k]
    # per bin and group: the token fluid's backlog at the bin's start (Lindley: B_k = S_k - min(-B_0, S_1..S_k), S
    # the cumulative arrivals - capacity), which sets the operating level, its capacity and the utilization
    jk = np.empty((nk, nb), dtype=np.int64)
    cj = np.empty((nk, nb))
    rho = np.empty((nk, nb))
    # the job queue (seconds of the group's server) at each bin's start and its change over the bin while busy
    qs = np.empty((nk, nb))
    qg = np.empty((nk, nb))
    for g in range(nb):
        b0 = 0.0
        for b in range(nb):
            if q0p[g, b] != 0.0 or not finite:  # an empty cell adds exactly 0 (finite tps_best >= 1e-12)
                b0 += q0p[g, b] / tps_best[g, b]
        s = 0.0
        low = -b0
        pv = b0
        # waiting job work in best-level vPod-s: at least the token fluid's backlog (its tokens are not served yet)
        wt = max(q_job[g], b0)
        n0 = 0.0
        for b in range(nb):
            n0 += q0r[g, b]
        if finite and not arrives[g] and b0 == 0.0 and n0 == 0.0 and q_job[g] == 0.0 and n_job[g] == 0.0:
            # an idle group (no work waiting, none arriving; most groups): the recursion below leaves its queue at
            # +0 (every bin adds +0 or, with capacity, sets 0), so it observes 0; its per-bin tables are read only
            # for bins with arrivals (none here). Taken with finite tables only, as the skipped cells of serve, so
            # finite=False runs every step in full (tests/test_npu_fluid_speed.py compares the two bit for bit)
            q_obs[0, g] = 0.0
            q_obs[1, g] = 0.0
            q_job[g] = 0.0
            n_job[g] = 0.0
            continue
        nw = max(n_job[g], n0)  # waiting jobs: at least the token backlog's requests
        q = -1.0  # < 0: to be priced at the next bin with capacity
        off = 0.0
        q_obs[1, g] = 0.0
        for k in range(nk):
            dem = pv + d[k, g]
            jj = J - 1
            for j in range(J):
                if _cap(cap, cap3, steady, g, k, j) * k_len[k] >= dem - 1e-9:
                    jj = j
                    break
            jk[k, g] = jj
            c = _cap(cap, cap3, steady, g, k, jj)
            cj[k, g] = c
            rho[k, g] = min(max(dem / max(c * k_len[k], 1e-300), 0.0), 0.999)
            s += d[k, g] - cmax[k, g]
            low = min(low, s)
            pv = s - low
            if c <= 0.0:  # no ready vPod: nothing starts (every arrival misses); the work waits to be priced
                qs[k, g] = 0.0
                qg[k, g] = 0.0
                wt += d[k, g]
                nw += nkg[k, g]
                q = -1.0
            else:
                if q < 0.0 or abs(off - check_s * round(off / check_s)) < 1e-6:
                    q = wt / c  # a chunk's start: the waiting jobs' service times at the chunk's first level
                qs[k, g] = q
                add = d[k, g] / c  # the bin's arrivals at the level they arrive in
                qg[k, g] = add - k_len[k]
                qn = q + add - k_len[k]
                if qn <= 0.0:
                    wt = 0.0
                    nw = 0.0
                    q = 0.0
                else:
                    # FCFS: the oldest work leaves first; what is left is this bin's arrivals (priced at c) and the
                    # newest part of the older queue (at its mean price); its jobs in proportion
                    if qn <= add:
                        wt = qn * c
                        nw = nkg[k, g] * qn / add
                    else:
                        wt = wt * (qn - add) / q + d[k, g]
                        nw = nw * (qn - add) / q + nkg[k, g]
                    q = qn
            off += k_len[k]
            end = k == nk - 1
            if end or abs(off - check_s * round(off / check_s)) < 1e-6:  # a chunk's end: the observed queue
                qo = max(nw - _recent(nkg, k_len, g, k, dt), 0.0)
                q_obs[1, g] = max(q_obs[1, g], qo)
                if end:
                    q_obs[0, g] = qo
        q_job[g] = wt
        n_job[g] = nw
    # the service-time moments of each group's arrivals in the bin (in best-level vPod-seconds, before dividing by
    # the operating capacity): a job's FCFS wait is set by the work of every job ahead of it, the group's whole
    # length mix, not by jobs of its own length bucket (a 128-token prompt waits behind 4K-token prompts)
    mix = np.zeros((nk, nb, 3))
    smax = np.zeros((nk, nb))  # the longest job's mean work among the bin's arrivals (residual_share)
    for k in range(nk):
        for b in range(nb):
            n = k_pre[k, 0, b]
            if n > 0.0:
                g = gp[b]
                mix[k, g, 0] += n
                mix[k, g, 1] += n * (isl_m1[b] / rt[b])
                mix[k, g, 2] += n * (isl_m2[b] / rt[b] ** 2)
                smax[k, g] = max(smax[k, g], isl_m1[b] / rt[b])
    miss = 0.0
    for b in range(nb):
        miss_b[b] = 0.0
    for k in range(nk):
        for b in range(nb):
            n = k_pre[k, 0, b]
            if n == 0.0:
                continue
            g = gp[b]
            slack = slo_p[b] - lat[dom[g], b, jk[k, g]]
            if slack < 0.0:
                miss += n
                miss_b[b] += n
                continue
            c_top = _cap(cap, cap3, steady, g, k, J - 1)
            grow = d[k, g] - cmax[k, g]
            qv = qs[k, g]
            gq = qg[k, g]
            # a job waits for the work ahead of it, not its own. The request level's wait of job n is the work of the
            # jobs before it, max_k (a_k + sum_{k<=i<n} s_i) - a_n; the fluid's backlog at an arrival instant is the
            # expected work arrived before it (Poisson arrivals see time averages), which does not hold the job's own
            # work, so the slack is compared with the backlog as it is (subtracting one mean job, as before, made a
            # long-prompt group's waits one job too short: LVEval NeuScale rows +0.15..+0.62 pp closer)
            if c_top <= 0.0:
                late = 1.0
            elif gq > 0.0:
                late = min(max(1.0 - (slack - qv) / gq, 0.0), 1.0)
            elif gq < 0.0:
                late = min(max((qv - slack) / -gq, 0.0), 1.0)
            else:
                late = 1.0 if qv > slack else 0.0
            # within the bin: FCFS wait of an M/G/1 server at the operating level (Pollaczek-Khinchine mean over
            # the group's mix), at most half the sub-step's work where the level sets the capacity (the request level
            # sizes each sub-step's level on its arrivals, so a busier sub-step gets a faster server; not where
            # every level has the same capacity, below). Only where the largest level keeps up (no backlog at the bin's start, arrivals below
            # its capacity): there the server empties between busy periods and the stationary wait is the queue.
            # Where it does not, the request level's server never empties within the bin, so a job's wait is the
            # work ahead of it, which the job queue (``late``) already counts; adding the stationary tail on
            # top counted that queue twice (+1.2 pp on the Azure rows of the cross-check, where all of the request
            # level's TTFT misses are waits and 95 % of them fall in such bins: Llama-3-8B, azure-code, Base, 2 h).
            # The tail is the one given the bin's realized work (:func:`bin_tail`), which ``rho`` is built from
            cjs = max(cj[k, g], 1e-12)
            s1 = mix[k, g, 1] / mix[k, g, 0] / cjs
            s2 = mix[k, g, 2] / mix[k, g, 0] / cjs ** 2
            r = rho[k, g]
            wq = r * s2 / max(2.0 * s1 * (1.0 - r), 1e-300)
            # the sub-step bound stands for that speed-up, and so does counting no tail beyond a sub-step's work
            # (``slack < r dt``). A group whose capacity is the same at every level (long prompts run at the same
            # tokens/s at every batch size: LVEval's long-context groups) has neither: the request level's server
            # there is a fixed-rate FCFS queue of the jobs' own service times, a short prompt waits out the rest of a
            # long one ahead of it, and the tail holds uncapped at every slack. Measured on DeepSeek-V3 LVEval NeuScale
            # (2024), its last group (fixed capacity, no backlog): request level 218 TTFT misses; the bin tail from the
            # request level's own per-bin load and job sizes 191 with the slack cut-off, 216 without it (the P-K mean's
            # bound: 160 with it); the row went -1.62 -> -1.06 pp without the bound and -1.36 -> -1.07 pp without the
            # cut-off there
            fixed = _cap(cap, cap3, steady, g, k, 0) >= c_top * (1.0 - 1e-9)
            if not fixed:
                wq = min(wq, 0.5 * r * dt)
            # Where the level sets the capacity the request level also re-sizes its server every sub-step on that
            # sub-step's own work (backlog + arrivals within the largest level), so a sub-step that drew more work runs
            # faster and the excess does not carry into the next one: the work is pinned at the sub-step's ends, and
            # the tail is the one given the realized work over a sub-step, not over the whole bin. Measured on
            # DeepSeek-V3 azure-conv NeuScale (2023, short-prompt group at levels of 1.15 / 1.60 / 2.0 vPods, bins at
            # utilization 0.82, slack 0.68 s): request level 0.42 % TTFT misses (a job-by-job replay of its FCFS server
            # with that per-sub-step sizing gives 0.42 %), the tail over the 10-s bin 2.57 %, over the sub-step 0.96 %;
            # at one fixed level 22.6 %. A fixed-rate group has no such re-sizing and keeps the bin
            tail = 0.0
            if wq > 0.0 and (fixed or slack < r * dt) and qv <= 0.0 and grow <= 0.0:
                tail = bin_tail(slack, r, s1, s2, wq, k_len[k] if fixed else min(k_len[k], dt))
            p = late + (1.0 - late) * tail
            if c_top > 0.0 and smax[k, g] > slack * cjs:
                p = max(p, residual_share(k_pre, gp, isl_m1, rt, k, g, cjs, slack, k_len[k]))
            miss += n * p
            miss_b[b] += n * p
    return miss


@njit(cache=True)
def serve(T, dt, steady, levels, cnt, tok, k_len, k_pre, q_tok, q_req, gp, n_ready, psr, psa, usd_ready, slots,
          unavail, dom, cap, cap3, pbusy, tps_best, latd, f_tok, f_req, f_seg, q_seg, lat, pw, pwd, tps, cfg_levels, slo_p,
          slo_d, isl_m1, isl_m2, osl_cdf, finite, d_tok, d_req, d_sp, energy, e_busy, tokens, batch_tok, n_act, util,
          res, miss_pb, md_b, fin_b, check_s, q_job, n_job, q_obs):  # pragma: no cover
    """One interval of ``T`` seconds of the fluid serving step (module docstring). Updates ``q_tok`` /
    ``q_req`` (2 phases x 48 groups x 48 request buckets), writes per group (96) ``energy``, ``e_busy``
    (request-attributed energy), ``tokens`` and ``batch_tok`` (tokens made x batch) of the interval, the
    jobs in service ``d_tok`` / ``d_req`` (48 groups x 48 buckets: output tokens left and jobs, updated), the
    decode jobs in service ``n_act`` (48) and the prefill busy share ``util`` (96), and the scalars ``res``
    (the ``R_*`` slots), and per request bucket the TTFT misses among the interval's arrivals ``miss_pb`` (by input
    bucket), the requests finishing their decode ``fin_b`` and their TPOT misses ``md_b`` (by total bucket), from
    which the caller pairs the two misses per (input, total) bucket cell. The prefill job queue's waiting work
    ``q_job`` and jobs ``n_job`` (48 each, updated) and the prefill queue the policies observe ``q_obs`` (2 x 48,
    written) are :func:`ttft_misses`'. ``pw`` / ``pwd``: the decode steps' power (W) and its part above the vPods'
    idle floor (the floor is ``psr`` / ``psa``, charged for the whole ready / held time). ``finite``: the step tables ``lat``,
    ``tps`` and ``pw / tps`` are finite everywhere, so a
    (group, bucket) cell with no queued tokens or requests adds exactly 0 to every sum and is skipped (most
    cells: a group serves a few buckets); with non-finite tables every cell is summed, as written."""
    nb = gp.size
    J = cap.shape[1]
    for i in range(res.size):
        res[i] = 0.0
    # ---- prefill: token fluid per group
    q0p = q_tok[0].copy()
    q0r = q_req[0].copy()
    for b in range(nb):
        q_tok[0, gp[b], b] += tok[0, b]
        q_req[0, gp[b], b] += cnt[0, b]
    for g in range(nb):
        W = 0.0
        for b in range(nb):
            if q_tok[0, g, b] != 0.0 or not finite:  # an empty cell adds exactly 0 (finite tps_best >= 1e-12)
                W += q_tok[0, g, b] / tps_best[g, b]
        need = W / T - 1e-9
        jp = J - 1
        for j in range(J):
            if cap[g, j] >= need:
                jp = j
                break
        servable = cap[g, jp] * T
        phi = min(1.0, servable / max(W, 1e-300)) if W > 0.0 else 1.0
        busy = W * phi / max(servable, 1e-300) if servable > 0.0 else 0.0
        eb = T * busy * pbusy[g, jp]
        e_busy[g] = eb
        energy[g] = eb + T * ((1.0 - busy) * psr[g] + psa[g] - psr[g])
        st = 0.0
        for b in range(nb):
            if finite and q_tok[0, g, b] == 0.0 and q_req[0, g, b] == 0.0:  # serves 0 (phi is finite)
                continue
            s_tok = phi * q_tok[0, g, b]
            s_req = phi * q_req[0, g, b]
            q_tok[0, g, b] -= s_tok
            q_req[0, g, b] -= s_req
            st += s_tok
            res[R_SERVED_P] += s_req
        tokens[g] = st
        batch_tok[g] = st * cfg_levels[dom[g], jp]
        res[R_TOKENS_P] += st
        res[R_E_P] += energy[g]
        res[R_EB_P] += eb
        res[R_USDB_P] += T * busy * usd_ready[g]
        util[g] = busy if n_ready[g] > 0.0 else 0.0
        util[nb + g] = 0.0
    res[R_MISS_P] = ttft_misses(T, dt, steady, k_len, k_pre, q0p, gp, dom, cap, cap3, tps_best, lat, slo_p, isl_m1,
                                isl_m2, finite, miss_pb, check_s, q_job, q0r, n_job, q_obs)
    # ---- decode: Little's law per group
    for b in range(nb):
        md_b[b] = 0.0
        fin_b[b] = 0.0
    nj = np.empty(J)
    for g in range(nb):
        G = nb + g
        dg = dom[G]
        q0 = 0.0
        # an idle group (finite tables, nothing queued, no jobs in service; most groups: a fleet serves a few) skips
        # the loops over its cells below, each of which would add exact zeros or skip the cell: the scalars it sets
        # are the ones those loops leave (dr = +0 as a sum from +0, sd = q1 = md = fin = 0 and decode_in_service's
        # 0, 0, 0, 1; its q_seg -= 0 is a no-op, q_seg being >= +0: set to +0, raised by products of non-negative
        # figures, lowered by at most itself)
        idle = finite
        for b in range(nb):
            q0 += q_tok[1, g, b]
            q_tok[1, g, b] += f_tok[b, g] * tok[1, b]
            q_req[1, g, b] += f_req[b, g] * cnt[1, b]
            q_seg[g, b] += f_seg[b, g] * cnt[1, b]
            if q_tok[1, g, b] != 0.0 or q_req[1, g, b] != 0.0 or q_seg[g, b] != 0.0:
                idle = False
        nr = n_ready[G]
        if idle and nr > 0.0:  # decode_in_service serves the jobs in service only with a ready vPod
            idle = not _any_positive(d_req, g)
        dr = 0.0
        for j in range(J):
            nj[j] = 0.0
        if not idle:
            for b in range(nb):
                dr += q_req[1, g, b]
                qt = q_tok[1, g, b]
                if qt != 0.0 or not finite:
                    for j in range(J):
                        nj[j] += qt * latd[g, b, j]
        for j in range(J):
            nj[j] /= T
        # the request level batches every job active at some point of a sub-step: jobs in service + the
        # sub-step's arrivals (a job shorter than a sub-step still takes a batch slot in it)
        arr_sub = dr / T * dt
        js = 0
        for j in range(J):
            bper = (nj[j] + arr_sub) / max(nr, 1e-12)
            if _level_index(levels, math.ceil(max(bper, 1.0) - 1e-9)) <= j:
                js = j
                break
        slot_n = math.floor(slots[G] + 1e-9)
        # admission: slot-seconds of work at the single-request TPOT (as the request level admits jobs)
        need0 = nj[0]
        if nr > 0.0:
            phid = min(1.0, slot_n / max(need0, 1e-300)) if need0 > 0.0 else 1.0
        else:
            phid = 0.0 if need0 > 0.0 else 1.0
        na = min((nj[js] + arr_sub) * phid, slot_n)
        n_act[g] = na
        bb = max(1.0, na / max(nr, 1e-12))
        jd = _level_index(levels, math.ceil(bb - 1e-9))
        sd = 0.0
        q1 = 0.0
        served = False
        for b in range(0 if idle else nb):
            if finite and q_tok[1, g, b] == 0.0 and q_req[1, g, b] == 0.0:
                continue
            s = phid * q_tok[1, g, b]
            sd += s
            q1 += q_tok[1, g, b] - s
            if phid * q_req[1, g, b] != 0.0:
                served = True
        # tokens made and their energy: by the jobs in service, over their service time (decode_in_service)
        if idle:
            made, ebd, ebdd, busyd, bmade = 0.0, 0.0, 0.0, 0.0, 1.0
        else:
            made, ebd, ebdd, busyd, bmade = decode_in_service(T, dt, levels, g, nr, slot_n, phid, q_tok, q_seg, d_tok,
                                                              d_req, d_sp, latd, pw, pwd, tps, dg, finite)
        # request-attributed energy: the tokens' steps at their level; the pool's: the tokens' dynamic energy and the
        # idle floor for the whole ready and held time (as the request level charges it)
        e_busy[G] = ebd
        energy[G] = ebdd + T * psa[G]
        # effective TPOT = TPOT + wait / output tokens (wait: mean queue over throughput, or the boot wait)
        thr = sd / T
        wait = 0.5 * (q0 + q1) / max(thr, 1e-300) if thr > 0.0 else 0.0
        ud = unavail[G]
        md = 0.0
        fin = 0.0
        for b in range(0 if idle else nb):
            if finite and q_tok[1, g, b] == 0.0 and q_req[1, g, b] == 0.0:  # serves 0; its miss share is finite
                continue
            sr = phid * q_req[1, g, b]
            fin += sr
            room = slo_d[b] - lat[dg, b, jd]
            if room < 0.0:
                share = 1.0
            elif not served:
                share = 0.0
            else:
                safe = max(room, 1e-300)
                share = _osl_share(osl_cdf, b, wait / safe) if wait > 0.0 else 0.0
                if ud > 0.0:
                    mu = _osl_share(osl_cdf, b, 0.5 * ud / safe)
                    share = (1.0 - ud / T) * share + (ud / T) * max(share, mu)
            md += sr * share
            md_b[b] += sr * share
            fin_b[b] += sr
            q_tok[1, g, b] -= phid * q_tok[1, g, b]
            q_req[1, g, b] -= sr
        tokens[G] = made
        batch_tok[G] = made * bmade
        res[R_TOKENS_D] += made
        res[R_FIN] += fin
        res[R_MISS_D] += md
        res[R_E_D] += energy[G]
        res[R_EB_D] += ebd
        res[R_USDB_D] += T * busyd * usd_ready[G]
    # ---- open requests already past their SLO: queued beyond what arrived within the SLO
    for b in range(nb):
        lim_p = cnt[0, b] / T * slo_p[b]
        osl_b = tok[1, b] / max(cnt[1, b], 1e-12) if cnt[1, b] > 0.0 else 1.0
        lim_d = cnt[1, b] / T * slo_d[b] * osl_b
        for g in range(nb):
            res[R_LATE_P] += max(q_req[0, g, b] - lim_p, 0.0)
            res[R_LATE_D] += max(q_req[1, g, b] - lim_d, 0.0)
