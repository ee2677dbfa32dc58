"""What the two geo routing environments share: :class:`GeoEnvBase` (config, seeding and split draws, episode
plumbing, the reward bound, rendering), and the description of their config, reward, splits and bound.

Both environments are thin drivers of :class:`~servegym.envs.geo.sim.cluster.GeoSimulation` (DESIGN
principle 1): they take decision contexts from the simulator, turn them into observations, and
hand the agent's placements back through ``sim.apply``; no dynamics live here. The shared pieces live
beside this module, which re-exports their names: :mod:`~servegym.envs.geo.env_config` (:class:`GeoEnvConfig`),
:mod:`~servegym.envs.geo.rewards` (:class:`EpisodeTracker`), :mod:`~servegym.envs.geo.observations` (the
features, squashing maps and renderings), :mod:`~servegym.envs.geo.grid_clock` (:class:`GridClock`); the action
modes are classes in :mod:`~servegym.envs.geo.actions`.

Configuration (:class:`GeoEnvConfig`, highway-env style): ``Env(config={...}, **overrides)`` or
``gym.make(id, config={...}, w_slo=2.0)``; the dict updates :meth:`GeoEnvConfig.default_config`
and unknown keys or bad values raise :class:`~servegym.errors.ConfigError`.

Reward (``reward`` config key; both envs). With ``M = -(w_carbon * gCO2 + w_slo * misses)`` the
measured cost, ``misses`` counting every request that missed its TTFT or TPOT SLO *or never
finished* (the count ``episode_metrics`` reports), every complete episode's undiscounted return is

    sum of rewards = -(w_carbon * carbon_with_drain_g + w_slo * (finished misses + unfinished))

in both modes (tested on real episodes, including an overloading policy):

- ``"dense"`` (default): credit per decision. Placing request r on DC d pays at once the shared
  estimator's cost of that placement, ``-(w_carbon * c_{r,d} + w_slo * (1 - feasible_{r,d}))``
  (``c_{r,d}`` its estimated engine carbon in gCO2, PUE and CI included; the SLO risk is 1 when
  the estimator predicts a miss). Every provisioner poll then settles the difference between
  estimate and measurement: the measured cost of the poll interval (carbon of every DC, idle and
  host power included, plus the misses of the requests that finished in it) replaces the
  estimates of exactly the requests that finished in it. When the run ends, the requests that
  never finished are settled as misses. So the drain is settled poll by poll as requests finish
  (its polls are folded into the last step only because no decision is left to step on), and the
  estimate's error, not the whole cost, is what arrives late.
- ``"poll"``: the former reward, kept for comparability: the measured cost accrued since the
  previous step (zero on most request steps; non-zero on the step whose placement closes a poll
  interval), plus the unfinished requests' misses at the end.

Splits (``split`` config key, ``gym.make(id, split="test")``; :mod:`servegym.splits`). ``reset(seed=s)``
draws the episode's scenario from the split with a generator seeded by (split, s): the start day and
UTC hour of the grid series (``geo.ci_start``; every hour of the day equally likely) and the seed of the
arrival stream (so two splits never share arrivals under the same reset seed). The shipped Electricity
Maps series cover 2021-2024 for the ``small`` and ``mini`` presets' topologies (published series) and
2022 only for ``paper`` (its EU-North, US-CAR-DUK, UY and PE sites have the recomputed 2022 series
only), so ``paper`` splits days within 2022 (:func:`servegym.splits.split_days`). A start is drawn
only where every grid hour the episode reads (its CI clock over arrivals and drain, at
``ci_time_scale``, plus the forecast) lies on days of the same split:

- ``train``: start day and UTC hour of the grid series drawn from the train days (2021-2023 less the
  validation weeks; single-year topologies: days 1-20 of each month)
- ``validation``: the ISO weeks of 2023 divisible by 4 (single-year topologies: days 21-23 of each
  month)
- ``test``: the days of 2024 (single-year topologies: day 24 to the end of each month)
- ``shift-load``: test days with the arrival rate x 1.5
- ``shift-topology``: test days on another topology of the same shape (geo-small -> geo-small-shift,
  geo-mini -> geo-mini-shift; not defined for the paper preset)
- ``shift-stale``: test days with provisioner snapshots every 5 s instead of 1 s (stale load signals)
- ``shift-osl``: test days with the schedulers' estimator on the paper's OSL predictor (the shipped MLP,
  ``geo.osl_mode = "predicted"``; CNN-DailyMail is predicted as its nearest application, arXiv summarization)
  instead of the workload's mean OSL: the output-length error is the predictor's own
- ``shift-ci-forecast``: test days whose snapshots report a persistence day-ahead forecast of the grid CI
  (the same hour of the previous day of the series, ``geo.ci_signal = "day-ahead"``) while carbon is charged
  at the realized CI: the error is the series' own day-to-day change (mean absolute 17 % on geo-mini's 2024
  hours, 15 % on geo-small's; the ranking of geo-mini's DCs never changes, geo-small's in 29 % of hours)

Stress tracks (``track`` config key, ``gym.make(id, split="train", track="stress-load")``;
:data:`servegym.splits.FAMILY_TRACKS`): named conditions laid over a base split where the shipped rules leave
room to the hindsight oracle (benchmarks/results/headroom.md measures per track how much of it a causal
reference takes). A track keeps the
split's days and arrival seeds, so its train, validation and test episodes are as disjoint as the splits'; it
sets its GeoConfig fields itself (``geo`` may not set them) and is not allowed on a shift:

- ``stress-load``: the split's days with the arrival rate x 1.5 (shift-load's rate) and provisioner
  snapshots every 5 s (shift-stale's period). Why: under load the 5-s snapshot is the scarce
  information: the load-aware rules overfill the clean sites between polls (on validation moer 3.8 %,
  the ILPs 0.2 % SLO violation) and the others pay carbon for safety (green-llm, rr), while a policy
  knows its own routings since each poll and the snapshot's age (dead reckoning)
- ``stress-osl``: the split's days with the schedulers' estimator on the shipped OSL predictor
  (shift-osl's predictor) and provisioner snapshots every 5 s. Why: the predictor overestimates the
  served mix's output lengths about 7.7-fold (mean 540 against 70 tokens on validation, uncorrelated),
  so green-llm's token budgets spill onto dirty sites and the window schedulers plan on wrong lengths,
  while the true lengths of the requests that finished are observable and correct the bias

``split=None`` runs the configured scenario as is (``geo.ci_start`` or the topology's base hour; the
reset seed is the simulator seed). A named split draws ``geo.ci_start`` itself, so setting both is a
ConfigError. The drawn scenario is ``env.scenario`` and ``info["scenario"]`` at reset (``split``,
``track``, ``seed``, ``ci_start``, ``topology``, ``rate_rps``, ``poll_interval_s``, ``sim_seed``), and
``env.episode_config`` is the exact :class:`GeoConfig` of the episode:
``GeoSimulation(env.episode_config, seed=env.scenario["sim_seed"])`` replays its arrivals, which is how
the baselines run on exactly the agent's episode.

Bound (both modes, both envs): every step's reward r has ``|r| <= B`` with
``B = w_carbon * (G + N * c_max) + 2 * w_slo * N``, where N is the episode's number of requests, G the most
carbon the whole fleet can emit over the run (every engine at TP x (TDP + idle), every node's host power,
PUE, the highest CI of each DC's series, for ``duration_s + drain_s``) and c_max the largest per-request
carbon the estimator can charge (the request's tokens at batch 1, the highest CI and PUE). A step pays at
most every decision's estimate (N c_max, N risks) plus the measured cost (G, N misses), and gets back at
most the estimates it settles. :meth:`GeoEnvBase.per_step_reward_bound` returns B for the current episode
(finite for every valid config: N is capped by ``geo.max_expected_requests``).

Episodes end by truncation only: when every request of the run (arrivals in
``[0, duration_s)``) has been placed and the drain has finished, or after ``max_steps`` steps.
The fleet would keep serving after the stream ends, so no state is terminal.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
from numpy.typing import NDArray
from servegym.envs.geo.env_config import (  # noqa: F401 (re-exported: the names env_common always had)
    ACTION_MODES,
    DECIDE_AT,
    MAX_STEPS,
    REWARD_MODES,
    SHIFT_LOAD_FACTOR,
    SHIFT_STALE_POLL_S,
    SHIFT_TOPOLOGY,
    START_MARGIN_H,
    GeoEnvConfig,
    resolve_config,
)
from servegym.envs.geo.grid_clock import GridClock
from servegym.envs.geo.observations import (  # noqa: F401 (re-exported)
    CI_SCALE_G_PER_KWH,
    DC_FEATURES,
    PUE_MAX,
    RESIDUAL_EMA,
    RESIDUAL_FEATURES,
    TIME_FEATURES,
    dc_static_features,
    forecast_names,
    reference_carbon_g,
    render_ansi,
    render_rgb,
    safe_ratio_squash,
    squash,
)
from servegym.envs.geo.rewards import EpisodeTracker
from servegym.envs.geo.sim.cluster import GeoSimulation
from servegym.envs.geo.sim.config import GeoConfig
from servegym.envs.geo.sim.decisions import GeoDecisionState
from servegym.envs.geo.sim.osl import osl_predictor_for
from servegym.envs.geo.sim.provisioner import Snapshot

from servegym.errors import ActionError, ConfigError, check_keywords
from servegym.splits import scenario_rng, split_days


@functools.cache
def _split_days(topology: str, split: str, span_h: int) -> pd.DatetimeIndex:
    """Start days of ``split`` inside ``topology``'s common CI window for episodes whose CI clock spans
    ``span_h`` hours (cached per process)."""
    from servegym.envs.grid import get_topology

    hours = get_topology(topology).common_hours()
    return split_days(split, hours[0], hours[-1], window_h=(0.0, float(START_MARGIN_H + span_h)))


def _n_dcs_regions(geo: GeoConfig) -> tuple[int, int]:
    from servegym.envs.grid import get_topology

    topo = get_topology(geo.topology)
    return len(topo.sites), len(topo.regions)


class GeoEnvBase(gym.Env):
    """Config, seeding, episode bookkeeping and rendering shared by the two geo envs."""

    metadata: dict[str, Any] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}  # noqa: RUF012 (gymnasium API)
    decision_mode = "request"

    def __init__(self, config: GeoEnvConfig | dict[str, Any] | None = None, render_mode: str | None = None,
                 **overrides: Any) -> None:
        super().__init__()
        check_keywords(type(self).__name__, overrides, GeoEnvConfig)
        self.config = resolve_config(config, overrides)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(f"render_mode = {render_mode!r} is not allowed; allowed: None, 'ansi', 'rgb_array'")
        self.render_mode = render_mode
        self.geo_config = self.config.geo_config(self.simulator_mode())
        self.n_dcs, self.n_regions = _n_dcs_regions(self.geo_config)
        self._fc_n = self.config.ci_forecast_h * self.n_dcs  # forecast features, after the time block
        self._res_n = 2 * self.n_dcs if self.config.observe_residuals else 0  # residuals, after the forecast
        GridClock(self.geo_config)  # a ci_start outside the topology's CI series fails here, not at reset
        self.sim: GeoSimulation | None = None
        #: the outstanding decision and what this env decided of it: what the action type reads
        self.state = GeoDecisionState()
        self.episode_config: GeoConfig = self.geo_config  # the exact scenario of the current episode
        self.scenario: dict[str, Any] = {}  # what reset drew (module docstring, "Splits")
        self._tracker: EpisodeTracker | None = None
        self._episode_over = True
        if self.config.split is not None:  # a split with no start day for this span fails here, not at reset
            _split_days(self.geo_config.topology, self.config.split, self._span_h())

    def simulator_mode(self) -> str:
        """The simulator's ``decision_mode`` (what hands out decisions); :attr:`decision_mode` is the env's step
        unit (one request or one window) and may differ (GeoRoute-v0 with ``decide_at = "window"``)."""
        return self.decision_mode

    # -- episode plumbing ------------------------------------------------------------------
    def _span_h(self) -> int:
        """Grid hours an episode's CI clock and forecast run through (arrivals, drain, time scale)."""
        cfg = self.geo_config
        span_h = math.ceil((cfg.duration_s + cfg.drain_s) * self.config.ci_time_scale / 3600.0)
        return span_h + int(self.config.ci_forecast_h) + (1 if self.config.ci_time_scale > 1.0 else 0)  # start offset

    def episode_scenario(self, seed: int | None) -> tuple[GeoConfig, dict[str, Any]]:
        """The GeoConfig and ``scenario`` record that ``reset(seed=seed)`` runs (module docstring, "Splits");
        given a seed, nothing changes. Baselines that decide outside the env loop run on exactly this scenario."""
        s = int(seed) if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        split = self.config.split
        cfg = self.geo_config
        if split is None:
            sim_seed, ci_start = s, cfg.ci_start
        else:
            rng = scenario_rng(split, s)
            days = _split_days(cfg.topology, split, self._span_h())
            start = days[int(rng.integers(days.size))] + pd.Timedelta(hours=int(rng.integers(24)))
            sim_seed = int(rng.integers(0, 2**31 - 1))
            if self.config.ci_time_scale > 1.0:
                # A compressed grid clock starts inside its hour, so that an hour boundary (a new CI row,
                # possibly a new ranking of the DCs) falls at a drawn poll time of the serving window
                # rather than at its very end (whole-hour starts put it at t = 3600 / scale, past a short
                # episode); drawn after the arrival seed, so day, hour and arrivals stay those of scale 1.
                step = cfg.poll_interval_s if cfg.poll_mode == "sync" else cfg.poll_interval_s / self.n_dcs
                n_polls = max(1, int(cfg.duration_s // step))
                t_cross = step * int(rng.integers(1, n_polls + 1))
                offset_s = (-t_cross * self.config.ci_time_scale) % 3600.0
                start = start + pd.Timedelta(seconds=round(offset_s, 6))
            ci_start = start.isoformat().replace("+00:00", "Z")
            cfg = cfg.replace(ci_start=ci_start)
        scenario = {"split": split, "track": self.config.track, "seed": s, "ci_start": ci_start, "topology": cfg.topology,
                    "rate_rps": cfg.rate_rps, "poll_interval_s": cfg.poll_interval_s, "sim_seed": sim_seed}
        return cfg, scenario

    def _new_simulation(self, seed: int | None) -> GeoSimulation:
        """A fresh run of the scenario drawn for ``seed`` (one drawn from ``self.np_random`` when None)."""
        cfg, scenario = self.episode_scenario(seed)
        self.episode_config = cfg
        self.scenario = scenario
        sim, self._clock = self._make_run(cfg, scenario["sim_seed"])
        if sim.n_requests == 0:
            # Said here rather than as "the episode is over" at the first step.
            raise ConfigError(f"this scenario has no request to route at seed {scenario['seed']}: rate_rps = "
                              f"{cfg.rate_rps:g} x duration_s = {cfg.duration_s:g} gives "
                              f"{cfg.rate_rps * cfg.duration_s:.3g} expected arrivals; allowed: a scenario with at "
                              "least one request (raise geo.rate_rps or geo.duration_s)")
        self.sim = sim
        self._tracker = EpisodeTracker(sim, self.config)
        self._c_ref = reference_carbon_g(sim)
        self._ln_cap = math.log1p(float(sim.profile.kv_capacity_tokens))
        self._inv_e = 1.0 / sim.engines_per_dc
        self._episode_over = False
        self._snap_cache: tuple[Snapshot, NDArray[np.float64], NDArray[np.float64]] | None = None
        return sim

    def per_step_reward_bound(self) -> float:
        """B with ``|reward| <= B`` on every step of the current episode (module docstring, "Bound")."""
        sim = self.sim
        if sim is None:
            raise ActionError("per_step_reward_bound() needs an episode; call reset() first")
        prof, cfg = sim.profile, sim.config
        topo = sim.topology
        g_per_j = topo.pue * np.asarray(topo.ci_matrix()[1], dtype=np.float64).max(axis=0) / 3.6e6  # per DC
        engine_w = prof.tp * (prof.tdp_w + prof.idle_w_per_gpu)
        fleet_w = sim.engines_per_dc * engine_w + sim.nodes_per_dc * cfg.host_power_w
        g_max = float(np.sum(fleet_w * g_per_j)) * (cfg.duration_s + cfg.drain_s)
        e = prof.energy
        isl = np.asarray(sim.requests.input_tokens, dtype=np.float64)
        osl = np.maximum(np.asarray(sim.osl_estimates, dtype=np.float64), 1.0)
        # Every coefficient taken by magnitude and ceil(isl / chunk) <= isl: an upper bound of the estimate.
        e_req = (abs(e.e_p) + abs(e.e0_pre)) * isl + abs(e.e_a) * isl * isl + osl * (
            abs(e.e0_dec) + abs(e.e_d) + abs(e.e_k) * (isl + 0.5 * osl))
        c_max = float(e_req.max(initial=0.0)) * float(g_per_j.max())
        n = sim.n_requests
        return float(self.config.w_carbon * (g_max + n * c_max) + 2.0 * self.config.w_slo * n)

    def make_simulation(self, geo: GeoConfig, seed: int) -> GeoSimulation:
        """A simulator run of scenario ``geo`` with this env's grid clock (CI series, time scale) and
        OSL source: what ``reset`` plays, and what a baseline must run to be comparable."""
        return self._make_run(geo, seed)[0]

    def _make_run(self, geo: GeoConfig, seed: int) -> tuple[GeoSimulation, GridClock]:
        cfg = self.config
        clock = GridClock(geo, cfg.ci_time_scale, cfg.ci_forecast_h, cfg.ci_forecast_noise, seed)
        seen = clock.day_ahead_at if geo.ci_signal == "day-ahead" else None
        return GeoSimulation(geo, seed=seed, ci_at=clock.ci_at, osl_predictor=osl_predictor_for(geo),
                             ci_seen_at=seen), clock

    def _snapshot_features(self, snap: Snapshot) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(flattened :func:`dc_static_features`, estimator headroom H_d) of ``snap``, computed
        once per snapshot (every decision of a poll interval shares it)."""
        if self._snap_cache is None or self._snap_cache[0] is not snap:
            assert self.sim is not None
            self._snap_cache = (snap, dc_static_features(self.sim, snap).ravel(),
                                self.sim.estimator.headroom_requests(snap))
        return self._snap_cache[1], self._snap_cache[2]

    def _require_running(self) -> None:
        if self.sim is None or self._episode_over:
            from servegym.errors import ActionError

            raise ActionError("the episode is over (or reset() was never called); call reset() first")

    def end_episode(self) -> None:
        """Mark the episode over (a driver that ends it from outside: the multi-agent env, when it truncates);
        a later ``step`` raises until ``reset``."""
        self._episode_over = True

    def finish_step(self, run_over: bool) -> tuple[bool, dict[str, Any]]:
        """(truncated, info) after a step (public for the multi-agent env, which drives this env's decisions);
        adds the run's full summary when it is complete."""
        tr = self._tracker
        assert tr is not None and self.sim is not None
        tr.steps += 1
        truncated = run_over or (self.config.max_steps is not None and tr.steps >= self.config.max_steps)
        info = dict(tr.info)
        info["steps"] = tr.steps
        if run_over:
            info["episode_metrics"] = self.sim.metrics(policy="agent").summary
        if truncated:
            self._episode_over = True
        return truncated, info

    @property
    def observation_names(self) -> list[str]:  # pragma: no cover - overridden
        raise NotImplementedError

    def end_observation(self) -> NDArray[np.float32]:
        """Observation after the run is complete: the final snapshot, no request (zeros)."""
        sim = self.sim
        assert sim is not None
        obs = np.zeros(self.observation_space.shape, dtype=np.float32)
        d = self.n_dcs
        snap = sim.snapshot
        obs[:7 * d] = dc_static_features(sim, snap).ravel()
        obs[7 * d:8 * d] = np.clip((sim.now_s - snap.polled_at_s) / sim.config.poll_interval_s, 0.0, 1.0)
        obs[self._time_lo:self._time_lo + 5] = self._clock.features(sim.now_s, snap)
        if self._fc_n:
            obs[self._time_lo + 5:self._time_lo + 5 + self._fc_n] = self._clock.forecast(sim.now_s)
        if self._res_n and self._tracker is not None:
            lo = self._time_lo + 5 + self._fc_n
            obs[lo:lo + self._res_n] = self._tracker.residual_features()
        return obs

    def render(self) -> str | NDArray[np.uint8] | None:
        if self.render_mode is None or self.sim is None:
            return None
        snap = self.sim.snapshot if self._current_snapshot() is None else self._current_snapshot()
        if self.render_mode == "ansi":
            info = self._tracker.info if self._tracker is not None else {}
            return render_ansi(self.sim.now_s, snap, info, self._render_extra())
        return render_rgb(snap, self.sim.profile.max_num_seqs, self._render_mask())

    def _current_snapshot(self) -> Snapshot | None:  # pragma: no cover - overridden
        return None

    def _render_extra(self) -> str:
        return ""

    def _render_mask(self) -> NDArray[np.bool_] | None:
        return None
