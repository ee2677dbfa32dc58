"""Decode cohorts of the fluid NPU model's jobs in service: draining a cohort by the tokens each job makes, adding a
new cohort to a (group, bucket)'s slots, and one interval's decode by a group's jobs in service
(:func:`decode_in_service`), for the compiled serving step :func:`~servegym.envs.npu.sim.fluid_kernels.serve` (kept
in their own module so the kernels' module stays small). Tokens and jobs are counts (fractional: a fluid), times
seconds, energies joules.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit  # a core dependency (fluid_kernels keeps the pure-Python fallback for its own kernels)


@njit(cache=True)
def drain(n, tok, sp, x):  # pragma: no cover - compiled
    """One cohort of decode jobs in service (``n`` jobs holding ``tok`` output tokens, their remaining tokens per job
    spread uniformly over a width ``sp`` around the mean ``tok / n``) after each job makes ``x`` more tokens: jobs,
    tokens and width left. The jobs whose remaining tokens run out finish; the rest stay uniform, from 0 up."""
    if n <= 0.0:
        return 0.0, 0.0, 0.0
    mean = tok / n
    hi = mean + 0.5 * sp
    if x >= hi:
        return 0.0, 0.0, 0.0
    lo = mean - 0.5 * sp
    if x <= lo:
        return n, tok - n * x, sp
    n1 = n * (hi - x) / sp  # lo < x < hi, so sp > 0
    return n1, 0.5 * n1 * (hi - x), hi - x


@njit(cache=True)
def new_slot(d_tok, d_req, g, b):  # pragma: no cover - compiled
    """The cohort slot a new cohort of (group ``g``, bucket ``b``) takes: an empty one, or the one with the most
    tokens left per job (the youngest), which it joins."""
    K = d_req.shape[2]
    best = 0
    most = -1.0
    for k in range(K):
        if d_req[g, b, k] <= 0.0:
            return k
        per = d_tok[g, b, k] / d_req[g, b, k]
        if per > most:
            most = per
            best = k
    return best


@njit(cache=True)
def join(d_tok, d_req, d_sp, g, b, k, tok, jobs, sp):  # pragma: no cover - compiled
    """Add ``jobs`` jobs holding ``tok`` output tokens (their remaining tokens per job uniform over a width ``sp``)
    to cohort ``k`` of (group ``g``, bucket ``b``): the widest uniform spread with the merged mean within the
    two parts' range (exact for jobs arriving evenly)."""
    if jobs <= 0.0:
        return
    n0 = d_req[g, b, k]
    if n0 <= 0.0:
        d_tok[g, b, k], d_req[g, b, k], d_sp[g, b, k] = tok, jobs, sp
        return
    m0 = d_tok[g, b, k] / n0
    m1 = tok / jobs
    lo = max(min(m0 - 0.5 * d_sp[g, b, k], m1 - 0.5 * sp), 0.0)
    hi = max(m0 + 0.5 * d_sp[g, b, k], m1 + 0.5 * sp)
    d_tok[g, b, k] += tok
    d_req[g, b, k] += jobs
    mean = d_tok[g, b, k] / d_req[g, b, k]
    d_sp[g, b, k] = max(0.0, min(2.0 * (mean - lo), 2.0 * (hi - mean)))


@njit(cache=True)
def _level_index(levels, x):  # pragma: no cover - compiled
    """First index i with levels[i] >= x (``np.searchsorted(levels, x, side="left")``), at most the last."""
    n = levels.size
    for i in range(n):
        if levels[i] >= x:
            return i
    return n - 1


@njit(cache=True)
def _any_positive(x, g):  # pragma: no cover - compiled
    """Whether ``x[g]`` (a (group, bucket, cohort) array) holds a value > 0."""
    for b in range(x.shape[1]):
        for k in range(x.shape[2]):
            if x[g, b, k] > 0.0:
                return True
    return False


@njit(cache=True)
def _pass(g, live, nl, kend, slot, n_new, r_new, d_tok, d_req, d_sp, latd, j, h, c_n, c_t, c_s, a_n, a_t, a_s,
          mbs):  # pragma: no cover - compiled
    """One sub-step of ``h`` s of decode group ``g``'s jobs in service and the sub-step's arrivals at level ``j``, as
    :func:`decode_in_service` makes it, without changing the cohorts: each live bucket's cohorts after it (``c_n`` /
    ``c_t`` / ``c_s``: jobs, tokens and width per (live bucket, cohort), written where a cohort holds jobs), its
    arrivals' cohort (``a_n`` / ``a_t`` / ``a_s``) and its tokens made (``mbs``). Returns the decode time (s) the jobs
    spend in it: over ``h`` it is the jobs in service averaged over the sub-step. The sub-step's level depends on that
    time, so a sub-step is tried at a level and then kept (:func:`_commit`) once its level holds."""
    work = 0.0
    for i in range(nl):
        b = live[i]
        tau = latd[g, b, j]
        if not tau < math.inf:
            continue
        x = h / tau  # tokens per job in the sub-step
        mb = 0.0
        for k in range(kend[b]):
            if d_req[g, b, k] > 0.0:
                n1, t1, s1 = drain(d_req[g, b, k], d_tok[g, b, k], d_sp[g, b, k], x)
                mb += d_tok[g, b, k] - t1
                c_n[i, k], c_t[i, k], c_s[i, k] = n1, t1, s1
        if slot[b] >= 0:
            # the sub-step's arrivals come evenly within it: each makes x times the share of the sub-step left
            # after it arrives (remaining tokens uniform on [r - x, r]: a cohort on [r, r + x] drained by x, less
            # the x / 2 per job it never held)
            nn, rr = n_new[b], r_new[b]
            n1, t1, s1 = drain(nn, nn * (rr + 0.5 * x), x, x)
            mb += nn * rr - t1
            a_n[i], a_t[i], a_s[i] = n1, t1, s1
        mbs[i] = mb
        work += mb * tau
    return work


@njit(cache=True)
def decode_in_service(T, dt, levels, g, nr, slot_n, phid, q_tok, q_seg, d_tok, d_req, d_sp, latd, pw, pwd, tps, dg,
                      finite):  # pragma: no cover - compiled
    """Decode tokens made and their energy in one interval of ``T`` s by the jobs in service of decode group ``g``
    (per (group, bucket, cohort) ``d_tok`` / ``d_req`` / ``d_sp``: output tokens left, jobs and the width of
    their remaining tokens per job; carried across intervals and updated in place), stepped in the request
    level's sub-steps of ``dt`` s. The request level decodes a job over its whole service time, output tokens x
    TPOT at the batch level of its sub-steps (a long OpenThoughts job spans many intervals): each sub-step's
    batch is its jobs in service averaged over the sub-step (a job in service for part of it counts for that part)
    per busy vPod, ``max(1, min(n, slot_n) / nr)``, its level the smallest that holds it, and each token made
    there is charged that level's J/token. Here the admitted work (``phid`` x the queued
    tokens ``q_tok[1]`` and jobs ``q_seg``, both taken off the queue) arrives evenly over the interval's
    sub-steps as one cohort per (group, bucket). The jobs of a cohort have nearly the same length (a bucket
    spans a factor <= 1.25 of total length), so their remaining tokens spread only by when they arrived: a
    burst's jobs finish together and the group's batch, level and busy share fall in steps as the request
    level's do. A new cohort takes an empty cohort slot or, all taken, merges into the one with the most tokens
    left per job (the youngest). Returns tokens made, their energy (J) at the steps' power ``pw`` and their dynamic
    energy (J) at the power above the idle floor ``pwd``, the busy share of the ready vPods' time (job decode time /
    batch / vPod time, as the request level) and the token-weighted batch."""
    nb = q_seg.shape[1]
    K = d_req.shape[2]
    if nr <= 0.0:  # no ready vPod: the jobs wait in service, nothing is made
        for b in range(nb):
            nn = phid * q_seg[g, b]
            if nn > 0.0:
                join(d_tok, d_req, d_sp, g, b, new_slot(d_tok, d_req, g, b), phid * q_tok[1, g, b], nn, 0.0)
            q_seg[g, b] -= nn
        return 0.0, 0.0, 0.0, 0.0, 1.0
    ns = max(1, math.floor(T / dt + 0.5))
    h = T / ns
    slot = np.full(nb, -1)
    r_new = np.zeros(nb)  # tokens per admitted job
    n_new = np.zeros(nb)  # admitted jobs per sub-step
    kend = np.zeros(nb, dtype=np.int64)  # 1 + the last cohort slot in use (slots fill from 0)
    live = np.empty(nb, dtype=np.int64)  # the buckets with jobs (every bucket with non-finite tables)
    nl = 0
    for b in range(nb):
        nn = phid * q_seg[g, b]
        if nn > 0.0:
            slot[b] = new_slot(d_tok, d_req, g, b)
            r_new[b] = phid * q_tok[1, g, b] / nn
            n_new[b] = nn / ns
            kend[b] = slot[b] + 1
        q_seg[g, b] -= nn
        for k in range(K):
            if d_req[g, b, k] > 0.0 and k >= kend[b]:
                kend[b] = k + 1
        if kend[b] > 0 or not finite:
            live[nl] = b
            nl += 1
    # one sub-step's pass (_pass): the live buckets' cohorts and arrivals after it, and their tokens made
    c_n = np.empty((nl, K))
    c_t = np.empty((nl, K))
    c_s = np.empty((nl, K))
    a_n = np.empty(nl)
    a_t = np.empty(nl)
    a_s = np.empty(nl)
    mbs = np.empty(nl)
    made = 0.0
    e = 0.0
    ed = 0.0
    busy_t = 0.0  # vPod-seconds busy per ready vPod
    bt = 0.0  # tokens made x batch
    for _s in range(ns):
        n = 0.0
        for i in range(nl):
            b = live[i]
            n += n_new[b]
            for k in range(kend[b]):
                n += d_req[g, b, k]
        if n <= 0.0:
            continue
        # the batch is the jobs in service averaged over the sub-step (a job in service for part of it counts for
        # that part: its decode time over the sub-step), as the request level's: from the upper bound (every job
        # present for the whole sub-step) down to the level whose time-averaged batch it holds. Each level tried
        # is one pass (_pass); the last one tried is the sub-step's, kept as it is (its figures are the ones a
        # pass that changed the cohorts would make)
        j = _level_index(levels, math.ceil(max(1.0, min(n, slot_n) / nr) - 1e-9))
        for _it in range(levels.size):  # the levels only fall, so this ends by a break
            work = _pass(g, live, nl, kend, slot, n_new, r_new, d_tok, d_req, d_sp, latd, j, h, c_n, c_t, c_s, a_n,
                         a_t, a_s, mbs)
            bb = max(1.0, min(work / h, slot_n) / nr)
            j2 = _level_index(levels, math.ceil(bb - 1e-9))
            if j2 >= j:  # a lower level makes the jobs no slower: stop here
                break
            j = j2
        for i in range(nl):
            b = live[i]
            if not latd[g, b, j] < math.inf:  # no step latency at this level: the jobs make nothing, stay in service
                if slot[b] >= 0:
                    join(d_tok, d_req, d_sp, g, b, slot[b], n_new[b] * r_new[b], n_new[b], 0.0)
                continue
            for k in range(kend[b]):
                if d_req[g, b, k] > 0.0:
                    d_req[g, b, k], d_tok[g, b, k], d_sp[g, b, k] = c_n[i, k], c_t[i, k], c_s[i, k]
            if slot[b] >= 0:
                join(d_tok, d_req, d_sp, g, b, slot[b], a_t[i], a_n[i], a_s[i])
            mb = mbs[i]
            made += mb
            e += mb * (pw[dg, b, j] / max(tps[dg, b, j], 1e-300))
            ed += mb * (pwd[dg, b, j] / max(tps[dg, b, j], 1e-300))
            bt += mb * bb
        busy_t += min(h, work / bb / nr)
    return made, e, ed, busy_t / T, (bt / made if made > 0.0 else 1.0)
