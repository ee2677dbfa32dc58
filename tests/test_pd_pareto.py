"""Pareto fronts and provisioning choices, checked against brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.envs.pd.sim.model import PDModel
from servegym.envs.pd.sim.pareto import eps_front, exact_front, max_capacity_under_power, min_power_deployment
from servegym.envs.pd.sim.workload_moments import WorkloadMoments

from servegym.errors import ConfigError

points = st.lists(st.tuples(st.floats(0.1, 100), st.floats(100, 10000)), min_size=1, max_size=30)


def _dominated(c: np.ndarray, p: np.ndarray, i: int) -> bool:
    return bool(np.any((c >= c[i]) & (p <= p[i]) & ((c > c[i]) | (p < p[i]))))


@settings(max_examples=60, deadline=None)
@given(points)
def test_exact_front_is_the_nondominated_set(pts: list[tuple[float, float]]) -> None:
    c, p = np.array(pts).T
    front = set(exact_front(c, p).tolist())
    for i in range(c.size):
        if _dominated(c, p, i):
            assert i not in front
        else:  # non-dominated: on the front unless an identical earlier point represents it
            dup = np.flatnonzero((c == c[i]) & (p == p[i]))
            assert i in front or dup[0] != i


@settings(max_examples=60, deadline=None)
@given(points, st.sampled_from([0.01, 0.03, 0.1]))
def test_eps_front_covers_everything_and_is_minimal(pts: list[tuple[float, float]], eps: float) -> None:
    c, p = np.array(pts).T
    front = eps_front(c, p, eps)
    exact = exact_front(c, p)
    assert set(front.tolist()) <= set(exact.tolist())
    for i in range(c.size):  # every point is eps-dominated by a front point
        assert np.any((c[front] * (1 + eps) >= c[i]) & (p[front] <= (1 + eps) * p[i]))
    # Minimality: no subset of the exact front with one point fewer covers the exact front (small cases).
    if exact.size <= 8 and front.size > 1:
        from itertools import combinations

        for subset in combinations(exact.tolist(), front.size - 1):
            s = np.array(subset)
            covered = all(np.any((c[s] * (1 + eps) >= c[i]) & (p[s] <= (1 + eps) * p[i])) for i in exact)
            assert not covered


def test_fronts_on_the_paper_workload() -> None:
    g = PDModel(WorkloadMoments.fixed(4096, 256)).grid(8)
    front = [g.labels()[i] for i in eps_front(g.mu, g.power_w)]
    # The paper's Fig. 4 fixed-length front starts 1p1d, 2p1d, 3p1d, 3p2d (then 4p2d, 5p2d, ...).
    assert front[:4] == ["1p1d", "2p1d", "3p1d", "3p2d"]
    assert len(front) <= exact_front(g.mu, g.power_w).size


def test_min_power_and_max_capacity_match_brute_force() -> None:
    m = PDModel(WorkloadMoments.lognormal(1500, 1.0, 250, 1.0, corr_log=0.2))
    g = m.grid(10)
    for rate in (0.5, 3.0, 7.5, 12.0):
        sel = min_power_deployment(g, rate)
        feas = np.flatnonzero(g.mu >= rate / 0.85)
        if feas.size == 0:
            assert sel is None
            continue
        assert sel is not None and sel.mu >= rate / 0.85
        assert sel.power_w == pytest.approx(g.power_w[feas].min())
        at_rate = min_power_deployment(g, rate, power_at="rate", model=m)
        p_rate = m.power_w(g.n_p, g.n_d, np.full(len(g), rate), mu=g.mu)
        assert at_rate is not None and at_rate.power_w == pytest.approx(p_rate[feas].min())
    for budget in (1000.0, 2500.0, 4000.0):
        sel = max_capacity_under_power(g, budget)
        fits = np.flatnonzero(g.power_w <= budget)
        if fits.size == 0:
            assert sel is None
        else:
            assert sel is not None and sel.mu == pytest.approx(g.mu[fits].max()) and sel.power_w <= budget
    assert min_power_deployment(g, 1e6) is None


def test_pareto_bad_input() -> None:
    with pytest.raises(ConfigError, match="eps"):
        eps_front([1.0], [1.0], eps=0)
    with pytest.raises(ConfigError):
        exact_front([1.0, 2.0], [1.0])
    g = PDModel(WorkloadMoments.fixed(1024, 256)).grid(4)
    with pytest.raises(ConfigError, match="rho_bar"):
        min_power_deployment(g, 1.0, rho_bar=1.5)
    with pytest.raises(ConfigError, match="power_at"):
        min_power_deployment(g, 1.0, power_at="peak")  # type: ignore[arg-type]
