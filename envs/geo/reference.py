"""The reference scheduler of GeoRoute-v0's residual action mode: what a baseline would do with a request.

``GeoRouteEnv(action_mode="residual", reference=...)`` adds one action to the DCs, "do what the
reference scheduler would do for this request". :class:`ReferencePlanner` computes that choice
on the same snapshot and the same own-dispatch counts the agent's request sees, by calling the
baseline policy itself (:mod:`servegym.baselines.geo`, one model, two drivers) on a
:class:`~servegym.envs.geo.sim.decisions.DecisionContext` built from the env's poll interval:

- a request-mode reference (``greedy:<alpha>``, ``moer``): the policy decides the interval's
  remaining requests of the current request's scheduler from the current one on, with the
  dispatch counts the agent's own placements produced so far. Greedy depends on the scheduler's
  own placements only, so when the agent deviates from the reference the scheduler's next
  requests are planned again from its next one (a plan covers :data:`GREEDY_HORIZON` requests):
  the choice shown is always the one greedy would make for this request given what its
  scheduler actually dispatched before it. Replanning costs a few tens of microseconds of CPU
  (greedy's tables and decisions are compiled), so an agent that deviates at most steps runs at
  about 30k steps per CPU second (geo_env_speed.md, 2026-12-06; 2.3k before the compiled form).
- a window reference (``milp``, ``ilp``, ``iter-ilp``): the requests of one scheduler within the
  poll interval are cut into the simulator's windows (``window_s`` from the window's first
  arrival, at most ``window_max_requests``), and the policy solves each window once, when the
  agent reaches its first request, on the snapshot and the counts dispatched so far. Its plan is
  the reference for every request of the window; it is not re-solved when the agent deviates
  inside the window (a solve costs milliseconds). Two differences from the window scheduler
  run by itself, both stated: the plan of a window is shown at its first request's arrival, so
  it uses the prompt lengths of requests that arrive up to ``window_s`` later (the window
  scheduler would wait for them), and the agent's placements leave at arrival, without the window
  wait and the modelled solve delay. GeoRoute-v0's ``decide_at="window"`` removes both: the env then
  steps through the simulator's own windows and applies each one after :attr:`ReferencePlanner.delay_s`,
  the reference's modelled solve delay, so that following is the reference's run exactly.
- a causal reference (``<rule>+dr[:<k>]``, ``<rule>+bc``, ``<rule>+dr[:<k>]+bc`` with ``<rule>`` one of the
  above; :mod:`servegym.baselines.geo.causal`): the rule fed a dead-reckoned snapshot and/or bias-corrected OSL
  estimates. The dead reckoning counts the placements actually made, the agent's, not the reference's
  proposals: the planner turns the policy's own counting off (``count_own``) and reports every placement
  (:meth:`ReferencePlanner.placed`) to the causal module's :meth:`~servegym.baselines.geo.causal.CausalPolicy.routed`,
  so one model of the occupancy serves both drivers. A dead-reckoned request-mode rule plans one request at
  a time, at its decision time, after the placements before it (its own run plays it so too); a window rule
  plans a window once, at its first request, and every placement of the window joins the occupancy at the
  window's decision time, as its own decisions do in its own run. So following reproduces the causal rule's
  own run exactly with ``decide_at="window"`` (window rules) and for request-mode rules (tested); at arrival
  a window rule's windows of different schedulers interleave, and a window solved while another one's
  requests are still being placed counts only those placed so far.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from numpy.typing import NDArray
from servegym.envs.geo.sim.decisions import DecisionContext

from servegym.errors import ConfigError, choice_error

#: Requests of a scheduler a request-mode reference plans ahead at once (exact for each of them while
#: the agent follows; a deviation replans from the next one, so short plans keep that cheap).
GREEDY_HORIZON = 16
#: Reference specs accepted by the residual mode (``<alpha>`` in [0, 1]; ``<rule>`` one of the first five,
#: ``<k>`` the dead-reckoning lifetime knob of :mod:`servegym.baselines.geo.causal`).
REFERENCE_SPECS = ("milp", "ilp", "iter-ilp", "moer", "greedy:<alpha>", "<rule>+dr[:<k>]", "<rule>+bc",
                   "<rule>+dr[:<k>]+bc")


def _bad_reference(spec: Any, why: str = "") -> ConfigError:
    if not why:
        return choice_error("reference", spec, REFERENCE_SPECS, verb="is not allowed")
    return ConfigError(f"reference = {spec!r} is not allowed ({why}); allowed: {', '.join(REFERENCE_SPECS)}")


def make_reference(spec: Any) -> Any:
    """A fresh baseline policy for ``spec`` (one of :data:`REFERENCE_SPECS`)."""
    from servegym.baselines.geo import make_policy
    from servegym.baselines.geo.causal import parse_causal

    if not isinstance(spec, str):
        raise _bad_reference(spec)
    try:
        causal = parse_causal(spec)
    except ConfigError as exc:
        raise _bad_reference(spec, str(exc)) from None
    rule = spec if causal is None else causal[0]
    if not (rule in REFERENCE_SPECS[:4] or rule.startswith("greedy:")):
        raise _bad_reference(spec, f"{rule!r} is no reference rule" if causal is not None else "")
    try:
        return make_policy(spec)
    except ConfigError as exc:
        raise _bad_reference(spec, str(exc)) from None


def is_causal(policy: Any) -> bool:
    """Whether ``policy`` (a :func:`make_reference` result) is a causal wrapper (``+dr`` and/or ``+bc``)."""
    from servegym.baselines.geo.causal import CausalPolicy

    return isinstance(policy, CausalPolicy)


def dead_reckoned(policy: Any) -> bool:
    """Whether ``policy`` (a :func:`make_reference` result) dead-reckons the snapshot from the routings made."""
    return is_causal(policy) and policy.lifetime is not None


def sub_context(ctx: DecisionContext, rows: NDArray[np.int64], dispatched: NDArray[np.int64], mode: str,
                time_s: float) -> DecisionContext:
    """The requests ``rows`` (indices into ``ctx``) of ``ctx`` as their own context, with the
    dispatch counts ``dispatched`` (regions x D); estimates are ``ctx``'s rows (same snapshot)."""
    est = ctx.estimates
    disp = np.asarray(dispatched, dtype=np.int64).copy()
    disp.flags.writeable = False
    return DecisionContext(
        mode=mode, time_s=time_s, request_id=ctx.request_id[rows], scheduler=ctx.scheduler[rows],
        arrival_s=ctx.arrival_s[rows], decision_s=ctx.decision_s[rows], input_tokens=ctx.input_tokens[rows],
        osl_estimate=ctx.osl_estimate[rows],
        output_tokens=None if ctx.output_tokens is None else ctx.output_tokens[rows],
        snapshot=ctx.snapshot, dispatched=disp, estimate_fn=functools.partial(est.rows, rows), dc_names=ctx.dc_names,
        token=0, estimator=ctx.estimator, osl_feedback=ctx.osl_feedback,
    )


def window_chunks(scheduler: NDArray[np.int64], arrival_s: NDArray[np.float64], window_s: float,
                  max_requests: int) -> list[NDArray[np.int64]]:
    """Row indices of each window: per scheduler, ``window_s`` from the window's first arrival,
    at most ``max_requests`` rows (the simulator's window rule, within one poll interval)."""
    out: list[NDArray[np.int64]] = []
    for s in np.unique(scheduler):
        rows = np.flatnonzero(scheduler == s)
        a = arrival_s[rows]
        i = 0
        while i < rows.size:
            j = int(np.searchsorted(a, a[i] + window_s, side="left"))
            j = max(i + 1, min(j, i + max_requests))
            out.append(rows[i:j])
            i = j
    return out


class ReferencePlanner:
    """The reference's choice for each request of a poll interval (module docstring).

    Args:
        spec: the reference (:data:`REFERENCE_SPECS`).
        window_s, window_max_requests: the window rule of a window reference (from the scenario).
    """

    def __init__(self, spec: str, window_s: float, window_max_requests: int) -> None:
        self.spec = spec
        self.policy = make_reference(spec)
        self.window = getattr(self.policy, "decision_mode", "request") == "window"
        self.window_s = float(window_s)
        self.window_max_requests = int(window_max_requests)
        #: a dead-reckoned reference counts the placements made (:meth:`placed`), planned one request at a time
        self.dead_reckoned = dead_reckoned(self.policy)
        if self.dead_reckoned:
            self.policy.count_own = False
        self.horizon = 1 if self.dead_reckoned else GREEDY_HORIZON

    def reset(self, n_dcs: int, n_regions: int, seed: int) -> None:
        self.policy.reset(n_dcs, n_regions, seed)

    def load(self, ctx: DecisionContext) -> None:
        """A new poll interval (a request-mode batch context): nothing planned yet."""
        n = ctx.n_requests
        self.ctx = ctx
        self.delay_s = 0.0  # the modelled solve delay (s) of the latest window planned in this context
        self.sched = np.asarray(ctx.scheduler, dtype=np.int64)
        self.choice = np.full(n, -1, dtype=np.int64)
        if self.window:
            chunks = window_chunks(np.asarray(ctx.scheduler), np.asarray(ctx.arrival_s), self.window_s,
                                   self.window_max_requests)
            self.chunk_of = np.empty(n, dtype=np.int64)
            for k, rows in enumerate(chunks):
                self.chunk_of[rows] = k
            self.chunks = chunks

    def choice_for(self, i: int, dispatched: NDArray[np.float64]) -> int:
        """The reference's DC for row ``i``, planning it (and what is planned with it) if needed;
        ``dispatched`` is the env's current own-dispatch count per (scheduler, DC)."""
        c = int(self.choice[i])
        if c >= 0:
            return c
        ctx = self.ctx
        if self.window:
            rows = self.chunks[int(self.chunk_of[i])]
            rows = rows[rows >= i]
            sub = sub_context(ctx, rows, dispatched, "window", float(ctx.decision_s[rows[-1]]))
        else:
            # greedy decides each scheduler from its own dispatches only: plan i's scheduler's rows (a
            # dead-reckoned rule sees every scheduler's placements: one row, after those before it)
            rows = i + np.flatnonzero(self.sched[i:] == self.sched[i])[:self.horizon]
            sub = sub_context(ctx, rows, dispatched, "request", float(ctx.decision_s[rows[-1]]))
        self.choice[rows] = np.asarray(self.policy.decide(sub), dtype=np.int64)
        self.delay_s = float(self.policy.sched_delay_s(sub))
        return int(self.choice[i])

    def placed(self, dc: int) -> None:
        """The current row was placed on ``dc`` (the reference's choice or not): a dead-reckoned reference's
        occupancy counts it."""
        if self.dead_reckoned:
            self.policy.routed((dc,), self.ctx.snapshot.engines_per_dc)

    def deviated(self, i: int) -> None:
        """The agent did not follow the reference at row ``i``: a request-mode reference plans the
        rest of the interval again (its choices depend on the scheduler's own placements)."""
        if not self.window:
            later = self.sched[i + 1:] == self.sched[i]
            self.choice[i + 1:][later] = -1
