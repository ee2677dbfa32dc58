"""Configuration of :class:`~servegym.envs.pd.env.PDProvisionEnv`: :class:`PDEnvConfig` (a frozen dataclass,
checked field by field) and the choices of its keys. Units are in the field names; the env's module docstring
says what each key does."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np
from servegym.envs.pd.actions import ACTION_TYPES
from servegym.envs.pd.sim.catalog import PDSystem, paper_system
from servegym.envs.pd.sim.provisioning import (
    REFERENCE_EMA,
    REFERENCE_FORECAST,
    REFERENCE_PAPER,
    parse_reference,
    reference_uses_level,
)
from servegym.envs.pd.sim.scenario import DayScenario, check_split_fields

from servegym.errors import (
    MAX_EXPECTED_REQUESTS,
    MAX_REQUEST_CEILING,
    ConfigError,
    check_choice,
    check_field_types,
    check_range,
    check_request_count,
    known_overrides,
)
from servegym.splits import check_split, check_track, splits_of, tracks_of

OBJECTIVES = ("energy", "carbon", "cost")
MODES = ("fluid", "request")
ACTION_MODES = tuple(ACTION_TYPES)  # "absolute", "residual", "front": one class each in actions.py
ARRIVALS = ("poisson", "mean")


@dataclass(frozen=True)
class PDEnvConfig:
    """Configuration of :class:`PDProvisionEnv` (units in names; see the module docstring)."""

    #: the values of each string field, which a value of another type is told (errors.check_field_types)
    FIELD_CHOICES: ClassVar[dict[str, Any]] = {
        "mode": MODES, "arrivals": ARRIVALS, "objective": OBJECTIVES, "action_mode": ACTION_MODES,
        "reference": (REFERENCE_PAPER, REFERENCE_FORECAST, f"{REFERENCE_FORECAST}:RHO", REFERENCE_EMA,
                      f"{REFERENCE_EMA}:RHO"),
        "split": lambda: splits_of("pd"), "track": lambda: tracks_of("pd")}

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
    backlog_weight: float = 2.0  # reward per unit of min(backlog / backlog limit, 1) at each period's end
    backlog_limit_s: float = 300.0  # terminate when the backlog exceeds this many seconds of peak_rate_rps
    termination_penalty: float | None = None  # charged on termination; None: remaining periods x step bound
    action_mode: str = "absolute"  # "absolute" (n_P, n_D) targets, "residual" or "front" (module docstring)
    residual_levels: int = 2  # residual mode: per-pool change in {-L..L} around the reference
    # the rule every mode's observation reads and the residual mode acts around (module docstring)
    reference: str = "min-power+lookahead"
    # the day's level in the observation (env module docstring): an EMA of observed / smooth rate and its forecast
    rate_ema_periods: float = 0.0  # the EMA's time constant, periods; 0: off (37 entries; the stress tracks: 30)
    front_eps: float = 0.03  # front mode: epsilon of the Pareto front (the paper's App. C value)
    curriculum: tuple[tuple[int, int], ...] = ()  # (episode_steps, episodes) stages; () = full horizon
    random_start: bool = False  # episodes shorter than the scenario start at a uniformly drawn period
    system: PDSystem = field(default_factory=paper_system)
    # Ceiling on the expected requests of a mode="request" episode (peak rate x horizon; the simulator
    # allocates per-request arrays): set it higher explicitly for a larger run.
    max_expected_requests: int = MAX_EXPECTED_REQUESTS
    split: str | None = "train"  # benchmark split reset() draws the day from (module docstring); None: fixed
    track: str | None = None  # stress track over a base split or None (servegym.envs.pd.tracks sets its fields)

    def __post_init__(self) -> None:
        check_field_types(self)
        check_split("pd", self.split)
        check_track("pd", self.track, self.split)
        if self.track is not None:
            from servegym.envs.pd.tracks import with_track

            for name, value in with_track(self, _DEFAULTS).items():
                object.__setattr__(self, name, value)  # frozen: the track's values are part of the config
        check_split_fields(self.scenario, self.split)
        check_choice("mode", self.mode, MODES)
        check_choice("arrivals", self.arrivals, ARRIVALS)
        check_choice("objective", self.objective, OBJECTIVES)
        for name in ("gpu_budget", "max_prefill", "max_decode"):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v:
                raise ConfigError(f"{name} = {v!r}; allowed: an integer")
        check_range("gpu_budget", self.gpu_budget, 2, 512)
        check_range("max_prefill", self.max_prefill, 1, 511)
        check_range("max_decode", self.max_decode, 1, 511)
        check_range("startup_delay_s", self.startup_delay_s, 0.0, 86_400.0)
        check_range("pue", self.pue, 1.0, 3.0)
        # SLO targets: an hour to the first token and a minute per output token are far past any SLO
        check_range("ttft_slo_s", self.ttft_slo_s, 0.0, 3600.0, low_inclusive=False)
        check_range("tpot_slo_s", self.tpot_slo_s, 0.0, 60.0, low_inclusive=False)
        for name in ("objective_weight", "slo_weight", "cap_weight", "backlog_weight"):
            check_range(name, getattr(self, name), 0.0, 1e6)
        check_choice("action_mode", self.action_mode, ACTION_MODES)
        if isinstance(self.residual_levels, bool) or int(self.residual_levels) != self.residual_levels:
            raise ConfigError(f"residual_levels = {self.residual_levels!r}; allowed: an integer in [1, 8]")
        check_range("residual_levels", self.residual_levels, 1, 8)
        check_range("front_eps", self.front_eps, 0.0, 1.0, low_inclusive=False)
        check_range("rate_ema_periods", self.rate_ema_periods, 0.0, 1e6)
        if 0.0 < self.rate_ema_periods < 1.0:
            raise ConfigError(f"rate_ema_periods = {self.rate_ema_periods!r}; allowed: 0 (off) or >= 1 period")
        parse_reference(self.reference)
        if reference_uses_level(self.reference) and not self.rate_ema_periods:
            raise ConfigError(f"reference = {self.reference!r} sizes for the level forecast; allowed with "
                              "rate_ema_periods > 0 (the stress tracks set 30)")
        check_range("backlog_limit_s", self.backlog_limit_s, 0.0, 86_400.0, low_inclusive=False)
        if self.termination_penalty is not None:
            check_range("termination_penalty", self.termination_penalty, 0.0, 1e9)
        if len(self.curriculum) > 1000:
            raise ConfigError(f"curriculum has {len(self.curriculum)} stages; allowed: at most 1000")
        for i, stage in enumerate(self.curriculum):
            if len(stage) != 2 or any(isinstance(x, bool) or int(x) != x for x in stage):
                raise ConfigError(f"curriculum[{i}] = {stage!r}; allowed: (episode_steps, episodes) integers")
            check_range(f"curriculum[{i}] episode_steps", stage[0], 1, 100_000)
            check_range(f"curriculum[{i}] episodes", stage[1], 0, 10**9)
        check_range("max_expected_requests", self.max_expected_requests, 1, MAX_REQUEST_CEILING)
        if self.mode == "request":
            sc = self.scenario
            check_request_count(sc.peak_rate_rps * sc.duration_s, self.max_expected_requests,
                                f"scenario.peak_rate_rps = {sc.peak_rate_rps:g} x {sc.duration_s:g} s "
                                "(period_s x horizon_steps)")
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
        if isinstance(overrides.get("initial_deployment"), list):  # JSON lists; anything else is type-checked
            overrides["initial_deployment"] = tuple(overrides["initial_deployment"])
        cur = overrides.get("curriculum")
        if cur is not None:
            if not isinstance(cur, (list, tuple)) or not all(isinstance(st, (list, tuple)) for st in cur):
                raise ConfigError(f"curriculum = {cur!r}; allowed: a list of (episode_steps, episodes) pairs")
            overrides["curriculum"] = tuple(tuple(stage) for stage in cur)
        return cls(**overrides)


_DEFAULTS = PDEnvConfig()  # the values a track field may keep besides the track's own (tracks.with_track)


def with_id_action_mode(config: PDEnvConfig | dict[str, Any] | None, cfg: PDEnvConfig, action_mode: str | None
                        ) -> PDEnvConfig:
    """``cfg`` under the registered id's ``action_mode`` (None: as configured); ConfigError if ``config`` asked
    for another mode."""
    if action_mode is None:
        return cfg
    asked = config.get("action_mode") if isinstance(config, dict) else (
        cfg.action_mode if isinstance(config, PDEnvConfig) and cfg.action_mode != "absolute" else None)
    if asked is not None and asked != action_mode:
        raise ConfigError(f"action_mode = {asked!r} in config, but this id's action_mode is "
                          f"{action_mode!r}; allowed: {action_mode!r} or use servegym/PDProvision-v0")
    return replace(cfg, action_mode=action_mode)


def curriculum_stage(cfg: PDEnvConfig, episode: int) -> int:
    """The curriculum stage of the ``episode``-th reset (0-based) of an env instance."""
    left = int(episode)
    for i, (_, n_eps) in enumerate(cfg.curriculum):
        if left < n_eps:
            return i
        left -= n_eps
    return max(len(cfg.curriculum) - 1, 0)


def pinned_stage(cfg: PDEnvConfig, options: dict[str, Any] | None) -> int | None:
    """The stage ``reset(options={"curriculum_stage": i})`` pins (None if none); ConfigError if out of range."""
    if not options or options.get("curriculum_stage") is None:
        return None
    st = options["curriculum_stage"]
    n = len(cfg.curriculum)
    if isinstance(st, bool) or not isinstance(st, (int, np.integer)) or not 0 <= st < max(n, 1):
        raise ConfigError(f"options['curriculum_stage'] = {st!r}; allowed: an integer in [0, {max(n - 1, 0)}]"
                          + ("" if n else " (no curriculum configured)"))
    return int(st)

