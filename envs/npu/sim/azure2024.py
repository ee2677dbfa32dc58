"""The NPU paper's Azure trace: the 2024 one-week Azure LLM inference trace (Stojkovic et al., "DynamoLLM",
HPCA 2025), replayed as 24-hour segments (paper §5.1: "we replay a 24-hour segment", Figure 17).

Data (``servegym/envs/data/azure2024/``, CC-BY 4.0, PROVENANCE.md there): the per-minute invocation
rate of the coding and conversation traces (one digitized point per about 7.2 min, with the band of the
drawn line) and the input/output token CDFs, digitized from the dataset's own analysis notebook. Table 4's
1,667 req/min is the coding trace's 16,803,691 requests over 7 days, so its mean rate *is* this series'.

Replay (stated processes, not in the data):

* **Rate.** Minute m's rate is drawn uniformly between the band's low and high edge, both linearly
  interpolated at m (the band is the spread of the about seven per-minute values one plot column
  holds), times ``rate_rpm`` / the week's mean of the band midpoints (so ``rate_rpm`` = Table 4's
  1,667 replays the trace at its own level; a weekday's mean is above it, a weekend day's below).
* **Within a minute:** Poisson arrivals at that minute's rate (the plots resolve nothing finer).
* **Lengths:** input and output independently by inverse-CDF sampling of the digitized CDFs (linear
  between points; below the first point, Table 4's minimum of 1 token), clipped to Table 4's
  maxima for coding (7,691 input, 3,500 output tokens). The output CDF rises within the plot's first
  pixels (about 11 tokens each), so short outputs are resolved only to that step; the realized
  means are stated by :func:`length_means` (coding: input about 2,49x, output about 2x; Table 4: 2,556 / 23).
* **Days.** ``day`` counts from the trace's first midnight (coding: Fri 2024-05-10; conversation: Sun
  2024-05-12). :data:`SPLIT_DAYS` gives the benchmark splits: weekdays for train, validation and test,
  the weekend as a shift.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from servegym.envs.azure_week import (  # the week's data and days are shared with pd (envs/azure_week.py)
    FIRST_DAY,
    N_DAYS,
    SPLIT_DAYS,
    TRACES,
    check_trace,
    day_label,
    minute_band,
    read_table,
    week_mean_rpm,
)
from servegym.envs.npu.sim.trace_sampling import minute_arrivals, sample_tokens, start_table
from servegym.envs.workload import Requests

from servegym.errors import check_range

__all__ = ["DEFAULT_DAY", "FIRST_DAY", "N_DAYS", "SPLIT_DAYS", "TABLE4_MAX", "TRACES", "arrivals", "day_label",
           "length_means", "max_lengths", "minute_band", "requests", "sample_lengths", "week_mean_rpm"]

TABLE4_MAX = {"coding": (7691, 3500)}
"""Table 4's maximum input and output tokens (Azure, the coding trace); conversation has no Table 4 row."""

DEFAULT_DAY = 3
"""The day a fixed scenario replays (coding: Monday 2024-05-13, the first of the training weekdays)."""


@lru_cache(maxsize=1)
def _cdfs() -> dict[tuple[str, str], np.ndarray]:
    df = read_table("lengths_cdf.csv.gz")
    return {(t, k): df[(df.trace == t) & (df.kind == k)][["tokens", "cdf"]].to_numpy(float)
            for t in TRACES for k in ("input", "output")}


@lru_cache(maxsize=1)
def _inverse_tables() -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per CDF: its probabilities and tokens as contiguous columns and their slice table (trace_sampling)."""
    out = {}
    for key, c in _cdfs().items():
        xp, fp = np.ascontiguousarray(c[:, 1]), np.ascontiguousarray(c[:, 0])
        out[key] = (xp, fp, start_table(xp))
    return out


def arrivals(trace: str, day: int, hours: float, rate_rpm: float, rng: np.random.Generator,
             start_hour: float = 0.0, within_day: bool = False) -> np.ndarray:
    """Arrival times (s) of ``hours`` from ``start_hour`` of ``day`` (module docstring, "Rate"). Past midnight the
    replay runs into the next day, unless ``within_day``: then it wraps to the same day's 00:00 (so a split that
    owns a day never reads its neighbours', e.g. a weekday test episode the weekend's morning)."""
    check_range("day", day, 0, N_DAYS - 1)
    check_range("hours", hours, 0.0, 24.0 * N_DAYS, low_inclusive=False)
    check_range("start_hour", start_hour, 0.0, 24.0)
    check_range("rate_rpm", rate_rpm, 0.0, None, low_inclusive=False)
    n_min = int(np.ceil(hours * 60.0))
    into = start_hour * 60.0 + np.arange(n_min) + 0.5
    m = day * 1440.0 + (np.mod(into, 1440.0) if within_day else into)
    m = np.where(m >= N_DAYS * 1440.0, m - N_DAYS * 1440.0, m)  # past the week's end: wrap to its start
    lo, hi = minute_band(trace, m)
    rpm = rng.uniform(lo, hi) * (rate_rpm / week_mean_rpm(trace))
    counts = rng.poisson(rpm)
    # (np.repeat(minutes, counts) + uniform) * 60, sorted, below the horizon: one compiled pass (minute_arrivals)
    return minute_arrivals(counts, rng.uniform(0.0, 1.0, int(counts.sum())), hours * 3600.0)


def sample_lengths(trace: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(input, output) tokens of ``n`` requests (module docstring, "Lengths"); independent draws."""
    out = []
    for kind, cap in zip(("input", "output"), TABLE4_MAX.get(check_trace(trace), (None, None)), strict=True):
        xp, fp, start = _inverse_tables()[(trace, kind)]
        # np.minimum(np.maximum(np.rint(np.interp(u, xp, fp, left=1.0)), 1.0), cap) as int64, in one compiled pass
        out.append(sample_tokens(rng.uniform(0.0, 1.0, n), xp, fp, start, -1.0 if cap is None else float(cap)))
    return out[0], out[1]


def length_means(trace: str = "coding", n: int = 200_000, seed: int = 0) -> tuple[float, float]:
    """Realized mean (input, output) tokens of :func:`sample_lengths` (a check against Table 4)."""
    i, o = sample_lengths(trace, n, np.random.default_rng(seed))
    return float(i.mean()), float(o.mean())


def requests(trace: str, day: int, hours: float, rate_rpm: float, rng: np.random.Generator,
             start_hour: float = 0.0) -> Requests:
    """A request stream of ``hours`` of ``day``: :func:`arrivals` with :func:`sample_lengths`."""
    arr = arrivals(trace, day, hours, rate_rpm, rng, start_hour)
    isl, osl = sample_lengths(trace, arr.size, rng)
    return Requests(arr, isl, osl)


def max_lengths(trace: str) -> tuple[int, int]:
    """The largest input and total tokens a request of ``trace`` can have (trace metadata Base reads)."""
    c_in, c_out = _cdfs()[(check_trace(trace), "input")], _cdfs()[(trace, "output")]
    cap = TABLE4_MAX.get(trace)
    mi = int(cap[0]) if cap else int(c_in[-1, 0])
    mo = int(cap[1]) if cap else int(c_out[-1, 0])
    return mi, mi + mo
