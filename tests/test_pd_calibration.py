"""App. B.2 calibration recovers known parameters from synthetic measurements generated with them."""

from __future__ import annotations

import numpy as np
import pytest
from servegym.calibration.pd import fit_decode, fit_power_ramp, fit_prefill
from servegym.envs.pd.sim.catalog import H200, QWEN3_32B, TABLE3
from servegym.envs.pd.sim.model import PDModel
from servegym.envs.pd.sim.workload_moments import WorkloadMoments

from servegym.errors import ConfigError


def test_prefill_recovers_mfu_and_c_a() -> None:
    lengths = np.array([2048, 4096, 8192])  # App. B.3: the three longer input lengths
    mu_p = np.array([PDModel(WorkloadMoments.fixed(n, 256)).mu_p for n in lengths])
    fit = fit_prefill(lengths, mu_p)
    assert fit.mfu == pytest.approx(0.67, rel=1e-9)
    assert fit.c_a == pytest.approx(2.17, rel=1e-9)
    # With 1% multiplicative noise the estimates stay close.
    rng = np.random.default_rng(0)
    noisy = fit_prefill(np.repeat(lengths, 5), np.repeat(mu_p, 5) * (1 + 0.01 * rng.standard_normal(15)))
    assert noisy.mfu == pytest.approx(0.67, rel=0.03)
    assert noisy.c_a == pytest.approx(2.17, rel=0.15)


def _decode_data(mbu: float, t_iter: float, t_req: float, noise: float, seed: int):
    rng = np.random.default_rng(seed)
    bw = H200.mem_bandwidth * mbu
    ctx, batches, times = [], [], []
    for l_in in (1024, 1536, 2048, 4096, 8192):  # App. B.3: five input lengths, 256 output tokens
        l_ctx = l_in + 128
        b = rng.uniform(2, 60, size=22)
        t = (QWEN3_32B.weight_bytes / bw + t_iter) + (QWEN3_32B.kv_bytes_per_token * l_ctx / bw + t_req) * b
        ctx.append(l_ctx)
        batches.append(b)
        times.append(t * (1 + noise * rng.standard_normal(b.size)))
    return ctx, batches, times


def test_decode_recovers_mbu_t_iter_t_req() -> None:
    ctx, b, t = _decode_data(0.77, 1.0e-3, 0.062e-3, 0.0, 1)
    fit = fit_decode(ctx, b, t)
    assert fit.mbu == pytest.approx(0.77, rel=1e-9)
    assert fit.t_iter_s == pytest.approx(1.0e-3, rel=1e-6)
    assert fit.t_req_s == pytest.approx(0.062e-3, rel=1e-6)
    ctx, b, t = _decode_data(0.6, 2.0e-3, 0.1e-3, 0.005, 2)
    fit = fit_decode(ctx, b, t, weights=[np.ones(22)] * 5)
    assert fit.mbu == pytest.approx(0.6, rel=0.03)
    assert fit.t_iter_s == pytest.approx(2.0e-3, abs=0.5e-3)


@pytest.mark.parametrize("ramp", [TABLE3.prefill_ramp, TABLE3.decode_ramp], ids=["prefill", "decode"])
def test_power_ramp_recovers_table3(ramp) -> None:
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 1.0, 400)
    p = ramp(x) + rng.normal(0, 10, x.size)
    fit = fit_power_ramp(x, p)
    assert fit.ramp.p0_w == pytest.approx(ramp.p0_w, abs=12)
    assert fit.ramp.p_sat_w == pytest.approx(ramp.p_sat_w, abs=5)
    assert fit.saturation_point == pytest.approx(ramp.saturation_point, abs=0.05)
    assert fit.rmse_w == pytest.approx(10, rel=0.15)
    # Exact data: exact recovery.
    exact = fit_power_ramp(x, ramp(x))
    assert exact.ramp.slope_w == pytest.approx(ramp.slope_w, rel=1e-4)


def test_power_ramp_respects_p0_lower_bound() -> None:
    x = np.linspace(0, 1, 50)
    p = np.minimum(90 + 600 * x, 650)  # a floor below the 115 W loaded-idle bound
    fit = fit_power_ramp(x, p, p0_min_w=115)
    assert fit.ramp.p0_w >= 115 - 1e-9


def test_calibration_bad_input() -> None:
    with pytest.raises(ConfigError):
        fit_prefill([4096], [2.3])
    with pytest.raises(ConfigError):
        fit_decode([1000, 2000], [[1, 2]], [[0.1, 0.2]])
    with pytest.raises(ConfigError):
        fit_power_ramp([0, 1, 2], [100, 100, 100], p0_min_w=115)
