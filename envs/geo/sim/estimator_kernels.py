"""Compiled form of the §IV estimator (:class:`~servegym.envs.geo.sim.estimator.Estimator`).

The estimator is a few dozen element-wise numpy operations on (requests x DCs) arrays of a few hundred
entries: as numpy calls each costs microseconds of dispatch, more than its arithmetic, and the geo envs
call it once per window (GeoRouteWindow-v0) or four times per greedy replanning (GeoRoute-v0's residual
mode around greedy). Here the same formulas are loops compiled with numba (``cache=True``, as the geo
engine's kernels: the first import compiles once, later processes load the cached machine code; without
numba the functions run as plain Python, correct and slower).

Bit-identical to the numpy formulation (``Estimator.estimate_numpy``, kept as the reference and tested
against this one): every expression is evaluated with the same operations in the same order as the numpy
one (numba compiles without fast-math, so nothing is reassociated or fused), including the ``b1 * 1`` and
``b2 * 0`` terms of the prefill model's call with one request and no attention term.

The profile's coefficients, the SLOs and the workload means travel as one float64 vector ``par`` (indices
``P_*``, built by :func:`estimator_params`). Times in s, energies in J, carbon in g, tokens in tokens.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from servegym.envs.geo.sim.engine_kernels import decode_time_s, njit  # numba's njit, or a stand-in

J_PER_KWH = 3.6e6
MAX_DUTY = 0.95

# indices of ``par``
(
    P_M,  # max_num_batched_tokens M (prefill chunk budget), tokens
    P_T_FULL,  # t_pre(M, 1, 0): one full chunk, s
    P_KNEE, P_LO, P_HI, P_B0, P_B1, P_B2,  # prefill time model
    P_AL0, P_AL1, P_AL2, P_BE0, P_BE1, P_BE2,  # decode time model (alpha, beta)
    P_E0_PRE, P_E_P, P_E_A, P_E0_DEC, P_E_D, P_E_K,  # step energy model
    P_ISL, P_OSL,  # the workload's mean ISL and OSL (Ī, Ō), each at least 1
    P_SEQS, P_KV_CAP,  # max_num_seqs S, KV pool C (tokens)
    P_TTFT_SLO, P_TPOT_SLO,
) = range(26)
N_PAR = 26


def estimator_params(profile: object, t_full_chunk: float, isl_mean: float, osl_mean: float, ttft_slo_s: float,
                     tpot_slo_s: float) -> NDArray[np.float64]:
    """The ``par`` vector of an estimator (module docstring); ``profile`` an ``EngineProfile``."""
    pre, dec, en = profile.prefill, profile.decode, profile.energy  # type: ignore[attr-defined]
    vals = [profile.max_num_batched_tokens, t_full_chunk,  # type: ignore[attr-defined]
            pre.knee_tokens, pre.tok_slope_lo, pre.tok_slope_hi, pre.b0, pre.b1, pre.b2,
            *dec.alpha, *dec.beta, en.e0_pre, en.e_p, en.e_a, en.e0_dec, en.e_d, en.e_k,
            isl_mean, osl_mean, profile.max_num_seqs, profile.kv_capacity_tokens,  # type: ignore[attr-defined]
            ttft_slo_s, tpot_slo_s]
    out = np.array([float(v) for v in vals], dtype=np.float64)
    assert out.size == N_PAR
    return out


@njit(cache=True)
def first_argmin(x: NDArray[np.float64]) -> int:
    """``np.argmin`` of a 1-D array: the first minimum, or the first NaN if there is one."""
    best = 0
    for i in range(x.shape[0]):
        if x[i] != x[i]:
            return i
        if x[i] < x[best]:
            best = i
    return best


@njit(cache=True)
def prefill_step_s(n: float, par: NDArray[np.float64]) -> float:
    """``t_pre(n, 1, 0)``: one prefill step of ``n`` tokens of one request (PrefillTimeModel.__call__)."""
    knee = par[P_KNEE]
    t_tok = par[P_LO] * min(n, knee) + par[P_HI] * max(n - knee, 0.0)
    return t_tok + par[P_B0] + par[P_B1] * 1.0 + par[P_B2] * 0.0


@njit(cache=True)
def chunked_prefill_s(n: float, own: float, par: NDArray[np.float64]) -> float:
    """``P(N, n)``: chunked prefill time of ``n`` tokens including an own prompt of ``own`` (Estimator.prefill_time_s)."""
    m = par[P_M]
    full = np.floor(n / m)
    rem = n - full * m
    rem_t = prefill_step_s(rem, par) if rem > 0 else 0.0
    return full * par[P_T_FULL] + rem_t + par[P_B2] * own * own


@njit(cache=True)
def decode_step_s(b: float, kv: float, par: NDArray[np.float64]) -> float:
    """``t_dec(B, K)`` (DecodeTimeModel.__call__; the engine's compiled form, :func:`decode_time_s`)."""
    return decode_time_s(par[P_AL0], par[P_AL1], par[P_AL2], par[P_BE0], par[P_BE1], par[P_BE2], b, kv)


@njit(cache=True)
def slot_capacity(b: float, kv: float, par: NDArray[np.float64]) -> float:
    """``S_d = min(S, C / ℓ_d)`` per engine, ``ℓ_d`` the cached tokens per running request."""
    ell = kv / max(b, 1e-9) if b > 0 else par[P_ISL] + 0.5 * par[P_OSL]
    return min(par[P_SEQS], par[P_KV_CAP] / max(ell, 1.0))


@njit(cache=True)
def headroom_into(batch: NDArray[np.float64], queued: NDArray[np.float64], kv: NDArray[np.float64],
                  engines: float, par: NDArray[np.float64], out: NDArray[np.float64]) -> None:
    """``H_d = E · max(0, S_d − B_d − Q_d/Ī)`` per DC into ``out`` (Estimator.headroom_requests)."""
    for d in range(batch.shape[0]):
        b = batch[d]
        out[d] = engines * max(0.0, slot_capacity(b, kv[d], par) - b - queued[d] / par[P_ISL])


@njit(cache=True)
def dc_terms_into(batch: NDArray[np.float64], queued: NDArray[np.float64], kv: NDArray[np.float64],
                  duty: NDArray[np.float64], pue: NDArray[np.float64], ci: NDArray[np.float64],
                  par: NDArray[np.float64], out: NDArray[np.float64]) -> None:
    """The per-DC terms into ``out`` (4, D): ``W_d``, ``P(Q_d, 0)``, ``1 − duty_d``, g per J (Estimator._per_dc)."""
    for d in range(batch.shape[0]):
        b = batch[d]
        du = min(duty[d], MAX_DUTY)
        tau = decode_step_s(max(b, 1.0), kv[d], par) / (1.0 - du)
        missing = max(0.0, b + queued[d] / par[P_ISL] + 1.0 - slot_capacity(b, kv[d], par))
        out[0, d] = missing * par[P_OSL] * tau / max(b, 1.0)
        out[1, d] = chunked_prefill_s(queued[d], 0.0, par)
        out[2, d] = 1.0 - du
        out[3, d] = pue[d] * ci[d] / J_PER_KWH


@njit(cache=True)
def latency_into(batch: NDArray[np.float64], queued: NDArray[np.float64], kv: NDArray[np.float64],
                 terms: NDArray[np.float64], rtt: NDArray[np.float64], isl: NDArray[np.float64],
                 osl: NDArray[np.float64], origin: NDArray[np.int64], par: NDArray[np.float64],
                 ttft: NDArray[np.float64], tpot: NDArray[np.float64], feasible: NDArray[np.bool_]) -> None:
    """TTFT, TPOT and SLO feasibility (n, D) of requests (``isl``, ``osl`` already at least 1, ``origin``)
    against DCs with per-DC ``terms`` (:func:`dc_terms_into`)."""
    ttft_slo, tpot_slo = par[P_TTFT_SLO], par[P_TPOT_SLO]
    for i in range(isl.shape[0]):
        x, o, s = isl[i], osl[i], origin[i]
        for d in range(batch.shape[0]):
            q = queued[d]
            t1 = rtt[s, d] + terms[0, d] + chunked_prefill_s(x + q, x, par)
            t2 = (decode_step_s(batch[d] + 1.0, kv[d] + x, par) + terms[1, d] / o) / terms[2, d]
            ttft[i, d] = t1
            tpot[i, d] = t2
            feasible[i, d] = (t1 <= ttft_slo) & (t2 <= tpot_slo)


@njit(cache=True)
def estimate_into(batch: NDArray[np.float64], queued: NDArray[np.float64], kv: NDArray[np.float64],
                  duty: NDArray[np.float64], pue: NDArray[np.float64], ci: NDArray[np.float64],
                  rtt: NDArray[np.float64], isl: NDArray[np.float64], osl: NDArray[np.float64],
                  origin: NDArray[np.int64], par: NDArray[np.float64], ttft: NDArray[np.float64],
                  tpot: NDArray[np.float64], energy: NDArray[np.float64], carbon: NDArray[np.float64],
                  feasible: NDArray[np.bool_], mask: NDArray[np.bool_]) -> None:
    """Every estimate (n, D) into the output arrays (Estimator.estimate; ``osl`` already at least 1)."""
    n_dcs = batch.shape[0]
    terms = np.empty((4, n_dcs))
    dc_terms_into(batch, queued, kv, duty, pue, ci, par, terms)
    latency_into(batch, queued, kv, terms, rtt, isl, osl, origin, par, ttft, tpot, feasible)
    m = par[P_M]
    for i in range(isl.shape[0]):
        x, o = isl[i], osl[i]
        e_pre = par[P_E_P] * x + par[P_E_A] * x * x + par[P_E0_PRE] * np.ceil(x / m)
        cache_read = par[P_E_K] * (x + 0.5 * o)
        any_f = False
        for d in range(n_dcs):
            en = e_pre + o * (par[P_E0_DEC] / (batch[d] + 1.0) + par[P_E_D] + cache_read)
            energy[i, d] = en
            carbon[i, d] = en * terms[3, d]
            any_f = any_f | feasible[i, d]
        for d in range(n_dcs):
            mask[i, d] = feasible[i, d] | (not any_f)


@njit(cache=True)
def projected_latency_into(batch: NDArray[np.float64], queued: NDArray[np.float64], kv: NDArray[np.float64],
                           duty: NDArray[np.float64], pue: NDArray[np.float64], ci: NDArray[np.float64],
                           rtt: NDArray[np.float64], engines: int, base: NDArray[np.float64], o_lo: int,
                           isl: NDArray[np.float64], osl: NDArray[np.float64], origin: NDArray[np.int64],
                           par: NDArray[np.float64], ttft: NDArray[np.float64], tpot: NDArray[np.float64],
                           feasible: NDArray[np.bool_]) -> None:
    """TTFT, TPOT and feasibility tables (levels, n, D) at the projected levels ``base + o`` for ``o`` from
    ``o_lo`` to ``ttft.shape[0] - 1``: greedy's rule 1, ``estimate(projected_snapshot(snap, base + o), ...)``.

    The projection is :func:`~servegym.baselines.geo.ilp.project_assignment` of ``⌊(base_d + o)·E⌋`` requests
    of mean prompt ``Ī`` on each DC d, with its arithmetic: the prompt tokens summed one request at a time (as
    ``np.bincount`` with weights sums them), so their mean is that of the numpy form to the bit."""
    n_dcs = batch.shape[0]
    e = float(engines)
    isl_mean = par[P_ISL]
    free = np.empty(n_dcs)
    headroom_into(batch, queued, kv, float(engines), par, free)
    pb, pq, pkv = np.empty(n_dcs), np.empty(n_dcs), np.empty(n_dcs)
    terms = np.empty((4, n_dcs))
    for o in range(o_lo, ttft.shape[0]):
        for d in range(n_dcs):
            per_dc = np.int64((base[d] + o) * engines)
            n_d = float(per_dc)
            tok = 0.0
            for _ in range(per_dc):
                tok += isl_mean
            mean_isl = tok / max(n_d, 1.0) if n_d > 0 else 0.0
            a = n_d / e
            adm = min(a, free[d] / e)
            pb[d] = batch[d] + adm
            pkv[d] = kv[d] + adm * mean_isl
            pq[d] = queued[d] + (a - adm) * mean_isl
        dc_terms_into(pb, pq, pkv, duty, pue, ci, par, terms)
        latency_into(pb, pq, pkv, terms, rtt, isl, osl, origin, par, ttft[o], tpot[o], feasible[o])


@njit(cache=True)
def drained_headroom_into(batch: NDArray[np.float64], queued: NDArray[np.float64], kv: NDArray[np.float64],
                          duty: NDArray[np.float64], polled_at_s: NDArray[np.float64], t_s: float, engines: float,
                          par: NDArray[np.float64], out: NDArray[np.float64]) -> None:
    """``H_d(t)`` into ``out``: the headroom on the snapshot whose batch drained for its age at ``t_s``
    (:func:`~servegym.baselines.geo.ilp.drained_snapshot`, then :func:`headroom_into`; same arithmetic):
    ``B'_d = B_d · keep_d``, ``KV'_d = KV_d · keep_d`` with ``keep_d = max(0, 1 − a_d / (Ō · τ_d))``."""
    for d in range(batch.shape[0]):
        b = batch[d]
        tau = decode_step_s(max(b, 1.0), kv[d], par) / (1.0 - min(duty[d], MAX_DUTY))
        age = max(0.0, t_s - polled_at_s[d])
        keep = max(0.0, 1.0 - age / (par[P_OSL] * tau))
        b2 = b * keep
        out[d] = engines * max(0.0, slot_capacity(b2, kv[d] * keep, par) - b2 - queued[d] / par[P_ISL])
