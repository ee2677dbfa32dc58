"""The compiled sums of servegym.envs.npu.sim.pairwise_sums equal numpy's float64 sums bit for bit."""

from __future__ import annotations

import numpy as np
from servegym.envs.npu.sim.pairwise_sums import pairwise_sum, peak_ratio


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
