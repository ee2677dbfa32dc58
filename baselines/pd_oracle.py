"""The hindsight oracle of ``servegym/PDProvision-v0``: the least-cost provisioning plan of the whole
episode with the realized arrivals known in advance, solved exactly by dynamic programming, and replayed
through the same environment.

**What it knows.** Everything a policy cannot: the arrival count of every period of the episode (drawn by
:meth:`PDProvisionEnv.hindsight_arrivals` from a copy of the episode's generator, exactly as ``step``
draws them), and the coming length mixes, carbon, prices and power caps (which the scenario fixes).

**The problem.** Choose the target (n_P, n_D) of every period, within the action grid and the GPU
budget, to minimize the episode's cost as the environment's reward charges it: objective (facility
energy, carbon or cost) + ``slo_weight`` x violation share + ``cap_weight`` x cap excess, with the
environment's own start-up delay (an added instance draws loaded-idle power for ``startup_delay_s`` and
serves from then on; removal is immediate; the env has no other ramp limit on instance counts, and the
power ramp is the capped ramp of eq. 14 in the cost), subject to **no backlog**: the deployment serving
in each period has capacity above the period's realized arrival rate. With a start-up delay of exactly one
period, the deployment serving in period k is min(T_k, T_{k-1}) per pool and the starting instances are
max(T_k - T_{k-1}, 0), so the state of the DP is the previous target and each stage has
|grid|^2 transitions (86^2 on the default 16-GPU grid, 1,440 stages). Every period's cost is computed
with the environment's own power tables (:meth:`MinPowerRule.power_at`, eq. 14) and its own SLO
evaluation (:meth:`PDProvisionEnv.slo_steady`, the steady case of the env's per-period SLO evaluation), so the plan's predicted return equals its replayed return
(tested to 1e-9).

**What the result is.** The DP is an exact **optimum** over backlog-free plans (a plan that lets a backlog
build is outside it: its arrivals wait, the reward then charges the backlog and the queueing delay, and
with slo_weight = 2 per unit of violation share against at most ~0.2 kWh of energy per period at the
default budget a backlog never pays off on the measured days). It is the ``oracle`` of the pd ids:
``oracle_kind = "optimum"``. Its **relaxation** (:attr:`OraclePlan.relaxed_return`) drops the start-up
coupling: every period independently takes its cheapest backlog-free deployment, serving at once with no
start-up draw (a per-period hindsight bound). It is an upper bound on the return of every
backlog-free plan, reported beside the oracle, never replayed (no policy can play it). The problem's LP
relaxation in the usual MILP form (binary deployment choices per period, linked by transitions) is a
shortest path over a layered graph, whose LP relaxation is integral, so it would equal the DP optimum and
bound nothing tighter; the start-up-free relaxation is the informative bound.

Where no deployment in the budget covers a period's arrivals, that period takes the largest-capacity
deployment (a backlog follows and the plan is no longer an optimum): :attr:`OraclePlan.infeasible_periods`
counts such periods, and the pd splits are sized so that there are none (tested on each split).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from servegym.envs.pd.env import PDProvisionEnv

from servegym.errors import ConfigError

__all__ = ["HindsightOracle", "OraclePlan", "solve_oracle"]


@dataclass(frozen=True)
class OraclePlan:
    """The oracle's targets for the episode's periods and what the DP predicts (reward units)."""

    targets: NDArray[np.int64]  # (periods, 2) target (n_P, n_D) of each period
    predicted_return: float  # minus the DP's optimal cost = the replayed return when feasible
    relaxed_return: float  # the start-up-free relaxation: an upper bound on any backlog-free plan's return
    infeasible_periods: int  # periods whose arrivals exceed every deployment's capacity
    arrivals: NDArray[np.float64]  # realized arrivals per period (requests)


def solve_oracle(env: PDProvisionEnv) -> OraclePlan:
    """The hindsight-optimal plan of ``env``'s current episode (call right after ``reset``; module docstring)."""
    cfg = env.config
    period = cfg.scenario.period_s
    delay = cfg.startup_delay_s
    if delay not in (0.0, period):
        raise ConfigError(f"the pd oracle needs startup_delay_s = 0 or one period ({period:g} s); got {delay:g}; "
                          "allowed: 0 or scenario.period_s")
    arrivals = env.hindsight_arrivals()
    k0 = env.step_index
    n_steps = arrivals.size
    rule = env.reference
    # the grid (every n_P, n_D >= 1 within the action maxima and the budget) is the same for every mix
    g0 = rule.mix_cache(env.mix_index(k0)).grid
    n_p, n_d = g0.n_p, g0.n_d
    size = n_p.size
    row = np.full((cfg.max_prefill + 1, cfg.max_decode + 1), -1, dtype=np.int64)
    row[n_p, n_d] = np.arange(size)
    # transition prev j -> target i: serving rows min(T_i, T_j), starting instances max(T_i - T_j, 0)
    if delay > 0:
        act = row[np.minimum(n_p[None, :], n_p[:, None]), np.minimum(n_d[None, :], n_d[:, None])]
        pend = (np.maximum(n_p[None, :] - n_p[:, None], 0) + np.maximum(n_d[None, :] - n_d[:, None], 0)).astype(float)
    else:
        act = np.broadcast_to(np.arange(size)[None, :], (size, size))
        pend = np.zeros((size, size))
    assert np.all(act >= 0)
    idle_w = cfg.system.hardware.loaded_idle_power_w
    pue = cfg.pue
    # state: the target in force before the first step (the env's initial deployment, all active)
    start = row[int(env._target[0]), int(env._target[1])]
    value = np.full(size, np.inf)
    value[start] = 0.0
    choice = np.zeros((n_steps, size), dtype=np.int64)
    relaxed = 0.0
    infeasible = 0
    for t in range(n_steps):
        k = k0 + t
        mix = int(env.signals.mix_index[k])
        cache = rule.mix_cache(mix)
        mu = cache.grid.mu
        lam = float(arrivals[t]) / period
        it_w = cache.power_at(lam)
        ok = mu > lam
        if not ok.any():
            infeasible += 1
            ok = mu >= mu.max()
        # the violation share of each deployment serving the period from an empty queue (env's own model)
        viol = env.slo_steady(lam, n_p, n_d, mix)[0] if lam > 0.0 else np.zeros(size)
        if cfg.objective == "energy":
            obj_per_kwh = 1.0
        elif cfg.objective == "carbon":
            obj_per_kwh = float(env.signals.ci_g_per_kwh[k]) / 1000.0
        else:
            obj_per_kwh = float(env.signals.price_usd_per_kwh[k])
        cap_w = float(env.signals.cap_w[k])
        fac_w = (it_w[act] + idle_w * pend) * pue  # (prev, target) facility power, W
        kwh = fac_w * period / 3.6e6
        excess = np.maximum(fac_w - cap_w, 0.0) * period / 3.6e6
        cost = (cfg.objective_weight * obj_per_kwh * kwh + cfg.slo_weight * viol[act] + cfg.cap_weight * excess)
        cost = np.where(ok[act], cost, np.inf)
        total = value[:, None] + cost
        choice[t] = np.argmin(total, axis=0)
        value = total[choice[t], np.arange(size)]
        # the relaxation: this period alone, serving at once, no start-up draw
        fac1 = it_w * pue
        cost1 = (cfg.objective_weight * obj_per_kwh * fac1 * period / 3.6e6 + cfg.slo_weight * viol
                 + cfg.cap_weight * np.maximum(fac1 - cap_w, 0.0) * period / 3.6e6)
        relaxed += float(np.min(np.where(ok, cost1, np.inf)))
    end = int(np.argmin(value))
    best = float(value[end])
    path = np.zeros(n_steps, dtype=np.int64)
    for t in range(n_steps - 1, -1, -1):
        path[t] = end
        end = int(choice[t, end])
    targets = np.stack([n_p[path], n_d[path]], axis=1).astype(np.int64)
    return OraclePlan(targets=targets, predicted_return=-best, relaxed_return=-relaxed,
                      infeasible_periods=infeasible, arrivals=arrivals)


class HindsightOracle:
    """Plays :func:`solve_oracle`'s plan through the environment (a :class:`servegym.baselines.pd.Policy`)."""

    name = "oracle"

    def __init__(self) -> None:
        self.plan: OraclePlan | None = None
        self._t = 0

    def reset(self, env: PDProvisionEnv, info: dict[str, Any]) -> None:
        self.plan = solve_oracle(env)
        self._t = 0

    def act(self, obs: NDArray[np.float32], info: dict[str, Any]) -> NDArray[np.int64]:
        if self.plan is None:
            raise ConfigError("HindsightOracle.act before reset(env, info)")
        a = self.plan.targets[min(self._t, len(self.plan.targets) - 1)]
        self._t += 1
        return a.copy()
