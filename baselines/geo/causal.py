"""Causal references of the geo stress tracks: a shipped rule fed corrected inputs that a causal scheduler
can compute, never what hindsight knows.

:class:`CausalPolicy` wraps a base policy (any :func:`~servegym.baselines.geo.registry.make_policy` spec) and
hands it a rewritten :class:`~servegym.envs.geo.sim.decisions.DecisionContext` (spec
``<base>+dr[:<k>]``, ``<base>+bc`` or ``<base>+dr[:<k>]+bc``):

- **dead reckoning** (``+dr``, the ``stress-load`` track): the snapshot a rule sees is up to ``poll_interval_s``
  old. The wrapper (one policy routes for every regional scheduler, as one agent does in the env) keeps a fluid
  occupancy per engine of every DC, ``N_d`` requests (running + queued): at d's poll ``N_d = B_d + Q_d / I``
  from the snapshot, then every routing to d adds ``1 / E`` and service drains it as
  ``dN/dt = -min(N, S') / L`` with ``S' = min(S, C / l)`` slots per engine (``l = I + O / 2`` cached tokens per
  request) and ``L = k S' (P(I, I) + O t_dec(S', S' l) / S')`` a request's time in a full engine by Little's
  law: ``S'`` requests share the engine, each costing its prefill and its share of ``O`` full-batch decode
  steps (the engine throughput green-llm's token budget uses; ``I``, ``O`` the workload's mean prompt and
  output lengths; ``k`` the lifetime knob, 1 by default). The rule
  sees ``B_d = min(N_d, S')``, ``Q_d = max(0, N_d - S') I``, ``KV_d`` at the snapshot's tokens per request,
  stamped as polled at the decision time, with its dispatch counts zeroed, so a window rule (whose headroom
  would otherwise count ``R x`` its own scheduler's dispatches and drain the batch by age) reads the
  projection as fresh state. Every estimate (TTFT, TPOT, carbon, feasibility) is recomputed on it.
- **bias correction** (``+bc``, the ``stress-osl`` track): every OSL estimate is multiplied by
  ``sum(true OSL) / sum(OSL estimate)`` over the requests that finished up to the latest poll
  (``ctx.osl_feedback``: the responses already returned), 1 before any finished. A predictor that is off by a
  constant factor on the served mix is corrected after the first poll.

A request-mode base is played one request at a time under ``+dr`` (its own routings inside a poll interval
count), so a ``batchable`` base loses that property there; window bases decide a window as before.

The routings that join the occupancy are the policy's own decisions by default. A driver whose placements may
differ from them (GeoRoute-v0's residual mode, :mod:`servegym.envs.geo.reference`) sets
:attr:`CausalPolicy.count_own` to False and reports each placement actually made with :meth:`CausalPolicy.routed`,
the same dynamics fed what happened.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from servegym.envs.geo.sim.decisions import BasePolicy, DecisionContext

from servegym.errors import ConfigError

#: The lifetime knob's default and its allowed range (multiples of the mean decode time O tau_d).
DR_LIFETIME = 1.0
DR_LIFETIME_RANGE = (0.05, 10.0)
#: Spec suffixes (module docstring).
CAUSAL_SUFFIXES = ("+dr[:<k>]", "+bc")


class CausalPolicy(BasePolicy):
    """``base`` fed a dead-reckoned snapshot (``lifetime`` not None) and/or bias-corrected OSL estimates
    (``bias_correct``); see the module docstring."""

    #: whether :meth:`decide` adds its own routings to the occupancy (False: the driver reports them, :meth:`routed`)
    count_own = True

    def __init__(self, base: Any, spec: str, lifetime: float | None, bias_correct: bool) -> None:
        if lifetime is not None and not DR_LIFETIME_RANGE[0] <= lifetime <= DR_LIFETIME_RANGE[1]:
            raise ConfigError(f"dead-reckoning lifetime k = {lifetime!r} is out of range; allowed: "
                              f"[{DR_LIFETIME_RANGE[0]:g}, {DR_LIFETIME_RANGE[1]:g}]")
        if lifetime is None and not bias_correct:
            raise ConfigError(f"policy spec {spec!r} corrects nothing; allowed: a '+dr' and/or '+bc' suffix")
        self.base = base
        self.name = spec
        self.lifetime = lifetime
        self.bias_correct = bias_correct
        self.decision_mode = getattr(base, "decision_mode", "request")
        self.batchable = bool(getattr(base, "batchable", False)) and lifetime is None
        self.reset(1, 1, 0)

    def reset(self, n_dcs: int, n_schedulers: int, seed: int) -> None:
        super().reset(n_dcs, n_schedulers, seed)
        self.base.reset(n_dcs, n_schedulers, seed)
        # dead reckoning: each DC's poll time, requests per engine (running + queued) at _t_last
        self._polled: NDArray[np.float64] | None = None
        self._n = np.zeros(0)
        self._t_last = np.zeros(0)

    def __getattr__(self, name: str) -> Any:  # the base's stats and knobs (e.g. a window policy's ``stats``)
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    def osl_ratio(self, ctx: DecisionContext) -> float:
        """``sum(true OSL) / sum(estimate)`` over the requests finished up to the latest poll (1 before any)."""
        n, est, true = ctx.osl_feedback
        return true / est if n > 0 and est > 0.0 else 1.0

    def _slots_life(self, est: Any) -> tuple[float, float, float]:
        """(slots per engine ``S' = min(S, C / l)``, a request's lifetime ``L`` in s, ``l``): module docstring."""
        prof = est.profile
        ell = est.isl_mean + 0.5 * est.osl_mean
        slots = min(float(prof.max_num_seqs), prof.kv_capacity_tokens / ell)
        per_req_s = float(est.prefill_time_s(est.isl_mean, est.isl_mean)) + est.osl_mean * float(
            prof.decode(slots, slots * ell)) / slots  # engine time per request at full load (green-llm's K_d)
        life = float(self.lifetime or DR_LIFETIME) * slots * per_req_s
        return slots, life, ell

    def _advance(self, t: float, slots: float, life: float) -> None:
        """Drain the fluid occupancy from ``self._t_last`` to ``t``: ``dN/dt = -min(N, S') / L`` per engine."""
        dt = np.maximum(0.0, t - self._t_last)
        n = self._n
        t_sat = np.maximum(0.0, n - slots) * life / slots  # time to drain the queue at full service
        queued = dt <= t_sat
        self._n = np.where(queued, n - slots / life * dt, np.minimum(n, slots) * np.exp(-(dt - t_sat) / life))
        self._t_last = np.maximum(self._t_last, t)

    def _project(self, ctx: DecisionContext) -> Any:
        """The snapshot dead-reckoned to ``ctx.time_s`` (module docstring)."""
        est = ctx.estimator
        assert est is not None
        t = float(ctx.time_s)
        snap = ctx.snapshot
        slots, life, ell = self._slots_life(est)
        if self._polled is None or self._polled.shape != snap.polled_at_s.shape:
            self._polled = np.full(snap.n_dcs, -np.inf)
            self._n = np.zeros(snap.n_dcs)
            self._t_last = np.zeros(snap.n_dcs)
        new = snap.polled_at_s != self._polled  # a fresh poll of d: restart from what it measured
        if new.any():
            self._n = np.where(new, snap.batch + snap.queued_tokens / est.isl_mean, self._n)
            self._t_last = np.where(new, snap.polled_at_s, self._t_last)
            self._polled = snap.polled_at_s.copy()
        self._advance(t, slots, life)
        b = np.minimum(self._n, slots)
        per_req = np.where(snap.batch > 0, snap.kv_tokens / np.maximum(snap.batch, 1e-9), ell)
        return snap.replace(batch=b, kv_tokens=b * per_req, queued_tokens=np.maximum(0.0, self._n - slots) * est.isl_mean,
                            polled_at_s=np.full(snap.n_dcs, t))

    def decide(self, ctx: DecisionContext) -> ArrayLike:
        est = ctx.estimator
        if est is None:
            raise ConfigError(f"policy {self.name!r} needs DecisionContext.estimator (set by GeoSimulation)")
        osl = ctx.osl_estimate * self.osl_ratio(ctx) if self.bias_correct else ctx.osl_estimate
        snap = self._project(ctx) if self.lifetime is not None else ctx.snapshot
        changes: dict[str, Any] = {"osl_estimate": osl, "snapshot": snap}
        if self.lifetime is not None:
            zero = np.zeros_like(ctx.dispatched)
            zero.flags.writeable = False
            changes["dispatched"] = zero
        isl, sched = ctx.input_tokens, ctx.scheduler
        changes["estimate_fn"] = lambda: est.estimate(snap, isl, osl, sched)
        view = dataclasses.replace(ctx, **changes)
        out = np.asarray(self.base.decide(view), dtype=np.int64).reshape(-1)
        if self.lifetime is not None and self.count_own:  # the routed requests join their DCs' occupancy
            self.routed(out, ctx.snapshot.engines_per_dc)
        return out

    def routed(self, dcs: ArrayLike, engines_per_dc: int) -> None:
        """Requests placed on DCs ``dcs`` join the dead-reckoned occupancy (``1 / E`` each), at the time of the
        latest projection; nothing without dead reckoning or before the first decision."""
        out = np.asarray(dcs, dtype=np.int64).reshape(-1)
        if self.lifetime is not None and out.size and self._n.size:
            self._n = self._n + np.bincount(out, minlength=self._n.size) / float(engines_per_dc)

    def sched_delay_s(self, ctx: DecisionContext) -> float:
        # the base keys its delay by the context's token, which the view keeps
        return float(self.base.sched_delay_s(ctx))


def parse_causal(spec: str) -> tuple[str, float | None, bool] | None:
    """(base spec, lifetime or None, bias correction) of a causal spec, or None if ``spec`` has no causal suffix."""
    parts = spec.split("+")
    if len(parts) < 2 or not all(p == "bc" or p == "dr" or p.startswith("dr:") for p in parts[1:]):
        return None
    lifetime: float | None = None
    bc = False
    for p in parts[1:]:
        if p == "bc":
            if bc:
                raise ConfigError(f"policy spec {spec!r} repeats '+bc'; allowed: <base>+dr[:<k>]+bc")
            bc = True
        else:
            if lifetime is not None:
                raise ConfigError(f"policy spec {spec!r} repeats '+dr'; allowed: <base>+dr[:<k>]+bc")
            try:
                lifetime = float(p.split(":", 1)[1]) if ":" in p else DR_LIFETIME
            except ValueError:
                raise ConfigError(f"policy spec {spec!r}: the lifetime k of '+dr:<k>' must be a number in "
                                  f"[{DR_LIFETIME_RANGE[0]:g}, {DR_LIFETIME_RANGE[1]:g}]") from None
    return parts[0], lifetime, bc
