"""Configuration of the geo envs: :class:`GeoEnvConfig`, its constants and :func:`resolve_config`.

What the keys do to an episode (reward, splits and their shifts, the reward bound) is described in
:mod:`servegym.envs.geo.env_common`, the module the two envs share.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from servegym.envs.geo.sim.config import LOADS, PAPER_MODELS, PRESETS, GeoConfig, preset

from servegym.errors import ConfigError, check_choice, check_field_types, check_range, known_overrides
from servegym.splits import check_split, check_track, splits_of, tracks_of

#: ``shift-load``: arrival rate multiplier.
SHIFT_LOAD_FACTOR = 1.5
#: ``shift-stale``: provisioner poll period (s) of the stale-snapshot shift.
SHIFT_STALE_POLL_S = 5.0
#: Stress tracks (``GeoEnvConfig.track``; :data:`servegym.splits.FAMILY_TRACKS`): the GeoConfig fields each sets.
TRACK_FIELDS: dict[str, dict[str, Any]] = {
    "stress-load": {"poll_interval_s": SHIFT_STALE_POLL_S},  # and rate_rps x SHIFT_LOAD_FACTOR (geo_config)
    "stress-osl": {"poll_interval_s": SHIFT_STALE_POLL_S, "osl_mode": "predicted"},
}
#: ``shift-topology``: the same-shape twin of each training topology (``servegym.envs.grid``).
SHIFT_TOPOLOGY: dict[str, str] = {"geo-small": "geo-small-shift", "geo-mini": "geo-mini-shift"}
#: Grid hours after a drawn start day's midnight that must lie inside the split's days, besides the
#: episode's own span on the CI clock: the start hour (up to 23 h) and one hour of slack.
START_MARGIN_H = 24

#: Reward modes (``GeoEnvConfig.reward``).
REWARD_MODES = ("dense", "poll")
#: Upper bound of ``max_steps`` (routing decisions per episode).
MAX_STEPS = 1_000_000_000
#: Action modes (``GeoEnvConfig.action_mode``).
ACTION_MODES = ("direct", "residual")
#: When GeoRoute-v0's residual mode places a request (``GeoEnvConfig.decide_at``).
DECIDE_AT = ("arrival", "window")


def _reference_specs() -> tuple[str, ...]:
    from servegym.envs.geo.reference import REFERENCE_SPECS  # imported when needed, as __post_init__ does

    return REFERENCE_SPECS


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
            ``"milp"`` (default), ``"ilp"``, ``"iter-ilp"``, ``"moer"`` or ``"greedy:<alpha>"``, or
            GeoRoute-v0 only, one of them as a causal rule (``"iter-ilp+dr:1.5"``: a dead-reckoned snapshot
            counting the placements made, and/or ``+bc``; :mod:`servegym.baselines.geo.causal`)
            (GeoRouteWindow-v0: a plain window scheduler only).
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
        track: a stress track laid over a base split (module docstring of ``env_common``, "Stress tracks"):
            ``"stress-load"``, ``"stress-osl"``, or ``None`` (default: none). It sets GeoConfig fields itself
            (:data:`TRACK_FIELDS`; ``stress-load`` also scales the rate), so ``geo`` may not set them.

    Stale snapshots: the provisioner's period is ``geo={"poll_interval_s": Δp}`` (the paper's 1 s
    by default; every decision of a period sees the snapshot taken at its start, so a larger Δp
    means staler state, which the ``age`` feature and the residuals expose).

    The envs run the grid clock in ``geo.ci_mode = "hourly"`` unless ``geo`` sets ``"fixed"``.
    """

    #: the values of each string field, which a value of another type is told (errors.check_field_types)
    FIELD_CHOICES: ClassVar[dict[str, Any]] = {
        "preset": PRESETS, "model": PAPER_MODELS, "load": LOADS, "reward": REWARD_MODES, "action_mode": ACTION_MODES,
        "reference": _reference_specs,
        "decide_at": DECIDE_AT, "split": lambda: splits_of("geo"), "track": lambda: tracks_of("geo")}

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
    track: str | None = None

    def __post_init__(self) -> None:
        check_field_types(self)
        check_split("geo", self.split)
        check_track("geo", self.track, self.split)
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
                              "reference 'milp', 'ilp' or 'iter-ilp' (or one of them + '+dr[:<k>]' and/or '+bc')")
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
        for key in TRACK_FIELDS.get(self.track or "", {}):
            if key in self.geo:
                raise ConfigError(f"geo.{key} = {self.geo[key]!r} is set by track = {self.track!r}; allowed: no "
                                  f"geo.{key}, or no track")
        if self.split is not None and self.geo.get("ci_start") is not None:
            raise ConfigError(f"geo.ci_start = {self.geo['ci_start']!r} is drawn by split = {self.split!r}; "
                              "allowed: no geo.ci_start, or split = None for a fixed start")
        self.geo_config("request")  # validates the GeoConfig overrides (and the split's shift) now, not at reset

    def geo_config(self, decision_mode: str) -> GeoConfig:
        """The simulator scenario for ``decision_mode`` (``"request"`` or ``"window"``), with the split's
        shift applied (topology, rate, poll period); the per-episode start hour is drawn at reset."""
        geo = {"ci_mode": "hourly", **self.geo}
        cfg = preset(self.preset, model=self.model, load=self.load, decision_mode=decision_mode, **geo)
        if self.track is not None:
            cfg = cfg.replace(**TRACK_FIELDS[self.track])
            if self.track == "stress-load":
                cfg = cfg.replace(rate_rps=cfg.rate_rps * SHIFT_LOAD_FACTOR)
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
