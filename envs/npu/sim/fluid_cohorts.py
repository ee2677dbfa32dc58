"""Decode cohorts of the fluid NPU model's jobs in service: draining a cohort by the tokens each job makes and
adding a new cohort to a (group, bucket)'s slots, for :func:`~servegym.envs.npu.sim.fluid_kernels.decode_in_service`
(kept in their own module so the kernels' module stays small). Tokens and jobs are counts (fractional: a fluid).
"""

from __future__ import annotations

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
