"""The facility MILP window scheduler (§IV-C).

Same window, ``F_r``, ``c_{r,d}`` and ``H_d`` as the ILPs (:mod:`~servegym.baselines.geo.ilp`), plus
a wake cost charged once per DC through ``y_d`` binaries with ``Σ_r x_{r,d} ≤ H_d y_d``.

Which DCs are awake. DC d is *awake* for scheduler s when its engines already serve work
(fewer than one of its engines is idle: ``k_d < 1`` below) or s itself dispatched to d since d's
last poll (``ctx.dispatched``). Waking an awake DC costs nothing, so its ``y_d`` is fixed to 1
and its ``c_{r,d}`` is the estimator's (which includes r's share ``e0_dec / (B_d + 1)`` of the
fixed decode-step energy, as in the ILP). The other DCs are *asleep*; for them:

- ``k_d = round(E · max(0, 1 − in_flight_d))`` engines that waking d brings into service: the
  snapshot's idle engines (``in_flight_d`` is the mean number of requests each of d's ``E``
  engines holds; the DC's round-robin spreads load evenly, so a mean below 1 means that share of
  engines idle). The DC's round-robin, which continues across windows, hands the next requests
  to every one of them in turn, so a DC once woken soon runs all its engines: waking is a
  DC-level decision, as the facility model has it;
- ``f_d = PUE_d · CI_d / 3.6e6 · k_d · Ō · max(0, e0_dec − P_idle · t_dec(1, Ī + Ō/2))`` gCO2: the
  carbon of running ``k_d`` engines for one request lifetime (``Ō`` decode steps, the window's
  mean OSL estimate) at the fixed decode-step energy ``e0_dec`` instead of idling at
  the engine's idle power ``P_idle = idle_w`` W (``EngineProfile.idle_w`` is already per engine,
  ``idle_w_per_gpu · tp``; the simulator charges it while nothing is in flight);
- ``c_{r,d}`` is the estimator's carbon minus the part of its fixed share that ``f_d`` now charges
  once: ``OSL_r · max(0, e0_dec − P_idle · t_dec) / (B_d + 1)``, times ``PUE_d · CI_d / 3.6e6``. The rest
  of the fixed share (the idle power the engine draws anyway) stays in ``c_{r,d}``, so sending exactly
  ``k_d`` requests to an asleep DC costs what the ILP charges, more requests share the wake-up, fewer
  pay for all of it. (Two earlier errors, fixed 2026-12-02: the whole share ``OSL_r · e0_dec / (B_d + 1)``
  was removed while ``f_d`` added back only the part above idle, and ``P_idle`` was multiplied by ``tp``
  a second time, which for Mixtral (TP4: 1152 W instead of 288 W) exceeded ``e0_dec / t_dec`` and made
  ``f_d = 0``; together they made asleep, dirtier DCs look cheap and the MILP saved 11-29% on Mixtral
  where the ILP saves 38-58%.)

With every DC awake (the paper's moderate and high loads) the model is exactly the ILP; the
solver then only solves the LP. Strategy for the asleep DCs (``solve_facility``): x continuous
(integral for any integral y), linking rows ``x ≤ y``, capacity tightened to the requests that
may go there, warm start from the ILP solution, 1% relative gap, 0.25 s limit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray
from servegym.baselines.geo.ilp import WindowPolicy
from servegym.baselines.geo.solver import solve_facility
from servegym.envs.geo.sim.decisions import DecisionContext
from servegym.envs.geo.sim.estimator import J_PER_KWH, Estimates, Estimator

from servegym.errors import ConfigError

#: Relative MIP gap of the facility MILP solves.
MIP_REL_GAP = 0.01


def wake_energy_per_step(estimator: Estimator) -> float:
    """J per decode step that waking one engine adds over its idle draw: ``max(0, e0_dec − P_idle · t_dec)``
    with the engine's idle power ``P_idle = idle_w`` (already per engine, TP included) over a batch-1
    step at the workload's mean context."""
    prof = estimator.profile
    step = float(prof.decode(1.0, estimator.isl_mean + 0.5 * estimator.osl_mean))
    return max(0.0, prof.energy.e0_dec - prof.idle_w * step)


def wake_costs(ctx: DecisionContext, estimator: Estimator) -> tuple[NDArray[np.float64], NDArray[np.bool_],
                                                                    NDArray[np.float64]]:
    """(f_d gCO2 (0 for awake DCs), awake (D,), fixed-share carbon to remove (n, D)) per the module docstring."""
    snap = ctx.snapshot
    n = ctx.n_requests
    e = snap.engines_per_dc
    k = np.rint(e * np.maximum(0.0, 1.0 - snap.in_flight))
    s = int(ctx.scheduler[0]) if n else 0
    awake = (k < 1.0) | (ctx.dispatched[s] > 0)
    g = snap.pue * snap.ci_g_per_kwh / J_PER_KWH
    osl = np.maximum(np.asarray(ctx.osl_estimate, dtype=np.float64), 1.0)
    o_bar = float(osl.mean()) if n else estimator.osl_mean
    net = wake_energy_per_step(estimator)
    wake = np.where(awake, 0.0, g * k * o_bar * net)
    share = osl[:, None] * net / (snap.batch[None, :] + 1.0) * g[None, :]
    share = np.where(awake[None, :], 0.0, share)
    return wake, awake, share


class FacilityMILP(WindowPolicy):
    """The facility MILP (module docstring); ``wake_scale`` multiplies every ``f_d`` (1: as
    defined; 0: no wake cost, which makes the model the ILP's on awake DCs)."""

    kind = "milp"
    base_name = "milp"

    def __init__(self, *, mip_rel_gap: float = MIP_REL_GAP, wake_scale: float = 1.0, **kw: Any) -> None:
        if not isinstance(mip_rel_gap, (int, float)) or not 0.0 <= mip_rel_gap <= 1.0:
            raise ConfigError(f"mip_rel_gap = {mip_rel_gap!r} is out of range; allowed: [0, 1]")
        if not isinstance(wake_scale, (int, float)) or not 0.0 <= wake_scale < np.inf:
            raise ConfigError(f"wake_scale = {wake_scale!r} is out of range; allowed: >= 0")
        self.mip_rel_gap = float(mip_rel_gap)
        self.wake_scale = float(wake_scale)
        super().__init__(**kw)

    def reset(self, n_dcs: int, n_schedulers: int, seed: int) -> None:
        super().reset(n_dcs, n_schedulers, seed)
        self.stats.update({"asleep_dc_windows": 0, "mip_gap_max": 0.0})

    def _solve(self, ctx, est: Estimates, estimator, cap):  # type: ignore[override]
        wake, awake, share = wake_costs(ctx, estimator)
        wake = wake * self.wake_scale
        if self.wake_scale == 0.0:
            awake = np.ones_like(awake)
            share = np.zeros_like(share)
        res = solve_facility(est.carbon_g - share, est.feasible, cap, wake, awake, time_limit_s=self.time_limit_s,
                             mip_rel_gap=self.mip_rel_gap, highs=self._highs)
        self.stats["asleep_dc_windows"] += int((~awake).sum())
        if res.ok and np.isfinite(res.mip_gap):
            self.stats["mip_gap_max"] = max(self.stats["mip_gap_max"], float(res.mip_gap))
        if not res.ok:
            return np.full(ctx.n_requests, -1, dtype=np.int64), 1, 1
        return res.assign.copy(), 1, 0
