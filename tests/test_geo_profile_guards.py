"""Geo engine profiles: field validation, calibrated ranges, extrapolation opt-in, power clamps (issues 14, 15)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servegym.baselines.geo import LeastLoaded
from servegym.envs.geo.sim.cluster import GeoSimulation
from servegym.envs.geo.sim.config import GeoConfig, preset
from servegym.envs.geo.sim.engine import EnginePool
from servegym.envs.geo.sim.profile import EngineProfile, available_profiles, load_profile

from servegym.errors import ConfigError

LLAMA = "llama3.1-8b_a100-40gb_tp1"
MIXTRAL = "mixtral-8x7b_a100-40gb_tp4"


def _write(tmp_path: Path, edit) -> Path:
    d = load_profile(LLAMA).to_dict()
    edit(d)
    p = tmp_path / "custom.json"
    p.write_text(json.dumps(d, allow_nan=True))
    return p


@pytest.mark.parametrize(("field", "value"), [
    ("idle_w_per_gpu", float("nan")), ("idle_w_per_gpu", -5.0), ("idle_w_per_gpu", 450.0),
    ("tdp_w", float("inf")), ("tdp_w", -400.0), ("tdp_w", 0.0), ("tdp_w", "400"),
    ("prefill.b0", float("nan")), ("prefill.tok_slope_lo", -1e-5), ("prefill.knee_tokens", float("inf")),
    ("decode.alpha", [0.01, float("nan"), 0.0]), ("decode.beta", [0.0, 1e-7]),
    ("energy.e0_dec", float("nan")), ("energy.e_k", -1e-5), ("energy.e_p", None),
    ("max_num_seqs", 40.5), ("tp", True), ("kv_capacity_tokens", 0),
    ("calibrated_range", {"batch": [1, float("nan")]}), ("calibrated_range", {"batch": [10, 5]}),
    ("calibrated_range", {"tokens": [1, 5]}),
])
def test_every_profile_field_is_checked(tmp_path: Path, field: str, value: object) -> None:
    """NaN, infinite, wrongly signed or mistyped fields are one clear ConfigError naming the field."""
    def edit(d: dict) -> None:
        if "." in field:
            group, name = field.split(".")
            d[group][name] = value
        else:
            d[field] = value

    with pytest.raises(ConfigError) as exc:
        load_profile(_write(tmp_path, edit))
    assert field.split(".")[-1] in str(exc.value) or "calibrated_range" in str(exc.value)


def test_nan_idle_power_no_longer_reaches_the_carbon(tmp_path: Path) -> None:
    path = _write(tmp_path, lambda d: d.update(idle_w_per_gpu=float("nan")))
    with pytest.raises(ConfigError, match="idle_w_per_gpu"):
        preset("mini", profile=str(path))


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda d: d["decode"].update(alpha=[-0.2, 0.0, 0.0]), "decode model gives step time <= 0"),
    (lambda d: d["decode"].update(alpha=[0.015, 7e-5, -1e-4]), "decode model gives step time <= 0"),
    (lambda d: d["energy"].update(e0_dec=50.0), "decode model gives step power above TP x TDP = 400 W"),
    (lambda d: d["energy"].update(e_p=0.5), "prefill model gives step power above"),
    (lambda d: d["prefill"].update(b0=0.0, tok_slope_lo=0.0, tok_slope_hi=0.0, b2=0.0), "prefill model gives step time"),
])
def test_step_models_are_checked_on_the_calibrated_range_at_load(tmp_path: Path, edit, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_profile(_write(tmp_path, edit))


def test_shipped_profiles_record_their_ranges_and_pass_the_checks() -> None:
    for name in available_profiles():
        p = load_profile(name)
        assert set(p.calibrated_range) == {"batch", "prefill_tokens", "context"}
        assert p.calibrated_range["batch"] == (1.0, float(p.max_num_seqs))
        assert p.calibrated_range["context"] == (32.0, 32768.0)
        p.check_step_models()
        # Round trip keeps the ranges.
        assert EngineProfile.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    # Mixtral's decode fit turns negative beyond its range and implies > 4 x TDP past ~400: outside, not inside.
    mix = load_profile(MIXTRAL)
    b = np.array([400.0, 900.0])
    t = mix.decode(b, b * 900.0)
    assert t[0] > 0 > t[1]


def test_max_num_seqs_outside_the_range_is_an_error_or_a_named_opt_in() -> None:
    with pytest.raises(ConfigError, match=r"max_num_seqs = 64 is outside .* calibrated batch range \[1, 40\].*extrapolate"):
        GeoConfig(profile=LLAMA, max_num_seqs=64)
    with pytest.raises(ConfigError, match="max_num_seqs"):
        load_profile(MIXTRAL).with_limits(max_num_seqs=1024)
    assert not GeoConfig(profile=LLAMA, max_num_seqs=32).extrapolated
    cfg = GeoConfig(profile=LLAMA, max_num_seqs=64, extrapolate=True)
    assert cfg.extrapolated and cfg.engine_profile().max_num_seqs == 64
    with pytest.raises(ConfigError, match="extrapolate"):
        GeoConfig(profile=LLAMA, extrapolate="yes")


def test_engine_clamps_power_and_floors_time_outside_the_range_and_counts_them() -> None:
    prof = load_profile(MIXTRAL).with_limits(max_num_seqs=1024, extrapolate=True)
    pool = EnginePool(prof, 1)
    n = 1024
    # short requests so that all 1,024 fit the KV pool at once: the decode fit is negative at that batch
    pool.submit(np.zeros(n, dtype=np.int64), np.arange(n), np.zeros(n), np.zeros(n), np.full(n, 50),
                np.full(n, 100))
    pool.advance(1e5)
    assert pool.finished == n
    assert pool.power_clamps[0] > 0 and pool.time_floors[0] > 0
    cap_w = prof.tp * prof.tdp_w
    busy = pool.prefill_s[0] + pool.decode_s[0]
    assert pool.energy_prefill_j[0] + pool.energy_decode_j[0] <= cap_w * busy * (1 + 1e-9)
    # Inside the range nothing is clamped.
    inside = EnginePool(load_profile(MIXTRAL), 1)
    inside.submit(np.zeros(n, dtype=np.int64), np.arange(n), np.zeros(n), np.zeros(n), np.full(n, 200),
                  np.full(n, 300))
    inside.advance(1e5)
    assert inside.power_clamps[0] == 0 and inside.time_floors[0] == 0


def test_results_name_the_extrapolation() -> None:
    base = {"duration_s": 2.0, "drain_s": 20.0, "rate_rps": 40.0}
    plain = GeoSimulation(preset("mini", **base)).run(LeastLoaded()).summary
    assert plain["extrapolated"] is False and plain["power_clamps"] == 0 and plain["time_floors"] == 0
    out = GeoSimulation(preset("mini", max_num_seqs=64, extrapolate=True, **base)).run(LeastLoaded()).summary
    assert out["extrapolated"] is True and out["power_clamps"] >= 0


_NUMERIC = ["tdp_w", "idle_w_per_gpu", "prefill.knee_tokens", "prefill.tok_slope_lo", "prefill.b0", "prefill.b2",
            "decode.alpha.0", "decode.alpha.1", "decode.alpha.2", "decode.beta.1", "decode.beta.2", "energy.e0_pre",
            "energy.e_p", "energy.e0_dec", "energy.e_d", "energy.e_k", "max_num_seqs", "kv_capacity_tokens"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(_NUMERIC), factor=st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64), st.sampled_from([-1.0, 0.0, 1e-3, 10.0, 1e6]),
    st.text(max_size=3), st.none()))
def test_perturbed_profiles_load_valid_or_fail_cleanly(field: str, factor: object) -> None:
    """Any perturbed field gives a profile whose step models hold on its range, or a ConfigError."""
    d = json.loads(json.dumps(load_profile(LLAMA).to_dict()))
    parts = field.split(".")
    holder = d
    for key in parts[:-1]:
        holder = holder[key]
    key = int(parts[-1]) if parts[-1].isdigit() else parts[-1]
    old = holder[key]
    holder[key] = old * factor if isinstance(factor, float) and not isinstance(old, int) else (
        factor if not isinstance(factor, float) else int(factor) if np.isfinite(factor) and abs(factor) < 1e12 else factor)
    try:
        p = EngineProfile.from_dict(d)
    except ConfigError:
        return
    p.check_step_models()
    assert np.isfinite(p.idle_w) and p.idle_w >= 0 and p.tdp_w > 0
