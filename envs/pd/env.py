"""``servegym/PDProvision-v0``: provision prefill and decode instances of a PD-disaggregated deployment over a day.

One step is one provisioning period (``scenario.period_s``, default 60 s); an episode is
``scenario.horizon_steps`` periods (default 1440 = one day), or a curriculum stage's shorter horizon (below).
It is truncated at its horizon, and **terminated** when the backlog at a period's end exceeds
``backlog_limit_s`` x ``peak_rate_rps`` requests (default 300 s of peak arrivals = 4,200 requests; the
baselines peak below 450 on the default day): the service has failed, as a crash ends a highway-env
episode. The load, length mix and grid signals come from
:mod:`servegym.envs.pd.sim.scenario` (a real day of the 2024 Azure week's rates, the Azure/Mooncake length mix, a real
zone's hourly carbon intensity, a power-cap schedule with demand-response events, a price schedule).

**Action modes** (``action_mode``; one model, three drivers: each mode only decodes its action into the
target (n_P, n_D) that the same dynamics then apply; one class each in :mod:`servegym.envs.pd.actions`). Registered ids: ``servegym/PDProvision-v0``
(``"absolute"``, the default), ``servegym/PDProvisionResidual-v0`` (``"residual"``) and
``servegym/PDProvisionFront-v0`` (``"front"``). Every mode sees the same observation and reward.

* ``"residual"`` ``MultiDiscrete([2L + 1, 2L + 1])`` (L = ``residual_levels``, default 2): per pool a change
  i - L of the **reference**, the min-power deployment with one period of lookahead that
  :class:`servegym.baselines.pd.MinPowerPareto` (``lookahead=1``) picks from the same ``info``
  (:class:`servegym.envs.pd.sim.provisioning.MinPowerRule`, shared code), or with ``reference =
  "min-power+forecast:RHO"`` the deployment :class:`servegym.baselines.pd.MinPowerForecast` (``rho_bar`` RHO)
  picks, sized for the forecast maximum over the start-up horizon (the pd ids' strongest baseline is
  ``min-power+forecast:0.97``, so its zero action plays that baseline). Action [L, L] follows the reference
  exactly. The reference also fills the observation's suggestion entries in every mode. Counts are clipped to [1, pool max] and then fitted to the budget as below (``action_adjusted``);
  :meth:`action_masks` masks the changes that leave [1, min(pool max, gpu_budget - 1)].
* ``"front"`` ``Discrete(front_slots)``: slot i is the i-th deployment (capacity ascending) of the coming
  mix's epsilon-Pareto front (capacity vs power at capacity, ``front_eps`` = 3 %, App. C) within the budget;
  ``front_slots`` is the largest front over the scenario's mixes, and slots beyond the coming front's size
  are masked (sent anyway: the largest-capacity point, ``action_adjusted``).
* ``"absolute"``: as follows.

**Absolute action** ``MultiDiscrete([max_prefill + 1, max_decode + 1])``: the target (n_P, n_D), i.e. active plus
starting instances of each pool, within ``gpu_budget`` GPUs (one GPU per instance, as in the paper).
:meth:`PDProvisionEnv.action_masks` (sb3-contrib's MultiDiscrete layout: the two per-dimension masks
concatenated) masks 0 (a PD deployment needs an instance in each pool) and counts above
``gpu_budget - 1``. A masked action that is still sent is adjusted, never rejected, and
``info["action_adjusted"]`` says so (``episode_adjusted_actions`` counts them): a 0 is raised to 1; a target
with n_P + n_D > B = ``gpu_budget`` is scaled onto it, n_P' = min(max_P, max(1, round(B n_P / (n_P + n_D)))),
n_D' = min(max_D, B - n_P'). Per-dimension masks cannot say the budget ([10, 8] passes both, applied as 9/7):
:meth:`PDProvisionEnv.action_masks_given` is the exact autoregressive mask that ``servegym.sample_masked_action``
samples from, never sending an action the env adjusts (:class:`~servegym.envs.pd.actions.PoolTargetAction`).
Anything outside the space (wrong shape, non-integer, out of range) raises
:class:`~servegym.errors.ActionError`.

**Instances.** A target above the current count starts instances that become active
``startup_delay_s`` later (model load and engine warm-up; default 60 s, the request-level simulator's
:data:`~servegym.envs.pd.sim.simulator.DEFAULT_STARTUP_DELAY_S`: 65.6 GB of weights from local NVMe at ~2 GB/s
plus SGLang's CUDA-graph capture and warm-up; an assumption, the paper excludes start-up transients).
Starting instances hold a GPU and draw the loaded-idle power (115 W, App. B.3). A target below the count
cancels starting instances first (latest first), then removes active ones immediately.

**Fluid dynamics** (``mode="fluid"``, default), from the analytical model (:mod:`servegym.envs.pd.sim.model`)
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

**Request-level dynamics** (``mode="request"``) run :class:`servegym.envs.pd.sim.simulator.PDSimulator` (individual
requests, KV reservations, continuous batching, ramp power per instance; the simulator handles start-up
delays and removals itself); see :func:`~servegym.envs.pd.dynamics.request_step` for how its window metrics
map to ``info``. It is orders of magnitude slower than fluid mode.

**Observation** ``Box(-1, 10, (37,), float32)`` (values clipped): see :data:`OBS_FIELDS` for the order and
scale of each entry (rates / peak_rate_rps, counts / pool maxima, log1p backlog / 10, ...). Entries 24-36
hold what the baselines read: the reference's suggested (n_P, n_D), the capacity of the suggestion, the IT
power of the active and suggested deployments at the reference's demand rate, mu / lambda, the last
period's utilizations, the backlog over its limit, the suggestion's place on the front and the steps left.
With ``rate_ema_periods`` = T > 0 (the stress tracks set 30) three entries follow (``Box(-1, 10, (40,))``;
:data:`~servegym.envs.pd.observations.LEVEL_FIELDS`), the day's level so far: ``rate_level_ema``, an exponential
moving average of the observed rate / the period's smooth mean rate, level <- level + (rate / smooth - level) / T
after each period (at reset the first period's rate / smooth, as the rate history starts), and the level forecast
smooth mean x level of the coming period and its maximum over the forecast's periods (``info``: ``rate_level_ema``,
``level_forecast_rps``, ``level_forecast_max_rps``). With ``reference = "min-power+ema:RHO"`` the reference sizes
for that maximum (:class:`servegym.baselines.pd.MinPowerEmaForecast`; allowed only with the level entries).

**Info** (every step; reset gives the state keys): ``power_w`` (mean facility power of the period, W),
``it_power_w``, ``energy_kwh`` (facility), ``carbon_g``, ``cost_usd``, ``slo_violation_pct`` (% of the
period's arrivals), ``ttft_s`` / ``tpot_s`` (means), ``cap_w``, ``cap_excess_kwh``, ``n_p`` / ``n_d`` (serving at the
period end), ``pending_p`` / ``pending_d`` (starting), ``target_p`` / ``target_d``, ``backlog`` (requests),
``arrived`` / ``served`` (period) and ``arrived_total`` / ``served_total``, ``rate_rps`` (observed),
``forecast_rate_rps`` / ``forecast_max_rps``, ``mix_index`` / ``mix_weights`` (coming period), ``capacity_rps``,
``prefill_util`` (served / (n_P mu_P)), ``decode_util`` (served / (n_D mu_D^max), eq. 12), ``demand_util``
((arrivals + backlog) rate / mu), ``ci_g_per_kwh``, ``price_usd_per_kwh``, ``action_adjusted``, ``episode_adjusted_actions``.

**Reward** = -(objective_weight x objective + slo_weight x slo_violation_pct / 100 + backlog_weight x backlog_frac
+ cap_weight x cap_excess_kwh) - termination_penalty, each term in ``info`` per step: objective
(``reward_objective``) = facility energy (kWh), carbon (kg CO2eq) or cost (USD) of the period per ``objective``;
``backlog_frac`` = min(backlog at the period's end / backlog limit, 1), so the SLO penalty keeps growing with
the backlog after the violation share saturates at 1 (up to slo_weight + backlog_weight per period);
``termination_penalty`` is 0 except on the terminating step, where it is ``termination_penalty`` if set, else
(periods left in the episode) x B. The episode return is therefore exactly minus the weighted sums of these
info KPIs minus the penalty (tested). **Bound**: with B = objective_weight x E x {1, max CI / 1000, max price}
+ slo_weight + backlog_weight + cap_weight x E, E = gpu_budget x max(p_sat, idle) x pue x period / 3.6e6 kWh
(the most energy a period can draw), every non-terminal step has -B <= reward <= 0 and the terminating one
-B (1 + periods left) <= reward (or -B - the set penalty): the default penalty makes ending an episode never
cheaper than any way of playing it out. :meth:`PDProvisionEnv.per_step_reward_bound` returns B; weights are
<= 1e6 and the penalty <= 1e9, so rewards are bounded for every valid config.

**Curriculum** (``curriculum``: stages (episode_steps, episodes), e.g. ((60, 50), (240, 20), (1440, 0)) for
1 h -> 4 h -> 1 day): the k-th reset of an instance plays the stage its count reaches (the last stage stays;
a stage longer than the scenario plays the whole scenario);
``reset(options={"curriculum_stage": i})`` pins one. With ``random_start`` an episode shorter than the
scenario starts at a period drawn uniformly from the reset's generator (random start hour), after the
scenario's own draws, so the same seed and stage give the same episode and a full-length episode is
unchanged; without it, at the scenario's first period. The training loop applies a
curriculum to training envs only (``train_env_kwargs`` in the hyperparameter files).

**Splits** (``split`` config key, ``gym.make(id, split="test")``; :mod:`servegym.splits`). ``reset(seed=s)``
draws the day of the episode from the split with a generator seeded by (split, s)
(:func:`servegym.envs.pd.sim.scenario.draw_scenario`): a grid day of zone ``scenario.ci_zone`` (NL's series is
the recomputed 2022 one, so the days are split within 2022; local time 0 is 00:00 UTC of the drawn day), a
local start hour, the peak rate times U[0.85, 1.15], and a real day of the 2024 Azure week
(:data:`servegym.envs.azure_week.SPLIT_DAYS`: a trace, coding or conversation, then one of its days of the
split) whose rate shape the episode replays from the start hour, wrapping to the same day's 00:00 at midnight
(so no split reads another's day, and nothing shorter than a day is tiled). The length mix is one 2023
trace's distribution per split. The per-minute spread and the Poisson counts come from a stream seeded by
(split, s) as well, so two splits never share arrivals:

- ``train``: grid day (days 1-20 of each month of NL's 2022 series) and local start hour, peak rate x
  U[0.85, 1.15]; the rate shape of a 2024 train weekday (Mon-Wed 13-15 May, either trace); azure-conv lengths
- ``validation``: days 21-23, the same draws, on the 2024 validation weekday (Thu 16 May)
- ``test``: day 24 to the month's end, the same draws, on the 2024 test weekday (coding Fri 10 or
  conversation Fri 17 May)
- ``shift-code``: test days on the coding trace's test day with the held-out azure-code lengths
- ``shift-mooncake``: test days with the held-out Mooncake conversation lengths, the peak rate also scaled to
  the GPU budget by the budget's capacity ratio under Mooncake vs azure-conv lengths (x 0.095 on the default
  16-GPU grid; :meth:`split_capacity_scale`): unscaled, the budget cannot serve the day (every policy and the
  hindsight oracle near 35-90 % violation)
- ``shift-burst``: test days whose per-minute spread is the plotted band at full amplitude, ``burstiness`` 1
  instead of 0.25 (each minute uniform in the band; the forecast stays exact)
- ``shift-forecast``: shift-burst's days with a persistence forecast
  (:func:`~servegym.envs.pd.sim.scenario.persistence_forecast`): ``forecast_rate_next`` / ``forecast_rate_max``,
  the reference and the baselines see each period's smooth mean rate times the realized / smooth ratio of the
  last completed period, while arrivals follow the realized rates, so the forecast error is the per-minute
  spread's persistence residual; the hindsight oracle still knows the realized arrivals
- ``shift-weekend``: as test, on a 2024 weekend day (coding Sat 11 / Sun 12, conversation Sun 12 / Sat 18 May)
  at its trace's test-day peak (``level_scale`` x 3.3 / x 1.5: its own level fits 1p1d all day, oracle = naive)

``split=None`` runs the configured day as is (the illustrative three-trace mix, both 2024 traces' Monday 13 May,
``ci_start_utc`` and hour 0; ``scenario.pattern_trace = "legacy-azure-2023"`` is the former tiled 2023 hour, kept
for old results only). A named split draws ``ci_start_utc``, ``start_hour``, ``pattern_trace``, ``pattern_day``
and ``mix_knots`` itself (setting them too is a ConfigError) and scales the configured ``peak_rate_rps``
(observations stay scaled by the configured peak, so the draw is visible). The draw is ``env.scenario`` and
``info["scenario"]`` at reset; ``env.day`` is the episode's exact :class:`~servegym.envs.pd.sim.scenario.DayScenario`.
**Stress tracks** (``track``; :mod:`servegym.envs.pd.tracks`): ``stress-delay`` / ``stress-long-delay`` (x2 load, 300 / 600-s start-up, 12 GPUs,
the level entries).

Configuration: :class:`PDEnvConfig` (frozen dataclass); ``PDProvisionEnv(config=dict)`` takes highway-env
style overrides of :meth:`PDProvisionEnv.default_config` (nested ``"scenario"`` dict allowed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray
from servegym.envs.pd.actions import AbsoluteAction, pd_action_type
from servegym.envs.pd.dynamics import DYNAMICS
from servegym.envs.pd.env_config import (  # the config's names are re-exported: their old home
    ACTION_MODES,
    ARRIVALS,
    MODES,
    OBJECTIVES,
    PDEnvConfig,
    curriculum_stage,
    pinned_stage,
    with_id_action_mode,
)
from servegym.envs.pd.observations import OBS_FIELDS, obs_fields, observe, render, state_info
from servegym.envs.pd.rewards import period_reward, step_bound
from servegym.envs.pd.sim.fluid import steady_slo
from servegym.envs.pd.sim.pareto import DEFAULT_RHO_BAR, max_capacity_under_power, min_power_deployment
from servegym.envs.pd.sim.provisioning import MinPowerRule, parse_reference, reference_uses_level
from servegym.envs.pd.sim.scenario import DayScenario, DaySignals, build_signals, draw_scenario, episode_rates
from servegym.envs.pd.sim.state import RATE_HISTORY, PDParams, PDState, draw_arrivals
from servegym.envs.pd.sim.tables import MixTables, mix_tables
from servegym.envs.pd.tracks import forecast_kind, persistence

from servegym.errors import ActionError, ConfigError, check_keywords, resolve_config
from servegym.splits import scenario_rng, scenario_seed

__all__ = ["ACTION_MODES", "ARRIVALS", "MODES", "OBJECTIVES", "OBS_FIELDS", "PDEnvConfig", "PDProvisionEnv"]


class PDProvisionEnv(gym.Env):
    """Provisioning of prefill/decode instances over a day (see the module docstring).

    The episode's state is the model's :class:`~servegym.envs.pd.sim.state.PDState` (``self.state``, a new one
    per reset) under the config's constants ``self.params``; the action type, the period dynamics, the
    observation and the reward read and update it, and the env only sequences them."""

    metadata: dict[str, Any] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}  # noqa: RUF012 (gymnasium API)

    def __init__(self, config: PDEnvConfig | dict[str, Any] | None = None, render_mode: str | None = None,
                 action_mode: str | None = None, **overrides: Any) -> None:
        super().__init__()
        # gym.make(id, key=value) updates the config like config={key: value} (as the geo envs do).
        check_keywords(type(self).__name__, overrides, PDEnvConfig, ("config", "render_mode", "action_mode"))
        # the registered mode ids pass action_mode; a config that says otherwise is an error
        self.config = cfg = with_id_action_mode(config, resolve_config(config, overrides, PDEnvConfig), action_mode)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(f"render_mode = {render_mode!r}; allowed: None, 'ansi', 'rgb_array'")
        self.render_mode = render_mode
        cfg = self.config
        self.action_mode = cfg.action_mode
        # until the first reset: the configured day (split None) or the split's draw for seed 0
        if cfg.split is None:
            self.scenario: dict[str, Any] = {"split": None, "seed": None}
            day = cfg.scenario
        else:
            day, self.scenario = draw_scenario(cfg.scenario, cfg.split, scenario_rng(cfg.split, 0),
                                               self.split_capacity_scale())
        self.state = self._day_state(day)
        self.front_slots = self._front_slots()
        cal = cfg.system.calibration
        self.params = PDParams(
            period_s=cfg.scenario.period_s, pue=cfg.pue, startup_delay_s=cfg.startup_delay_s,
            ttft_slo_s=cfg.ttft_slo_s, tpot_slo_s=cfg.tpot_slo_s,
            ramp_p=(cal.prefill_ramp.p0_w, cal.prefill_ramp.slope_w, cal.prefill_ramp.p_sat_w),
            ramp_d=(cal.decode_ramp.p0_w, cal.decode_ramp.slope_w, cal.decode_ramp.p_sat_w),
            idle_w=cfg.system.hardware.loaded_idle_power_w, poisson_arrivals=cfg.arrivals == "poisson",
            lookahead=math.ceil(cfg.startup_delay_s / cfg.scenario.period_s) + 1,
            ref_horizon=parse_reference(cfg.reference)[0],
            budget_power_w=cfg.gpu_budget * max(cal.prefill_ramp.p_sat_w, cal.decode_ramp.p_sat_w) * cfg.pue,
            backlog_limit=cfg.backlog_limit_s * cfg.scenario.peak_rate_rps, front_slots=self.front_slots,
            level_alpha=1.0 / cfg.rate_ema_periods if cfg.rate_ema_periods else 0.0,
            ref_level=reference_uses_level(cfg.reference))
        # the action mode is a class (actions.py): its space, mask, decoding and reference action
        self.action_type = pd_action_type(cfg, self.front_slots)
        self.action_space = self.action_type.space()
        self.dynamics = DYNAMICS[cfg.mode](cfg, self.params)  # fluid or request-level periods (dynamics.py)
        self.observation_space = spaces.Box(-1.0, 10.0, shape=(len(obs_fields(cfg)),), dtype=np.float32)
        self._episodes = 0  # resets of this instance (the curriculum stage follows it)
        self._set_episode(0, self.signals.base_rate_rps.size, 0)
        self._was_reset = False  # step() before the first reset() is refused (the state above is a placeholder)
        self.state.step_bound = self.per_step_reward_bound()
        self.state.update_reference(self.params)

    def _day_state(self, day: DayScenario) -> PDState:
        """A state on ``day`` (its signals, mix tables, price scale and reference rule) at its first period."""
        cfg = self.config
        signals = build_signals(day)
        tables = mix_tables(signals.mix_weights, cfg.system, cfg.max_prefill, cfg.max_decode)
        # The reference every driver and the observation read: min-power with one period of lookahead, or
        # sized for the forecast maximum over the start-up horizon (config ``reference``).
        rho = parse_reference(cfg.reference)[1]
        rule = MinPowerRule(tables, cfg.gpu_budget, cfg.pue, rho_bar=rho, lookahead=1, eps=cfg.front_eps)
        return PDState(day=day, signals=signals, tables=tables, rule=rule,
                       mu_list=tables.mu.tolist(),  # nested lists: fast scalar lookups in the step loop
                       max_price=max(float(np.max(signals.price_usd_per_kwh)), 1e-9),
                       rates=np.zeros(signals.base_rate_rps.size))

    # the episode's day, as the baselines and reports read it (the state owns it)
    @property
    def day(self) -> DayScenario:
        """The exact day of the current episode (baselines replay it)."""
        return self.state.day

    @property
    def signals(self) -> DaySignals:
        """The per-period signals of the current episode's day."""
        return self.state.signals

    @property
    def tables(self) -> MixTables:
        """The mix tables of the current episode's day."""
        return self.state.tables

    @property
    def reference(self) -> MinPowerRule:
        """The reference rule every action mode's suggestion comes from (config ``reference``)."""
        return self.state.rule

    def split_capacity_scale(self) -> float:
        """The peak-rate factor of this env's split: for :data:`~servegym.envs.pd.sim.scenario.CAPACITY_SCALED_SPLITS`
        the budget's largest capacity under the split trace's lengths over that under azure-conv's (the
        train trace), from this config's system, action grid and budget; 1 for every other split."""
        from servegym.envs.pd.sim.scenario import CAPACITY_SCALED_SPLITS, MIX_COMPONENTS, SPLIT_TRACE

        cfg = self.config
        if cfg.split not in CAPACITY_SCALED_SPLITS:
            return 1.0
        tab = mix_tables(np.eye(len(MIX_COMPONENTS)), cfg.system, cfg.max_prefill, cfg.max_decode)
        cap = [float(tab.grid(m, cfg.gpu_budget).mu.max()) for m in range(len(MIX_COMPONENTS))]
        return cap[MIX_COMPONENTS.index(SPLIT_TRACE[cfg.split])] / cap[MIX_COMPONENTS.index(SPLIT_TRACE["train"])]

    def _front_slots(self) -> int:
        """Slots of the front mode: the largest eps-Pareto front over the day's mixes (split None), or over
        the one-trace mixes of every split (a named split: the same space for train, test and the shifts)."""
        cfg = self.config
        if cfg.split is None:
            rule = self.reference
        else:
            from servegym.envs.pd.sim.scenario import MIX_COMPONENTS

            tab = mix_tables(np.eye(len(MIX_COMPONENTS)), cfg.system, cfg.max_prefill, cfg.max_decode)
            rule = MinPowerRule(tab, cfg.gpu_budget, cfg.pue, lookahead=1, eps=cfg.front_eps)
        return max(rule.mix_cache(m).front.size for m in range(rule.tables.mu.shape[0]))

    # ------------------------------------------------------------------------------------------ config
    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """The default configuration as a plain dict (``scenario`` nested), to copy and override."""
        d = asdict(PDEnvConfig())
        d.pop("system")  # a PDSystem object, not a plain override; pass PDEnvConfig(system=...) to change it
        return d

    # --------------------------------------------------------------------------------------------- state
    def _set_episode(self, start: int, steps: int, stage: int) -> None:
        st = self.state
        st.start, st.end, st.stage = int(start), int(start) + int(steps), int(stage)
        st.k = st.start

    @property
    def backlog_limit(self) -> float:
        """Backlog (requests) above which an episode terminates: ``backlog_limit_s`` x ``peak_rate_rps``."""
        return self.params.backlog_limit

    def per_step_reward_bound(self) -> float:
        """B such that -B <= reward <= 0 on every non-terminal step of this scenario (module docstring)."""
        return step_bound(self.config, self.signals, self.params.idle_w)

    def curriculum_stage(self, episode: int) -> int:
        """The curriculum stage of the ``episode``-th reset (0-based) of an instance."""
        return curriculum_stage(self.config, episode)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[NDArray[np.float32], dict[str, Any]]:
        super().reset(seed=seed)
        cfg = self.config
        s = int(seed) if seed is not None else int(self.np_random.integers(2**31 - 1))
        if cfg.split is not None:
            day, record = draw_scenario(cfg.scenario, cfg.split, scenario_rng(cfg.split, s),
                                        self.split_capacity_scale())
            if day != self.day:
                self.state = self._day_state(day)
            self.scenario = {**record, "seed": s, "track": cfg.track, "forecast": forecast_kind(cfg.split, cfg.track)}
            # the per-minute spread and the arrival counts come from a stream of their own per split
            self.np_random = np.random.default_rng(scenario_seed(cfg.split, s) ^ 0x5EED)
        else:
            self.scenario = {"split": None, "seed": s}
        rates, drawn = episode_rates(self.day, self.signals, self.np_random)
        self.state = st = self.state.next_episode(rates)
        st.persistence = persistence(cfg.split, cfg.track)  # shift-forecast, or a track (pd/tracks.py)
        self._was_reset = True
        self.scenario.update(drawn)
        n = self.signals.base_rate_rps.size
        stage = pinned_stage(self.config, options)
        if stage is None:
            stage = self.curriculum_stage(self._episodes)
        self._episodes += 1
        steps = min(self.config.curriculum[stage][0], n) if self.config.curriculum else n
        start = int(self.np_random.integers(n - steps + 1)) if steps < n and self.config.random_start else 0
        self._set_episode(start, steps, stage)
        r0 = float(rates[start])
        st.hist = [r0] * RATE_HISTORY  # the episode starts in steady state at its first mean rate
        st.start_level(r0)
        n_p, n_d = self.config.initial_deployment or self._initial_deployment(r0, start)
        st.active = [int(n_p), int(n_d)]
        st.target = [int(n_p), int(n_d)]
        st.step_bound = self.per_step_reward_bound()
        self.dynamics.start(st, self.np_random)
        st.update_reference(self.params)
        info = self._state_info()
        info.update(episode_steps=steps, start_step=start, curriculum_stage=stage,
                    per_step_reward_bound=st.step_bound, backlog_limit=self.backlog_limit)
        info["scenario"] = dict(self.scenario)
        st.last_info = info
        return self._obs(), info

    def _initial_deployment(self, rate: float, start: int = 0) -> tuple[int, int]:
        mix = int(self.signals.mix_index[start])
        grid = self.tables.grid(mix, self.config.gpu_budget)
        sel = min_power_deployment(grid, rate, DEFAULT_RHO_BAR)
        if sel is None:  # the first rate exceeds the budget's reach: the largest capacity instead
            sel = max_capacity_under_power(grid, float("inf"))
        assert sel is not None
        return sel.n_p, sel.n_d

    # --------------------------------------------------------------------------------------------- action
    def action_masks(self) -> NDArray[np.bool_]:
        """Valid actions of the current state, in sb3-contrib's layout (never empty per dimension).

        ``absolute``: [n_P mask, n_D mask] (0 and counts above ``gpu_budget - 1`` masked); ``residual``:
        [dP mask, dD mask], the changes that keep each pool in [1, min(pool max, gpu_budget - 1)];
        ``front``: the slots holding a point of the coming mix's front (:mod:`servegym.envs.pd.actions`).
        """
        return self.action_type.mask(self.state)

    def action_masks_given(self, chosen: Sequence[int] = ()) -> NDArray[np.bool_]:
        """The exact mask of action dimension ``len(chosen)`` given the earlier ones (n_P from
        ``action_masks_given()``, then n_D from ``action_masks_given([n_P])``): unlike :meth:`action_masks`, it
        keeps the pair within the GPU budget, so an action drawn so is applied as sent."""
        return self.action_type.mask_given(self.state, chosen)

    def _check_action(self, action: Any) -> tuple[int, int, bool]:
        """Decode an action of the configured ``action_mode`` into the target (n_P, n_D, adjusted)."""
        return self.action_type.decode(self.state, action)

    # ----------------------------------------------------------------------------------------------- step
    def step(self, action: Any) -> tuple[NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        n_p, n_d, adjusted = self.decode_action(action)
        arrived = self.begin_period(n_p, n_d)
        m = self.dynamics.run([self.state], [arrived], [self.np_random])[0]
        return self.finish_step(n_p, n_d, adjusted, arrived, m)

    # A step in three parts (the vector env runs the same ones, its fluid periods in one batch): decode the
    # action, apply it and draw the arrivals; run the period; reward, reference, info and observation.
    def decode_action(self, action: Any) -> tuple[int, int, bool]:
        """The action's target (n_P, n_D, adjusted); ActionError before reset, after the end or if invalid.
        Changes nothing (the first part of :meth:`step`)."""
        if not self._was_reset:
            raise ActionError("step() called before reset(); call reset() first")
        if self.state.done or self.state.k >= self.state.end:
            raise ActionError("step() called after the episode ended (terminated or truncated); call reset() first")
        return self._check_action(action)

    def begin_period(self, n_p: int, n_d: int) -> float:
        """Apply the target (n_P, n_D) and draw the period's arrivals (returned, requests): the second part of
        :meth:`step`, before the period dynamics run."""
        self.dynamics.begin(self.state, n_p, n_d)
        return draw_arrivals(self.params, self.state.rates, self.np_random, self.state.k)

    def finish_step(self, n_p: int, n_d: int, adjusted: bool, arrived: float, m: dict[str, Any]
                    ) -> tuple[NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        """Reward, termination, the next reference, info and observation of the period ``m`` just run (the
        last part of :meth:`step`; returns what it returns)."""
        cfg = self.config
        st = self.state
        period = cfg.scenario.period_s
        k = st.k
        limit = self.params.backlog_limit
        r = period_reward(cfg, st, m, limit)  # pops m["slo_violation"]
        reward, viol_share = r.reward, r.viol_share
        st.hist = [arrived / period, *st.hist[:-1]]
        if self.params.level_alpha:
            st.update_level(arrived / period, self.params.level_alpha)
        st.last_power_w = m["power_w"]
        st.last_viol = viol_share
        st.last_util = (m["prefill_util"], m["decode_util"], m["demand_util"])
        st.k = k + 1
        st.adjusted_actions += int(adjusted)
        terminated = st.backlog > limit
        truncated = st.k >= st.end and not terminated
        penalty = 0.0
        if terminated:
            penalty = (float(cfg.termination_penalty) if cfg.termination_penalty is not None
                       else (st.end - st.k) * st.step_bound)
            reward -= penalty
        st.done = terminated or truncated
        st.update_reference(self.params)
        info = self._state_info()
        info.update(m)
        info.update(energy_kwh=r.energy_kwh, carbon_g=r.carbon_g, cost_usd=r.cost, cap_w=r.cap_w,
                    ci_g_per_kwh=r.ci, price_usd_per_kwh=r.price, arrived=arrived, action_adjusted=adjusted,
                    episode_adjusted_actions=st.adjusted_actions,
                    reward_objective=r.objective, slo_violation_pct=100.0 * viol_share,
                    backlog_frac=r.backlog_frac, termination_penalty=penalty, applied_p=n_p, applied_d=n_d)
        st.last_info = info
        return self._obs(), float(reward), terminated, truncated, info

    def slo_steady(self, lam: float, n_p: NDArray[np.int64], n_d: NDArray[np.int64], mix: int
                   ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """(violation share, mean TTFT s, mean TPOT s) of arrivals at ``lam`` req/s meeting no backlog, for
        the deployments (n_p, n_d) (arrays of one shape): the steady case of :func:`~servegym.envs.pd.sim.fluid.fluid_periods` (every
        arrival sees the same state), vectorized so a planner can price every deployment at once."""
        tab = self.tables
        return steady_slo(lam, n_p, n_d, float(tab.mu_p[mix]), float(tab.cv_s2[mix]), float(tab.a_d[mix]),
                          float(tab.b_d[mix]), float(tab.decode_tokens[mix]), tab.t_p_quantiles_s[mix],
                          float(tab.t_p_mean_s[mix]), self.config.ttft_slo_s, self.config.tpot_slo_s)

    # ------------------------------------------------------------------------------------------ helpers
    def absolute_twin(self) -> PDProvisionEnv:
        """This env's config under ``action_mode="absolute"``: the same model, scenario, seeds and reward
        driven by (n_P, n_D) targets, for policies that decide absolute targets (the baselines). An absolute
        env is its own twin; any other is created once and kept, so its curriculum count advances with its
        own resets as this env's would."""
        if isinstance(self.action_type, AbsoluteAction):
            return self
        twin = self.__dict__.get("_twin")
        if twin is None:
            twin = self._twin = PDProvisionEnv(replace(self.config, action_mode=AbsoluteAction.mode))
        return twin

    def hindsight_arrivals(self) -> NDArray[np.float64]:
        """The arrival counts of every period left in the episode, exactly as :meth:`step` will draw them
        (from a copy of the episode's generator; in fluid mode actions never touch it). What a hindsight
        oracle knows and a policy does not; ConfigError in request mode (the simulator shares the generator)."""
        import copy

        self.dynamics.check_hindsight()
        rng = copy.deepcopy(self.np_random)
        st = self.state
        return np.array([draw_arrivals(self.params, st.rates, rng, k) for k in range(st.k, st.end)],
                        dtype=np.float64)

    def follow_action(self) -> NDArray[np.int64]:
        """The residual mode's zero action [L, L]: no change to the reference's suggestion (what the
        benchmark's ``follow`` policy plays). ConfigError in the other action modes, which have none."""
        return self.action_type.follow_action()

    def reference_action(self) -> NDArray[np.int64]:
        """The action of this env's mode that plays the reference's suggestion for the coming period (a
        teacher for behaviour cloning): ``residual`` the zero action [L, L]; ``absolute`` the suggested
        (n_P, n_D); ``front`` the first slot whose front point has at least the suggestion's capacity (the
        observation's ``front_index_suggested``; the front holds the suggestion only up to ``front_eps``)."""
        return self.action_type.reference_action(self.state)

    def mix_index(self, step: int | None = None) -> int:
        """Index into :attr:`tables` of the length mix of period ``step`` (default: the coming period)."""
        return self.state.mix_index(step)

    def forecast_rates(self, steps: int) -> NDArray[np.float64]:
        """Forecast mean rates (req/s) of the next ``steps`` periods from the coming one (fewer at the episode end):
        the scenario's exact mean rates, or on a persistence-forecast split (``shift-forecast``) the smooth
        mean times the last completed period's realized / smooth ratio
        (:func:`~servegym.envs.pd.sim.scenario.persistence_forecast`)."""
        return self.state.forecast_rates(steps)

    def obs_fields(self) -> tuple[str, ...]:
        """The names of this env's observation entries (:data:`OBS_FIELDS`, and the level entries when
        ``rate_ema_periods`` is on)."""
        return obs_fields(self.config)

    @property
    def step_index(self) -> int:
        return self.state.k

    def _state_info(self) -> dict[str, Any]:
        return state_info(self.config, self.params, self.state)

    def _obs(self) -> NDArray[np.float32]:
        return observe(self.config, self.params, self.state)

    def render(self) -> str | NDArray[np.uint8] | None:
        return render(self.config, self.params, self.state, self.render_mode)
