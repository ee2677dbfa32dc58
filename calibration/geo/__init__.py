"""Calibration of the geo paper's step models (prefill/decode time and step energy) from raw data."""
