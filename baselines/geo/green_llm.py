"""Green-LLM [39] ported to per-request routing, as in the paper's comparison (§V-A).

Green-LLM plans request flows across DCs once per hour with a linear program: each DC has an
hourly token budget, latency is modelled without batching or queueing (so a loaded DC is never
rejected), and the cost is the carbon per token. The paper maps "its hourly per-DC token budget
to the engine batch limit" and ports only the scheduling decision. Our port:

- Budget of DC d (tokens per second, whole DC, prompt + output): what its ``E`` engines
  process at the batch limit. An engine running ``S' = min(S, C / ℓ)`` requests (``S`` the
  ``max_num_seqs`` batch limit, capped by the KV pool ``C``; ``ℓ = Ī + Ō/2`` the mean cached
  tokens per request) spends ``P(Ī, Ī) + Ō · t_dec(S', S' ℓ) / S'`` seconds of engine time per
  request (its prefill, and its share of ``Ō`` full-batch decode steps), so
  ``K_d = E · (Ī + Ō) / [P(Ī, Ī) + Ō · t_dec(S', S' ℓ) / S']``. The hourly budget is
  ``3600 · K_d``; each of the ``R`` regional schedulers owns ``K_d / R`` of it (the load generator
  feeds them equal shares).
- Batch-agnostic latency: ``TTFT⁰_{r,d} = RTT(s_r, d) + P(ISL_r, ISL_r)`` (prefill on an empty
  engine) and ``TPOT⁰_{r,d} = t_dec(1, ISL_r)``; ``F⁰_r`` the DCs meeting both budgets.
- The hourly LP ``min Σ_d G_d x_{s,d}`` s.t. ``Σ_d x_{s,d} = demand_s``, ``x_{s,d} ≤ K_d / R``,
  ``x_{s,d} = 0`` off ``F⁰`` (``G_d = PUE_d · CI_d``, the same energy per token everywhere under
  a batch-agnostic model) is solved by filling the feasible DCs in increasing ``G_d`` up to their
  budgets. We realize that plan online, which needs no demand forecast: scheduler s holds a
  token account per DC, credited ``K_d / R`` tokens per second of simulated time (capped at one
  second's worth: the budget is spread evenly over the hour) and debited ``ISL_r + OSL_r`` (``OSL_r`` the run's
  OSL estimate) per request placed. Request r goes to the lowest-``G_d`` DC of ``F⁰_r`` whose
  account covers them; with none, to the ``F⁰_r`` DC with the largest account relative to
  its budget (the plan's least over-committed DC); with ``F⁰_r`` empty, to the lowest ``TTFT⁰``.
- ``G_d`` follows the snapshot's CI (hourly in ``ci_mode="hourly"``): the plan changes at the hour.

No scheduling delay is modelled (the plan is computed once per hour; routing is a lookup).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from servegym.envs.geo.sim.decisions import BasePolicy, DecisionContext
from servegym.envs.geo.sim.estimator import Estimator

from servegym.errors import ConfigError

#: Seconds of budget an account may accumulate.
BURST_S = 1.0


def dc_token_budget(estimator: Estimator, engines_per_dc: int) -> float:
    """``K_d`` (prompt + output tokens/s per DC, identical DCs) of the module docstring."""
    prof = estimator.profile
    i_bar, o_bar = estimator.isl_mean, estimator.osl_mean
    ell = i_bar + 0.5 * o_bar
    s = min(float(prof.max_num_seqs), prof.kv_capacity_tokens / ell)
    per_request_s = float(estimator.prefill_time_s(i_bar, i_bar)) + o_bar * float(prof.decode(s, s * ell)) / s
    return engines_per_dc * (i_bar + o_bar) / per_request_s


class GreenLLM(BasePolicy):
    """Green-LLM's hourly token-budget plan, realized per request (module docstring)."""

    name = "green-llm"
    batchable = True
    decision_mode = "request"

    def reset(self, n_dcs: int, n_schedulers: int, seed: int) -> None:
        super().reset(n_dcs, n_schedulers, seed)
        self._acct: NDArray[np.float64] | None = None
        self._last_s = np.zeros(n_schedulers, dtype=np.float64)

    def decide(self, ctx: DecisionContext) -> NDArray[np.int64]:
        est = ctx.estimator
        if est is None:
            raise ConfigError("policy 'green-llm' needs DecisionContext.estimator (set by GeoSimulation)")
        snap = ctx.snapshot
        n, d = ctx.n_requests, ctx.n_dcs
        n_sched = int(ctx.dispatched.shape[0])
        rate = dc_token_budget(est, snap.engines_per_dc) / n_sched  # tokens/s per scheduler and DC
        cap = rate * BURST_S
        if self._acct is None or self._acct.shape != (n_sched, d):
            self._acct = np.full((n_sched, d), cap)
            self._last_s = np.zeros(n_sched, dtype=np.float64)
        isl = np.asarray(ctx.input_tokens, dtype=np.float64)
        osl = np.maximum(np.asarray(ctx.osl_estimate, dtype=np.float64), 1.0)
        ttft0 = snap.rtt_s[ctx.scheduler] + est.prefill_time_s(isl, isl)[:, None]
        tpot0 = est.profile.decode(np.ones_like(isl), isl)
        feas = (ttft0 <= est.ttft_slo_s) & (tpot0 <= est.tpot_slo_s)[:, None]
        g = snap.pue * snap.ci_g_per_kwh
        order = np.argsort(g, kind="stable")  # greenest first
        out = np.empty(n, dtype=np.int64)
        acct, last = self._acct, self._last_s
        for i in range(n):
            s = int(ctx.scheduler[i])
            t = float(ctx.decision_s[i])
            if t > last[s]:
                acct[s] = np.minimum(cap, acct[s] + rate * (t - last[s]))
                last[s] = t
            f = feas[i]
            if not f.any():
                out[i] = int(np.argmin(ttft0[i]))
                continue
            need = isl[i] + osl[i]
            ok = f[order] & (acct[s][order] >= need)
            if ok.any():
                dc = int(order[int(np.argmax(ok))])
            else:
                dc = int(np.argmax(np.where(f, acct[s], -np.inf)))
            acct[s, dc] -= need
            out[i] = dc
        return out
