"""A pool of identical vLLM-style inference engines (geo paper §III-C), advanced as arrays.

Semantics, per engine (all times in s, energies in J, sizes in tokens):

- **Queue.** A submitted request reaches its engine's FIFO queue at ``ready_s`` (creation +
  scheduling delay + transfer). The queue is ordered by ``ready_s`` (ties: submission order);
  requests with ``ready_s`` in the future are *in transit*.
- **Iteration.** Finished requests are retired at the end of the step that produced their last
  token. An iteration admits from the queue head while ``batch + 1 <= max_num_seqs`` and the
  request's KV reservation fits ``kv_capacity_tokens``; then it runs prefill steps until every
  admitted prompt is prefilled, each step taking at most ``max_num_batched_tokens`` prompt tokens
  in admission order (a long prompt spans ``ceil(isl / budget)`` steps) and lasting
  ``t_pre(N, B_pre, sum n^2)`` while decode stalls; then one decode step ``t_dec(B, K)`` over the
  whole batch. No admission happens between the prefill steps of one iteration.
- **KV reservation.** Admission reserves ``isl + osl`` tokens (the paper reserves each request's
  KV use; with the true OSL known to the simulator this never needs vLLM's preemption). The
  decode model's ``K`` and the polled ``kv_tokens`` are the tokens actually cached
  (``prefilled + generated`` per request), not the reservation.
- **Attention term of a chunk.** A chunk of ``c`` tokens after ``p`` already-prefilled ones adds
  ``(p + c)^2 - p^2`` to ``sum n^2``, so a prompt's chunks add up to ``isl^2`` as unchunked.
- **Tokens.** The last prefill step of a prompt emits its first token; each decode step emits one
  token per batched request. A request with ``osl = 1`` finishes with its prefill.
- **Energy** per engine (IT energy; host power and PUE are the cluster's): ``E_pre`` per prefill
  step and ``E_dec`` per decode step, charged when the step starts, never more than TP x TDP times
  the step time (clamped and counted in ``power_clamps``; inside a profile's calibrated range this
  cannot happen, see :meth:`EngineProfile.check_step_models`); ``idle_w`` (W) times the time
  the engine has nothing in flight (empty batch and no request ready in its queue).
- **Per request:** ``TTFT = first_token_s - created_s``; ``TPOT = (finish_s - first_token_s) /
  (osl - 1)``, the mean decode interval including prefill stalls (NaN when ``osl = 1``: no decode
  interval; ``TPOT > budget`` is then False); ``E2E = finish_s - created_s``.

The loop itself lives in :mod:`servegym.envs.geo.sim.engine_kernels` (numba). ``advance`` runs each
engine to ``t_end_s``; an engine's own clock may pass ``t_end_s`` by one step (a step that started
before ``t_end_s`` runs to completion), and requests submitted later join at its next iteration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from servegym.envs.geo.sim import engine_kernels as K
from servegym.envs.geo.sim.profile import EngineProfile

from servegym.errors import ActionError, ConfigError

# Fitted step polynomials can dip to or below 0 far outside their calibrated range; a step never lasts
# less than this (s), which also guarantees the loop makes progress. Such steps are counted
# (``EnginePool.time_floors``), as are steps whose energy is clamped to TP x TDP x time (``power_clamps``).
MIN_STEP_S = 1e-4


@dataclass(frozen=True)
class EngineStats:
    """Per-engine counters at ``now_s`` (arrays of shape ``(n_engines,)``), what the provisioner polls.

    ``batch``: requests admitted and not finished (equals ``in_flight``); ``queued``: requests
    waiting in the engine queue (ready, not admitted); ``in_transit``: submitted, not yet ready;
    ``queued_tokens``: prompt tokens of the waiting requests plus the prompt tokens of admitted
    ones not yet taken by a prefill step (a running step's chunk counts as done) (tokens); ``kv_tokens``: cached KV tokens; ``kv_frac``: ``kv_tokens /
    kv_capacity_tokens``; ``kv_reserved_tokens``: the admission reservations; ``prefill_duty``:
    fraction of ``window_s`` spent in prefill steps since the previous poll (steps counted when
    they start, clipped to [0, 1]).
    """

    now_s: float
    window_s: float
    batch: NDArray[np.int64]
    queued: NDArray[np.int64]
    in_transit: NDArray[np.int64]
    queued_tokens: NDArray[np.int64]
    kv_tokens: NDArray[np.int64]
    kv_reserved_tokens: NDArray[np.int64]
    kv_frac: NDArray[np.float64]
    prefill_duty: NDArray[np.float64]
    in_flight: NDArray[np.int64]


@dataclass(frozen=True)
class FinishedRequests:
    """Requests finished since the previous drain, as column arrays (s, tokens)."""

    request_id: NDArray[np.int64]
    engine: NDArray[np.int64]
    created_s: NDArray[np.float64]
    ready_s: NDArray[np.float64]
    first_token_s: NDArray[np.float64]
    finish_s: NDArray[np.float64]
    ttft_s: NDArray[np.float64]
    tpot_s: NDArray[np.float64]
    e2e_s: NDArray[np.float64]
    input_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.request_id.shape[0])

    @staticmethod
    def concat(parts: list[FinishedRequests]) -> FinishedRequests:
        """Join several drains into one (in the given order)."""
        if not parts:
            return _empty_finished()
        names = FinishedRequests.__dataclass_fields__
        return FinishedRequests(**{n: np.concatenate([getattr(p, n) for p in parts]) for n in names})


def _empty_finished() -> FinishedRequests:
    i = np.zeros(0, dtype=np.int64)
    f = np.zeros(0, dtype=np.float64)
    return FinishedRequests(i, i, f, f, f, f, f, f, f, i, i)


def profile_params(profile: EngineProfile) -> NDArray[np.float64]:
    """The profile's coefficients in the kernels' ``P_*`` order."""
    par = np.zeros(K.N_PAR)
    pre, dec, en = profile.prefill, profile.decode, profile.energy
    par[K.P_KNEE], par[K.P_SLO], par[K.P_SHI] = pre.knee_tokens, pre.tok_slope_lo, pre.tok_slope_hi
    par[K.P_B0], par[K.P_B1], par[K.P_B2] = pre.b0, pre.b1, pre.b2
    par[K.P_AL0], par[K.P_AL1], par[K.P_AL2] = dec.alpha
    par[K.P_BE0], par[K.P_BE1], par[K.P_BE2] = dec.beta
    par[K.P_E0P], par[K.P_EP], par[K.P_EA] = en.e0_pre, en.e_p, en.e_a
    par[K.P_E0D], par[K.P_ED], par[K.P_EK] = en.e0_dec, en.e_d, en.e_k
    par[K.P_IDLE_W] = profile.idle_w
    par[K.P_MAX_SEQS] = profile.max_num_seqs
    par[K.P_BUDGET] = profile.max_num_batched_tokens
    par[K.P_KV_CAP] = profile.kv_capacity_tokens
    par[K.P_MIN_STEP] = MIN_STEP_S
    par[K.P_CAP_W] = profile.tp * profile.tdp_w
    return par


class EnginePool:
    """``n_engines`` identical engines of one profile, advanced together.

    Conservation holds at every call: ``arrived == finished + queued + in_flight`` where
    ``queued`` counts submitted requests not yet admitted (in transit or waiting) and
    ``in_flight`` those admitted and not finished.
    """

    def __init__(self, profile: EngineProfile, n_engines: int, *, initial_capacity: int = 1024) -> None:
        if not isinstance(profile, EngineProfile):
            raise ConfigError(f"profile must be an EngineProfile, got {type(profile).__name__}")
        if int(n_engines) != n_engines or n_engines < 1:
            raise ConfigError(f"n_engines = {n_engines!r} is out of range; allowed: integers >= 1")
        self.profile = profile
        self.n_engines = int(n_engines)
        self.now_s = 0.0
        self._par = profile_params(profile)
        n = self.n_engines
        self._ei = np.zeros((n, K.N_EI), dtype=np.int64)
        self._ei[:, K.E_QHEAD] = -1
        self._ei[:, K.E_QTAIL] = -1
        self._ef = np.zeros((n, K.N_EF), dtype=np.float64)
        self._slots = np.full((n, profile.max_num_seqs), -1, dtype=np.int64)
        self._fin_n = np.zeros(1, dtype=np.int64)
        cap = max(int(initial_capacity), 16)
        self._ri = np.full((cap, K.N_RI), -1, dtype=np.int64)
        self._rf = np.full((cap, K.N_RF), np.nan, dtype=np.float64)
        self._fin = np.full(cap, -1, dtype=np.int64)
        self._free = np.arange(cap - 1, -1, -1, dtype=np.int64)  # a stack: pop from the end
        self._n_free = cap
        self._last_poll_s = 0.0

    # ------------------------------------------------------------------ requests in
    def submit(
        self,
        engine: ArrayLike,
        request_id: ArrayLike,
        created_s: ArrayLike,
        ready_s: ArrayLike,
        input_tokens: ArrayLike,
        output_tokens: ArrayLike,
    ) -> None:
        """Queue requests on engines. ``ready_s`` (s) is when each reaches its engine (``>= now_s``).

        Raises :class:`ActionError` (nothing is queued) for an engine index outside
        ``[0, n_engines)``, token counts < 1, ``input + output > kv_capacity_tokens``,
        ``ready_s < now_s``, ``ready_s < created_s`` or arrays of unequal length.
        """
        eng = np.asarray(engine, dtype=np.int64).reshape(-1)
        rid = np.asarray(request_id, dtype=np.int64).reshape(-1)
        created = np.asarray(created_s, dtype=np.float64).reshape(-1)
        ready = np.asarray(ready_s, dtype=np.float64).reshape(-1)
        isl = np.asarray(input_tokens, dtype=np.int64).reshape(-1)
        osl = np.asarray(output_tokens, dtype=np.int64).reshape(-1)
        m = eng.shape[0]
        if not (rid.shape[0] == created.shape[0] == ready.shape[0] == isl.shape[0] == osl.shape[0] == m):
            raise ActionError(
                "submit: engine, request_id, created_s, ready_s, input_tokens, output_tokens must have equal "
                f"lengths, got {[eng.size, rid.size, created.size, ready.size, isl.size, osl.size]}"
            )
        if m == 0:
            return
        self._check_submit(eng, created, ready, isl, osl)
        if self._n_free < m:
            self._grow(self._ri.shape[0] - self._n_free + m)
        new = self._free[self._n_free - m : self._n_free][::-1].copy()
        self._n_free -= m
        K.submit_kernel(self._ri, self._rf, self._ei, new, eng, rid, created, ready, isl, osl)

    def _check_submit(self, eng, created, ready, isl, osl) -> None:
        n, cap = self.n_engines, self.profile.kv_capacity_tokens
        if eng.min() < 0 or eng.max() >= n:
            bad = eng[(eng < 0) | (eng >= n)][0]
            raise ActionError(f"submit: engine = {bad} is out of range; allowed: [0, {n - 1}]")
        if isl.min() < 1 or osl.min() < 1:
            raise ActionError("submit: input_tokens and output_tokens must be >= 1")
        need = isl + osl
        if need.max() > cap:
            raise ActionError(
                f"submit: input_tokens + output_tokens = {int(need.max())} is out of range; allowed: <= "
                f"kv_capacity_tokens = {cap} of profile {self.profile.name!r}"
            )
        if not (np.isfinite(ready).all() and np.isfinite(created).all()):
            raise ActionError("submit: created_s and ready_s must be finite")
        if ready.min() < self.now_s - 1e-9:
            raise ActionError(
                f"submit: ready_s = {ready.min():.6f} is out of range; allowed: >= now_s = {self.now_s:.6f}"
            )
        if (ready < created - 1e-12).any():
            raise ActionError("submit: ready_s must be >= created_s for every request")

    def _grow(self, needed: int) -> None:
        old = self._ri.shape[0]
        cap = max(2 * old, needed)
        ri = np.full((cap, K.N_RI), -1, dtype=np.int64)
        rf = np.full((cap, K.N_RF), np.nan, dtype=np.float64)
        ri[:old], rf[:old] = self._ri, self._rf
        fin = np.full(cap, -1, dtype=np.int64)
        fin[:old] = self._fin
        free = np.empty(cap, dtype=np.int64)
        # new slots go below the old free ones, so the old free slots are reused first
        n_new = cap - old
        free[:n_new] = np.arange(cap - 1, old - 1, -1)
        free[n_new : n_new + self._n_free] = self._free[: self._n_free]
        self._ri, self._rf, self._fin, self._free = ri, rf, fin, free
        self._n_free += n_new

    # ------------------------------------------------------------------ time
    def advance(self, t_end_s: float) -> None:
        """Run every engine up to ``t_end_s`` (s, ``>= now_s``); sets ``now_s = t_end_s``."""
        t_end = float(t_end_s)
        if not t_end >= self.now_s:
            raise ActionError(f"advance: t_end_s = {t_end_s!r} is out of range; allowed: >= now_s = {self.now_s}")
        if t_end == self.now_s:
            return
        K.advance_kernel(self._ri, self._rf, self._ei, self._ef, self._slots, self._fin, self._fin_n, self._par, t_end)
        self.now_s = t_end

    # ------------------------------------------------------------------ observation
    def poll(self) -> EngineStats:
        """Per-engine counters at ``now_s``; starts a new prefill-duty window."""
        n = self.n_engines
        q_tok = np.zeros(n, dtype=np.int64)
        q_n = np.zeros(n, dtype=np.int64)
        K.arrived_queue_tokens(self._ri, self._rf, self._ei, self.now_s, q_tok, q_n)
        ei, ef = self._ei, self._ef
        window = self.now_s - self._last_poll_s
        if window > 0:
            duty = np.clip(ef[:, K.F_DUTY_PREFILL_S] / window, 0.0, 1.0)
        else:
            duty = np.zeros(n)
        ef[:, K.F_DUTY_PREFILL_S] = 0.0
        self._last_poll_s = self.now_s
        kv = ei[:, K.E_KV_CACHED].copy()
        batch = ei[:, K.E_BATCH].copy()
        return EngineStats(
            now_s=self.now_s,
            window_s=window,
            batch=batch,
            queued=q_n,
            in_transit=ei[:, K.E_QLEN] - q_n,
            queued_tokens=q_tok + ei[:, K.E_PEND_TOK],
            kv_tokens=kv,
            kv_reserved_tokens=ei[:, K.E_KV_RES].copy(),
            kv_frac=kv / float(self.profile.kv_capacity_tokens),
            prefill_duty=duty,
            in_flight=batch.copy(),
        )

    def drain_finished(self) -> FinishedRequests:
        """Requests finished since the previous call (in finishing order per engine); frees their slots."""
        k = int(self._fin_n[0])
        if k == 0:
            return _empty_finished()
        s = self._fin[:k].copy()
        ri, rf = self._ri[s], self._rf[s]
        created, ready = rf[:, K.RF_CREATED], rf[:, K.RF_READY]
        first, finish = rf[:, K.RF_FIRST], rf[:, K.RF_FINISH]
        osl = ri[:, K.R_OSL]
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(osl > 1, (finish - first) / (osl - 1), np.nan)
        out = FinishedRequests(
            request_id=ri[:, K.R_ID],
            engine=ri[:, K.R_ENGINE],
            created_s=created,
            ready_s=ready,
            first_token_s=first,
            finish_s=finish,
            ttft_s=first - created,
            tpot_s=tpot,
            e2e_s=finish - created,
            input_tokens=ri[:, K.R_ISL],
            output_tokens=osl,
        )
        self._fin_n[0] = 0
        self._free[self._n_free : self._n_free + k] = s
        self._n_free += k
        return out

    # ------------------------------------------------------------------ counters
    @property
    def energy_prefill_j(self) -> NDArray[np.float64]:
        """Prefill step energy per engine (J)."""
        return self._ef[:, K.F_E_PRE].copy()

    @property
    def energy_decode_j(self) -> NDArray[np.float64]:
        """Decode step energy per engine (J)."""
        return self._ef[:, K.F_E_DEC].copy()

    @property
    def energy_idle_j(self) -> NDArray[np.float64]:
        """Idle energy per engine (J): ``idle_w`` times the time with nothing in flight."""
        return self._ef[:, K.F_E_IDLE].copy()

    @property
    def power_clamps(self) -> NDArray[np.int64]:
        """Steps per engine whose model energy implied more than TP x TDP and was clamped to it."""
        return self._ei[:, K.E_POWER_CLAMPS].copy()

    @property
    def time_floors(self) -> NDArray[np.int64]:
        """Steps per engine whose model time fell below ``MIN_STEP_S`` and was raised to it."""
        return self._ei[:, K.E_TIME_FLOORS].copy()

    @property
    def energy_j(self) -> NDArray[np.float64]:
        """Total IT energy per engine (J) = prefill + decode + idle (no host power, no PUE)."""
        return self._ef[:, K.F_E_PRE] + self._ef[:, K.F_E_DEC] + self._ef[:, K.F_E_IDLE]

    @property
    def clock_s(self) -> NDArray[np.float64]:
        """Each engine's own clock (s): ``>= now_s`` while a step that started before ``now_s`` runs."""
        return self._ef[:, K.F_CLOCK].copy()

    @property
    def idle_s(self) -> NDArray[np.float64]:
        """Time each engine spent with nothing in flight (s)."""
        return self._ef[:, K.F_IDLE_S].copy()

    @property
    def prefill_s(self) -> NDArray[np.float64]:
        """Time in prefill steps per engine (s)."""
        return self._ef[:, K.F_PREFILL_S].copy()

    @property
    def decode_s(self) -> NDArray[np.float64]:
        """Time in decode steps per engine (s)."""
        return self._ef[:, K.F_DECODE_S].copy()

    @property
    def prefill_steps(self) -> NDArray[np.int64]:
        return self._ei[:, K.E_PREFILL_STEPS].copy()

    @property
    def decode_steps(self) -> NDArray[np.int64]:
        return self._ei[:, K.E_DECODE_STEPS].copy()

    @property
    def arrived_per_engine(self) -> NDArray[np.int64]:
        return self._ei[:, K.E_SUBMITTED].copy()

    @property
    def finished_per_engine(self) -> NDArray[np.int64]:
        return self._ei[:, K.E_FINISHED].copy()

    @property
    def queued_per_engine(self) -> NDArray[np.int64]:
        """Submitted and not admitted (in transit or waiting), per engine."""
        return self._ei[:, K.E_QLEN].copy()

    @property
    def in_flight_per_engine(self) -> NDArray[np.int64]:
        """Admitted and not finished, per engine."""
        return self._ei[:, K.E_BATCH].copy()

    @property
    def arrived(self) -> int:
        """Requests submitted so far."""
        return int(self._ei[:, K.E_SUBMITTED].sum())

    @property
    def finished(self) -> int:
        return int(self._ei[:, K.E_FINISHED].sum())

    @property
    def queued(self) -> int:
        return int(self._ei[:, K.E_QLEN].sum())

    @property
    def in_flight(self) -> int:
        return int(self._ei[:, K.E_BATCH].sum())

    def check_invariants(self) -> None:
        """Assert the engine's internal bookkeeping (for tests): caps, KV, conservation, links."""
        ei, p = self._ei, self.profile
        assert (ei[:, K.E_BATCH] >= 0).all() and (ei[:, K.E_BATCH] <= p.max_num_seqs).all(), "batch cap"
        assert (ei[:, K.E_KV_RES] <= p.kv_capacity_tokens).all(), "KV reservation over capacity"
        assert (ei[:, K.E_KV_CACHED] <= ei[:, K.E_KV_RES]).all(), "cached KV over reservation"
        assert (ei[:, K.E_KV_CACHED] >= 0).all() and (ei[:, K.E_PEND_TOK] >= 0).all()
        sub = ei[:, K.E_SUBMITTED]
        assert (sub == ei[:, K.E_FINISHED] + ei[:, K.E_QLEN] + ei[:, K.E_BATCH]).all(), "conservation"
        for e in range(self.n_engines):
            n, s, last = 0, ei[e, K.E_QHEAD], -1
            while s >= 0:
                assert self._ri[s, K.R_PREV] == last and self._ri[s, K.R_ENGINE] == e, "queue links"
                last, s, n = s, self._ri[s, K.R_NEXT], n + 1
            assert n == ei[e, K.E_QLEN] and last == ei[e, K.E_QTAIL], "queue length"
            b = self._slots[e, : ei[e, K.E_BATCH]]
            cached = self._ri[b, K.R_PREFILLED] + self._ri[b, K.R_GENERATED]
            assert cached.sum() == ei[e, K.E_KV_CACHED], "cached KV sum"
            assert (self._ri[b, K.R_ISL] + self._ri[b, K.R_OSL]).sum() == ei[e, K.E_KV_RES], "reservation sum"
