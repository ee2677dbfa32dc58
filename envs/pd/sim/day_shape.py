"""The rate shape of a pd day from a real day of the 2024 Azure LLM inference week (see
:mod:`servegym.envs.pd.sim.scenario`, "Load", for the readings; the data and the days are
:mod:`servegym.envs.azure_week`'s).

A day is a (traces, 3, 1440) array: per trace of the pattern, the low, median and high edge of the rate band
at the centre of each minute of the UTC day, in units of the pattern's week peak (the largest summed median
over the days it covers, so a weekday peaks near 1). Units: rates in those units or, times ``peak_rate_rps``,
req/s; times in s from the local midnight of the episode's first day.
"""

from __future__ import annotations

import functools

import numpy as np
import servegym.envs.azure_week as azure_week
from numpy.typing import NDArray

from servegym.errors import ConfigError

#: The 2024 week's traces (servegym.envs.azure_week names) behind each real-day pattern.
WEEK_TRACES: dict[str, tuple[str, ...]] = {"azure": ("coding", "conversation"), "azure-conv": ("conversation",),
                                           "azure-code": ("coding",)}
MINUTES_PER_DAY = 1440


def covered_dates(pattern: str) -> tuple[str, ...]:
    """The UTC dates ('YYYY-MM-DD') every trace of ``pattern`` covers (``azure``: 2024-05-12 .. 05-16)."""
    sets = [{azure_week.day_date(t, d) for d in range(azure_week.N_DAYS)} for t in WEEK_TRACES[pattern]]
    return tuple(sorted(set.intersection(*sets)))


def week_days(pattern: str, date: str) -> tuple[int, ...]:
    """The day (from each trace's first midnight) of ``date`` per trace of ``pattern``; a one-line ConfigError
    when a trace does not cover it."""
    dates = covered_dates(pattern)
    if not isinstance(date, str) or date not in dates:
        raise ConfigError(f"scenario.pattern_day = {date!r} is not a day of pattern_trace {pattern!r}; allowed: "
                          f"{', '.join(dates)}")
    return tuple(azure_week.day_index(t, date) for t in WEEK_TRACES[pattern])


@functools.cache
def week_peak_rpm(pattern: str) -> float:
    """The largest median rate (req/min) of ``pattern`` over the dates it covers (traces summed per minute)."""
    return max(float(_raw_day(pattern, date)[:, 1].sum(axis=0).max()) for date in covered_dates(pattern))


def _raw_day(pattern: str, date: str) -> NDArray[np.float64]:
    return np.stack([azure_week.day_minutes(t, d) for t, d in zip(WEEK_TRACES[pattern], week_days(pattern, date),
                                                                  strict=True)])


@functools.cache
def day_band(pattern: str, date: str) -> NDArray[np.float64]:
    """(traces, 3, 1440): low, median, high per minute of ``date``, in units of :func:`week_peak_rpm`. Read-only."""
    out = _raw_day(pattern, date) / week_peak_rpm(pattern)
    out.setflags(write=False)
    return out


def day_peak(pattern: str, date: str) -> float:
    """The largest smooth rate of ``date`` (summed medians), in units of :func:`week_peak_rpm`."""
    return float(day_band(pattern, date)[:, 1].sum(axis=0).max())


def horizon_minutes(start_hour: float, period_s: float, n: int) -> tuple[int, int, float]:
    """(first clock minute m0, minutes n_min covering the n periods, offset of the first period into minute m0, s)."""
    m0 = int(np.floor(start_hour * 60.0))
    first_s = start_hour * 3600.0 - m0 * 60.0
    n_min = int(np.ceil((first_s + n * period_s) / 60.0 - 1e-9))
    return m0, max(n_min, 1), first_s


def minute_rates(band: NDArray[np.float64], m0: int, n_min: int, burstiness: float,
                 u: NDArray[np.float64] | None) -> NDArray[np.float64]:
    """The rate of each of ``n_min`` minutes from clock minute ``m0`` (the day wraps to its own 00:00): per trace
    the median plus ``burstiness`` x (a uniform draw in the band - the median), summed over traces. ``u``:
    (traces, n_min) uniforms in [0, 1) (None: the smooth median only)."""
    idx = (m0 + np.arange(n_min)) % MINUTES_PER_DAY
    lo, mid, hi = band[:, 0, idx], band[:, 1, idx], band[:, 2, idx]
    if u is None or burstiness == 0.0:
        return mid.sum(axis=0)
    return (mid + burstiness * (lo + u * (hi - lo) - mid)).sum(axis=0)


def period_means(v: NDArray[np.float64], first_s: float, period_s: float, n: int) -> NDArray[np.float64]:
    """Mean over each of ``n`` periods of the per-minute step function ``v`` (the first period starts ``first_s``
    into the first minute): the exact integral, so a period need not be a minute."""
    cum = np.concatenate([[0.0], np.cumsum(v) * 60.0])

    def integral(t: NDArray[np.float64]) -> NDArray[np.float64]:
        i = np.minimum((t // 60.0).astype(np.int64), v.size - 1)
        return cum[i] + (t - 60.0 * i) * v[i]

    a = first_s + np.arange(n) * period_s
    return (integral(a + period_s) - integral(a)) / period_s
