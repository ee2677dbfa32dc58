"""The compiled geo estimator and what it serves equal their numpy formulations bit for bit."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servegym.envs.geo.sim.estimator import Estimates, Estimator
from servegym.envs.geo.sim.profile import available_profiles, load_profile
from servegym.envs.geo.sim.provisioner import Snapshot

PROFILES = available_profiles()
_EST_FIELDS = ("ttft_s", "tpot_s", "energy_j", "carbon_g", "feasible", "mask")


def _same(a: Estimates, b: Estimates) -> None:
    for f in _EST_FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and x.shape == y.shape, f
        assert x.tobytes() == y.tobytes(), f  # bit for bit (-0.0 and NaN payloads included)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Estimator, Snapshot, np.ndarray, np.ndarray, np.ndarray]:
    """An estimator of a shipped profile (SLOs and means drawn) and a snapshot, with requests against it.

    Loads drawn from both sides of every branch: empty and full batches, queues at whole chunks (no
    remainder) or not, duty beyond the 0.95 clip, output estimates below 1."""
    prof = load_profile(draw(st.sampled_from(PROFILES)))
    est = Estimator(prof, draw(st.floats(0.05, 5.0)), draw(st.floats(0.01, 0.5)), draw(st.floats(0.0, 4000.0)),
                    draw(st.floats(0.0, 1500.0)))
    d = draw(st.integers(1, 6))
    r = draw(st.integers(1, 3))
    m = prof.max_num_batched_tokens

    def arr(elems: st.SearchStrategy[float], size: int = d) -> np.ndarray:
        return np.array(draw(st.lists(elems, min_size=size, max_size=size)), dtype=np.float64)

    batch = arr(st.one_of(st.just(0.0), st.floats(0.0, 2.0 * prof.max_num_seqs)))
    queued = arr(st.one_of(st.just(0.0), st.integers(0, 20).map(lambda k: float(k * m)), st.floats(0.0, 60_000.0)))
    kv = arr(st.one_of(st.just(0.0), st.floats(0.0, 1.2 * prof.kv_capacity_tokens)))
    duty = arr(st.floats(0.0, 1.0))
    snap = Snapshot(time_s=1.0, polled_at_s=np.zeros(d), batch=batch, queued_tokens=queued, kv_tokens=kv,
                    kv_frac=np.zeros(d), prefill_duty=duty, in_flight=np.zeros(d), ci_g_per_kwh=arr(st.floats(0, 900)),
                    pue=arr(st.floats(1.0, 2.0)), dc_region=np.arange(d) % r,
                    rtt_s=arr(st.floats(0.0, 0.3), r * d).reshape(r, d), engines_per_dc=draw(st.integers(1, 16)))
    n = draw(st.integers(0, 12))
    isl = np.array(draw(st.lists(st.integers(1, 9000), min_size=n, max_size=n)), dtype=np.int64)
    osl = arr(st.floats(0.0, 3000.0), n)
    origin = np.array(draw(st.lists(st.integers(0, r - 1), min_size=n, max_size=n)), dtype=np.int64)
    return est, snap, isl, osl, origin


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_compiled_estimate_equals_the_numpy_formulation(case: tuple) -> None:
    est, snap, isl, osl, origin = case
    _same(est.estimate(snap, isl, osl, origin), est.estimate_numpy(snap, isl, osl, origin))


def test_estimate_broadcasts_as_the_numpy_formulation() -> None:
    """Inputs of different lengths (numpy broadcasting) take the numpy form rather than failing."""
    est = Estimator(load_profile(PROFILES[0]), 1.0, 0.1, 1000.0, 200.0)
    d = 3
    z = np.zeros(d)
    snap = Snapshot(time_s=0.0, polled_at_s=z, batch=np.array([0.0, 5.0, 40.0]), queued_tokens=np.array([0, 3e3, 9e3]),
                    kv_tokens=np.array([0.0, 4e3, 6e4]), kv_frac=z, prefill_duty=np.array([0.0, 0.3, 0.99]),
                    in_flight=z, ci_g_per_kwh=np.array([50.0, 300.0, 600.0]), pue=np.full(d, 1.2),
                    dc_region=np.arange(d), rtt_s=np.full((3, d), 0.02), engines_per_dc=4)
    got = est.estimate(snap, np.array([100, 2000]), np.array([300.0]), np.array([1, 2]))
    _same(got, est.estimate_numpy(snap, np.array([100, 2000]), np.array([300.0]), np.array([1, 2])))
    assert got.ttft_s.shape == (2, d)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.data())
def test_greedy_projected_tables_equal_the_estimates_of_projected_snapshots(case: tuple, data: st.DataObject) -> None:
    """Greedy's compiled tables (rule 1) equal the numpy estimator on ``projected_snapshot`` level by level."""
    from servegym.baselines.geo.greedy import LEVELS_AHEAD, projected_snapshot
    from servegym.envs.geo.sim.estimator_kernels import projected_latency_into

    est, snap, isl, osl, origin = case
    d, n = snap.n_dcs, isl.size
    base = np.array(data.draw(st.lists(st.integers(0, 60), min_size=d, max_size=d)), dtype=np.float64)
    o_lo = data.draw(st.integers(0, 1))
    shape = (LEVELS_AHEAD + 1, n, d)
    ttft, tpot, feas = np.full(shape, -1.0), np.full(shape, -1.0), np.zeros(shape, dtype=bool)
    projected_latency_into(snap.batch, snap.queued_tokens, snap.kv_tokens, snap.prefill_duty, snap.pue,
                           snap.ci_g_per_kwh, snap.rtt_s, snap.engines_per_dc, base, o_lo, isl.astype(np.float64),
                           np.maximum(osl, 1.0), origin, est.par, ttft, tpot, feas)
    assert (ttft[:o_lo] == -1.0).all()  # the levels below o_lo are the caller's
    for o in range(o_lo, LEVELS_AHEAD + 1):
        ref = est.estimate_numpy(projected_snapshot(snap, est, base + o), isl, osl, origin)
        assert ttft[o].tobytes() == ref.ttft_s.tobytes() and tpot[o].tobytes() == ref.tpot_s.tobytes(), o
        assert (feas[o] == ref.feasible).all(), o


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.data())
def test_compiled_greedy_decides_as_the_vectorized_numpy_form(case: tuple, data: st.DataObject) -> None:
    """Greedy's one-by-one compiled rows place every request as the fixed-point numpy form, across blocks
    (up to 300 requests, BLOCK = 128) and level events (few engines, many own dispatches)."""
    from servegym.baselines.geo.greedy import Greedy
    from servegym.envs.geo.sim.decisions import DecisionContext

    est, snap, _isl, _osl, _origin = case
    d, r = snap.n_dcs, snap.rtt_s.shape[0]
    n = data.draw(st.integers(1, 300))
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    isl = rng.integers(1, 6000, n)
    osl = rng.uniform(0.0, 1500.0, n)
    sched = rng.integers(0, r, n)
    disp = rng.integers(0, data.draw(st.sampled_from([1, 5, 60])), (r, d))
    ctx = DecisionContext(mode="request", time_s=1.0, request_id=np.arange(n), scheduler=sched,
                          arrival_s=np.ones(n), decision_s=np.ones(n), input_tokens=isl, osl_estimate=osl,
                          output_tokens=None, snapshot=snap, dispatched=disp,
                          estimate_fn=lambda: est.estimate_numpy(snap, isl, osl, sched),
                          dc_names=tuple(f"dc{i}" for i in range(d)), estimator=est)
    pol = Greedy(data.draw(st.sampled_from([0.0, 0.5, 1.0])))
    g = snap.pue * snap.ci_g_per_kwh
    got = pol.decide(ctx)
    for s in np.unique(sched):
        rows = np.flatnonzero(sched == s)
        # subnormal CIs (hypothesis draws them) overflow g / g_max to inf and 0 x inf to NaN in the numpy form;
        # the forms must agree there too (first NaN wins the argmin), so only the warnings are silenced
        with np.errstate(over="ignore", invalid="ignore"):
            ref = pol._decide_scheduler_numpy(ctx, est, int(s), rows, g)
        assert got[rows].tolist() == ref.tolist()


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_compiled_assign_within_caps_equals_the_numpy_rounds(data: st.DataObject) -> None:
    """Placements and overflow of the compiled deferred acceptance equal the numpy rounds', ties included."""
    from servegym.envs.geo.env_window import assign_within_caps, assign_within_caps_numpy

    n, d = data.draw(st.integers(0, 40)), data.draw(st.integers(1, 6))
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    # small integer carbon makes ties between DCs common (the first DC of a tie wins in both forms)
    carbon = (rng.integers(0, 4, (n, d)) if data.draw(st.booleans()) else rng.uniform(0.0, 5.0, (n, d))).astype(float)
    cand = rng.random((n, d)) < data.draw(st.sampled_from([0.3, 0.7, 1.0]))
    cand[np.arange(n), rng.integers(0, d, n)] = True  # every row has a candidate
    cap = rng.integers(0, data.draw(st.sampled_from([1, 3, 20])), d)
    got, got_left = assign_within_caps(carbon, cand, cap)
    ref, ref_left = assign_within_caps_numpy(carbon, cand, cap)
    assert got.tolist() == ref.tolist() and got_left == ref_left


def test_compiled_window_observation_equals_the_numpy_expressions() -> None:
    """GeoRouteWindow-v0's per-DC window block, compiled, equals its numpy form bit for bit on real windows
    (small and mini presets, direct and residual modes, random actions): in the float32 observation and, as
    float64 values before that rounding, in a float64 buffer."""
    import gymnasium as gym

    import servegym  # noqa: F401  (registers the ids)

    checked = 0
    for cfg in ({"geo": {"duration_s": 4.0}}, {"preset": "mini", "geo": {"duration_s": 4.0}},
                {"geo": {"duration_s": 3.0}, "action_mode": "residual"}):
        env = gym.make("servegym/GeoRouteWindow-v0", config=cfg)
        base = env.unwrapped
        obs, _ = env.reset(seed=3)
        env.action_space.seed(3)
        d = base.n_dcs
        assert d >= 2
        done = False
        while not done:
            ref = obs.copy()
            base._window_block_numpy(ref)
            assert obs[7 * d:15 * d].tobytes() == ref[7 * d:15 * d].tobytes()
            wide, wide_ref = np.zeros(obs.size), np.zeros(obs.size)
            base._window_block(wide)
            base._window_block_numpy(wide_ref)
            assert wide.tobytes() == wide_ref.tobytes()
            checked += 1
            obs, _r, _t, done, _i = env.step(env.action_space.sample())
    assert checked > 100


@given(st.lists(st.one_of(st.sampled_from([0.0, -0.0, 1.0, np.inf, -np.inf, np.nan]), st.floats()), min_size=1,
                max_size=12))
def test_first_argmin_is_numpys_argmin(xs: list[float]) -> None:
    """The compiled argmin of the kernels picks what ``np.argmin`` picks: the first minimum, the first NaN."""
    from servegym.envs.geo.sim.estimator_kernels import first_argmin

    a = np.array(xs, dtype=np.float64)
    assert first_argmin(a) == int(np.argmin(a))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.data())
def test_compiled_window_headroom_equals_the_drained_snapshot_form(case: tuple, data: st.DataObject) -> None:
    """The window schedulers' H_d, compiled, equals headroom_requests on the numpy drained_snapshot, floored."""
    from servegym.baselines.geo.ilp import window_headroom, window_headroom_numpy
    from servegym.envs.geo.sim.decisions import DecisionContext

    est, snap, isl, osl, origin = case
    d, r = snap.n_dcs, snap.rtt_s.shape[0]
    polled = np.array(data.draw(st.lists(st.floats(0.0, 5.0), min_size=d, max_size=d)))
    snap = snap.replace(polled_at_s=polled)
    disp = np.array(data.draw(st.lists(st.integers(0, 30), min_size=r * d, max_size=r * d))).reshape(r, d)
    n = isl.size
    ctx = DecisionContext(mode="window", time_s=data.draw(st.floats(0.0, 8.0)), request_id=np.arange(n),
                          scheduler=origin, arrival_s=np.zeros(n), decision_s=np.zeros(n), input_tokens=isl,
                          osl_estimate=osl, output_tokens=None, snapshot=snap, dispatched=disp,
                          estimate_fn=lambda: est.estimate_numpy(snap, isl, osl, origin),
                          dc_names=tuple(f"dc{i}" for i in range(d)), estimator=est)
    assert window_headroom(ctx, est).tobytes() == window_headroom_numpy(ctx, est).tobytes()
    # and before the floor, which hides most rounding differences
    from servegym.baselines.geo.ilp import drained_snapshot
    from servegym.envs.geo.sim.estimator_kernels import drained_headroom_into

    h = np.empty(d)
    drained_headroom_into(snap.batch, snap.queued_tokens, snap.kv_tokens, snap.prefill_duty, snap.polled_at_s,
                          ctx.time_s, float(snap.engines_per_dc), est.par, h)
    assert h.tobytes() == est.headroom_requests(drained_snapshot(snap, est, ctx.time_s)).tobytes()


def test_compiled_drained_headroom_on_many_lightly_loaded_dcs() -> None:
    """H_d(t) compiled equals the numpy drained_snapshot form on 4000 random DCs with headroom left (where a
    rounding difference of the drain would show; the hypothesis cases are often full)."""
    from servegym.baselines.geo.ilp import drained_snapshot
    from servegym.envs.geo.sim.estimator_kernels import drained_headroom_into

    rng = np.random.default_rng(7)
    for name in PROFILES:
        prof = load_profile(name)
        est = Estimator(prof, 1.0, 0.1, float(rng.uniform(200, 3000)), float(rng.uniform(50, 800)))
        d = 4000
        batch = rng.uniform(0.0, prof.max_num_seqs, d) * (rng.random(d) < 0.9)
        z = np.zeros(d)
        snap = Snapshot(time_s=1.0, polled_at_s=rng.uniform(0.0, 2.0, d), batch=batch,
                        queued_tokens=rng.uniform(0.0, 3000.0, d) * (rng.random(d) < 0.5),
                        kv_tokens=batch * rng.uniform(100.0, 3000.0, d), kv_frac=z, prefill_duty=rng.uniform(0, 1, d),
                        in_flight=z, ci_g_per_kwh=z, pue=z + 1.0, dc_region=np.zeros(d, dtype=np.int64),
                        rtt_s=np.zeros((1, d)), engines_per_dc=8)
        h = np.empty(d)
        drained_headroom_into(snap.batch, snap.queued_tokens, snap.kv_tokens, snap.prefill_duty, snap.polled_at_s,
                              2.5, 8.0, est.par, h)
        ref = est.headroom_requests(drained_snapshot(snap, est, 2.5))
        assert (ref > 0).mean() > 0.5
        assert h.tobytes() == ref.tobytes()


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_compiled_facility_model_equals_the_numpy_arrays(data: st.DataObject) -> None:
    """The facility MILP's compressed columns, costs and row bounds, compiled, equal the numpy form's."""
    from servegym.baselines.geo.solver import _facility_model_numpy
    from servegym.baselines.geo.solver_kernels import facility_model

    n, d = data.draw(st.integers(0, 30)), data.draw(st.integers(1, 7))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    cost = rng.uniform(-1.0, 5.0, (n, d)) * (rng.random((n, d)) < 0.9)  # zeros and negatives too
    feas = rng.random((n, d)) < data.draw(st.sampled_from([0.0, 0.4, 1.0]))
    cap = np.floor(rng.uniform(0.0, data.draw(st.sampled_from([0.5, 4.0, 40.0])), d))
    wake = rng.uniform(0.0, 3.0, d) * (rng.random(d) < 0.7)
    awake = (rng.random(d) < 0.4) | (wake <= 0)
    got = list(facility_model(cost, feas, cap, awake, wake))
    m = got[0].size
    got[9][m:m + n] = float(n + 1) + float(wake[~awake].sum() / got[2])
    ref = _facility_model_numpy(cost, feas, cap, wake, awake)
    assert len(got) == len(ref)
    for k, (a, b) in enumerate(zip(got, ref, strict=True)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), k
