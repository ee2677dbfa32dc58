"""Compiled inner loops of :class:`servegym.envs.geo.sim.engine.EnginePool`.

The engine loop is sequential and branchy per engine (FIFO admission, chunked prefill, retirement),
so it is compiled with numba (``cache=True``: the first import compiles once, about a few seconds,
later processes load the cached machine code). Without numba the same functions run as plain
Python, which is correct but about 100x slower.

State is struct-of-arrays. Column indices below are module constants, which numba folds in.

- request tables, one row per request slot: ``ri`` (int64) and ``rf`` (float64);
- engine tables, one row per engine: ``ei`` (int64) and ``ef`` (float64);
- ``slots[e, :ei[e, E_BATCH]]``: the request slots in engine ``e``'s batch, in admission order;
- ``fin[:fin_n[0]]``: slots that finished since the last drain (their rows stay valid until freed);
- ``par``: the profile's coefficients (see ``P_*``).

Times are seconds, energies joules, power watts, sizes tokens.
"""

from __future__ import annotations

import numpy as np

try:
    from numba import njit
except ImportError:  # pragma: no cover - numba is a core dependency; this keeps a pure-Python fallback

    def njit(*args, **kwargs):  # type: ignore[no-redef]
        if args and callable(args[0]):
            return args[0]
        return lambda f: f


# request int columns
R_ID, R_ENGINE, R_ISL, R_OSL, R_PREFILLED, R_GENERATED, R_NEXT, R_PREV = range(8)
N_RI = 8
# request float columns
RF_CREATED, RF_READY, RF_FIRST, RF_FINISH = range(4)
N_RF = 4
# engine int columns
(
    E_QHEAD,  # first queued slot (-1: empty); the queue is ordered by ready time, ties by submission
    E_QTAIL,
    E_QLEN,  # requests submitted and not admitted (in transit or waiting)
    E_QTOK,  # their prompt tokens
    E_BATCH,  # requests admitted and not finished
    E_KV_RES,  # KV tokens reserved by the batch (isl + osl per request)
    E_KV_CACHED,  # KV tokens actually cached (prefilled + generated per request)
    E_PEND_TOK,  # prompt tokens of admitted requests not yet prefilled
    E_PHASE,  # 0: iteration start (retire done, admit next); 1: prefill steps; 2: decode step due
    E_SUBMITTED,
    E_ADMITTED,
    E_FINISHED,
    E_PREFILL_STEPS,
    E_DECODE_STEPS,
    E_POWER_CLAMPS,  # steps whose model energy exceeded TP x TDP x step time (energy clamped to that)
    E_TIME_FLOORS,  # steps whose model time fell below P_MIN_STEP (time raised to it)
) = range(16)
N_EI = 16
# engine float columns
F_CLOCK, F_E_PRE, F_E_DEC, F_E_IDLE, F_PREFILL_S, F_DECODE_S, F_IDLE_S, F_DUTY_PREFILL_S = range(8)
N_EF = 8
# profile parameters
(
    P_KNEE,
    P_SLO,
    P_SHI,
    P_B0,
    P_B1,
    P_B2,
    P_AL0,
    P_AL1,
    P_AL2,
    P_BE0,
    P_BE1,
    P_BE2,
    P_E0P,
    P_EP,
    P_EA,
    P_E0D,
    P_ED,
    P_EK,
    P_IDLE_W,
    P_MAX_SEQS,
    P_BUDGET,
    P_KV_CAP,
    P_MIN_STEP,
    P_CAP_W,  # TP x TDP, W: no step draws more
) = range(24)
N_PAR = 24


@njit(cache=True)
def _t_pre(par, n, b, ss):  # pragma: no cover - compiled
    knee = par[P_KNEE]
    return par[P_SLO] * min(n, knee) + par[P_SHI] * max(n - knee, 0.0) + par[P_B0] + par[P_B1] * b + par[P_B2] * ss


@njit(cache=True)
def decode_time_s(al0, al1, al2, be0, be1, be2, b, k):  # pragma: no cover - compiled
    """``t_dec(B, K)`` (DecodeTimeModel.__call__) of a batch of ``b`` requests holding ``k`` cached tokens, s: the
    decode model's one compiled form, which the engine and the estimator's kernels share."""
    ell = k / max(b, 1.0)
    a0 = al0 + be0 * ell
    a1 = al1 + be1 * ell
    a2 = al2 + be2 * ell
    return a0 + (a1 + a2 * b) * b


@njit(cache=True)
def _t_dec(par, b, k):  # pragma: no cover - compiled
    return decode_time_s(par[P_AL0], par[P_AL1], par[P_AL2], par[P_BE0], par[P_BE1], par[P_BE2], b, k)


@njit(cache=True)
def _guard_step(par, ei, e, t, energy):  # pragma: no cover - compiled
    """Step time floored at P_MIN_STEP and energy clamped to P_CAP_W x time, each counted per engine.

    Inside a profile's calibrated range neither happens (checked when the profile loads); they guard an
    explicit extrapolation (e.g. ``max_num_seqs`` above the range), where a fitted polynomial can go negative
    or imply more than TP x TDP.
    """
    if t < par[P_MIN_STEP]:
        t = par[P_MIN_STEP]
        ei[e, E_TIME_FLOORS] += 1
    cap = par[P_CAP_W] * t
    if energy > cap:
        energy = cap
        ei[e, E_POWER_CLAMPS] += 1
    return t, energy


@njit(cache=True)
def submit_kernel(ri, rf, ei, new_slots, engine, rid, created, ready, isl, osl):  # pragma: no cover
    """Write new requests into their slots and insert each into its engine's ready-ordered queue."""
    for j in range(new_slots.shape[0]):
        s = new_slots[j]
        e = engine[j]
        ri[s, R_ID] = rid[j]
        ri[s, R_ENGINE] = e
        ri[s, R_ISL] = isl[j]
        ri[s, R_OSL] = osl[j]
        ri[s, R_PREFILLED] = 0
        ri[s, R_GENERATED] = 0
        rf[s, RF_CREATED] = created[j]
        rf[s, RF_READY] = ready[j]
        rf[s, RF_FIRST] = np.nan
        rf[s, RF_FINISH] = np.nan
        # walk back from the tail: arrivals are nearly in ready order, so this is O(1) amortized
        after = ei[e, E_QTAIL]
        while after >= 0 and rf[after, RF_READY] > ready[j]:
            after = ri[after, R_PREV]
        if after < 0:
            nxt = ei[e, E_QHEAD]
            ei[e, E_QHEAD] = s
        else:
            nxt = ri[after, R_NEXT]
            ri[after, R_NEXT] = s
        ri[s, R_PREV] = after
        ri[s, R_NEXT] = nxt
        if nxt < 0:
            ei[e, E_QTAIL] = s
        else:
            ri[nxt, R_PREV] = s
        ei[e, E_QLEN] += 1
        ei[e, E_QTOK] += isl[j]
        ei[e, E_SUBMITTED] += 1


@njit(cache=True)
def _retire(e, ri, rf, ei, slots, fin, fin_n, now):  # pragma: no cover
    """Drop requests that produced their last token (stable compaction keeps admission order)."""
    nb = ei[e, E_BATCH]
    k = 0
    for j in range(nb):
        s = slots[e, j]
        if ri[s, R_GENERATED] >= ri[s, R_OSL]:
            rf[s, RF_FINISH] = now
            need = ri[s, R_ISL] + ri[s, R_OSL]
            ei[e, E_KV_RES] -= need
            ei[e, E_KV_CACHED] -= need
            ei[e, E_FINISHED] += 1
            fin[fin_n[0]] = s
            fin_n[0] += 1
        else:
            slots[e, k] = s
            k += 1
    ei[e, E_BATCH] = k


@njit(cache=True)
def advance_kernel(ri, rf, ei, ef, slots, fin, fin_n, par, t_end):  # pragma: no cover
    """Run every engine's continuous-batching loop until its clock reaches ``t_end``.

    One iteration: admit from the queue head (retirement happened at the end of the previous
    step), run prefill steps of at most ``max_num_batched_tokens`` until every admitted prompt is
    prefilled (decode stalls meanwhile), then one decode step over the whole batch. The loop may
    stop between steps at ``t_end``; an engine's clock can pass ``t_end`` by one step.
    """
    max_seqs = int(par[P_MAX_SEQS])
    budget0 = int(par[P_BUDGET])
    kv_cap = int(par[P_KV_CAP])
    idle_w = par[P_IDLE_W]
    for e in range(ei.shape[0]):
        clock = ef[e, F_CLOCK]
        while clock < t_end:
            phase = ei[e, E_PHASE]
            if phase == 0:
                # admission from the FIFO head while the batch cap and the KV reservation allow
                while True:
                    h = ei[e, E_QHEAD]
                    if h < 0 or rf[h, RF_READY] > clock or ei[e, E_BATCH] >= max_seqs:
                        break
                    need = ri[h, R_ISL] + ri[h, R_OSL]
                    if ei[e, E_KV_RES] + need > kv_cap:
                        break
                    nxt = ri[h, R_NEXT]
                    ei[e, E_QHEAD] = nxt
                    if nxt < 0:
                        ei[e, E_QTAIL] = -1
                    else:
                        ri[nxt, R_PREV] = -1
                    slots[e, ei[e, E_BATCH]] = h
                    ei[e, E_BATCH] += 1
                    ei[e, E_KV_RES] += need
                    ei[e, E_PEND_TOK] += ri[h, R_ISL]
                    ei[e, E_QLEN] -= 1
                    ei[e, E_QTOK] -= ri[h, R_ISL]
                    ei[e, E_ADMITTED] += 1
                if ei[e, E_BATCH] == 0:
                    # nothing in flight: idle until the next queued request is ready, or t_end
                    h = ei[e, E_QHEAD]
                    nxt_t = t_end if h < 0 else min(rf[h, RF_READY], t_end)
                    if nxt_t <= clock:
                        # unreachable: submit() rejects requests that can never fit an empty engine
                        break
                    ef[e, F_E_IDLE] += idle_w * (nxt_t - clock)
                    ef[e, F_IDLE_S] += nxt_t - clock
                    clock = nxt_t
                    continue
                phase = 1 if ei[e, E_PEND_TOK] > 0 else 2
            if phase == 1:
                budget = budget0
                n_tok = 0
                n_req = 0
                ss = 0.0
                nb = ei[e, E_BATCH]
                for j in range(nb):
                    s = slots[e, j]
                    p = ri[s, R_PREFILLED]
                    rem = ri[s, R_ISL] - p
                    if rem <= 0:
                        continue
                    c = min(rem, budget)
                    n_tok += c
                    n_req += 1
                    # chunk attention area: summed over a prompt's chunks it equals isl^2
                    ss += float(p + c) * float(p + c) - float(p) * float(p)
                    ri[s, R_PREFILLED] = p + c
                    budget -= c
                    if budget == 0:
                        break
                t, en = _guard_step(par, ei, e, _t_pre(par, float(n_tok), float(n_req), ss),
                                    par[P_E0P] + par[P_EP] * n_tok + par[P_EA] * ss)
                clock += t
                ef[e, F_E_PRE] += en
                ef[e, F_PREFILL_S] += t
                ef[e, F_DUTY_PREFILL_S] += t
                ei[e, E_PREFILL_STEPS] += 1
                ei[e, E_PEND_TOK] -= n_tok
                ei[e, E_KV_CACHED] += n_tok
                n_done = 0
                for j in range(nb):
                    s = slots[e, j]
                    if ri[s, R_GENERATED] == 0 and ri[s, R_PREFILLED] == ri[s, R_ISL]:
                        # the prefill step emits the first token
                        ri[s, R_GENERATED] = 1
                        rf[s, RF_FIRST] = clock
                        ei[e, E_KV_CACHED] += 1
                        if ri[s, R_OSL] == 1:
                            n_done += 1
                if n_done > 0:
                    _retire(e, ri, rf, ei, slots, fin, fin_n, clock)
                if ei[e, E_PEND_TOK] > 0:
                    ei[e, E_PHASE] = 1
                elif ei[e, E_BATCH] > 0:
                    ei[e, E_PHASE] = 2
                else:
                    ei[e, E_PHASE] = 0
                continue
            # phase 2: one decode step over the whole (fully prefilled) batch
            nb = ei[e, E_BATCH]
            kv = ei[e, E_KV_CACHED]
            t, en = _guard_step(par, ei, e, _t_dec(par, float(nb), float(kv)),
                                par[P_E0D] + par[P_ED] * nb + par[P_EK] * kv)
            clock += t
            ef[e, F_E_DEC] += en
            ef[e, F_DECODE_S] += t
            ei[e, E_DECODE_STEPS] += 1
            n_done = 0
            for j in range(nb):
                s = slots[e, j]
                g = ri[s, R_GENERATED] + 1
                ri[s, R_GENERATED] = g
                if g >= ri[s, R_OSL]:
                    n_done += 1
            ei[e, E_KV_CACHED] += nb
            if n_done > 0:
                _retire(e, ri, rf, ei, slots, fin, fin_n, clock)
            ei[e, E_PHASE] = 0
        ef[e, F_CLOCK] = clock


@njit(cache=True)
def arrived_queue_tokens(ri, rf, ei, now, out_tok, out_n):  # pragma: no cover
    """Per engine: prompt tokens and requests waiting in the queue with ready time <= ``now``.

    Requests still in transit sit at the tail (the queue is ready-ordered), so they are
    subtracted by walking back from the tail.
    """
    for e in range(ei.shape[0]):
        tok = ei[e, E_QTOK]
        n = ei[e, E_QLEN]
        s = ei[e, E_QTAIL]
        while s >= 0 and rf[s, RF_READY] > now:
            tok -= ri[s, R_ISL]
            n -= 1
            s = ri[s, R_PREV]
        out_tok[e] = tok
        out_n[e] = n
