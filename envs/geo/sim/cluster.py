"""The geo-distributed serving simulator (§III): topology -> DCs -> nodes -> engines.

Structure. Every site of the topology is a DC; a DC has ``nodes_per_dc`` identical nodes of
``gpus_per_node`` GPUs, each node ``gpus_per_node / tp`` engines of the config's profile. All
engines of the run live in one :class:`~servegym.envs.geo.sim.engine.EnginePool`, laid out DC-major
(DC d owns engines ``[d·E, (d+1)·E)``, node n of d owns ``[d·E + n·e, d·E + (n+1)·e)``).

Flow of a request. The load generator emits it (Poisson arrivals of the config's lengths, or a
trace) and dispatches it round-robin to the regional schedulers (``origin``). Its scheduler
decides a DC through the decision API (per request on arrival, or per window), after the
modelled scheduling delay the policy reports; a remote DC adds the scheduler-to-DC RTT. Inside
the DC the inter-node scheduler picks nodes round-robin and the node's host picks engines
round-robin (a DC's k-th request goes to node ``k mod nodes``, engine ``(k div nodes) mod e``
of that node). The request reaches the engine queue at ``decision + delay + RTT``; its TTFT is
measured from its arrival at the scheduler, so it includes window wait, delay and transfer.
The origin scheduler's decision is final: a request forwarded to a remote region costs the RTT
but does not wait again in the remote scheduler's window.

Time. A provisioner polls the pool every Δp (or Δp/#DCs, staggered). Between two polls the
snapshot is the only thing schedulers see, so every decision whose time falls in a poll
interval is taken on the same snapshot; the simulator hands them out (``next_decision`` /
``next_batch``), buffers the placements, then submits them in one call and advances the pool
to the next poll time in one call.

Energy and carbon. Engine energy (prefill and decode steps, idle power while nothing is in
flight) comes from the pool; every node adds ``host_power_w`` for the whole run; the DC's
facility energy is PUE x (engines + hosts); carbon accrues per poll interval at the DC's CI at
the start of the interval (exact when the CI steps on the hour and Δp divides an hour).

Run length. Arrivals cover the serving window ``[0, duration_s)``. The results' energy, carbon,
utilization and idle figures are those of that window (the fleet's operational emissions while
it serves the stream, as in the paper's fixed-length runs); the simulation then keeps going,
with no new arrivals, until every request finished or ``drain_s`` passed, so that every
request's TTFT/TPOT is known. ``carbon_with_drain_g`` adds the drain's carbon.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray
from servegym.envs.geo.sim.config import GeoConfig
from servegym.envs.geo.sim.decisions import DecisionContext, GeoPolicy, validate_actions
from servegym.envs.geo.sim.estimator import J_PER_KWH, Estimates, Estimator
from servegym.envs.geo.sim.metrics import GeoResults, percentiles, slo_verdicts
from servegym.envs.geo.sim.provisioner import Provisioner, Snapshot

from servegym.errors import ActionError, ConfigError

#: Lengths drawn from the length sampler (with its own seed stream) to estimate the workload's
#: mean ISL/OSL for the estimator in ``mean`` OSL mode, when the sampler has no exact ``means()``
#: (or a ``max_input_tokens`` filter changes them).
MEAN_LENGTH_SAMPLES = 20_000


#: Rows of the per-DC accounting arrays (J, J, J, J, gCO2, g/kWh·s, batch-fraction·s).
_ACC = ("prefill_j", "decode_j", "idle_j", "host_j", "carbon_g", "ci_s", "util_s")
_PRE, _DEC, _IDLE, _HOST, _CO2, _CI, _UTIL = range(len(_ACC))


@dataclass(frozen=True)
class _Group:
    """Requests decided together within one poll interval (a window, or the interval's arrivals)."""

    rows: NDArray[np.int64]
    decision_s: NDArray[np.float64]
    time_s: float
    start: int = -1  # first row when the rows are contiguous (request mode): cheap slicing

def _make_requests(config: GeoConfig, n_regions: int, rng: np.random.Generator) -> tuple[Any, float, float]:
    """The run's request stream, and the mean ISL/OSL the estimator may use."""
    if config.trace is not None:
        from servegym.envs.traces import load_trace
        from servegym.envs.workload import Requests

        # the trace's rows count against the run's request ceiling before the file is read (rate x duration is
        # checked for generated arrivals when the config is built; a trace's size is known only here)
        tr = load_trace(config.trace, time_scale=config.trace_time_scale, max_input_tokens=config.max_input_tokens,
                        max_rows=config.max_expected_requests)
        keep = tr.arrival_s < config.duration_s
        n = int(keep.sum())
        reqs = Requests(
            arrival_s=np.asarray(tr.arrival_s[keep], dtype=np.float64),
            input_tokens=np.asarray(tr.input_tokens[keep], dtype=np.int64),
            output_tokens=np.asarray(tr.output_tokens[keep], dtype=np.int64),
            origin=(np.arange(n) % n_regions).astype(np.int16),
        )
        return reqs, float(np.mean(tr.input_tokens)), float(np.mean(tr.output_tokens))
    from servegym.envs.workload import length_sampler, make_requests, poisson_arrivals

    sampler = length_sampler(config.lengths)
    arrival_rng, length_rng, mean_rng = rng.spawn(3)
    arrivals = poisson_arrivals(config.rate_rps, config.duration_s, arrival_rng)
    reqs = make_requests(arrivals, sampler, length_rng, n_origins=n_regions)
    if config.max_input_tokens is None and hasattr(sampler, "means"):
        isl_mean, osl_mean = sampler.means()
        return reqs, float(isl_mean), float(osl_mean)
    isl_s, osl_s = sampler.sample(MEAN_LENGTH_SAMPLES, mean_rng)
    if config.max_input_tokens is not None:
        keep = reqs.input_tokens <= config.max_input_tokens
        if not keep.all():
            from servegym.envs.workload import Requests

            reqs = Requests(arrival_s=reqs.arrival_s[keep], input_tokens=reqs.input_tokens[keep],
                            output_tokens=reqs.output_tokens[keep], origin=reqs.origin[keep])
        ks = isl_s <= config.max_input_tokens
        isl_s, osl_s = isl_s[ks], osl_s[ks]
    return reqs, float(np.mean(isl_s)), float(np.mean(osl_s))


def _fixed_ci(fixed: NDArray[np.float64], t_s: float) -> NDArray[np.float64]:
    """The CI clock of ``ci_mode="fixed"``: the same per-DC intensities (g/kWh) at every time ``t_s``."""
    return fixed


class _HourlyCI:
    """The CI clock of the hourly modes: per-DC intensities (g/kWh) of the grid hour ``t_s`` falls in, counted
    from ``start``, cached per hour. A class rather than a closure so that a simulation pickles."""

    def __init__(self, topo: Any, start: pd.Timestamp) -> None:
        self.topo = topo
        self.start = start
        self.cache: dict[int, NDArray[np.float64]] = {}

    def __call__(self, t_s: float) -> NDArray[np.float64]:
        h = int(t_s // 3600.0)
        if h not in self.cache:
            self.cache[h] = np.asarray(self.topo.ci(self.start + pd.Timedelta(hours=h)), dtype=np.float64)
        return self.cache[h]


class GeoSimulation:
    """One geo run: ``next_decision``/``next_batch`` -> policy -> ``apply`` until ``None``.

    Args:
        config: the scenario.
        seed: overrides ``config.seed`` (every random draw of the run derives from it).
        requests: an explicit request stream (a ``servegym.envs.workload.Requests``; ``origin``
            must index the topology's regions) instead of the one the config generates; the
            estimator's mean ISL/OSL are then the stream's own.
        ci_at: optional ``t_s -> (D,) gCO2/kWh`` replacing the topology's CI (e.g. a what-if).
        ci_seen_at: with ``config.ci_signal = "day-ahead"``, the CI the snapshots report (the forecast);
            defaults to the topology's series 24 h earlier, and is required when ``ci_at`` is given.
            Carbon is charged at ``ci_at`` (the realized CI) either way.
        osl_predictor: required when ``config.osl_mode == "predicted"``: maps the stream's prompt
            lengths (int64 array, tokens) to predicted output lengths (tokens, > 0), called once
            per run; it must not look at the true output lengths. The run keeps what the estimator
            uses per request (``osl_mode``: the true, predicted or mean lengths) as ``osl_estimates``.

    Raises:
        ConfigError: a request (prompt + output) larger than an engine's KV pool, an origin
            outside the regions, unsorted arrivals, a missing or bad ``osl_predictor``.
    """

    def __init__(self, config: GeoConfig, seed: int | None = None, requests: Any = None,
                 ci_at: Callable[[float], NDArray[np.float64]] | None = None,
                 osl_predictor: Callable[[NDArray[np.int64]], ArrayLike] | None = None,
                 ci_seen_at: Callable[[float], NDArray[np.float64]] | None = None) -> None:
        from servegym.envs.geo.sim.engine import EnginePool
        from servegym.envs.grid import get_topology

        self.config = config
        self.seed = int(config.seed if seed is None else seed)
        rng = np.random.default_rng(self.seed)
        topo = get_topology(config.topology)
        if config.pue == "reported":
            from servegym.envs.grid import reported_pue

            topo = topo.with_pue(reported_pue(topo)[0])
        elif config.pue is not None:
            topo = topo.with_pue(float(config.pue))
        self.topology = topo
        self.profile = config.engine_profile()
        self.dc_names: tuple[str, ...] = tuple(s.name for s in topo.sites)
        self.n_dcs = len(self.dc_names)
        self.n_regions = len(topo.regions)
        self.dc_region = np.asarray(topo.site_region, dtype=np.int64)
        self.rtt_dc = np.asarray(topo.rtt_s, dtype=np.float64)[:, self.dc_region]  # (regions, D)
        self.pue = np.array([s.pue for s in topo.sites], dtype=np.float64)
        self.nodes_per_dc = config.nodes_per_dc
        self.engines_per_node = config.engines_per_node
        self.engines_per_dc = config.engines_per_dc
        self.n_engines = self.n_dcs * self.engines_per_dc
        self._ci_at = ci_at if ci_at is not None else self._topology_ci()
        self._ci_seen_at = self._ci_at  # what the snapshots report (the schedulers' CI signal)
        if config.ci_signal == "day-ahead":
            if ci_seen_at is None and ci_at is not None:
                raise ConfigError("ci_signal = 'day-ahead' with an explicit ci_at needs ci_seen_at (the forecast "
                                  "of that clock); allowed: both, or neither (the topology's series)")
            self._ci_seen_at = ci_seen_at if ci_seen_at is not None else self._topology_ci(lag_h=24)

        if requests is None:
            requests, isl_mean, osl_mean = _make_requests(config, self.n_regions, rng)
        else:
            isl_mean = float(np.mean(requests.input_tokens)) if len(requests) else 1.0
            osl_mean = float(np.mean(requests.output_tokens)) if len(requests) else 1.0
        self.requests = requests
        self.n_requests = len(requests)
        self._arrival = np.asarray(requests.arrival_s, dtype=np.float64)
        self._isl = np.asarray(requests.input_tokens, dtype=np.int64)
        self._osl = np.asarray(requests.output_tokens, dtype=np.int64)
        self._origin = np.asarray(requests.origin, dtype=np.int64)
        if self.n_requests:
            if np.any(np.diff(self._arrival) < 0):
                raise ConfigError("requests.arrival_s must be ascending")
            if self._origin.min() < 0 or self._origin.max() >= self.n_regions:
                raise ConfigError(f"requests.origin must be in [0, {self.n_regions - 1}] (the topology's regions)")
            # An engine reserves prompt + output tokens of KV on admission: a request that cannot
            # fit an empty engine would wait forever.
            longest = int((self._isl + self._osl).max())
            if longest > self.profile.kv_capacity_tokens:
                raise ConfigError(
                    f"kv_capacity_tokens = {self.profile.kv_capacity_tokens} is smaller than the longest request "
                    f"(prompt + output = {longest} tokens); allowed: >= {longest} (or lower max_input_tokens)"
                )
        self.isl_mean, self.osl_mean = isl_mean, osl_mean
        if config.osl_mode == "oracle":
            self.osl_estimates = self._osl.astype(np.float64)
        elif config.osl_mode == "predicted":
            if osl_predictor is None:
                raise ConfigError("osl_mode = 'predicted' needs GeoSimulation(osl_predictor=...); allowed without one: 'mean', 'oracle'")
            pred = np.asarray(osl_predictor(self._isl.copy()), dtype=np.float64).reshape(-1)
            if pred.shape != (self.n_requests,) or not np.all(np.isfinite(pred)) or (pred.size and pred.min() <= 0):
                raise ConfigError(f"osl_predictor must return {self.n_requests} finite OSLs > 0 tokens")
            self.osl_estimates = pred
        else:
            self.osl_estimates = np.full(self.n_requests, osl_mean)
        self.estimator = Estimator(self.profile, config.ttft_slo_s, config.tpot_slo_s, isl_mean, osl_mean)

        self.pool = EnginePool(self.profile, self.n_engines)
        self.provisioner = Provisioner(self.n_dcs, self.engines_per_dc, config.poll_interval_s, config.poll_mode,
                                       self._ci_seen_at, self.pue, self.dc_region, self.rtt_dc)
        self.snapshot: Snapshot = self.provisioner.snapshot
        self._step_s = self.provisioner.step_s
        self._k = 0  # current poll interval [k·step, (k+1)·step)
        self._done = False
        self._end_arrivals_s = float(config.duration_s)
        if self.n_requests:
            self._end_arrivals_s = max(self._end_arrivals_s, float(self._arrival[-1]))

        if config.decision_mode == "window":
            self._build_windows()

        # Placement bookkeeping.
        self._rr_dc = np.zeros(self.n_dcs, dtype=np.int64)
        self._dispatched = np.zeros((self.n_regions, self.n_dcs), dtype=np.int64)
        self.placed_dc = np.full(self.n_requests, -1, dtype=np.int64)
        self.sched_delay = np.zeros(self.n_requests, dtype=np.float64)
        self._n_placed = 0
        self._buf: list[tuple[NDArray, ...]] = []
        self._n_buffered = 0

        # Decision hand-out state.
        self._groups: list[_Group] = []
        self._gi = 0
        self._cursor = 0
        self._group_est: tuple[_Group, Estimates] | None = None
        self._outstanding: DecisionContext | None = None
        self._token = 0
        self._time_s = 0.0
        # decisions in the policy's unit (a request, or a window of requests) and the apply() calls that
        # made them (per-request policies are batched per poll interval for speed: one call, many decisions)
        self.n_decisions = 0
        self.n_decision_calls = 0

        # Accounting.
        # Per-DC accumulators, rows named by _ACC, for the whole run and for the serving window
        # [0, duration_s] (the figures the results report; the drain only completes latencies).
        self._energy_prev = np.zeros((3, self.n_engines))
        self._acc_all = np.zeros((len(_ACC), self.n_dcs))
        self._acc_win = np.zeros((len(_ACC), self.n_dcs))
        self._t_all = 0.0
        self._t_win = 0.0
        self._finished: list[Any] = []
        self.n_finished = 0
        self.n_finished_violations = 0
        #: (finished requests, sum of their OSL estimates, sum of their true OSLs), up to the latest poll
        self.osl_feedback: tuple[int, float, float] = (0, 0.0, 0.0)
        self._load_interval()

    # -- set-up helpers -------------------------------------------------------------------
    def _topology_ci(self, lag_h: int = 0) -> Callable[[float], NDArray[np.float64]]:
        topo = self.topology
        start = pd.Timestamp(self.config.ci_start) if self.config.ci_start is not None else pd.Timestamp(topo.base_hour)
        base = pd.Timestamp(topo.base_hour)
        if start.tzinfo is None and base.tzinfo is not None:
            start = start.tz_localize("UTC")
        start = start.floor("h") - pd.Timedelta(hours=lag_h)
        if self.config.ci_mode == "fixed":
            fixed = np.asarray(topo.ci(start), dtype=np.float64)
            fixed.flags.writeable = False
            return functools.partial(_fixed_ci, fixed)
        return _HourlyCI(topo, start)

    def _build_windows(self) -> None:
        """Per scheduler, windows of ``window_s`` from their first request, closing early at
        ``window_max_requests``; decided at their close."""
        cfg = self.config
        closes: list[float] = []
        sched: list[int] = []
        members: list[NDArray[np.int64]] = []
        for s in range(self.n_regions):
            rows = np.flatnonzero(self._origin == s)
            a = self._arrival[rows]
            i, n = 0, rows.size
            while i < n:
                end_t = a[i] + cfg.window_s
                j = int(np.searchsorted(a, end_t, side="left"))
                if j - i >= cfg.window_max_requests:
                    j = i + cfg.window_max_requests
                    close = float(a[j - 1])
                else:
                    close = float(end_t)
                closes.append(close)
                sched.append(s)
                members.append(rows[i:j])
                i = j
        order = np.lexsort((np.asarray(sched), np.asarray(closes))) if closes else np.zeros(0, dtype=np.int64)
        self._win_close = np.asarray(closes, dtype=np.float64)[order]
        self._win_rows = [members[i] for i in order]
        if len(self._win_close):
            self._end_arrivals_s = max(self._end_arrivals_s, float(self._win_close[-1]))

    def _load_interval(self) -> None:
        """Prepare the decision groups whose decision time falls in the current poll interval."""
        t0, t1 = self._k * self._step_s, (self._k + 1) * self._step_s
        groups: list[_Group] = []
        if self.config.decision_mode == "request":
            lo, hi = np.searchsorted(self._arrival, [t0, t1], side="left")
            if hi > lo:
                rows = np.arange(lo, hi, dtype=np.int64)
                groups.append(_Group(rows, self._arrival[lo:hi], float(self._arrival[hi - 1]), int(lo)))
        else:
            lo, hi = np.searchsorted(self._win_close, [t0, t1], side="left")
            for w in range(lo, hi):
                rows = self._win_rows[w]
                close = float(self._win_close[w])
                groups.append(_Group(rows, np.full(rows.size, close), close))
        self._groups = groups
        self._gi = 0
        self._cursor = 0
        self._group_est = None

    # -- the decision loop ------------------------------------------------------------------
    @property
    def now_s(self) -> float:
        """Simulated time of the latest decision handed out (or of the latest poll)."""
        return self._time_s

    def _current_group(self) -> _Group | None:
        """The group with undecided requests, advancing intervals as needed; None at the end."""
        while True:
            if self._done:
                return None
            while self._gi < len(self._groups):
                g = self._groups[self._gi]
                if self._cursor < g.rows.size:
                    return g
                self._gi += 1
                self._cursor = 0
                self._group_est = None
            self._finish_interval()

    def _group_estimates(self, g: _Group, snap: Snapshot) -> Estimates:
        """Estimates of a whole group, computed once (all its requests see the same snapshot)."""
        if self._group_est is None or self._group_est[0] is not g:
            r = g.rows
            self._group_est = (g, self.estimator.estimate(snap, self._isl[r], self.osl_estimates[r], self._origin[r]))
        return self._group_est[1]

    def _group_rows(self, g: _Group, snap: Snapshot, sl: slice) -> Estimates:
        """The estimates of ``g``'s requests ``sl`` (a context's ``estimate_fn``: a bound method, not a
        closure, so a simulation in the middle of a run pickles)."""
        return self._group_estimates(g, snap).rows(sl)

    def _context(self, g: _Group, sl: slice, time_s: float) -> DecisionContext:
        rows = g.rows[sl]
        self._token += 1
        snap = self.snapshot
        # Contiguous rows are sliced (views); windows gather their rows.
        idx: Any = slice(g.start + sl.start, g.start + sl.stop) if g.start >= 0 else rows
        ctx = DecisionContext(
            mode=self.config.decision_mode, time_s=time_s, request_id=rows, scheduler=self._origin[idx],
            arrival_s=self._arrival[idx], decision_s=g.decision_s[sl], input_tokens=self._isl[idx],
            osl_estimate=self.osl_estimates[idx],
            output_tokens=self._osl[idx] if self.config.osl_mode == "oracle" else None,
            snapshot=self.snapshot, dispatched=self._dispatched_view(), estimate_fn=functools.partial(self._group_rows, g, snap, sl),
            dc_names=self.dc_names, token=self._token, estimator=self.estimator, osl_feedback=self.osl_feedback,
        )
        self._outstanding = ctx
        self._time_s = time_s
        return ctx

    def _dispatched_view(self) -> NDArray[np.int64]:
        out = self._dispatched.copy()
        out.flags.writeable = False
        return out

    def _check_no_outstanding(self) -> None:
        if self._outstanding is not None:
            raise ActionError("the previous DecisionContext has not been applied; call sim.apply(ctx, dc_indices) first")

    def next_decision(self) -> DecisionContext | None:
        """The next decision point: one request (request mode) or one window; ``None`` at the end."""
        self._check_no_outstanding()
        g = self._current_group()
        if g is None:
            return None
        if self.config.decision_mode == "request":
            i = self._cursor
            return self._context(g, slice(i, i + 1), float(g.decision_s[i]))
        return self._context(g, slice(0, g.rows.size), g.time_s)

    def next_batch(self) -> DecisionContext | None:
        """Like :meth:`next_decision`, but in request mode every undecided arrival up to the next
        provisioner poll at once (all see the same snapshot); decide them as if one by one in order."""
        self._check_no_outstanding()
        g = self._current_group()
        if g is None:
            return None
        if self.config.decision_mode == "request":
            return self._context(g, slice(self._cursor, g.rows.size), g.time_s)
        return self._context(g, slice(0, g.rows.size), g.time_s)

    def apply(self, ctx: DecisionContext, dc_indices: ArrayLike, sched_delay_s: ArrayLike = 0.0) -> None:
        """Place the requests of ``ctx`` on DCs ``dc_indices`` (shape (n,)), each leaving its
        scheduler ``sched_delay_s`` (s, scalar or (n,), >= 0) after the decision time.

        Raises:
            ActionError: ``ctx`` is not the outstanding context, or an index/delay is invalid
                (nothing is changed then).
        """
        if ctx is not self._outstanding:
            raise ActionError("this DecisionContext is not the outstanding one (already applied or stale)")
        dc = validate_actions(ctx, dc_indices)
        n = ctx.n_requests
        if isinstance(sched_delay_s, (float, int, np.floating, np.integer)) or np.ndim(sched_delay_s) == 0:
            delay: float | NDArray[np.float64] = float(sched_delay_s)  # type: ignore[arg-type]
            bad = not 0.0 <= delay < np.inf
        else:
            delay = np.asarray(sched_delay_s, dtype=np.float64)
            if delay.shape != (n,):
                raise ActionError(f"sched_delay_s has shape {delay.shape}; allowed: a scalar or ({n},)")
            bad = bool(n) and (not np.all(np.isfinite(delay)) or delay.min() < 0)
        if bad:
            raise ActionError(f"sched_delay_s must be finite and >= 0 s; got {sched_delay_s!r}")
        self._outstanding = None
        if n:
            self.placed_dc[ctx.request_id] = dc
            if n == 1:
                self._dispatched[ctx.scheduler[0], dc[0]] += 1
            else:
                np.add.at(self._dispatched, (ctx.scheduler, dc), 1)
            # Engine choice, ready times and submission happen at the end of the poll interval,
            # in decision order (the engines cannot see anything before then).
            self._buf.append((ctx.request_id, dc, ctx.decision_s, delay))
            self._n_buffered += n
            self._n_placed += n
        self._cursor += n
        self.n_decisions += n if self.config.decision_mode == "request" else 1
        self.n_decision_calls += 1

    def run(self, policy: GeoPolicy, progress: bool = False) -> GeoResults:
        """The policy loop: decide every decision point with ``policy`` and return the results.

        A ``batchable`` policy gets one context per poll interval (``next_batch``)."""
        policy.reset(self.n_dcs, self.n_regions, self.seed)
        batch = bool(getattr(policy, "batchable", False))
        nxt = self.next_batch if batch else self.next_decision
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=round(self._end_arrivals_s, 1), unit="sim-s", desc=getattr(policy, "name", "policy"))
        last = 0.0
        while (ctx := nxt()) is not None:
            self.apply(ctx, policy.decide(ctx), policy.sched_delay_s(ctx))
            if bar is not None and ctx.time_s - last >= 1.0:
                bar.update(round(ctx.time_s - last, 1))
                last = ctx.time_s
        if bar is not None:
            bar.update(max(0.0, round(bar.total - bar.n, 1)))
            bar.close()
        return self.metrics(policy=getattr(policy, "name", "policy"))

    # -- time advance and accounting ----------------------------------------------------------
    def _flush(self) -> None:
        """Submit the interval's placements: round-robin nodes/engines inside each DC in decision
        order, ready at decision + scheduling delay + RTT."""
        if not self._buf:
            return
        buf = self._buf
        self._buf = []
        self._n_buffered = 0
        rows = np.concatenate([b[0] for b in buf])
        dc = np.concatenate([b[1] for b in buf])
        ready = np.concatenate([b[2] for b in buf])
        sizes = [b[0].size for b in buf]
        if all(isinstance(b[3], float) for b in buf):
            delay = np.repeat(np.array([b[3] for b in buf]), sizes)
        else:
            delay = np.concatenate([np.broadcast_to(np.asarray(b[3], dtype=np.float64), (m,)) for b, m in zip(buf, sizes, strict=True)])
        n = rows.size
        counts = np.bincount(dc, minlength=self.n_dcs)
        order = np.argsort(dc, kind="stable")
        starts = np.cumsum(counts) - counts
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n) - starts[dc[order]]
        k = self._rr_dc[dc] + rank
        self._rr_dc += counts
        node = k % self.nodes_per_dc
        eng = (k // self.nodes_per_dc) % self.engines_per_node
        engine = dc * self.engines_per_dc + node * self.engines_per_node + eng
        ready = ready + delay + self.rtt_dc[self._origin[rows], dc]
        self.sched_delay[rows] = delay
        order = np.argsort(ready, kind="stable")
        engine, rows, ready = engine[order], rows[order], ready[order]
        self.pool.submit(engine, rows, self._arrival[rows], ready, self._isl[rows], self._osl[rows])

    def _finish_interval(self) -> None:
        """Submit this interval's placements, advance the pool to the next poll and poll it."""
        self._flush()
        t0 = self._k * self._step_s
        t1 = (self._k + 1) * self._step_s
        self.pool.advance(t1)
        stats = self.pool.poll()
        self._account(t0, t1, stats)
        self.snapshot = self.provisioner.observe(t1, stats)
        self._dispatched[:, self.provisioner.last_updated] = 0
        self._k += 1
        self._time_s = t1
        if t1 >= self._end_arrivals_s:
            all_placed = self._n_placed == self.n_requests
            if all_placed and (self.n_finished == self.n_requests or t1 >= self._end_arrivals_s + self.config.drain_s):
                self._done = True
                return
        self._load_interval()

    def idle_until(self, t_s: float) -> None:
        """After a complete run, keep the (idle) fleet running and accounted, whole poll intervals, up to
        ``t_s``. A run ends at the first poll after its last finish, so its drain carbon is rounded up to
        its own poll period; a run polled every 0.5 s replaying a scenario polled every 5 s calls this with
        the scenario's next poll time to be charged the drain the scenario's grid charges."""
        if not self._done:
            raise ActionError("idle_until() extends a complete run only; run the policy to the end first")
        while self._k * self._step_s < t_s - 1e-9:
            t0, t1 = self._k * self._step_s, (self._k + 1) * self._step_s
            self.pool.advance(t1)
            stats = self.pool.poll()
            self._account(t0, t1, stats)
            self.snapshot = self.provisioner.observe(t1, stats)
            self._k += 1
            self._time_s = t1

    def _account(self, t0: float, t1: float, stats: Any) -> None:
        dt = t1 - t0
        pool = self.pool
        e = np.stack([pool.energy_prefill_j, pool.energy_decode_j, pool.energy_idle_j])
        de = (e - self._energy_prev).reshape(3, self.n_dcs, self.engines_per_dc).sum(axis=2)
        self._energy_prev = e
        # CI in force during [t0, t1): the snapshot's, unless the snapshots report a forecast
        ci = self.snapshot.ci_g_per_kwh if self._ci_seen_at is self._ci_at else self._ci_at(t0)
        inc = np.empty_like(self._acc_all)
        inc[:3] = de
        inc[_HOST] = self.config.host_power_w * self.nodes_per_dc * dt
        inc[_CO2] = self.pue * inc[:4].sum(axis=0) * ci / J_PER_KWH
        inc[_CI] = ci * dt
        batch = np.asarray(stats.batch, dtype=np.float64).reshape(self.n_dcs, self.engines_per_dc).mean(axis=1)
        inc[_UTIL] = batch / self.profile.max_num_seqs * dt
        self._acc_all += inc
        self._t_all += dt
        # Share of this interval inside the serving window (1 or 0 unless duration_s falls inside).
        frac = min(max((self.config.duration_s - t0) / dt, 0.0), 1.0)
        if frac > 0:
            self._acc_win += frac * inc
            self._t_win += frac * dt
        fin = self.pool.drain_finished()
        n = len(fin.request_id)
        if n:
            self._finished.append(fin)
            self.n_finished += n
            tm, pm = slo_verdicts(fin.ttft_s, fin.tpot_s, self.config.ttft_slo_s, self.config.tpot_slo_s)
            self.n_finished_violations += int(np.count_nonzero(tm | pm))
            rid = np.asarray(fin.request_id, dtype=np.int64)
            k, est, true = self.osl_feedback
            self.osl_feedback = (k + n, est + float(self.osl_estimates[rid].sum()), true + float(self._osl[rid].sum()))

    @property
    def carbon_g(self) -> float:
        """Carbon accrued so far (gCO2, all DCs, up to the latest poll, drain included)."""
        return float(self._acc_all[_CO2].sum())

    @property
    def done(self) -> bool:
        return self._done

    def finished_batches(self, start: int = 0) -> list[Any]:
        """The ``FinishedRequests`` drained from the pool so far, one per poll, from the ``start``-th
        on (read-only; lets a driver keep running latency metrics without rebuilding ``metrics()``)."""
        return self._finished[start:]

    def counters(self) -> dict[str, int]:
        """Request conservation at the current time: ``arrived = awaiting + in_transit_to_pool +
        pool_submitted`` and ``pool_submitted = finished + queued + in_flight``."""
        arrived = int(np.searchsorted(self._arrival, self._time_s, side="right"))
        arrived = max(arrived, self._n_placed)
        pool = self.pool
        return {
            "arrived": arrived,
            "awaiting_decision": arrived - self._n_placed,
            "placed_not_submitted": self._n_buffered,
            "pool_submitted": int(pool.arrived),
            "queued": int(pool.queued),
            "in_flight": int(pool.in_flight),
            "finished": int(pool.finished),
        }

    # -- results ------------------------------------------------------------------------------
    def metrics(self, policy: str = "policy") -> GeoResults:
        """Results so far (complete once ``next_decision`` returned None)."""
        cfg = self.config
        fins = self._finished
        cols = ("request_id", "engine", "created_s", "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s",
                "input_tokens", "output_tokens")
        data = {c: (np.concatenate([np.asarray(getattr(f, c)) for f in fins]) if fins else np.zeros(0)) for c in cols}
        order = np.argsort(data["request_id"], kind="stable")
        data = {c: v[order] for c, v in data.items()}
        rid = data["request_id"].astype(np.int64)
        req = pd.DataFrame(data)
        req["request_id"] = rid
        req["scheduler"] = self._origin[rid]
        req["dc"] = self.placed_dc[rid]
        req["sched_delay_s"] = self.sched_delay[rid]
        tm, pm = slo_verdicts(req["ttft_s"].to_numpy(), req["tpot_s"].to_numpy(), cfg.ttft_slo_s, cfg.tpot_slo_s)
        req["ttft_miss"] = tm
        req["tpot_miss"] = pm

        arrived = self.counters()["arrived"]
        n_fin = len(req)
        unfinished = arrived - n_fin if self._done else 0
        viol = int(np.count_nonzero(tm | pm)) + unfinished
        denom = n_fin + unfinished
        acc, t = self._acc_win, max(self._t_win, 1e-12)
        engine_j = acc[_PRE] + acc[_DEC] + acc[_IDLE]
        facility_j = self.pue * (engine_j + acc[_HOST])
        served = np.bincount(self.placed_dc[self.placed_dc >= 0], minlength=self.n_dcs)
        per_dc = pd.DataFrame({
            "dc": list(self.dc_names),
            "region": [self.topology.regions[i] for i in self.dc_region],
            "pue": self.pue,
            "ci_mean_g_per_kwh": acc[_CI] / t,
            "engine_prefill_j": acc[_PRE],
            "engine_decode_j": acc[_DEC],
            "engine_idle_j": acc[_IDLE],
            "engine_j": engine_j,
            "host_j": acc[_HOST],
            "facility_kwh": facility_j / J_PER_KWH,
            "carbon_g": acc[_CO2],
            "requests": served,
            "utilization": acc[_UTIL] / t,
            "idle_fraction": np.clip(acc[_IDLE] / (self.profile.idle_w * self.engines_per_dc * t), 0.0, 1.0),
        })
        ttft = percentiles(req["ttft_s"].to_numpy())
        tpot = percentiles(req["tpot_s"].to_numpy())
        placed = self.placed_dc >= 0
        summary: dict[str, Any] = {
            "policy": policy,
            "osl_mode": cfg.osl_mode,
            "decision_mode": cfg.decision_mode,
            "rate_rps": cfg.rate_rps,
            "seed": self.seed,
            "carbon_g": float(acc[_CO2].sum()),
            "energy_kwh": float(facility_j.sum() / J_PER_KWH),
            "power_w": float(facility_j.sum() / t),
            "carbon_with_drain_g": float(self._acc_all[_CO2].sum()),
            "window_s": self._t_win,
            "slo_violation_pct": 100.0 * viol / denom if denom else 0.0,
            "ttft_violation_pct": 100.0 * (int(tm.sum()) + unfinished) / denom if denom else 0.0,
            "tpot_violation_pct": 100.0 * int(pm.sum()) / denom if denom else 0.0,
            "ttft_p50_s": ttft[0], "ttft_p90_s": ttft[1], "ttft_p99_s": ttft[2],
            "tpot_p50_s": tpot[0], "tpot_p90_s": tpot[1], "tpot_p99_s": tpot[2],
            "arrived": arrived,
            "finished": n_fin,
            "unfinished": unfinished,
            "sched_overhead_ms": float(self.sched_delay[placed].mean() * 1e3) if placed.any() else 0.0,
            "decisions": self.n_decisions,
            "decision_calls": self.n_decision_calls,
            "sim_time_s": self._time_s,
            "complete": self._done,
            # Step models outside their calibrated range (GeoConfig.extrapolate): named in every result.
            "extrapolated": cfg.extrapolated,
            "power_clamps": int(self.pool.power_clamps.sum()),
            "time_floors": int(self.pool.time_floors.sum()),
        }
        return GeoResults(summary=summary, per_dc=per_dc, requests=req, config=cfg.to_dict())
