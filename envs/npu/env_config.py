"""Configuration of :class:`~servegym.envs.npu.env.NPUAutoscaleEnv`: :class:`NPUEnvConfig` and the env's named constants
(count levels, action and reward modes, the residual steps, the baselines it runs)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from servegym.envs.npu.scenarios import SPLIT_FIELDS, SPLIT_MODELS, SPLIT_SHIFT_TRACE
from servegym.envs.npu.sim.catalog import MODELS, VERSIONS
from servegym.envs.npu.sim.cluster import (
    ClusterConfig,
)
from servegym.envs.npu.sim.dse import OBJECTIVES
from servegym.envs.npu.sim.fluid import FIDELITIES
from servegym.envs.npu.sim.workloads import (
    BURSTY_BASE_RPM,
    TABLE4_RATE_RPM,
    WORKLOADS,
)

from servegym.errors import (
    MAX_EXPECTED_REQUESTS,
    MAX_REQUEST_CEILING,
    ConfigError,
    check_choice,
    check_field_types,
    check_range,
    check_request_count,
    choice_error,
    known_overrides,
)
from servegym.splits import check_split, check_track, splits_of, tracks_of

MAX_EPISODE_BYTES = 2 * 2**30
"""The estimated peak memory (:func:`estimated_peak_bytes`) above which a config is refused unless its
``max_expected_requests`` is raised from the default (which says: this many requests, and their memory, are
meant). Why: an episode's whole workload is built up front; ``{"hours": 168}`` (the longest allowed) at Table 4's
rate took 24 s and 4.6 GB in ``gym.make``; with this limit the default split allows up to ~60 h."""
_BASE_BYTES = 300 * 2**20
"""Measured peak of a short episode (0.5 h): the interpreter, the libraries and a model's catalog (233-281 MB)."""
_BYTES_PER_REQUEST = {True: 280.0, False: 100.0}
"""Peak bytes per expected request, named split (True) or fixed scenario (False), measured on one core with
``/usr/bin/time`` (ru_maxrss) of ``gym.make`` + ``reset``: a split's peak grew 26.4 MB per hour from 48 to 168 h
at ~100k requests/h (Table 4's rate; a 2024 trace day is busier than the week's mean, and the draws' workload
cache holds two); a fixed scenario at 1,667 requests/min 9.4 MB per hour (418 MB at 24 h, 871 MB at 72 h)."""


def estimated_peak_bytes(cfg: NPUEnvConfig) -> tuple[float, float]:
    """(expected requests, estimated peak bytes) of one of ``cfg``'s episodes: its rate (a named split's mean
    drawn rate, Table 4's for the split's trace) x ``hours``, at the measured bytes per request."""
    if cfg.split is not None:
        rate = TABLE4_RATE_RPM[SPLIT_SHIFT_TRACE.get(cfg.split, "azure")]
    else:
        rate = cfg.rate_rpm if cfg.rate_rpm is not None else TABLE4_RATE_RPM.get(cfg.trace, BURSTY_BASE_RPM)
    requests = rate * 60.0 * cfg.hours
    return requests, _BASE_BYTES + _BYTES_PER_REQUEST[cfg.split is not None] * requests


DEFAULT_COUNT_LEVELS: tuple[int, ...] = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
"""vPod count targets an action can pick per group (roughly geometric, so one dimension spans 0-64)."""
WARM_WINDOW_S = 600.0
"""The initial deployment is sized on the first 10 minutes of arrivals (as the baselines' warm start)."""
LOG_MAX_TOKENS = math.log1p(float(1 << 20))

ACTION_MODES: tuple[str, ...] = ("absolute", "residual")
"""``action_mode`` values: absolute per-group targets (the original mode), or changes around NeuScale's decision."""
REWARD_MODES: tuple[str, ...] = ("oracle", "base")
"""``reward_mode`` values: objective per the Ideal oracle's mean epoch (the original), or relative to Base per epoch."""
RESIDUAL_REFERENCES: tuple[str, ...] = ("neuscale", "base")
"""``reference`` values: the policy whose decision the residual mode changes (the paper's NeuScale, or Base,
the strongest npu baseline on the validation split; servegym.agents.protocol.YARDSTICKS)."""
RESIDUAL_STEPS: tuple[int, ...] = (0, 1, -1, 2, -2)
"""Count-level change of a residual action value (value 0 = follow the reference, so all-zero reproduces it)."""

GROUP_STATE_OBS: tuple[str, ...] = ("bucket", "range")
"""``group_state_obs`` values: where a group's alive/ready/util/queue/per-version entries are read -- at the group's
own length bucket (the original), or summed over every bucket the group covers (where the residual mode's
reference keeps its vPods: NeuScale's groups sit at their own buckets inside the env group's range)."""

BASELINES: tuple[str, ...] = ("base", "neuscale", "ideal", "hindsight")
"""Policies :meth:`NPUAutoscaleEnv.run_baseline` runs on the env's episode (servegym.baselines.npu; ``hindsight``:
the hindsight provisioning plan of servegym.baselines.npu_hindsight, which knows the episode's future demand)."""


@dataclass(frozen=True)
class NPUEnvConfig:
    """Configuration of :class:`NPUAutoscaleEnv` (units in names; see the module docstring).

    ``quota_chips``: chips per version (absent/None = unlimited); ``versions``: chip versions the DSE
    may use; ``phase_versions``: chip versions each phase may use, e.g. ``{"prefill": ["NPU-D"],
    "decode": ["NPU-C"]}`` (None = all of ``versions``; see :class:`ClusterConfig`); ``n_candidates``: Pareto candidates per group (the action's configuration choices besides
    the per-version fail-overs).
    """

    #: the values of each string field, which a value of another type is told (errors.check_field_types)
    FIELD_CHOICES: ClassVar[dict[str, Any]] = {
        "model": MODELS, "trace": WORKLOADS, "objective": OBJECTIVES, "split": lambda: splits_of("npu"),
        "action_mode": ACTION_MODES, "reference": RESIDUAL_REFERENCES, "reward_mode": REWARD_MODES,
        "group_state_obs": GROUP_STATE_OBS, "fidelity": FIDELITIES, "track": lambda: tracks_of("npu")}

    model: str = "Llama-3-70B"
    trace: str = "azure"  # one of servegym.envs.npu.sim.workloads.WORKLOADS
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
    track: str | None = None  # stress track over a base split or None (servegym.envs.npu.tracks: versions, quotas)
    split_models: tuple[str, ...] = SPLIT_MODELS  # models a named split draws from (uniformly)
    action_mode: str = "absolute"  # one of ACTION_MODES (see the module docstring)
    residual_options: bool = False  # residual mode: also choose each group's configuration (default: best fit)
    reference: str = "neuscale"  # residual mode: the policy the all-zero action reproduces (RESIDUAL_REFERENCES)
    reward_mode: str = "oracle"  # one of REWARD_MODES: normalize by the oracle, or relative to Base per epoch
    group_state_obs: str = "bucket"  # one of GROUP_STATE_OBS: the group's own bucket (original) or its whole range
    safety_layer: bool | None = None  # emergency scale-out between epochs (None: on in residual mode only)
    max_group_vpods: int = 1024  # cap on any simulator group's vPod target (bounds the reward)
    fidelity: str = "fluid"  # simulator: "fluid" (per-interval aggregates, the default) or "request" (every request)

    def __post_init__(self) -> None:
        check_field_types(self)
        object.__setattr__(self, "model", MODELS.resolve(self.model))  # canonical spelling (servegym.names)
        check_split("npu", self.split)
        check_track("npu", self.track, self.split)
        if self.track is not None:
            from servegym.envs.npu.tracks import track_versions

            object.__setattr__(self, "versions", track_versions(self, VERSIONS))  # frozen: part of the config
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
        check_choice("trace", self.trace, WORKLOADS)
        check_choice("objective", self.objective, OBJECTIVES)
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
        requests, peak = estimated_peak_bytes(self)
        if peak > MAX_EPISODE_BYTES and self.max_expected_requests == MAX_EXPECTED_REQUESTS:
            per_hour = (peak - _BASE_BYTES) / self.hours
            # whole hours when an hour fits (easier to read), else whole epochs (1/12 h), the shortest being 1/12
            epochs = max(math.floor((MAX_EPISODE_BYTES - _BASE_BYTES) / per_hour * 12.0), 1)
            longest = str(epochs // 12) if epochs >= 12 else f"{epochs}/12"
            raise ConfigError(
                f"hours = {self.hours:g} builds ~{requests / 1e6:.1f}M requests up front, an estimated "
                f"{peak / 2**30:.1f} GiB; allowed: hours in [1/12, {longest}] at this rate (<= "
                f"{MAX_EPISODE_BYTES / 2**30:g} GiB), or raise max_expected_requests to accept the memory")
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
        check_choice("action_mode", self.action_mode, ACTION_MODES)
        check_choice("reward_mode", self.reward_mode, REWARD_MODES)
        for name in ("residual_options",):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ConfigError(f"{name} = {getattr(self, name)!r}; allowed: true or false")
        if self.reference not in RESIDUAL_REFERENCES:
            raise choice_error("reference", self.reference, RESIDUAL_REFERENCES)
        if self.reference != "neuscale" and self.action_mode != "residual":
            raise ConfigError(f"reference = {self.reference!r} needs action_mode = 'residual' (the absolute mode "
                              "has no reference to change)")
        if self.action_mode == "residual" and not self.warm_start:
            raise ConfigError("warm_start = False needs action_mode = 'absolute': the residual mode follows "
                              "its reference, which starts from its warm start (run_policy)")
        if self.safety_layer is not None and not isinstance(self.safety_layer, (bool, np.bool_)):
            raise ConfigError(f"safety_layer = {self.safety_layer!r}; allowed: null (on in residual mode), true "
                              "or false")
        check_choice("fidelity", self.fidelity, FIDELITIES)
        check_choice("group_state_obs", self.group_state_obs, GROUP_STATE_OBS)
        mg = self.max_group_vpods
        if isinstance(mg, bool) or not isinstance(mg, (int, np.integer)) or not max(lv) <= mg <= 100_000:
            raise ConfigError(f"max_group_vpods = {mg!r}; allowed: an integer in [max(count_levels) = {max(lv)}, "
                              "100000]")
        self.cluster_config()  # validates model, slo_factor, osl_accuracy, quota, versions, phase_versions,
        # n_candidates

    def cluster_config(self, model: str | None = None) -> ClusterConfig:
        """The simulator settings of this env (5-min epochs, 60-s checks, 5-s sub-steps) for ``model``
        (default: the ``model`` field); on a track, the model's quota (servegym.envs.npu.tracks)."""
        from servegym.envs.npu.tracks import track_quota

        model = self.model if model is None else model
        quota = track_quota(self.track, MODELS.resolve(model)) if self.track is not None else (
            None if self.quota_chips is None else dict(self.quota_chips))
        return ClusterConfig(model=model, objective=self.objective, slo_factor=self.slo_factor,
                             osl_accuracy=self.osl_accuracy, quota_chips=quota,
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
