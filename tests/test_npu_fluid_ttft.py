"""The fluid's TTFT miss count (fluid_kernels.ttft_misses) on one synthetic group: the stationary M/G/1 tail
applies only where the largest level keeps up; in an overloaded bin the Lindley backlog is the wait."""

from __future__ import annotations

import numpy as np
import pytest
from servegym.envs.npu.sim import fluid_kernels as fk
from servegym.envs.npu.sim.config import LEVELS, NB
from servegym.envs.npu.sim.fluid_tail import residual_share

J = LEVELS.size
DT = 5.0


def _misses(n: float | np.ndarray, isl: float, cap_top: float, slack: float, q0: float = 0.0, caps: np.ndarray | None = None,
            q_job: np.ndarray | None = None, n_bins: int = 1, check_s: float = 60.0, n_job: np.ndarray | None = None,
            q_obs: np.ndarray | None = None, q0r: float = 0.0) -> float:
    """Misses among ``n`` prompts of ``isl`` tokens arriving in each of ``n_bins`` 10-s bins at group 0 (every bucket
    routes there), whose capacity is ``cap_top`` best-level vPods at every level (so the largest level's is
    ``cap_top``; ``caps``: per level instead) at 1,000 tokens/s each; roofline latency 0, TTFT SLO = ``slack`` (s);
    ``q0`` tokens queued at the start (token fluid) in ``q0r`` requests, ``q_job`` the job queue's waiting work (vPod-s,
    updated), ``n_job`` its jobs (updated), ``q_obs`` the observed queue (2 x 48, written)."""
    k_len = np.full(n_bins, 10.0)
    k_pre = np.zeros((n_bins, 2, NB))
    k_pre[:, 0, 0] = n
    k_pre[:, 1, 0] = np.asarray(n) * isl
    q0p = np.zeros((NB, NB))
    q0p[0, 0] = q0
    q0r_a = np.zeros((NB, NB))
    q0r_a[0, 0] = q0r
    gp = np.zeros(NB, dtype=np.int64)
    dom = np.zeros(2 * NB, dtype=np.int64)
    cap = np.full((NB, J), cap_top) if caps is None else np.tile(caps, (NB, 1))
    tps_best = np.full((NB, NB), 1000.0)
    lat = np.zeros((1, NB, J))
    slo_p = np.full(NB, slack)
    isl_m1 = np.full(NB, isl)
    isl_m2 = np.full(NB, isl * isl)
    for a in (isl_m1, isl_m2):  # read-only, as the workload profile's are: production's compile, not a second one
        a.setflags(write=False)
    return fk.ttft_misses(10.0 * n_bins, DT, True, k_len, k_pre, q0p, gp, dom, cap, np.zeros((1, 1, 1)), tps_best,
                          lat, slo_p, isl_m1, isl_m2, True, np.zeros(NB), check_s,
                          np.zeros(NB) if q_job is None else q_job, q0r_a, np.zeros(NB) if n_job is None else n_job,
                          np.zeros((2, NB)) if q_obs is None else q_obs)


def test_an_overloaded_bin_misses_by_the_lindley_backlog_alone() -> None:
    # 200 prompts of 100 tokens (20 vPod-s of work) in 10 s on one vPod: the backlog grows by 10 vPod-s in the bin;
    # an arrival misses once the work ahead of it (its own not included) exceeds slack x capacity (1 vPod-s), so
    # the late share is 1 - 1.0 / 10 = 0.9 and nothing else is added (the server never empties within the bin)
    got = _misses(200.0, 100.0, 1.0, 1.0)
    assert got == pytest.approx(200.0 * 0.9, rel=1e-12)


def test_a_backlog_at_the_bin_start_leaves_no_stationary_tail() -> None:
    # 60 vPod-s queued, 5 vPod-s arriving on 1 vPod: the backlog drains from 60 to 55 in the bin, always above the
    # threshold (1 vPod-s): every arrival misses, by the backlog, and the count is exactly n
    assert _misses(50.0, 100.0, 1.0, 1.0, q0=60_000.0) == pytest.approx(50.0, rel=1e-12)


def test_a_bin_the_largest_level_keeps_up_with_has_the_stationary_tail() -> None:
    # 50 prompts (5 vPod-s) on one vPod in 10 s: utilization 0.5, no backlog; the M/G/1 wait's tail gives misses
    # for a slack shorter than the sub-step, and fewer for a longer slack
    short, longer = _misses(50.0, 100.0, 1.0, 0.05), _misses(50.0, 100.0, 1.0, 0.5)
    assert 0.0 < longer < short < 50.0


def test_the_sub_step_bound_on_the_stationary_wait_needs_a_level_that_sets_the_capacity() -> None:
    # one 4,000-token prompt per 10 s on one vPod at every level (a long prompt's tokens/s does not grow with the
    # batch): service 4 s, utilization 0.4, P-K mean 0.4 x 16 / (2 x 4 x 0.6) = 1.33 s, above half the sub-step's
    # work (0.5 x 0.4 x 5 = 1 s). The request level's server cannot speed up there, so the mean is not capped
    r, wq = 0.4, 0.4 * 16.0 / (2.0 * 4.0 * 0.6)
    # (the tail is the one given the bin's realized work, fluid_tail.bin_tail, which reads the mean through its
    # P-K floor: capped at 1 s it would be lighter)
    want = fk.bin_tail(1.0, r, 4.0, 16.0, wq, 10.0)
    assert _misses(1.0, 4000.0, 1.0, 1.0) == pytest.approx(want, rel=1e-12)
    assert fk.bin_tail(1.0, r, 4.0, 16.0, 1.0, 10.0) < 0.99 * want
    # the lowest level at half the capacity: it serves the 4 vPod-s (utilization 0.8, service 8 s, P-K mean 16 s)
    # and a busier sub-step would run at a larger, faster level, so the mean stays at most 0.5 x 0.8 x 5 = 2 s, and
    # the work is pinned over a sub-step (5 s), not the bin (the request level re-sizes its server every sub-step)
    caps = np.full(J, 1.0)
    caps[0] = 0.5
    assert _misses(1.0, 4000.0, 1.0, 1.0, caps=caps) == pytest.approx(fk.bin_tail(1.0, 0.8, 8.0, 64.0, 2.0, DT),
                                                                     rel=1e-12)


def test_a_fixed_rate_group_has_its_tail_beyond_a_sub_step() -> None:
    # one 4,000-token prompt per 10 s on one vPod (service 4 s, utilization 0.4; P-K mean 1.33 s): a slack of 2.5 s
    # is beyond a sub-step's work (0.4 x 5 = 2 s). Where a busier sub-step gets a faster server the request level's
    # wait stays within that, so nothing is counted; at one rate for every level (LVEval's long-prompt groups) the
    # FCFS wait has no such bound and the tail counts at every slack (the residual bound needs another arrival)
    r, wq = 0.4, 0.4 * 16.0 / (2.0 * 4.0 * 0.6)
    want = fk.bin_tail(2.5, r, 4.0, 16.0, wq, 10.0)
    assert want > 0.1
    assert _misses(1.0, 4000.0, 1.0, 2.5) == pytest.approx(want, rel=1e-12)
    caps = np.full(J, 1.0)
    caps[0] = 0.999  # a capacity that depends on the level (by a hair): the sub-step cut-off applies
    assert _misses(1.0, 4000.0, 1.0, 2.5, caps=caps) == 0.0


def _mixed(n_short: float, n_long: float, isl_long: float, slack: float) -> tuple[float, float]:
    """TTFT misses among ``n_short`` 100-token prompts (bucket 0) and ``n_long`` prompts of ``isl_long`` tokens (bucket
    1) arriving in one 10-s bin at group 0, one vPod at 1,000 tokens/s at every level, latency 0, TTFT SLO ``slack``
    s for both; and the bin tail alone for that bin's load and job mix (:func:`fluid_tail.bin_tail`)."""
    k_pre = np.zeros((1, 2, NB))
    k_pre[0, 0, :2] = n_short, n_long
    k_pre[0, 1, :2] = n_short * 100.0, n_long * isl_long
    isl_m1 = np.zeros(NB)
    isl_m1[:2] = 100.0, isl_long
    got = fk.ttft_misses(10.0, DT, True, np.array([10.0]), k_pre, np.zeros((NB, NB)), np.zeros(NB, dtype=np.int64),
                         np.zeros(2 * NB, dtype=np.int64), np.ones((NB, J)), np.zeros((1, 1, 1)),
                         np.full((NB, NB), 1000.0), np.zeros((1, NB, J)), np.full(NB, slack), isl_m1, isl_m1 ** 2,
                         True, np.zeros(NB), 60.0, np.zeros(NB), np.zeros((NB, NB)), np.zeros(NB), np.zeros((2, NB)))
    n = n_short + n_long
    s1 = (n_short * 0.1 + n_long * isl_long / 1000.0) / n
    s2 = (n_short * 0.01 + n_long * (isl_long / 1000.0) ** 2) / n
    r = n * s1 / 10.0
    return got, n * fk.bin_tail(slack, r, s1, s2, r * s2 / (2.0 * s1 * (1.0 - r)), 10.0)


def test_an_arrival_waits_out_the_rest_of_a_long_job_in_service() -> None:
    # 20 prompts of 0.1 s and, on average, a quarter of an 8-s one per 10-s bin (utilization 0.4): the 8-s prompt holds
    # the server 8 s, and the others arriving in its first 8 - 4 = 4 s wait more than 4 s for its rest alone: at the
    # bin's rate less that job, 19.25 / 10 per s, 0.25 x 4 x 19.25 / 10 = 1.925 of the 20.25 arrivals. The bin tail
    # (the queue's diffusion at that load and mix, which spreads the long job's work over the bin) gives 1.30: below
    # that lower bound, which is the count
    got, diffusion = _mixed(20.0, 0.25, 8000.0, 4.0)
    assert diffusion < 1.31
    assert got == pytest.approx(1.925, rel=1e-12)
    assert residual_share(np.array([[[20.0, 0.25]]]), np.zeros(2, dtype=np.int64), np.array([100.0, 8000.0]),
                             np.full(2, 1000.0), 0, 0, 1.0, 4.0, 10.0) == pytest.approx(1.925 / 20.25, rel=1e-12)
    # a long job shorter than the slack leaves only the bin tail (the Azure mixes: prompts of well under a second)
    got, diffusion = _mixed(20.0, 0.25, 3500.0, 4.0)
    assert got == pytest.approx(diffusion, rel=1e-12)
    # where the queue's diffusion is heavier than the bound (a long job's share of the load large), it stays the count
    got, diffusion = _mixed(10.0, 1.0, 4000.0, 2.0)
    assert got == pytest.approx(diffusion, rel=1e-12) and diffusion > 0.2 * 11.0


def test_queued_jobs_keep_the_price_of_the_level_they_arrived_at() -> None:
    # the request level prices a job's service time at its group's capacity at the level of the sub-step it arrives
    # in (or of the chunk's first sub-step, for a job still waiting then), while the level follows the token fluid.
    # 20 vPod-s of waiting jobs and no token backlog; 5 vPod-s arrive per 10 s, which the lowest level (0.5 vPod)
    # just serves, so that level is chosen, the queue is 20 / 0.5 = 40 s and the arrivals add 10 s of job work per
    # 10 s: it does not drain, every arrival waits 40 s > 30 s of slack. Draining at the largest level (4 vPods)
    # would have cleared the queue in 20 / 3.5 s, and a token backlog alone (0 here) gave no miss at all
    caps = np.full(J, 4.0)
    caps[0] = 0.5
    q_job = np.full(NB, 20.0)
    assert _misses(50.0, 100.0, 4.0, 30.0, caps=caps, q_job=q_job) == pytest.approx(50.0, rel=1e-12)
    assert q_job[0] == pytest.approx(20.0, rel=1e-12)  # the same 20 vPod-s of job work wait at the bin's end
    assert _misses(50.0, 100.0, 4.0, 30.0, caps=caps) == 0.0


def test_the_job_queue_runs_on_into_the_next_interval() -> None:
    # interval 1: 20 vPod-s arrive in one 10-s bin on 1 vPod, 10 s of work are left at its end (the job queue, kept
    # in q_job). Interval 2 starts with no token backlog (the serving step's interval fluid may have served it all
    # on paper) and brings 5 vPod-s: the request level's queue still holds 10 s, so arrivals wait 10 s -> 5 s, all
    # above 4 s of slack; an interval that started empty had none miss
    q_job = np.zeros(NB)
    _misses(200.0, 100.0, 1.0, 4.0, q_job=q_job)
    assert q_job[0] == pytest.approx(10.0, rel=1e-12)
    assert _misses(50.0, 100.0, 1.0, 4.0, q_job=q_job) == pytest.approx(50.0, rel=1e-12)
    # (an empty start: only the tail of 0.1-s jobs at utilization 0.5 beyond 4 s, ~1e-24: a fixed-rate group's tail
    # counts at any slack)
    assert _misses(50.0, 100.0, 1.0, 4.0) == pytest.approx(0.0, abs=1e-12)


def test_a_chunk_start_reprices_the_waiting_jobs() -> None:
    # 20 vPod-s of waiting jobs; bin 0 brings 5 vPod-s (lowest level, 0.5 vPod: the queue is 40 s and stays), bin 1
    # 10 vPod-s (the 4-vPod level). Within one 60-s chunk the queue keeps its price: 40 s + 2.5 s - 10 s = 32.5 s at
    # bin 1's end, above 30 s of slack, so all 150 arrivals miss. With a chunk start every 10 s, the waiting jobs are
    # priced at bin 1's level at its start (the request level prices them at the chunk's first sub-step): 20 / 4 = 5 s,
    # and bin 1's 100 arrivals do not miss
    caps = np.full(J, 4.0)
    caps[0] = 0.5
    n = np.array([50.0, 100.0])
    assert _misses(n, 100.0, 4.0, 30.0, caps=caps, q_job=np.full(NB, 20.0), n_bins=2) == pytest.approx(150.0)
    assert _misses(n, 100.0, 4.0, 30.0, caps=caps, q_job=np.full(NB, 20.0), n_bins=2, check_s=10.0) == (
        pytest.approx(50.0))
    # with the largest level all along (caps equal), the job queue is the token backlog (60 vPod-s queued, 5 vPod-s
    # per bin on 1 vPod): it drains by 5 s per bin from 60 s, always above 30 s of slack
    assert _misses(50.0, 100.0, 1.0, 30.0, q0=60_000.0, n_bins=3) == pytest.approx(150.0, rel=1e-12)


def test_the_observed_prefill_queue_is_the_job_count_less_the_last_sub_step() -> None:
    # the request level's prefill queue at a chunk's end (what the policies' emergency scale-out reads) is its jobs not
    # started yet less those that arrived in the last sub-step. 200 jobs of 100 tokens (20 vPod-s) wait, priced at the
    # lowest level (0.5 vPod): 40 s of queue; 50 more arrive in the bin (10 s at that level) and 10 s drain. FCFS the
    # 30 s left of the older queue hold 200 x 30 / 40 = 150 jobs, behind them the bin's 50: 200 wait, of which the 25
    # of the last 5 s are too young to count: 175. The token fluid has no backlog here (the lowest level keeps up with
    # the arrivals), so its queued requests, which the observation read before, showed 0 and no scale-out
    caps = np.full(J, 4.0)
    caps[0] = 0.5
    n_job, q_obs = np.full(NB, 200.0), np.zeros((2, NB))
    _misses(50.0, 100.0, 4.0, 30.0, caps=caps, q_job=np.full(NB, 20.0), n_job=n_job, q_obs=q_obs)
    assert n_job[0] == pytest.approx(200.0, rel=1e-12)
    assert q_obs[:, 0] == pytest.approx([175.0, 175.0], rel=1e-12)
    # an empty start: 200 jobs (20 vPod-s) on 1 vPod in 10 s leave 10 s of work, the newest 100 jobs, all of the
    # last 5 s: nothing observed
    n_job, q_obs = np.zeros(NB), np.full((2, NB), 7.0)
    _misses(200.0, 100.0, 1.0, 4.0, n_job=n_job, q_obs=q_obs)
    assert n_job[0] == pytest.approx(100.0, rel=1e-12)
    assert q_obs[:, 0] == pytest.approx([0.0, 0.0], abs=1e-9)
    # a token backlog of 60 vPod-s in 600 requests: at least those wait (no job work carried). 5 vPod-s arrive, 10
    # drain: 55 s left, the bin's 5 s (50 jobs) behind 50 s of the older 60 s (500 jobs): 550, less the last 5 s's 25
    n_job, q_obs = np.zeros(NB), np.zeros((2, NB))
    _misses(50.0, 100.0, 1.0, 1.0, q0=60_000.0, q0r=600.0, n_job=n_job, q_obs=q_obs)
    assert n_job[0] == pytest.approx(550.0, rel=1e-12)
    assert q_obs[0, 0] == pytest.approx(525.0, rel=1e-12)


def test_the_peak_of_the_observed_queue_is_taken_at_the_chunk_ends() -> None:
    # 300 jobs (30 vPod-s) wait on 1 vPod and no more arrive: 200 are left after bin 0, 100 after bin 1. The request
    # level takes its peak queue at its chunk ends: with one every 10 s the peak is 200, with one 60-s chunk only the
    # interval's end counts (100); the value at the end is 100 either way
    for check_s, peak in ((10.0, 200.0), (60.0, 100.0)):
        q_obs = np.zeros((2, NB))
        _misses(np.zeros(2), 100.0, 1.0, 4.0, n_bins=2, check_s=check_s, q_job=np.full(NB, 30.0),
                n_job=np.full(NB, 300.0), q_obs=q_obs)
        assert q_obs[:, 0] == pytest.approx([100.0, peak], rel=1e-12)
    # 400 jobs (40 vPod-s) arrive in bin 0, none in bin 1: 30 s left at bin 0's end (its newest 300 jobs, 200 of them of
    # the last 5 s: 100 observed), 20 s at bin 1's end (200 jobs, none recent): peak and end value 200
    q_obs = np.zeros((2, NB))
    _misses(np.array([400.0, 0.0]), 100.0, 1.0, 4.0, n_bins=2, check_s=10.0, q_obs=q_obs)
    assert q_obs[:, 0] == pytest.approx([200.0, 200.0], rel=1e-12)


class _Stub:
    """The fields :meth:`FluidCluster._either_missed` reads: the profile's input-given-total shares, the carried
    per-input-bucket TTFT miss rate."""

    def __init__(self, in_given_tot: np.ndarray) -> None:
        self.profile = type("P", (), {"in_given_tot": in_given_tot})()
        self._p_rate = np.zeros(NB)


def test_ttft_and_tpot_misses_pair_within_the_length_cells() -> None:
    from servegym.envs.npu.sim.fluid import FluidCluster

    # input bucket 0 feeds total bucket 0 only, input bucket 1 total bucket 1 only. 100 arrivals per input bucket,
    # bucket 1's all miss TTFT; 100 finishers per total bucket, bucket 1's all miss TPOT: every TTFT miss is also a
    # TPOT miss (the request level's count), so 100 requests miss either, not 100 + 100 - 100 x 100 / 200
    P = np.zeros((NB, NB))
    P[0, 0] = P[1, 1] = 1.0
    n_p = np.zeros(NB)
    n_p[:2] = 100.0
    miss_pb = np.zeros(NB)
    miss_pb[1] = 100.0
    md_b = np.zeros(NB)
    md_b[1] = 100.0
    assert FluidCluster._either_missed(_Stub(P), 100.0, 100.0, n_p, miss_pb, md_b) == pytest.approx(100.0)
    # the TTFT misses in the other bucket: disjoint, 200 miss either
    miss_pb = np.zeros(NB)
    miss_pb[0] = 100.0
    assert FluidCluster._either_missed(_Stub(P), 100.0, 100.0, n_p, miss_pb, md_b) == pytest.approx(200.0)
    # one cell: independence within it (half miss TTFT, half TPOT: a quarter both)
    one = np.zeros((NB, NB))
    one[:, 0] = 1.0
    miss_pb = np.zeros(NB)
    miss_pb[0] = 50.0
    n_p = np.zeros(NB)
    n_p[0] = 100.0
    md_b = np.zeros(NB)
    md_b[0] = 50.0
    assert FluidCluster._either_missed(_Stub(one), 50.0, 50.0, n_p, miss_pb, md_b) == pytest.approx(75.0)


def test_a_bucket_without_arrivals_keeps_its_last_ttft_miss_rate() -> None:
    from servegym.envs.npu.sim.fluid import FluidCluster

    P = np.zeros((NB, NB))
    P[:, 0] = 1.0
    stub = _Stub(P)
    stub._p_rate[0] = 0.5  # a rate from an earlier interval; no arrivals now
    md_b = np.zeros(NB)
    md_b[0] = 10.0
    assert FluidCluster._either_missed(stub, 5.0, 10.0, np.zeros(NB), np.zeros(NB), md_b) == pytest.approx(10.0)


def _fcfs_waits(arr: np.ndarray, svc: np.ndarray) -> np.ndarray:
    """Each job's wait in one FCFS server (arrival times ``arr``, service times ``svc``, s), job by job."""
    wait = np.empty(arr.size)
    free = 0.0
    for i in range(arr.size):
        start = max(arr[i], free)
        wait[i] = start - arr[i]
        free = start + svc[i]
    return wait


def _binned(arr: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The 10-s bins' realized job counts and work (tokens at 1,000 tokens/s per vPod, best-level work ``s`` s) as
    the fluid's profile holds them: counts, work, the kernel's ``k_pre`` and the read-only first and second moments
    of a job's tokens (every bucket alike)."""
    kb = (arr // 10.0).astype(np.int64)
    cnt = np.bincount(kb).astype(float)
    work = np.bincount(kb, weights=s * 1000.0)
    k_pre = np.zeros((cnt.size, 2, NB))
    k_pre[:, 0, 0] = cnt
    k_pre[:, 1, 0] = work
    isl_m1 = np.full(NB, 1000.0 * s.mean())
    isl_m2 = np.full(NB, 1e6 * (s * s).mean())
    for a in (isl_m1, isl_m2):  # read-only, as the workload profile's are (production's compile)
        a.setflags(write=False)
    return cnt, work, k_pre, isl_m1, isl_m2


def test_the_wait_tail_is_the_one_given_each_bins_realized_work() -> None:
    # an M/G/1 queue (Poisson arrivals at utilization 0.65, gamma service times with mean 40 ms and SCV 0.2, one
    # vPod at 1,000 tokens/s) simulated job by job, as the request level serves a group that one level keeps up
    # with; the kernel sees each 10-s bin's realized count and work, as the fluid does. The Pollaczek-Khinchine
    # tail at each bin's realized utilization overstates P(wait > x) (bins that drew more work already hold it);
    # the tail given the bin's work (fluid_tail.bin_tail) removes most of that excess and stays above the queue's
    rng = np.random.default_rng(0)
    n, s1, scv = 60_000, 0.04, 0.2
    arr = np.cumsum(rng.exponential(s1 / 0.65, n))
    s = rng.gamma(1.0 / scv, s1 * scv, n)
    wait = _fcfs_waits(arr, s)
    cnt, work, k_pre, isl_m1, isl_m2 = _binned(arr, s)
    nk = cnt.size
    for x in (0.2, 0.3):
        got = fk.ttft_misses(10.0 * nk, DT, True, np.full(nk, 10.0), k_pre, np.zeros((NB, NB)),
                             np.zeros(NB, dtype=np.int64), np.zeros(2 * NB, dtype=np.int64), np.ones((NB, J)),
                             np.zeros((1, 1, 1)), np.full((NB, NB), 1000.0), np.zeros((1, NB, J)), np.full(NB, x),
                             isl_m1, isl_m2, True, np.zeros(NB), 60.0, np.zeros(NB), np.zeros((NB, NB)),
                             np.zeros(NB), np.zeros((2, NB))) / n
        r = np.minimum(work / 1000.0 / 10.0, 0.999)
        wq = np.minimum(r * isl_m2[0] / 1e6 / (2.0 * isl_m1[0] / 1e3 * (1.0 - r)), 0.5 * r * DT)
        pk = float((cnt * r * np.exp(-r * x / wq)).sum()) / n
        sim = float((wait > x).mean())
        assert sim < got < pk
        assert got - sim < 0.6 * (pk - sim)


def test_the_bin_tail_is_the_pollaczek_khinchine_tail_for_a_long_bin() -> None:
    r, s1, s2 = 0.7, 0.04, 0.04 ** 2 * 1.2
    wq = r * s2 / (2.0 * s1 * (1.0 - r))
    pk = r * np.exp(-r * 0.2 / wq)
    assert fk.bin_tail(0.2, r, s1, s2, wq, 1e9) == pytest.approx(pk, rel=1e-6)
    assert fk.bin_tail(0.2, r, s1, s2, wq, 10.0) < fk.bin_tail(0.2, r, s1, s2, wq, 60.0) < pk
    assert fk.bin_tail(0.0, r, s1, s2, wq, 10.0) == pytest.approx(r)  # P(wait > 0) = utilization


def test_a_level_sized_server_has_the_tail_given_each_sub_steps_work() -> None:
    # the request level's server where the level sets the capacity (serving._chunk / _start_prefill): every 5-s
    # sub-step runs at the smallest level whose capacity covers its backlog and its own arrivals' work, each job
    # priced at its arrival sub-step's capacity, FCFS; levels at 1.15 / 1.15 / 1.6 / 2.0 vPods as a DeepSeek-V3
    # short-prompt group's, load 0.99 vPod-s per s (utilization ~0.86 at the lowest level), gamma service times
    # (mean 54 ms, SCV 0.5), Poisson arrivals, simulated job by job. The kernel sees each 10-s bin's realized count
    # and work. A sub-step that drew more work runs faster, so its excess does not carry on: the tail given the work
    # over the bin (10 s, the earlier rule, computed here as the kernel did) overstates the queue by more than
    # twice what the tail given the work over a sub-step does, and both stay above it
    rng = np.random.default_rng(0)
    caps = np.full(J, 2.0)
    caps[:2], caps[2] = 1.15, 1.6
    n, s1, scv = 60_000, 0.054, 0.5
    arr = np.cumsum(rng.exponential(s1 / 0.99, n))
    s = rng.gamma(1.0 / scv, s1 * scv, n)
    k = (arr // DT).astype(np.int64)
    dem = np.bincount(k, weights=s)
    cj = np.empty(dem.size)
    backlog = 0.0
    for i in range(dem.size):
        d = backlog + dem[i]
        cj[i] = caps[np.flatnonzero(caps * DT >= d - 1e-9)[0]] if (caps * DT >= d - 1e-9).any() else caps[-1]
        backlog = max(d - cj[i] * DT, 0.0)
    wait = _fcfs_waits(arr, s / cj[k])
    cnt, work, k_pre, isl_m1, isl_m2 = _binned(arr, s)
    nk = cnt.size
    m1, m2 = isl_m1[0], isl_m2[0]
    for x in (0.3, 0.5, 0.7):
        got = fk.ttft_misses(10.0 * nk, DT, True, np.full(nk, 10.0), k_pre, np.zeros((NB, NB)),
                             np.zeros(NB, dtype=np.int64), np.zeros(2 * NB, dtype=np.int64), np.tile(caps, (NB, 1)),
                             np.zeros((1, 1, 1)), np.full((NB, NB), 1000.0), np.zeros((1, NB, J)), np.full(NB, x),
                             isl_m1, isl_m2, True, np.zeros(NB), 60.0, np.zeros(NB), np.zeros((NB, NB)),
                             np.zeros(NB), np.zeros((2, NB))) / n
        over_bin = 0.0
        for i in range(nk):
            c = caps[np.flatnonzero(caps * 10.0 >= work[i] / 1000.0 - 1e-9)[0]]
            r = min(work[i] / 1000.0 / (c * 10.0), 0.999)
            b1, b2 = m1 / 1000.0 / c, m2 / 1e6 / c ** 2
            wq = min(r * b2 / (2.0 * b1 * (1.0 - r)), 0.5 * r * DT)
            if x < r * DT:
                over_bin += cnt[i] * fk.bin_tail(x, r, b1, b2, wq, 10.0)
        over_bin /= n
        sim = float((wait > x).mean())
        assert sim < got < over_bin
        assert got - sim < 0.6 * (over_bin - sim)
