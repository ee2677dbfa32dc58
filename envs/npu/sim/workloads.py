"""Request streams for the NPU autoscaling simulator (paper Table 4 and §5.3).

* **azure** (default): the paper's own trace, the 2024 one-week Azure LLM inference trace (Table 4 cites it
  as Stojkovic et al. 2025; 1,667 req/min is its coding trace's mean), replayed as a 24-hour segment of
  one day (:mod:`servegym.envs.npu.sim.azure2024`: digitized per-minute rate shape, a uniform draw within the
  plot's per-minute band, Poisson arrivals within a minute, lengths from the digitized token CDFs within
  Table 4's bounds). ``azure_trace`` = ``azure-code`` (the paper's "coding services") or ``azure-conv``;
  ``day`` picks the day (default :data:`~servegym.envs.npu.sim.azure2024.DEFAULT_DAY`, Monday 2024-05-13 for
  coding); ``rate_rpm`` rescales the week's mean (Table 4's 1,667 by default).
* **azure-2023** (the earlier stand-in, kept as a named bursty scenario): the real Azure 2023 one-hour
  traces shipped with servegym. The hour's arrivals are binned in 10 s; the counts, normalized to mean 1,
  are tiled over the horizon and multiplied by the diurnal profile :func:`diurnal_profile`
  (``1 + 0.45 cos(2π (h − 14) / 24)``, an assumption) and the mean rate; arrivals are a piecewise-constant
  Poisson process per 10 s; lengths are the trace's real (input, output) pairs, resampled with replacement.
  Its short-term peaks are 7.7-10.4x the mean of a 30-min window. ``azure`` with an explicit ``segment``
  (the share of the trace hour whose profile is tiled) is this scenario too: the benchmark env's splits
  read disjoint segments of the hour (``servegym.splits.TRACE_SEGMENTS``).
* **lveval** / **openthoughts**: Table 4's lognormal-like length presets (``LognormalLengths.preset``) on
  the Azure timestamps (the 2024 day's, or the 2023 hour's with ``segment``) at Table 4's mean rates of 41
  and 27 req/min (the paper scales the rate so that tokens per minute are similar to Azure's).
* **bursty** (§5.3): 2 hours at 30 req/min with mean input/output 2K/128 tokens, except a 45-minute
  burst from minute 30 to 75 at 80 req/min with mean 100K/5K tokens (lognormal, CV 0.5, clipped to
  [1, 4x mean]; the CV and clip are assumptions).

Every generator is deterministic in ``seed``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from servegym.envs.workload import (
    EmpiricalLengths,
    LognormalLengths,
    Requests,
    make_requests,
    rate_schedule_arrivals,
)

from servegym.errors import ConfigError, check_range, choice_error

BIN_S = 10.0
"""Resolution (s) of the rate profile taken from the Azure 2023 trace."""

DIURNAL_AMPLITUDE = 0.45
DIURNAL_PEAK_HOUR = 14.0

TABLE4_RATE_RPM: dict[str, float] = {"azure": 1667.0, "azure-2023": 1667.0, "lveval": 41.0, "openthoughts": 27.0}
"""Table 4 mean request rates (requests per minute)."""

WORKLOADS: tuple[str, ...] = ("azure", "azure-2023", "lveval", "openthoughts", "bursty")
AZURE2024_TRACE = {"azure-code": "coding", "azure-conv": "conversation"}
BURSTY_BASE_RPM = 30.0
"""Base rate of the synthetic ``bursty`` workload without ``rate_rpm`` (requests per minute)."""


@dataclass(frozen=True)
class NPUWorkload:
    """A request stream with its horizon (s) and the trace-level maxima a homogeneous Base reads.

    ``max_input_tokens`` / ``max_total_tokens`` are the trace's declared maxima (Table 4 for the
    synthetic sets, the data for Azure) -- trace metadata, not per-request oracle information.
    """

    name: str
    requests: Requests
    duration_s: float
    max_input_tokens: int
    max_total_tokens: int
    description: str


def diurnal_profile(t_s: np.ndarray | float, start_hour: float = 0.0) -> np.ndarray:
    """Rate multiplier (mean 1 over a day) at ``t_s`` seconds after ``start_hour`` (0-24)."""
    h = (np.asarray(t_s, dtype=float) / 3600.0 + start_hour) % 24.0
    return 1.0 + DIURNAL_AMPLITUDE * np.cos(2.0 * np.pi * (h - DIURNAL_PEAK_HOUR) / 24.0)


def azure_burst_profile(trace: str = "azure-code", segment: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
    """Per-10-s arrival counts of the real 1-hour Azure 2023 trace, normalized to mean 1; ``segment``
    keeps the bins whose start lies in that share of the trace's whole bins (the benchmark splits read
    disjoint segments, ``servegym.splits.TRACE_SEGMENTS``)."""
    from servegym.envs.traces import load_trace

    arr = load_trace(trace).arrival_s
    n = int(arr[-1] // BIN_S)
    counts = np.bincount((arr // BIN_S).astype(np.int64), minlength=n)[:n].astype(float)
    lo, hi = round(segment[0] * n), round(segment[1] * n)
    counts = counts[lo:max(hi, lo + 1)]
    return counts / counts.mean()


def azure_timestamps(hours: float, rate_rpm: float, rng: np.random.Generator, trace: str = "azure-code",
                     start_hour: float = 0.0, segment: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
    """Arrival times (s) over ``hours``: the Azure hour's 10-s profile, tiled, times the diurnal profile."""
    check_range("hours", hours, 0.0, 24.0 * 7, low_inclusive=False)
    check_range("rate_rpm", rate_rpm, 0.0, None, low_inclusive=False)
    check_range("start_hour", start_hour, 0.0, 24.0)
    prof = azure_burst_profile(trace, segment)
    n_bins = math.ceil(hours * 3600.0 / BIN_S)
    t = np.arange(n_bins) * BIN_S
    rates = rate_rpm / 60.0 * np.resize(prof, n_bins) * diurnal_profile(t + BIN_S / 2, start_hour)
    arr = rate_schedule_arrivals(rates, BIN_S, rng)
    return arr[arr < hours * 3600.0]


def make_workload(name: str, hours: float = 24.0, seed: int = 0, rate_rpm: float | None = None,
                  azure_trace: str = "azure-code", start_hour: float = 0.0,
                  segment: tuple[float, float] | None = None, day: int | None = None,
                  within_day: bool = False) -> NPUWorkload:
    """Build one of :data:`WORKLOADS` (see the module docstring); ``rate_rpm`` overrides Table 4's rate.

    Timestamps: the 2024 trace's ``day`` unless ``segment`` is given (or the workload is ``azure-2023``), in
    which case the 2023 hour's ``segment`` is tiled (:func:`azure_burst_profile`). ``within_day``: a 2024
    replay that passes midnight wraps to the same day's start (:func:`~servegym.envs.npu.sim.azure2024.arrivals`).
    """
    from servegym.envs.npu.sim import azure2024

    if name not in WORKLOADS:
        raise choice_error("trace", name, WORKLOADS)
    if azure_trace not in AZURE2024_TRACE:
        raise choice_error("azure_trace", azure_trace, ("azure-code", "azure-conv"))
    rng = np.random.default_rng(seed)
    if name == "bursty":
        return _bursty(hours, rng, rate_rpm)
    rate = TABLE4_RATE_RPM[name] if rate_rpm is None else float(rate_rpm)
    tiled = name == "azure-2023" or segment is not None
    if tiled and day is not None:
        raise ConfigError("day is a day of the 2024 trace; allowed: None with segment or azure-2023")
    seg = (0.0, 1.0) if segment is None else tuple(segment)
    tr24 = AZURE2024_TRACE[azure_trace]
    if tiled:
        arrivals = azure_timestamps(hours, rate, rng, azure_trace, start_hour, seg)  # type: ignore[arg-type]
        when = f"{azure_trace} 2023 hour's 10-s profile tiled x diurnal"
        if seg != (0.0, 1.0):
            when += f" ({seg[0]:.0%}-{seg[1]:.0%} of the hour)"
    else:
        d = azure2024.DEFAULT_DAY if day is None else int(day)
        arrivals = azure2024.arrivals(tr24, d, hours, rate, rng, start_hour, within_day)
        when = f"{azure_trace} 2024 trace, {azure2024.day_label(tr24, d)}"
    if name in ("azure", "azure-2023") and tiled:
        lengths = EmpiricalLengths.from_trace(azure_trace)
        isl_all, osl_all = lengths.input_tokens, lengths.output_tokens
        max_isl, max_tot = int(isl_all.max()), int((isl_all + osl_all).max())
        desc = f"{when} (real 2023 lengths), {rate:g} req/min mean, {hours:g} h from {start_hour:g}:00"
        req = make_requests(arrivals, lengths, rng)
    elif name == "azure":
        isl, osl = azure2024.sample_lengths(tr24, arrivals.size, rng)
        max_isl, max_tot = azure2024.max_lengths(tr24)
        desc = (f"{when} (lengths from its token CDFs), {rate:g} req/min week mean, {hours:g} h "
                f"from {start_hour:g}:00")
        req = Requests(arrivals, isl, osl)
    else:
        lengths = LognormalLengths.preset(name)
        max_isl, max_tot = int(lengths.isl_max), int(lengths.isl_max + lengths.osl_max)
        desc = f"{name}-like lengths (Table 4) on {when} timestamps, {rate:g} req/min mean, {hours:g} h"
        req = make_requests(arrivals, lengths, rng)
    return NPUWorkload(name, req, hours * 3600.0, max_isl, max_tot, desc)


def _bursty(hours: float, rng: np.random.Generator, rate_rpm: float | None) -> NPUWorkload:
    check_range("hours", hours, 0.0, 24.0 * 7, low_inclusive=False)
    base = BURSTY_BASE_RPM if rate_rpm is None else float(rate_rpm)
    check_range("rate_rpm", base, 0.0, None, low_inclusive=False)
    burst = base * 80.0 / 30.0
    dur = hours * 3600.0
    n_min = math.ceil(hours * 60.0)
    minute = np.arange(n_min)
    in_burst = (minute >= 30) & (minute < 75)
    rates = np.where(in_burst, burst, base) / 60.0
    arr = rate_schedule_arrivals(rates, 60.0, rng)
    arr = arr[arr < dur]
    burst_req = (arr >= 1800.0) & (arr < 4500.0)
    normal = LognormalLengths(2048, 0.5, 128, 0.5, isl_max=4 * 2048, osl_max=4 * 128, name="bursty-normal",
                              source="npu paper §5.3: mean 2K/128 outside the burst")
    big = LognormalLengths(100_000, 0.5, 5000, 0.5, isl_max=400_000, osl_max=20_000, name="bursty-burst",
                           source="npu paper §5.3: mean 100K/5K in the burst")
    isl = np.empty(arr.size, dtype=np.int64)
    osl = np.empty(arr.size, dtype=np.int64)
    for mask, lens in ((~burst_req, normal), (burst_req, big)):
        i, o = lens.sample(int(mask.sum()), rng)
        isl[mask], osl[mask] = i, o
    req = Requests(arr, isl, osl)
    desc = (f"bursty (§5.3): {base:g} req/min at 2K/128, burst min 30-75 at {burst:g} req/min at 100K/5K, "
            f"{hours:g} h")
    return NPUWorkload("bursty", req, dur, 400_000, 420_000, desc)
