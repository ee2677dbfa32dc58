"""Calibration of the geo paper's step models (prefill/decode time and step energy) from raw data.

Public API:

- :data:`fitting.TABLE_COLUMNS`, :func:`fitting.fit_table` (and the per-kind ``fit_*`` functions):
  fit the paper's forms to a measurement table, with held-out MAPE;
- :func:`profiles.build_profile`, :func:`profiles.write_profiles`, :data:`profiles.SETUPS`:
  regenerate the shipped A100-40GB profiles from ``../shared/data``;
- :func:`anchors.anchor_report`, :func:`anchors.saturation_estimate`: the paper's §V-B anchors.
"""

from __future__ import annotations

from servegym.calibration.geo.anchors import anchor_report, saturation_estimate
from servegym.calibration.geo.fitting import TABLE_COLUMNS, FitResult, fit_table
from servegym.calibration.geo.profiles import SETUPS, build_profile, write_profiles

__all__ = [
    "SETUPS", "TABLE_COLUMNS", "FitResult", "anchor_report", "build_profile", "fit_table",
    "saturation_estimate", "write_profiles",
]
