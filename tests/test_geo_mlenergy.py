"""Held-out check of the geo engine model against ML.ENERGY v2 (benchmarks/results/geo_mlenergy_check.md)."""

from __future__ import annotations

import pytest
from servegym.envs.geo.reports.mlenergy_check import ENERGY_TOL, TPOT_RANGE, measurements, run_check


def test_shipped_subset() -> None:
    df = measurements()
    assert len(df) == 15 and set(df["tp"]) == {1, 4}
    assert (df["energy_per_token_j"] > 0).all() and (df["avg_tpot_s"] > 0).all()


@pytest.mark.slow
def test_energy_per_token_and_tpot_against_ml_energy() -> None:
    assert ENERGY_TOL == 0.40 and TPOT_RANGE == (-0.65, -0.25)  # the stated tolerances
    rows = run_check(seed=0)
    assert len(rows) == 15
    inside = [r for r in rows if not r.extrapolated]
    assert {r.max_num_seqs for r in inside if "Mixtral" in r.model} == {32, 64, 128, 192, 256, 320}
    assert {r.max_num_seqs for r in inside if "Llama" in r.model} == {32}
    for r in inside:
        assert abs(r.energy_error) <= ENERGY_TOL, r
        assert TPOT_RANGE[0] <= r.tpot_error <= TPOT_RANGE[1], r
        assert r.power_clamps == 0 and r.time_floors == 0, r
    # The model's power sits near TDP while the measured whole-run power is about half of it: the energy
    # agreement comes from a time error and a power error that cancel (reported, not tuned).
    for r in inside:
        assert r.power_w > 1.4 * r.power_meas_w
    # Beyond Mixtral's calibrated batch range the run is an explicit extrapolation with clamped steps.
    far = [r for r in rows if "Mixtral" in r.model and r.max_num_seqs >= 512]
    assert far and all(r.extrapolated and r.power_clamps > 0 for r in far)
