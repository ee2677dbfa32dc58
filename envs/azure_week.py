"""The Azure LLM inference trace 2024 (one week): its shipped per-minute rate series, its days and their splits.

Shared by the families that replay the week (npu: :mod:`servegym.envs.npu.sim.azure2024`, which also samples
the token CDFs; pd: :mod:`servegym.envs.pd.sim.scenario`, the day's rate shape). Data
(``servegym/envs/data/azure2024/``, CC-BY 4.0, PROVENANCE.md there): the invocation rate (req/min) of the
coding (16,803,691 requests, Fri 2024-05-10 .. Thu 05-16) and conversation (27,303,995 requests, Sun 05-12 ..
Sat 05-18) traces of Stojkovic et al., "DynamoLLM", HPCA 2025, digitized from the dataset's analysis notebook
one pixel column (about 7.2 min) at a time: per column the lowest (``rate_low``), median (``rate_mid``) and
highest (``rate_high``) point of the drawn line. The line joins the trace's per-minute values, so a column's
band is the spread of the about seven minutes it holds (plus the line's drawn thickness: the band is an upper
bound on that spread, at most the narrowest column's, 99 req/min on coding and 175 on conversation).

``day`` counts from the trace's first midnight (UTC). :data:`SPLIT_DAYS` assigns the days to the benchmark
splits (three weekdays train, one validation, one test, the weekend as a shift), the same for every family.
"""

from __future__ import annotations

import gzip
import io
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from servegym.errors import check_range, choice_error

TRACES: tuple[str, ...] = ("coding", "conversation")
FIRST_DAY = {"coding": "2024-05-10", "conversation": "2024-05-12"}
"""The UTC date of each trace's day 0."""
N_DAYS = 7

SPLIT_DAYS: dict[str, dict[str, tuple[int, ...]]] = {
    # coding: Fri 10, Sat 11, Sun 12, Mon 13, Tue 14, Wed 15, Thu 16 May 2024
    "coding": {"train": (3, 4, 5), "validation": (6,), "test": (0,), "weekend": (1, 2)},
    # conversation: Sun 12, Mon 13, Tue 14, Wed 15, Thu 16, Fri 17, Sat 18 May 2024
    "conversation": {"train": (1, 2, 3), "validation": (4,), "test": (5,), "weekend": (0, 6)},
}
"""Days (from the trace's first midnight) of each split: three weekdays train (Mon-Wed 13-15 May), one
validation (Thu 16), one test (coding Fri 10, conversation Fri 17); the two weekend days are the shift (lower,
flatter load). As dates, train, validation, test and weekend are disjoint across both traces."""


def read_table(name: str) -> pd.DataFrame:
    """One shipped table of ``servegym/envs/data/azure2024/`` (gzipped CSV) as a DataFrame."""
    blob = resources.files("servegym.envs.data").joinpath("azure2024", name).read_bytes()
    return pd.read_csv(io.StringIO(gzip.decompress(blob).decode()))


@lru_cache(maxsize=1)
def _rates() -> dict[str, NDArray[np.float64]]:
    df = read_table("rate.csv.gz")
    return {t: df[df.trace == t][["minute", "rate_low", "rate_mid", "rate_high"]].to_numpy(float) for t in TRACES}


def check_trace(trace: str) -> str:
    """``trace`` if it is one of :data:`TRACES`, else a one-line ConfigError."""
    if trace not in TRACES:
        raise choice_error("azure2024 trace", trace, TRACES)
    return trace


def week_mean_rpm(trace: str = "coding") -> float:
    """Mean of the band midpoints over the week (req/min)."""
    return float(_rates()[check_trace(trace)][:, 2].mean())


def minute_band(trace: str, minutes: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The band (low, high) of the invocation rate (req/min) at ``minutes`` since the trace start (linear between
    column centres, clamped at the week's ends)."""
    r = _rates()[check_trace(trace)]
    m = np.clip(minutes, r[0, 0], r[-1, 0])
    return np.interp(m, r[:, 0], r[:, 1]), np.interp(m, r[:, 0], r[:, 3])


@lru_cache(maxsize=32)
def day_minutes(trace: str, day: int) -> NDArray[np.float64]:
    """(3, 1440) array: the low, mid and high edge of the rate band (req/min) at the centre of each minute of
    ``day``, linear between the centres of that day's own columns and held flat beyond its first and last one (so
    a day never reads its neighbours'; the edges are at most 3.6 min from a column). Read-only."""
    check_range("day", day, 0, N_DAYS - 1)
    r = _rates()[check_trace(trace)]
    own = r[(r[:, 0] >= day * 1440.0) & (r[:, 0] < (day + 1) * 1440.0)]
    m = np.arange(1440) + 0.5
    out = np.stack([np.interp(m, own[:, 0] - day * 1440.0, own[:, j]) for j in (1, 2, 3)])
    out.setflags(write=False)
    return out


def day_index(trace: str, date: str) -> int:
    """The day (0-based, from the trace's first midnight) of the UTC ``date`` ('YYYY-MM-DD'); ValueError outside
    the trace's week."""
    d = (pd.Timestamp(date) - pd.Timestamp(FIRST_DAY[check_trace(trace)])).days
    if not 0 <= d < N_DAYS:
        raise ValueError(f"{date} is outside the {trace} trace's week ({FIRST_DAY[trace]} + 0..{N_DAYS - 1} days)")
    return int(d)


def day_date(trace: str, day: int) -> str:
    """The UTC date ('YYYY-MM-DD') of ``day`` of ``trace``."""
    return (pd.Timestamp(FIRST_DAY[check_trace(trace)]) + pd.Timedelta(days=int(day))).strftime("%Y-%m-%d")


def day_label(trace: str, day: int) -> str:
    """'Mon 2024-05-13' for ``day`` of ``trace``."""
    return pd.Timestamp(day_date(trace, day)).strftime("%a %Y-%m-%d")
