"""What the two geo routing environments share: config, reward/metrics, per-DC features, rendering.

Both environments are thin drivers of :class:`~servegym.envs.geo.sim.cluster.GeoSimulation` (DESIGN
principle 1): they take decision contexts from the simulator, turn them into observations, and
hand the agent's placements back through ``sim.apply``; no dynamics live here.

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

``split=None`` runs the configured scenario as is (``geo.ci_start`` or the topology's base hour; the
reset seed is the simulator seed). A named split draws ``geo.ci_start`` itself, so setting both is a
ConfigError. The drawn scenario is ``env.scenario`` and ``info["scenario"]`` at reset (``split``,
``seed``, ``ci_start``, ``topology``, ``rate_rps``, ``poll_interval_s``, ``sim_seed``), and
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
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
from numpy.typing import NDArray
from servegym.envs.geo.sim.cluster import GeoSimulation
from servegym.envs.geo.sim.config import LOADS, PAPER_MODELS, PRESETS, GeoConfig, preset
from servegym.envs.geo.sim.osl import osl_predictor_for
from servegym.envs.geo.sim.provisioner import Snapshot

from servegym.errors import (
    ActionError,
    ConfigError,
    check_choice,
    check_field_types,
    check_keywords,
    check_range,
    known_overrides,
)
from servegym.splits import check_split, scenario_rng, split_days

#: ``shift-load``: arrival rate multiplier.
SHIFT_LOAD_FACTOR = 1.5
#: ``shift-stale``: provisioner poll period (s) of the stale-snapshot shift.
SHIFT_STALE_POLL_S = 5.0
#: ``shift-topology``: the same-shape twin of each training topology (``servegym.envs.grid``).
SHIFT_TOPOLOGY: dict[str, str] = {"geo-small": "geo-small-shift", "geo-mini": "geo-mini-shift"}
#: Grid hours after a drawn start day's midnight that must lie inside the split's days, besides the
#: episode's own span on the CI clock: the start hour (up to 23 h) and one hour of slack.
START_MARGIN_H = 24

#: Carbon intensity that maps to 1.0 in the observations (g/kWh); coal-heavy grids reach ~900.
CI_SCALE_G_PER_KWH = 1000.0
#: Highest PUE the configs allow (``GeoConfig.pue`` range); PUE features are ``(PUE - 1) / 2``.
PUE_MAX = 3.0

#: Reward modes (``GeoEnvConfig.reward``).
REWARD_MODES = ("dense", "poll")
#: Upper bound of ``max_steps`` (routing decisions per episode).
MAX_STEPS = 1_000_000_000
#: Action modes (``GeoEnvConfig.action_mode``).
ACTION_MODES = ("direct", "residual")
#: When GeoRoute-v0's residual mode places a request (``GeoEnvConfig.decide_at``).
DECIDE_AT = ("arrival", "window")

#: Per-DC snapshot features, in observation order (each a block of D values, DC index order).
DC_FEATURES: tuple[str, ...] = (
    "batch_frac",        # B_d / max_num_seqs: running batch per engine
    "queue",             # squash(Q_d / max_num_batched_tokens): queued prompt tokens per engine, in prefill chunks
    "kv_frac",           # KV-cache occupancy per engine
    "prefill_duty",      # share of the last poll period spent in prefill
    "headroom_frac",     # H_d / (engines x max_num_seqs): batch-slot headroom of the estimator
    "ci",                # CI_d / 1000 g/kWh, clipped to 1
    "pue",               # (PUE_d - 1) / 2
    "age",               # (t - polled_at_d) / poll_interval_s, clipped to 1: staleness of d's row
    "own_dispatched",    # squash(own dispatches to d since d's last poll / engines per DC)
)
#: Estimator residuals per DC (``observe_residuals``), each a block of D values: an exponential
#: moving average (weight :data:`RESIDUAL_EMA` per poll with finishes at the DC) of
#: ``(realized - predicted) / SLO`` over the requests that finished at the DC, TTFT and TPOT, squashed
#: by ``tanh`` (0: the estimator was right; > 0: it was optimistic).
RESIDUAL_FEATURES: tuple[str, ...] = ("ttft_resid", "tpot_resid")
RESIDUAL_EMA = 0.3
#: Time / grid features, in observation order (scalars).
TIME_FEATURES: tuple[str, ...] = (
    "progress",          # t / duration_s, clipped to 1
    "hour_sin",          # sin(2 pi h / 24), h the UTC hour of the CI clock (ci_start + t)
    "hour_cos",          # cos(2 pi h / 24)
    "ci_mean",           # mean CI over DCs / 1000 g/kWh, clipped to 1
    "ci_cv",             # std / mean of CI over DCs, clipped to 1
)


def squash(x: NDArray[np.float64] | float) -> NDArray[np.float64] | float:
    """``x / (1 + x)`` for ``x >= 0``: a monotone map of [0, inf) onto [0, 1) (1 -> 0.5)."""
    return x / (1.0 + x)


@dataclass(frozen=True)
class GeoEnvConfig:
    """Configuration of the geo routing environments.

    Fields:
        preset: geo scenario preset (``"paper"``, ``"small"``, ``"mini"``); ``small`` by default.
        model: paper model key (``servegym.envs.geo.sim.config.PAPER_MODELS``).
        load: ``"low"``, ``"moderate"`` or ``"high"``: the paper's arrival rate for the model,
            scaled per GPU to the preset.
        geo: further :class:`~servegym.envs.geo.sim.config.GeoConfig` overrides (e.g.
            ``{"rate_rps": 250, "duration_s": 20, "poll_interval_s": 2}``). ``decision_mode`` is
            the env's own and ``seed`` comes from ``reset(seed=...)``; ``osl_mode`` may be
            ``"mean"`` or ``"oracle"`` (oracle is named in ``info``).
        w_carbon: reward weight per gCO2 accrued (>= 0).
        w_slo: reward weight per finished request that missed its SLO, in gCO2-equivalents (>= 0).
            With the default 1.0 one miss costs what moving ~26 mean requests of the small
            preset's workload from its dirtiest DC (347 g/kWh) to its cleanest (42 g/kWh) saves on
            idle engines (0.039 g each by the estimator; less, so more requests, on busy engines
            that share each step's fixed energy): SLO first, then carbon.
        max_steps: truncate after this many steps (``None``: run the whole request stream).
        reward: ``"dense"`` (estimator credit per decision, settled at every poll) or ``"poll"``
            (measured cost per poll); the same episode return (module docstring).
        action_mode: ``"direct"`` (GeoRoute-v0: ``Discrete(D)`` DC indices; GeoRouteWindow-v0:
            per-DC shares of headroom) or ``"residual"`` (decisions relative to ``reference``:
            GeoRoute-v0 gets ``Discrete(D + 1)``, the extra action being the reference's choice;
            GeoRouteWindow-v0's action scales the window MILP's per-DC admission capacity, all
            zeros = the MILP exactly). See each env's docstring.
        reference: the baseline of the residual mode (``servegym.envs.geo.reference``):
            ``"milp"`` (default), ``"ilp"``, ``"iter-ilp"``, ``"moer"`` or ``"greedy:<alpha>"``
            (GeoRouteWindow-v0: a window scheduler only).
        decide_at: when GeoRoute-v0's residual mode places a request: ``"arrival"`` (default: each
            request leaves its scheduler at arrival, on the snapshot of its arrival's poll interval,
            the reference's window plan shown at the window's first request) or ``"window"`` (a
            window reference only: the simulator cuts the request stream into the reference's windows,
            one step per request of a window, every request of it leaving at the window's close plus
            the reference's modelled solve delay, on the snapshot of the close's poll interval; the
            zero action then reproduces the reference's own run exactly, tested).
            GeoRouteWindow-v0 decides per window anyway and allows ``"arrival"`` only.
        ci_time_scale: CI-clock seconds per simulated second, in [1, 3600] (:class:`GridClock`):
            1 follows the real hourly series in real time; 120 makes a 30 s episode span an hour
            of grid, so the ranking of DCs changes within episodes. Above 1, a split starts the
            clock inside its hour, at a drawn poll time of the serving window from the next hour
            boundary (scale 1 keeps whole-hour starts).
        ci_forecast_h: hours of CI forecast in the observation, in [0, 24] (0: none).
        ci_forecast_noise: relative log-normal noise of the forecast per square-root hour of
            lead, in [0, 2] (0: the real series).
        observe_residuals: add the estimator's recent per-DC residuals to the observation
            (:data:`RESIDUAL_FEATURES`): how far realized TTFT/TPOT ran from what the estimator
            predicted for the requests that finished, per DC.
        split: the benchmark split ``reset(seed=...)`` draws each episode's scenario from (module
            docstring): ``"train"`` (default), ``"validation"``, ``"test"``, ``"shift-load"``,
            ``"shift-topology"``, ``"shift-stale"``, ``"shift-osl"``, ``"shift-ci-forecast"``, or ``None``
            for the configured scenario as is.

    Stale snapshots: the provisioner's period is ``geo={"poll_interval_s": Δp}`` (the paper's 1 s
    by default; every decision of a period sees the snapshot taken at its start, so a larger Δp
    means staler state, which the ``age`` feature and the residuals expose).

    The envs run the grid clock in ``geo.ci_mode = "hourly"`` unless ``geo`` sets ``"fixed"``.
    """

    preset: str = "small"
    model: str = "Llama-3.1-8B"
    load: str = "moderate"
    geo: dict[str, Any] = field(default_factory=dict)
    w_carbon: float = 1.0
    w_slo: float = 1.0
    max_steps: int | None = None
    reward: str = "dense"
    action_mode: str = "direct"
    reference: str = "milp"
    decide_at: str = "arrival"
    ci_time_scale: float = 1.0
    ci_forecast_h: int = 0
    ci_forecast_noise: float = 0.0
    observe_residuals: bool = False
    split: str | None = "train"

    def __post_init__(self) -> None:
        check_field_types(self)
        check_split("geo", self.split)
        if not isinstance(self.observe_residuals, bool):
            raise ConfigError(f"observe_residuals = {self.observe_residuals!r} is not allowed; allowed: True, False")
        check_choice("action_mode", self.action_mode, ACTION_MODES, verb="is not allowed")
        from servegym.envs.geo.reference import make_reference

        ref = make_reference(self.reference)
        check_choice("decide_at", self.decide_at, DECIDE_AT, verb="is not allowed")
        if self.decide_at == "window" and (self.action_mode != "residual"
                                           or getattr(ref, "decision_mode", "request") != "window"):
            raise ConfigError(f"decide_at = 'window' needs action_mode = 'residual' and a window reference (got "
                              f"{self.action_mode!r}, {self.reference!r}); allowed: 'arrival', or 'window' with "
                              "reference 'milp', 'ilp' or 'iter-ilp'")
        check_choice("reward", self.reward, REWARD_MODES, verb="is not allowed")
        check_choice("preset", self.preset, PRESETS, verb="is not allowed")
        object.__setattr__(self, "model", PAPER_MODELS.resolve(self.model))  # canonical spelling
        check_choice("load", self.load, LOADS, verb="is not allowed")
        if not isinstance(self.geo, dict):
            raise ConfigError(f"geo = {self.geo!r} is not allowed; allowed: a dict of GeoConfig fields")
        for name in ("decision_mode", "seed"):
            if name in self.geo:
                raise ConfigError(f"geo.{name} is set by the environment (decision_mode: the env id; seed: "
                                  f"reset(seed=...)); allowed: the other GeoConfig fields")
        check_choice("geo.osl_mode", self.geo.get("osl_mode", "mean"), ("mean", "oracle", "predicted"),
                     verb="is not allowed in the envs")
        for name, lo, hi in (("ci_time_scale", 1.0, 3600.0), ("ci_forecast_noise", 0.0, 2.0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ConfigError(f"{name} = {v!r} is not allowed; allowed: a number in [{lo:g}, {hi:g}]")
            check_range(name, float(v), lo, hi)
        if isinstance(self.ci_forecast_h, bool) or not isinstance(self.ci_forecast_h, int) \
                or not 0 <= self.ci_forecast_h <= 24:
            raise ConfigError(f"ci_forecast_h = {self.ci_forecast_h!r} is out of range; allowed: an integer in [0, 24]")
        for name in ("w_carbon", "w_slo"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ConfigError(f"{name} = {v!r} is not allowed; allowed: a number in [0, inf)")
            check_range(name, float(v), 0.0, None)
            if math.isinf(v):
                raise ConfigError(f"{name} = {v!r} is out of range; allowed: [0, inf)")
        # steps are routing decisions: 10^9 is more than a week of the paper's highest load
        if self.max_steps is not None and (isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int)
                                           or not 1 <= self.max_steps <= MAX_STEPS):
            raise ConfigError(f"max_steps = {self.max_steps!r} is out of range; allowed: None or an integer in "
                              f"[1, {MAX_STEPS:,}]")
        for split, key in (("shift-osl", "osl_mode"), ("shift-ci-forecast", "ci_signal"), ("shift-ci-forecast", "ci_mode")):
            if self.split == split and key in self.geo:
                raise ConfigError(f"geo.{key} = {self.geo[key]!r} is set by split = {split!r}; allowed: no geo.{key}, "
                                  "or another split")
        if self.split is not None and self.geo.get("ci_start") is not None:
            raise ConfigError(f"geo.ci_start = {self.geo['ci_start']!r} is drawn by split = {self.split!r}; "
                              "allowed: no geo.ci_start, or split = None for a fixed start")
        self.geo_config("request")  # validates the GeoConfig overrides (and the split's shift) now, not at reset

    def geo_config(self, decision_mode: str) -> GeoConfig:
        """The simulator scenario for ``decision_mode`` (``"request"`` or ``"window"``), with the split's
        shift applied (topology, rate, poll period); the per-episode start hour is drawn at reset."""
        geo = {"ci_mode": "hourly", **self.geo}
        cfg = preset(self.preset, model=self.model, load=self.load, decision_mode=decision_mode, **geo)
        if self.split == "shift-load":
            cfg = cfg.replace(rate_rps=cfg.rate_rps * SHIFT_LOAD_FACTOR)
        elif self.split == "shift-stale":
            cfg = cfg.replace(poll_interval_s=SHIFT_STALE_POLL_S)
        elif self.split == "shift-osl":
            cfg = cfg.replace(osl_mode="predicted")
        elif self.split == "shift-ci-forecast":
            cfg = cfg.replace(ci_signal="day-ahead")
        elif self.split == "shift-topology":
            if cfg.topology not in SHIFT_TOPOLOGY:
                raise ConfigError(f"split = 'shift-topology' has no twin of topology {cfg.topology!r}; "
                                  f"allowed: a topology in {sorted(SHIFT_TOPOLOGY)} (presets small, mini)")
            cfg = cfg.replace(topology=SHIFT_TOPOLOGY[cfg.topology])
        return cfg

    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """The defaults as a plain dict (what ``config={...}`` updates)."""
        return asdict(cls())

    @classmethod
    def from_dict(cls, overrides: dict[str, Any] | None) -> GeoEnvConfig:
        """Defaults updated by ``overrides``; unknown keys raise :class:`ConfigError`."""
        overrides = known_overrides(overrides, cls)
        if "geo" in overrides and overrides["geo"] is not None and isinstance(overrides["geo"], dict):
            overrides["geo"] = dict(overrides["geo"])
        return cls(**overrides)


def resolve_config(config: GeoEnvConfig | dict[str, Any] | None, overrides: dict[str, Any]) -> GeoEnvConfig:
    """``config`` (a config, a dict of overrides or None) updated by keyword ``overrides``."""
    if isinstance(config, GeoEnvConfig):
        if not overrides:
            return config
        base = asdict(config)
    elif config is None or isinstance(config, dict):
        base = dict(config or {})
    else:
        raise ConfigError(f"config = {config!r} is not allowed; allowed: None, a dict or a GeoEnvConfig")
    base.update(overrides)
    return GeoEnvConfig.from_dict(base)


class EpisodeTracker:
    """Reward and running metrics of one episode, read from the simulator's public counters.

    Dense credit (module docstring): the driver records, for every request it applies, the
    estimated carbon and SLO risk it already paid (:meth:`record`); :meth:`update` then settles
    the requests that finished since the previous call against the measured cost. TTFTs of
    finished requests are gathered incrementally (``sim.finished_batches``) so that the running p99
    costs O(finished) once per poll interval, not per step.
    """

    def __init__(self, sim: GeoSimulation, cfg: GeoEnvConfig) -> None:
        self.sim = sim
        self.w_carbon = float(cfg.w_carbon)
        self.w_slo = float(cfg.w_slo)
        self.dense = cfg.reward == "dense"
        self.carbon_prev = sim.carbon_g
        self.viol_prev = sim.n_finished_violations
        n = max(sim.n_requests, 1)
        self._ttft = np.empty(n, dtype=np.float64)
        # Per request: what its decision already paid (w-weighted cost, > 0), settled at its finish.
        self._paid = np.zeros(n, dtype=np.float64)
        self._paid_open = 0.0  # paid by requests not settled yet
        self._pred = np.full((2, n), np.nan) if cfg.observe_residuals else None
        self._resid = np.zeros((2, sim.n_dcs))
        self.final_settled = False
        self._n_ttft = 0
        self._n_batches = 0
        self._p99 = 0.0
        self.info: dict[str, Any] = {}
        self.steps = 0
        self.update()

    def dense_costs(self, carbon_g: NDArray[np.float64], feasible: NDArray[np.bool_]) -> NDArray[np.float64]:
        """The dense per-decision cost ``w_carbon * c + w_slo * (1 - feasible)`` (same shape)."""
        return self.w_carbon * carbon_g + self.w_slo * (~np.asarray(feasible, dtype=bool))

    def record(self, request_id: NDArray[np.int64], cost: NDArray[np.float64],
               ttft_s: NDArray[np.float64] | None = None, tpot_s: NDArray[np.float64] | None = None) -> None:
        """Requests just applied, the dense cost each one's decision paid (rewards of ``-cost``)
        and, when residuals are observed, the TTFT/TPOT (s) the estimator predicted at their DC."""
        if self.dense and request_id.size:
            self._paid[request_id] = cost
            self._paid_open += float(cost.sum())
        if self._pred is not None and ttft_s is not None and tpot_s is not None:
            self._pred[0, request_id] = ttft_s
            self._pred[1, request_id] = tpot_s

    def residual_features(self) -> NDArray[np.float64]:
        """(2 D,) :data:`RESIDUAL_FEATURES` (zeros before any request finished at a DC)."""
        return np.tanh(self._resid).ravel()

    def _update_residuals(self, fin: Any) -> None:
        sim = self.sim
        rid = np.asarray(fin.request_id, dtype=np.int64)
        dc = sim.placed_dc[rid]
        cfg = sim.config
        d = sim.n_dcs
        for k, (real, slo) in enumerate(((fin.ttft_s, cfg.ttft_slo_s), (fin.tpot_s, cfg.tpot_slo_s))):
            err = (np.asarray(real, dtype=np.float64) - self._pred[k, rid]) / slo
            ok = np.isfinite(err)  # a one-token request has no TPOT
            cnt = np.bincount(dc[ok], minlength=d)
            mean = np.bincount(dc[ok], weights=err[ok], minlength=d) / np.maximum(cnt, 1)
            self._resid[k] = np.where(cnt > 0, (1 - RESIDUAL_EMA) * self._resid[k] + RESIDUAL_EMA * mean,
                                      self._resid[k])

    def update(self) -> float:
        """Reward accrued since the previous call (the poll settlement in dense mode); refreshes :attr:`info`."""
        sim = self.sim
        carbon = sim.carbon_g
        viol = sim.n_finished_violations
        reward = -self.w_carbon * (carbon - self.carbon_prev) - self.w_slo * (viol - self.viol_prev)
        self.carbon_prev, self.viol_prev = carbon, viol
        new = sim.finished_batches(self._n_batches)
        if new:
            self._n_batches += len(new)
            for fin in new:
                k = len(fin.ttft_s)
                self._ttft[self._n_ttft:self._n_ttft + k] = fin.ttft_s
                self._n_ttft += k
                if self._pred is not None:
                    self._update_residuals(fin)
                if self.dense:
                    settled = float(self._paid[np.asarray(fin.request_id, dtype=np.int64)].sum())
                    reward += settled
                    self._paid_open -= settled
            self._p99 = float(np.percentile(self._ttft[:self._n_ttft], 99))
        fin_n = sim.n_finished
        unfinished = 0
        if sim.done:
            # Requests that never finished are misses (as episode_metrics counts them); in dense
            # mode their paid estimates are settled now.
            unfinished = sim.n_requests - fin_n
            if not self.final_settled:
                reward += -self.w_slo * unfinished + (self._paid_open if self.dense else 0.0)
                self._paid_open = 0.0
                self.final_settled = True
        # 0.0 before any request finished (not NaN: infos must compare equal across identical runs)
        p99 = self._p99 if self._n_ttft else 0.0
        self.info = {
            "carbon_g": carbon,
            "finished": fin_n,
            "slo_violations": viol,
            "slo_violation_pct": 100.0 * viol / fin_n if fin_n else 0.0,
            "unfinished": unfinished,
            "slo_misses": viol + unfinished,
            "ttft_p99_s": p99,
            "sim_time_s": sim.now_s,
            "osl_mode": sim.config.osl_mode,
        }
        return float(reward)


def dc_static_features(sim: GeoSimulation, snap: Snapshot) -> NDArray[np.float64]:
    """The snapshot's per-DC features that do not depend on the request or the time:
    (7, D) rows ``batch_frac .. pue`` of :data:`DC_FEATURES`."""
    prof = sim.profile
    s = float(prof.max_num_seqs)
    out = np.empty((7, sim.n_dcs), dtype=np.float64)
    out[0] = np.minimum(snap.batch / s, 1.0)
    out[1] = squash(snap.queued_tokens / float(prof.max_num_batched_tokens))
    out[2] = np.clip(snap.kv_frac, 0.0, 1.0)
    out[3] = np.clip(snap.prefill_duty, 0.0, 1.0)
    out[4] = np.clip(sim.estimator.headroom_requests(snap) / (snap.engines_per_dc * s), 0.0, 1.0)
    out[5] = np.minimum(snap.ci_g_per_kwh / CI_SCALE_G_PER_KWH, 1.0)
    out[6] = np.clip((snap.pue - 1.0) / (PUE_MAX - 1.0), 0.0, 1.0)
    return out


class GridClock:
    """The run's grid clock: the CI every DC sees, the UTC hour, and the CI forecast of the observations.

    The CI clock starts at ``ci_start`` (or the topology's base hour) and runs ``ci_time_scale``
    times faster than simulated time: the CI of DC d at simulated time ``t`` is the real hourly
    series (:meth:`servegym.envs.grid.Topology.ci_matrix`) at hour
    ``floor(start) + floor((s0 + t · ci_time_scale) / 3600 s)``, ``s0`` the seconds of the start hour
    already gone at ``ci_start``, so with the default scale 1 an episode whose simulated time crosses an
    hour follows the series exactly, and with e.g. 120 a 30 s episode spans an hour of grid (a compressed
    day: the fleet's seconds, the grid's hours). The splits start such a compressed clock inside its hour
    (``GeoEnvBase.episode_scenario``), so the boundary falls within the serving window: with whole-hour
    starts it came at ``t = 3600 / 120 = 30 s``, the end of the mini preset's arrivals, and 120 changed
    nothing. Carbon is exact when every hour boundary falls on a poll time (CI is charged per poll interval
    at its start): the splits draw the first boundary at a poll time, and later ones follow when
    ``3600 / ci_time_scale`` is a multiple of the poll period. ``geo.ci_mode = "fixed"`` holds the start hour. Past the
    series' last hour the CI stays at its last value.

    Forecast (``ci_forecast_h = H > 0``): the CI of the next ``H`` clock hours at every DC, with
    multiplicative log-normal noise of ``ci_forecast_noise = σ`` per square-root hour of lead
    (``CI · exp(σ √k z − σ² k / 2)``, unbiased, ``z`` standard normal, drawn once per run, clock
    hour, lead and DC from the run's seed); ``σ = 0`` gives the real series (a perfect forecast).
    """

    def __init__(self, geo: GeoConfig, scale: float = 1.0, forecast_h: int = 0, forecast_noise: float = 0.0,
                 seed: int = 0) -> None:
        import pandas as pd
        from servegym.envs.grid import get_topology

        topo = get_topology(geo.topology)
        start = pd.Timestamp(geo.ci_start) if geo.ci_start is not None else pd.Timestamp(topo.base_hour)
        if start.tzinfo is None:
            start = start.tz_localize("UTC")
        self.start_h = float(start.hour + start.minute / 60.0 + start.second / 3600.0)
        # seconds of the start hour already gone: the clock's first hour boundary comes that much earlier
        self.offset_s = float(start.minute * 60 + start.second + start.microsecond / 1e6)
        self.duration_s = float(geo.duration_s)
        self.scale = float(scale)
        self.fixed = geo.ci_mode == "fixed"
        self._mat = topo.ci_matrix()[1]
        self._pos = topo._hour_pos(start.floor("h"), "ci_start")
        self._last = self._mat.shape[0] - 1
        self.forecast_h = int(forecast_h)
        self.forecast_noise = float(forecast_noise)
        self.seed = int(seed)
        self._fc_cache: dict[int, NDArray[np.float64]] = {}
        self._ci_snap: Snapshot | None = None
        self._ci_stats = (0.0, 0.0)

    def hour_index(self, t_s: NDArray[np.float64] | float) -> NDArray[np.int64]:
        """Clock hours since the start hour at simulated times ``t_s`` (0 in ``fixed`` mode)."""
        t = np.asarray(t_s, dtype=np.float64)
        if self.fixed:
            return np.zeros(t.shape, dtype=np.int64)
        return np.floor((self.offset_s + t * self.scale) / 3600.0).astype(np.int64)

    def _row(self, h: int) -> NDArray[np.float64]:
        return self._mat[min(self._pos + h, self._last)]

    def ci_at(self, t_s: float) -> NDArray[np.float64]:
        """(D,) CI (gCO2/kWh) in force at simulated time ``t_s`` (the simulator's ``ci_at``)."""
        return self._row(int(self.hour_index(t_s)))

    def day_ahead_at(self, t_s: float) -> NDArray[np.float64]:
        """(D,) persistence day-ahead forecast of :meth:`ci_at`: the series 24 clock hours earlier (what the
        snapshots report under ``GeoConfig.ci_signal = "day-ahead"``)."""
        return self._mat[max(self._pos + int(self.hour_index(t_s)) - 24, 0)] if not self.fixed else self.ci_at(t_s)

    def forecast_at_hour(self, h: int) -> NDArray[np.float64]:
        """(H·D,) forecast features at clock hour ``h``: lead-major, CI / 1000 g/kWh clipped to 1."""
        out = self._fc_cache.get(h)
        if out is None:
            hh = self.forecast_h
            lead = np.arange(1, hh + 1)
            ci = np.stack([self._row(h if self.fixed else h + k) for k in lead])  # (H, D)
            if self.forecast_noise > 0:
                z = np.random.default_rng([self.seed, 7919, h]).standard_normal(ci.shape)
                var = self.forecast_noise ** 2 * lead[:, None]
                ci = ci * np.exp(np.sqrt(var) * z - 0.5 * var)
            out = np.minimum(ci / CI_SCALE_G_PER_KWH, 1.0).ravel()
            self._fc_cache[h] = out
        return out

    def forecast(self, t_s: NDArray[np.float64] | float) -> NDArray[np.float64]:
        """(..., H·D) forecast features at simulated times ``t_s``."""
        hours = self.hour_index(t_s)
        flat = hours.reshape(-1)
        out = np.empty((flat.size, self.forecast_h * self._mat.shape[1]))
        for h in np.unique(flat):
            out[flat == h] = self.forecast_at_hour(int(h))
        return out.reshape(*hours.shape, -1)

    def features(self, t_s: NDArray[np.float64] | float, snap: Snapshot) -> NDArray[np.float64]:
        """(..., 5) :data:`TIME_FEATURES` at times ``t_s``."""
        t = np.asarray(t_s, dtype=np.float64)
        ang = 2.0 * np.pi * ((self.start_h + t * (self.scale / 3600.0)) % 24.0) / 24.0
        if self._ci_snap is not snap:  # CI statistics change only with the snapshot
            ci = snap.ci_g_per_kwh
            mean = float(ci.mean())
            self._ci_stats = (mean, float(ci.std() / mean) if mean > 0 else 0.0)
            self._ci_snap = snap
        mean, cv = self._ci_stats
        out = np.empty((*t.shape, 5), dtype=np.float64)
        out[..., 0] = np.clip(t / self.duration_s, 0.0, 1.0)
        out[..., 1] = np.sin(ang)
        out[..., 2] = np.cos(ang)
        out[..., 3] = min(mean / CI_SCALE_G_PER_KWH, 1.0)
        out[..., 4] = min(cv, 1.0)
        return out


def forecast_names(n_dcs: int, hours: int, residuals: bool = False) -> list[str]:
    """Names of the forecast block (lead-major): ``ci_fc<k>h[d]``, k = 1..hours, then the residual
    block (:data:`RESIDUAL_FEATURES`) when ``residuals``."""
    names = [f"ci_fc{k}h[{d}]" for k in range(1, hours + 1) for d in range(n_dcs)]
    return names + ([f"{f}[{d}]" for f in RESIDUAL_FEATURES for d in range(n_dcs)] if residuals else [])


def reference_carbon_g(sim: GeoSimulation) -> float:
    """Carbon scale of the observations (gCO2): the estimated engine energy of a mean-length
    request on an idle engine, at PUE 1 and 1000 g/kWh."""
    snap = sim.provisioner.snapshot
    est = sim.estimator.estimate(snap, np.array([sim.isl_mean]), np.array([sim.osl_mean]), np.array([0]))
    return max(float(est.energy_j.mean()) * CI_SCALE_G_PER_KWH / 3.6e6, 1e-12)


def render_ansi(t_s: float, snap: Snapshot, info: dict[str, Any], extra: str = "") -> str:
    """One line of state: time, per-DC batch/queue/CI, running carbon and SLO figures."""
    dcs = " ".join(
        f"[{d}:B{snap.batch[d]:.0f} Q{snap.queued_tokens[d]:.0f} CI{snap.ci_g_per_kwh[d]:.0f}]"
        for d in range(snap.n_dcs)
    )
    return (f"t={t_s:8.3f}s {extra} {dcs} carbon={info.get('carbon_g', 0.0):.2f}g "
            f"viol={info.get('slo_violation_pct', 0.0):.2f}% fin={info.get('finished', 0)}")


def render_rgb(snap: Snapshot, max_num_seqs: int, highlight: NDArray[np.bool_] | None = None) -> NDArray[np.uint8]:
    """A 96 x (32 D) RGB bar chart: per DC, batch load (blue) and CI (grey, 1000 g/kWh = full);
    a green strip under the DCs in ``highlight`` (the action mask)."""
    h, bw = 96, 32
    d = snap.n_dcs
    img = np.full((h, bw * d, 3), 255, dtype=np.uint8)
    load = np.clip(snap.batch / float(max_num_seqs), 0.0, 1.0)
    ci = np.clip(snap.ci_g_per_kwh / CI_SCALE_G_PER_KWH, 0.0, 1.0)
    top = h - 8
    rows = np.arange(top)[:, None]
    for i, (frac, color, x0) in enumerate(((load, (40, 90, 200), 3), (ci, (110, 110, 110), 17))):
        del i
        filled = rows >= top - np.round(frac * top)[None, :]  # (top, D)
        for k in range(d):
            img[:top, k * bw + x0:k * bw + x0 + 12][filled[:, k]] = color
    if highlight is not None:
        for k in np.flatnonzero(highlight):
            img[top + 2:h - 1, k * bw + 2:(k + 1) * bw - 2] = (40, 170, 60)
    return img


def safe_ratio_squash(x: NDArray[np.float64], scale: float) -> NDArray[np.float64]:
    """``squash(x / scale)`` with non-finite or huge ratios mapped to (just under) 1."""
    r = np.fmin(np.asarray(x, dtype=np.float64) / scale, 1e9)  # fmin: NaN -> 1e9, inf -> 1e9
    return r / (1.0 + r)


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
        scenario = {"split": split, "seed": s, "ci_start": ci_start, "topology": cfg.topology,
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
        osl = np.maximum(np.asarray(sim._osl_est, dtype=np.float64), 1.0)
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

    def _finish_step(self, run_over: bool) -> tuple[bool, dict[str, Any]]:
        """(truncated, info) after a step; adds the run's full summary when it is complete."""
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

    def _end_observation(self) -> NDArray[np.float32]:
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
