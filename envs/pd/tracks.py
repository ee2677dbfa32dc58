"""The pd stress tracks (``track`` config key; :data:`servegym.splits.FAMILY_TRACKS` ``["pd"]``): the config
fields each track sets and the forecast it gives.

A track keeps its base split's days, draws and arrival seeds (train, validation and test stay disjoint) and sets
a few fields of :class:`~servegym.envs.pd.env_config.PDEnvConfig`. They are set in the config itself, so
``env.config`` (and every baseline and the oracle, which read it) sees the track's values; a field a track sets
may be left at its default or given the track's own value (which makes applying a track idempotent), anything
else is a one-line ConfigError. Units in the field names.

- ``stress-delay``: the split's days at twice the default peak rate (28 req/s), the plotted per-minute band at
  full amplitude (burstiness 1), a 300-s instance start-up delay, a 12-GPU budget, a persistence forecast in the
  observation (shift-forecast's) instead of the exact rates and the day's level so far (a 30-period moving average
  of observed / smooth rate). Why: an instance ordered now serves in 5 min, so a rule must provision ahead, and
  the persistence forecast carries the last minute's i.i.d. draw into the next 6: the persistence rules need a
  low utilization target, the reactive HPA (target tuned to 0.8) reaches the budget on a few days, while the
  day's expected rate (its smooth shape and band) is the best causal forecast: the level entries let a policy and
  the rules estimate it from the day's history
- ``stress-long-delay``: stress-delay with a 600-s instance start-up delay (a model pulled from remote
  storage). Why: 10 periods of lead make the carried per-minute draw and the reactive rules' lag costlier than
  at 300 s (a 10-episode validation scout put the expected-rate rule 4-7 % below the tuned HPA at about equal
  SLO; 30 validation and 30 test episodes measure less)

``stress-delay`` (why: :data:`~servegym.splits.FAMILY_TRACKS`): the base splits' draws at ``peak_rate_rps`` 28
(twice the default 14; the splits' x U[0.85, 1.15] draw still applies), ``burstiness`` 1 (each minute uniform in
the plotted band), ``startup_delay_s`` 300 (an instance serves 5 periods after it is ordered; the oracle is exact
up to 11), ``gpu_budget`` 12, the persistence forecast of ``shift-forecast``
(:func:`~servegym.envs.pd.sim.scenario.persistence_forecast`) and ``rate_ema_periods`` 30 (the observation's
level entries, :data:`~servegym.envs.pd.observations.LEVEL_FIELDS`: the same day-level estimate for the agents and
for the rule fed it, ``min-power+ema:<rho>``, which competes for the strongest). Chosen on validation episodes (8 to scout the load
and budget, 30 to check): at x 2.5 the demand-response caps (5.5 kW, 6.5 kW) push every causal rule to ~2 % SLO
violation while the oracle keeps 0 %; at x 2 every rule plays a full day (none terminated) and the 12-GPU budget
binds only at the reactive rules' peaks (the strongest, ``threshold-hpa:0.8``, reaches 12 GPUs in 4 of 30
validation episodes, 20 periods; the oracle needs at most 9). ``stress-long-delay`` is the same at 600 s (10
periods of lead; the oracle is still exact). Measured headroom: benchmarks/results/headroom.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from servegym.errors import ConfigError

#: Track -> {config field: value}; ``scenario.<field>`` names a field of the nested DayScenario.
TRACK_FIELDS: dict[str, dict[str, Any]] = {
    "stress-delay": {"scenario.peak_rate_rps": 28.0, "scenario.burstiness": 1.0, "startup_delay_s": 300.0,
                     "gpu_budget": 12, "rate_ema_periods": 30.0},
    "stress-long-delay": {"scenario.peak_rate_rps": 28.0, "scenario.burstiness": 1.0, "startup_delay_s": 600.0,
                          "gpu_budget": 12, "rate_ema_periods": 30.0},
}
#: Tracks whose forecast (observation, info, reference, baselines) is the persistence forecast.
PERSISTENCE_FORECAST_TRACKS: tuple[str, ...] = ("stress-delay", "stress-long-delay")


def _get(obj: Any, name: str) -> Any:
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def with_track(cfg: Any, defaults: Any) -> dict[str, Any]:
    """The field values that make ``cfg`` play its ``track`` ({} for no track): ``{"scenario": DayScenario, field:
    value}``. ConfigError if ``cfg`` sets a track field to anything but the default (``defaults``, a
    PDEnvConfig of defaults) or the track's value."""
    if cfg.track is None:
        return {}
    fields = TRACK_FIELDS[cfg.track]
    out: dict[str, Any] = {}
    scen: dict[str, Any] = {}
    for name, value in fields.items():
        have, default = _get(cfg, name), _get(defaults, name)
        if have != default and have != value:
            raise ConfigError(f"{name} = {have!r} is set by track = {cfg.track!r} (to {value!r}); allowed: the "
                              f"default, {value!r}, or no track")
        if name.startswith("scenario."):
            scen[name.split(".", 1)[1]] = value
        else:
            out[name] = value
    if scen:
        out["scenario"] = dataclasses.replace(cfg.scenario, **scen)
    return out


def persistence(split: str | None, track: str | None) -> bool:
    """Whether the episode's forecast is the persistence forecast (a shift-forecast split or such a track)."""
    from servegym.envs.pd.sim.scenario import PERSISTENCE_FORECAST_SPLITS

    return split in PERSISTENCE_FORECAST_SPLITS or track in PERSISTENCE_FORECAST_TRACKS


def forecast_kind(split: str | None, track: str | None) -> str:
    """``"persistence"`` or ``"exact"``: what the episode's forecast is (``info["scenario"]["forecast"]``)."""
    return "persistence" if persistence(split, track) else "exact"
