"""Arrival processes, length samplers and request streams: seeded, vectorized, validated."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.envs.traces import load_lengths, load_trace
from servegym.envs.workload import (
    LOGNORMAL_PRESETS,
    EmpiricalLengths,
    FixedLengths,
    LengthSampler,
    LognormalLengths,
    Requests,
    length_sampler,
    length_specs,
    make_requests,
    poisson_arrivals,
    rate_schedule_arrivals,
    trace_arrivals,
    trace_rate_schedule,
)

from servegym.errors import ConfigError


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ------------------------------------------------------------------------------------------- Requests


def test_requests_validates_and_is_read_only() -> None:
    r = Requests(np.array([0.0, 1.0]), np.array([3, 4]), np.array([5, 6]))
    assert len(r) == 2 and r.origin.dtype == np.int16 and r.origin.tolist() == [0, 0]
    with pytest.raises(ValueError):
        r.arrival_s[0] = 9.0
    with pytest.raises(ConfigError, match="equal lengths"):
        Requests(np.zeros(2), np.ones(3, dtype=np.int64), np.ones(2, dtype=np.int64))
    with pytest.raises(ConfigError, match="ascending"):
        Requests(np.array([1.0, 0.0]), np.ones(2, dtype=np.int64), np.ones(2, dtype=np.int64))
    with pytest.raises(ConfigError, match="input_tokens"):
        Requests(np.zeros(2), np.array([1, 0]), np.ones(2, dtype=np.int64))
    with pytest.raises(ConfigError, match="integers"):
        Requests(np.zeros(1), np.array([1.5]), np.ones(1, dtype=np.int64))
    empty = Requests(np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert len(empty) == 0 and len(empty.window(0, 10)) == 0


def test_window_is_half_open() -> None:
    r = Requests(np.array([0.0, 1.0, 1.0, 2.0]), np.arange(1, 5), np.arange(1, 5))
    assert r.window(1.0, 2.0).input_tokens.tolist() == [2, 3]
    assert len(r.window(2.0, 1.0)) == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 100, allow_nan=False), max_size=60),
       st.lists(st.floats(-10, 110, allow_nan=False), max_size=6))
def test_windows_partition_the_stream(times: list[float], cuts: list[float]) -> None:
    arrival = np.sort(np.array(times, dtype=np.float64))
    r = Requests(arrival, np.arange(1, arrival.size + 1), np.ones(arrival.size, dtype=np.int64))
    edges = [-np.inf, *sorted(cuts), np.inf]
    parts = [r.window(a, b) for a, b in itertools.pairwise(edges)]
    assert sum(len(p) for p in parts) == len(r)
    np.testing.assert_array_equal(np.concatenate([p.input_tokens for p in parts]), r.input_tokens)
    for (a, b), p in zip(itertools.pairwise(edges), parts, strict=True):
        assert np.all((p.arrival_s >= a) & (p.arrival_s < b))


# ------------------------------------------------------------------------------------------- arrivals


def test_poisson_rate_and_exponential_gaps() -> None:
    t = poisson_arrivals(50.0, 2000.0, _rng(1))
    assert t.size / 2000.0 == pytest.approx(50.0, rel=0.015)  # sd of the count is 0.32 %
    gaps = np.diff(t)
    assert np.all(gaps >= 0) and t.min() >= 0 and t.max() < 2000.0
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.02)  # exponential gaps have CV 1
    assert poisson_arrivals(0.0, 10.0, _rng()).size == 0
    with pytest.raises(ConfigError, match="rate_rps"):
        poisson_arrivals(-1.0, 10.0, _rng())


def test_rate_schedule_follows_the_rates() -> None:
    rates = np.array([10.0, 0.0, 40.0])
    t = rate_schedule_arrivals(rates, 100.0, _rng(2), scale=2.0)
    counts = np.bincount((t // 100).astype(int), minlength=3)
    assert counts[1] == 0
    assert counts[0] == pytest.approx(2000, rel=0.08) and counts[2] == pytest.approx(8000, rel=0.04)
    assert np.all(np.diff(t) >= 0)
    with pytest.raises(ConfigError, match="rates_rps"):
        rate_schedule_arrivals([1.0, -1.0], 1.0, _rng())
    with pytest.raises(ConfigError, match="interval_s"):
        rate_schedule_arrivals([1.0], 0.0, _rng())


def test_trace_rate_schedule_counts_whole_minutes() -> None:
    rates = trace_rate_schedule("azure-conv", interval_s=60.0)
    arrival = load_trace("azure-conv").arrival_s
    assert rates.size == 58  # 3501.7 s holds 58 whole minutes
    assert rates.sum() * 60 == pytest.approx(np.count_nonzero(arrival < 58 * 60), abs=1e-6)
    with pytest.raises(ConfigError, match="interval_s"):
        trace_rate_schedule("azure-conv", interval_s=1e5)


def test_trace_replay_time_scale() -> None:
    np.testing.assert_allclose(trace_arrivals("mooncake", time_scale=0.25),
                               load_trace("mooncake").arrival_s * 0.25)


# -------------------------------------------------------------------------------------------- lengths


@pytest.mark.parametrize("spec", [s for s in length_specs() if s != "fixed:IN:OUT"] + ["fixed:4096:256"])
def test_every_spec_is_seeded_and_valid(spec: str) -> None:
    sampler = length_sampler(spec)
    assert isinstance(sampler, LengthSampler)
    a = sampler.sample(2000, _rng(7))
    b = sampler.sample(2000, _rng(7))
    c = sampler.sample(2000, _rng(8))
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)
        assert x.dtype == np.int64 and x.shape == (2000,) and x.min() >= 1
    if not isinstance(sampler, FixedLengths):
        assert not np.array_equal(a[0], c[0])


def test_empirical_pairs_keep_their_correlation() -> None:
    # arXiv lengths are strongly anti-correlated (input + output <= 4,096 tokens).
    isl, osl = load_lengths("arxiv")
    true_r = np.corrcoef(isl, osl)[0, 1]
    assert true_r < -0.4
    si, so = EmpiricalLengths.from_trace("arxiv").sample(50_000, _rng(3))
    assert np.corrcoef(si, so)[0, 1] == pytest.approx(true_r, abs=0.02)
    assert np.all(si + so <= 4096)  # every draw is a real pair
    ui, uo = EmpiricalLengths.from_trace("arxiv", paired=False).sample(50_000, _rng(3))
    assert abs(np.corrcoef(ui, uo)[0, 1]) < 0.02


def test_mooncake_spec_applies_the_paper_filter() -> None:
    s = length_sampler("mooncake")
    assert isinstance(s, EmpiricalLengths) and len(s) == 11384
    assert s.input_tokens.max() <= 38_000
    assert len(EmpiricalLengths.from_trace("mooncake")) == 12031


@pytest.mark.parametrize("name", list(LOGNORMAL_PRESETS))
def test_lognormal_presets_hit_their_means(name: str) -> None:
    s = LognormalLengths.preset(name)
    isl, osl = s.sample(200_000, _rng(11))
    assert isl.mean() == pytest.approx(s.isl_mean, rel=0.02)
    assert osl.mean() == pytest.approx(s.osl_mean, rel=0.02)
    assert isl.min() >= s.isl_min and isl.max() <= s.isl_max
    assert osl.min() >= s.osl_min and osl.max() <= s.osl_max
    cv_i, cv_o = s.realised_cv()
    assert isl.std() / isl.mean() == pytest.approx(cv_i, rel=0.05)
    assert osl.std() / osl.mean() == pytest.approx(cv_o, rel=0.05)
    assert s.source  # every preset cites its numbers


def test_paper_numbers_of_presets() -> None:
    assert LognormalLengths.preset("cnn-dailymail").means() == (841, 71)
    assert LognormalLengths.preset("openorca").means() == (195, 211)
    assert LognormalLengths.preset("govreport").isl_mean == 10_700
    assert LognormalLengths.preset("geo-mixed").isl_mean == 2_900
    lv = LognormalLengths.preset("lveval")
    assert (lv.isl_min, lv.isl_mean, lv.isl_max, lv.osl_mean, lv.osl_max) == (8_800, 105_000, 431_000, 17, 278)
    ot = LognormalLengths.preset("openthoughts")
    assert (ot.isl_mean, ot.osl_min, ot.osl_mean, ot.osl_max) == (246, 531, 11_600, 16_800)


def test_lognormal_mean_is_exact_under_a_binding_clip() -> None:
    # Half the unclipped mass would exceed the cap; the solved location still gives the target mean.
    s = LognormalLengths(900, 1.5, 50, 0.5, isl_max=1000, osl_max=1000)
    isl, _ = s.sample(200_000, _rng(5))
    assert isl.mean() == pytest.approx(900, rel=0.01)
    assert np.mean(isl == 1000) > 0.3


def test_lognormal_rho_correlates() -> None:
    isl, osl = LognormalLengths(500, 0.5, 500, 0.5, rho=0.8).sample(50_000, _rng(4))
    assert np.corrcoef(np.log(isl), np.log(osl))[0, 1] == pytest.approx(0.8, abs=0.02)


def test_bad_specs_and_parameters() -> None:
    with pytest.raises(ConfigError) as info:
        length_sampler("sharegpt")
    msg = str(info.value)
    assert "sharegpt" in msg and all(s in msg for s in ("azure-conv", "mooncake", "lveval", "fixed:IN:OUT"))
    with pytest.raises(ConfigError, match="fixed:IN:OUT"):
        length_sampler("fixed:4096")
    with pytest.raises(ConfigError, match="isl"):
        length_sampler("fixed:0:5")
    with pytest.raises(ConfigError, match="isl_mean"):
        LognormalLengths(0.5, 1.0, 10, 1.0)
    with pytest.raises(ConfigError, match="osl_cv"):
        LognormalLengths(10, 1.0, 10, -1.0)
    with pytest.raises(ConfigError, match="preset"):
        LognormalLengths.preset("nope")
    with pytest.raises(ConfigError, match="n = -1"):
        FixedLengths(1, 1).sample(-1, _rng())


def test_fixed_lengths() -> None:
    isl, osl = length_sampler("fixed:4096:256").sample(3, _rng())
    assert isl.tolist() == [4096] * 3 and osl.tolist() == [256] * 3


# ------------------------------------------------------------------------------------------ streams


def test_make_requests_origins_and_determinism() -> None:
    arrival = poisson_arrivals(100.0, 5.0, _rng(0))
    r1 = make_requests(arrival, length_sampler("azure-conv"), _rng(9), n_origins=4)
    r2 = make_requests(arrival, length_sampler("azure-conv"), _rng(9), n_origins=4)
    np.testing.assert_array_equal(r1.input_tokens, r2.input_tokens)
    assert r1.origin.tolist() == [i % 4 for i in range(len(r1))]
    ru = make_requests(arrival, FixedLengths(10, 10), _rng(9), n_origins=3, origin="uniform")
    assert set(ru.origin.tolist()) == {0, 1, 2}
    with pytest.raises(ConfigError, match="origin"):
        make_requests(arrival, FixedLengths(1, 1), _rng(), origin="nearest")
    with pytest.raises(ConfigError, match="n_origins"):
        make_requests(arrival, FixedLengths(1, 1), _rng(), n_origins=0)


def test_azure_timestamps_with_other_lengths() -> None:
    # The npu paper replays LVEval / OpenThoughts lengths on Azure timestamps.
    arrival = trace_arrivals("azure-code")
    r = make_requests(arrival, length_sampler("lveval"), _rng(1))
    assert len(r) == 8819 and r.input_tokens.min() >= 8_800


@settings(max_examples=80, deadline=None)
@given(st.floats(1.5, 5e4), st.floats(0.05, 4.0), st.floats(1.05, 20.0))
def test_solved_location_gives_the_exact_clipped_mean(mean: float, cv: float, cap_factor: float) -> None:
    from servegym.envs.workload import _clipped_lognormal_mean, _solve_mu

    hi = mean * cap_factor
    mu, sigma = _solve_mu(mean, cv, 1.0, hi)
    assert _clipped_lognormal_mean(mu, sigma, 1.0, hi) == pytest.approx(mean, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 50), min_size=1, max_size=20), st.floats(0.1, 10), st.integers(0, 2**32 - 1))
def test_rate_schedule_stays_inside_its_span(rates: list[float], interval_s: float, seed: int) -> None:
    t = rate_schedule_arrivals(rates, interval_s, _rng(seed))
    assert np.all(np.diff(t) >= 0)
    assert t.size == 0 or (t[0] >= 0 and t[-1] < len(rates) * interval_s)
    # No arrivals fall in zero-rate intervals.
    zero = np.flatnonzero(np.asarray(rates) == 0)
    assert not np.isin((t // interval_s).astype(int), zero).any()
