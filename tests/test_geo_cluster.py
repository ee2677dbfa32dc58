"""Geo cluster simulator: conservation, energy and carbon accounting, determinism, the decision
API (errors, batching equivalence, windows), RTT charging, and the RR/LL baselines."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servegym.baselines.geo import LeastLoaded, RoundRobin
from servegym.envs.geo.sim.cluster import GeoSimulation
from servegym.envs.geo.sim.config import preset
from servegym.envs.geo.sim.decisions import BasePolicy, DecisionContext
from servegym.envs.geo.sim.estimator import Estimator
from servegym.envs.geo.sim.provisioner import Snapshot

from servegym.errors import ActionError, ConfigError


def mini(**kw):
    base = {"duration_s": 4.0, "drain_s": 20.0, "rate_rps": 40.0}
    base.update(kw)
    return preset("mini", **base)


def small(**kw):
    base = {"duration_s": 4.0, "drain_s": 20.0, "rate_rps": 60.0, "nodes_per_dc": 1}
    base.update(kw)
    return preset("small", **base)


class Fixed(BasePolicy):
    """Every request to one DC."""

    batchable = True

    def __init__(self, dc: int) -> None:
        self.dc = dc
        self.name = f"fixed{dc}"

    def decide(self, ctx: DecisionContext) -> np.ndarray:
        return np.full(ctx.n_requests, self.dc)


def check_conservation(sim: GeoSimulation) -> None:
    c = sim.counters()
    assert c["arrived"] == c["awaiting_decision"] + c["placed_not_submitted"] + c["pool_submitted"]
    assert c["pool_submitted"] == c["finished"] + c["queued"] + c["in_flight"]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rate=st.floats(5.0, 120.0),
    poll=st.sampled_from([0.25, 0.5, 1.0]),
    poll_mode=st.sampled_from(["sync", "async"]),
    mode=st.sampled_from(["request", "window"]),
    policy=st.sampled_from(["rr", "ll"]),
    nodes=st.integers(1, 2),
    window_n=st.integers(1, 20),
    seed=st.integers(0, 1000),
)
def test_requests_are_conserved_at_every_decision(rate, poll, poll_mode, mode, policy, nodes, window_n,
                                                  seed) -> None:
    sim = GeoSimulation(small(rate_rps=rate, duration_s=2.0, poll_interval_s=poll, poll_mode=poll_mode,
                              decision_mode=mode, window_max_requests=window_n, nodes_per_dc=nodes, seed=seed))
    pol = RoundRobin() if policy == "rr" else LeastLoaded()
    pol.reset(sim.n_dcs, sim.n_regions, seed)
    while (ctx := sim.next_decision()) is not None:
        check_conservation(sim)
        sim.apply(ctx, pol.decide(ctx))
        check_conservation(sim)
    check_conservation(sim)
    res = sim.metrics("x")
    assert res.summary["arrived"] == sim.n_requests == res.summary["finished"] + res.summary["unfinished"]


def test_energy_and_carbon_add_up_and_idle_dcs_pay_idle_and_host_power() -> None:
    sim = GeoSimulation(mini(rate_rps=30.0))
    res = sim.run(Fixed(0))
    dc = res.per_dc
    assert res.summary["unfinished"] == 0 and res.summary["finished"] == sim.n_requests
    assert dc["carbon_g"].sum() == pytest.approx(res.carbon_g, rel=1e-12)
    assert dc["facility_kwh"].sum() == pytest.approx(res.summary["energy_kwh"], rel=1e-12)
    parts = dc["engine_prefill_j"] + dc["engine_decode_j"] + dc["engine_idle_j"]
    np.testing.assert_allclose(parts, dc["engine_j"], rtol=1e-9)
    t = res.summary["window_s"]
    assert t == pytest.approx(4.0) and res.summary["sim_time_s"] > t
    assert res.summary["carbon_with_drain_g"] > res.carbon_g
    prof = sim.profile
    # DCs 1 and 2 never got a request: their engines were idle the whole run, their hosts on.
    for d in (1, 2):
        assert dc.loc[d, "requests"] == 0
        assert dc.loc[d, "engine_prefill_j"] == 0 and dc.loc[d, "engine_decode_j"] == 0
        assert dc.loc[d, "engine_idle_j"] == pytest.approx(prof.idle_w * sim.engines_per_dc * t, rel=1e-9)
        assert dc.loc[d, "host_j"] == pytest.approx(300.0 * sim.nodes_per_dc * t, rel=1e-12)
        assert dc.loc[d, "idle_fraction"] == pytest.approx(1.0)
        expect = 1.1 * (dc.loc[d, "engine_j"] + dc.loc[d, "host_j"]) * dc.loc[d, "ci_mean_g_per_kwh"] / 3.6e6
        assert dc.loc[d, "carbon_g"] == pytest.approx(expect, rel=1e-9)
    assert dc.loc[0, "engine_decode_j"] > 0 and dc.loc[0, "idle_fraction"] < 1.0
    assert dc.loc[0, "requests"] == sim.n_requests


@pytest.mark.parametrize("mode", ["request", "window"])
def test_same_seed_same_run_and_other_seed_differs(mode: str) -> None:
    a = GeoSimulation(small(decision_mode=mode)).run(LeastLoaded())
    b = GeoSimulation(small(decision_mode=mode)).run(LeastLoaded())
    c = GeoSimulation(small(seed=7, decision_mode=mode)).run(LeastLoaded())
    assert a.summary == b.summary
    assert a.requests.equals(b.requests) and a.per_dc.equals(b.per_dc)
    assert a.summary["carbon_g"] != c.summary["carbon_g"]


def test_remote_placements_pay_the_rtt() -> None:
    sim = GeoSimulation(small(rate_rps=30.0))
    # geo-small: DCs 0, 1 in region 0 (US-East), DCs 2, 3 in region 1 (South America).
    res = sim.run(Fixed(3))
    req = res.requests
    rtt = sim.rtt_dc[req["scheduler"].to_numpy(), 3]
    remote = req["scheduler"].to_numpy() == 0
    assert remote.any() and (~remote).any() and rtt[remote].min() > 0.05
    assert (req["ttft_s"].to_numpy() >= rtt - 1e-12).all()
    assert req.loc[remote, "ttft_s"].min() > req.loc[~remote, "ttft_s"].min()


def test_round_robin_spreads_evenly() -> None:
    sim = GeoSimulation(small(rate_rps=200.0, duration_s=3.0))
    res = sim.run(RoundRobin())
    counts = res.per_dc["requests"].to_numpy()
    assert counts.sum() == sim.n_requests
    assert counts.max() - counts.min() <= sim.n_regions
    # inside each DC, nodes and engines are used round-robin too
    eng = res.requests.groupby("dc")["engine"].value_counts().groupby("dc").agg(["min", "max"])
    assert ((eng["max"] - eng["min"]) <= 1).all()


def _crafted_context(in_flight: list[float], n: int, scheduler: int = 0) -> DecisionContext:
    d = len(in_flight)
    z = np.zeros(d)
    snap = Snapshot(time_s=1.0, polled_at_s=z, batch=z, queued_tokens=z, kv_tokens=z, kv_frac=z, prefill_duty=z,
                    in_flight=np.asarray(in_flight, dtype=float), ci_g_per_kwh=np.full(d, 100.0), pue=np.full(d, 1.1),
                    dc_region=np.zeros(d, dtype=np.int64), rtt_s=np.zeros((1, d)), engines_per_dc=2)
    return DecisionContext(mode="request", time_s=1.0, request_id=np.arange(n), scheduler=np.full(n, scheduler),
                           arrival_s=np.ones(n), decision_s=np.ones(n), input_tokens=np.full(n, 100),
                           osl_estimate=np.full(n, 50.0), output_tokens=None, snapshot=snap,
                           dispatched=np.zeros((1, d), dtype=np.int64), estimate_fn=lambda: None, dc_names=tuple(f"dc{i}" for i in range(d)), token=1)


def test_least_loaded_prefers_the_least_loaded_dc() -> None:
    ll = LeastLoaded()
    ll.reset(4, 1, 0)
    assert ll.decide(_crafted_context([5.0, 1.0, 3.0, 2.0], 1)).tolist() == [1]
    # each placement adds 1/2 request per engine: 1, 1.5 -> then DC 3 (2.0) ties DC 1 (2.0), lower index first
    ll2 = LeastLoaded()
    ll2.reset(4, 1, 0)
    assert ll2.decide(_crafted_context([5.0, 1.0, 3.0, 2.0], 5)).tolist() == [1, 1, 1, 3, 1]


def test_batched_decisions_equal_one_by_one() -> None:
    for pol in (RoundRobin, LeastLoaded):
        a = GeoSimulation(small(rate_rps=80.0, duration_s=3.0))
        b = GeoSimulation(small(rate_rps=80.0, duration_s=3.0))
        pa, pb = pol(), pol()
        pa.reset(a.n_dcs, a.n_regions, 0)
        pb.reset(b.n_dcs, b.n_regions, 0)
        while (ctx := a.next_batch()) is not None:
            a.apply(ctx, pa.decide(ctx))
        while (ctx := b.next_decision()) is not None:
            assert ctx.n_requests == 1
            b.apply(ctx, pb.decide(ctx))
        np.testing.assert_array_equal(a.placed_dc, b.placed_dc)
        assert a.metrics().summary["carbon_g"] == b.metrics().summary["carbon_g"]


def test_bad_decisions_raise_action_error_and_change_nothing() -> None:
    sim = GeoSimulation(small(decision_mode="window", window_max_requests=5))
    ctx = sim.next_decision()
    n = ctx.n_requests
    with pytest.raises(ActionError, match=r"out of range; allowed: \[0, 3\]"):
        sim.apply(ctx, np.full(n, 4))
    with pytest.raises(ActionError, match="shape"):
        sim.apply(ctx, np.zeros(n + 1, dtype=int))
    with pytest.raises(ActionError, match="integers"):
        sim.apply(ctx, np.full(n, 0.5))
    with pytest.raises(ActionError, match="sched_delay_s"):
        sim.apply(ctx, np.zeros(n, dtype=int), -1.0)
    with pytest.raises(ActionError, match="not been applied"):
        sim.next_decision()
    assert sim.counters()["placed_not_submitted"] == 0 and (sim.placed_dc == -1).all()
    sim.apply(ctx, np.zeros(n, dtype=int))
    with pytest.raises(ActionError, match="not the outstanding"):
        sim.apply(ctx, np.zeros(n, dtype=int))
    assert sim.counters()["placed_not_submitted"] == n


def test_windows_close_at_the_time_or_count_limit() -> None:
    sim = GeoSimulation(small(rate_rps=300.0, duration_s=2.0, decision_mode="window", window_max_requests=10))
    n_ctx = 0
    while (ctx := sim.next_decision()) is not None:
        n_ctx += 1
        assert ctx.mode == "window" and 1 <= ctx.n_requests <= 10
        assert len(set(ctx.scheduler.tolist())) == 1
        assert (ctx.decision_s == ctx.time_s).all() and (ctx.arrival_s <= ctx.time_s).all()
        assert ctx.time_s - ctx.arrival_s.min() <= 0.1 + 1e-12
        if ctx.n_requests < 10:
            assert ctx.time_s == pytest.approx(ctx.arrival_s.min() + 0.1)
        assert ctx.estimates.ttft_s.shape == (ctx.n_requests, sim.n_dcs)
        sim.apply(ctx, np.zeros(ctx.n_requests, dtype=int), 0.002)
    assert n_ctx > 0 and (sim.placed_dc >= 0).all()
    req = sim.metrics().requests
    assert (req["sched_delay_s"] == 0.002).all()


def test_snapshot_is_read_only_and_async_polls_stagger() -> None:
    sim = GeoSimulation(small(poll_mode="async", rate_rps=150.0))
    ctx = None
    while (ctx := sim.next_batch()) is not None and ctx.time_s < 2.0:
        sim.apply(ctx, np.arange(ctx.n_requests) % sim.n_dcs)
    snap = sim.snapshot
    assert len(set(snap.polled_at_s.tolist())) == sim.n_dcs
    with pytest.raises(ValueError):
        snap.batch[0] = 1.0


def test_estimator_monotone_and_oracle_mode() -> None:
    sim = GeoSimulation(small(osl_mode="oracle"))
    ctx = sim.next_decision()
    assert ctx.output_tokens is not None and (ctx.osl_estimate == ctx.output_tokens).all()
    est: Estimator = sim.estimator
    snap = sim.snapshot
    isl, osl, origin = np.array([500, 500]), np.array([100.0, 100.0]), np.array([0, 1])
    e0 = est.estimate(snap, isl, osl, origin)
    assert (e0.ttft_s >= snap.rtt_s[origin]).all()
    loaded = snap.replace(batch=np.full(4, 30.0), queued_tokens=np.full(4, 20_000.0), kv_tokens=np.full(4, 30_000.0),
                          prefill_duty=np.full(4, 0.5))
    e1 = est.estimate(loaded, isl, osl, origin)
    assert (e1.ttft_s > e0.ttft_s).all() and (e1.tpot_s > e0.tpot_s).all()
    assert (e1.feasible <= e0.feasible).all()
    ratio = e0.carbon_g / (e0.energy_j * snap.pue * snap.ci_g_per_kwh / 3.6e6)
    np.testing.assert_allclose(ratio, 1.0)
    mean_sim = GeoSimulation(small())
    assert mean_sim.next_decision().output_tokens is None


def test_hourly_ci_steps_every_hour() -> None:
    cfg = small(ci_mode="hourly", ci_start="2023-03-01T10:00Z")
    sim = GeoSimulation(cfg)
    ci = sim._ci_at
    np.testing.assert_array_equal(ci(0.0), sim.topology.ci("2023-03-01T10:00Z"))
    np.testing.assert_array_equal(ci(3599.0), ci(0.0))
    np.testing.assert_array_equal(ci(3600.0), sim.topology.ci("2023-03-01T11:00Z"))
    assert not np.array_equal(ci(7200.0 * 3), ci(0.0))


def test_metrics_tables() -> None:
    res = GeoSimulation(small()).run(RoundRobin())
    for key in ("carbon_g", "slo_violation_pct", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s",
                "tpot_p90_s", "tpot_p99_s", "sched_overhead_ms", "osl_mode"):
        assert key in res.summary
    assert set(res.per_dc.columns) >= {"dc", "facility_kwh", "carbon_g", "utilization", "idle_fraction"}
    assert len(res.per_dc) == 4 and len(res.summary_frame()) == 1
    assert res.summary["ttft_p50_s"] <= res.summary["ttft_p90_s"] <= res.summary["ttft_p99_s"]


def test_bench_cli_reports_speed(capsys) -> None:
    import json

    from servegym.cli import main

    assert main(["bench", "speed", "geo", "--preset", "mini", "--rate", "30", "--sim-seconds", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["speedup"] > 0 and out["requests_per_s"] > 0 and out["engine_iterations_per_s"] > 0


def test_predicted_osl_mode_uses_the_predictor() -> None:
    with pytest.raises(ConfigError, match="osl_predictor"):
        GeoSimulation(small(osl_mode="predicted"))
    with pytest.raises(ConfigError, match="osl_predictor must return"):
        GeoSimulation(small(osl_mode="predicted"), osl_predictor=lambda isl: -np.ones(isl.size))
    sim = GeoSimulation(small(osl_mode="predicted"), osl_predictor=lambda isl: 0.1 * isl + 5.0)
    ctx = sim.next_decision()
    assert ctx.output_tokens is None
    np.testing.assert_allclose(ctx.osl_estimate, 0.1 * ctx.input_tokens + 5.0)
    assert sim.metrics().summary["osl_mode"] == "predicted"


def test_headroom_shrinks_with_load() -> None:
    sim = GeoSimulation(small())
    snap = sim.snapshot
    free = sim.estimator.headroom_requests(snap)
    np.testing.assert_allclose(free, sim.engines_per_dc * sim.profile.max_num_seqs)
    busy = sim.estimator.headroom_requests(snap.replace(batch=np.array([0.0, 10.0, 30.0, 60.0])))
    assert free[0] == busy[0] > busy[1] > busy[2] >= busy[3] == 0.0


def test_snapshot_holds_per_dc_means_of_the_polled_engines() -> None:
    sim = GeoSimulation(small(rate_rps=150.0))
    pol = RoundRobin()
    pol.reset(sim.n_dcs, sim.n_regions, 0)
    while (ctx := sim.next_batch()) is not None and ctx.time_s < 2.5:
        sim.apply(ctx, pol.decide(ctx))
    snap, pool = sim.snapshot, sim.pool
    assert snap.time_s == pool.now_s == 2.0
    per_dc = pool.in_flight_per_engine.reshape(sim.n_dcs, -1)
    np.testing.assert_allclose(snap.batch, per_dc.mean(axis=1))
    assert snap.batch.sum() > 0 and (snap.ci_g_per_kwh == sim.topology.ci(sim.topology.base_hour)).all()


def test_async_polls_update_one_dc_at_a_time() -> None:
    sim = GeoSimulation(small(rate_rps=150.0, poll_mode="async", poll_interval_s=1.0))
    pol = RoundRobin()
    pol.reset(sim.n_dcs, sim.n_regions, 0)
    prev = sim.snapshot
    seen = 0
    while (ctx := sim.next_batch()) is not None and ctx.time_s < 3.0:
        snap = ctx.snapshot
        if snap is not prev:
            changed = np.flatnonzero(snap.polled_at_s != prev.polled_at_s)
            assert changed.size == 1 and snap.polled_at_s[changed[0]] == snap.time_s
            # DC d is polled at k·Δp + d·Δp/D
            assert (snap.time_s * sim.n_dcs) % sim.n_dcs == pytest.approx(changed[0] % sim.n_dcs)
            seen += 1
            prev = snap
        sim.apply(ctx, pol.decide(ctx))
    assert seen >= 8


def test_reported_pue_option() -> None:
    sim = GeoSimulation(preset("paper", duration_s=0.5, rate_rps=50.0, pue="reported"))
    assert sim.pue.min() >= 1.0 and len(set(sim.pue.tolist())) > 1
    with pytest.raises(ConfigError, match="pue"):
        preset("paper", pue="measured")


def test_trace_workload_replays_round_robin_to_schedulers() -> None:
    sim = GeoSimulation(small(trace="azure-conv", trace_time_scale=0.05, duration_s=5.0, max_input_tokens=8000))
    assert sim.n_requests > 20 and sim.isl_mean > 0
    assert np.bincount(sim._origin).max() - np.bincount(sim._origin).min() <= 1
    res = sim.run(RoundRobin())
    assert res.summary["finished"] == sim.n_requests


def test_context_carries_the_schedulers_own_dispatches_since_the_poll() -> None:
    sim = GeoSimulation(small(rate_rps=100.0))
    seen_nonzero = False
    while (ctx := sim.next_decision()) is not None and ctx.time_s < 3.0:
        before = ctx.dispatched.copy()
        assert before.sum() == ctx.request_id[0] - np.searchsorted(sim._arrival, ctx.snapshot.time_s)
        seen_nonzero |= bool(before.any())
        sim.apply(ctx, 2)
    assert seen_nonzero
    assert ctx.dispatched[:, :2].sum() == 0 and (ctx.dispatched[:, 3] == 0).all()
