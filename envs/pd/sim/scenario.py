"""The day scenario of ``servegym/PDProvision-v0``: offered load, length mix and grid signals per period.

Everything here is a function of the :class:`DayScenario` config (and, for the per-minute spread, of the
episode seed); the environment only reads the arrays of :class:`DaySignals`. Local time of day 0 h is the
start of the episode. Units: rates in req/s, power in W, carbon intensity in gCO2eq/kWh, prices in USD/kWh.

**Load** (req/s): a real day of the 2024 Azure LLM inference week (Stojkovic et al., "DynamoLLM", HPCA 2025;
CC-BY 4.0; the series of :mod:`servegym.envs.azure_week`, digitized from the dataset's own plots one pixel
column, about 7.2 min, at a time: per column the low, median and high point of the drawn per-minute line).

* **Which day.** ``pattern_trace`` picks the trace -- ``azure-conv`` (conversation, Sun 12 - Sat 18 May 2024),
  ``azure-code`` (coding, Fri 10 - Thu 16 May) or ``azure`` (both summed; the default day) -- and
  ``pattern_day`` the UTC date (default Mon 2024-05-13, which both traces cover). The day's UTC clock is the
  scenario's local clock (as the grid series', whose local time 0 is 00:00 UTC), so the episode starting at
  ``start_hour`` replays the day from that hour. **Past midnight the day wraps to its own 00:00**: an episode
  never reads another day (a split owns its days), and a horizon over a day repeats the whole day; nothing
  shorter than a day is ever tiled. The seam is a step at local midnight, from the day's 23:59 median to its
  own 00:00 median: x 0.64 to x 1.64 over the week's days (x 1.64 on conversation Fri 17, whose evening
  falls towards the weekend), a step a forecast sees coming.
* **Smooth shape.** Minute m's smooth rate is the column median (``rate_mid``) linearly interpolated between
  the centres of the day's own columns (held flat over the 3.6 min beyond the first and last centre, so no
  minute reads the neighbouring day), times ``peak_rate_rps`` / the trace's **week peak** (the largest median
  over its seven days; ``azure``: of the summed medians over the five days both traces cover). So
  ``peak_rate_rps`` stays the scale the fleet and the GPU budget are sized for: a weekday peaks at 0.75-1.0 of
  it (mean 0.33-0.42 on coding, 0.59-0.70 on conversation; troughs 0.08 and 0.32-0.49), a weekend day at
  0.23 (coding) and 0.51-0.53 (conversation), so the weekend keeps its own lower level. ``base_rate_rps`` is
  the per-period mean of the smooth rate.
* **Per-minute spread** (``burstiness`` b). Minute m's rate is the smooth rate plus b x (u_m - median), u_m drawn
  uniformly between the band's low and high edge at m (both interpolated as the median), independently per
  minute and per trace from the episode seed. The plot joins the trace's per-minute values with a line, so a
  column's band is the spread of the about seven minutes it holds (an upper bound: it includes the line's drawn
  thickness, at most the narrowest band, 99 req/min on coding and 175 on conversation, against medians of 381
  and 539; the band's width is 0.19-0.46 of the median on a day's average); their order within the column is
  not in the plot, hence the independent draws. b = 1 keeps the band as drawn, b = 0 the smooth shape; the
  default 0.25 keeps a quarter (base splits; ``shift-burst`` plays b = 1). A period's mean rate is the integral of the per-minute rates over it (``period_s`` need not be a
  minute). The per-minute draws are fresh per episode and predictable from nothing a policy sees.
* Arrivals per period are drawn by the environment (Poisson counts by default).
* **Legacy** (``pattern_trace = "legacy-azure-2023"``, used by no split and not the default): the former day,
  ``peak_rate_rps * D(t) * (1 + burstiness * (f[(k + phase) mod K] - 1))`` with ``D`` the **illustrative**
  24-value profile ``diurnal`` (linear between hour midpoints, wrapped; trough 0.35 at 04:00-05:00) and ``f`` the
  per-period rate of the 2023 one-hour Azure traces (``azure-conv`` + ``azure-code``, Patel et al., Splitwise,
  ISCA 2024), mean 1, **tiled** over the day (about 57 min long; ``phase`` drawn from the episode seed when
  ``random_phase``, each value held ``trace_stretch`` periods). A policy with memory of the tile predicts it;
  it is kept only to reproduce results measured before the real days. ``diurnal``, ``random_phase`` and
  ``trace_stretch`` act on it only.

**Length mix.** Requests are a mixture of the ``azure-code``, ``azure-conv`` and ``mooncake`` length
distributions (the App. B.4 input filters apply). The request shares follow ``mix_knots`` -- (hour, w_code,
w_conv, w_mooncake) rows, linearly interpolated and wrapped -- and are held constant over blocks of
``mix_block_s`` (default 15 min), so a day has at most 96 distinct mixes whose moments and capacity tables
are computed once. The default schedule (coding-heavy working hours, conversation-heavy evening,
long-context share highest at night) is **illustrative**. Mixture moments are exact:
E[l_in^k] and E[l_out] are share-weighted, Var(l_out) and Cov(l_in, l_out) follow from the mixed second
moments.

**Grid signals.**

* Carbon intensity: the hourly series of zone ``ci_zone`` from :func:`servegym.envs.grid.load_ci` (Electricity
  Maps LCA intensity; see ``envs/data/grid/PROVENANCE.md``), starting at UTC hour ``ci_start_utc``. The default,
  NL from 2022-06-21 22:00 UTC, is the Dutch grid over 22 June 2022 local time (CEST = UTC+2), with a 31 %
  solar dip at midday.
* Power cap (facility W, IT power x PUE): ``power_cap_w`` outside events; each ``dr_events`` row
  (start hour, duration h, cap W) lowers it while active (the lowest active cap wins). The two default
  demand-response events (14:00-16:00 at 5.5 kW, 19:00-20:00 at 6.5 kW) are **illustrative** curtailment requests
  of the kind the paper's introduction motivates (grid operators asking large loads to curtail).
* Price (USD/kWh): ``price_usd_per_kwh``, 24 hourly values of local time. We ship no price data; the default
  is an **illustrative** time-of-use tariff (0.08 off-peak 22:00-08:00, 0.12 shoulder, 0.20 on-peak
  16:00-21:00), not any real utility's rates. Pass your own 24 values.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray
from servegym.envs.pd.sim.day_shape import (
    WEEK_TRACES,
    day_band,
    day_peak,
    horizon_minutes,
    minute_rates,
    period_means,
    week_days,
)

from servegym.errors import (
    MONTH_S,
    ConfigError,
    check_field_types,
    check_range,
    choice_error,
    known_overrides,
)

#: Length-mix components, in the column order of ``mix_knots``.
MIX_COMPONENTS: tuple[str, ...] = ("azure-code", "azure-conv", "mooncake")

#: The legacy rate pattern: the 2023 one-hour Azure traces tiled over the illustrative diurnal profile.
LEGACY_PATTERN = "legacy-azure-2023"
#: Sources of the day's rate shape: a real day of the 2024 week (``azure`` = coding + conversation, the default
#: day; ``azure-conv``, ``azure-code`` one trace each, what the splits draw), or the legacy tiling.
PATTERN_TRACES: tuple[str, ...] = (*WEEK_TRACES, LEGACY_PATTERN)
#: The default day: Monday 13 May 2024, a weekday both traces cover (the first of the training weekdays).
DEFAULT_PATTERN_DAY = "2024-05-13"

#: Illustrative diurnal profile of the legacy pattern (module docstring): hourly multipliers, local hours 0..23.
DEFAULT_DIURNAL: tuple[float, ...] = (
    0.50, 0.44, 0.39, 0.36, 0.35, 0.36, 0.41, 0.50, 0.63, 0.76, 0.87, 0.94,
    0.97, 0.98, 1.00, 0.98, 0.94, 0.88, 0.82, 0.78, 0.74, 0.69, 0.62, 0.56,
)

#: Illustrative length-mix schedule: (local hour, share azure-code, share azure-conv, share mooncake).
DEFAULT_MIX_KNOTS: tuple[tuple[float, float, float, float], ...] = (
    (0.0, 0.10, 0.55, 0.35),
    (6.0, 0.20, 0.55, 0.25),
    (10.0, 0.50, 0.35, 0.15),
    (16.0, 0.45, 0.40, 0.15),
    (20.0, 0.15, 0.60, 0.25),
)

#: Illustrative demand-response events: (start local hour, duration h, facility cap W).
DEFAULT_DR_EVENTS: tuple[tuple[float, float, float], ...] = ((14.0, 2.0, 5_500.0), (19.0, 1.0, 6_500.0))

#: Illustrative time-of-use tariff, USD/kWh per local hour (NOT a real utility's rates).
DEFAULT_TOU_PRICE: tuple[float, ...] = tuple(
    0.20 if 16 <= h < 21 else (0.08 if (h >= 22 or h < 8) else 0.12) for h in range(24))


def _grid_zones() -> dict[str, Any]:
    # imported when needed, as the CI series is (the grid module loads data)
    from servegym.envs.grid import ZONES

    return ZONES


@dataclass(frozen=True)
class DayScenario:
    """Configuration of the provisioning day (units in field names; see the module docstring)."""

    period_s: float = 60.0  # provisioning period (one env step), s
    horizon_steps: int = 1440  # periods per episode (1440 x 60 s = one day)
    peak_rate_rps: float = 14.0  # the week peak of the smooth mean offered rate, req/s (the spread goes above it)
    burstiness: float = 0.25  # share of the band's per-minute spread kept (0 = the smooth day; docstring)
    trace_stretch: int = 1  # legacy only: each 2023 per-period rate is held for this many periods
    random_phase: bool = True  # legacy only: draw the offset into the tiled 2023 pattern from the episode seed
    diurnal: tuple[float, ...] = DEFAULT_DIURNAL  # legacy only: 24 hourly multipliers of peak_rate_rps
    mix_knots: tuple[tuple[float, float, float, float], ...] = DEFAULT_MIX_KNOTS
    mix_block_s: float = 900.0  # the mix is held constant over blocks this long, s
    #: the values of each string field, which a value of another type is told (errors.check_field_types)
    FIELD_CHOICES: ClassVar[dict[str, Any]] = {
        "ci_zone": lambda: sorted(_grid_zones()),
        "ci_start_utc": "a UTC timestamp such as '2022-06-21T22:00:00Z'",
        "pattern_trace": PATTERN_TRACES,
        "pattern_day": "a UTC date of the 2024 Azure week such as '2024-05-13'"}

    ci_zone: str = "NL"  # Electricity Maps zone (servegym.envs.grid.ZONES)
    ci_start_utc: str = "2022-06-21T22:00:00Z"  # UTC hour of local time 0
    start_hour: float = 0.0  # local hour of day of the first period (the CI series starts ci_start_utc + this)
    pattern_trace: str = "azure"  # source of the day's rate shape: see PATTERN_TRACES
    pattern_day: str = DEFAULT_PATTERN_DAY  # UTC date of the 2024 week whose rates the day replays
    power_cap_w: float = 12_000.0  # facility power cap outside demand-response events, W
    dr_events: tuple[tuple[float, float, float], ...] = DEFAULT_DR_EVENTS
    price_usd_per_kwh: tuple[float, ...] = DEFAULT_TOU_PRICE  # 24 hourly values, local time

    def __post_init__(self) -> None:
        check_field_types(self, "scenario.")
        check_range("scenario.period_s", self.period_s, 1.0, 3600.0)
        if int(self.horizon_steps) != self.horizon_steps:
            raise ConfigError(f"scenario.horizon_steps = {self.horizon_steps!r}; allowed: integer in [1, 100000]")
        check_range("scenario.horizon_steps", self.horizon_steps, 1, 100_000)
        # a month of simulated time per episode (the paper provisions one day): the split's calendar days and
        # the CI series are searched for the whole span at reset
        if self.period_s * self.horizon_steps > MONTH_S:
            raise ConfigError(f"scenario.period_s x scenario.horizon_steps = {self.period_s:g} s x "
                              f"{self.horizon_steps} = {self.period_s * self.horizon_steps:.4g} s is out of range; "
                              f"allowed: <= {MONTH_S:g} s (31 days)")
        check_range("scenario.peak_rate_rps", self.peak_rate_rps, 0.0, 10_000.0, low_inclusive=False)
        check_range("scenario.burstiness", self.burstiness, 0.0, 1.0)
        if isinstance(self.trace_stretch, bool) or int(self.trace_stretch) != self.trace_stretch:
            raise ConfigError(f"scenario.trace_stretch = {self.trace_stretch!r}; allowed: integer in [1, 1440]")
        check_range("scenario.trace_stretch", self.trace_stretch, 1, 1440)
        _check_hourly("scenario.diurnal", self.diurnal, 0.0, 10.0)
        if max(self.diurnal) <= 0:
            raise ConfigError("scenario.diurnal: all multipliers are 0; allowed: at least one > 0")
        _check_hourly("scenario.price_usd_per_kwh", self.price_usd_per_kwh, 0.0, 100.0)
        for name, rows, most in (("mix_knots", self.mix_knots, 1440), ("dr_events", self.dr_events, 1000)):
            if len(rows) > most:  # hours of a day: one knot per minute, events of at least ~1.5 min
                raise ConfigError(f"scenario.{name} has {len(rows)} rows; allowed: at most {most}")
        if len(self.mix_knots) < 1:
            raise ConfigError("scenario.mix_knots is empty; allowed: >= 1 row (hour, w_code, w_conv, w_mooncake)")
        for i, row in enumerate(self.mix_knots):
            if len(row) != 1 + len(MIX_COMPONENTS):
                raise ConfigError(f"scenario.mix_knots[{i}] = {row!r}; allowed: (hour, w_code, w_conv, w_mooncake)")
            check_range(f"scenario.mix_knots[{i}] hour", row[0], 0.0, 24.0, high_inclusive=False)
            for w in row[1:]:
                check_range(f"scenario.mix_knots[{i}] share", w, 0.0, 1.0)
            if sum(row[1:]) <= 0:
                raise ConfigError(f"scenario.mix_knots[{i}]: shares sum to 0; allowed: a positive sum")
        hours = [r[0] for r in self.mix_knots]
        if hours != sorted(hours) or len(set(hours)) != len(hours):
            raise ConfigError(f"scenario.mix_knots hours {hours}; allowed: strictly increasing")
        check_range("scenario.mix_block_s", self.mix_block_s, self.period_s, 86_400.0)
        check_range("scenario.start_hour", self.start_hour, 0.0, 24.0, high_inclusive=False)
        if self.pattern_trace not in PATTERN_TRACES:
            raise choice_error("scenario.pattern_trace", self.pattern_trace, PATTERN_TRACES)
        if self.pattern_trace != LEGACY_PATTERN:
            week_days(self.pattern_trace, self.pattern_day)  # a one-line ConfigError off the trace's week
        check_range("scenario.power_cap_w", self.power_cap_w, 0.0, None, low_inclusive=False)
        for i, ev in enumerate(self.dr_events):
            if len(ev) != 3:
                raise ConfigError(f"scenario.dr_events[{i}] = {ev!r}; allowed: (start hour, duration h, cap W)")
            check_range(f"scenario.dr_events[{i}] start hour", ev[0], 0.0, 24.0, high_inclusive=False)
            check_range(f"scenario.dr_events[{i}] duration h", ev[1], 0.0, 24.0, low_inclusive=False)
            check_range(f"scenario.dr_events[{i}] cap W", ev[2], 0.0, None)

    @classmethod
    def from_dict(cls, d: dict) -> DayScenario:
        """Build from a (partial) dict of field overrides; unknown keys raise :class:`ConfigError`."""
        d = known_overrides(d, cls, "scenario field")
        tuple_fields = {"diurnal", "mix_knots", "dr_events", "price_usd_per_kwh"}
        kw = {k: (_to_tuple(v) if k in tuple_fields else v) for k, v in d.items()}
        return cls(**kw)

    @property
    def duration_s(self) -> float:
        return self.period_s * self.horizon_steps


def _to_tuple(v: object) -> object:
    if isinstance(v, (list, tuple, np.ndarray)):
        return tuple(_to_tuple(x) for x in v)
    return v


def _check_hourly(name: str, values: tuple[float, ...], low: float, high: float) -> None:
    if len(values) != 24:
        raise ConfigError(f"{name} has {len(values)} values; allowed: exactly 24 hourly values")
    for i, v in enumerate(values):
        check_range(f"{name}[{i}]", float(v), low, high)


@dataclass(frozen=True)
class DaySignals:
    """Per-period arrays of one scenario (length ``horizon_steps``, except the mix tables, ``band`` and
    ``pattern``)."""

    time_s: NDArray[np.float64]  # start of each period, s from local midnight of day 0
    hour: NDArray[np.float64]  # local hour of day at the period start, [0, 24)
    base_rate_rps: NDArray[np.float64]  # smooth mean rate (the day's medians; legacy: the diurnal profile), req/s
    band: NDArray[np.float64]  # (traces, 3, 1440) the day's low/median/high per minute, req/s (legacy: empty)
    pattern: NDArray[np.float64]  # legacy only: the tiled 2023 per-period pattern, mean 1 (else empty)
    mix_index: NDArray[np.int64]  # index into mix_weights per period
    mix_weights: NDArray[np.float64]  # (n_mixes, 3) request shares of MIX_COMPONENTS
    ci_g_per_kwh: NDArray[np.float64]  # carbon intensity, gCO2eq/kWh
    price_usd_per_kwh: NDArray[np.float64]
    cap_w: NDArray[np.float64]  # facility power cap, W


def episode_rates(scenario: DayScenario, signals: DaySignals, rng: np.random.Generator
                  ) -> tuple[NDArray[np.float64], dict[str, Any]]:
    """The mean offered rate of every period of one episode (req/s) and what was drawn for it, from ``rng``
    (the env's episode stream): a real day draws one uniform per minute and trace (the per-minute spread,
    module docstring); the legacy pattern draws its phase (recorded as ``phase``)."""
    n = signals.base_rate_rps.size
    if scenario.pattern_trace == LEGACY_PATTERN:
        stretch = int(scenario.trace_stretch)
        phase = int(rng.integers(signals.pattern.size * stretch)) if scenario.random_phase else 0
        k = ((np.arange(n) + phase) // stretch) % signals.pattern.size
        factor = np.maximum(1.0 + scenario.burstiness * (signals.pattern[k] - 1.0), 0.0)
        return signals.base_rate_rps * factor, {"phase": phase}
    m0, n_min, first_s = horizon_minutes(scenario.start_hour, scenario.period_s, n)
    u = rng.random((signals.band.shape[0], n_min))
    v = minute_rates(signals.band, m0, n_min, float(scenario.burstiness), u)
    return period_means(v, first_s, scenario.period_s, n), {}


@functools.cache
def azure_rate_pattern(period_s: float) -> NDArray[np.float64]:
    """Legacy: per-period arrival rate of the 2023 azure-conv + azure-code (aligned from each trace's first
    request), mean 1."""
    from servegym.envs.workload import trace_rate_schedule

    conv = trace_rate_schedule("azure-conv", interval_s=period_s)
    code = trace_rate_schedule("azure-code", interval_s=period_s)
    n = min(conv.size, code.size)
    f = conv[:n] + code[:n]
    out = f / f.mean()
    out.setflags(write=False)
    return out


def _hourly_interp(values: tuple[float, ...], hour: NDArray[np.float64]) -> NDArray[np.float64]:
    """Linear interpolation between hour midpoints (h + 0.5), wrapped around midnight."""
    v = np.asarray(values, dtype=float)
    xp = np.arange(-0.5, 25.0, 1.0)  # midpoints of hours -1 .. 24
    fp = np.concatenate([v[-1:], v, v[:1]])
    return np.interp(hour, xp, fp)


def mix_at(knots: tuple[tuple[float, float, float, float], ...], hour: NDArray[np.float64]) -> NDArray[np.float64]:
    """Request shares (rows sum to 1) at local ``hour``, linear between knots and wrapped over 24 h."""
    k = np.asarray(knots, dtype=float)
    xp = np.concatenate([k[-1:, 0] - 24.0, k[:, 0], k[:1, 0] + 24.0])
    w = np.empty((np.size(hour), len(MIX_COMPONENTS)))
    for j in range(len(MIX_COMPONENTS)):
        col = k[:, 1 + j]
        w[:, j] = np.interp(np.asarray(hour, dtype=float) % 24.0, xp,
                            np.concatenate([col[-1:], col, col[:1]]))
    return w / w.sum(axis=1, keepdims=True)


def _ci_series(zone: str, start_utc: str, hours: int) -> NDArray[np.float64]:
    import pandas as pd
    from servegym.envs.grid import load_ci

    series = load_ci(zone)
    try:
        start = pd.Timestamp(start_utc)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"scenario.ci_start_utc = {start_utc!r} is not a timestamp ({exc})") from exc
    start = start.tz_localize("UTC") if start.tzinfo is None else start.tz_convert("UTC")
    start = start.floor("h")
    window = series.loc[start: start + pd.Timedelta(hours=hours - 1)]
    if len(window) != hours:
        raise ConfigError(
            f"scenario.ci_start_utc = {start_utc!r}: zone {zone} has {len(window)} of the {hours} hours needed; "
            f"allowed: a start in [{series.index[0]}, {series.index[-1] - pd.Timedelta(hours=hours - 1)}]")
    return window.to_numpy(dtype=float)


@functools.lru_cache(maxsize=16)
def build_signals(scenario: DayScenario) -> DaySignals:
    """The deterministic per-period arrays of ``scenario`` (cached; the per-minute draws are per episode:
    :func:`episode_rates`)."""
    n = int(scenario.horizon_steps)
    t = np.arange(n) * scenario.period_s
    hour = (t / 3600.0 + scenario.start_hour) % 24.0
    empty = np.zeros(0)
    if scenario.pattern_trace == LEGACY_PATTERN:
        d = _hourly_interp(scenario.diurnal, hour + 0.5 * scenario.period_s / 3600.0)
        base = scenario.peak_rate_rps * d / max(scenario.diurnal)
        band, pattern = np.zeros((0, 3, 0)), azure_rate_pattern(float(scenario.period_s))
    else:
        band = day_band(scenario.pattern_trace, scenario.pattern_day) * scenario.peak_rate_rps
        m0, n_min, first_s = horizon_minutes(scenario.start_hour, scenario.period_s, n)
        base = period_means(minute_rates(band, m0, n_min, 0.0, None), first_s, scenario.period_s, n)
        pattern = empty
    block = np.floor(t / scenario.mix_block_s).astype(np.int64)
    block_hour = ((np.unique(block) + 0.5) * scenario.mix_block_s / 3600.0 + scenario.start_hour) % 24.0
    w_blocks = mix_at(scenario.mix_knots, block_hour)
    weights, inverse = np.unique(np.round(w_blocks, 12), axis=0, return_inverse=True)
    _, block_pos = np.unique(block, return_inverse=True)
    mix_index = np.asarray(inverse).ravel()[block_pos].astype(np.int64)
    # the series starts at the UTC hour of local time 0 of day 0; the episode at local start_hour
    off = scenario.start_hour
    n_hours = int(np.ceil((scenario.duration_s + off * 3600.0) / 3600.0))
    ci_h = _ci_series(scenario.ci_zone, scenario.ci_start_utc, n_hours)
    abs_hour = np.floor(t / 3600.0 + off).astype(np.int64)
    ci = ci_h[abs_hour]
    price = np.asarray(scenario.price_usd_per_kwh, dtype=float)[np.floor(hour).astype(np.int64)]
    cap = np.full(n, float(scenario.power_cap_w))
    for start_h, dur_h, cap_w in scenario.dr_events:
        rel = (hour - start_h) % 24.0
        cap = np.where(rel < dur_h, np.minimum(cap, cap_w), cap)
    arrays = [t, hour, base, band, pattern, weights, mix_index, ci, price, cap]
    for a in arrays:
        a.setflags(write=False)
    return DaySignals(time_s=t, hour=hour, base_rate_rps=base, band=band, pattern=pattern,
                      mix_index=mix_index, mix_weights=weights, ci_g_per_kwh=ci, price_usd_per_kwh=price,
                      cap_w=cap)


# ------------------------------------------------------------------------------------------------ mixtures


@functools.cache
def component_moments(name: str):  # -> WorkloadMoments
    """Moments of one length-mix component (trace-derived, App. B.4 filters; cached per process)."""
    from servegym.envs.pd.sim.workload_moments import parse_workload

    return parse_workload(name)


def mixture_moments(weights: NDArray[np.float64] | tuple[float, ...],
                    components: tuple[str, ...] = MIX_COMPONENTS):  # -> WorkloadMoments
    """Exact moments of the share-weighted mixture of ``components`` (weights normalized to sum 1)."""
    from servegym.envs.pd.sim.workload_moments import WorkloadMoments

    w = np.asarray(weights, dtype=float)
    if w.shape != (len(components),) or not np.all(np.isfinite(w)) or w.min() < 0 or w.sum() <= 0:
        raise ConfigError(f"mixture weights {weights!r}; allowed: {len(components)} shares >= 0 with a positive sum")
    w = w / w.sum()
    ms = [component_moments(c) for c in components]
    m1 = sum(wi * m.in_m1 for wi, m in zip(w, ms, strict=True))
    m2 = sum(wi * m.in_m2 for wi, m in zip(w, ms, strict=True))
    m3 = sum(wi * m.in_m3 for wi, m in zip(w, ms, strict=True))
    m4 = sum(wi * m.in_m4 for wi, m in zip(w, ms, strict=True))
    out = sum(wi * m.out_mean for wi, m in zip(w, ms, strict=True))
    out2 = sum(wi * (m.out_var + m.out_mean**2) for wi, m in zip(w, ms, strict=True))
    inout = sum(wi * (m.cov_in_out + m.in_m1 * m.out_mean) for wi, m in zip(w, ms, strict=True))
    label = "+".join(f"{wi:.2f}*{c}" for wi, c in zip(w, components, strict=True))
    return WorkloadMoments(float(m1), float(m2), float(m3), float(m4), float(out), float(out2 - out**2),
                           float(inout - m1 * out), name=f"mix({label})")


# ------------------------------------------------------------------------------------------------ splits

#: Peak-rate multipliers the base splits draw from (uniform).
SPLIT_RATE_SCALE: tuple[float, float] = (0.85, 1.15)
#: Length trace of each split (its length mix, one component). The lengths keep the 2023 traces' distributions
#: (App. B.4 filters); the day's rate shape comes from SPLIT_PATTERNS' 2024 days, whatever the lengths.
SPLIT_TRACE: dict[str, str] = {"train": "azure-conv", "validation": "azure-conv", "test": "azure-conv",
                               "shift-code": "azure-code", "shift-mooncake": "mooncake",
                               "shift-burst": "azure-conv", "shift-forecast": "azure-conv",
                               "shift-weekend": "azure-conv"}
#: The 2024 traces whose days a split draws its rate shape from (uniformly, then one of the trace's days of the
#: split's day set): both, except shift-code (the coding trace, with azure-code lengths).
SPLIT_PATTERNS: dict[str, tuple[str, ...]] = {"shift-code": ("azure-code",)}
DEFAULT_SPLIT_PATTERNS: tuple[str, ...] = ("azure-code", "azure-conv")
#: The day set of servegym.envs.azure_week.SPLIT_DAYS each split draws from: the base splits their own weekdays
#: (train Mon-Wed 13-15 May, validation Thu 16, test coding Fri 10 / conversation Fri 17), shift-weekend the
#: weekend days (coding Sat 11 / Sun 12, conversation Sun 12 / Sat 18), every other shift the test days.
SPLIT_DAY_SET: dict[str, str] = {"train": "train", "validation": "validation", "test": "test",
                                 "shift-weekend": "weekend"}
#: Splits that keep the band's per-minute spread at its full amplitude (``burstiness`` 1 instead of the
#: configured 0.25) on the test days: each minute's rate uniform in the plotted band (module docstring).
SPLIT_BURSTINESS: dict[str, float] = {"shift-burst": 1.0, "shift-forecast": 1.0}
#: Splits whose day is scaled to its trace's test-day peak (x test-day peak / the drawn day's peak, on top of the
#: peak-rate draw): the weekend at its own level (0.23 of the week peak on coding, 0.51-0.53 on conversation, i.e.
#: 3-8 req/s at the default scale) fits the smallest deployment (1p1d, 8.3 req/s under azure-conv lengths) for most
#: of the day or all of it: static peak and the oracle both played 1p1d all day on reset seeds 0-1 (coding) and 0
#: (conversation), so the split scored nothing. Scaled (x 3.26 coding, x 1.49-1.55 conversation), the shift is the
#: weekend's shape and its wider relative per-minute band (0.45 of the median on coding's weekend against 0.33 on
#: its weekdays; conversation 0.25-0.27 against 0.19-0.22), not its level.
LEVEL_MATCHED_SPLITS: tuple[str, ...] = ("shift-weekend",)
#: Splits whose forecast (observation, info, the reference and every baseline that reads
#: :meth:`~servegym.envs.pd.env.PDProvisionEnv.forecast_rates`) is a persistence forecast
#: (:func:`persistence_forecast`) instead of the scenario's exact mean rates; arrivals are unchanged, so the
#: forecast error is the per-minute spread's persistence residual.
PERSISTENCE_FORECAST_SPLITS: tuple[str, ...] = ("shift-forecast",)
#: Splits whose peak rate is also scaled to the GPU budget: by the ratio of the budget's largest capacity
#: under the split's lengths to that under the train trace's (azure-conv), so the day loads the budget as
#: much as a test day does. Mooncake's long prompts cut the 16-GPU budget's largest capacity from 82.6 to
#: 7.8 req/s (x 0.095), below the drawn peaks of 12-16 req/s: unscaled, every policy and the hindsight
#: oracle itself violate ~35-90 % of the requests, so the split scored nothing. The budget is not raised
#: instead because it sets the action space, which a shift must keep (an agent trained on train plays it).
CAPACITY_SCALED_SPLITS: tuple[str, ...] = ("shift-mooncake",)
#: Fields a named split draws itself (setting them with a split is a ConfigError).
SPLIT_FIELDS: tuple[str, ...] = ("ci_start_utc", "start_hour", "pattern_trace", "pattern_day", "mix_knots")


def check_split_fields(scenario: DayScenario, split: str | None) -> None:
    """ConfigError if ``scenario`` sets a field that the named ``split`` draws (:data:`SPLIT_FIELDS`)."""
    if split is None:
        return
    default = DayScenario()
    if scenario.pattern_trace == LEGACY_PATTERN:
        raise ConfigError(f"scenario.pattern_trace = {LEGACY_PATTERN!r} is a fixed legacy day; allowed with "
                          f"split = None only (split = {split!r} draws real 2024 days)")
    if split in SPLIT_BURSTINESS and scenario.burstiness != default.burstiness:
        raise ConfigError(f"scenario.burstiness = {scenario.burstiness!r} is set by split = {split!r} (to "
                          f"{SPLIT_BURSTINESS[split]:g}); allowed: the default, or another split")
    for name in SPLIT_FIELDS:
        if getattr(scenario, name) != getattr(default, name):
            raise ConfigError(f"scenario.{name} = {getattr(scenario, name)!r} is drawn by split = {split!r}; "
                              f"allowed: the default, or split = None for a fixed scenario")


@functools.cache
def _pd_split_days(zone: str, split: str, hours: float):  # -> pd.DatetimeIndex
    from servegym.envs.grid import load_ci

    from servegym.splits import split_days

    idx = load_ci(zone).index
    return split_days(split, idx[0], idx[-1], window_h=(0.0, 24.0 + float(hours)))


def draw_scenario(base: DayScenario, split: str, rng: np.random.Generator, capacity_scale: float = 1.0
                  ) -> tuple[DayScenario, dict]:
    """The day of one episode of ``split`` (servegym.splits; the env docstring lists the draws) and its record.

    Draws, in order: a grid day of the split from zone ``base.ci_zone``'s series (local time 0 = 00:00 UTC of that
    day, so the CI hour of a period is its local hour in UTC), a local start hour in 0..23, the peak rate
    ``base.peak_rate_rps`` x U(:data:`SPLIT_RATE_SCALE`), a 2024 trace of :data:`SPLIT_PATTERNS` and one of its
    days of the split's day set (:data:`SPLIT_DAY_SET`): the day's rate shape (for :data:`LEVEL_MATCHED_SPLITS` the
    peak rate also x the trace's test-day peak / the drawn day's peak). The length mix is the split's
    trace (:data:`SPLIT_TRACE`) only. The per-minute spread is drawn by the env from the same episode seed.
    ``capacity_scale`` multiplies the peak rate as well (the env passes the budget's capacity ratio for
    :data:`CAPACITY_SCALED_SPLITS`, else 1).
    """
    import pandas as pd
    import servegym.envs.azure_week as azure_week

    days = _pd_split_days(base.ci_zone, split, base.duration_s / 3600.0)
    day = days[int(rng.integers(days.size))]
    start_hour = int(rng.integers(24))
    scale = float(rng.uniform(*SPLIT_RATE_SCALE)) * float(capacity_scale)
    patterns = SPLIT_PATTERNS.get(split, DEFAULT_SPLIT_PATTERNS)
    pattern = patterns[int(rng.integers(len(patterns)))]
    (week_trace,) = WEEK_TRACES[pattern]
    own = azure_week.SPLIT_DAYS[week_trace][SPLIT_DAY_SET.get(split, "test")]
    week_day = int(own[int(rng.integers(len(own)))])
    date = azure_week.day_date(week_trace, week_day)
    level = 1.0
    if split in LEVEL_MATCHED_SPLITS:
        test_date = azure_week.day_date(week_trace, azure_week.SPLIT_DAYS[week_trace]["test"][0])
        level = day_peak(pattern, test_date) / day_peak(pattern, date)
    trace = SPLIT_TRACE[split]
    shares = tuple(1.0 if c == trace else 0.0 for c in MIX_COMPONENTS)
    ci_start = pd.Timestamp(day).strftime("%Y-%m-%dT%H:%M:%SZ")
    burst = SPLIT_BURSTINESS.get(split, base.burstiness)
    scen = dataclasses.replace(base, ci_start_utc=ci_start, start_hour=float(start_hour),
                               peak_rate_rps=round(base.peak_rate_rps * scale * level, 6), pattern_trace=pattern,
                               pattern_day=date, mix_knots=((0.0, *shares),),
                               burstiness=burst)
    record = {"split": split, "ci_day": ci_start[:10], "ci_start_utc": ci_start, "start_hour": float(start_hour),
              "rate_scale": scale, "capacity_scale": float(capacity_scale), "level_scale": level,
              "peak_rate_rps": scen.peak_rate_rps,
              "trace": trace, "pattern_trace": pattern, "pattern_day": scen.pattern_day,
              "day_label": azure_week.day_label(week_trace, week_day), "burstiness": burst,
              "forecast": "persistence" if split in PERSISTENCE_FORECAST_SPLITS else "exact"}
    return scen, record


def persistence_forecast(base_rate_rps: NDArray[np.float64], rates: NDArray[np.float64], k: int, stop: int
                         ) -> NDArray[np.float64]:
    """Mean rates (req/s) of periods ``k .. stop-1`` as forecast at the start of period ``k`` by persistence: each
    period's smooth mean rate times the ratio realized / smooth of the last completed period ``k - 1`` (k = 0:
    the day's last period, the one before it on the day that wraps at midnight). The smooth shape (the day's
    medians) is known; the per-minute spread is not, so the error of a forecast is the spread's own persistence
    residual."""
    j = int(k) - 1
    ref = float(base_rate_rps[j])
    factor = float(rates[j]) / ref if ref > 0 else 1.0
    return np.asarray(base_rate_rps[int(k): int(stop)], dtype=float) * factor
