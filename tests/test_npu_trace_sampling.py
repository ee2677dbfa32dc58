"""The npu workloads' trace sampling (envs/npu/sim/trace_sampling.py) gives numpy's values bit for bit: the
inverse-CDF lengths np.interp's, on the shipped Azure 2024 length CDFs and on random CDFs with plateaus (repeated
probabilities), for uniform draws, draws at and just below every point, below the first point, and values numpy
treats specially (1, above, NaN); the arrival times those of numpy's repeat, add, sort and cut."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.envs.npu.sim import azure2024
from servegym.envs.npu.sim.trace_sampling import interp_unit, minute_arrivals, sample_tokens, start_table


def _draws(xp: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
    edge = np.concatenate((xp, np.nextafter(xp, -np.inf), np.nextafter(xp, np.inf), [0.0, np.nextafter(1.0, 0.0)]))
    edge = edge[(edge >= 0.0) & (edge < 1.0)]
    return np.concatenate((rng.uniform(0.0, 1.0, n), edge, [1.0, 1.5, -0.25, np.nan]))


def _same(xp: np.ndarray, fp: np.ndarray, u: np.ndarray, left: float) -> None:
    want = np.interp(u, xp, fp, left=left)
    got = interp_unit(u, np.ascontiguousarray(xp), np.ascontiguousarray(fp), left, start_table(xp))
    assert got.tobytes() == want.tobytes()


def test_the_shipped_length_cdfs() -> None:
    rng = np.random.default_rng(3)
    for c in azure2024._cdfs().values():
        _same(c[:, 1], c[:, 0], _draws(c[:, 1], rng, 200_000), 1.0)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 600), st.floats(0.0, 0.9), st.booleans())
def test_random_cdfs_with_plateaus(seed: int, n: int, lo: float, to_one: bool) -> None:
    rng = np.random.default_rng(seed)
    steps = rng.random(n) * (rng.random(n) < 0.6)  # many repeated probabilities, as the digitized CDFs have
    xp = lo + (1.0 - lo) * np.cumsum(steps) / max(steps.sum(), 1e-300)
    if not to_one:
        xp *= rng.uniform(0.5, 1.0)
    xp = np.maximum.accumulate(np.clip(xp, 0.0, 1.0))
    fp = np.cumsum(rng.integers(0, 50, n)).astype(float)  # tokens, flat where a point repeats
    _same(xp, fp, _draws(xp, rng, 2_000), float(rng.choice([1.0, 0.0, -3.5])))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([None, 3500.0, 40.0]))
def test_sampled_tokens_are_the_numpy_composition(seed: int, cap: float | None) -> None:
    # rint (half to even), at least 1 token, Table 4's cap, int64: the same values as the numpy steps one by one
    rng = np.random.default_rng(seed)
    for c in azure2024._cdfs().values():
        xp, fp = np.ascontiguousarray(c[:, 1]), np.ascontiguousarray(c[:, 0])
        u = _draws(xp, rng, 5_000)[:-4]  # the draws in [0, 1) (sample_lengths draws no others)
        u = np.concatenate((u, [0.0]))
        tok = np.maximum(np.rint(np.interp(u, xp, fp, left=1.0)), 1.0)
        if cap is not None:
            tok = np.minimum(tok, cap)
        got = sample_tokens(u, xp, fp, start_table(xp), -1.0 if cap is None else cap)
        assert got.dtype == np.int64 and np.array_equal(got, tok.astype(np.int64))
    # a half-way value rounds to even, as np.rint does
    xp2, fp2 = np.array([0.0, 1.0]), np.array([1.0, 4.0])  # u = 0.5 -> 2.5 tokens -> 2
    assert sample_tokens(np.array([0.5, 0.25, 0.0]), xp2, fp2, start_table(xp2), -1.0).tolist() == [2, 2, 1]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 120), st.floats(0.0, 1.1))
def test_minute_arrivals_are_numpys_sorted_times(seed: int, minutes: int, cut: float) -> None:
    # the fused times, sorted and cut at the horizon, are numpy's: draws at 0 and just below 1 included (a time that
    # rounds onto the next minute's start), empty minutes, and a horizon inside a minute, on a time, or past the end
    rng = np.random.default_rng(seed)
    counts = rng.poisson(rng.uniform(0.0, 40.0), minutes) * (rng.random(minutes) < 0.8)
    u = rng.uniform(0.0, 1.0, int(counts.sum()))
    if u.size:
        u[rng.integers(0, u.size, max(u.size // 10, 1))] = rng.choice([0.0, np.nextafter(1.0, 0.0)])
    t = (np.repeat(np.arange(minutes, dtype=float), counts) + u) * 60.0
    t.sort()
    horizon = cut * minutes * 60.0
    if t.size and rng.random() < 0.3:
        horizon = float(t[rng.integers(0, t.size)])
    want = t[t < horizon]
    got = minute_arrivals(counts, u, horizon)
    assert got.tobytes() == want.tobytes()
