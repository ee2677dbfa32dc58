"""``servegym/NPUAutoscale-v0``: autoscale heterogeneous NPU vPod groups of one LLM over a day (npu paper §3-5).

One step is one NeuScale epoch (``epoch_s`` = 300 s); an episode is ``hours`` x 12 epochs (default 24 h =
288 epochs) and ends by truncation only. The dynamics are :class:`~servegym.envs.npu.cluster.NPUCluster`
(Table 3 overheads, roofline step times and energies, routing by predicted length, quota per chip
version); this module only maps actions to :class:`~servegym.envs.npu.cluster.ScalingDecision` and
simulator state to a flat observation. The env never holds a copy of the dynamics.

**Groups (fixed per scenario).** The simulator has one potential group per (phase, 48 DSE length
buckets); an action over all 96 would be intractable, so the env uses ``groups_per_phase`` (default 4)
groups per phase, chosen once from the scenario's workload: the length buckets at the quantiles
i / P (i = 1..P) of the requests' bucket (prefill: input length; decode: input + output length), the
last one the bucket of the longest request so every request has a group that fits it. Duplicates
collapse, so a trace with few distinct lengths gets fewer groups; ``env.groups`` lists them as
``(phase, bucket_edge)``, prefill first, ascending. A group with a 0 target leaves the length map and
its requests go to the next larger active group (the simulator's routing).

**Action** ``MultiDiscrete([n_levels, n_options] * n_groups)``: per group (in ``env.groups`` order) a
vPod count index into ``count_levels`` (default 0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64) and a
configuration index into ``env.options[g]`` = the DSE's SLO-meeting Pareto candidates of the group's
bucket (:meth:`BestFitTable.candidates`, best fit first, up to ``n_candidates``) followed by each chip
version's best fit not already listed (the fail-overs of §3.4). ``n_options`` is the longest list; the
rest is padding. Targets are declarative: the group's vPods of other configurations are deleted (15 s)
and missing ones created (73-108 s + download + start + load); creations that do not fit the quota wait
(group order = priority).

**Masks** (:meth:`NPUAutoscaleEnv.action_masks`, sb3-contrib's MultiDiscrete layout: the per-dimension
masks concatenated): padding options; options whose chip version's quota cannot hold even one vPod; and
count 0 for the largest group of each phase (every request must have a group whose configuration fits
its length). Never all-false per dimension (a quota that leaves a group no option is a ConfigError).
A masked value that is still sent is adjusted (count 0 -> the smallest positive level; a masked option
-> option 0, the best fit) and ``info["action_adjusted"]`` says so, unless ``strict_masks`` is set, in
which case it raises :class:`~servegym.errors.ActionError`. Anything outside the space (shape,
non-integer, out of range) always raises ActionError; the state is unchanged either way.

**Observation** ``Box(-1, 10, (n_obs,), float32)``, values clipped; :attr:`NPUAutoscaleEnv.obs_fields`
names every entry. Per phase (prefill, then decode) and group: recent (last epoch) and peak (10-s bins
over the 30-min window) request rate of the group's length range / the trace's mean rate (req/s); the
length histogram (share of the phase's last-epoch requests in each group's range); log1p(mean tokens
per request) / log1p(2^20); alive and ready vPods / max count level; alive vPods per chip version / max
count level; the targeted option index / (n_options - 1); utilization (0-1: prefill, the simulator's busy share over
the last 60 s; decode, active jobs / batch slots of ready vPods now); log1p(queued jobs) / 10
now and at the peak of the epoch. Then: recent prefill and decode SLO satisfaction, last epoch's SLO
satisfaction and miss share, quota left per version / quota (1 when unlimited), sin and cos of the hour
of day, and the elapsed share of the episode.

**Reward** = -objective_weight x objective / reference - slo_penalty x misses / max(arrivals, 1), with
objective the epoch's energy (J) or cost (USD) per ``objective``; the reference is the Ideal oracle's
(§5.1: every token on its best fit at a full batch) mean energy or cost per epoch of the scenario, so an
epoch as efficient as the oracle's average costs about 1. Misses = requests finished in the epoch that
missed TTFT or TPOT + the change in open requests already past their SLO (so starving the service is
penalized when it happens, and the episode's total is the simulator's summary count; clipped at 0 per
epoch). Pool energy includes idle and booting vPods, so a realistic deployment costs several oracle
epochs (about 10 for Llama-3-70B on Azure with the heuristic below); ``slo_penalty`` (50) is set so that
missing every request costs more than serving it well, and 10 % misses cost about half a served epoch.

**Speed** (``benchmarks/npu_env_speed.py``): a 24-h episode of the default scenario takes 12-14 s wall
on an unloaded share of the 2-core dev machine (random valid actions, the heuristic, or NeuScale's
projected decisions; any BLAS thread count); the catalog and workload are built once per process
(~5-11 s, cached).

**Baselines on the agent's episode.** After ``reset(seed=s)``, :attr:`NPUAutoscaleEnv.simulation_seed` is
the :class:`~servegym.envs.npu.cluster.NPUCluster` seed of the episode (derived from ``s``; the workload
too when ``workload_seed`` is None). :meth:`NPUAutoscaleEnv.run_baseline` (policy in ``BASELINES``:
``base``, ``neuscale``, ``ideal``) runs a :mod:`servegym.baselines.npu` policy on exactly that episode
and returns per-epoch infos with the step's keys and formulas, so ``servegym evaluate`` and the
TensorBoard callback compare an agent with the paper's policies on the same work.

**Splits** (``split`` config key, ``gym.make(id, split="test")``; :mod:`servegym.splits`). ``reset(seed=s)``
draws the scenario from the split with a generator seeded by (split, s) (:func:`draw_scenario`): the model
(uniform over ``split_models``, all four by default), the Azure 2023 trace (code or conv: timestamps and
real lengths), the start hour (0-23), the rate (Table 4's mean x U[0.7, 1.3]), the workload seed and the
simulator seed. The 10-s arrival profile is tiled from the split's own segment of the trace hour, so
train, validation and test never share arrival patterns:

- ``train``: model (one of the four), Azure trace (code or conv), start hour, rate x U[0.7, 1.3] of
  Table 4; the 10-s arrival profile from the first 60 % of the trace hour
- ``validation``: as train, from 60-80 % of the trace hour
- ``test``: as train, from 80-100 % of the trace hour
- ``shift-lveval``: test segment timestamps with the held-out LVEval lengths (Table 4 rate x the scale)
- ``shift-openthoughts``: test segment timestamps with the held-out OpenThoughts lengths (Table 4 rate x
  the scale)

With a named split the spaces are the same for every model, episode and split: the groups are fixed
(:func:`split_groups`: the length quantiles of the pooled train traces, plus a top group per phase that
fits the longest request of every split's trace, LVEval's 100K-token prompts included) and the option
lists are padded to ``n_candidates + len(versions)`` (padding masked). ``model``, ``trace``,
``rate_rpm``, ``start_hour`` and ``workload_seed`` are then drawn, not set (setting them is a ConfigError;
``split_models`` pins the model pool). ``split=None`` runs the configured scenario as is. The draw is
``env.scenario`` and ``info["scenario"]`` at reset; :meth:`NPUAutoscaleEnv.run_baseline` replays it.

**Info**: ``energy_j``, ``cost_usd``, ``tokens`` (prefill input + decode output tokens served),
``slo_violation_pct`` (% of the requests finished in the epoch that missed TTFT or TPOT, 0 when none),
``slo_misses``, ``power_w`` (mean pool power over the epoch, W),
``arrived``, ``finished``, ``vpods`` (alive at the epoch end), ``vpods_per_version``, ``chips``,
``tokens_per_j``, ``tokens_per_usd``, ``time_s``, ``action_adjusted``, ``reward_objective``,
``reward_slo``; reset gives the state keys with zero flows.

Configuration: :class:`NPUEnvConfig` (frozen dataclass); ``NPUAutoscaleEnv(config=dict)`` takes
highway-env style overrides of :meth:`NPUAutoscaleEnv.default_config` (unknown keys raise
ConfigError). ``workload_seed`` fixes the trace (built once and cached per process); ``None`` draws it
from the reset seed (a fresh trace each episode, ~1 s to build for a day of Azure). ``reset(seed=...)``
seeds the simulator (routing, creation times): same seed, same episode.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray
from servegym.envs.npu.catalog import MODELS, VERSIONS
from servegym.envs.npu.cluster import (
    NB,
    ClusterConfig,
    ConfigCatalog,
    EpochMetrics,
    NPUCluster,
    Observation,
    ScalingDecision,
)
from servegym.envs.npu.dse import OBJECTIVES
from servegym.envs.npu.roofline import PHASES
from servegym.envs.npu.workloads import (
    BURSTY_BASE_RPM,
    TABLE4_RATE_RPM,
    WORKLOADS,
    NPUWorkload,
    make_workload,
)

from servegym.errors import (
    MAX_EXPECTED_REQUESTS,
    ActionError,
    ConfigError,
    check_field_types,
    check_range,
    check_request_count,
    known_overrides,
    resolve_config,
)
from servegym.splits import TRACE_SEGMENTS, check_split, scenario_rng, segment

SPLIT_MODELS: tuple[str, ...] = tuple(MODELS)
"""Models the named splits draw from by default (all four of the catalog)."""
SPLIT_AZURE_TRACES: tuple[str, ...] = ("azure-code", "azure-conv")
"""Azure 2023 traces the base splits draw (timestamps and real lengths)."""
SPLIT_SHIFT_TRACE: dict[str, str] = {"shift-lveval": "lveval", "shift-openthoughts": "openthoughts"}
"""Held-out length sets of the shifts (Table 4 presets on the test segment's azure-code timestamps)."""
SPLIT_RATE_SCALE: tuple[float, float] = (0.7, 1.3)
"""Multipliers of Table 4's mean rate the named splits draw from (uniform)."""
SPLIT_FIELDS: tuple[str, ...] = ("model", "trace", "rate_rpm", "start_hour", "workload_seed")
"""Config fields a named split draws itself (setting them with a split is a ConfigError)."""


def draw_scenario(split: str, seed: int, models: tuple[str, ...] = SPLIT_MODELS) -> dict[str, Any]:
    """The scenario of one episode of ``split`` for reset seed ``seed`` (module docstring, "Splits"):
    ``model``, ``trace`` (workload name), ``azure_trace`` (timestamps, and lengths for ``azure``),
    ``segment`` of the trace hour, ``start_hour``, ``rate_scale``, ``rate_rpm``, ``workload_seed`` and
    ``simulation_seed``."""
    rng = scenario_rng(split, seed)
    model = models[int(rng.integers(len(models)))]
    azure_trace = SPLIT_AZURE_TRACES[int(rng.integers(len(SPLIT_AZURE_TRACES)))]
    start_hour = int(rng.integers(24))
    scale = float(rng.uniform(*SPLIT_RATE_SCALE))
    trace = SPLIT_SHIFT_TRACE.get(split, "azure")
    if trace != "azure":
        azure_trace = "azure-code"  # the shifts change the lengths only
    return {"split": split, "seed": int(seed), "model": model, "trace": trace, "azure_trace": azure_trace,
            "segment": segment(split), "start_hour": float(start_hour), "rate_scale": scale,
            "rate_rpm": round(TABLE4_RATE_RPM[trace] * scale, 6), "workload_seed": int(rng.integers(2**31 - 1)),
            "simulation_seed": int(rng.integers(2**31 - 1))}

DEFAULT_COUNT_LEVELS: tuple[int, ...] = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
"""vPod count targets an action can pick per group (roughly geometric, so one dimension spans 0-64)."""
WARM_WINDOW_S = 600.0
"""The initial deployment is sized on the first 10 minutes of arrivals (as the baselines' warm start)."""
LOG_MAX_TOKENS = math.log1p(float(1 << 20))

BASELINES: tuple[str, ...] = ("base", "neuscale", "ideal")
"""Policies :meth:`NPUAutoscaleEnv.run_baseline` runs on the env's episode (servegym.baselines.npu)."""

_CATALOGS: dict[tuple, ConfigCatalog] = {}
_WORKLOADS: dict[tuple, NPUWorkload] = {}
_CACHE_MAX = 4


@dataclass(frozen=True)
class NPUEnvConfig:
    """Configuration of :class:`NPUAutoscaleEnv` (units in names; see the module docstring).

    ``quota_chips``: chips per version (absent/None = unlimited); ``versions``: chip versions the DSE
    may use; ``phase_versions``: chip versions each phase may use, e.g. ``{"prefill": ["NPU-D"],
    "decode": ["NPU-C"]}`` (None = all of ``versions``; see :class:`ClusterConfig`); ``n_candidates``: Pareto candidates per group (the action's configuration choices besides
    the per-version fail-overs).
    """

    model: str = "Llama-3-70B"
    trace: str = "azure"  # one of servegym.envs.npu.workloads.WORKLOADS
    hours: float = 24.0  # episode length; a whole number of epochs
    rate_rpm: float | None = None  # None: Table 4's mean rate for the trace
    start_hour: float = 0.0  # hour of day (UTC) of the first epoch
    workload_seed: int | None = 0  # None: drawn from the reset seed
    objective: str = "energy"  # "energy" (J) or "cost" (USD): DSE best fits and reward
    slo_factor: float = 5.0  # §2.4: SLO = 5x the single-request latency on NPU-C/D
    osl_accuracy: float = 0.6  # output-length prediction accuracy of the router (§5.1)
    quota_chips: Mapping[str, int] | None = None
    versions: tuple[str, ...] = VERSIONS
    phase_versions: Mapping[str, tuple[str, ...]] | None = None
    n_candidates: int = 4
    groups_per_phase: int = 4
    count_levels: tuple[int, ...] = DEFAULT_COUNT_LEVELS
    objective_weight: float = 1.0  # reward per unit of normalized energy/cost (1 = oracle's mean epoch)
    slo_penalty: float = 50.0  # reward per unit of SLO misses per arrived request (see the module docstring)
    warm_start: bool = True  # provision groups for the first 10 min of arrivals at t = 0 (else empty)
    strict_masks: bool = False  # True: a masked action raises ActionError instead of being adjusted
    # Ceiling on the expected requests of an episode (rate x hours; the workload is built up front):
    # set it higher explicitly for a larger run.
    max_expected_requests: int = MAX_EXPECTED_REQUESTS
    split: str | None = "train"  # benchmark split reset() draws the scenario from (module docstring); None: fixed
    split_models: tuple[str, ...] = SPLIT_MODELS  # models a named split draws from (uniformly)

    def __post_init__(self) -> None:
        check_field_types(self)
        object.__setattr__(self, "model", MODELS.resolve(self.model))  # canonical spelling (servegym.names)
        check_split("npu", self.split)
        if isinstance(self.split_models, str) or not self.split_models:
            raise ConfigError(f"split_models = {self.split_models!r}; allowed: a non-empty sequence of {list(MODELS)}")
        try:  # canonical spellings
            object.__setattr__(self, "split_models", tuple(MODELS.resolve(m) for m in self.split_models))
        except ConfigError as exc:
            raise ConfigError(f"split_models = {self.split_models!r}: {exc}") from None
        if self.split is not None:
            default = NPUEnvConfig.__dataclass_fields__
            for name in SPLIT_FIELDS:
                if getattr(self, name) != default[name].default:
                    raise ConfigError(f"{name} = {getattr(self, name)!r} is drawn by split = {self.split!r}; "
                                      "allowed: the default, or split = None for a fixed scenario"
                                      + (" (or pin the model with split_models)" if name == "model" else ""))
        if self.trace not in WORKLOADS:
            raise ConfigError(f"trace = {self.trace!r} is unknown; allowed: {', '.join(WORKLOADS)}")
        if self.objective not in OBJECTIVES:
            raise ConfigError(f"objective = {self.objective!r} is unknown; allowed: {', '.join(OBJECTIVES)}")
        check_range("hours", self.hours, 5.0 / 60.0, 24.0 * 7)
        if abs(self.hours * 12.0 - round(self.hours * 12.0)) > 1e-9:
            raise ConfigError(f"hours = {self.hours!r} must be a whole number of 5-min epochs (a multiple of 1/12)")
        if self.rate_rpm is not None:
            check_range("rate_rpm", self.rate_rpm, 0.0, None, low_inclusive=False)
        check_range("start_hour", self.start_hour, 0.0, 24.0)
        check_range("max_expected_requests", self.max_expected_requests, 1, None)
        rate = self.rate_rpm if self.rate_rpm is not None else TABLE4_RATE_RPM.get(self.trace, BURSTY_BASE_RPM)
        check_request_count(rate * 60.0 * self.hours, self.max_expected_requests,
                            f"rate_rpm = {rate:g} x hours = {self.hours:g}")
        if self.workload_seed is not None and (isinstance(self.workload_seed, bool)
                                               or int(self.workload_seed) != self.workload_seed
                                               or self.workload_seed < 0):
            raise ConfigError(f"workload_seed = {self.workload_seed!r}; allowed: None or an integer >= 0")
        for name in ("n_candidates", "groups_per_phase"):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v:
                raise ConfigError(f"{name} = {v!r}; allowed: an integer")
        check_range("groups_per_phase", self.groups_per_phase, 1, 16)
        lv = self.count_levels
        if (not lv or any(isinstance(x, bool) or int(x) != x for x in lv) or list(lv) != sorted(set(lv))
                or lv[0] < 0 or lv[-1] > 4096 or max(lv) < 1):
            raise ConfigError(f"count_levels = {lv!r}; allowed: strictly increasing integers in [0, 4096] "
                              "with at least one positive level")
        check_range("objective_weight", self.objective_weight, 0.0, None)
        check_range("slo_penalty", self.slo_penalty, 0.0, None)
        self.cluster_config()  # validates model, slo_factor, osl_accuracy, quota, versions, phase_versions,
        # n_candidates

    def cluster_config(self, model: str | None = None) -> ClusterConfig:
        """The simulator settings of this env (5-min epochs, 60-s checks, 5-s sub-steps) for ``model``
        (default: the ``model`` field)."""
        return ClusterConfig(model=self.model if model is None else model, objective=self.objective, slo_factor=self.slo_factor,
                             osl_accuracy=self.osl_accuracy,
                             quota_chips=None if self.quota_chips is None else dict(self.quota_chips),
                             versions=tuple(self.versions), n_candidates=int(self.n_candidates),
                             phase_versions=self.phase_versions)

    @property
    def horizon_epochs(self) -> int:
        return round(self.hours * 12.0)

    @classmethod
    def from_dict(cls, overrides: Mapping[str, Any] | None) -> NPUEnvConfig:
        """Defaults updated by ``overrides`` (unknown keys raise :class:`ConfigError`)."""
        d = known_overrides(overrides, cls)
        for k in ("versions", "count_levels", "split_models"):
            if k in d and not isinstance(d[k], str):
                try:
                    d[k] = tuple(d[k])
                except TypeError as exc:
                    raise ConfigError(f"{k} = {d[k]!r}; allowed: a sequence") from exc
        if d.get("quota_chips") is not None and not isinstance(d["quota_chips"], Mapping):
            raise ConfigError(f"quota_chips = {d['quota_chips']!r}; allowed: None or a mapping version -> chips")
        pv = d.get("phase_versions")
        if pv is not None:
            if not isinstance(pv, Mapping):
                raise ConfigError(f"phase_versions = {pv!r}; allowed: None or a mapping phase -> chip versions")
            # lists (JSON) become tuples; a bare string stays one so ClusterConfig rejects it by name
            try:
                d["phase_versions"] = {k: v if isinstance(v, str) else tuple(v) for k, v in pv.items()}
            except TypeError as exc:
                raise ConfigError(f"phase_versions = {pv!r}; allowed: a mapping phase -> a sequence of "
                                  "chip versions") from exc
        return cls(**d)


def _catalog(cc: ClusterConfig) -> ConfigCatalog:
    key = ConfigCatalog.key_of(cc)
    if key not in _CATALOGS:
        if len(_CATALOGS) >= _CACHE_MAX:
            _CATALOGS.pop(next(iter(_CATALOGS)))
        _CATALOGS[key] = ConfigCatalog(cc)
    return _CATALOGS[key]


def _workload(cfg: NPUEnvConfig, seed: int) -> NPUWorkload:
    key = (cfg.trace, float(cfg.hours), int(seed), cfg.rate_rpm, float(cfg.start_hour))
    if key not in _WORKLOADS:
        if len(_WORKLOADS) >= _CACHE_MAX:
            _WORKLOADS.pop(next(iter(_WORKLOADS)))
        _WORKLOADS[key] = make_workload(cfg.trace, hours=cfg.hours, seed=int(seed), rate_rpm=cfg.rate_rpm,
                                        start_hour=cfg.start_hour)
    return _WORKLOADS[key]


def _split_workload(sc: dict[str, Any], hours: float) -> NPUWorkload:
    key = ("split", sc["trace"], sc["azure_trace"], tuple(sc["segment"]), float(hours), sc["workload_seed"],
           sc["rate_rpm"], sc["start_hour"])
    if key not in _WORKLOADS:
        if len(_WORKLOADS) >= _CACHE_MAX:
            _WORKLOADS.pop(next(iter(_WORKLOADS)))
        _WORKLOADS[key] = make_workload(sc["trace"], hours=hours, seed=sc["workload_seed"], rate_rpm=sc["rate_rpm"],
                                        azure_trace=sc["azure_trace"], start_hour=sc["start_hour"],
                                        segment=tuple(sc["segment"]))
    return _WORKLOADS[key]


def split_groups(edges: NDArray[np.int64], per_phase: int, hours: float) -> list[list[int]]:
    """The groups every named split shares (so the spaces never change between episodes or splits): the
    length quantiles of the train traces (azure-code and azure-conv pooled) and, as the top group of each
    phase, the longest request of any split's trace (the shifts' long-context sets included)."""
    seg = TRACE_SEGMENTS["train"]
    pooled = [make_workload("azure", hours=hours, seed=0, azure_trace=a, segment=seg) for a in SPLIT_AZURE_TRACES]
    from servegym.envs.workload import Requests

    arr = np.concatenate([w.requests.arrival_s for w in pooled])
    order = np.argsort(arr, kind="stable")
    reqs = Requests(arr[order], np.concatenate([w.requests.input_tokens for w in pooled])[order],
                    np.concatenate([w.requests.output_tokens for w in pooled])[order])
    ref = NPUWorkload("split-reference", reqs, pooled[0].duration_s, 0, 0, "pooled train traces")
    picks = choose_groups(ref, edges, per_phase)
    longest = [make_workload(t, hours=hours, seed=0) for t in SPLIT_SHIFT_TRACE.values()]
    for p, lengths in enumerate((lambda r: r.input_tokens, lambda r: r.input_tokens + r.output_tokens)):
        top = max(int(np.searchsorted(edges, min(int(lengths(w.requests).max()), int(edges[-1])), side="left"))
                  for w in [ref, *longest] if len(w.requests))
        picks[p] = sorted({*picks[p], top})
    return picks


def choose_groups(workload: NPUWorkload, edges: NDArray[np.int64], per_phase: int) -> list[list[int]]:
    """Bucket indices of the env's groups per phase: the quantiles i/P of the requests' length buckets
    (prefill: input; decode: input + output), the last the longest request's bucket (see module doc)."""
    r = workload.requests
    out: list[list[int]] = []
    q = np.arange(1, per_phase + 1) / per_phase
    for lengths in (r.input_tokens, r.input_tokens + r.output_tokens):
        if lengths.size == 0:
            out.append([NB - 1])
            continue
        bk = np.searchsorted(edges, np.minimum(lengths, edges[-1]), side="left")
        picks = np.quantile(bk, q, method="inverted_cdf").astype(np.int64).tolist()
        picks.append(int(bk.max()))
        out.append(sorted(set(picks)))
    return out


class NPUAutoscaleEnv(gym.Env):
    """Per-epoch autoscaling of NPU vPod groups (see the module docstring)."""

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}  # noqa: RUF012 (gymnasium API)

    def __init__(self, config: NPUEnvConfig | Mapping[str, Any] | None = None, render_mode: str | None = None,
                 **overrides: Any) -> None:
        super().__init__()
        # gym.make(id, key=value) updates the config like config={key: value} (as the geo envs do).
        self.config = resolve_config(config, overrides, NPUEnvConfig)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(f"render_mode = {render_mode!r}; allowed: None, 'ansi'")
        self.render_mode = render_mode
        cfg = self.config
        self.levels = np.array(cfg.count_levels, dtype=np.int64)
        self.horizon = cfg.horizon_epochs
        if cfg.split is None:
            self.scenario: dict[str, Any] = {"split": None, "model": cfg.model}
            self._bind_model(cfg.model)
            wl0 = _workload(cfg, 0 if cfg.workload_seed is None else cfg.workload_seed)
            self.workload = wl0
            self._build_groups(wl0)
        else:  # the spaces are the same for every episode and split: fixed groups, padded options
            self.scenario = draw_scenario(cfg.split, 0, tuple(cfg.split_models))
            self._bind_model(self.scenario["model"])
            self.workload = _split_workload(self.scenario, cfg.hours)
            self._build_groups(None, split_groups(self.edges, cfg.groups_per_phase, cfg.hours),
                               n_options=cfg.n_candidates + len(cfg.versions))
        n_lv, n_opt = self.levels.size, self.n_options
        self.action_space = spaces.MultiDiscrete(np.array([n_lv, n_opt] * len(self.groups), dtype=np.int64))
        self._masks = self._static_masks()
        self.obs_fields = self._obs_fields()
        self.observation_space = spaces.Box(-1.0, 10.0, shape=(len(self.obs_fields),), dtype=np.float32)
        self.sim: NPUCluster | None = None
        self.simulation_seed: int | None = None  # NPUCluster seed of the current episode (set by reset)
        self.last_ctx: Observation | None = None
        self._t = 0

    # ------------------------------------------------------------------------------------------ config
    @classmethod
    def default_config(cls) -> dict[str, Any]:
        """The default configuration as a plain dict, to copy and override."""
        d = asdict(NPUEnvConfig())
        d["versions"] = list(d["versions"])
        d["count_levels"] = list(d["count_levels"])
        d["split_models"] = list(d["split_models"])
        return d

    # ------------------------------------------------------------------------------------------ groups
    def _bind_model(self, model: str) -> None:
        """Simulator settings and configuration catalog of ``model`` (cached per process)."""
        self.cluster_config = self.config.cluster_config(model)
        self.catalog = _catalog(self.cluster_config)
        self.edges = self.catalog.edges

    def _build_groups(self, wl: NPUWorkload | None, picks_per_phase: list[list[int]] | None = None,
                      n_options: int | None = None) -> None:
        """Groups (from ``wl``'s lengths, or the given bucket picks), their options under the current
        catalog, and the option masks; ``n_options`` pads every option list to that length."""
        cat = self.catalog
        quota = self.cluster_config.quota_chips or {}
        if picks_per_phase is None:
            assert wl is not None
            picks_per_phase = choose_groups(wl, self.edges, self.config.groups_per_phase)
        self._picks = picks_per_phase
        self.groups: list[tuple[str, int]] = []
        self.group_bucket: list[int] = []
        self.group_lo: list[int] = []  # first bucket index of the group's length range
        self.options: list[list[int]] = []
        for p, picks in enumerate(picks_per_phase):
            ph = PHASES[p]
            lo = 0
            for b in picks:
                edge = int(self.edges[b])
                cands = list(cat.cand[(ph, edge)])
                opts = cands + [c for c in cat.failover[(ph, edge)] if c not in cands]
                if not opts:  # nothing fits this length at all: the group cannot exist
                    continue
                self.groups.append((ph, edge))
                self.group_bucket.append(b)
                self.group_lo.append(lo)
                self.options.append(opts)
                lo = b + 1
            if not any(g[0] == ph for g in self.groups):
                raise ConfigError(f"no {ph} configuration of {self.cluster_config.model} fits the trace's lengths")
        self.group_phase = np.array([PHASES.index(g[0]) for g in self.groups], dtype=np.int64)
        self.n_options = max(len(o) for o in self.options) if n_options is None else int(n_options)
        if any(len(o) > self.n_options for o in self.options):  # pragma: no cover - bound by construction
            raise ConfigError(f"a group has more than n_options = {self.n_options} configurations")
        top = {}
        for i, g in enumerate(self.groups):
            top[g[0]] = i
        self.top_group = set(top.values())
        self._opt_ok = []
        for i, opts in enumerate(self.options):
            ok = np.zeros(self.n_options, dtype=bool)
            for j, cid in enumerate(opts):
                cf = cat.configs[cid]
                q = quota.get(cf.version)
                ok[j] = q is None or cf.chips <= q
            if not ok.any():
                raise ConfigError(f"quota_chips = {dict(quota)!r} leaves group {self.groups[i]} no configuration "
                                  f"(needs at least {min(cat.configs[c].chips for c in opts)} chips of one of "
                                  f"{sorted({cat.configs[c].version for c in opts})})")
            self._opt_ok.append(ok)
        # length ranges of the groups, as bucket-index slices for the observation
        self._ranges = [(self.group_phase[i], self.group_lo[i], self.group_bucket[i] + 1) for i in range(len(self.groups))]

    def _static_masks(self) -> NDArray[np.bool_]:
        parts = []
        for i in range(len(self.groups)):
            cnt = np.ones(self.levels.size, dtype=bool)
            if i in self.top_group:
                cnt &= self.levels > 0
            parts += [cnt, self._opt_ok[i]]
        m = np.concatenate(parts)
        m.setflags(write=False)
        return m

    def action_masks(self) -> NDArray[np.bool_]:
        """Valid values per action dimension, concatenated in ``action_space`` order (sb3-contrib's
        MultiDiscrete layout); never all-false per dimension."""
        return self._masks.copy()

    def _obs_fields(self) -> list[str]:
        names: list[str] = []
        per_group = ["rate_recent/mean_rate", "rate_peak/mean_rate", "length_share", "log_tokens_per_req",
                     "alive/max_level", "ready/max_level", *[f"alive_{v}/max_level" for v in VERSIONS],
                     "option/(n_options-1)", "util", "log1p_queue/10", "log1p_peak_queue/10"]
        for f in per_group:
            for ph, edge in self.groups:
                names.append(f"{ph}[{edge}].{f}")
        names += ["slo_recent_prefill", "slo_recent_decode", "slo_satisfaction_last", "slo_miss_share_last",
                  *[f"quota_left_{v}/quota" for v in VERSIONS], "sin_hour", "cos_hour", "episode_progress"]
        return names

    # ------------------------------------------------------------------------------------------ episode
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[NDArray[np.float32], dict[str, Any]]:
        super().reset(seed=seed)
        cfg = self.config
        if cfg.split is None:
            if cfg.workload_seed is None:
                self.workload = _workload(cfg, int(self.np_random.integers(2**31 - 1)))
            sim_seed = int(self.np_random.integers(2**31 - 1))
            self.scenario = {"split": None, "seed": seed, "model": cfg.model, "trace": cfg.trace,
                             "simulation_seed": sim_seed}
        else:
            s = int(seed) if seed is not None else int(self.np_random.integers(2**31 - 1))
            sc = draw_scenario(cfg.split, s, tuple(cfg.split_models))
            if sc["model"] != self.cluster_config.model:
                self._bind_model(sc["model"])
                self._build_groups(None, self._picks, n_options=self.n_options)
                if 2 * len(self.groups) != self.action_space.nvec.size:  # pragma: no cover - checked by tests
                    raise ConfigError(f"model {sc['model']} has no configuration for a group of the split; "
                                      f"allowed split_models: models that fit every group")
                self._masks = self._static_masks()
            self.workload = _split_workload(sc, cfg.hours)
            self.scenario = sc
            sim_seed = sc["simulation_seed"]
        self.simulation_seed = sim_seed
        self.sim = sim = NPUCluster(self.cluster_config, self.workload, seed=sim_seed, catalog=self.catalog)
        w = self.workload
        dur = max(w.duration_s, 1.0)
        self._mean_rate = max(len(w.requests) / dur, 1e-9)
        self._ref = self._oracle_reference()
        self._t = 0
        self._late_prev = 0
        self._last = {"slo_satisfaction": 1.0, "slo_miss_share": 0.0}
        self._option = np.zeros(len(self.groups), dtype=np.int64)
        self._count = np.zeros(len(self.groups), dtype=np.int64)
        if cfg.warm_start:
            a = self._warm_action()
            sim.provision(self._decision(a))
            self._count = self.levels[a[0::2]]
            self._option = a[1::2].copy()
        self.last_ctx = sim.observe()
        info = self._state_info()
        info["scenario"] = dict(self.scenario)
        return self._obs(self.last_ctx), info

    def _oracle_reference(self) -> float:
        """Mean energy (J) or cost (USD) per epoch of the Ideal oracle on the scenario's workload."""
        sim = self.sim
        assert sim is not None
        key = "energy_j_per_token" if self.config.objective == "energy" else "usd_per_token"
        r = self.workload.requests
        tot = 0.0
        for ph, bk, tok in (("prefill", sim.bk_p, r.input_tokens), ("decode", sim.bk_d, r.output_tokens)):
            per = np.array([getattr(sim.best_fit[(ph, int(s))], key) if (ph, int(s)) in sim.best_fit else 0.0
                            for s in self.edges])
            tot += float((tok * per[bk]).sum())
        n_epochs = max(self.workload.duration_s / self.cluster_config.epoch_s, 1.0)
        return max(tot / n_epochs, 1e-12)

    def _late_count(self, sim: NPUCluster | None = None) -> int:
        """Open requests already past their SLO (TTFT before the first token, or TPOT x output tokens)."""
        sim = self.sim if sim is None else sim
        assert sim is not None
        ids = sim.open_requests()
        if ids.size == 0:
            return 0
        age = sim.now - sim.arr[ids]
        lp = np.isnan(sim.ttft[ids]) & (age > sim.slo_p[sim.bk_p[ids]])
        ld = age > sim.slo_d[sim.bk_d[ids]] * sim.osl[ids]
        return int((lp | ld).sum())

    # ------------------------------------------------------------------------------------------ actions
    def _check_action(self, action: Any) -> tuple[NDArray[np.int64], bool]:
        a = np.asarray(action)
        n = self.action_space.nvec
        allowed = (f"allowed: {n.size} integers, [count index in 0..{self.levels.size - 1}, option index in "
                   f"0..{self.n_options - 1}] per group {self.groups}")
        if a.shape != n.shape:
            raise ActionError(f"action has shape {a.shape}; {allowed}")
        if a.dtype.kind not in "iu":  # bools, strings and complex numbers are not indices
            if a.dtype.kind != "f" or not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
                raise ActionError(f"action {str(a.tolist())[:200]} is not integer-valued; {allowed}")
        # Range first, in the action's own dtype: a uint64 or float past int64 must not wrap when cast.
        bad = np.flatnonzero((a < 0) | (a >= n))
        if bad.size:
            i = int(bad[0])
            raise ActionError(f"action[{i}] = {a[i].item()} is out of range for group {self.groups[i // 2]} "
                              f"({'count' if i % 2 == 0 else 'option'}); {allowed}")
        a = a.astype(np.int64)
        ok = self._masks[np.concatenate([[0], np.cumsum(n)[:-1]]) + a]
        if ok.all():
            return a, False
        if self.config.strict_masks:
            i = int(np.flatnonzero(~ok)[0])
            what = ("count 0 for the largest group of its phase" if i % 2 == 0 else
                    f"option {int(a[i])} (padding, or a version whose quota cannot hold one vPod)")
            raise ActionError(f"action[{i}] = {int(a[i])} is masked for group {self.groups[i // 2]}: {what}; "
                              "see action_masks()")
        out = a.copy()
        for i in np.flatnonzero(~ok).tolist():
            g = i // 2
            if i % 2 == 0:
                out[i] = int(np.flatnonzero(self.levels > 0)[0])
            else:
                out[i] = int(np.flatnonzero(self._opt_ok[g])[0])
        return out, True

    def _decision(self, a: NDArray[np.int64]) -> ScalingDecision:
        targets: dict[tuple[str, int], dict[int, int]] = {}
        for g, key in enumerate(self.groups):
            n = int(self.levels[a[2 * g]])
            cid = self.options[g][int(a[2 * g + 1])]
            targets[key] = {cid: n} if n > 0 else {}
        return ScalingDecision(targets)

    def count_index(self, n: float) -> int:
        """Index of the smallest count level >= n (the largest level when n exceeds them all)."""
        return int(min(np.searchsorted(self.levels, math.ceil(n - 1e-9), side="left"), self.levels.size - 1))

    def _demand_action(self, rate: NDArray[np.float64], tpr: NDArray[np.float64]) -> NDArray[np.int64]:
        """Best fit per group, count = ceil(sum over the group's buckets of token demand / one vPod's
        tokens/s at that bucket) -- N_pod = ceil(R_peak / T_pod) of §3.4 on the env's fixed groups."""
        sim = self.sim
        assert sim is not None
        a = np.zeros(2 * len(self.groups), dtype=np.int64)
        for g, (p, lo, hi) in enumerate(self._ranges):
            opt = int(np.flatnonzero(self._opt_ok[g])[0])
            cid = self.options[g][opt]
            need = 0.0
            for b in range(lo, hi):
                w = float(rate[p, b] * tpr[p, b])
                if w > 0:
                    cap = float(sim.tps[cid, b, sim.jmax[cid, b]])
                    need += w / max(cap, 1e-300)
            n = max(math.ceil(need - 1e-9), 1 if g in self.top_group else 0)
            a[2 * g], a[2 * g + 1] = self.count_index(n), opt
        return a

    def _warm_action(self) -> NDArray[np.int64]:
        sim = self.sim
        assert sim is not None
        head = self.workload.requests.window(0.0, WARM_WINDOW_S)
        rate = np.zeros((2, NB))
        tpr = np.zeros((2, NB))
        if len(head):
            isl, osl = head.input_tokens, head.output_tokens
            bin_s = self.cluster_config.rate_bin_s
            nbin = int(WARM_WINDOW_S / bin_s)
            kb = np.minimum((head.arrival_s // bin_s).astype(np.int64), nbin - 1)
            for p, lengths, tok in ((0, isl, isl), (1, isl + osl, osl)):
                bb = np.searchsorted(self.edges, np.minimum(lengths, self.edges[-1]))
                cnt = np.zeros((nbin, NB))
                np.add.at(cnt, (kb, bb), 1.0)
                rate[p] = cnt.max(axis=0) / bin_s
                tpr[p] = np.bincount(bb, weights=tok, minlength=NB) / np.maximum(np.bincount(bb, minlength=NB), 1)
        return self._demand_action(rate, tpr)

    def heuristic_action(self) -> NDArray[np.int64]:
        """A reference action from the last observation: best fit per group, N_pod = ceil(R_peak / T_pod)
        on the window's peak rate (NeuScale's count rule without its x2 / ÷2 limits or coalescing); at t = 0
        the warm-start sizing on the first 10 minutes of arrivals."""
        if self.last_ctx is None:
            raise ActionError("heuristic_action() needs reset() first")
        if self.last_ctx.time_s <= 0.0:  # nothing observed yet: the warm-start sizing
            return self._warm_action()
        return self._demand_action(self.last_ctx.rate_peak, self.last_ctx.tokens_per_req)

    def action_from_decision(self, decision: ScalingDecision) -> NDArray[np.int64]:
        """Project a per-bucket :class:`ScalingDecision` (e.g. from ``NeuScalePolicy.decide``) onto the
        env's groups: each group gets the summed vPod count of the decision's groups in its length range
        (rounded up to a count level) on its best fit; unlisted groups keep their current target."""
        a = np.zeros(2 * len(self.groups), dtype=np.int64)
        add = np.zeros(len(self.groups))
        listed = np.zeros(len(self.groups), dtype=bool)
        for (ph, edge), tgt in decision.targets.items():
            p = PHASES.index(ph)
            mine = [g for g in range(len(self.groups)) if self.group_phase[g] == p]
            b = int(np.searchsorted(self.edges, edge))
            g = next((x for x in mine if self.group_bucket[x] >= b), mine[-1])
            add[g] += sum(tgt.values())
            listed[g] = True
        for g in range(len(self.groups)):
            n = add[g] if listed[g] else float(self._count[g])
            if g in self.top_group:
                n = max(n, 1.0)
            a[2 * g] = self.count_index(n)
            a[2 * g + 1] = int(np.flatnonzero(self._opt_ok[g])[0])
        return a

    # ------------------------------------------------------------------------------------------ step
    def step(self, action: Any) -> tuple[NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        sim = self.sim
        if sim is None:
            raise ActionError("step() called before reset()")
        if self._t >= self.horizon:
            raise ActionError("step() called after the episode was truncated; call reset() first")
        a, adjusted = self._check_action(action)
        n0 = sim.next_req
        sim.apply(self._decision(a))
        self._count = self.levels[a[0::2]]
        self._option = a[1::2].copy()
        m = sim.advance_epoch()
        reward, flows, self._late_prev = self._epoch_outcome(sim, [m], int(sim.next_req - n0), self._late_prev)
        self._t += 1
        self._last = {"slo_satisfaction": 1.0 - flows["slo_violation_pct"] / 100.0,
                      "slo_miss_share": flows["slo_misses"] / max(flows["arrived"], 1)}
        self.last_ctx = sim.observe()
        info = self._state_info()
        info.update(flows, action_adjusted=adjusted)
        truncated = self._t >= self.horizon
        return self._obs(self.last_ctx), float(reward), False, truncated, info

    def _epoch_outcome(self, sim: NPUCluster, spans: list[EpochMetrics], arrived: int, late_prev: int
                       ) -> tuple[float, dict[str, Any], int]:
        """Reward and info flows of one epoch of ``sim`` made of the advance spans ``spans`` (one for the
        env's step, one per decision point for a baseline's loop); returns (reward, flows, late count)."""
        cfg = self.config
        late = self._late_count(sim)
        slo_total = sum(float(m.slo_total) for m in spans)
        slo_met = sum(float(m.slo_met[2]) for m in spans)
        # a late open request that finishes moves from `late` to the finished misses; the age test of
        # `late` is conservative, so the difference can dip below 0 by a request or two: clip
        misses = max(slo_total - slo_met + (late - late_prev), 0.0)
        energy = sum(float(m.energy_j.sum()) for m in spans)
        usd = sum(float(m.usd.sum()) for m in spans)
        tokens = sum(float(m.tokens.sum()) for m in spans)
        duration_s = sum(float(m.t1_s - m.t0_s) for m in spans)
        obj = energy if cfg.objective == "energy" else usd
        r_obj = cfg.objective_weight * obj / self._ref
        r_slo = cfg.slo_penalty * misses / max(arrived, 1)
        flows = {"energy_j": energy, "cost_usd": usd, "tokens": tokens,
                 "slo_violation_pct": 100.0 * (1.0 - slo_met / slo_total) if slo_total else 0.0,
                 "slo_misses": float(misses), "power_w": energy / duration_s if duration_s > 0 else 0.0,
                 "arrived": arrived, "finished": sum(int(m.finished) for m in spans),
                 "tokens_per_j": tokens / energy if energy > 0 else 0.0,
                 "tokens_per_usd": tokens / usd if usd > 0 else 0.0,
                 "reward_objective": -r_obj, "reward_slo": -r_slo}
        return -(r_obj + r_slo), flows, late

    # ------------------------------------------------------------------------------------------ baselines
    def run_baseline(self, policy: str, seed: int | None = None) -> dict[str, Any]:
        """Run a :mod:`servegym.baselines.npu` policy on exactly the episode ``reset(seed=seed)`` produces.

        ``policy``: one of ``BASELINES`` (``base``, ``neuscale``: their own decision loop every
        ``check_s`` = 60 s with their own warm start, :func:`~servegym.baselines.npu.run_policy`;
        ``ideal``: the §5.1 oracle, :func:`~servegym.baselines.npu.ideal_metrics`, which uses true
        lengths). The env is reset with ``seed`` (so the workload and :attr:`simulation_seed` are the
        agent's) and the policy drives a fresh :class:`NPUCluster` with that seed and workload for the
        env's horizon; the env's own simulator is left at the start of that episode.

        Returns ``{"policy", "seed", "simulation_seed", "reward", "length", "infos", "summary"}``: one
        info per epoch with the same flow keys and formulas as :meth:`step`'s (``energy_j``,
        ``cost_usd``, ``tokens``, ``slo_violation_pct``, ``slo_misses``, ``power_w``, ``arrived``, ``finished``, ...,
        plus the state keys ``time_s``, ``epoch``, ``vpods``, ``chips``), ``reward`` their summed
        reward, and ``summary`` the simulator's :meth:`NPUCluster.summary`. The oracle has no vPods
        and no per-epoch schedule: one info with the episode's totals (no ``chips``), no misses, and
        ``length`` the horizon.
        """
        from servegym.baselines.npu import ideal_metrics, make_policy, run_policy

        if policy not in BASELINES:
            raise ConfigError(f"policy = {policy!r} is unknown; allowed: {', '.join(BASELINES)}")
        self.reset(seed=seed)
        assert self.simulation_seed is not None
        sim = NPUCluster(self.cluster_config, self.workload, seed=self.simulation_seed, catalog=self.catalog)
        hours = self.horizon * self.cluster_config.epoch_s / 3600.0
        out: dict[str, Any] = {"policy": policy, "seed": seed, "simulation_seed": self.simulation_seed,
                               "length": self.horizon}
        if policy == "ideal":
            s = ideal_metrics(sim, hours=hours)
            obj = s["energy_j"] if self.config.objective == "energy" else s["usd"]
            r_obj = self.config.objective_weight * obj / self._ref
            n = s["requests_finished"]
            out["infos"] = [{"energy_j": s["energy_j"], "cost_usd": s["usd"], "tokens": s["tokens"],
                             "slo_violation_pct": 0.0, "slo_misses": 0.0, "arrived": int(n), "finished": int(n),
                             "power_w": s["energy_j"] / (hours * 3600.0) if hours > 0 else 0.0,
                             "tokens_per_j": s["energy_efficiency"], "tokens_per_usd": s["cost_efficiency"],
                             "reward_objective": -r_obj, "reward_slo": 0.0, "time_s": hours * 3600.0,
                             "epoch": self.horizon}]
            out["reward"], out["summary"] = -r_obj, s
            return out
        per = round(self.cluster_config.epoch_s / self.cluster_config.check_s)
        infos: list[dict[str, Any]] = []
        state = {"n0": 0, "late": 0, "reward": 0.0}

        def account(e: int) -> None:
            reward, flows, state["late"] = self._epoch_outcome(sim, sim.history[-per:], int(sim.next_req - state["n0"]),
                                                               state["late"])
            state["n0"] = sim.next_req
            state["reward"] += reward
            flows.update(time_s=float(sim.now), epoch=e + 1, vpods=int(np.count_nonzero(sim.v_gone == np.inf)),
                         chips=float(sum(sim.held_chips().values())))
            infos.append(flows)

        out["summary"] = run_policy(sim, make_policy(policy), hours=hours, progress=account)
        out["infos"], out["reward"] = infos, state["reward"]
        return out

    def _state_info(self) -> dict[str, Any]:
        sim = self.sim
        assert sim is not None and self.last_ctx is not None
        per_v = dict.fromkeys(VERSIONS, 0)
        n = 0
        for cnt in self.last_ctx.counts.values():
            for cid, k in cnt.items():
                per_v[self.catalog.configs[cid].version] += k
                n += k
        held = sim.held_chips()
        return {"time_s": float(sim.now), "epoch": self._t, "vpods": n, "vpods_per_version": per_v,
                "chips": float(sum(held.values())), "energy_j": 0.0, "cost_usd": 0.0, "tokens": 0.0,
                "slo_violation_pct": 0.0, "slo_misses": 0.0, "power_w": 0.0, "arrived": 0, "finished": 0,
                "tokens_per_j": 0.0,
                "tokens_per_usd": 0.0, "action_adjusted": False}

    # ------------------------------------------------------------------------------------------ obs
    def _obs(self, ctx: Observation) -> NDArray[np.float32]:
        G = len(self.groups)
        maxl = float(self.levels[-1])
        rr = np.zeros(G)
        rp = np.zeros(G)
        tpr = np.zeros(G)
        for g, (p, lo, hi) in enumerate(self._ranges):
            rr[g] = ctx.rate_recent[p, lo:hi].sum()
            rp[g] = ctx.rate_peak[p, lo:hi].sum()
            w = ctx.rate_peak[p, lo:hi]
            tpr[g] = float((w * ctx.tokens_per_req[p, lo:hi]).sum() / w.sum()) if w.sum() > 0 else 0.0
        share = np.zeros(G)
        for p in (0, 1):
            sel = self.group_phase == p
            tot = rr[sel].sum()
            if tot > 0:
                share[sel] = rr[sel] / tot
        gp = self.group_phase
        gb = np.array(self.group_bucket)
        util = ctx.util[gp, gb].copy()
        sim = self.sim
        if sim is not None and sim.d_g.size:
            # the simulator's util is the prefill fluid's busy share; for decode, batch-slot occupancy
            act = np.bincount(sim.d_g[sim.d_active], minlength=2 * NB).reshape(2, NB)
            dec = gp == 1
            slots = ctx.slots[1, gb[dec]]
            util[dec] = np.where(slots > 0, np.minimum(act[1, gb[dec]] / np.maximum(slots, 1e-9), 1.0), 0.0)
        per_v = np.zeros((len(VERSIONS), G))
        for g, key in enumerate(self.groups):
            for cid, k in ctx.counts.get(key, {}).items():
                per_v[VERSIONS.index(self.catalog.configs[cid].version), g] += k
        quota = self.sim.quota if self.sim is not None else {}
        q_left = [1.0 if math.isinf(quota[v]) else (ctx.quota_left[v] / quota[v] if quota[v] > 0 else 0.0)
                  for v in VERSIONS]
        hour = (ctx.time_s / 3600.0 + float(self.scenario.get("start_hour", self.config.start_hour))) % 24.0
        parts = [
            rr / self._mean_rate, rp / self._mean_rate, share, np.log1p(tpr) / LOG_MAX_TOKENS,
            ctx.alive[gp, gb] / maxl, ctx.ready[gp, gb] / maxl, per_v.ravel() / maxl,
            self._option / max(self.n_options - 1, 1), util,
            np.log1p(ctx.queue[gp, gb]) / 10.0, np.log1p(ctx.peak_queue[gp, gb]) / 10.0,
            ctx.slo_recent, [self._last["slo_satisfaction"], self._last["slo_miss_share"]], q_left,
            [math.sin(2 * math.pi * hour / 24.0), math.cos(2 * math.pi * hour / 24.0), self._t / self.horizon],
        ]
        obs = np.concatenate([np.asarray(x, dtype=np.float64).ravel() for x in parts])
        return np.clip(obs, -1.0, 10.0).astype(np.float32)

    # ------------------------------------------------------------------------------------------ render
    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        sim, ctx = self.sim, self.last_ctx
        if sim is None or ctx is None:
            return "NPUAutoscale-v0 (not reset)\n"
        lines = [f"t = {sim.now / 3600.0:5.2f} h  epoch {self._t}/{self.horizon}  {self.cluster_config.model} on "
                 f"{self.workload.name}  slo(last epoch) {self._last['slo_satisfaction']:.3f}"]
        lines.append(f"{'group':>16} {'config':>28} {'alive':>5} {'ready':>5} {'queue':>6} {'util':>5}")
        for g, key in enumerate(self.groups):
            p, b = PHASES.index(key[0]), self.group_bucket[g]
            cid = self.options[g][int(self._option[g])]
            lines.append(f"{key[0] + ' <=' + str(key[1]):>16} {self.catalog.configs[cid].label:>28} "
                         f"{int(ctx.alive[p, b]):>5} {int(ctx.ready[p, b]):>5} {int(ctx.queue[p, b]):>6} "
                         f"{ctx.util[p, b]:>5.2f}")
        return "\n".join(lines) + "\n"
