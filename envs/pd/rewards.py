"""The pd env's reward: the period's objective, SLO, backlog and power-cap terms, and the per-step bound B.

Both are defined in the env's module docstring ("Reward", "Bound"); the episode return equals minus the
weighted sums of the info KPIs these return (tested in tests/test_pd_env.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from servegym.envs.pd.env_config import PDEnvConfig
    from servegym.envs.pd.sim.scenario import DaySignals
    from servegym.envs.pd.sim.state import PDState


@dataclass(frozen=True)
class PeriodReward:
    """One period's reward (before any termination penalty) and the KPIs it is made of (units in names)."""

    reward: float
    energy_kwh: float  # facility energy
    carbon_g: float
    cost: float  # USD
    objective: float  # the configured objective's value (kWh, kg or USD)
    viol_share: float  # share of the period's arrivals missing an SLO target
    backlog_frac: float  # min(backlog / limit, 1)
    cap_w: float  # the period's power cap, W
    ci: float  # grid carbon intensity, g/kWh
    price: float  # USD/kWh


def period_reward(cfg: PDEnvConfig, state: PDState, m: dict[str, Any], limit: float) -> PeriodReward:
    """The reward of the period ``state.k`` whose metrics ``m`` (the fluid or request period's) were just run,
    ``state`` at the period's end (its backlog; ``limit``: the backlog limit, requests); pops
    ``m["slo_violation"]`` (info carries it as ``slo_violation_pct``)."""
    signals, k, backlog = state.signals, state.k, state.backlog
    energy_kwh = m["energy_j"] / 3.6e6
    cap_w = float(signals.cap_w[k])
    ci = float(signals.ci_g_per_kwh[k])
    price = float(signals.price_usd_per_kwh[k])
    carbon_g = energy_kwh * ci
    cost = energy_kwh * price
    objective = {"energy": energy_kwh, "carbon": carbon_g / 1000.0, "cost": cost}[cfg.objective]
    # the period drivers report the violation as a share; info carries it in % (the suite's convention)
    viol_share = m.pop("slo_violation")
    backlog_frac = min(backlog / limit, 1.0)
    reward = -(cfg.objective_weight * objective + cfg.slo_weight * viol_share
               + cfg.backlog_weight * backlog_frac + cfg.cap_weight * m["cap_excess_kwh"])
    return PeriodReward(reward, energy_kwh, carbon_g, cost, objective, viol_share, backlog_frac, cap_w, ci, price)


def step_bound(cfg: PDEnvConfig, signals: DaySignals, idle_w: float) -> float:
    """B such that -B <= reward <= 0 on every non-terminal step of the day ``signals`` (``idle_w``: the
    loaded-idle power of an instance, W)."""
    cal = cfg.system.calibration
    p_max = max(cal.prefill_ramp.p_sat_w, cal.decode_ramp.p_sat_w, idle_w)
    e_max = cfg.gpu_budget * p_max * cfg.pue * cfg.scenario.period_s / 3.6e6  # kWh per period
    obj = {"energy": e_max, "carbon": e_max * float(np.max(signals.ci_g_per_kwh)) / 1000.0,
           "cost": e_max * float(np.max(signals.price_usd_per_kwh))}[cfg.objective]
    return cfg.objective_weight * obj + cfg.slo_weight + cfg.backlog_weight + cfg.cap_weight * e_max
