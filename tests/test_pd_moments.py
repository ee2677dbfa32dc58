"""Workload moments of the PD model: Lemma 4.1 against brute force, constructors, trace filters, errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.envs.pd.sim.workload_moments import WorkloadMoments, parse_workload

from servegym.errors import ConfigError


def _iteration_brute_force(isl: np.ndarray, osl: np.ndarray, slots: int, rng: np.random.Generator) -> float:
    """Run a continuous-batching decode loop and average the context over active request-iterations.

    Requests are admitted in a random order into at most ``slots`` concurrent places; each iteration
    every active request contributes its current context (l_in + 1, ..., l_in + l_out - 1 over its life).
    """
    order = list(rng.permutation(isl.size))
    active: list[list[int]] = []  # [context, remaining decode iterations]
    ctx_sum = 0
    pairs = 0
    while order or active:
        while order and len(active) < slots:
            r = order.pop()
            if osl[r] > 1:
                active.append([int(isl[r]) + 1, int(osl[r]) - 1])
        ctx_sum += sum(a[0] for a in active)
        pairs += len(active)
        for a in active:
            a[0] += 1
            a[1] -= 1
        active = [a for a in active if a[1] > 0]
    return ctx_sum / pairs


def test_lemma_4_1_matches_iteration_sum() -> None:
    rng = np.random.default_rng(7)
    isl = rng.integers(1, 3000, size=400)
    osl = 1 + rng.geometric(1 / 120, size=400)  # includes long outputs: the residence correction matters
    osl = np.where(rng.random(400) < 0.5, osl, osl + isl // 20)  # positive input-output covariance
    brute = _iteration_brute_force(isl, osl, slots=37, rng=rng)
    lemma = WorkloadMoments.from_samples(isl, osl).mean_active_context()
    assert lemma == pytest.approx(brute, rel=1e-12)
    # The arrival-average context alone misses the residence correction by a wide margin here.
    assert abs(isl.mean() + osl.mean() / 2 - brute) > 10


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5000), st.integers(1, 600)), min_size=1, max_size=40), st.integers(1, 9))
def test_lemma_4_1_any_sample(pairs: list[tuple[int, int]], slots: int) -> None:
    isl = np.array([p[0] for p in pairs])
    osl = np.array([p[1] for p in pairs])
    if osl.mean() <= 1:
        with pytest.raises(ConfigError):
            WorkloadMoments.from_samples(isl, osl)
        return
    brute = _iteration_brute_force(isl, osl, slots, np.random.default_rng(0))
    assert WorkloadMoments.from_samples(isl, osl).mean_active_context() == pytest.approx(brute, rel=1e-9)


def test_fixed_equals_samples_and_context() -> None:
    f = WorkloadMoments.fixed(4096, 256)
    s = WorkloadMoments.from_samples(np.full(10, 4096), np.full(10, 256))
    for name in ("in_m1", "in_m2", "in_m3", "in_m4", "out_mean", "out_var", "cov_in_out"):
        assert getattr(f, name) == pytest.approx(getattr(s, name), rel=1e-12, abs=1e-9)
    assert f.mean_active_context() == 4096 + 128  # App. B.2: l_in + l_out / 2 for fixed lengths


def test_weighted_distribution_equals_repeated_samples() -> None:
    w = WorkloadMoments.from_distribution([100, 2000], [10, 300], [3, 1])
    s = WorkloadMoments.from_samples([100, 100, 100, 2000], [10, 10, 10, 300])
    assert w.in_m4 == pytest.approx(s.in_m4, rel=1e-12)
    assert w.cov_in_out == pytest.approx(s.cov_in_out, rel=1e-12)
    assert w.mean_active_context() == pytest.approx(s.mean_active_context(), rel=1e-12)


def test_independent_drops_covariance_only() -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(10, 1000, 500)
    y = x // 3 + 2
    dep = WorkloadMoments.from_samples(x, y)
    ind = WorkloadMoments.from_samples(x, y, independent=True)
    assert dep.cov_in_out > 0 and ind.cov_in_out == 0
    assert ind.in_m2 == dep.in_m2 and ind.out_var == dep.out_var


def test_lognormal_closed_form_matches_monte_carlo() -> None:
    w = WorkloadMoments.lognormal(1000, 0.8, 200, 1.0, corr_log=0.5)
    rng = np.random.default_rng(3)
    sx, sy = np.sqrt(np.log1p(0.64)), np.sqrt(np.log1p(1.0))
    z = rng.multivariate_normal([0, 0], [[1, 0.5], [0.5, 1]], size=400_000)
    x = np.exp(np.log(1000) - sx**2 / 2 + sx * z[:, 0])
    y = np.exp(np.log(200) - sy**2 / 2 + sy * z[:, 1])
    assert np.mean(x**2) == pytest.approx(w.in_m2, rel=0.02)
    assert np.cov(x, y)[0, 1] == pytest.approx(w.cov_in_out, rel=0.05)
    assert y.var() == pytest.approx(w.out_var, rel=0.05)


def test_trace_filters_follow_appendix_b4() -> None:
    moon = parse_workload("mooncake")
    conv = parse_workload("azure-conv")
    from servegym.envs.pd.sim.workload_moments import trace_lengths

    x, _ = trace_lengths("mooncake")
    assert x.max() <= 38_000 and x.size == 12_031 - 647  # App. B.4: excludes 647 of 12,031
    assert trace_lengths("azure-conv")[0].size == 19_366  # App. B.4: the filter excludes none
    assert moon.cov_in_out == 0.0  # the paper's Mooncake runs drew the lengths independently
    assert conv.cov_in_out != 0.0
    assert conv.in_m1 == pytest.approx(1158, rel=0.01) and conv.out_mean == pytest.approx(211, rel=0.01)  # Table 2


@pytest.mark.parametrize("spec", ["fixed:0:10", "fixed:10:1", "fixed:a:b", "azure", "fixed:10", ""])
def test_bad_workload_specs(spec: str) -> None:
    with pytest.raises(ConfigError):
        parse_workload(spec)


def test_bad_sample_arrays() -> None:
    with pytest.raises(ConfigError, match="lengths"):
        WorkloadMoments.from_samples([1, 2], [3])
    with pytest.raises(ConfigError, match=">= 1"):
        WorkloadMoments.from_samples([0, 2], [3, 4])
    with pytest.raises(ConfigError, match="output"):
        WorkloadMoments.from_samples([5, 6], [1, 1])
    with pytest.raises(ConfigError, match="corr_log"):
        WorkloadMoments.lognormal(100, 1, 100, 1, corr_log=2)
