"""The fluid's TTFT miss count (fluid_kernels.ttft_misses) on one synthetic group: the stationary M/G/1 tail
applies only where the largest level keeps up; in an overloaded bin the Lindley backlog is the wait."""

from __future__ import annotations

import numpy as np
import pytest
from servegym.envs.npu.sim import fluid_kernels as fk
from servegym.envs.npu.sim.config import LEVELS, NB

J = LEVELS.size
DT = 5.0


def _misses(n: float, isl: float, cap_top: float, slack: float, q0: float = 0.0) -> float:
    """Misses among ``n`` prompts of ``isl`` tokens arriving in one 10-s bin at group 0 (every bucket routes there),
    whose capacity is ``cap_top`` best-level vPods at every level (so the largest level's is ``cap_top``) at 1,000
    tokens/s each; roofline latency 0, TTFT SLO = ``slack`` (s); ``q0`` tokens queued at the start."""
    k_len = np.array([10.0])
    k_pre = np.zeros((1, 2, NB))
    k_pre[0, 0, 0] = n
    k_pre[0, 1, 0] = n * isl
    q0p = np.zeros((NB, NB))
    q0p[0, 0] = q0
    gp = np.zeros(NB, dtype=np.int64)
    dom = np.zeros(2 * NB, dtype=np.int64)
    cap = np.full((NB, J), cap_top)
    tps_best = np.full((NB, NB), 1000.0)
    lat = np.zeros((1, NB, J))
    slo_p = np.full(NB, slack)
    isl_m1 = np.full(NB, isl)
    isl_m2 = np.full(NB, isl * isl)
    return fk.ttft_misses(10.0, DT, True, k_len, k_pre, q0p, gp, dom, cap, np.zeros((1, 1, 1)), tps_best, lat,
                          slo_p, isl_m1, isl_m2, True)


def test_an_overloaded_bin_misses_by_the_lindley_backlog_alone() -> None:
    # 200 prompts of 100 tokens (20 vPod-s of work) in 10 s on one vPod: the backlog grows by 10 vPod-s in the bin;
    # an arrival misses once the work ahead exceeds slack x capacity + one job (0.1 vPod-s), so the late share is
    # 1 - (1.0 + 0.1) / 10 = 0.89 and nothing else is added (the server never empties within the bin)
    got = _misses(200.0, 100.0, 1.0, 1.0)
    assert got == pytest.approx(200.0 * 0.89, rel=1e-12)


def test_a_backlog_at_the_bin_start_leaves_no_stationary_tail() -> None:
    # 60 vPod-s queued, 5 vPod-s arriving on 1 vPod: the backlog drains from 60 to 55 in the bin, always above the
    # threshold (1.1 vPod-s): every arrival misses, by the backlog, and the count is exactly n
    assert _misses(50.0, 100.0, 1.0, 1.0, q0=60_000.0) == pytest.approx(50.0, rel=1e-12)


def test_a_bin_the_largest_level_keeps_up_with_has_the_stationary_tail() -> None:
    # 50 prompts (5 vPod-s) on one vPod in 10 s: utilization 0.5, no backlog; the M/G/1 wait's tail gives misses
    # for a slack shorter than the sub-step, and fewer for a longer slack
    short, longer = _misses(50.0, 100.0, 1.0, 0.05), _misses(50.0, 100.0, 1.0, 0.5)
    assert 0.0 < longer < short < 50.0
