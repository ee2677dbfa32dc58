"""Geo step-model calibration: fitting recovers known coefficients, shipped profiles hit the paper's anchors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.calibration.geo import fitting
from servegym.calibration.geo.anchors import PAPER, anchor_report, saturation_estimate
from servegym.envs.geo.sim.profile import DecodeTimeModel, PrefillTimeModel, available_profiles, load_profile

from servegym.cli import main
from servegym.errors import ConfigError

SHIPPED = ["llama3.1-8b_a100-40gb_tp1", "llama3.1-8b_a100-40gb_tp2", "qwen2.5-7b_a100-40gb_tp1",
           "mixtral-8x7b_a100-40gb_tp4"]
LLAMA = "llama3.1-8b_a100-40gb_tp1"


def _assert_same_profile(a: object, b: object, path: str = "") -> None:
    """Equal strings/ints, floats to 1e-7 relative (another BLAS may differ in the last bits)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), path
        for k in a:
            _assert_same_profile(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same_profile(x, y, f"{path}[{i}]")
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-7, abs=1e-15), path
    else:
        assert a == b, path


def _prefill_rows(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(300):
        b = int(rng.integers(1, 6))
        lens = rng.integers(16, 2000, size=b)
        rows.append((lens.sum(), b, (lens.astype(float) ** 2).sum()))
    return pd.DataFrame(rows, columns=["n_tokens", "n_requests", "sum_sq"])


def test_prefill_fit_recovers_knee_and_coefficients() -> None:
    truth = PrefillTimeModel(knee_tokens=600.0, tok_slope_lo=2e-5, tok_slope_hi=8e-5, b0=0.012, b1=4e-4, b2=3e-9)
    df = _prefill_rows()
    df["time_s"] = truth(df["n_tokens"], df["n_requests"], df["sum_sq"])
    fit = fitting.fit_prefill_time(df)
    assert fit.knee_tokens == pytest.approx(600.0, abs=3.0)
    for name in ("tok_slope_lo", "tok_slope_hi", "b0", "b1", "b2"):
        assert getattr(fit, name) == pytest.approx(getattr(truth, name), rel=0.02), name


def test_decode_fit_recovers_coefficients() -> None:
    truth = DecodeTimeModel(alpha=(0.015, 8e-5, -2e-7), beta=(1e-7, 1e-7, 1e-11))
    b, ctx = np.meshgrid(np.arange(1, 65, 3), np.geomspace(32, 8000, 12), indexing="ij")
    df = pd.DataFrame({"batch": b.ravel(), "kv_tokens": (b * ctx).ravel()})
    df["time_s"] = truth(df["batch"], df["kv_tokens"])
    fit = fitting.fit_decode_time(df)
    np.testing.assert_allclose(fit.alpha, truth.alpha, rtol=1e-3, atol=1e-12)
    np.testing.assert_allclose(fit.beta, truth.beta, rtol=1e-3, atol=1e-14)


def test_energy_fits_recover_coefficients() -> None:
    df = _prefill_rows(1)
    df["energy_j"] = 3.0 + 0.02 * df["n_tokens"] + 1e-6 * df["sum_sq"]
    r = fitting.fit_table(df, "energy-prefill")
    assert (r.model.e0, r.model.e_p, r.model.e_a) == pytest.approx((3.0, 0.02, 1e-6), rel=1e-4)
    assert r.mape_holdout < 1e-3
    dec = pd.DataFrame({"batch": np.arange(1, 41), "kv_tokens": np.arange(1, 41) * 700.0})
    dec["kv_tokens"] += np.arange(40) % 7 * 300.0  # decorrelate K from B
    dec["energy_j"] = 5.0 + 0.04 * dec["batch"] + 4e-5 * dec["kv_tokens"]
    r = fitting.fit_table(dec, "energy-decode")
    assert (r.model.e0, r.model.e_d, r.model.e_k) == pytest.approx((5.0, 0.04, 4e-5), rel=1e-4)


def test_energy_cap_is_respected() -> None:
    df = _prefill_rows(2)
    df["energy_j"] = 3.0 + 0.02 * df["n_tokens"] + 1e-6 * df["sum_sq"]
    df["max_energy_j"] = df["energy_j"] * 0.97
    m = fitting.fit_prefill_energy(df)
    assert np.all(m(df["n_tokens"], df["sum_sq"]) <= df["max_energy_j"] * (1 + 1e-6))


def test_split_is_deterministic_and_disjoint() -> None:
    a, b = fitting.split_rows(100)
    a2, b2 = fitting.split_rows(100)
    assert np.array_equal(a, a2) and np.array_equal(b, b2)
    assert len(b) == 20 and not set(a) & set(b) and len(a) + len(b) == 100


def test_bad_columns_give_clear_errors(tmp_path) -> None:
    df = pd.DataFrame({"batch": [1, 2] * 5, "time_s": [0.01] * 10})
    with pytest.raises(ConfigError, match=r"missing column\(s\) \['kv_tokens'\]"):
        fitting.fit_table(df, "decode")
    df["kv_tokens"] = ["x"] + [100] * 9
    with pytest.raises(ConfigError, match="'kv_tokens' row 0 is not a finite number"):
        fitting.fit_table(df, "decode")
    with pytest.raises(ConfigError, match="kind = 'bogus' is unknown"):
        fitting.fit_table(df, "bogus")
    bad = tmp_path / "bad.csv"
    bad.write_text("n,t\n1,2\n")
    assert main(["calibrate", "geo", "--csv", str(bad), "--kind", "prefill"]) == 2


def test_cli_fits_a_user_csv(tmp_path, capsys) -> None:
    truth = DecodeTimeModel(alpha=(0.015, 8e-5, 1e-7), beta=(0.0, 1e-7, 0.0))
    b, ctx = np.meshgrid(np.arange(1, 41), [100, 500, 1000, 2000], indexing="ij")
    df = pd.DataFrame({"batch": b.ravel(), "kv_tokens": (b * ctx).ravel()})
    df["time_s"] = truth(df["batch"], df["kv_tokens"])
    path = tmp_path / "decode.csv"
    df.to_csv(path, index=False)
    assert main(["calibrate", "geo", "--csv", str(path), "--kind", "decode", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mape_holdout_pct"] < 0.1
    assert out["coefficients"]["alpha"][0] == pytest.approx(0.015, rel=1e-3)


def test_missing_data_dir_is_a_clear_error(tmp_path, capsys) -> None:
    assert main(["calibrate", "geo", "--data", str(tmp_path / "none"), "--out", str(tmp_path)]) == 2
    assert "pass --data DIR" in capsys.readouterr().err


def test_shipped_profiles_load_with_documented_limits() -> None:
    assert set(SHIPPED) <= set(available_profiles())
    expect = {LLAMA: (1, 40, 32768, 131072), "llama3.1-8b_a100-40gb_tp2": (2, 80, 32768, 131072),
              "qwen2.5-7b_a100-40gb_tp1": (1, 40, 32768, 28 * 4 * 128 * 4),
              "mixtral-8x7b_a100-40gb_tp4": (4, 400, 32768, 131072)}
    for name, (tp, seqs, budget, kvb) in expect.items():
        p = load_profile(name)
        assert (p.tp, p.max_num_seqs, p.max_num_batched_tokens, p.kv_bytes_per_token) == (tp, seqs, budget, kvb)
        assert p.tdp_w == 400.0 and p.idle_w_per_gpu == 72.0
        assert p.sources and "vLLM 0.6.3" in p.notes
        assert set(p.fit_mape) == {"prefill_time", "decode_time", "prefill_energy", "decode_energy"}
        # KV pool holds at least a full batch of 2k-token requests and the longest single prompt budget
        assert p.kv_capacity_tokens >= max(p.max_num_seqs * 900, 32768)
        assert p.fit_mape["prefill_time"] < 5.0
        assert p.fit_mape["decode_time"] < (15.0 if "mixtral" in name else 2.0)


def test_llama_tp1_hits_the_paper_anchors() -> None:
    p = load_profile(LLAMA)
    a = anchor_report(p)
    print({k: round(v, 2) for k, v in a.items()})
    assert a["tdec_b1_k900_ms"] == pytest.approx(PAPER["tpot_ms_lowest_rate"], rel=0.10)
    assert 60.0 <= a["prefill_841_one_step_ms"] <= 70.0
    assert a["ttft_841_chunked_ms"] == pytest.approx(PAPER["ttft_ms_lowest_rate"], rel=0.20)
    assert a["saturation_req_s_3_engines"] == pytest.approx(PAPER["saturation_req_s"], rel=0.10)
    assert a["decode_power_w_per_gpu_max_batch"] == pytest.approx(0.95 * p.tdp_w, rel=0.05)
    assert a["prefill_power_w_per_gpu_8192_tokens"] == pytest.approx(p.tdp_w, rel=0.05)


def test_saturation_estimate_is_monotone_in_lengths() -> None:
    p = load_profile(LLAMA)
    base = saturation_estimate(p)["saturation_req_s"]
    assert saturation_estimate(p, isl=1600)["saturation_req_s"] < base
    assert saturation_estimate(p, osl=200)["saturation_req_s"] < base


@pytest.mark.parametrize("name", SHIPPED)
def test_step_power_stays_within_tdp(name: str) -> None:
    p = load_profile(name)
    b = np.arange(1, p.max_num_seqs + 1, dtype=float)
    for ctx in (64.0, 900.0, 4000.0):
        k = np.minimum(b * ctx, p.kv_capacity_tokens)
        w = p.energy.decode(b, k) / p.decode(b, k) / p.tp
        assert np.all(w <= 1.03 * p.tdp_w) and np.all(w > p.idle_w_per_gpu)
    n = np.geomspace(32, min(p.max_num_batched_tokens, 8192), 40)
    w = p.energy.prefill(n, n * n) / p.prefill(n, 1, n * n) / p.tp
    assert np.all(w <= 1.03 * p.tdp_w) and np.all(w > p.idle_w_per_gpu)


@settings(max_examples=60, deadline=None)
@given(idx=st.integers(0, 3), b=st.integers(1, 399), ctx=st.floats(32, 16000), dctx=st.floats(1, 4000),
       n=st.integers(1, 16000), dn=st.integers(1, 4000))
def test_step_times_are_monotone(idx: int, b: int, ctx: float, dctx: float, n: int, dn: int) -> None:
    p = load_profile(SHIPPED[idx])
    b = min(b, p.max_num_seqs - 1)
    assert p.decode(b, b * (ctx + dctx)) >= p.decode(b, b * ctx)
    assert p.decode(b + 1, (b + 1) * ctx) >= p.decode(b, b * ctx)
    assert p.prefill(n + dn, 1, (n + dn) ** 2) > p.prefill(n, 1, n * n)


def test_regenerating_llama_tp1_reproduces_shipped_json(shared_data, tmp_path, capsys) -> None:
    assert main(["calibrate", "geo", "--profile", LLAMA, "--data", str(shared_data), "--out", str(tmp_path),
                 "--tables", str(tmp_path)]) == 0
    shipped = load_profile(LLAMA)
    _assert_same_profile(json.loads((tmp_path / f"{LLAMA}.json").read_text()), json.loads(json.dumps(shipped.to_dict())))
    # the dumped step tables, fitted through the user-CSV path, give the shipped coefficients
    capsys.readouterr()
    assert main(["calibrate", "geo", "--csv", str(tmp_path / f"{LLAMA}_decode.csv"), "--kind", "decode", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["coefficients"]["alpha"] == pytest.approx(list(shipped.decode.alpha), rel=1e-9)
    assert out["mape_holdout_pct"] == shipped.fit_mape["decode_time"]
    assert main(["calibrate", "geo", "--csv", str(tmp_path / f"{LLAMA}_prefill.csv"), "--kind", "energy-prefill",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["coefficients"]["e_p"] == pytest.approx(shipped.energy.e_p, rel=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name", SHIPPED[1:])
def test_regenerating_other_profiles_reproduces_shipped_json(name: str, shared_data, tmp_path) -> None:
    from servegym.calibration.geo.profiles import build_profile

    _assert_same_profile(build_profile(name, shared_data).to_dict(), load_profile(name).to_dict())
