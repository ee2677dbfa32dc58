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

**Action modes** (``action_mode``). ``"absolute"`` (the default, the original mode) sets every group's
target outright; ``"residual"`` changes NeuScale's own decision (below). The id
``servegym/NPUAutoscaleResidual-v0`` is this env with ``action_mode="residual"`` and
``reward_mode="base"`` (keyword overrides of the config, like any ``gym.make(id, key=value)``: a
``config`` sets every other field; ``gym.make(id, action_mode="absolute")`` would change the mode). Both drive the same
simulator; the residual mode runs :class:`~servegym.baselines.npu.NeuScalePolicy` on the env's
simulator as :func:`~servegym.baselines.npu.run_policy` does, so it adds no dynamics.

**Absolute action** ``MultiDiscrete([n_levels, n_options] * n_groups)``: per group (in ``env.groups`` order) a
vPod count index into ``count_levels`` (default 0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64) and a
configuration index into ``env.options[g]`` = the DSE's SLO-meeting Pareto candidates of the group's
bucket (:meth:`BestFitTable.candidates`, best fit first, up to ``n_candidates``) followed by each chip
version's best fit not already listed (the fail-overs of §3.4). ``n_options`` is the longest list; the
rest is padding. Targets are declarative: the group's vPods of other configurations are deleted (15 s)
and missing ones created (73-108 s + download + start + load); creations that do not fit the quota wait
(group order = priority).

**Residual action** ``MultiDiscrete([5] * n_groups)`` (``[5, n_options + 1] * n_groups`` with
``residual_options``): per env group a change of the reference's vPod count by ``RESIDUAL_STEPS[v]`` =
(0, +1, -1, +2, -2) count levels, so **the all-zero action reproduces the reference exactly** (tested
against ``run_baseline("neuscale")`` epoch by epoch). The reference is NeuScale's decision, not
:meth:`NPUAutoscaleEnv.heuristic_action`: NeuScale is the paper's method (the protocol's ``best``), and it
carries what the heuristic lacks (EWMA of R_peak, x2 / ÷2 limits, coalescing, fail-over under a
quota, the emergency layer), so an agent starts at the paper's score and learns corrections. NeuScale
decides per (phase, bucket) group; an env group's change applies to each of NeuScale's groups in its
length range: the count moves along the ladder ``count_levels`` continued by factors of sqrt(2) up to
``max_group_vpods`` (a count between two levels moves to the next one up or down); added vPods go to
the group's last configuration (the best fit, or the fail-over being filled under a quota), removed ones
come from the fail-overs first; a NeuScale group at 0 stays at 0 and the largest of a phase keeps at
least 1. The configuration stays NeuScale's (the best fit) unless ``residual_options`` is set: then
option j >= 1 puts the group's vPods on ``env.options[g][j - 1]`` (option 0 keeps NeuScale's). The
observation carries NeuScale's pending decision (its target per env group), computed when the epoch
boundary is observed, exactly when run_policy would decide. ``heuristic_action`` and
``action_from_decision`` are absolute-mode helpers (they raise ActionError in residual mode).

**Decision frequency** (``safety_layer``). The agent acts once per 5-min epoch. Base and NeuScale also
decide at the 4 other 60-s decision points of an epoch, but only to scale out in an emergency
(:func:`~servegym.baselines.npu.emergency_decision`). With the safety layer on (the default in residual
mode) the env calls that same function at those points on the agent's current targets, so the agent
and the baselines share one reflex and one decision frequency (``info["emergency_scaleouts"]`` counts
its scale-outs in the epoch). The absolute mode keeps its original dynamics (off) unless
``safety_layer=True``.

**Masks** (:meth:`NPUAutoscaleEnv.action_masks`, sb3-contrib's MultiDiscrete layout: the per-dimension
masks concatenated). Residual mode: a change for an env group where the reference has no vPods, and
the options as below (option 0 is always allowed); a masked change is adjusted to 0. Absolute mode: padding options; options whose chip version's quota cannot hold even one vPod; and
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
now and at the peak of the epoch; the reference's target vPods / max count level (residual mode:
NeuScale's pending decision summed over the group's range; absolute mode: the heuristic's count); and
T_pod, the requests/s one vPod of the group's configuration serves at its max batch for the window's
tokens per request (§3.4), / the trace's mean rate (0 with no traffic). Then: recent prefill and decode SLO satisfaction, last epoch's SLO
satisfaction and miss share, quota left per version / quota (1 when unlimited), sin and cos of the hour
of day, and the elapsed share of the episode.

**Reward** (``reward_mode``), with objective O the epoch's energy (J) or cost (USD) per ``objective``,
M the epoch's SLO misses and A = max(requests arriving within the horizon, 1) / horizon the episode's
mean arrivals per epoch:

* ``"oracle"`` (default, the original): r = -objective_weight x O / D - slo_penalty x M / A, with D the
  Ideal oracle's (§5.1: every token on its best fit at a full batch) mean O per epoch of the scenario,
  so an epoch as efficient as the oracle's average costs about 1. Pool energy includes idle and booting
  vPods, so a realistic deployment costs several oracle epochs (about 10 for Llama-3-70B on Azure).
* ``"base"``: r = -objective_weight x (O - O_base) / D - slo_penalty x (M - M_base) / A, with O_base and
  M_base Base's flows in the same epoch of the same episode (Base runs once per reset on the same
  workload and simulator seed, :meth:`NPUAutoscaleEnv.run_baseline`) and D Base's mean O per epoch:
  0 per epoch for Base, positive where the agent beats it; ``info`` adds ``base_energy_j``,
  ``base_cost_usd``, ``base_slo_misses``.

Misses = requests finished in the epoch that missed TTFT or TPOT + the change in open requests already
past their SLO (so starving the service is penalized when it happens; clipped at 0 per epoch).
``slo_penalty`` (50) is set so that missing every request costs more than serving it well, and 10 %
misses cost about half a served epoch. D and A are episode constants (``env.reward_scale``), so **the
return is exactly -objective_weight x (sum O - sum O_base) / D - slo_penalty x (sum M - sum M_base) / A**
(without the base terms in oracle mode), sums of the ``info`` flows ``energy_j``/``cost_usd`` and
``slo_misses`` (tested); for a fixed episode it orders policies by energy (or cost) and misses alone.

**Bounds.** D is floored at the least any deployment draws (one cheapest vPod per phase at static power,
or its rental, for a whole epoch: ``env.objective_floor``), not at 1e-12 (which gave -3.6e18 per step
at tiny rates). Every simulator group's target is capped at ``max_group_vpods`` (1024; the reference's
and the emergency layer's too -- the residual-zero identity holds while no group reaches it), so
O <= ``env.objective_cap`` = 2 x 96 groups x ``max_group_vpods`` x epoch_s x the largest per-vPod power
(or rental) per phase (alive plus as many being deleted); M <= the requests in the horizon = A x horizon;
O_base <= horizon x D. Hence every step's reward lies in [-B, B] (oracle mode: [-B, 0]) with
B = objective_weight x max(objective_cap / objective_floor, horizon [base mode only]) +
slo_penalty x horizon, ``env.reward_bound`` (e.g. 3.5e7 for the defaults: loose, but finite for every
valid config; typical steps are within +-10).

**Speed** (``benchmarks/npu_env_speed.py``, ``benchmarks/results/npu_env_speed.md``): a 24-h episode of
the default scenario (2.4 M requests) costs 8-10 s of CPU in absolute mode (random valid actions, the
heuristic, or NeuScale's projected decisions; any BLAS thread count) and 17 s in residual mode relative
to Base (9 s of steps + 8.5 s for Base's episode at reset); wall = CPU on a free core, 34-39 s and 67 s
at a load of 10-12 on the 2-core dev machine. The catalog and workload are built once per process
(~2-9 s, cached).

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
``tokens_per_j``, ``tokens_per_usd``, ``time_s``, ``action_adjusted``, ``emergency_scaleouts``,
``reward_objective``, ``reward_slo`` (+ the ``base_*`` flows relative to Base); reset gives the state
keys with zero flows.

Configuration: :class:`NPUEnvConfig` (frozen dataclass); ``NPUAutoscaleEnv(config=dict)`` takes
highway-env style overrides of :meth:`NPUAutoscaleEnv.default_config` (unknown keys raise
ConfigError). ``workload_seed`` fixes the trace (built once and cached per process); ``None`` draws it
from the reset seed (a fresh trace each episode, ~1 s to build for a day of Azure). ``reset(seed=...)``
seeds the simulator (routing, creation times): same seed, same episode.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray
from servegym.baselines.npu import (
    NeuScalePolicy,
    emergency_decision,
    ideal_metrics,
    make_policy,
    run_policy,
    warm_start,
)
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
    MAX_REQUEST_CEILING,
    ActionError,
    ConfigError,
    check_field_types,
    check_keywords,
    check_range,
    check_request_count,
    known_overrides,
    resolve_config,
)
from servegym.render import BLUE, GREEN, GREY, LIGHT_BLUE, LIGHT_ORANGE, ORANGE, RED, Bar, render_bars
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

ACTION_MODES: tuple[str, ...] = ("absolute", "residual")
"""``action_mode`` values: absolute per-group targets (the original mode), or changes around NeuScale's decision."""
REWARD_MODES: tuple[str, ...] = ("oracle", "base")
"""``reward_mode`` values: objective per the Ideal oracle's mean epoch (the original), or relative to Base per epoch."""
RESIDUAL_STEPS: tuple[int, ...] = (0, 1, -1, 2, -2)
"""Count-level change of a residual action value (value 0 = follow the reference, so all-zero reproduces it)."""

BASELINES: tuple[str, ...] = ("base", "neuscale", "ideal")
"""Policies :meth:`NPUAutoscaleEnv.run_baseline` runs on the env's episode (servegym.baselines.npu)."""

class _LRU(OrderedDict):
    """A least-recently-used cache of at most ``cap`` entries; the oldest is dropped *before* a new one is
    built, so the process never holds ``cap + 1`` of them."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap

    def get_or_make(self, key: Any, make: Callable[[], Any]) -> Any:
        if key in self:
            self.move_to_end(key)
            return self[key]
        while self and len(self) >= self.cap:
            self.popitem(last=False)
        self[key] = value = make()
        return value


#: Per-process caches shared by every env instance. Measured on NPUAutoscale-v0's default train split
#: (benchmarks/results/npu_memory.md): a model's configuration catalog takes 2-9 s to build, a 24-h workload
#: ~70 MB (arrival, input and output arrays of ~2.6 M requests) and ~1-3 s. Catalogs: one per model of the
#: default split (4), so resets never rebuild one (each keeps its Pareto fronts, not the step metrics behind
#: them: servegym.envs.npu.dse.METRICS_CACHE_MAX). Workloads: the current episode's and one more (every reset
#: of a named split draws a new one, so a longer cache only held memory). With 4 workloads and every step
#: metric kept, resident memory rose from 461 to 1,270 MB over 20 episodes; with these bounds it stays
#: within 505-594 MB over the last 10.
CATALOG_CACHE_MAX = 4
WORKLOAD_CACHE_MAX = 2
_CATALOGS: _LRU = _LRU(CATALOG_CACHE_MAX)
_WORKLOADS: _LRU = _LRU(WORKLOAD_CACHE_MAX)


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
    action_mode: str = "absolute"  # one of ACTION_MODES (see the module docstring)
    residual_options: bool = False  # residual mode: also choose each group's configuration (default: best fit)
    reward_mode: str = "oracle"  # one of REWARD_MODES: normalize by the oracle, or relative to Base per epoch
    safety_layer: bool | None = None  # emergency scale-out between epochs (None: on in residual mode only)
    max_group_vpods: int = 1024  # cap on any simulator group's vPod target (bounds the reward)

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
        check_range("max_expected_requests", self.max_expected_requests, 1, MAX_REQUEST_CEILING)
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
        if self.action_mode not in ACTION_MODES:
            raise ConfigError(f"action_mode = {self.action_mode!r} is unknown; allowed: {', '.join(ACTION_MODES)}")
        if self.reward_mode not in REWARD_MODES:
            raise ConfigError(f"reward_mode = {self.reward_mode!r} is unknown; allowed: {', '.join(REWARD_MODES)}")
        for name in ("residual_options",):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ConfigError(f"{name} = {getattr(self, name)!r}; allowed: true or false")
        if self.action_mode == "residual" and not self.warm_start:
            raise ConfigError("warm_start = False needs action_mode = 'absolute': the residual mode follows "
                              "NeuScale, which starts from its warm start (run_policy)")
        if self.safety_layer is not None and not isinstance(self.safety_layer, (bool, np.bool_)):
            raise ConfigError(f"safety_layer = {self.safety_layer!r}; allowed: null (on in residual mode), true "
                              "or false")
        mg = self.max_group_vpods
        if isinstance(mg, bool) or not isinstance(mg, (int, np.integer)) or not max(lv) <= mg <= 100_000:
            raise ConfigError(f"max_group_vpods = {mg!r}; allowed: an integer in [max(count_levels) = {max(lv)}, "
                              "100000]")
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

    @property
    def uses_safety_layer(self) -> bool:
        """Whether the emergency scale-out layer runs between the agent's epochs (``safety_layer``; None:
        on in residual mode, off in absolute mode, which keeps that mode's original dynamics)."""
        return bool(self.action_mode == "residual" if self.safety_layer is None else self.safety_layer)

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
    return _CATALOGS.get_or_make(ConfigCatalog.key_of(cc), lambda: ConfigCatalog(cc))


def _workload(cfg: NPUEnvConfig, seed: int) -> NPUWorkload:
    key = (cfg.trace, float(cfg.hours), int(seed), cfg.rate_rpm, float(cfg.start_hour))
    return _WORKLOADS.get_or_make(key, lambda: make_workload(cfg.trace, hours=cfg.hours, seed=int(seed),
                                                             rate_rpm=cfg.rate_rpm, start_hour=cfg.start_hour))


def _split_workload(sc: dict[str, Any], hours: float) -> NPUWorkload:
    key = ("split", sc["trace"], sc["azure_trace"], tuple(sc["segment"]), float(hours), sc["workload_seed"],
           sc["rate_rpm"], sc["start_hour"])
    return _WORKLOADS.get_or_make(key, lambda: make_workload(
        sc["trace"], hours=hours, seed=sc["workload_seed"], rate_rpm=sc["rate_rpm"], azure_trace=sc["azure_trace"],
        start_hour=sc["start_hour"], segment=tuple(sc["segment"])))


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


@dataclass
class _Replay:
    """The current episode as its inputs: ``reset``'s seed and options, the state of ``np_random`` right after
    seeding (a dict of numpy's bit generator), and the actions stepped since, in order."""

    seed: int | None
    options: dict[str, Any] | None
    rng_state: dict[str, Any]
    actions: list[NDArray[Any]] = field(default_factory=list)


class NPUAutoscaleEnv(gym.Env):
    """Per-epoch autoscaling of NPU vPod groups (see the module docstring)."""

    metadata: dict[str, Any] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}  # noqa: RUF012 (gymnasium API)

    def __init__(self, config: NPUEnvConfig | Mapping[str, Any] | None = None, render_mode: str | None = None,
                 **overrides: Any) -> None:
        super().__init__()
        # gym.make(id, key=value) updates the config like config={key: value} (as the geo envs do).
        check_keywords(type(self).__name__, overrides, NPUEnvConfig)
        self.config = resolve_config(config, overrides, NPUEnvConfig)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(f"render_mode = {render_mode!r}; allowed: None, 'ansi', 'rgb_array'")
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
        self.residual = cfg.action_mode == "residual"
        self.ladder = self._residual_ladder()
        n_lv, n_opt = self.levels.size, self.n_options
        if not self.residual:
            nvec = [n_lv, n_opt] * len(self.groups)
        elif cfg.residual_options:
            nvec = [len(RESIDUAL_STEPS), n_opt + 1] * len(self.groups)
        else:
            nvec = [len(RESIDUAL_STEPS)] * len(self.groups)
        self.action_space = spaces.MultiDiscrete(np.array(nvec, dtype=np.int64))
        self._masks = self._static_masks()
        self._bounds_static()
        self.obs_fields = self._obs_fields()
        self.observation_space = spaces.Box(-1.0, 10.0, shape=(len(self.obs_fields),), dtype=np.float32)
        self.sim: NPUCluster | None = None
        self.simulation_seed: int | None = None  # NPUCluster seed of the current episode (set by reset)
        self.last_ctx: Observation | None = None
        self._t = 0
        self._ref_policy: NeuScalePolicy | None = None  # residual mode: the reference (NeuScale) on the env's sim
        self._pending: ScalingDecision | None = None  # its decision for the next epoch (None: keep the warm start)
        self._targets: dict[tuple[str, int], dict[int, int]] = {}  # the agent's current targets
        self._ref_counts = np.zeros(len(self.groups))  # reference's target vPods per env group
        self._base_flows: dict[str, NDArray[np.float64]] | None = None  # reward_mode "base": Base per epoch
        self._base_key: tuple | None = None
        self._replay: _Replay | None = None  # how to rebuild the current episode (see __getstate__)

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
        # env group of every (phase, bucket): the first of the phase whose edge is >= the bucket's, else its top
        self._env_group = np.zeros((2, NB), dtype=np.int64)
        for p in (0, 1):
            mine = [g for g in range(len(self.groups)) if self.group_phase[g] == p]
            for b in range(NB):
                self._env_group[p, b] = next((g for g in mine if self.group_bucket[g] >= b), mine[-1])

    def _static_masks(self) -> NDArray[np.bool_]:
        parts = []
        for i in range(len(self.groups)):
            if self.residual:
                parts.append(np.ones(len(RESIDUAL_STEPS), dtype=bool))
                if self.config.residual_options:
                    parts.append(np.concatenate([[True], self._opt_ok[i]]))
                continue
            cnt = np.ones(self.levels.size, dtype=bool)
            if i in self.top_group:
                cnt &= self.levels > 0
            parts += [cnt, self._opt_ok[i]]
        m = np.concatenate(parts)
        m.setflags(write=False)
        return m

    def per_step_reward_bound(self) -> float:
        """B such that -B <= reward <= B on every step of the current episode (module docstring, **Bounds**);
        the same accessor as the geo and pd envs'. Needs ``reset()``: B depends on the drawn scenario."""
        bound = getattr(self, "reward_bound", None)
        if bound is None:
            raise ActionError("per_step_reward_bound() needs an episode: call reset() first")
        return float(bound)

    def action_masks(self) -> NDArray[np.bool_]:
        """Valid values per action dimension, concatenated in ``action_space`` order (sb3-contrib's
        MultiDiscrete layout); never all-false per dimension. Residual mode: a group whose reference
        target is 0 vPods (no NeuScale group in its length range) only allows 0 (no change)."""
        m = self._masks.copy()
        if self.residual:
            k = len(RESIDUAL_STEPS)
            stride = k + (self.n_options + 1 if self.config.residual_options else 0)
            for g in np.flatnonzero(self._ref_counts <= 0).tolist():
                m[g * stride + 1: g * stride + k] = False
        return m

    def _residual_ladder(self) -> NDArray[np.int64]:
        """Count levels a residual step moves along: ``count_levels`` continued by factors of sqrt(2)
        (rounded up) to ``max_group_vpods`` (a reference count between levels moves to the next level)."""
        lv = [int(x) for x in self.config.count_levels]
        x = float(lv[-1])
        while lv[-1] < self.config.max_group_vpods:
            x *= math.sqrt(2.0)
            lv.append(min(max(math.ceil(x - 1e-9), lv[-1] + 1), int(self.config.max_group_vpods)))
        return np.array(sorted(set(lv)), dtype=np.int64)

    def _bounds_static(self) -> None:
        """Per-epoch objective bounds of any deployment (see the module docstring, **Bounds**): the
        floor (one cheapest vPod per phase at static power or its rental, a whole epoch) and the cap
        (every one of the 2 x 48 simulator groups at ``max_group_vpods`` alive plus as many being
        deleted, each at its configuration's largest power or rental)."""
        cat, cc = self.catalog, self.cluster_config
        if self.config.objective == "energy":
            low = cat.cfg_static_w
            pw = np.where(np.isfinite(cat.pow), cat.pow, 0.0).reshape(len(cat.configs), -1)
            high = np.maximum(pw.max(axis=1), cat.cfg_static_w)
        else:
            low = high = cat.cfg_usd_s
        self.objective_floor = float(sum(low[cat.cfg_phase == p].min() for p in (0, 1))) * cc.epoch_s
        self.objective_cap = float(sum(high[cat.cfg_phase == p].max() for p in (0, 1))) * (
            2.0 * NB * self.config.max_group_vpods * cc.epoch_s)

    def _obs_fields(self) -> list[str]:
        names: list[str] = []
        per_group = ["rate_recent/mean_rate", "rate_peak/mean_rate", "length_share", "log_tokens_per_req",
                     "alive/max_level", "ready/max_level", *[f"alive_{v}/max_level" for v in VERSIONS],
                     "option/(n_options-1)", "util", "log1p_queue/10", "log1p_peak_queue/10",
                     "reference_target/max_level", "vpod_rate/mean_rate"]
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
        self._replay = _Replay(seed, None if options is None else dict(options),
                               dict(self.np_random.bit_generator.state))
        return self._start_episode(seed, options)

    def _start_episode(self, seed: int | None, options: dict[str, Any] | None
                       ) -> tuple[NDArray[np.float32], dict[str, Any]]:
        """The body of :meth:`reset` after its generator is seeded (unpickling replays it)."""
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
                n_groups = len(self.groups)
                self._build_groups(None, self._picks, n_options=self.n_options)
                if len(self.groups) != n_groups:  # pragma: no cover - checked by tests
                    raise ConfigError(f"model {sc['model']} has no configuration for a group of the split; "
                                      f"allowed split_models: models that fit every group")
                self._masks = self._static_masks()
                self._bounds_static()  # the reward bound's power/rental extremes are the model's
            self.workload = _split_workload(sc, cfg.hours)
            self.scenario = sc
            sim_seed = sc["simulation_seed"]
        self.simulation_seed = sim_seed
        self.sim = sim = NPUCluster(self.cluster_config, self.workload, seed=sim_seed, catalog=self.catalog)
        w = self.workload
        dur = max(w.duration_s, 1.0)
        self._mean_rate = max(len(w.requests) / dur, 1e-9)
        self._set_reward_scale()
        self._t = 0
        self._late_prev = 0
        self._last = {"slo_satisfaction": 1.0, "slo_miss_share": 0.0}
        self._option = np.zeros(len(self.groups), dtype=np.int64)
        self._count = np.zeros(len(self.groups), dtype=np.int64)
        self._targets = {}
        self._pending = None
        self._ref_policy = None
        if self.residual:
            # the reference drives this simulator exactly as run_policy does: its own warm start at t = 0,
            # then one decision per epoch boundary (computed when the boundary is observed, applied with the
            # agent's changes by the next step)
            self._ref_policy = pol = NeuScalePolicy()
            pol.reset(sim)
            sim.provision(ScalingDecision(self._capped(warm_start(sim, pol))))
            pol.targets = self._capped({k: v for k, v in pol.targets.items() if v})
            self._targets = pol.targets
        elif cfg.warm_start:
            a = self._warm_action()
            dec = self._decision(a)
            sim.provision(dec)
            self._targets = {k: dict(v) for k, v in dec.targets.items() if v}
            self._count = self.levels[a[0::2]]
            self._option = a[1::2].copy()
        self.last_ctx = sim.observe()
        self._update_reference()
        info = self._state_info()
        info["scenario"] = dict(self.scenario)
        return self._obs(self.last_ctx), info

    def _set_reward_scale(self) -> None:
        """The episode's reward normalizers and bound (see the module docstring, **Reward** and **Bounds**)."""
        cfg = self.config
        H = self.horizon
        end = H * self.cluster_config.epoch_s
        n = int(np.searchsorted(self.workload.requests.arrival_s, end, side="left"))
        self.requests_in_horizon = n
        if cfg.reward_mode == "base":
            self._base_flows = self._base_run()
            ref = float(self._base_flows["objective"].mean())
        else:
            self._base_flows = None
            ref = self._oracle_reference()
        self.reward_scale = {"objective": max(ref, self.objective_floor), "arrivals_per_epoch": max(n, 1) / H}
        up = cfg.objective_weight * self.objective_cap / self.objective_floor
        if cfg.reward_mode == "base":
            up = max(up, cfg.objective_weight * H)
        self.reward_bound = float(up + cfg.slo_penalty * H)

    def _oracle_reference(self) -> float:
        """Mean energy (J) or cost (USD) per epoch of the Ideal oracle on the scenario's workload."""
        sim = self.sim
        assert sim is not None
        key = "energy_j_per_token" if self.config.objective == "energy" else "usd_per_token"
        r = self.workload.requests
        tot = 0.0
        for ph, bk, tok in (("prefill", sim.bk_p, r.input_tokens), ("decode", sim.bk_d, r.output_tokens)):
            # the oracle's per-token cost: the scoring model's best fits (as ideal_metrics)
            per = np.array([getattr(sim.ideal_fit[(ph, int(s))], key) if (ph, int(s)) in sim.ideal_fit else 0.0
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
        d = n.size // len(self.groups)  # dimensions per group
        kinds = ("count", "option") if not self.residual else ("change", "option")[:d]
        if not self.residual:
            per = f"[count index in 0..{self.levels.size - 1}, option index in 0..{self.n_options - 1}]"
        else:
            per = (f"[change index in 0..{len(RESIDUAL_STEPS) - 1} (count-level changes {RESIDUAL_STEPS})"
                   + (f", option index in 0..{self.n_options} (0 = the reference's)]" if d == 2 else "]"))
        allowed = f"allowed: {n.size} integers, {per} per group {self.groups}"
        if a.shape != n.shape:
            raise ActionError(f"action has shape {a.shape}; {allowed}")
        if a.dtype.kind not in "iu":  # bools, strings and complex numbers are not indices
            if a.dtype.kind != "f" or not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
                raise ActionError(f"action {str(a.tolist())[:200]} is not integer-valued; {allowed}")
        # Range first, in the action's own dtype: a uint64 or float past int64 must not wrap when cast.
        bad = np.flatnonzero((a < 0) | (a >= n))
        if bad.size:
            i = int(bad[0])
            raise ActionError(f"action[{i}] = {a[i].item()} is out of range for group {self.groups[i // d]} "
                              f"({kinds[i % d]}); {allowed}")
        a = a.astype(np.int64)
        ok = self.action_masks()[np.concatenate([[0], np.cumsum(n)[:-1]]) + a]
        if ok.all():
            return a, False
        if self.config.strict_masks:
            i = int(np.flatnonzero(~ok)[0])
            what = {"count": "count 0 for the largest group of its phase",
                    "change": "a change for a group where the reference has no vPods",
                    "option": f"option {int(a[i])} (padding, or a version whose quota cannot hold one vPod)"}
            raise ActionError(f"action[{i}] = {int(a[i])} is masked for group {self.groups[i // d]}: "
                              f"{what[kinds[i % d]]}; see action_masks()")
        out = a.copy()
        for i in np.flatnonzero(~ok).tolist():
            g, kind = i // d, kinds[i % d]
            if kind == "count":
                out[i] = int(np.flatnonzero(self.levels > 0)[0])
            elif kind == "change":
                out[i] = 0  # follow the reference
            else:
                out[i] = 0 if self.residual else int(np.flatnonzero(self._opt_ok[g])[0])
        return out, True

    def _capped(self, targets: dict[tuple[str, int], dict[int, int]]) -> dict[tuple[str, int], dict[int, int]]:
        """``targets`` with each group's total vPods at most ``max_group_vpods`` (removed from its last
        configurations first, the fail-overs); the same object when nothing exceeds the cap."""
        cap = int(self.config.max_group_vpods)
        if all(sum(v.values()) <= cap for v in targets.values()):
            return targets
        out: dict[tuple[str, int], dict[int, int]] = {}
        for key, tgt in targets.items():
            new, left = {}, cap
            for cid, n in tgt.items():
                new[cid] = min(int(n), left)
                left -= new[cid]
            out[key] = {c: n for c, n in new.items() if n > 0}
        return out

    def _shift(self, n: int, step: int, floor: int) -> int:
        """``n`` moved ``step`` levels along the residual ladder (not below ``floor``, not above the cap)."""
        lad = self.ladder
        if step > 0:
            up = lad[lad > n]
            return int(up[min(step, up.size) - 1]) if up.size else n
        down = lad[(lad < n) & (lad >= floor)]
        return int(down[max(down.size + step, 0)]) if down.size else n

    def _residual_targets(self, a: NDArray[np.int64], base: Mapping[tuple[str, int], Mapping[int, int]]
                          ) -> dict[tuple[str, int], dict[int, int]]:
        """The reference's targets ``base`` with the agent's changes: per env group, each of the
        reference's groups in its length range moves ``RESIDUAL_STEPS[a]`` levels along the ladder
        (added vPods go to its last configuration, the one being filled; removed ones come from its
        last configurations first); a group of the reference with 0 vPods stays at 0, and the largest
        one of each phase keeps at least 1. With ``residual_options``, option j >= 1 puts the group's
        vPods on ``options[g][j - 1]``. Key order (creation priority under a quota) is the reference's."""
        d = 2 if self.config.residual_options else 1
        top: dict[int, int] = {}
        for key, tgt in base.items():
            if sum(tgt.values()) > 0:
                p, b = PHASES.index(key[0]), int(np.searchsorted(self.edges, key[1]))
                top[p] = max(top.get(p, -1), b)
        out: dict[tuple[str, int], dict[int, int]] = {}
        for key, tgt in base.items():
            tgt = {int(c): int(n) for c, n in tgt.items() if n > 0}
            n = sum(tgt.values())
            p, b = PHASES.index(key[0]), int(np.searchsorted(self.edges, key[1]))
            g = int(self._env_group[p, b])
            step = RESIDUAL_STEPS[int(a[d * g])]
            if n > 0 and step != 0:
                m = self._shift(n, step, 1 if top.get(p) == b else 0)
                cids = list(tgt)
                if m > n:
                    tgt[cids[-1]] += m - n
                else:
                    drop = n - m
                    for c in reversed(cids):
                        k = min(drop, tgt[c])
                        tgt[c] -= k
                        drop -= k
                    tgt = {c: k for c, k in tgt.items() if k > 0}
            if d == 2 and int(a[d * g + 1]) > 0 and tgt:
                tgt = {self.options[g][int(a[d * g + 1]) - 1]: sum(tgt.values())}
            out[key] = tgt
        return self._capped(out)

    def _update_reference(self) -> None:
        """Reference target vPods per env group: NeuScale's decision for the next epoch (residual mode;
        its warm start before the first decision), or the heuristic's counts (absolute mode)."""
        ref = np.zeros(len(self.groups))
        if self.residual:
            assert self._ref_policy is not None
            tg = self._pending.targets if self._pending is not None else self._ref_policy.targets
            for key, tgt in tg.items():
                p, b = PHASES.index(key[0]), int(np.searchsorted(self.edges, key[1]))
                ref[int(self._env_group[p, b])] += sum(tgt.values())
        elif self.sim is not None and self.last_ctx is not None:
            ref = self.levels[self.heuristic_action()[0::2]].astype(float)
        self._ref_counts = ref

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
        if self.residual:
            raise ActionError("heuristic_action() returns an absolute action; with action_mode = 'residual' the "
                              "all-zero action follows the reference (NeuScale)")
        if self.last_ctx.time_s <= 0.0:  # nothing observed yet: the warm-start sizing
            return self._warm_action()
        return self._demand_action(self.last_ctx.rate_peak, self.last_ctx.tokens_per_req)

    def action_from_decision(self, decision: ScalingDecision) -> NDArray[np.int64]:
        """Project a per-bucket :class:`ScalingDecision` (e.g. from ``NeuScalePolicy.decide``) onto the
        env's groups: each group gets the summed vPod count of the decision's groups in its length range
        (rounded up to a count level) on its best fit; unlisted groups keep their current target.
        Absolute mode only (in residual mode the all-zero action is NeuScale's own decision)."""
        if self.residual:
            raise ActionError("action_from_decision() returns an absolute action; with action_mode = 'residual' "
                              "the all-zero action follows NeuScale's decision")
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
        out = self._step(action)
        if self._replay is not None:  # a step that raised changed nothing and is not recorded
            self._replay.actions.append(np.array(action, copy=True))
        return out

    # ------------------------------------------------------------------------------------------ pickling
    def __getstate__(self) -> dict[str, Any]:
        """What a pickle holds: the config, the render mode, the spec and the episode's replay record (its
        reset seed and options, the generator's state after seeding, the actions since), a few kB instead
        of the hundreds of MB of workload, catalog and per-request simulator state (a 24-h episode of Azure
        at Table 4's rate has about 3M requests). Unpickling rebuilds the env from the config and replays
        the episode (the dynamics are deterministic given these), so it costs the steps taken so far."""
        return {"config": self.config, "render_mode": self.render_mode, "spec": self.spec,
                "np_random_seed": getattr(self, "_np_random_seed", None), "replay": self._replay}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"], render_mode=state["render_mode"])  # type: ignore[misc]
        self.spec = state["spec"]
        replay: _Replay | None = state["replay"]
        if replay is None:
            return
        bitgen = getattr(np.random, replay.rng_state["bit_generator"])()
        bitgen.state = replay.rng_state
        self._np_random = np.random.Generator(bitgen)
        self._np_random_seed = state["np_random_seed"]
        self._replay = _Replay(replay.seed, replay.options, replay.rng_state)
        self._start_episode(replay.seed, replay.options)
        for a in replay.actions:
            self.step(a)

    def _step(self, action: Any) -> tuple[NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        sim = self.sim
        if sim is None:
            raise ActionError("step() called before reset()")
        if self._t >= self.horizon:
            raise ActionError("step() called after the episode was truncated; call reset() first")
        a, adjusted = self._check_action(action)
        n0 = sim.next_req
        cc = self.cluster_config
        if self.residual:
            pol = self._ref_policy
            assert pol is not None
            if self._pending is None and not a.any():
                pass  # the warm start stands, as in run_policy's first epoch
            else:
                base = self._pending.targets if self._pending is not None else dict(pol.targets)
                targets = self._residual_targets(a, base)
                sim.apply(ScalingDecision(targets))
                pol.targets = {k: v for k, v in targets.items() if v}
            self._targets = pol.targets
            if self.config.residual_options:
                self._option = a[1::2].copy()
        else:
            dec = self._decision(a)
            sim.apply(dec)
            self._targets = {k: dict(v) for k, v in dec.targets.items() if v}
            self._count = self.levels[a[0::2]]
            self._option = a[1::2].copy()
        n_emergency = 0
        if self.config.uses_safety_layer:
            # the agent decides once per epoch; at the other 60-s decision points the emergency scale-out
            # of Base and NeuScale (the same function) acts on the agent's targets, as run_policy does
            spans = [sim.advance(cc.check_s)]
            for _ in range(round(cc.epoch_s / cc.check_s) - 1):
                ctx = sim.observe()
                em = emergency_decision(sim, ctx, self._targets)
                n_emergency += len(em.targets)
                capped = self._capped(dict(em.targets))
                self._targets.update(capped)
                sim.apply(ScalingDecision(capped))
                spans.append(sim.advance(cc.check_s))
        else:
            spans = [sim.advance_epoch()]
        flows, self._late_prev = self._raw_flows(sim, spans, int(sim.next_req - n0), self._late_prev)
        reward = self._reward(flows, self._t)
        self._t += 1
        self._last = {"slo_satisfaction": 1.0 - flows["slo_violation_pct"] / 100.0,
                      "slo_miss_share": flows["slo_misses"] / max(flows["arrived"], 1)}
        self.last_ctx = sim.observe()
        truncated = self._t >= self.horizon
        if self.residual and not truncated:
            assert self._ref_policy is not None
            self._pending = self._ref_policy.decide(self.last_ctx)
        self._update_reference()
        info = self._state_info()
        info.update(flows, action_adjusted=adjusted, emergency_scaleouts=n_emergency)
        return self._obs(self.last_ctx), float(reward), False, truncated, info

    def _raw_flows(self, sim: NPUCluster, spans: list[EpochMetrics], arrived: int, late_prev: int
                   ) -> tuple[dict[str, Any], int]:
        """Info flows of one epoch of ``sim`` made of the advance spans ``spans`` (one per decision point,
        or one for the whole epoch); returns (flows, late count)."""
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
        flows = {"energy_j": energy, "cost_usd": usd, "tokens": tokens,
                 "slo_violation_pct": 100.0 * (1.0 - slo_met / slo_total) if slo_total else 0.0,
                 "slo_misses": float(misses), "power_w": energy / duration_s if duration_s > 0 else 0.0,
                 "arrived": arrived, "finished": sum(int(m.finished) for m in spans),
                 "tokens_per_j": tokens / energy if energy > 0 else 0.0,
                 "tokens_per_usd": tokens / usd if usd > 0 else 0.0}
        return flows, late

    def _reward(self, flows: dict[str, Any], epoch: int | None) -> float:
        """The reward of epoch ``epoch`` (None: flows that total the whole episode) from its flows; adds
        ``reward_objective``, ``reward_slo`` and, relative to Base, ``base_energy_j``, ``base_cost_usd``,
        ``base_slo_misses`` (Base's flows of the same epoch or episode) to ``flows``."""
        cfg = self.config
        obj = flows["energy_j"] if cfg.objective == "energy" else flows["cost_usd"]
        misses = flows["slo_misses"]
        bf = self._base_flows
        if bf is not None:
            b = {k: float(v.sum() if epoch is None else v[epoch]) for k, v in bf.items()}
            obj -= b["objective"]
            misses -= b["slo_misses"]
            flows.update(base_energy_j=b["energy_j"], base_cost_usd=b["cost_usd"], base_slo_misses=b["slo_misses"])
        r_obj = cfg.objective_weight * obj / self.reward_scale["objective"]
        r_slo = cfg.slo_penalty * misses / self.reward_scale["arrivals_per_epoch"]
        flows.update(reward_objective=-r_obj, reward_slo=-r_slo)
        return -(r_obj + r_slo)

    def _base_run(self) -> dict[str, NDArray[np.float64]]:
        """Base's per-epoch flows on this episode (same workload and simulator seed; cached per episode)."""
        key = (id(self.workload), self.simulation_seed, self.horizon)
        if self._base_key == key and self._base_flows is not None:
            return self._base_flows
        _, infos = self._policy_epochs("base")
        out = {k: np.array([f[k] for f in infos], dtype=np.float64)
               for k in ("energy_j", "cost_usd", "slo_misses", "arrived")}
        out["objective"] = out["energy_j"] if self.config.objective == "energy" else out["cost_usd"]
        self._base_key = key
        return out

    def _policy_epochs(self, policy: str) -> tuple[dict[str, float], list[dict[str, Any]]]:
        """Run Base or NeuScale (their own 60-s loop and warm start, run_policy) on a fresh simulator with
        this episode's workload and seed; (summary, per-epoch raw flows with state keys)."""
        assert self.simulation_seed is not None
        sim = NPUCluster(self.cluster_config, self.workload, seed=self.simulation_seed, catalog=self.catalog)
        cc = self.cluster_config
        per = round(cc.epoch_s / cc.check_s)
        infos: list[dict[str, Any]] = []
        state = {"n0": 0, "late": 0, "emergency": 0}
        pol = make_policy(policy)
        decide = pol.decide

        def counted(ctx: Observation) -> ScalingDecision:  # count the emergency layer's scale-outs, as step does
            dec = decide(ctx)
            if not ctx.at_epoch_boundary:
                state["emergency"] += len(dec.targets)
            return dec

        pol.decide = counted  # type: ignore[method-assign]

        def account(e: int) -> None:
            flows, state["late"] = self._raw_flows(sim, sim.history[-per:], int(sim.next_req - state["n0"]),
                                                   state["late"])
            state["n0"] = sim.next_req
            flows.update(time_s=float(sim.now), epoch=e + 1, vpods=int(np.count_nonzero(sim.v_gone == np.inf)),
                         chips=float(sum(sim.held_chips().values())), emergency_scaleouts=state["emergency"])
            state["emergency"] = 0
            infos.append(flows)

        hours = self.horizon * cc.epoch_s / 3600.0
        summary = run_policy(sim, pol, hours=hours, progress=account)
        return summary, infos

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
        if policy not in BASELINES:
            raise ConfigError(f"policy = {policy!r} is unknown; allowed: {', '.join(BASELINES)}")
        self.reset(seed=seed)
        assert self.simulation_seed is not None
        out: dict[str, Any] = {"policy": policy, "seed": seed, "simulation_seed": self.simulation_seed,
                               "length": self.horizon}
        if policy == "ideal":
            sim = NPUCluster(self.cluster_config, self.workload, seed=self.simulation_seed, catalog=self.catalog)
            hours = self.horizon * self.cluster_config.epoch_s / 3600.0
            s = ideal_metrics(sim, hours=hours)
            n = s["requests_finished"]
            info: dict[str, Any] = {
                "energy_j": s["energy_j"], "cost_usd": s["usd"], "tokens": s["tokens"], "slo_violation_pct": 0.0,
                "slo_misses": 0.0, "arrived": int(n), "finished": int(n),
                "power_w": s["energy_j"] / (hours * 3600.0) if hours > 0 else 0.0,
                "tokens_per_j": s["energy_efficiency"], "tokens_per_usd": s["cost_efficiency"],
                "time_s": hours * 3600.0, "epoch": self.horizon}
            # one info for the whole episode: relative to Base, against Base's episode totals
            out["reward"] = self._reward(info, None)
            out["infos"], out["summary"] = [info], s
            return out
        summary, infos = self._policy_epochs(policy)
        total = 0.0
        for e, info in enumerate(infos):
            total += self._reward(info, e)
        out["summary"], out["infos"], out["reward"] = summary, infos, total
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
                "tokens_per_usd": 0.0, "action_adjusted": False, "emergency_scaleouts": 0}

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
            self._ref_counts / maxl, self._vpod_rate(tpr) / self._mean_rate,
            ctx.slo_recent, [self._last["slo_satisfaction"], self._last["slo_miss_share"]], q_left,
            [math.sin(2 * math.pi * hour / 24.0), math.cos(2 * math.pi * hour / 24.0), self._t / self.horizon],
        ]
        obs = np.concatenate([np.asarray(x, dtype=np.float64).ravel() for x in parts])
        return np.clip(obs, -1.0, 10.0).astype(np.float32)

    def _vpod_rate(self, tpr: NDArray[np.float64]) -> NDArray[np.float64]:
        """Per env group: requests/s one vPod of its configuration serves at its max batch (T_pod of
        §3.4) at the group's bucket and the window's tokens per request ``tpr`` (0 with no traffic)."""
        sim = self.sim
        out = np.zeros(len(self.groups))
        if sim is None:
            return out
        for g in range(len(self.groups)):
            if tpr[g] <= 0:
                continue
            opt = int(self._option[g])
            if self.residual:  # the reference's configuration (best fit) unless the agent chose one
                opt = opt - 1 if opt > 0 else 0
            cid, b = self.options[g][opt], self.group_bucket[g]
            out[g] = float(sim.tps[cid, b, sim.jmax[cid, b]]) / tpr[g]
        return out

    # ------------------------------------------------------------------------------------------ render
    def render(self) -> str | NDArray[np.uint8] | None:
        if self.render_mode == "rgb_array":
            return self._render_rgb()
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

    def _render_rgb(self) -> NDArray[np.uint8] | None:
        """A 96-px-high RGB picture of what the agent observes (None before ``reset()``): per env group (prefill
        blue, decode orange) ready vPods with booting ones stacked on top and the reference's target as a
        tick, all / the largest count level; then per group the utilization (green) and log1p(queue) / 10
        (red); then last epoch's SLO satisfaction (green) and the episode's progress (grey)."""
        if self.last_ctx is None:
            return None
        obs = self._obs(self.last_ctx)
        at = {name: float(v) for name, v in zip(self.obs_fields, obs, strict=True)}
        bars = []
        for g, (ph, edge) in enumerate(self.groups):
            key = f"{ph}[{edge}]"
            ready, alive = at[f"{key}.ready/max_level"], at[f"{key}.alive/max_level"]
            bars.append(Bar(ready, BLUE if self.group_phase[g] == 0 else ORANGE, max(alive - ready, 0.0),
                            LIGHT_BLUE if self.group_phase[g] == 0 else LIGHT_ORANGE,
                            at[f"{key}.reference_target/max_level"]))
        bars += [Bar(at[f"{ph}[{edge}].util"], GREEN) for ph, edge in self.groups]
        bars += [Bar(at[f"{ph}[{edge}].log1p_queue/10"], RED) for ph, edge in self.groups]
        bars += [Bar(at["slo_satisfaction_last"], GREEN), Bar(at["episode_progress"], GREY)]
        return render_bars(bars)
