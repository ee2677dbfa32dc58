"""``servegym/PDProvision-v0``: provision prefill and decode instances of a PD-disaggregated deployment over a day.

One step is one provisioning period (``scenario.period_s``, default 60 s); an episode is
``scenario.horizon_steps`` periods (default 1440 = one day) and ends by truncation only (there is no
terminal state: the service runs on). The load, length mix and grid signals come from
:mod:`servegym.envs.pd.scenario` (real Azure per-minute rates, the Azure/Mooncake length mix, a real
zone's hourly carbon intensity, a power-cap schedule with demand-response events, a price schedule).

**Action** ``MultiDiscrete([max_prefill + 1, max_decode + 1])``: the target (n_P, n_D), i.e. active plus
starting instances of each pool, within ``gpu_budget`` GPUs (one GPU per instance, as in the paper).
:meth:`PDProvisionEnv.action_masks` (sb3-contrib's MultiDiscrete layout: the two per-dimension masks
concatenated) masks 0 (a PD deployment needs an instance in each pool) and counts above
``gpu_budget - 1``. A masked action that is still sent is adjusted, never rejected, and
``info["action_adjusted"]`` says so: a 0 is raised to 1; a target with n_P + n_D > gpu_budget is scaled
onto the budget, n_P' = min(max_P, max(1, round(B n_P / (n_P + n_D)))), n_D' = min(max_D, B - n_P').
Anything outside the space (wrong shape, non-integer, out of range) raises
:class:`~servegym.errors.ActionError`.

**Instances.** A target above the current count starts instances that become active
``startup_delay_s`` later (model load and engine warm-up; default 60 s, the request-level simulator's
:data:`~servegym.envs.pd.simulator.DEFAULT_STARTUP_DELAY_S`: 65.6 GB of weights from local NVMe at ~2 GB/s
plus SGLang's CUDA-graph capture and warm-up; an assumption, the paper excludes start-up transients).
Starting instances hold a GPU and draw the loaded-idle power (115 W, App. B.3). A target below the count
cancels starting instances first (latest first), then removes active ones immediately.

**Fluid dynamics** (``mode="fluid"``, default), from the analytical model (:mod:`servegym.envs.pd.model`)
under the period's mix: arrivals in a period are a Poisson count of the scenario's mean rate
(``arrivals="mean"``: the mean itself), spread evenly; a period is split at the instants starting instances
become ready and, on each piece with capacity mu and arrival rate lambda, the backlog Q follows
dQ/dt = lambda - mu while Q > 0 or lambda > mu (served + Q = arrived holds exactly). Served work runs at
rate mu while Q > 0, else lambda. Power is the capped-ramp model at the served rate (eq. 14) plus
starting instances; facility power is IT power x ``pue``. TTFT of a request arriving when the backlog is Q is
Q / mu (fluid queue, FCFS) + the prefill wait + t_P(l_in): the prefill wait has Kingman's mean W (eq. 21,
CVa^2 = 1/n_P, utilization capped at 0.99 since the backlog carries any overload) and the heavy-traffic
exponential tail P(wait > x) = rho exp(-rho x / W) (Kingman 1961, the paper's ref. [24]); t_P(l_in) is
taken over 64 quantiles of the mix's prefill-time distribution, so very long prompts miss a tight TTFT
target even on an idle deployment. TPOT is the decode-iteration time at the Little's-law decode batch (the
operating batch while backlogged). ``info["slo_violation_pct"]`` is the share (%) of the period's arrivals
that miss the TTFT or TPOT target (16 arrival instants per piece).

**Request-level dynamics** (``mode="request"``) run :class:`servegym.envs.pd.simulator.PDSimulator` (individual
requests, KV reservations, continuous batching, ramp power per instance; the simulator handles start-up
delays and removals itself); see :meth:`PDProvisionEnv._request_step` for how its window metrics map to
``info``. It is orders of magnitude slower than fluid mode.

**Observation** ``Box(-1, 10, (24,), float32)`` (values clipped): see :data:`OBS_FIELDS` for the order and
scale of each entry (rates / peak_rate_rps, counts / pool maxima, log1p backlog / 10, ...).

**Info** (every step; reset gives the state keys): ``power_w`` (mean facility power of the period, W),
``it_power_w``, ``energy_kwh`` (facility), ``carbon_g``, ``cost_usd``, ``slo_violation_pct`` (% of the
period's arrivals), ``ttft_s`` / ``tpot_s`` (means), ``cap_w``, ``cap_excess_kwh``, ``n_p`` / ``n_d`` (serving at the
period end), ``pending_p`` / ``pending_d`` (starting), ``target_p`` / ``target_d``, ``backlog`` (requests),
``arrived`` / ``served`` (period) and ``arrived_total`` / ``served_total``, ``rate_rps`` (observed),
``forecast_rate_rps`` / ``forecast_max_rps``, ``mix_index`` / ``mix_weights`` (coming period), ``capacity_rps``,
``prefill_util`` (served / (n_P mu_P)), ``decode_util`` (served / (n_D mu_D^max), eq. 12), ``demand_util``
((arrivals + backlog) rate / mu), ``ci_g_per_kwh``, ``price_usd_per_kwh``, ``action_adjusted``.

**Reward** = -(objective_weight x objective) - slo_weight x slo_violation_pct / 100 - cap_weight x cap_excess_kwh,
objective = facility energy (kWh), carbon (kg CO2eq) or cost (USD) of the period per ``objective``.

Configuration: :class:`PDEnvConfig` (frozen dataclass); ``PDProvisionEnv(config=dict)`` takes highway-env
style overrides of :meth:`PDProvisionEnv.default_config` (nested ``"scenario"`` dict allowed).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray
from servegym.envs.pd.catalog import PDSystem, paper_system
from servegym.envs.pd.pareto import DEFAULT_RHO_BAR, max_capacity_under_power, min_power_deployment
from servegym.envs.pd.scenario import DayScenario, DaySignals, build_signals
from servegym.envs.pd.tables import MixTables, mix_tables

from servegym.errors import ActionError, ConfigError, check_range, known_overrides

OBJECTIVES = ("energy", "carbon", "cost")
MODES = ("fluid", "request")
ARRIVALS = ("poisson", "mean")
RATE_HISTORY = 4
N_SLO_POINTS = 16
RHO_K_MAX = 0.9

#: Observation entries in order, with their scaling.
OBS_FIELDS: tuple[str, ...] = (
    "rate_last / peak_rate_rps",  # observed arrival rate of the last period
    "rate_t-2 / peak", "rate_t-3 / peak", "rate_t-4 / peak",
    "forecast_rate_next / peak",  # scenario mean rate of the coming period (no Poisson noise)
    "forecast_rate_max / peak",  # max scenario mean rate over the next ceil(startup/period) + 1 periods
    "share_azure_code", "share_azure_conv", "share_mooncake",  # length mix of the coming period
    "mean_input_tokens / 1e4", "mean_output_tokens / 1e3",
    "n_p_active / max_prefill", "n_d_active / max_decode",
    "n_p_starting / max_prefill", "n_d_starting / max_decode",
    "capacity_active / peak",  # mu of the active deployment under the coming mix
    "log1p(backlog requests) / 10",
    "power_cap_w / budget_power_w",  # cap of the coming period; budget power = gpu_budget x 692 W x pue
    "facility_power_last / power_cap_w",
    "ci_g_per_kwh / 1000", "price / max price",
    "sin(2 pi hour / 24)", "cos(2 pi hour / 24)",
    "slo_violation_last",
)


@dataclass(frozen=True)
class PDEnvConfig:
    """Configuration of :class:`PDProvisionEnv` (units in names; see the module docstring)."""

    scenario: DayScenario = field(default_factory=DayScenario)
    mode: str = "fluid"  # "fluid" (analytical) or "request" (PDSimulator)
    gpu_budget: int = 16  # n_P + n_D <= this
    max_prefill: int = 12  # action dimension 0 is 0..max_prefill
    max_decode: int = 8  # action dimension 1 is 0..max_decode
    startup_delay_s: float = 60.0  # an added instance serves this long after the action (simulator's default)
    initial_deployment: tuple[int, int] | None = None  # None: min-power deployment for the first period
    arrivals: str = "poisson"  # "poisson" counts or the "mean" rate
    pue: float = 1.1  # facility / IT energy (the geo paper's uniform PUE, envs.grid.DEFAULT_PUE)
    ttft_slo_s: float = 10.0  # TTFT target, s (see the module docstring)
    tpot_slo_s: float = 0.05  # TPOT target, s
    objective: str = "energy"  # "energy" (kWh), "carbon" (kg), "cost" (USD)
    objective_weight: float = 1.0  # reward per unit of the objective
    slo_weight: float = 2.0  # reward per unit of violation share (slo_violation_pct / 100 of the period's arrivals)
    cap_weight: float = 10.0  # reward per kWh above the power cap
    system: PDSystem = field(default_factory=paper_system)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode = {self.mode!r}; allowed: {', '.join(MODES)}")
        if self.arrivals not in ARRIVALS:
            raise ConfigError(f"arrivals = {self.arrivals!r}; allowed: {', '.join(ARRIVALS)}")
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"objective = {self.objective!r}; allowed: {', '.join(OBJECTIVES)}")
        for name in ("gpu_budget", "max_prefill", "max_decode"):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v:
                raise ConfigError(f"{name} = {v!r}; allowed: an integer")
        check_range("gpu_budget", self.gpu_budget, 2, 512)
        check_range("max_prefill", self.max_prefill, 1, 511)
        check_range("max_decode", self.max_decode, 1, 511)
        check_range("startup_delay_s", self.startup_delay_s, 0.0, 86_400.0)
        check_range("pue", self.pue, 1.0, 3.0)
        check_range("ttft_slo_s", self.ttft_slo_s, 0.0, None, low_inclusive=False)
        check_range("tpot_slo_s", self.tpot_slo_s, 0.0, None, low_inclusive=False)
        for name in ("objective_weight", "slo_weight", "cap_weight"):
            check_range(name, getattr(self, name), 0.0, None)
        if self.initial_deployment is not None:
            d = self.initial_deployment
            if len(d) != 2 or any(isinstance(x, bool) or int(x) != x for x in d):
                raise ConfigError(f"initial_deployment = {d!r}; allowed: None or (n_P, n_D) integers")
            check_range("initial_deployment n_P", d[0], 1, self.max_prefill)
            check_range("initial_deployment n_D", d[1], 1, self.max_decode)
            if d[0] + d[1] > self.gpu_budget:
                raise ConfigError(f"initial_deployment = {d!r} uses {d[0] + d[1]} GPUs; allowed: <= gpu_budget "
                                  f"= {self.gpu_budget}")

    @classmethod
    def from_dict(cls, overrides: dict[str, Any] | None) -> PDEnvConfig:
        """Defaults updated by ``overrides`` (unknown keys raise :class:`ConfigError`)."""
        overrides = known_overrides(overrides, cls)
        scen = overrides.pop("scenario", None)
        if isinstance(scen, dict):
            overrides["scenario"] = DayScenario.from_dict(scen)
        elif scen is not None:
            if not isinstance(scen, DayScenario):
                raise ConfigError(f"scenario = {scen!r}; allowed: a dict of DayScenario fields or a DayScenario")
            overrides["scenario"] = scen
        if overrides.get("initial_deployment") is not None:
            overrides["initial_deployment"] = tuple(overrides["initial_deployment"])
        return cls(**overrides)


def _ramp(p0: float, slope: float, cap: float, x: float) -> float:
    v = p0 + slope * x
    return cap if v > cap else v


class PDProvisionEnv(gym.Env):
    """Provisioning of prefill/decode instances over a day (see the module docstring)."""

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}  # noqa: RUF012 (gymnasium API)

    def __init__(self, config: PDEnvConfig | dict[str, Any] | None = None, render_mode: str | None = None) -> None:
        super().__init__()
        self.config = config if isinstance(config, PDEnvConfig) else PDEnvConfig.from_dict(config)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(f"render_mode = {render_mode!r}; allowed: None, 'ansi'")
        self.render_mode = render_mode
        cfg = self.config
        self.signals: DaySignals = build_signals(cfg.scenario)
        self.tables: MixTables = mix_tables(self.signals.mix_weights, cfg.system, cfg.max_prefill, cfg.max_decode)
        self.action_space = spaces.MultiDiscrete([cfg.max_prefill + 1, cfg.max_decode + 1])
        self.observation_space = spaces.Box(-1.0, 10.0, shape=(len(OBS_FIELDS),), dtype=np.float32)
        cal = cfg.system.calibration
        self._ramp_p = (cal.prefill_ramp.p0_w, cal.prefill_ramp.slope_w, cal.prefill_ramp.p_sat_w)
        self._ramp_d = (cal.decode_ramp.p0_w, cal.decode_ramp.slope_w, cal.decode_ramp.p_sat_w)
        self._idle_w = cfg.system.hardware.loaded_idle_power_w
        self._budget_power_w = cfg.gpu_budget * max(cal.prefill_ramp.p_sat_w, cal.decode_ramp.p_sat_w) * cfg.pue
        self._lookahead = math.ceil(cfg.startup_delay_s / cfg.scenario.period_s) + 1
        self._max_price = max(float(np.max(self.signals.price_usd_per_kwh)), 1e-9)
        mask_p = np.zeros(cfg.max_prefill + 1, dtype=bool)
        mask_p[1: min(cfg.max_prefill, cfg.gpu_budget - 1) + 1] = True
        mask_d = np.zeros(cfg.max_decode + 1, dtype=bool)
        mask_d[1: min(cfg.max_decode, cfg.gpu_budget - 1) + 1] = True
        self._masks = np.concatenate([mask_p, mask_d])
        self._masks.setflags(write=False)
        self._mu_list = self.tables.mu.tolist()  # nested lists: fast scalar lookups in the step loop
        self._sim: Any = None
        self._reset_state(0, np.zeros(self.signals.base_rate_rps.size))

    # ------------------------------------------------------------------------------------------ config
    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """The default configuration as a plain dict (``scenario`` nested), to copy and override."""
        d = asdict(PDEnvConfig())
        d.pop("system")  # a PDSystem object, not a plain override; pass PDEnvConfig(system=...) to change it
        return d

    # --------------------------------------------------------------------------------------------- state
    def _reset_state(self, phase: int, rates: NDArray[np.float64]) -> None:
        self._k = 0
        self._phase = int(phase)
        self._rates = rates
        self._active = [1, 1]
        self._pending: list[list[float]] = [[], []]  # ready times (s) per pool, ascending
        self._target = [1, 1]
        self._backlog = 0.0
        self._arrived = 0.0
        self._served = 0.0
        self._hist = [0.0] * RATE_HISTORY
        self._last_power_w = 0.0
        self._last_viol = 0.0
        self._last_info: dict[str, Any] = {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[NDArray[np.float32], dict[str, Any]]:
        super().reset(seed=seed)
        sc = self.config.scenario
        n_phase = self.signals.pattern.size * sc.trace_stretch
        phase = int(self.np_random.integers(n_phase)) if sc.random_phase else 0
        rates = self.signals.rates(sc.burstiness, phase, sc.trace_stretch)
        self._reset_state(phase, rates)
        self._hist = [float(rates[0])] * RATE_HISTORY  # the day starts in steady state at the first mean rate
        n_p, n_d = self.config.initial_deployment or self._initial_deployment(float(rates[0]))
        self._active = [int(n_p), int(n_d)]
        self._target = [int(n_p), int(n_d)]
        if self.config.mode == "request":
            self._start_simulator()
        info = self._state_info()
        self._last_info = info
        return self._obs(), info

    def _initial_deployment(self, rate: float) -> tuple[int, int]:
        mix = int(self.signals.mix_index[0])
        grid = self.tables.grid(mix, self.config.gpu_budget)
        sel = min_power_deployment(grid, rate, DEFAULT_RHO_BAR)
        if sel is None:  # the first rate exceeds the budget's reach: the largest capacity instead
            sel = max_capacity_under_power(grid, float("inf"))
        assert sel is not None
        return sel.n_p, sel.n_d

    # --------------------------------------------------------------------------------------------- action
    def action_masks(self) -> NDArray[np.bool_]:
        """Valid values per action dimension, concatenated ([n_P mask, n_D mask]); never empty per dimension."""
        return self._masks.copy()

    def _check_action(self, action: Any) -> tuple[int, int, bool]:
        cfg = self.config
        try:
            a = np.asarray(action)
        except Exception as exc:  # pragma: no cover - asarray accepts nearly anything
            raise ActionError(f"action {action!r} is not array-like") from exc
        allowed = f"allowed: [n_P, n_D] integers with 0 <= n_P <= {cfg.max_prefill}, 0 <= n_D <= {cfg.max_decode}"
        if a.shape != (2,):
            raise ActionError(f"action {action!r} has shape {a.shape}; {allowed}")
        if a.dtype.kind not in "iu":
            if a.dtype.kind != "f" or not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
                raise ActionError(f"action {action!r} is not integer-valued; {allowed}")
        n_p, n_d = int(a[0]), int(a[1])
        if not (0 <= n_p <= cfg.max_prefill and 0 <= n_d <= cfg.max_decode):
            raise ActionError(f"action {action!r} is out of range; {allowed}")
        adjusted = False
        if n_p < 1 or n_d < 1:
            n_p, n_d, adjusted = max(n_p, 1), max(n_d, 1), True
        budget = cfg.gpu_budget
        if n_p + n_d > budget:
            p2 = min(cfg.max_prefill, max(1, round(budget * n_p / (n_p + n_d))))
            n_p, n_d, adjusted = p2, min(cfg.max_decode, budget - p2), True
        return n_p, n_d, adjusted

    def _apply_target(self, n_p: int, n_d: int, now_s: float) -> None:
        ready = now_s + self.config.startup_delay_s
        for pool, target in ((0, n_p), (1, n_d)):
            total = self._active[pool] + len(self._pending[pool])
            if target > total:
                self._pending[pool].extend([ready] * (target - total))
            else:
                drop = total - target
                cancel = min(drop, len(self._pending[pool]))
                if cancel:
                    del self._pending[pool][len(self._pending[pool]) - cancel:]
                self._active[pool] -= drop - cancel
        self._target = [n_p, n_d]
        if self.config.startup_delay_s <= 0:
            self._activate(now_s)

    def _activate(self, t: float) -> None:
        for pool in (0, 1):
            pend = self._pending[pool]
            n = 0
            while n < len(pend) and pend[n] <= t + 1e-9:
                n += 1
            if n:
                self._active[pool] += n
                del pend[:n]

    # ----------------------------------------------------------------------------------------------- step
    def step(self, action: Any) -> tuple[NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        if self._k >= self.signals.base_rate_rps.size:
            raise ActionError("step() called after the episode was truncated; call reset() first")
        n_p, n_d, adjusted = self._check_action(action)
        cfg = self.config
        period = cfg.scenario.period_s
        k = self._k
        t0 = float(self.signals.time_s[k])
        if cfg.mode == "fluid":
            self._apply_target(n_p, n_d, t0)
        else:
            self._target = [n_p, n_d]
        mean_rate = float(self._rates[k])
        if cfg.arrivals == "poisson":
            arrived = float(self.np_random.poisson(mean_rate * period))
        else:
            arrived = mean_rate * period
        if cfg.mode == "fluid":
            m = self._fluid_period(k, t0, period, arrived)
        else:
            m = self._request_step(k, t0, period, arrived)
        energy_kwh = m["energy_j"] / 3.6e6
        cap_w = float(self.signals.cap_w[k])
        ci = float(self.signals.ci_g_per_kwh[k])
        price = float(self.signals.price_usd_per_kwh[k])
        carbon_g = energy_kwh * ci
        cost = energy_kwh * price
        objective = {"energy": energy_kwh, "carbon": carbon_g / 1000.0, "cost": cost}[cfg.objective]
        # the period drivers report the violation as a share; info carries it in % (the suite's convention)
        viol_share = m.pop("slo_violation")
        reward = -(cfg.objective_weight * objective + cfg.slo_weight * viol_share
                   + cfg.cap_weight * m["cap_excess_kwh"])
        self._hist = [arrived / period, *self._hist[:-1]]
        self._last_power_w = m["power_w"]
        self._last_viol = viol_share
        self._k = k + 1
        truncated = self._k >= self.signals.base_rate_rps.size
        info = self._state_info()
        info.update(m)
        info.update(energy_kwh=energy_kwh, carbon_g=carbon_g, cost_usd=cost, cap_w=cap_w, ci_g_per_kwh=ci,
                    price_usd_per_kwh=price, arrived=arrived, action_adjusted=adjusted,
                    reward_objective=objective, slo_violation_pct=100.0 * viol_share)
        self._last_info = info
        return self._obs(), float(reward), False, truncated, info

    def _fluid_period(self, k: int, t0: float, period: float, arrived: float) -> dict[str, Any]:
        """Advance the fluid model over one period (see the module docstring)."""
        cfg = self.config
        tab = self.tables
        mix = int(self.signals.mix_index[k])
        mu_p, mu_dmax = float(tab.mu_p[mix]), float(tab.mu_d_max[mix])
        a_d, b_d, dec = float(tab.a_d[mix]), float(tab.b_d[mix]), float(tab.decode_tokens[mix])
        cv_s2 = float(tab.cv_s2[mix])
        tpq = tab.t_p_quantiles_s[mix]
        mu_tab = self._mu_list[mix]
        lam = arrived / period
        t1 = t0 + period
        events = sorted({t for pool in self._pending for t in pool if t0 < t < t1})
        bounds = [t0, *events, t1]
        q = self._backlog
        served = energy = excess = 0.0
        viol_sum = ttft_sum = tpot_sum = batch_w = 0.0
        cap_w = float(self.signals.cap_w[k])
        pue = cfg.pue
        mu = 0.0
        rp, rd = self._ramp_p, self._ramp_d
        for i in range(len(bounds) - 1):
            self._activate(bounds[i])
            n_p, n_d = self._active
            tau = bounds[i + 1] - bounds[i]
            if tau <= 0:
                continue
            mu = mu_tab[n_p][n_d]
            idle = (len(self._pending[0]) + len(self._pending[1])) * self._idle_w
            # busy: time in this piece spent serving at mu (backlog present), the rest at lam
            if lam >= mu:
                busy = tau
                q_end = q + (lam - mu) * tau
            else:
                busy = min(tau, q / (mu - lam))
                q_end = max(0.0, q - (mu - lam) * tau)
            s_busy, s_free = mu, lam
            p_busy = (n_p * _ramp(*rp, s_busy / (n_p * mu_p)) + n_d * _ramp(*rd, s_busy / (n_d * mu_dmax)) + idle)
            p_free = (n_p * _ramp(*rp, s_free / (n_p * mu_p)) + n_d * _ramp(*rd, s_free / (n_d * mu_dmax)) + idle)
            energy += (p_busy * busy + p_free * (tau - busy)) * pue
            excess += max(0.0, p_busy * pue - cap_w) * busy + max(0.0, p_free * pue - cap_w) * (tau - busy)
            served += lam * tau + q - q_end
            # SLO of this piece's arrivals: fluid delay q(s)/mu, then prefill wait + t_P tail
            w = lam * tau  # arrivals in this piece
            if w > 0:
                v, ttft, tpot = self._slo_piece(q, lam, mu, tau, n_p, n_d, mix, mu_p, cv_s2, a_d, b_d, dec, tpq)
                viol_sum += w * v
                ttft_sum += w * ttft
                tpot_sum += w * tpot
                batch_w += w
            q = q_end
        self._activate(t1)
        self._backlog = q
        self._arrived += arrived
        self._served += served
        n_p, n_d = self._active
        return {
            "power_w": energy / period,
            "it_power_w": energy / period / pue,
            "energy_j": energy,
            "cap_excess_kwh": excess / 3.6e6,
            "served": served,
            "slo_violation": viol_sum / batch_w if batch_w > 0 else 0.0,
            "ttft_s": ttft_sum / batch_w if batch_w > 0 else float(tab.t_p_mean_s[mix]),
            "tpot_s": tpot_sum / batch_w if batch_w > 0 else a_d,
            "prefill_util": min(served / period / (n_p * mu_p), 10.0),
            "decode_util": min(served / period / (n_d * mu_dmax), 10.0),
            "demand_util": min((lam + q / period) / max(mu_tab[n_p][n_d], 1e-9), 10.0),
        }

    def _slo_piece(self, q: float, lam: float, mu: float, tau: float, n_p: int, n_d: int, mix: int, mu_p: float,
                   cv_s2: float, a_d: float, b_d: float, dec: float, tpq: NDArray[np.float64]
                   ) -> tuple[float, float, float]:
        """(violation share, mean TTFT s, mean TPOT s) of arrivals spread evenly over a piece of ``tau`` s.

        Without a backlog in the piece every arrival sees the same state, so one evaluation suffices;
        otherwise arrivals are taken at N_SLO_POINTS instants (the backlog is linear in time).
        """
        cfg = self.config
        if q <= 0.0 and lam < mu:
            s_pts = None
            d = 0.0
            rate_srv = lam
        else:
            s_pts = (np.arange(N_SLO_POINTS) + 0.5) * (tau / N_SLO_POINTS)
            qs = np.maximum(q + (lam - mu) * s_pts, 0.0)
            backlogged = qs > 0
            d = qs / mu
            rate_srv = np.where(backlogged | (lam >= mu), mu, lam)
        rho = np.minimum(np.asarray(rate_srv) / (n_p * mu_p), RHO_K_MAX)
        mean_res = (1.0 / n_p + cv_s2) / (2.0 * mu_p * (1.0 - rho))  # W / rho: mean wait given waiting
        if s_pts is None:
            slack = cfg.ttft_slo_s - tpq
            p_ttft = np.where(slack <= 0, 1.0, rho * np.exp(-np.maximum(slack, 0.0) / mean_res))
            p = float(p_ttft.mean())
            lam_i = lam / n_d
            batch = lam_i * dec * a_d / max(1.0 - lam_i * dec * b_d, 1e-9)
            tpot = a_d + b_d * batch
            viol = 1.0 if tpot > cfg.tpot_slo_s else p
            return viol, float(rho * mean_res) + float(self.tables.t_p_mean_s[mix]), tpot
        slack = cfg.ttft_slo_s - d[:, None] - tpq[None, :]
        p_ttft = np.where(slack <= 0, 1.0, rho[:, None] * np.exp(-np.maximum(slack, 0.0) / mean_res[:, None]))
        p_ttft = p_ttft.mean(axis=1)
        lam_i = rate_srv / n_d
        batch_lit = lam_i * dec * a_d / np.maximum(1.0 - lam_i * dec * b_d, 1e-9)
        batch = np.where(rate_srv >= mu, float(self.tables.batch[mix, n_p, n_d]), batch_lit)
        tpot_a = a_d + b_d * batch
        viol_a = np.where(tpot_a > cfg.tpot_slo_s, 1.0, p_ttft)
        ttft_a = d + rho * mean_res + float(self.tables.t_p_mean_s[mix])
        return float(viol_a.mean()), float(ttft_a.mean()), float(tpot_a.mean())

    # ------------------------------------------------------------------------------------ request mode
    def _start_simulator(self) -> None:
        """A fresh :class:`~servegym.envs.pd.simulator.PDSimulator` at the reset deployment.

        Its power normalizers (mu_P, mu_D^max) come from the model of the day's mean length mix. Request
        lengths are drawn per request from the period's mix (component by share, then that component's
        App. B.4 sampler, :func:`~servegym.envs.pd.simulator.pd_length_sampler`).
        """
        from servegym.envs.pd.model import PDModel
        from servegym.envs.pd.scenario import MIX_COMPONENTS, mixture_moments
        from servegym.envs.pd.simulator import PDSimulator, pd_length_sampler

        cfg = self.config
        mean_mix = np.mean(self.tables.weights[self.signals.mix_index], axis=0)
        model = PDModel(mixture_moments(mean_mix), cfg.system)
        seed = int(self.np_random.integers(2**31 - 1))
        self._sim = PDSimulator(model, self._active[0], self._active[1], seed=seed,
                                startup_delay_s=cfg.startup_delay_s)
        self._samplers = [pd_length_sampler(c) for c in MIX_COMPONENTS]
        self._sim_max_len = int(model.c_tok - model.system.serving.reserve_tokens)

    def _request_step(self, k: int, t0: float, period: float, arrived: float) -> dict[str, Any]:
        """One period of the request-level simulator (``mode="request"``).

        Arrivals: the period's count at uniform times; lengths from the period's mix (requests that could
        not fit a decode pool alone, l_in + l_out > C_tok - R, are redrawn). The violation share (``slo_violation_pct`` / 100) combines the
        share of first tokens in the period with TTFT above target (a) and of requests finished in the period
        with TPOT above target (b) as 1 - (1 - a)(1 - b); ``backlog`` is the simulator's requests arrived and
        not yet prefilled; ``served`` counts completions.
        """
        cfg = self.config
        sim = self._sim
        rng = self.np_random
        n = round(arrived)
        sim.set_deployment(*self._target)
        if n:
            from servegym.envs.workload import Requests

            t = np.sort(t0 + rng.random(n) * period)
            comp = rng.choice(len(self._samplers), size=n, p=self.tables.weights[int(self.signals.mix_index[k])])
            lin = np.empty(n, dtype=np.int64)
            lout = np.empty(n, dtype=np.int64)
            for c, sampler in enumerate(self._samplers):
                idx = np.flatnonzero(comp == c)
                while idx.size:
                    i, o = sampler.sample(idx.size, rng)
                    lin[idx], lout[idx] = i, o
                    idx = idx[(lin[idx] + lout[idx]) > self._sim_max_len]
            sim.submit(Requests(t, lin, lout))
        sim.advance(t0 + period)
        w = sim.window_metrics()
        dep = sim.deployment()
        self._active = [dep["n_p"], dep["n_d"]]
        self._pending = [[t0 + period + cfg.startup_delay_s] * dep["n_p_starting"],
                         [t0 + period + cfg.startup_delay_s] * dep["n_d_starting"]]
        ttft, tpot = w["ttft_s"], w["tpot_s"]
        a = float(np.mean(ttft > cfg.ttft_slo_s)) if ttft.size else 0.0
        b = float(np.mean(tpot > cfg.tpot_slo_s)) if tpot.size else 0.0
        energy = w["energy_j"] * cfg.pue
        cap_w = float(self.signals.cap_w[k])
        self._backlog = float(w["queue_len"])
        self._arrived += n
        self._served += w["finished"]
        mix = int(self.signals.mix_index[k])
        n_p, n_d = max(self._active[0], 1), max(self._active[1], 1)
        mu = self._mu_list[mix][n_p][n_d]
        return {
            "power_w": energy / period, "it_power_w": w["mean_power_w"], "energy_j": energy,
            # the simulator reports the period's mean power only, so the excess is measured on that mean
            "cap_excess_kwh": max(0.0, energy / period - cap_w) * period / 3.6e6,
            "served": float(w["finished"]), "slo_violation": 1.0 - (1.0 - a) * (1.0 - b),
            "ttft_s": float(np.mean(ttft)) if ttft.size else 0.0,
            "tpot_s": float(np.mean(tpot)) if tpot.size else 0.0,
            "prefill_util": min(w["finished"] / period / (n_p * float(self.tables.mu_p[mix])), 10.0),
            "decode_util": min(w["finished"] / period / (n_d * float(self.tables.mu_d_max[mix])), 10.0),
            "demand_util": min((n / period + self._backlog / period) / max(mu, 1e-9), 10.0),
        }

    # ------------------------------------------------------------------------------------------ helpers
    def mix_index(self, step: int | None = None) -> int:
        """Index into :attr:`tables` of the length mix of period ``step`` (default: the coming period)."""
        k = min(self._k if step is None else int(step), self.signals.mix_index.size - 1)
        return int(self.signals.mix_index[k])

    def forecast_rates(self, steps: int) -> NDArray[np.float64]:
        """Scenario mean rates (req/s) of the next ``steps`` periods from the coming one (fewer at the end)."""
        return np.asarray(self._rates[self._k: self._k + int(steps)], dtype=float)

    @property
    def step_index(self) -> int:
        return self._k

    def _state_info(self) -> dict[str, Any]:
        k = min(self._k, self.signals.base_rate_rps.size - 1)
        mix = int(self.signals.mix_index[k])
        n_p, n_d = self._active
        fc = self.forecast_rates(self._lookahead)
        return {
            "step": self._k, "time_s": float(self._k * self.config.scenario.period_s),
            "hour": float(self.signals.hour[k]), "n_p": n_p, "n_d": n_d,
            "pending_p": len(self._pending[0]), "pending_d": len(self._pending[1]),
            "target_p": self._target[0], "target_d": self._target[1],
            "backlog": self._backlog, "arrived_total": self._arrived, "served_total": self._served,
            "rate_rps": self._hist[0], "forecast_rate_rps": float(fc[0]) if fc.size else 0.0,
            "forecast_max_rps": float(fc.max()) if fc.size else 0.0, "mix_index": mix,
            "mix_weights": self.tables.weights[mix].copy(), "capacity_rps": float(self._mu_list[mix][n_p][n_d]),
            "next_cap_w": float(self.signals.cap_w[k]), "gpu_budget": self.config.gpu_budget,
        }

    def _obs(self) -> NDArray[np.float32]:
        cfg = self.config
        k = min(self._k, self.signals.base_rate_rps.size - 1)
        mix = int(self.signals.mix_index[k])
        peak = cfg.scenario.peak_rate_rps
        fc = self.forecast_rates(self._lookahead)
        n_p, n_d = self._active
        cap = float(self.signals.cap_w[k])
        hour = float(self.signals.hour[k])
        ang = 2.0 * math.pi * hour / 24.0
        w = self.tables.weights[mix]
        obs = np.array([
            *(h / peak for h in self._hist),
            (float(fc[0]) if fc.size else 0.0) / peak, (float(fc.max()) if fc.size else 0.0) / peak,
            w[0], w[1], w[2],
            self.tables.in_mean[mix] / 1e4, self.tables.out_mean[mix] / 1e3,
            n_p / cfg.max_prefill, n_d / cfg.max_decode,
            len(self._pending[0]) / cfg.max_prefill, len(self._pending[1]) / cfg.max_decode,
            self._mu_list[mix][n_p][n_d] / peak,
            math.log1p(self._backlog) / 10.0,
            cap / self._budget_power_w, self._last_power_w / max(cap, 1e-9),
            float(self.signals.ci_g_per_kwh[k]) / 1000.0,
            float(self.signals.price_usd_per_kwh[k]) / self._max_price,
            math.sin(ang), math.cos(ang), self._last_viol,
        ], dtype=np.float32)
        return np.clip(obs, -1.0, 10.0)

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        i = self._last_info
        line = (f"t={i.get('hour', 0.0):05.2f}h step={self._k} {self._active[0]}p{self._active[1]}d "
                f"(+{len(self._pending[0])}p+{len(self._pending[1])}d starting) "
                f"rate={i.get('rate_rps', 0.0):.2f} req/s backlog={self._backlog:.1f} "
                f"power={i.get('power_w', 0.0):.0f} W cap={i.get('cap_w', i.get('next_cap_w', 0.0)):.0f} W "
                f"slo_viol={i.get('slo_violation_pct', 0.0):.2f}%")
        return line
