"""The compiled sums of servegym.envs.npu.sim.pairwise_sums equal numpy's float64 sums bit for bit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.envs.npu.sim.pairwise_sums import gathered_dot, pairwise_sum, peak_ratio, range_rates, row_sums


def _values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Mixed signs and magnitudes (1e-5 to 1e15), so any change of summation order changes the rounding."""
    return rng.standard_normal(shape) * 10.0 ** rng.integers(-5, 16, shape)


def test_pairwise_sum_is_numpys_sum() -> None:
    rng = np.random.default_rng(0)
    for n in [*range(0, 300), 517, 1024, 4099]:
        a = _values(rng, (n + 7,))
        for lo in (0, 3, 7):
            want = a[lo:lo + n].sum()
            got = pairwise_sum(a, lo, lo + n)
            assert got == want or (np.isnan(got) and np.isnan(want)), (n, lo)
            assert np.signbit(got) == np.signbit(want)


def test_peak_ratio_is_the_numpy_formula() -> None:
    rng = np.random.default_rng(1)
    for t in range(3000):
        nb, k = int(rng.integers(1, 70)), int(rng.integers(1, 49))
        bins = np.abs(_values(rng, (nb, 2, 48)))  # C-contiguous, as the observation's bins
        bins[rng.random(bins.shape) < 0.3] = 0.0
        phase = int(rng.integers(2))
        buckets = np.sort(rng.choice(48, size=k, replace=False)).astype(np.int64)
        cap = np.abs(_values(rng, (k,)))
        if t % 7 == 0:  # a bucket without capacity (and, as in the simulator's tables, without tokens then)
            cap[0] = 0.0
            bins[:, phase, buckets[0]] = 0.0
        if t % 11 == 0:
            bins[:, phase, buckets] = 0.0
        x = bins[:, phase, buckets] / np.maximum(cap, 1e-300)
        peaks = float(x.max(axis=0).sum())
        want = float(x.sum(axis=1).max()) / peaks if peaks > 0 else 1.0
        assert peak_ratio(bins, phase, buckets, cap) == want, t


def test_range_rates_is_the_numpy_loop() -> None:
    rng = np.random.default_rng(2)
    for _ in range(500):
        rr_in, rp_in, tpr_in = (np.abs(_values(rng, (2, 48))) for _ in range(3))
        rp_in[rng.random(rp_in.shape) < 0.4] = 0.0
        n = int(rng.integers(1, 9))
        phase = rng.integers(0, 2, n).astype(np.int64)
        lo = rng.integers(0, 48, n).astype(np.int64)
        hi = np.minimum(lo + rng.integers(1, 49, n), 48).astype(np.int64)
        got = [np.zeros(n) for _ in range(3)]
        range_rates(rr_in, rp_in, tpr_in, phase, lo, hi, *got)
        for g in range(n):
            p, a, b = phase[g], lo[g], hi[g]
            w = rp_in[p, a:b]
            want = (rr_in[p, a:b].sum(), w.sum(),
                    float((w * tpr_in[p, a:b]).sum() / w.sum()) if w.sum() > 0 else 0.0)
            assert (got[0][g], got[1][g], got[2][g]) == want


def test_phase_sum_is_numpys_sum_of_a_pair() -> None:
    from servegym.envs.npu.rewards import phase_sum

    rng = np.random.default_rng(4)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e308, -1e308]
    vals = [*special, *_values(rng, (40,)).tolist()]
    with np.errstate(all="ignore"):
        for x in vals:
            for y in vals:
                a = np.array([x, y])
                assert np.array(phase_sum(a)).tobytes() == np.array(float(a.sum())).tobytes(), (x, y)
    assert phase_sum(np.arange(5.0)) == 10.0  # other shapes: numpy's own sum


def test_row_sums_is_numpys_sum_over_the_last_axis() -> None:
    # the fluid's queue per (phase, group): q_req (2 x 48 x 48) summed over its last axis
    rng = np.random.default_rng(7)
    for n in (1, 7, 8, 9, 48, 128, 129, 300):
        x = rng.standard_normal((2, 5, n)) * 10.0 ** rng.uniform(-6, 6, (2, 5, n))
        assert np.array_equal(row_sums(x.reshape(10, n)), x.sum(axis=2).ravel())


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 7, 129, 8_193, 300_001]))
def test_gathered_dot_is_numpys_sum_of_products(seed: int, n: int) -> None:
    # the reward's oracle scale: integer tokens times their bucket's per-token figure, summed as numpy sums
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 200_000, n)
    per = rng.random(48) * 10.0 ** rng.uniform(-9, -3, 48)
    idx = rng.integers(0, 48, n).astype(np.int16)
    idx.setflags(write=False)  # as the profile's bucket columns are
    assert gathered_dot(counts, per, idx) == float((counts * per[idx]).sum())
