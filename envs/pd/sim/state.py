"""The pd model's typed state: what a provisioning episode is at a period boundary, owned by the model.

As gymnax splits an environment into ``EnvParams`` (fixed) and ``EnvState`` (what a step changes), the pd
model has two dataclasses:

* :class:`PDParams` (frozen): the constants of one env config that the model's periods read (period length,
  PUE, SLO targets, start-up delay, power ramps, the reference's horizon, the observation's scales).
* :class:`PDState` (mutable): the episode's day (signals, mix tables, the reference rule) and everything a
  step updates (the period index, instances serving and starting, backlog, totals, rate history, the last
  period's readouts, the reference's suggestion, the request-level simulator).

The model's functions (:func:`servegym.envs.pd.sim.fluid.fluid_periods`, the request-level period of
:mod:`servegym.envs.pd.dynamics`) and the env's action types, observations and rewards take these and never the
env; :class:`~servegym.envs.pd.env.PDProvisionEnv` holds one ``PDState`` (``env.state``, a new one per reset)
and updates it in place as a step runs. Units: rates req/s, times s, power W, energy J.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from servegym.envs.pd.sim.provisioning import MinPowerRule, Suggestion
from servegym.envs.pd.sim.scenario import DayScenario, DaySignals, persistence_forecast
from servegym.envs.pd.sim.tables import MixTables

#: observed arrival rates the observation keeps (the last period first)
RATE_HISTORY = 4


@dataclass(frozen=True, slots=True)
class PDParams:
    """The model's constants of one env config (fixed for the env's life; units in names)."""

    period_s: float  # provisioning period
    pue: float  # facility / IT power
    startup_delay_s: float  # a starting instance serves this long after its target
    ttft_slo_s: float
    tpot_slo_s: float
    ramp_p: tuple[float, float, float]  # prefill power ramp (p0, slope, p_sat), W
    ramp_d: tuple[float, float, float]  # decode power ramp, W
    idle_w: float  # loaded-idle power of a starting instance, W
    poisson_arrivals: bool  # a period's arrivals: a Poisson count of its mean (else the mean itself)
    lookahead: int  # periods the forecast covers: ceil(startup_delay_s / period_s) + 1
    ref_horizon: bool  # the reference sizes for the forecast maximum over ``lookahead`` periods
    budget_power_w: float  # facility power of the GPU budget at saturation (the observation's scale)
    backlog_limit: float  # requests above which an episode terminates
    front_slots: int  # slots of the front action mode (the largest eps-Pareto front)
    level_alpha: float = 0.0  # weight of the newest period in the day-level EMA (1 / rate_ema_periods; 0: off)
    ref_level: bool = False  # the reference sizes for the level forecast (``min-power+ema``), not the forecast


def _placeholder_suggestion() -> Suggestion:
    return Suggestion(n_p=1, n_d=1, demand_rps=0.0, capacity_rps=0.0, power_w=0.0, mix=0)


@dataclass(slots=True, eq=False)
class PDState:
    """One pd episode's state (module docstring). The day's fields are shared by the episodes of one day;
    the rest is the episode's own and changes in place as a step runs."""

    # the episode's day: its scenario, per-period signals, mix tables and the reference rule over them
    day: DayScenario
    signals: DaySignals
    tables: MixTables
    rule: MinPowerRule  # the reference: min-power with one period of lookahead (config ``reference``)
    mu_list: list[Any]  # capacity mu[mix][n_P][n_D] (req/s) as nested lists: fast scalar lookups per step
    max_price: float  # the day's highest energy price, USD/kWh (the observation's scale)
    rates: NDArray[np.float64]  # the episode's mean offered rate of every period, req/s
    persistence: bool = False  # whether the forecast is by persistence (shift-forecast, a track)
    # the clock: the coming period k of the episode's periods start .. end - 1, its curriculum stage
    k: int = 0
    start: int = 0
    end: int = 0
    stage: int = 0
    # the deployment: serving instances, ready times (s, ascending) of starting ones per pool, the target
    active: list[int] = field(default_factory=lambda: [1, 1])
    pending: list[list[float]] = field(default_factory=lambda: [[], []])
    target: list[int] = field(default_factory=lambda: [1, 1])
    # the queue and the episode's totals, requests
    backlog: float = 0.0
    arrived: float = 0.0
    served: float = 0.0
    # what the last periods showed: observed rates (req/s, the last first), facility power (W), violation
    # share, utilizations (prefill, decode, demand)
    hist: list[float] = field(default_factory=lambda: [0.0] * RATE_HISTORY)
    last_power_w: float = 0.0
    last_viol: float = 0.0
    last_util: tuple[float, float, float] = (0.0, 0.0, 0.0)
    # the day's level so far: an exponential moving average of observed rate / smooth rate (config
    # ``rate_ema_periods``; stays 1 when off)
    level: float = 1.0
    last_info: dict[str, Any] = field(default_factory=dict)
    done: bool = False  # terminated or truncated
    adjusted_actions: int = 0  # this episode's actions changed before they were applied
    step_bound: float = 0.0  # B: -B <= reward <= 0 on every non-terminal step of this day
    # the reference's suggestion for the coming period and the IT power (W) of every grid row at its demand
    ref: Suggestion = field(default_factory=_placeholder_suggestion)
    ref_power: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    # the request-level simulator (config ``mode="request"``), its length samplers and longest request
    sim: Any = None
    samplers: list[Any] = field(default_factory=list)
    sim_max_len: int = 0

    def next_episode(self, rates: NDArray[np.float64]) -> PDState:
        """A fresh episode on the same day with the mean rates ``rates`` (everything else at its start)."""
        return PDState(self.day, self.signals, self.tables, self.rule, self.mu_list, self.max_price, rates)

    # --------------------------------------------------------------------------------- instances
    def apply_target(self, n_p: int, n_d: int, now_s: float, startup_delay_s: float) -> None:
        """Make (n_P, n_D) the target at ``now_s``: start instances (ready ``startup_delay_s`` later) up to it,
        or cancel starting ones (latest first) and then remove active ones down to it."""
        ready = now_s + startup_delay_s
        for pool, target in ((0, n_p), (1, n_d)):
            total = self.active[pool] + len(self.pending[pool])
            if target > total:
                self.pending[pool].extend([ready] * (target - total))
            else:
                drop = total - target
                cancel = min(drop, len(self.pending[pool]))
                if cancel:
                    del self.pending[pool][len(self.pending[pool]) - cancel:]
                self.active[pool] -= drop - cancel
        self.target = [n_p, n_d]
        if startup_delay_s <= 0:
            self.activate(now_s)

    def activate(self, t: float) -> None:
        """Starting instances whose ready time is at or before ``t`` (s) serve from now on."""
        for pool in (0, 1):
            pend = self.pending[pool]
            n = 0
            while n < len(pend) and pend[n] <= t + 1e-9:
                n += 1
            if n:
                self.active[pool] += n
                del pend[:n]

    # ----------------------------------------------------------------------------------- reading
    def mix_index(self, step: int | None = None) -> int:
        """Index into :attr:`tables` of the length mix of period ``step`` (default: the coming period)."""
        k = min(self.k if step is None else int(step), self.signals.mix_index.size - 1)
        return int(self.signals.mix_index[k])

    def forecast_rates(self, steps: int) -> NDArray[np.float64]:
        """Forecast mean rates (req/s) of the next ``steps`` periods from the coming one (fewer at the episode
        end): the exact mean rates, or by persistence (:func:`~servegym.envs.pd.sim.scenario.persistence_forecast`)."""
        stop = min(self.k + int(steps), self.end)
        if self.persistence:
            return persistence_forecast(self.signals.base_rate_rps, self.rates, self.k, stop)
        return np.asarray(self.rates[self.k: stop], dtype=float)

    def level_forecast_rates(self, steps: int) -> NDArray[np.float64]:
        """The level forecast of the next ``steps`` periods from the coming one (fewer at the episode end), req/s:
        each period's smooth mean rate times :attr:`level`, the day's level estimated from the observed rates."""
        stop = min(self.k + int(steps), self.end)
        return np.asarray(self.signals.base_rate_rps[self.k: stop], dtype=float) * self.level

    def start_level(self, rate_rps: float) -> None:
        """The level at the episode's first period: ``rate_rps`` (the rate the history starts at) over its smooth
        rate."""
        self.level = _ratio(rate_rps, float(self.signals.base_rate_rps[self.k]), 1.0)

    def update_level(self, rate_rps: float, alpha: float) -> None:
        """Fold the observed rate ``rate_rps`` of the period :attr:`k` just run into :attr:`level`:
        level <- (1 - alpha) level + alpha rate / smooth rate (a period with no smooth rate leaves it)."""
        k = min(self.k, self.signals.base_rate_rps.size - 1)
        self.level += alpha * (_ratio(rate_rps, float(self.signals.base_rate_rps[k]), self.level) - self.level)

    def front_rows(self, mix: int, slots: int) -> NDArray[np.int64]:
        """Grid rows of ``mix``'s eps-Pareto front, capacity ascending (evenly thinned to ``slots``)."""
        f = self.rule.mix_cache(mix).front
        if f.size > slots:  # only if the tables changed after construction
            f = f[np.round(np.linspace(0, f.size - 1, slots)).astype(np.int64)]
        return f

    # ------------------------------------------------------------------------------------ updates
    def update_reference(self, params: PDParams) -> None:
        """The reference's suggestion for the coming period: min-power with one period of lookahead, or with
        ``params.ref_horizon`` sized for the forecast maximum over the start-up horizon."""
        k = min(self.k, self.signals.base_rate_rps.size - 1)
        if params.ref_level:  # the day's level over the start-up horizon, whatever the last period showed
            fc = self.level_forecast_rates(params.lookahead)
            forecast = float(fc.max()) if fc.size else 0.0
            self.ref, self.ref_power = self.rule.suggest(
                forecast, forecast, self.backlog, int(self.signals.mix_index[k]), float(self.signals.cap_w[k]))
            return
        if params.ref_horizon:
            fc = self.forecast_rates(params.lookahead)
            forecast = float(fc.max()) if fc.size else 0.0
        else:
            fc = self.forecast_rates(1)  # as info has it
            forecast = float(fc[0]) if fc.size else 0.0
        self.ref, self.ref_power = self.rule.suggest(
            self.hist[0], forecast, self.backlog, int(self.signals.mix_index[k]), float(self.signals.cap_w[k]))


def _ratio(rate: float, smooth: float, default: float) -> float:
    return rate / smooth if smooth > 0.0 else default


def draw_arrivals(params: PDParams, rates: NDArray[np.float64], rng: np.random.Generator, k: int) -> float:
    """Requests arriving in period ``k`` of an episode with mean rates ``rates``: a Poisson count of the mean
    rate x period (``params.poisson_arrivals``) or the mean itself."""
    mean = float(rates[k]) * params.period_s
    return float(rng.poisson(mean)) if params.poisson_arrivals else mean
