"""The npu hindsight provisioning plan (servegym.baselines.npu_hindsight): its count problem is solved exactly
(the layered DP against HiGHS's MILP), its plans keep the demand served under the worst-case boot delay, and the
played policy, run through the env's own decision loop, is deterministic, beats naive (Base) on the return with
fewer SLO misses, and stays below the Ideal relaxation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.agents import benchmark as bm
from servegym.agents import protocol
from servegym.baselines.npu_hindsight import HindsightPolicy, count_plan, milp_count_plan

import servegym  # noqa: F401  (registers the ids)
from servegym.errors import ConfigError
from servegym.splits import splits_of

ENV = "servegym/NPUAutoscale-v0"
#: Half an hour (6 epochs, 30 decision points): the cheapest horizon where the plan changes its counts.
SHORT = {"config": {"hours": 0.5}}


def _ready(counts: np.ndarray, lead: int) -> np.ndarray:
    """vPods ready per interval when the targets ``counts`` are played (orders serve ``lead`` intervals later,
    the initial deployment at once; deletions take the newest, booting vPods first, as the simulator does)."""
    booting: list[int] = []  # order interval of each booting vPod
    ready = 0
    out = np.zeros(counts.size, dtype=np.int64)
    for k, n in enumerate(counts.tolist()):
        done = [t for t in booting if t + lead <= k]
        ready += len(done)
        booting = [t for t in booting if t + lead > k]
        held = ready + len(booting)
        if n > held:
            if k == 0:
                ready += n - held
            else:
                booting += [k] * (n - held)
        elif n < held:
            drop = held - n
            cut = min(drop, len(booting))
            booting = booting[: len(booting) - cut]
            ready -= drop - cut
        out[k] = ready
    return out


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=24), st.integers(1, 4))
def test_count_plan_is_the_milp_optimum_and_serves_the_demand(demand: list[int], lead: int) -> None:
    d = np.array(demand, dtype=np.int64)
    counts, cost = count_plan(d, lead)
    assert (_ready(counts, lead) >= d).all()
    assert cost == pytest.approx(milp_count_plan(d, lead), abs=1e-6)
    assert milp_count_plan(d, lead, relax=True) <= cost + 1e-6


def _count_plan_by_arrays(d: np.ndarray, lead: int, delete_cost: float) -> tuple[np.ndarray, float]:
    """count_plan's layers written with numpy arrays (its form before the compiled pass): the reference it must
    equal bit for bit, counts and cost."""
    K = d.size
    held = np.zeros(K, dtype=np.int64)
    cost = 0.0
    prev = 0
    for lv in np.unique(d[d > 0]).tolist():
        mult, prev = lv - prev, lv
        need = np.concatenate([[False], d >= lv, [False]])
        edges = np.flatnonzero(need[1:] != need[:-1])
        starts, ends = edges[0::2], edges[1::2] - 1
        cut = np.concatenate([[True], starts[1:] - ends[:-1] - 1 > lead + delete_cost])
        b_start, b_end = starts[cut], np.concatenate([ends[:-1][cut[1:]], ends[-1:]])
        h0 = np.maximum(b_start - lead, 0)
        diff = np.zeros(K + 1, dtype=np.int64)
        np.add.at(diff, h0, mult)
        np.add.at(diff, b_end + 1, -mult)
        held += np.cumsum(diff[:-1])
        cost += mult * (float((b_end - h0 + 1).sum()) + delete_cost * int(np.count_nonzero(b_end < K - 1)))
    return held, cost


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=60), st.integers(1, 6),
       st.sampled_from([0.0, 0.25, 1.0, 2.5]))
def test_compiled_count_plan_equals_the_array_form(demand: list[int], lead: int, delete_cost: float) -> None:
    d = np.array(demand, dtype=np.int64)
    counts, cost = count_plan(d, lead, delete_cost)
    ref_counts, ref_cost = _count_plan_by_arrays(d, lead, delete_cost)
    assert counts.tolist() == ref_counts.tolist() and cost == ref_cost


def test_count_plan_holds_through_short_gaps_and_orders_ahead() -> None:
    # need 2 at intervals 5-6, 1 at 10; lead 3: order at 2, hold the level-1 vPod through the 3-interval gap
    d = np.array([0, 0, 0, 0, 0, 2, 2, 0, 0, 0, 1, 0], dtype=np.int64)
    counts, cost = count_plan(d, 3, delete_cost=0.25)
    assert counts.tolist() == [0, 0, 2, 2, 2, 2, 2, 1, 1, 1, 1, 0]
    assert cost == pytest.approx(14 + 2 * 0.25)
    with pytest.raises(ConfigError, match="demand"):
        count_plan(np.array([-1]), 1)


def test_policy_rejects_bad_settings() -> None:
    with pytest.raises(ConfigError, match="prefill_utilizations"):
        HindsightPolicy(prefill_utilizations=(0.0,))
    with pytest.raises(ConfigError, match="structures"):
        HindsightPolicy(structures=("every-bucket",))


def test_registered_beside_the_ideal_as_a_feasible_bound() -> None:
    for env_id in (ENV, "servegym/NPUAutoscaleResidual-v0"):
        y = protocol.yardsticks(env_id)
        assert (y.oracle, y.oracle_kind, y.hindsight, y.hindsight_kind) == ("ideal", "relaxation", "hindsight",
                                                                            "feasible")
        assert "hindsight" not in y.roles().values() and "boot" in y.hindsight_knows
        assert protocol.resolve_policy(env_id, "hindsight") == "hindsight"


def test_one_short_episode_beats_base_below_the_ideal_and_replays_exactly() -> None:
    env = bm.make_split_env(ENV, "test", SHORT)
    try:
        runs = bm.run_policy_episodes(ENV, env, ["base", "ideal", "hindsight"], [0])
        again = env.unwrapped.run_baseline("hindsight", 0)
    finally:
        env.close()
    b, i, h = runs["base"][0], runs["ideal"][0], runs["hindsight"][0]
    assert again["reward"] == h.reward and again["length"] == h.length == b.length
    assert sum(f["energy_j"] for f in again["infos"]) == pytest.approx(h.metrics["energy_j"], rel=1e-12)
    assert b.reward < h.reward < i.reward
    assert h.metrics["slo_violation_pct"] < b.metrics["slo_violation_pct"]
    # the played policy's energy is the simulator's: above the Ideal's (idle, booting and partly filled vPods)
    assert h.metrics["energy_j"] > i.metrics["energy_j"]


def test_run_policy_asks_the_plan_at_every_decision_point() -> None:
    """run_policy skips the points between epochs where only an emergency could act (Base, NeuScale); the plan
    changes its targets there, so it is asked at every one (the warm start counts as the first)."""
    from servegym.baselines.npu import run_policy
    from servegym.envs.npu.sim.fluid import make_cluster

    env = bm.make_split_env(ENV, "test", SHORT)
    try:
        u = env.unwrapped
        u.reset(seed=0)
        sim = make_cluster(u.cluster_config, u.workload, seed=u.simulation_seed, catalog=u.catalog,
                           fidelity=u.config.fidelity)
    finally:
        env.close()
    pol = HindsightPolicy(prefill_utilizations=(0.5,), decode_utilizations=(1.0,), structures=("single",))
    times: list[float] = []
    decide = pol.decide
    pol.decide = lambda ctx: (times.append(ctx.time_s), decide(ctx))[1]  # type: ignore[method-assign]
    run_policy(sim, pol, hours=0.5)
    assert times == [60.0 * k for k in range(30)]


#: A known defect, tracked on issue 41: the Ideal counts every arrived request's whole output at its best fit, but
#: OpenThoughts' outputs (11.6K tokens on average) take 20-40 min to decode at the serving efficiency fitted to
#: Figure 16, so in a 2-h episode the played policies make far fewer tokens than the Ideal counts, and the Ideal's
#: total energy (153 MJ) exceeds the hindsight plan's (88 MJ): it is no longer a bound there. strict: the mark
#: fails once the bound counts the tokens a policy can make by the horizon.
_IDEAL_NOT_A_BOUND = pytest.mark.xfail(strict=True, reason="the Ideal counts outputs no policy can make by the horizon")


@pytest.mark.slow
@pytest.mark.parametrize("split", [pytest.param(s, marks=_IDEAL_NOT_A_BOUND) if s == "shift-openthoughts" else s
                                   for s in splits_of("npu")])
def test_between_the_shipped_baselines_and_the_ideal_on_every_split(split: str) -> None:
    """Two 2-h episodes of each split (the quick suite's horizon): the plan's return is above Base's and
    NeuScale's and below the Ideal's on each (40 of 40 on the episodes of 4 splits that npu_yardsticks.py measured)."""
    env = bm.make_split_env(ENV, split, {"config": {"hours": 2.0}})
    try:
        runs = bm.run_policy_episodes(ENV, env, ["base", "neuscale", "ideal", "hindsight"], [0, 1])
    finally:
        env.close()
    for b, n, i, h in zip(runs["base"], runs["neuscale"], runs["ideal"], runs["hindsight"], strict=True):
        assert max(b.reward, n.reward) < h.reward < i.reward
