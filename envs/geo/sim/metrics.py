"""Results of a geo run as pandas tables.

:class:`GeoResults` holds three tables and a summary:

- ``summary`` (dict, also ``summary_frame()``): policy, OSL source, total carbon (gCO2; engine
  step and idle energy, host power and PUE included), facility energy (kWh) and mean facility power
  (``power_w``, W) over the serving
  window ``[0, duration_s]`` (``window_s``; ``carbon_with_drain_g`` adds the drain), SLO violation
  rate (% of arrived requests that missed the TTFT or TPOT budget; requests unfinished when the
  run ends count as violations), p50/p90/p99 TTFT and TPOT (s), request counts, mean modelled
  scheduling overhead per request (ms), simulated time (s), ``decisions`` (scheduling decisions in
  the policy's unit: one per request in request mode, one per window in window mode) and
  ``decision_calls`` (decision points: poll batches of a per-request policy, or windows).
- ``per_dc``: one row per DC, over the serving window: region, PUE, mean CI, engine energy split (prefill / decode /
  idle, J), host energy (J), facility energy (kWh, x PUE), carbon (g), requests served,
  utilization (time-mean batch over the batch cap, sampled at every poll) and idle fraction
  (share of engine time with nothing in flight).
- ``requests``: one row per finished request (id, scheduler, DC, engine, times, lengths,
  TTFT/TPOT/E2E in s, SLO verdicts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd


@dataclass
class GeoResults:
    """The outcome of one run (see the module docstring for the columns and units)."""

    summary: dict[str, Any]
    per_dc: pd.DataFrame
    requests: pd.DataFrame
    config: dict[str, Any] = field(default_factory=dict)

    def summary_frame(self) -> pd.DataFrame:
        return pd.DataFrame([self.summary])

    @property
    def carbon_g(self) -> float:
        return float(self.summary["carbon_g"])

    @property
    def slo_violation_pct(self) -> float:
        return float(self.summary["slo_violation_pct"])


def percentiles(x: np.ndarray, qs: tuple[float, ...] = (50, 90, 99)) -> list[float]:
    """Percentiles of ``x`` ignoring NaN; NaN for an empty sample."""
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return [float("nan")] * len(qs)
    return [float(v) for v in np.percentile(x, qs)]


def slo_verdicts(ttft_s: np.ndarray, tpot_s: np.ndarray, ttft_slo_s: float,
                 tpot_slo_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT missed, TPOT missed) per request; a request with one output token has no TPOT (NaN)
    and cannot miss it."""
    ttft_miss = ~(np.asarray(ttft_s) <= ttft_slo_s)
    tpot = np.asarray(tpot_s, dtype=np.float64)
    tpot_miss = np.isfinite(tpot) & (tpot > tpot_slo_s)
    return ttft_miss, tpot_miss
