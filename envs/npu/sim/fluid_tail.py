"""The stationary TTFT tail of one profile bin given its realized work, and its lower bound behind a long job in
service, for the fluid NPU model's compiled serving step (:func:`~servegym.envs.npu.sim.fluid_kernels.ttft_misses`
calls them; kept in their own module so the kernels' module stays small). Times are seconds.
"""

from __future__ import annotations

import math

from numba import njit  # a core dependency (fluid_kernels keeps the pure-Python fallback for its own kernels)


@njit(cache=True)
def bin_tail(x, r, s1, s2, wq, span):  # pragma: no cover - compiled
    """P(wait > ``x`` s) of a prefill arrival in a profile bin of ``span`` s whose arrivals are known, at the
    bin's utilization ``r`` and service-time moments ``s1`` (s), ``s2`` (s^2) at its level; ``wq`` (s) the
    Pollaczek-Khinchine mean wait (as capped by the caller).

    The request level's prefill queue is an M/G/1 server fed by the trace's arrivals; the fluid knows how much
    work arrived in each bin (the workload profile's counts) and prices the bin at that realized utilization.
    The stationary tail ``r exp(-r x / wq)`` at that utilization counts the work's fluctuation twice: long waits
    come from stretches that receive more work than the server's rate, and a bin whose realized work is high
    already holds that excess in ``r``; given the bin's total, the work within it can no longer fluctuate freely.
    In a Brownian approximation the net input over the last s seconds (work in - time) has mean -(1 - r) s and,
    given the bin's total, variance sigma s (1 - s / span) inside the bin (a bridge, pinned at the bin's ends) and
    u (1 - u / span) + p (1 - p / span) reaching p s into the previous bin (an arrival u s after its bin's start).
    The wait exceeds x where that input exceeds x over some s; the large-deviation exponent
    E = min_s (x + (1 - r) s)^2 / (2 sigma v(s)), v the variance time above, has a closed-form minimizer on each
    piece (inside s* = x / (1 - r + 2 x / span); across p* = (x' - 2 (1 - r) c_u) / (1 - r + 2 x' / span), with
    x' = x + (1 - r) u and c_u = u (1 - u / span)) and is averaged over 8 arrival offsets u in the bin.
    ``sigma = s2 / s1`` (s) makes the unpinned exponent (v = s) the P-K one, 2 x (1 - r) s1 / s2, so the tail is
    ``r exp(-max(E, r x / wq))``: never heavier than the P-K tail, equal to it as ``span`` grows, and the same
    P(wait > 0) = r.

    Measured on the request level (Llama-3.1-405B NeuScale 2024, 2 h, each job at its 10-s bin's realized
    utilization and moments, 2024 azure-conv / azure-code): P(wait > 0.2 s) 0.0335 / 0.1127 at the request level,
    0.0486 / 0.1348 from the P-K tail, 0.0412 / 0.1192 from this one (P(wait > 0.4 s): 0.0028 / 0.0356, P-K
    0.0077 / 0.0536, this 0.0043 / 0.0354); per bin-utilization band the mean wait and P(wait > 0) match P-K
    (within 4-7 % below utilization 0.8), only the tail does not. The request level's own per-sub-step level sizing
    plays no part there (99.9 % of azure-conv's jobs run at level 0: the steps' capacities are equal for these
    prompts), and redrawing its arrivals uniformly within 5-, 10- or 60-s windows leaves P(wait > 0.2 s) at
    0.034: its queue is an M/G/1 at the underlying rate, which the realized bin work overstates where it is high."""
    d = 1.0 - r
    sig = s2 / max(s1, 1e-300)
    if sig <= 0.0 or x <= 0.0:
        return r
    e_pk = r * x / max(wq, 1e-300)
    nu = 8
    acc = 0.0
    for i in range(nu):
        u = (i + 0.5) * span / nu
        si = min(x / (d + 2.0 * x / span), u)
        h = (x + d * si) ** 2 / max(si * (1.0 - si / span), 1e-300)
        cu = u * (1.0 - u / span)
        xp = x + d * u
        p = min(max((xp - 2.0 * d * cu) / (d + 2.0 * xp / span), 0.0), span)
        h = min(h, (xp + d * p) ** 2 / max(cu + p * (1.0 - p / span), 1e-300))
        acc += math.exp(-max(h / (2.0 * sig), e_pk))
    return r * acc / nu


@njit(cache=True)
def residual_share(k_pre, gp, isl_m1, rt, k, g, c, x, span):  # pragma: no cover - compiled
    """Share of bin ``k``'s arrivals at group ``g`` that wait more than ``x`` s for the rest of another job in
    service alone: each of the bin's jobs serves (service time - ``x``)+ with more than ``x`` left, and the other
    arrivals come at the bin's rate less that job, (n - 1) / ``span``; so the share is (n - 1) / n x the sum of
    (service - x)+ over the bin's jobs / ``span``, each job's service its bucket's mean work (``isl_m1 / rt``,
    best-level vPod-s) over the capacity ``c`` (best-level vPods).

    An FCFS arrival waits at least the remaining service of the job in service (Poisson arrivals see the server as
    it is over time), whatever the queue: a lower bound on the wait's tail, exact to first order at light load.
    The queue's diffusion (the bin tail, the job queue's linear growth) spreads a long job's work over the bin and
    so misses it: in a group serving 30K- to 460K-token prompts (LVEval's last groups) one 400K-token prompt holds
    the server for 7-14 s and the short prompts arriving in that time wait out its rest, with a TTFT slack of
    0.2-5 s. Measured on DeepSeek-V3 LVEval NeuScale (2024), the fluid's TTFT rule on the request level's own jobs,
    per bin: groups 41 / 42 at 197 / 190 misses against the request level's 217 / 218, and 204 / 200 with the
    bound (each bucket's mean service rather than each job's gives the same; (E S - x)+ <= E (S - x)+ keeps it a
    bound). The bound counts only the bin's own arrivals behind a job: a window reaching into the next bin is left
    to the job queue, which carries what the bin's work leaves over."""
    acc = 0.0
    n_all = 0.0
    for b in range(gp.size):
        n = k_pre[k, 0, b]
        if n > 0.0 and gp[b] == g:
            n_all += n
            v = isl_m1[b] / rt[b] / c - x
            if v > 0.0:
                acc += n * v
    if n_all <= 1.0:  # no other arrival in the bin to wait behind a job
        return 0.0
    return min((n_all - 1.0) / n_all * acc / span, 1.0)
