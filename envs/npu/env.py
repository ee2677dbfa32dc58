"""``servegym/NPUAutoscale-v0``: autoscale heterogeneous NPU vPod groups of one LLM over a day (npu paper §3-5).

One step is one NeuScale epoch (``epoch_s`` = 300 s); an episode is ``hours`` x 12 epochs (default 24 h =
288 epochs) and ends by truncation only. The dynamics are :class:`~servegym.envs.npu.sim.cluster.NPUCluster`
(Table 3 overheads, roofline step times and energies, routing by predicted length, quota per chip
version); this module only maps actions to :class:`~servegym.envs.npu.sim.cluster.ScalingDecision` and
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
simulator, each a small class in :mod:`~servegym.envs.npu.actions` (space, masks, reset provisioning,
decoding into a decision), so ``reset`` and ``step`` never branch on the mode; the residual mode runs :class:`~servegym.baselines.npu.NeuScalePolicy` on the env's
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
against ``run_baseline("neuscale")`` and, with ``reference="base"``, ``run_baseline("base")`` epoch by
epoch). ``reference="base"`` acts around Base, the strongest npu baseline on the validation split (an agent
that only copies it scores exactly Base). The default reference is NeuScale's decision, not
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
of day, and the elapsed share of the episode. ``group_state_obs``: ``"bucket"`` (default) reads alive, ready, per-version, utilization and queue entries at the
group's own bucket; ``"range"`` sums them over every bucket the group covers (the residual mode's reference keeps
its vPods at its own buckets inside the ranges; the reference target already counts them that way).

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

**Speed** (``benchmarks/npu_env_speed.py``, ``benchmarks/results/npu_env_speed.md``; CPU time on the shared
2-core machine): in the fluid mode (the default) the absolute mode steps about 1,850 env steps per CPU-second
(24-h train-split episodes, zero action; the heuristic on a 4-h episode about 1,700; random actions about 500, as
each rebuilds the fleet), the residual mode about 600 (five 60-s decision points per step: NeuScale's decision,
four emergency checks that observe only when a group has a queue, reconcile; the loop shared with the request
level), both about 1.1-1.2x that since the 2026-12-06 reading; the request level runs 56-66. A 24-h reset of a named split builds the day's workload (~2.6 M requests)
and its 10-s profile, about 0.4 CPU-s, plus Base's episode in the residual mode (cached per scenario; 1.1 CPU-s in
all). The catalogs are built once per
process (and cached on disk).

**Baselines on the agent's episode.** After ``reset(seed=s)``, :attr:`NPUAutoscaleEnv.simulation_seed` is
the :class:`~servegym.envs.npu.sim.cluster.NPUCluster` seed of the episode (derived from ``s``; the workload
too when ``workload_seed`` is None). :meth:`NPUAutoscaleEnv.run_baseline` (policy in ``BASELINES``:
``base``, ``neuscale``, ``ideal``) runs a :mod:`servegym.baselines.npu` policy on exactly that episode
and returns per-epoch infos with the step's keys and formulas, so ``servegym evaluate`` and the
TensorBoard callback compare an agent with the paper's policies on the same work.

**Splits** (``split`` config key, ``gym.make(id, split="test")``; :mod:`servegym.splits`). ``reset(seed=s)``
draws the scenario from the split with a generator seeded by (split, s) (:func:`draw_scenario`): the model
(uniform over ``split_models``, all four by default), the 2024 Azure trace (coding or conversation: its
per-minute rate shape and token CDFs, :mod:`servegym.envs.npu.sim.azure2024`), a day of the split's days
(:data:`~servegym.envs.npu.sim.azure2024.SPLIT_DAYS`), the start hour (0-23), the rate (Table 4's mean x
U[0.7, 1.3], which rescales the week's mean, so a weekday runs above it and a weekend day below), the workload
seed and the simulator seed. An episode stays within its day (past midnight it wraps to that day's start), so
train, validation and test never share arrival patterns:

- ``train``: model (one of the four), trace (coding or conversation), start hour, rate x U[0.7, 1.3] of
  Table 4; one of the trace's three train weekdays (coding: Mon-Wed 13-15 May 2024)
- ``validation``: as train, on the trace's validation weekday (coding: Thu 16 May)
- ``test``: as train, on the trace's test weekday (coding: Fri 10 May)
- ``shift-lveval``: test-day azure-code timestamps with the held-out LVEval lengths (Table 4 rate x the scale)
- ``shift-openthoughts``: test-day azure-code timestamps with the held-out OpenThoughts lengths (Table 4 rate x
  the scale)
- ``shift-weekend``: as test, on one of the trace's weekend days (lower, flatter load)

The tiled 2023 Azure hour (bursts of 7.7-10.4x a 30-min window's mean) is the named scenario
``trace="azure-2023"`` with ``split=None``.

With a named split the spaces are the same for every model, episode and split: the groups are fixed
(:func:`split_groups`: the length quantiles of the pooled train traces, plus a top group per phase that
fits the longest request of every split's trace, LVEval's 100K-token prompts included) and the option
lists are padded to ``n_candidates + len(versions)`` (padding masked). ``model``, ``trace``,
``rate_rpm``, ``start_hour`` and ``workload_seed`` are then drawn, not set (setting them is a ConfigError;
``split_models`` pins the model pool). ``split=None`` runs the configured scenario as is. The draw is
``env.scenario`` and ``info["scenario"]`` at reset; :meth:`NPUAutoscaleEnv.run_baseline` replays it.
**Stress track** (``track``; :mod:`servegym.envs.npu.tracks`): ``stress-quota`` (NPU-C/D only, no fail-over to
NPU-A/B, a chip quota per model after Figure 25's C:256/D:512); ``info["scenario"]`` adds ``track`` and ``quota_chips``.

**Info**: ``energy_j``, ``cost_usd``, ``tokens`` (prefill input + decode output tokens served),
``slo_violation_pct`` (% of the requests finished in the epoch that missed TTFT or TPOT, 0 when none),
``slo_misses``, ``power_w`` (mean pool power over the epoch, W),
``arrived``, ``finished``, ``vpods`` (alive at the epoch end), ``vpods_per_version``, ``chips``,
``tokens_per_j``, ``tokens_per_usd``, ``time_s``, ``action_adjusted`` (``episode_adjusted_actions`` counts them
over the episode), ``emergency_scaleouts``,
``reward_objective``, ``reward_slo`` (+ the ``base_*`` flows relative to Base); reset gives the state
keys with zero flows.

Configuration: :class:`NPUEnvConfig` (frozen dataclass); ``NPUAutoscaleEnv(config=dict)`` takes
highway-env style overrides of :meth:`NPUAutoscaleEnv.default_config` (unknown keys raise
ConfigError). ``workload_seed`` fixes the trace (built once and cached per process); ``None`` draws it
from the reset seed (a fresh trace each episode, ~1 s to build for a day of Azure). ``reset(seed=...)``
seeds the simulator (routing, creation times): same seed, same episode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray
from servegym.baselines.npu import (
    emergency_decision,
    emergency_possible,
)
from servegym.envs.npu.action_decoding import (
    action_from_decision,
    count_index,
    heuristic_action,
    residual_ladder,
)
from servegym.envs.npu.actions import make_action_type
from servegym.envs.npu.env_config import (
    ACTION_MODES,
    BASELINES,
    DEFAULT_COUNT_LEVELS,
    LOG_MAX_TOKENS,
    RESIDUAL_STEPS,
    REWARD_MODES,
    WARM_WINDOW_S,
    NPUEnvConfig,
)
from servegym.envs.npu.observations import obs_fields, observation, render_rgb, render_text, state_info
from servegym.envs.npu.rewards import (
    EpisodeInputs,
    baseline_episode,
    objective_bounds,
    raw_flows,
    reward,
    reward_scale,
)
from servegym.envs.npu.scenarios import (
    _CATALOGS,
    _LRU,
    _WORKLOADS,
    CATALOG_CACHE_MAX,
    SPLIT_AZURE_TRACES,
    SPLIT_FIELDS,
    SPLIT_MODELS,
    SPLIT_RATE_SCALE,
    SPLIT_SHIFT_TRACE,
    WORKLOAD_CACHE_MAX,
    _catalog,
    _split_workload,
    _workload,
    choose_groups,
    draw_scenario,
    split_groups,
)
from servegym.envs.npu.sim.cluster import (
    Observation,
    ScalingDecision,
)
from servegym.envs.npu.sim.fluid import make_cluster
from servegym.envs.npu.sim.state import GroupLayout, NPUState, apply_decision, build_layout, capped

from servegym.errors import (
    ActionError,
    ConfigError,
    check_keywords,
    choice_error,
    resolve_config,
)
from servegym.memory import release_freed_memory

# the names this module has always exported (tests, agents and benchmarks import them from here)
__all__ = ["ACTION_MODES", "BASELINES", "CATALOG_CACHE_MAX", "DEFAULT_COUNT_LEVELS", "LOG_MAX_TOKENS",
           "RESIDUAL_STEPS", "REWARD_MODES", "SPLIT_AZURE_TRACES", "SPLIT_FIELDS", "SPLIT_MODELS",
           "SPLIT_RATE_SCALE", "SPLIT_SHIFT_TRACE", "WARM_WINDOW_S", "WORKLOAD_CACHE_MAX", "_CATALOGS", "_LRU",
           "_WORKLOADS", "NPUAutoscaleEnv", "NPUEnvConfig", "_catalog", "_split_workload", "_workload",
           "choose_groups", "draw_scenario", "emergency_decision", "split_groups"]


@dataclass
class _Replay:
    """The current episode as its inputs: ``reset``'s seed and options, the state of ``np_random`` right after
    seeding (a dict of numpy's bit generator), and the actions stepped since, in order."""

    seed: int | None
    options: dict[str, Any] | None
    rng_state: dict[str, Any]
    actions: list[NDArray[Any]] = field(default_factory=list)

class NPUAutoscaleEnv(gym.Env):
    """Per-epoch autoscaling of NPU vPod groups (see the module docstring).

    The episode's dynamic state is :attr:`state` (an :class:`~servegym.envs.npu.sim.state.NPUState`); the
    action type (:attr:`action_type`, :mod:`~servegym.envs.npu.actions`) reads it and decodes each action
    into an :class:`~servegym.envs.npu.sim.state.NPUDecision` that the env applies."""

    metadata: dict[str, Any] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}  # noqa: RUF012 (gymnasium API)
    _compiled_obs = True  # False: the observation from its numpy parts alone (observations.fill_obs's reference)

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
        levels = np.array(cfg.count_levels, dtype=np.int64)
        self.horizon = cfg.horizon_epochs
        if cfg.split is None:
            self.scenario: dict[str, Any] = {"split": None, "model": cfg.model}
            self._bind_model(cfg.model)
            wl0 = _workload(cfg, 0 if cfg.workload_seed is None else cfg.workload_seed)
            layout = self._layout(choose_groups(wl0, self.edges, cfg.groups_per_phase))
        else:  # the spaces are the same for every episode and split: fixed groups, padded options
            self.scenario = draw_scenario(cfg.split, 0, tuple(cfg.split_models))
            self._bind_model(self.scenario["model"])
            wl0 = _split_workload(self.scenario, cfg.hours)
            layout = self._layout(split_groups(self.edges, cfg.groups_per_phase, cfg.hours),
                                  n_options=cfg.n_candidates + len(cfg.versions))
        #: the episode's dynamic state (the model layer's NPUState): what the action type, observation and reward read
        self.state = NPUState(layout=layout, levels=levels, level_list=levels.tolist(),
                              ladder=residual_ladder(cfg.count_levels, cfg.max_group_vpods), horizon=self.horizon,
                              workload=wl0, ref_counts=np.zeros(len(layout.groups)))
        # the action mode (actions.py): its space, masks, reset provisioning and decoding into decisions
        self.action_type = make_action_type(cfg, len(layout.groups), layout.n_options)
        self.residual = self.action_type.residual
        self.action_space = self.action_type.space()
        self.objective_floor, self.objective_cap = objective_bounds(self.catalog, self.cluster_config, cfg)
        self.obs_fields = obs_fields(layout.groups)
        self.observation_space = spaces.Box(-1.0, 10.0, shape=(len(self.obs_fields),), dtype=np.float32)
        self.simulation_seed: int | None = None  # NPUCluster seed of the current episode (set by reset)
        self._replay: _Replay | None = None  # how to rebuild the current episode (see __getstate__)

    # ------------------------------------------------------------------------------------------ state
    # the state's fields under the names the env has always had (read-only: the state is what changes)
    sim = property(lambda self: self.state.sim, doc="The episode's simulator (None before ``reset``).")
    last_ctx = property(lambda self: self.state.last_ctx, doc="The simulator's last observation (None before reset).")
    workload = property(lambda self: self.state.workload, doc="The episode's workload.")
    levels = property(lambda self: self.state.levels, doc="The count levels (vPods) of the absolute mode.")
    ladder = property(lambda self: self.state.ladder, doc="The count levels a residual change moves along (vPods).")
    groups = property(lambda self: self.state.layout.groups, doc="The env's groups, ``(phase, bucket_edge)``.")
    group_bucket = property(lambda self: self.state.layout.group_bucket, doc="Each group's top bucket index.")
    group_lo = property(lambda self: self.state.layout.group_lo, doc="Each group's first bucket index.")
    group_phase = property(lambda self: self.state.layout.group_phase, doc="Each group's phase index (0 prefill).")
    options = property(lambda self: self.state.layout.options, doc="Each group's configuration ids.")
    n_options = property(lambda self: self.state.layout.n_options, doc="The longest option list (padded).")
    top_group = property(lambda self: self.state.layout.top_group, doc="The largest group of each phase.")

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

    def _layout(self, picks_per_phase: list[list[int]], n_options: int | None = None) -> GroupLayout:
        """The groups of the bucket picks under the current catalog and quota (``n_options`` pads the options)."""
        return build_layout(self.catalog, self.cluster_config.quota_chips or {}, picks_per_phase,
                            self.cluster_config.model, n_options)

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
        st = self.state
        # the previous episode's simulator and arrays go first, and their pages back to the system: without it the
        # allocator kept them and a long run's resident memory doubled while its live heap stayed flat
        st.sim = None
        release_freed_memory()
        if cfg.split is None:
            if cfg.workload_seed is None:
                st.workload = _workload(cfg, int(self.np_random.integers(2**31 - 1)))
            sim_seed = int(self.np_random.integers(2**31 - 1))
            self.scenario = {"split": None, "seed": seed, "model": cfg.model, "trace": cfg.trace,
                             "simulation_seed": sim_seed}
        else:
            s = int(seed) if seed is not None else int(self.np_random.integers(2**31 - 1))
            sc = draw_scenario(cfg.split, s, tuple(cfg.split_models))
            if sc["model"] != self.cluster_config.model:
                self._bind_model(sc["model"])
                n_groups = len(st.layout.groups)
                st.layout = self._layout(st.layout.picks, n_options=st.layout.n_options)
                if len(st.layout.groups) != n_groups:  # pragma: no cover - checked by tests
                    raise ConfigError(f"model {sc['model']} has no configuration for a group of the split; "
                                      f"allowed split_models: models that fit every group")
                # the reward bound's power/rental extremes are the model's
                self.objective_floor, self.objective_cap = objective_bounds(self.catalog, self.cluster_config, cfg)
            st.workload = _split_workload(sc, cfg.hours)
            self.scenario = sc
            sim_seed = sc["simulation_seed"]
        if cfg.track is not None:  # the track and the quota of the episode's model (servegym.envs.npu.tracks)
            self.scenario = {**self.scenario, "track": cfg.track, "quota_chips": dict(self.cluster_config.quota_chips)}
        self.simulation_seed = sim_seed
        sim = make_cluster(self.cluster_config, st.workload, seed=sim_seed, catalog=self.catalog,
                           fidelity=self.config.fidelity)
        w = st.workload
        dur = max(w.duration_s, 1.0)
        st.begin_episode(sim, max(len(w.requests) / dur, 1e-9),
                         float(self.scenario.get("start_hour", cfg.start_hour)))
        sc_r = reward_scale(st, self._episode(), self.objective_floor, self.objective_cap)
        self.requests_in_horizon, self.reward_scale, self.reward_bound = sc_r.requests_in_horizon, sc_r.scale, sc_r.bound
        # the mode's initial deployment (warm start or the reference's)
        st.reference = self.action_type.new_reference()
        apply_decision(st, self.action_type.start(st), provision=True)
        st.last_ctx = sim.observe()
        self._update_reference()
        info = state_info(st)
        info["scenario"] = dict(self.scenario)
        info["fidelity"] = self.config.fidelity  # which simulator produced this episode's figures
        return self._obs(st.last_ctx), info

    def _episode(self) -> EpisodeInputs:
        """The current episode as a baseline replays it (after ``reset``)."""
        assert self.simulation_seed is not None
        return EpisodeInputs(self.config, self.cluster_config, self.catalog, self.state.workload,
                             self.simulation_seed, self.horizon)

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
        st = self.state
        sim = st.sim
        if sim is None:
            raise ActionError("step() called before reset()")
        if st.t >= self.horizon:
            raise ActionError("step() called after the episode was truncated; call reset() first")
        dec = self.action_type.decode(st, action)
        st.adjusted_actions += int(dec.adjusted)
        n0 = sim.next_req
        cc = self.cluster_config
        apply_decision(st, dec)
        n_emergency = 0
        if self.config.uses_safety_layer:
            # the agent decides once per epoch; at the other 60-s decision points the emergency scale-out
            # of Base and NeuScale (the same function) acts on the agent's targets, as run_policy does
            spans = [sim.advance(cc.check_s)]
            cap = int(self.config.max_group_vpods)
            for _ in range(round(cc.epoch_s / cc.check_s) - 1):
                if emergency_possible(sim, st.targets):
                    em = emergency_decision(sim, sim.observe(), st.targets)
                    n_emergency += len(em.targets)
                    capped_em = capped(dict(em.targets), cap)
                    st.targets.update(capped_em)
                else:  # nothing the emergency layer could act on: no observation needed
                    sim.skip_observation()
                    capped_em = {}
                if capped_em:  # an empty decision only reconciles, which the advance does first at the same instant
                    sim.apply(ScalingDecision(capped_em))
                spans.append(sim.advance(cc.check_s))
        else:
            spans = [sim.advance_epoch()]
        flows, st.late_prev = raw_flows(sim, spans, int(sim.next_req - n0), st.late_prev)
        r = reward(self.config, self.reward_scale, st.base_flows, flows, st.t)
        st.t += 1
        st.slo_satisfaction = 1.0 - flows["slo_violation_pct"] / 100.0
        st.slo_miss_share = flows["slo_misses"] / max(flows["arrived"], 1)
        st.last_ctx = sim.observe()
        truncated = st.t >= self.horizon
        st.pending = self.action_type.observed(st, truncated)
        self._update_reference()
        info = state_info(st)
        info.update(flows, action_adjusted=dec.adjusted, emergency_scaleouts=n_emergency)
        return self._obs(st.last_ctx), float(r), False, truncated, info

    # ------------------------------------------------------------------------------------------ actions
    def action_masks(self) -> NDArray[np.bool_]:
        """Valid values per action dimension, concatenated in ``action_space`` order (sb3-contrib's
        MultiDiscrete layout); never all-false per dimension. Residual mode: a group whose reference
        target is 0 vPods (no NeuScale group in its length range) only allows 0 (no change)."""
        return self.action_type.mask(self.state)

    def _check_action(self, action: Any) -> tuple[NDArray[np.int64], bool]:
        """``action`` validated (ActionError) and adjusted where masked: (int64 action, whether adjusted)."""
        return self.action_type.check(self.state, action)

    def _update_reference(self) -> None:
        """Reference target vPods per env group: NeuScale's decision for the next epoch (residual mode;
        its warm start before the first decision), or the heuristic's counts (absolute mode)."""
        self.state.ref_counts = self.action_type.reference_counts(self.state)

    def count_index(self, n: float) -> int:
        """Index of the smallest count level >= n (the largest level when n exceeds them all)."""
        return count_index(self.state, n)

    def heuristic_action(self) -> NDArray[np.int64]:
        """A reference action from the last observation: best fit per group, N_pod = ceil(R_peak / T_pod)
        on the window's peak rate (NeuScale's count rule without its x2 / ÷2 limits or coalescing); at t = 0
        the warm-start sizing on the first 10 minutes of arrivals."""
        if self.state.last_ctx is None:
            raise ActionError("heuristic_action() needs reset() first")
        self.action_type.require_absolute("heuristic_action", "the all-zero action follows the reference (NeuScale)")
        return heuristic_action(self.state)

    def action_from_decision(self, decision: ScalingDecision) -> NDArray[np.int64]:
        """Project a per-bucket :class:`ScalingDecision` (e.g. from ``NeuScalePolicy.decide``) onto the
        env's groups: each group gets the summed vPod count of the decision's groups in its length range
        (rounded up to a count level) on its best fit; unlisted groups keep their current target.
        Absolute mode only (in residual mode the all-zero action is NeuScale's own decision)."""
        self.action_type.require_absolute("action_from_decision", "the all-zero action follows NeuScale's decision")
        return action_from_decision(self.state, decision)

    # ------------------------------------------------------------------------------------------ observation
    def _obs(self, ctx: Observation) -> NDArray[np.float32]:
        return observation(self.state, ctx, self.config.group_state_obs, len(self.obs_fields),
                           self.action_type.option_indices(self.state), self._compiled_obs)

    def render(self) -> str | NDArray[np.uint8] | None:
        if self.render_mode == "rgb_array":
            if self.state.last_ctx is None:
                return None
            return render_rgb(self.state, self._obs(self.state.last_ctx), self.obs_fields)
        if self.render_mode != "ansi":
            return None
        return render_text(self.state, self.cluster_config.model, self.action_type.option_indices(self.state))

    # ------------------------------------------------------------------------------------------ rewards
    def per_step_reward_bound(self) -> float:
        """B such that -B <= reward <= B on every step of the current episode (module docstring, **Bounds**);
        the same accessor as the geo and pd envs'. Needs ``reset()``: B depends on the drawn scenario."""
        bound = getattr(self, "reward_bound", None)
        if bound is None:
            raise ActionError("per_step_reward_bound() needs an episode: call reset() first")
        return float(bound)

    def run_baseline(self, policy: str, seed: int | None = None) -> dict[str, Any]:
        """Run a :mod:`servegym.baselines.npu` policy on exactly the episode ``reset(seed=seed)`` produces.

        ``policy``: one of ``BASELINES`` (``base``, ``neuscale``: their own decision loop every
        ``check_s`` = 60 s with their own warm start, :func:`~servegym.baselines.npu.run_policy`;
        ``ideal``: the §5.1 oracle, :func:`~servegym.baselines.npu.ideal_metrics`, which uses true
        lengths; ``hindsight``: the hindsight provisioning plan, :mod:`servegym.baselines.npu_hindsight`, which knows
        the episode's future demand and drives the same decision loop). The env is reset with ``seed`` (so the workload and :attr:`simulation_seed` are the
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
            raise choice_error("policy", policy, BASELINES)
        self.reset(seed=seed)
        return baseline_episode(self._episode(), policy, seed, self.reward_scale, self.state.base_flows)
