"""Provisioning baselines for ``servegym/PDProvision-v0`` and the loop that runs them.

Every policy sees what an agent sees -- the observation and the step ``info`` (observed rate, utilizations,
backlog, the coming period's length mix, scenario forecasts, power cap) -- and may read the environment's
analytical tables (the paper's model under the coming period's mix, :attr:`PDProvisionEnv.tables`), which
is the model the paper's method itself uses. :func:`run_policy` drives the environment's own ``reset`` /
``step`` loop, so baselines and agents are measured by the same dynamics.

* :class:`MinPowerPareto`: the paper's provisioning rule (problem (1), §2.2): each period, the least-power
  deployment with capacity >= lambda / rho_bar (rho_bar = 0.85) under the coming period's mix, ranked by the
  power drawn at lambda. ``lookahead=0`` (forecast-free) uses the last observed rate; ``lookahead=1`` uses
  max(observed, the scenario's mean rate of the next period). Two documented additions: the backlog is
  added as a demand to drain within ``drain_s`` (300 s; ``None`` = the paper's steady-state rule), and with
  ``respect_cap`` a choice whose facility power at lambda exceeds the coming period's cap is replaced by
  the largest-capacity deployment under the cap. If no deployment within the budget reaches the target
  capacity, the largest-capacity one is used.
* :class:`MinPowerForecast` (beyond the paper; a stronger non-learned baseline): the same rule, sized for
  max(observed rate, ``forecast_max_rps``), the scenario's highest mean rate over the periods until an
  instance started now would serve (``ceil(startup_delay / period) + 1`` periods; the observation's
  ``forecast_rate_max``), since new instances take ``startup_delay_s`` to serve while the paper's rule sizes
  for the coming period only. ``rho_bar`` is a parameter (``min-power+forecast:0.95``); the tuned value is
  chosen on the validation split only (``benchmarks/pd_yardsticks.py``).
* :class:`StaticPeak`: one deployment all day: the least-power one (at capacity, under the heaviest mix)
  whose capacity covers every period's scenario mean rate / rho_bar under that period's mix (a day-ahead
  plan from the known scenario, over the episode's periods; the largest-capacity deployment if nothing
  covers the peak).
* :class:`ThresholdAutoscaler`: a Kubernetes-HPA-like reactive rule per pool:
  desired = ceil(n x utilization / target) with target 0.7, no change within the tolerance |u / target - 1| <=
  0.1, scale-up immediate and scale-down stabilized over the last 300 s of recommendations (HPA's defaults,
  ``behavior.scaleDown.stabilizationWindowSeconds = 300``; the 0.7 target is a common HPA setting, illustrative).
  Utilization is what the env's ``info`` reports for the last period: prefill busy fraction
  served / (n_P mu_P); decode normalized throughput x_D = served / (n_D mu_D^max) (eq. 12, the token-throughput
  share of a full-pool decode instance; it saturates below 1 because reservations hold part of the pool).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray
from servegym.envs.pd.env import PDEnvConfig, PDProvisionEnv
from servegym.envs.pd.sim.pareto import DEFAULT_RHO_BAR
from servegym.envs.pd.sim.provisioning import MinPowerRule, check_rule

from servegym.errors import ConfigError, check_range

__all__ = ["MinPowerEmaForecast", "MinPowerExpectedForecast", "MinPowerForecast", "MinPowerPareto", "MinPowerPerfectForecast", "Policy", "PolicyResult", "StaticPeak", "ThresholdAutoscaler", "compare_policies",
           "default_policies", "expected_rates", "plot_deployments", "run_policy"]


@runtime_checkable
class Policy(Protocol):
    """A provisioning policy: ``reset`` binds it to an environment, ``act`` maps (obs, info) to (n_P, n_D)."""

    name: str

    def reset(self, env: PDProvisionEnv, info: dict[str, Any]) -> None: ...

    def act(self, obs: NDArray[np.float32], info: dict[str, Any]) -> NDArray[np.int64]: ...


def _action(n_p: int, n_d: int) -> NDArray[np.int64]:
    return np.array([n_p, n_d], dtype=np.int64)


class MinPowerPareto:
    """Minimum-power deployment for lambda / rho_bar, re-chosen every period (module docstring).

    The rule itself is :class:`servegym.envs.pd.sim.provisioning.MinPowerRule`, the same object the
    environment's ``residual`` and ``front`` action modes use for their reference suggestion.
    """

    def __init__(self, rho_bar: float = DEFAULT_RHO_BAR, lookahead: int = 0, drain_s: float | None = 300.0,
                 respect_cap: bool = True) -> None:
        check_rule(rho_bar, lookahead, drain_s)
        self.rho_bar, self.lookahead, self.drain_s, self.respect_cap = rho_bar, lookahead, drain_s, respect_cap
        self.name = "min-power" + ("+lookahead" if lookahead else "")
        self._rule: MinPowerRule | None = None

    def reset(self, env: PDProvisionEnv, info: dict[str, Any]) -> None:
        self._rule = MinPowerRule(env.tables, env.config.gpu_budget, env.config.pue, rho_bar=self.rho_bar,
                                  lookahead=self.lookahead, drain_s=self.drain_s, respect_cap=self.respect_cap)

    def act(self, obs: NDArray[np.float32], info: dict[str, Any]) -> NDArray[np.int64]:
        if self._rule is None:
            raise ConfigError("MinPowerPareto.act before reset(env, info)")
        sel = self._rule.suggest_from_info(info)
        return _action(sel.n_p, sel.n_d)


class MinPowerForecast(MinPowerPareto):
    """Minimum-power deployment for max(observed, forecast max over the start-up horizon) / rho_bar
    (module docstring); the paper's rule with a forecast that covers the start-up delay."""

    def __init__(self, rho_bar: float = DEFAULT_RHO_BAR, drain_s: float | None = 300.0,
                 respect_cap: bool = True) -> None:
        super().__init__(rho_bar=rho_bar, lookahead=1, drain_s=drain_s, respect_cap=respect_cap)
        self.name = "min-power+forecast" + ("" if rho_bar == DEFAULT_RHO_BAR else f":{rho_bar:g}")

    def act(self, obs: NDArray[np.float32], info: dict[str, Any]) -> NDArray[np.int64]:
        if self._rule is None:
            raise ConfigError("MinPowerForecast.act before reset(env, info)")
        sel, _ = self._rule.suggest(float(info["rate_rps"]), float(info["forecast_max_rps"]), float(info["backlog"]),
                                    int(info["mix_index"]), float(info["next_cap_w"]))
        return _action(sel.n_p, sel.n_d)


class MinPowerPerfectForecast(MinPowerPareto):
    """The causal reference of the pd ids: :class:`MinPowerForecast` given a perfect forecast.

    Each period it sizes for max(the coming period's true arrival rate, the highest true rate over the
    start-up horizon) / rho_bar (plus the backlog to drain), the true rates being the episode's realized
    arrival counts (:meth:`PDProvisionEnv.hindsight_arrivals`, what the hindsight oracle knows) instead of the
    scenario's mean-rate forecast. It knows the next few periods' arrivals and nothing further ahead, and it
    decides period by period like any causal rule, so it separates what a better forecast of the next minutes
    is worth (strongest -> this) from what only whole-day hindsight gives (this -> the oracle's exact plan).
    Not a policy an agent can copy: a reference row, never a candidate for the strongest baseline. Fluid mode
    only (the request-level simulator shares the arrival generator, so the counts cannot be read ahead).
    """

    def __init__(self, rho_bar: float = DEFAULT_RHO_BAR, drain_s: float | None = 300.0,
                 respect_cap: bool = True) -> None:
        super().__init__(rho_bar=rho_bar, lookahead=1, drain_s=drain_s, respect_cap=respect_cap)
        self.name = "min-power+perfect" + ("" if rho_bar == DEFAULT_RHO_BAR else f":{rho_bar:g}")
        self._rates: NDArray[np.float64] = np.zeros(0)
        self._t = 0
        self._horizon = 1

    def reset(self, env: PDProvisionEnv, info: dict[str, Any]) -> None:
        super().reset(env, info)
        cfg = env.config
        self._rates = env.hindsight_arrivals() / cfg.scenario.period_s  # req/s of every period left
        self._horizon = math.ceil(cfg.startup_delay_s / cfg.scenario.period_s) + 1  # as forecast_max_rps's
        self._t = 0

    def act(self, obs: NDArray[np.float32], info: dict[str, Any]) -> NDArray[np.int64]:
        if self._rule is None:
            raise ConfigError("MinPowerPerfectForecast.act before reset(env, info)")
        ahead = self._rates[self._t: self._t + self._horizon]
        self._t += 1
        rate = float(ahead[0]) if ahead.size else 0.0
        sel, _ = self._rule.suggest(rate, float(ahead.max()) if ahead.size else 0.0, float(info["backlog"]),
                                    int(info["mix_index"]), float(info["next_cap_w"]))
        return _action(sel.n_p, sel.n_d)


class MinPowerExpectedForecast(MinPowerPareto):
    """A causal reference for forecast-free conditions (the pd stress tracks): :class:`MinPowerForecast` sized
    for the day's **expected** rates instead of a forecast of the realized ones.

    Each period it sizes for the highest expected mean rate over the start-up horizon (the coming period and the
    ``ceil(startup_delay / period)`` after it) / rho_bar, plus the backlog to drain, and ignores the last
    observed rate. The expected rate of a minute is the smooth median plus ``burstiness`` x (the band's midpoint
    - the median): the mean of the i.i.d. uniform per-minute draw (:mod:`servegym.envs.pd.sim.scenario`,
    "Per-minute spread"), i.e. the conditional expectation of the coming rates given everything observed, since
    the draws are independent of the past. It knows the day's shape and band (what a policy estimates from the
    day's history, and the persistence forecast's smooth shape shows) and none of the episode's draws, unlike
    :class:`MinPowerPerfectForecast`. A reference row, never a candidate for the strongest baseline.
    """

    def __init__(self, rho_bar: float = DEFAULT_RHO_BAR, drain_s: float | None = 300.0,
                 respect_cap: bool = True) -> None:
        super().__init__(rho_bar=rho_bar, lookahead=1, drain_s=drain_s, respect_cap=respect_cap)
        self.name = "min-power+expected" + ("" if rho_bar == DEFAULT_RHO_BAR else f":{rho_bar:g}")
        self._expected: NDArray[np.float64] = np.zeros(0)
        self._env: PDProvisionEnv | None = None
        self._horizon = 1

    def reset(self, env: PDProvisionEnv, info: dict[str, Any]) -> None:
        super().reset(env, info)
        self._expected = expected_rates(env)
        self._horizon = math.ceil(env.config.startup_delay_s / env.config.scenario.period_s) + 1
        self._env = env

    def act(self, obs: NDArray[np.float32], info: dict[str, Any]) -> NDArray[np.int64]:
        if self._rule is None or self._env is None:
            raise ConfigError("MinPowerExpectedForecast.act before reset(env, info)")
        k = self._env.step_index
        ahead = self._expected[k: k + self._horizon]
        rate = float(ahead.max()) if ahead.size else 0.0
        sel, _ = self._rule.suggest(rate, rate, float(info["backlog"]), int(info["mix_index"]), float(info["next_cap_w"]))
        return _action(sel.n_p, sel.n_d)


class MinPowerEmaForecast(MinPowerPareto):
    """The persistence-forecast rule fed the day's level (the pd stress tracks, config ``rate_ema_periods``):
    :class:`MinPowerForecast` sized for the **level forecast** instead of the persistence forecast.

    Each period it sizes for ``info["level_forecast_max_rps"]`` / rho_bar, the highest smooth mean rate over the
    start-up horizon times the day's level (an exponential moving average of observed rate / smooth rate over
    ``rate_ema_periods``, :meth:`servegym.envs.pd.sim.state.PDState.update_level`), plus the backlog to drain; like
    :class:`MinPowerExpectedForecast` it ignores the last observed rate, whose i.i.d. per-minute draw says nothing
    of the coming ones (sizing for max(observed, level forecast) instead cost 0.3 kWh/day more on 6 validation
    episodes of stress-delay at every rho_bar in 0.8-0.9). Everything it reads is in the observation (``level_forecast_max / peak``), so it is a rule
    an agent can copy and a candidate for the strongest; the env's ``reference = "min-power+ema:RHO"`` is the
    same rule. ConfigError on an env without the level entries.
    """

    def __init__(self, rho_bar: float = DEFAULT_RHO_BAR, drain_s: float | None = 300.0,
                 respect_cap: bool = True) -> None:
        super().__init__(rho_bar=rho_bar, lookahead=1, drain_s=drain_s, respect_cap=respect_cap)
        self.name = "min-power+ema" + ("" if rho_bar == DEFAULT_RHO_BAR else f":{rho_bar:g}")

    def reset(self, env: PDProvisionEnv, info: dict[str, Any]) -> None:
        if not env.config.rate_ema_periods:
            raise ConfigError(f"baseline {self.name!r} reads the level forecast; allowed on an env with "
                              "rate_ema_periods > 0 (the pd stress tracks)")
        super().reset(env, info)

    def act(self, obs: NDArray[np.float32], info: dict[str, Any]) -> NDArray[np.int64]:
        if self._rule is None:
            raise ConfigError("MinPowerEmaForecast.act before reset(env, info)")
        rate = float(info["level_forecast_max_rps"])
        sel, _ = self._rule.suggest(rate, rate, float(info["backlog"]), int(info["mix_index"]), float(info["next_cap_w"]))
        return _action(sel.n_p, sel.n_d)


def expected_rates(env: PDProvisionEnv) -> NDArray[np.float64]:
    """The expected mean rate (req/s) of every period of ``env``'s day: the per-minute rates with each uniform
    draw at its mean 0.5 (the rate is linear in it), averaged per period; the smooth rate on the legacy day."""
    from servegym.envs.pd.sim.day_shape import horizon_minutes, minute_rates, period_means

    day, sig = env.day, env.signals
    n = sig.base_rate_rps.size
    if sig.band.size == 0:
        return np.asarray(sig.base_rate_rps, dtype=float)
    m0, n_min, first_s = horizon_minutes(day.start_hour, day.period_s, n)
    u = np.full((sig.band.shape[0], n_min), 0.5)
    return period_means(minute_rates(sig.band, m0, n_min, float(day.burstiness), u), first_s, day.period_s, n)


class StaticPeak:
    """One deployment for the whole day, sized for the day's peak demand (module docstring)."""

    name = "static-peak"

    def __init__(self, rho_bar: float = DEFAULT_RHO_BAR) -> None:
        check_range("rho_bar", rho_bar, 0.0, 1.0, low_inclusive=False)
        self.rho_bar = rho_bar
        self.deployment: tuple[int, int] = (1, 1)

    def reset(self, env: PDProvisionEnv, info: dict[str, Any]) -> None:
        tab, budget = env.tables, env.config.gpu_budget
        rates = env.forecast_rates(env.signals.base_rate_rps.size)
        k0 = env.step_index  # the episode's first period (a curriculum episode may start later in the day)
        mixes = env.signals.mix_index[k0: k0 + rates.size]
        need = np.zeros(tab.mu.shape[0])
        np.maximum.at(need, mixes, rates / self.rho_bar)
        worst = int(np.argmax(need / tab.mu_p))  # the mix whose peak demand loads prefill the most
        grid = tab.grid(worst, budget)
        ok = np.all(tab.mu[:, grid.n_p, grid.n_d] >= need[:, None], axis=0)
        if ok.any():
            idx = np.flatnonzero(ok)
            i = int(idx[np.lexsort((grid.n_p[idx] + grid.n_d[idx], grid.power_w[idx]))[0]])
        else:  # the budget cannot cover the peak: the deployment with the best worst-case coverage
            cover = np.min(tab.mu[:, grid.n_p, grid.n_d] / np.maximum(need[:, None], 1e-12), axis=0)
            i = int(np.argmax(cover))
        self.deployment = (int(grid.n_p[i]), int(grid.n_d[i]))

    def act(self, obs: NDArray[np.float32], info: dict[str, Any]) -> NDArray[np.int64]:
        return _action(*self.deployment)


class ThresholdAutoscaler:
    """HPA-like reactive utilization-target autoscaler, one rule per pool (module docstring)."""

    name = "threshold-hpa"

    def __init__(self, target: float = 0.7, tolerance: float = 0.1, scale_down_window_s: float = 300.0) -> None:
        check_range("target", target, 0.0, 1.0, low_inclusive=False)
        check_range("tolerance", tolerance, 0.0, 1.0)
        check_range("scale_down_window_s", scale_down_window_s, 0.0, None)
        self.target, self.tolerance, self.window_s = target, tolerance, scale_down_window_s
        self.name = "threshold-hpa" + ("" if target == 0.7 else f":{target:g}")
        self._recs: deque[tuple[int, int]] = deque()
        self._budget = 2
        self._max = (1, 1)

    def reset(self, env: PDProvisionEnv, info: dict[str, Any]) -> None:
        n = max(1, math.ceil(self.window_s / env.config.scenario.period_s))
        self._recs = deque(maxlen=n)
        self._budget = env.config.gpu_budget
        self._max = (env.config.max_prefill, env.config.max_decode)

    def _desired(self, n: int, util: float) -> int:
        ratio = util / self.target
        if abs(ratio - 1.0) <= self.tolerance:
            return n
        return max(1, math.ceil(n * ratio - 1e-9))

    def act(self, obs: NDArray[np.float32], info: dict[str, Any]) -> NDArray[np.int64]:
        n_p, n_d = int(info["target_p"]), int(info["target_d"])
        if "prefill_util" not in info:  # reset info: nothing measured yet
            return _action(n_p, n_d)
        p = min(self._desired(n_p, float(info["prefill_util"])), self._max[0])
        d = min(self._desired(n_d, float(info["decode_util"])), self._max[1])
        self._recs.append((p, d))
        # scale-up takes effect at once; scale-down only to the highest recommendation in the window
        p = max(r[0] for r in self._recs)
        d = max(r[1] for r in self._recs)
        if p + d > self._budget:
            p = max(1, min(self._max[0], round(self._budget * p / (p + d))))
            d = min(self._max[1], self._budget - p)
        return _action(p, d)


def default_policies() -> list[Policy]:
    """The baselines of ``servegym pd compare``, in report order."""
    return [MinPowerPareto(lookahead=0), MinPowerPareto(lookahead=1), StaticPeak(), ThresholdAutoscaler()]


@dataclass
class PolicyResult:
    """Totals and per-period traces of one policy run (units in names)."""

    policy: str
    energy_kwh: float
    carbon_g: float
    cost_usd: float
    slo_violation_pct: float  # share of arrivals missing TTFT or TPOT, %
    cap_excess_kwh: float
    reward: float
    steps: int
    arrived: float
    backlog_end: float
    series: dict[str, NDArray[np.float64]] = field(default_factory=dict)  # per period: hour, n_p, n_d, ...

    def summary(self) -> dict[str, Any]:
        return {"policy": self.policy, "energy_kwh": self.energy_kwh, "carbon_g": self.carbon_g,
                "slo_violation_pct": self.slo_violation_pct, "cap_excess_kwh": self.cap_excess_kwh,
                "cost_usd": self.cost_usd, "reward": self.reward, "steps": self.steps,
                "backlog_end": self.backlog_end}


SERIES_KEYS = ("hour", "n_p", "n_d", "pending_p", "pending_d", "rate_rps", "power_w", "cap_w", "backlog",
               "slo_violation_pct")


def run_policy(env: PDProvisionEnv, policy: Policy, *, seed: int | None = 0, max_steps: int | None = None,
               progress: Any = None) -> PolicyResult:
    """Run ``policy`` on ``env`` for one episode (or ``max_steps``); ``progress`` is an optional tqdm bar."""
    obs, info = env.reset(seed=seed)
    policy.reset(env, info)
    series: dict[str, list[float]] = {k: [] for k in SERIES_KEYS}
    energy = carbon = cost = excess = reward = viol = arrived = 0.0
    steps = 0
    limit = env.signals.base_rate_rps.size if max_steps is None else min(int(max_steps), env.signals.base_rate_rps.size)
    while steps < limit:
        obs, r, terminated, truncated, info = env.step(policy.act(obs, info))
        steps += 1
        reward += r
        energy += info["energy_kwh"]
        carbon += info["carbon_g"]
        cost += info["cost_usd"]
        excess += info["cap_excess_kwh"]
        viol += info["slo_violation_pct"] * info["arrived"]
        arrived += info["arrived"]
        for key in SERIES_KEYS:
            series[key].append(float(info[key]))
        if progress is not None:
            progress.update(1)
        if terminated or truncated:
            break
    return PolicyResult(policy=policy.name, energy_kwh=energy, carbon_g=carbon, cost_usd=cost,
                        slo_violation_pct=viol / arrived if arrived > 0 else 0.0, cap_excess_kwh=excess,
                        reward=reward, steps=steps, arrived=arrived, backlog_end=float(info["backlog"]),
                        series={k: np.asarray(v) for k, v in series.items()})


def compare_policies(config: PDEnvConfig | dict[str, Any] | None = None, *, seed: int = 0,
                     max_steps: int | None = None, policies: list[Policy] | None = None,
                     progress: bool = False) -> list[PolicyResult]:
    """Run each policy (default: :func:`default_policies`) on the same scenario and seed."""
    env = PDProvisionEnv(config)
    pols = default_policies() if policies is None else policies
    steps = env.signals.base_rate_rps.size if max_steps is None else min(int(max_steps),
                                                                          env.signals.base_rate_rps.size)
    bar = None
    if progress:
        from servegym.estimates import estimate
        from servegym.progress import Progress

        est, basis = estimate("pd compare", [p.name for p in pols], steps,
                              default_config=env.config.mode == "fluid")
        bar = Progress(steps * len(pols), "pd compare", "step", what=f"{len(pols)} policies on the same scenario "
                       f"(seed {seed}), {steps:,} periods each", estimate_s=est, basis=basis)
    try:
        return [run_policy(env, p, seed=seed, max_steps=steps, progress=bar) for p in pols]
    finally:
        if bar is not None:
            bar.close()


def plot_deployments(results: list[PolicyResult], path: str, title: str = "PD provisioning over the day") -> None:
    """Write a PNG: offered rate (top), facility power of every policy against the power cap (second), and each
    policy's n_P, n_D over time (one row each). Legends sit right of the axes so no curve is hidden; policies'
    power curves differ in colour and line style; instance axes have integer ticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    if not results:
        raise ConfigError("no results to plot")
    fig, axes = plt.subplots(len(results) + 2, 1, figsize=(10, 1.9 * (len(results) + 2)), sharex=True)
    first = results[0].series
    hours = np.unwrap(first["hour"], period=24.0)  # local hour, continuing past midnight
    legend_at = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0, "fontsize": 7}
    ax = axes[0]
    ax.plot(hours, first["rate_rps"], color="0.3", lw=0.8, label="arrivals")
    ax.set_ylabel("req/s")
    ax.set_title(title)
    ax.legend(**legend_at)
    ax = axes[1]
    ax.plot(hours, first["cap_w"] / 1000.0, color="black", lw=1.6, ls="--", label="power cap", zorder=5)
    styles = ("-", (0, (5, 1.5)), "-.", ":")
    # a 15-period moving mean: the per-period power jitters with Poisson arrivals and would hide the policies
    k = min(15, len(hours))
    for i, r in enumerate(results):
        win = np.ones(k)
        kw = np.convolve(r.series["power_w"] / 1000.0, win, mode="same") / np.convolve(np.ones(len(hours)), win, mode="same")
        ax.plot(hours, kw, lw=1.3, color=f"C{i}", ls=styles[i % len(styles)], label=f"{r.policy}")
    ax.set_ylabel("facility kW")
    ax.legend(title=f"power ({k}-period mean)", title_fontsize=7, **legend_at)
    for ax, r in zip(axes[2:], results, strict=True):
        ax.step(hours, r.series["n_p"], where="post", label="n_P (prefill)")
        ax.step(hours, r.series["n_d"], where="post", label="n_D (decode)")
        ax.set_ylabel("instances")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{r.policy}: {r.energy_kwh:.1f} kWh, SLO violation {r.slo_violation_pct:.2f}%", fontsize=8)
        ax.legend(**legend_at)
    axes[-1].set_xlabel("local hour")
    from servegym.report import save_png

    save_png(fig, path)
