"""Request-level discrete-event simulator of a PD-disaggregated deployment.

It reuses the analytical model's timing and power primitives -- :meth:`PDModel.prefill_time_s`,
:meth:`PDModel.decode_iteration_time_s` and the capped ramps of the calibration -- and adds what the
model averages away: individual requests, queues, KV reservations, continuous batching and runtime
reconfiguration. Times in s, energy in J, power in W, lengths in tokens.

Request path (paper §3.1.3, §4.2, §5.1; SGLang 0.5.9 PD semantics, the admission semantics stated in
:mod:`servegym.envs.pd.sim.model`, whose capacity approximates the reserved part of the prefill wait by
Kingman's formula where this simulator tracks it exactly):

1. **Arrival.** Each request is assigned a decode instance in round-robin order and joins that
   instance's admission queue (FCFS with head-of-line blocking, as SGLang's decode pre-allocation queue).
2. **KV reservation (admission).** The head request is admitted when the decode instance's free pool,
   ``C_tok - (physical tokens + R * requests present)``, holds ``l_in + R`` slots; this is SGLang's
   ``_allocatable_tokens`` test and the paper's accounting: a request waiting for or in prefill holds
   ``l_in + R``, an active decode request ``l_ctx + R``. An admitted request is handed to a prefill
   instance in round-robin order (assignment at admission: with no blocking this is assignment at
   arrival, and it never targets a removed instance).
3. **Prefill.** FCFS single-server per prefill instance (in admission order), service time
   ``t_P(l_in)`` from the compute roofline. Its end is the first token (TTFT = first token - arrival;
   the KV transfer is overlapped, as the model assumes, and costs no time).
4. **Decode.** Continuous batching: a request whose prefill ended joins its decode instance's batch at
   the next iteration boundary; each iteration gives every member one token and lasts
   ``decode_iteration_time_s(B, sum of contexts)`` (memory roofline with t_iter and t_req); a request's
   context is ``l_in + tokens generated so far`` (Lemma 4.1's convention). It leaves after its
   ``l_out``-th token and frees its slots. TPOT = (finish - first token) / (l_out - 1).
5. **Physical overflow (retraction).** Contexts grow by one slot per token; the reservation rule alone
   keeps the physical pool within ``C_tok`` when every output is at most ``R + 1`` tokens. With longer
   outputs an iteration can need more free slots than remain; then, like SGLang's ``retract_decode``,
   the active request with the fewest generated tokens is retracted until the iteration fits: its KV is
   released, it returns to the front of the admission queue (by arrival) and, once re-admitted with a
   reservation of ``l_in + generated + R``, its context is recomputed by a prefill before it resumes.

Power (eqs. 12-14): time is cut into bins of ``power_window_s`` (default 1 s) on an absolute grid. In
each bin a prefill instance runs at normalized throughput x_P = busy fraction (served rate / mu_P with
mu_P = 1 / E[t_P]) and a decode instance at x_D = decode tokens per s / (mu_D^max E[l_out - 1]) (served
request rate over the full-pool capacity, counted in tokens so a bin holds no partial requests); its
energy is ramp(x) times its in-service time in the bin. The normalizers come from the simulator's
:class:`PDModel` (its workload). Starting instances draw the loaded-idle power of the hardware
(115 W, App. B.3); removed instances draw nothing (the paper excludes their GPUs, §5.1/App. B.3).

Reconfiguration (:meth:`PDSimulator.set_deployment`): added instances start serving ``startup_delay_s``
later (default :data:`DEFAULT_STARTUP_DELAY_S`). Removal is immediate; starting instances are cancelled
before serving ones, and among serving ones the most recently started goes first. A removed instance's
work is **re-queued**, never lost:

* prefill instance: its queue and its running prefill (restarted from scratch) move to the remaining
  prefill instances round-robin, keeping their admission order and their decode reservations;
* decode instance: every request bound to it (admission queue, reservations waiting for or in prefill,
  batch) returns to the admission queues of the remaining decode instances (round-robin, by arrival);
  requests that already had tokens keep them and their TTFT, and re-prefill their context before
  resuming, as after a retraction.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from servegym.envs.pd.sim.model import PDModel, check_deployment
from servegym.envs.workload import EmpiricalLengths, FixedLengths, LengthSampler, Requests

from servegym.errors import ConfigError, check_range

#: Default start-up delay of an added instance, s. Model load of Qwen3-32B (2N = 65.6 GB of bf16 weights)
#: from local NVMe at about 2 GB/s takes about 33 s; SGLang's CUDA-graph capture (batch sizes up to 256)
#: and warm-up add roughly half a minute, so about 60 s until the instance serves. An assumption (the
#: paper excludes start-up transients, §5.1), overridable per simulator.
DEFAULT_STARTUP_DELAY_S = 60.0
#: Default width of the power-averaging bins, s (a per-second power sample, as nvidia-smi/DCGM report).
DEFAULT_POWER_WINDOW_S = 1.0

# Request states.
_PENDING, _ADMIT_WAIT, _PREFILL, _DECODE, _DONE = 0, 1, 2, 3, 4
# Instance states.
_STARTING, _ACTIVE, _REMOVED = 0, 1, 2
# Event kinds (heap entries: time, seq, kind, instance index, token).
_EV_PREFILL, _EV_DECODE, _EV_START = 0, 1, 2


@dataclass
class _Instance:
    idx: int
    role: str  # "p" or "d"
    state: int
    since_s: float  # start of the current power accounting segment
    started_s: float  # when it began serving (inf while starting)
    # Power accounting within the current bin.
    busy_s: float = 0.0  # prefill busy time in the bin
    tokens: int = 0  # decode tokens in the bin


class _Prefill(_Instance):
    def __init__(self, idx: int, state: int, now: float) -> None:
        super().__init__(idx, "p", state, now, now if state == _ACTIVE else math.inf)
        self.queue: list[tuple[int, int, int]] = []  # (admission seq, rid, ticket)
        self.current = -1  # rid in prefill, -1 when idle
        self.job = 0  # increments per started job; stale completion events are ignored
        self.seg_start = 0.0  # start of the current busy segment


class _Decode(_Instance):
    def __init__(self, idx: int, state: int, now: float) -> None:
        super().__init__(idx, "d", state, now, now if state == _ACTIVE else math.inf)
        self.admit: list[tuple[float, int, int]] = []  # (arrival, rid, ticket): FCFS admission queue
        self.phys = 0  # physical KV slots held (inputs of reserved requests + contexts of decoding ones)
        self.n_present = 0  # requests holding a reservation here (prefill stage, joining, decoding)
        self.committed = 0  # sum of the reservations l_eff + R taken at admission (<= C_tok)
        self.members: set[int] = set()  # every rid holding a reservation here
        self.joining: list[int] = []  # prefill done, waiting for the next iteration boundary
        self.batch: set[int] = set()
        self.finish_heap: list[tuple[int, int, int]] = []  # (last iteration index, rid, ticket)
        self.k = 0  # iterations completed
        self.sum_ctx = 0  # context tokens of the batch in the coming iteration
        self.running = False
        self.epoch = 0  # increments when the running iteration is invalidated (removal)


class PDSimulator:
    """Request-level simulation of ``n_p`` prefill and ``n_d`` decode instances of one :class:`PDModel`.

    The dynamics make no random choices (routing is round-robin, ties are broken by event order), so the
    same requests and calls give identical results; ``seed`` seeds :attr:`rng` for callers that draw
    their request streams alongside the simulator.
    """

    def __init__(self, model: PDModel, n_p: int, n_d: int, *, seed: int = 0,
                 startup_delay_s: float = DEFAULT_STARTUP_DELAY_S,
                 power_window_s: float = DEFAULT_POWER_WINDOW_S) -> None:
        if not isinstance(model, PDModel):
            raise ConfigError(f"model = {type(model).__name__}; allowed: a servegym.envs.pd.sim.model.PDModel")
        check_deployment(n_p, n_d)
        check_range("startup_delay_s", startup_delay_s, 0.0, 86_400.0)
        check_range("power_window_s", power_window_s, 1e-3, 3_600.0)
        self.model = model
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        self.startup_delay_s = float(startup_delay_s)
        self.power_window_s = float(power_window_s)
        cal, srv = model.system.calibration, model.system.serving
        self.c_tok = int(srv.kv_tokens)
        self.reserve = round(srv.reserve_tokens)
        self._ramp_p, self._ramp_d = cal.prefill_ramp, cal.decode_ramp
        self._idle_w = float(model.system.hardware.loaded_idle_power_w)
        self._mu_p = float(model.mu_p)
        self._tok_ref = float(model.mu_d_max) * float(model.decode_tokens)  # full-pool decode tokens/s
        self._iter_coef = self._linear_iteration_coefficients(model)
        self.now_s = 0.0
        # Requests (Python lists: scalar access in the event loop is much faster than numpy indexing).
        self._arr: list[float] = []
        self._lin: list[int] = []
        self._lout: list[int] = []
        self._tp: list[float] = []  # prefill time of the fresh request, s
        self._state: list[int] = []
        self._dinst: list[int] = []
        self._leff: list[int] = []  # tokens the next prefill processes (l_in, or the context after a requeue)
        self._gen: list[int] = []  # tokens generated so far (valid outside the batch)
        self._k0: list[int] = []  # iteration index at which the request entered the batch
        self._g0: list[int] = []  # tokens generated when it entered the batch
        self._ticket: list[int] = []
        self._adm_seq: list[int] = []
        self._res: list[int] = []  # reservation l_eff + R taken at the latest admission
        self._pinst: list[int] = []  # prefill instance of the latest prefill start (-1 before)
        self._pstart: list[float] = []  # start time of the latest prefill, s
        self._first: list[float] = []
        self._finish: list[float] = []
        self._pending: list[int] = []  # rids not yet arrived, sorted by (arrival, rid)
        self._pend_ptr = 0
        # Instances.
        self._pre: list[_Prefill] = [_Prefill(i, _ACTIVE, 0.0) for i in range(n_p)]
        self._dec: list[_Decode] = [_Decode(i, _ACTIVE, 0.0) for i in range(n_d)]
        self._rr_p = 0
        self._rr_d = 0
        self._events: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self._adm_counter = 0
        # Power bins.
        self._bin_end = self.power_window_s
        self._energy_j = 0.0  # cumulative, closed bins and removed instances' partial bins
        # Counters.
        self.arrived = 0
        self.finished = 0
        self.in_decode = 0
        self.retractions = 0
        self.requeued = 0
        # Window accumulators (since the previous window_metrics call).
        self._w_t0 = 0.0
        self._w_energy0 = 0.0
        self._w_arrived0 = 0
        self._w_ttft: list[float] = []
        self._w_tpot: list[float] = []
        self._w_e2e: list[float] = []
        self._w_finished = 0
        self._w_tokens = 0
        self._w_batch_time = 0.0  # integral of the batch size over decode-iteration time (request-s)
        self._w_iter_time = 0.0

    # ------------------------------------------------------------------------------------ public API
    def submit(self, requests: Requests) -> None:
        """Add requests; their arrivals must be at or after :attr:`now_s` (s)."""
        if not isinstance(requests, Requests):
            raise ConfigError(f"requests = {type(requests).__name__}; allowed: servegym.envs.workload.Requests")
        n = len(requests)
        if n == 0:
            return
        arr = np.asarray(requests.arrival_s, dtype=float)
        if arr[0] < self.now_s - 1e-9:
            raise ConfigError(f"requests.arrival_s = {arr[0]:g} s is out of range; allowed: >= now_s = "
                              f"{self.now_s:g} s (the simulator cannot serve the past)")
        lin = np.asarray(requests.input_tokens, dtype=np.int64)
        lout = np.asarray(requests.output_tokens, dtype=np.int64)
        worst = int((lin + lout).max()) + self.reserve
        if worst > self.c_tok:
            raise ConfigError(f"input_tokens + output_tokens = {worst - self.reserve} is out of range; allowed: "
                              f"<= C_tok - R = {self.c_tok - self.reserve} tokens (a request must fit the decode "
                              "pool alone)")
        tp = np.asarray(self.model.prefill_time_s(lin), dtype=float)
        base = len(self._arr)
        self._arr.extend(arr.tolist())
        self._lin.extend(lin.tolist())
        self._lout.extend(lout.tolist())
        self._tp.extend(tp.tolist())
        self._state.extend([_PENDING] * n)
        self._dinst.extend([-1] * n)
        self._leff.extend(lin.tolist())
        self._gen.extend([0] * n)
        self._k0.extend([0] * n)
        self._g0.extend([0] * n)
        self._ticket.extend([0] * n)
        self._adm_seq.extend([0] * n)
        self._res.extend([0] * n)
        self._pinst.extend([-1] * n)
        self._pstart.extend([math.nan] * n)
        self._first.extend([math.nan] * n)
        self._finish.extend([math.nan] * n)
        new = list(range(base, base + n))
        rest = self._pending[self._pend_ptr:]
        if rest and self._arr[rest[-1]] > arr[0]:
            merged = rest + new
            merged.sort(key=lambda r: (self._arr[r], r))
            self._pending = merged
        else:
            self._pending = rest + new
        self._pend_ptr = 0

    def advance(self, t_end_s: float) -> None:
        """Run the simulation up to ``t_end_s`` (s, >= now_s)."""
        if not (isinstance(t_end_s, (int, float, np.floating, np.integer)) and math.isfinite(t_end_s)):
            raise ConfigError(f"t_end_s = {t_end_s!r}; allowed: a finite number of seconds >= now_s")
        if t_end_s < self.now_s - 1e-12:
            raise ConfigError(f"t_end_s = {t_end_s:g} is out of range; allowed: >= now_s = {self.now_s:g} s")
        ev = self._events
        pend, arr = self._pending, self._arr
        while True:
            t_ev = ev[0][0] if ev else math.inf
            t_arr = arr[pend[self._pend_ptr]] if self._pend_ptr < len(pend) else math.inf
            t_bin = self._bin_end
            t = min(t_ev, t_arr, t_bin)
            if t > t_end_s:
                break
            if t_bin <= t_ev and t_bin <= t_arr:
                self.now_s = t_bin
                self._close_bin(t_bin)
            elif t_ev <= t_arr:
                _, _, kind, idx, token = heapq.heappop(ev)
                self.now_s = t_ev
                if kind == _EV_DECODE:
                    self._decode_done(self._dec[idx], token)
                elif kind == _EV_PREFILL:
                    self._prefill_done(self._pre[idx], token)
                else:
                    self._startup_done(idx)
            else:
                rid = pend[self._pend_ptr]
                self._pend_ptr += 1
                self.now_s = t_arr
                self._arrive(rid)
        self.now_s = float(t_end_s)

    def set_deployment(self, n_p: int, n_d: int) -> None:
        """Target ``n_p`` prefill and ``n_d`` decode instances (serving plus starting), effective at now_s.

        Added instances serve after :attr:`startup_delay_s`; removal is immediate and re-queues the
        removed instance's work (module docstring).
        """
        check_deployment(n_p, n_d)
        self._resize(self._pre, int(n_p))
        self._resize(self._dec, int(n_d))

    def deployment(self) -> dict[str, int]:
        """Serving and starting instance counts."""
        return {"n_p": self._count(self._pre, _ACTIVE), "n_d": self._count(self._dec, _ACTIVE),
                "n_p_starting": self._count(self._pre, _STARTING), "n_d_starting": self._count(self._dec, _STARTING)}

    def power_w(self) -> float:
        """Instantaneous deployment power estimate from the bin in progress, W (serving + starting GPUs)."""
        return sum(self._instance_power(inst, self.now_s) for inst in [*self._pre, *self._dec]
                   if inst.state != _REMOVED)

    def counters(self) -> dict[str, int]:
        """Cumulative counters; conservation: arrived = finished + in_prefill_queue + in_decode."""
        return {"arrived": self.arrived, "finished": self.finished,
                "in_prefill_queue": self.arrived - self.finished - self.in_decode, "in_decode": self.in_decode,
                "retractions": self.retractions, "requeued": self.requeued}

    def kv_state(self) -> list[dict[str, int]]:
        """Per live decode instance: physical slots, committed reservations, SGLang accounting, batch size."""
        return [{"instance": d.idx, "state": d.state, "physical": d.phys, "committed": d.committed,
                 "accounted": d.phys + self.reserve * d.n_present, "present": d.n_present, "batch": len(d.batch),
                 "admission_queue": self._live_len(d.admit)}
                for d in self._dec if d.state != _REMOVED]

    def request_table(self) -> dict[str, NDArray[Any]]:
        """Per submitted request: arrival, first-token and finish times (s, NaN if not reached), lengths,
        state (0 not arrived, 1 waiting for a reservation, 2 waiting for or in prefill, 3 decoding, 4 done),
        decode instance, prefill instance and start of the latest prefill (s)."""
        return {"arrival_s": np.asarray(self._arr), "first_token_s": np.asarray(self._first),
                "finish_s": np.asarray(self._finish), "input_tokens": np.asarray(self._lin, dtype=np.int64),
                "output_tokens": np.asarray(self._lout, dtype=np.int64),
                "state": np.asarray(self._state, dtype=np.int8),
                "decode_instance": np.asarray(self._dinst, dtype=np.int64),
                "prefill_instance": np.asarray(self._pinst, dtype=np.int64),
                "prefill_start_s": np.asarray(self._pstart)}

    def window_metrics(self) -> dict[str, Any]:
        """Metrics since the previous call (or the start), then a new window begins.

        Keys: ``t0_s``, ``t1_s``; ``arrived``, ``finished`` (requests in the window); ``ttft_s`` (array,
        requests whose first token came in the window), ``tpot_s`` and ``e2e_s`` (arrays, requests that
        finished in the window; TPOT only for l_out > 1); ``energy_j`` (energy of serving and starting
        instances over the window; the call closes the power bin in progress), ``mean_power_w``
        (energy / window length, W);
        ``queue_len`` (requests arrived and not yet prefilled at t1: waiting for a reservation, for
        prefill or in prefill); ``n_p``, ``n_d`` (serving), ``n_p_starting``, ``n_d_starting``;
        ``decode_tokens``; ``mean_batch`` (time-averaged decode batch per busy decode instance);
        cumulative ``arrived_total``, ``finished_total``, ``in_prefill_queue``, ``in_decode``,
        ``retractions``, ``requeued`` (also grouped under ``cumulative``); ``kv_used_frac`` (accounted
        KV / C_tok, mean over serving decode instances).
        """
        t0, t1 = self._w_t0, self.now_s
        for inst in [*self._pre, *self._dec]:  # a window boundary also closes a power bin
            self._settle_power(inst, t1)
        energy = self._energy_j - self._w_energy0
        c = self.counters()
        dep = self.deployment()
        kv = [s["accounted"] / self.c_tok for s in self.kv_state() if s["state"] == _ACTIVE]
        out: dict[str, Any] = {
            "t0_s": t0, "t1_s": t1,
            "arrived": self.arrived - self._w_arrived0, "finished": self._w_finished,
            "ttft_s": np.asarray(self._w_ttft, dtype=float), "tpot_s": np.asarray(self._w_tpot, dtype=float),
            "e2e_s": np.asarray(self._w_e2e, dtype=float),
            "energy_j": energy, "mean_power_w": energy / (t1 - t0) if t1 > t0 else 0.0,
            "queue_len": c["in_prefill_queue"], **dep,
            "decode_tokens": self._w_tokens,
            "mean_batch": self._w_batch_time / self._w_iter_time if self._w_iter_time > 0 else 0.0,
            "arrived_total": c["arrived"], "finished_total": c["finished"],
            "in_prefill_queue": c["in_prefill_queue"], "in_decode": c["in_decode"],
            "retractions": c["retractions"], "requeued": c["requeued"],
            "cumulative": c, "kv_used_frac": float(np.mean(kv)) if kv else 0.0,
        }
        self._w_t0, self._w_energy0, self._w_arrived0 = t1, self._energy_j, self.arrived
        self._w_ttft, self._w_tpot, self._w_e2e = [], [], []
        self._w_finished = self._w_tokens = 0
        self._w_batch_time = self._w_iter_time = 0.0
        return out

    # ------------------------------------------------------------------------------------ internals
    @staticmethod
    def _linear_iteration_coefficients(model: PDModel) -> tuple[float, float, float] | None:
        """(intercept, per context token, per request) of ``model.decode_iteration_time_s``, read off the
        model's own function so the dynamics stay defined in one place; None (call the function each
        iteration) if it is not affine in (batch, context) at probe points."""
        f = model.decode_iteration_time_s
        c0 = float(f(0, 0))
        c_ctx = float(f(0, 1_000_000)) - c0
        c_b = float(f(1_000, 0)) - c0
        c_ctx, c_b = c_ctx / 1_000_000, c_b / 1_000
        for b, ctx in ((1, 4_097), (37, 151_000), (250, 230_000)):
            if not math.isclose(float(f(b, ctx)), c0 + c_ctx * ctx + c_b * b, rel_tol=1e-12):
                return None
        return c0, c_ctx, c_b

    def _push(self, t: float, kind: int, idx: int, token: int) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, kind, idx, token))

    @staticmethod
    def _count(pool: list[Any], state: int) -> int:
        return sum(1 for i in pool if i.state == state)

    def _live_len(self, queue: list[tuple[Any, int, int]]) -> int:
        return sum(1 for _, rid, tk in queue if self._ticket[rid] == tk)

    def _next_active(self, pool: list[Any], attr: str) -> Any:
        """Round-robin over serving instances (the counter walks the instance list)."""
        n = len(pool)
        start = getattr(self, attr)
        for j in range(n):
            inst = pool[(start + j) % n]
            if inst.state == _ACTIVE:
                setattr(self, attr, (start + j + 1) % n)
                return inst
        raise AssertionError("no serving instance")  # pragma: no cover - n >= 1 serving is an invariant

    def _arrive(self, rid: int) -> None:
        self.arrived += 1
        d = self._next_active(self._dec, "_rr_d")
        self._enqueue_admission(rid, d)
        self._try_admit(d)

    def _enqueue_admission(self, rid: int, d: _Decode) -> None:
        self._state[rid] = _ADMIT_WAIT
        self._dinst[rid] = d.idx
        self._ticket[rid] += 1
        heapq.heappush(d.admit, (self._arr[rid], rid, self._ticket[rid]))

    def _try_admit(self, d: _Decode) -> None:
        q, r_slots = d.admit, self.reserve
        while q:
            _, rid, tk = q[0]
            if self._ticket[rid] != tk:
                heapq.heappop(q)
                continue
            need = self._leff[rid] + r_slots
            if self.c_tok - d.phys - r_slots * d.n_present < need:
                return  # head-of-line blocking, as SGLang's pre-allocation queue
            heapq.heappop(q)
            d.phys += self._leff[rid]
            d.n_present += 1
            d.committed += need
            self._res[rid] = need
            d.members.add(rid)
            self._adm_counter += 1
            self._adm_seq[rid] = self._adm_counter
            self._to_prefill(rid, self._next_active(self._pre, "_rr_p"))

    def _to_prefill(self, rid: int, p: _Prefill) -> None:
        self._state[rid] = _PREFILL
        self._ticket[rid] += 1
        heapq.heappush(p.queue, (self._adm_seq[rid], rid, self._ticket[rid]))
        if p.current < 0:
            self._start_prefill(p)

    def _start_prefill(self, p: _Prefill) -> None:
        q = p.queue
        while q:
            _, rid, tk = heapq.heappop(q)
            if self._ticket[rid] != tk:
                continue
            p.current = rid
            p.job += 1
            p.seg_start = self.now_s
            self._pinst[rid] = p.idx
            self._pstart[rid] = self.now_s
            dur = self._tp[rid] if self._gen[rid] == 0 else float(self.model.prefill_time_s(self._leff[rid]))
            self._push(self.now_s + dur, _EV_PREFILL, p.idx, p.job)
            return
        p.current = -1

    def _prefill_done(self, p: _Prefill, job: int) -> None:
        if p.state != _ACTIVE or job != p.job or p.current < 0:
            return
        rid, now = p.current, self.now_s
        p.busy_s += now - p.seg_start
        p.current = -1
        self._start_prefill(p)
        d = self._dec[self._dinst[rid]]
        if self._gen[rid] == 0:  # a fresh prefill produces the first token
            self._gen[rid] = 1
            self._first[rid] = now
            self._w_ttft.append(now - self._arr[rid])
        if self._gen[rid] >= self._lout[rid]:  # l_out == 1: done at the first token
            self._release(d, rid, self._leff[rid])
            self._complete(rid)
            self._try_admit(d)
            return
        self._state[rid] = _DECODE
        self.in_decode += 1
        d.joining.append(rid)
        if not d.running:
            self._start_iteration(d)

    def _start_iteration(self, d: _Decode) -> None:
        """Admit joiners at the boundary, retract on physical overflow, then run one iteration."""
        lin, g = self._lin, self._gen
        for rid in d.joining:
            ctx = lin[rid] + g[rid]
            d.phys += ctx - self._leff[rid]
            self._leff[rid] = ctx
            self._k0[rid] = d.k
            self._g0[rid] = g[rid]
            d.batch.add(rid)
            d.sum_ctx += ctx
            heapq.heappush(d.finish_heap, (d.k + self._lout[rid] - g[rid] - 1, rid, self._ticket[rid]))
        d.joining.clear()
        while d.batch and d.phys + len(d.batch) > self.c_tok:
            self._retract(d)
        if not d.batch:
            d.running = False
            return
        b = len(d.batch)
        if self._iter_coef is None:
            dur = float(self.model.decode_iteration_time_s(b, d.sum_ctx))
        else:
            c0, c_ctx, c_b = self._iter_coef
            dur = c0 + c_ctx * d.sum_ctx + c_b * b
        d.running = True
        self._w_batch_time += b * dur
        self._w_iter_time += dur
        self._push(self.now_s + dur, _EV_DECODE, d.idx, d.epoch)

    def _decode_done(self, d: _Decode, epoch: int) -> None:
        if d.state != _ACTIVE or epoch != d.epoch:
            return
        b = len(d.batch)
        d.k += 1
        d.phys += b
        d.sum_ctx += b
        d.tokens += b
        self._w_tokens += b
        fh = d.finish_heap
        freed = False
        while fh and fh[0][0] < d.k:
            _, rid, tk = heapq.heappop(fh)
            if tk != self._ticket[rid] or rid not in d.batch:  # retracted earlier
                continue
            ctx = self._lin[rid] + self._lout[rid]
            d.batch.discard(rid)
            d.sum_ctx -= ctx
            self._gen[rid] = self._lout[rid]
            self.in_decode -= 1
            self._release(d, rid, ctx)
            self._complete(rid)
            freed = True
        if freed:
            self._try_admit(d)
        self._start_iteration(d)

    def _retract(self, d: _Decode) -> None:
        """Release the active request with the fewest generated tokens (ties: longest input, newest)."""
        k = d.k
        victim = min(d.batch, key=lambda r: (self._g0[r] + k - self._k0[r], -self._lin[r], -r))
        self.retractions += 1
        self._evict(d, victim)
        self._enqueue_admission(victim, d)

    def _evict(self, d: _Decode, rid: int) -> None:
        """Take a batch member out of decode, release its slots, keep its generated tokens."""
        g = self._g0[rid] + d.k - self._k0[rid]
        ctx = self._lin[rid] + g
        d.batch.discard(rid)
        d.sum_ctx -= ctx
        self._gen[rid] = g
        self._leff[rid] = ctx
        self.in_decode -= 1
        self._release(d, rid, ctx)

    def _release(self, d: _Decode, rid: int, held: int) -> None:
        d.phys -= held
        d.n_present -= 1
        d.members.discard(rid)
        d.committed -= self._res[rid]

    def _complete(self, rid: int) -> None:
        now = self.now_s
        self._state[rid] = _DONE
        self._ticket[rid] += 1
        self._finish[rid] = now
        self.finished += 1
        self._w_finished += 1
        self._w_e2e.append(now - self._arr[rid])
        if self._lout[rid] > 1:
            self._w_tpot.append((now - self._first[rid]) / (self._lout[rid] - 1))

    # --- reconfiguration ------------------------------------------------------------------------
    def _resize(self, pool: list[Any], target: int) -> None:
        live = [i for i in pool if i.state != _REMOVED]
        now = self.now_s
        if target > len(live):
            for _ in range(target - len(live)):
                inst: Any = (_Prefill if pool is self._pre else _Decode)(len(pool), _STARTING, now)
                pool.append(inst)
                self._push(now + self.startup_delay_s, _EV_START, inst.idx if pool is self._pre else -1 - inst.idx, 0)
            return
        excess = len(live) - target
        starting = [i for i in live if i.state == _STARTING]
        serving = sorted((i for i in live if i.state == _ACTIVE), key=lambda i: (i.started_s, i.idx))
        victims = (starting[::-1] + serving[::-1])[:excess]
        for inst in victims:
            self._remove(inst)

    def _startup_done(self, code: int) -> None:
        inst: Any = self._pre[code] if code >= 0 else self._dec[-1 - code]
        if inst.state != _STARTING:
            return  # cancelled before it served
        self._settle_power(inst, self.now_s)
        inst.state = _ACTIVE
        inst.started_s = self.now_s

    def _remove(self, inst: Any) -> None:
        now = self.now_s
        self._settle_power(inst, now)
        was_active = inst.state == _ACTIVE
        inst.state = _REMOVED
        if not was_active:
            return
        if inst.role == "p":
            moved = [rid for _, rid, tk in inst.queue if self._ticket[rid] == tk]
            if inst.current >= 0:
                moved.append(inst.current)
            inst.current = -1
            inst.job += 1
            inst.queue = []
            moved.sort(key=lambda r: self._adm_seq[r])
            for rid in moved:
                self.requeued += 1
                self._to_prefill(rid, self._next_active(self._pre, "_rr_p"))
            return
        d: _Decode = inst
        d.epoch += 1
        d.running = False
        bound = {rid for _, rid, tk in d.admit if self._ticket[rid] == tk}
        d.admit = []
        for rid in list(d.batch):
            self._evict(d, rid)
            bound.add(rid)
        for rid in d.joining:  # prefill done, not yet in the batch: keeps its first token
            self.in_decode -= 1
            self._release(d, rid, self._leff[rid])
            self._leff[rid] = self._lin[rid] + self._gen[rid]
            bound.add(rid)
        d.joining.clear()
        for rid in list(d.members):  # reservations waiting for or in prefill: cancel the prefill
            self._release(d, rid, self._leff[rid])
            self._cancel_prefill(rid)
            bound.add(rid)
        d.finish_heap = []
        d.sum_ctx = 0
        targets: set[int] = set()
        for rid in sorted(bound, key=lambda r: (self._arr[r], r)):
            self.requeued += 1
            nd = self._next_active(self._dec, "_rr_d")
            self._enqueue_admission(rid, nd)
            targets.add(nd.idx)
        for idx in sorted(targets):
            self._try_admit(self._dec[idx])

    def _cancel_prefill(self, rid: int) -> None:
        self._ticket[rid] += 1  # invalidates its prefill-queue entry
        for p in self._pre:
            if p.state == _ACTIVE and p.current == rid:
                p.busy_s += self.now_s - p.seg_start
                p.current = -1
                p.job += 1
                self._start_prefill(p)

    # --- power ---------------------------------------------------------------------------------
    def _instance_power(self, inst: Any, t: float) -> float:
        if inst.state == _STARTING:
            return self._idle_w
        dur = t - inst.since_s
        if inst.role == "p":
            busy = inst.busy_s + (t - inst.seg_start if inst.current >= 0 else 0.0)
            x = busy / dur if dur > 0 else (1.0 if inst.current >= 0 else 0.0)
            return float(self._ramp_p(x))
        x = inst.tokens / dur / self._tok_ref if dur > 0 else 0.0
        return float(self._ramp_d(x))

    def _settle_power(self, inst: Any, t: float) -> None:
        """Add the instance's energy from its segment start to t and start a new segment."""
        if inst.state == _REMOVED:
            return
        dur = t - inst.since_s
        if dur > 0:
            self._energy_j += self._instance_power(inst, t) * dur
        inst.since_s = t
        inst.busy_s = 0.0
        inst.tokens = 0
        if inst.role == "p" and inst.current >= 0:
            inst.seg_start = t

    def _close_bin(self, t: float) -> None:
        for inst in self._pre:
            self._settle_power(inst, t)
        for inst in self._dec:
            self._settle_power(inst, t)
        self._bin_end = t + self.power_window_s


# ------------------------------------------------------------------------------------ helpers
def pd_length_sampler(spec: str) -> LengthSampler:
    """The request-length sampler that matches :func:`~servegym.envs.pd.sim.workload_moments.parse_workload`.

    ``fixed:IN:OUT``; ``azure-conv`` / ``azure-code`` (pairs kept, inputs <= 32,768) and ``mooncake``
    (inputs <= 38,000, input and output drawn independently), as in App. B.4 -- so the simulator's
    stream and the analytical model's moments describe the same distribution.
    """
    from servegym.envs.pd.sim.workload_moments import (
        INDEPENDENT_TRACES,
        TRACE_MAX_INPUT_TOKENS,
        parse_workload,
    )

    key = spec.strip()
    if key in TRACE_MAX_INPUT_TOKENS:
        return EmpiricalLengths.from_trace(key, max_input_tokens=TRACE_MAX_INPUT_TOKENS[key],
                                           paired=key not in INDEPENDENT_TRACES)
    w = parse_workload(key)  # validates fixed:IN:OUT (and raises a ConfigError naming the allowed specs)
    return FixedLengths(round(w.in_m1), round(w.out_mean))

