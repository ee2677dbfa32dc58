"""Tests of the geo engine pool (paper §III-C) and its §V-B validation."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.envs.geo.sim.engine import EnginePool, FinishedRequests
from servegym.envs.geo.sim.profile import (
    DecodeTimeModel,
    EngineProfile,
    PrefillTimeModel,
    StepEnergyModel,
    available_profiles,
)

from servegym.errors import ActionError, ConfigError

# A stand-in profile from DistServe's fitted A100 step coefficients for OPT-13B TP1
# (../shared/data/gpu_perf/distserve/profiler-a100-80g.vllm.json: prefill a + b*N + c*N^2 ms, decode
# a + b*K + c*B ms for small batches), scaled by 8/13 for an 8B model. Energies are round numbers
# near 400 W x step time. The engine's logic, not these numbers, is under test here.
_S = 8.0 / 13.0


def make_profile(**overrides: object) -> EngineProfile:
    d: dict[str, object] = dict(
        name="distserve-opt13b-scaled-8b",
        model="test",
        gpu="a100",
        tp=1,
        max_num_seqs=40,
        max_num_batched_tokens=2048,
        kv_bytes_per_token=131072,
        kv_capacity_tokens=150_000,
        tdp_w=400.0,
        idle_w_per_gpu=72.0,
        prefill=PrefillTimeModel(
            knee_tokens=512.0, tok_slope_lo=0.1405e-3 * _S, tok_slope_hi=0.1405e-3 * _S * 1.1,
            b0=22.05e-3 * _S, b1=0.2e-3, b2=8.08e-9 * _S,
        ),
        decode=DecodeTimeModel(alpha=(23.48e-3 * _S, 0.0607e-3 * _S, 1e-7), beta=(1e-7, 0.593e-6 * _S, 0.0)),
        energy=StepEnergyModel(e0_pre=5.0, e_p=0.02, e_a=1e-8, e0_dec=4.0, e_d=0.05, e_k=1e-5),
    )
    d.update(overrides)
    return EngineProfile(**d)  # type: ignore[arg-type]


PROFILE = make_profile()


def submit_stream(pool: EnginePool, arrival, isl, osl, ready_delay=0.0, engines=None) -> None:
    n = len(arrival)
    eng = np.arange(n) % pool.n_engines if engines is None else engines
    pool.submit(eng, np.arange(n), arrival, np.asarray(arrival) + ready_delay, isl, osl)


def run_to_end(pool: EnginePool, step: float = 1.0, limit: float = 1e5) -> FinishedRequests:
    parts = []
    t = pool.now_s
    while pool.finished < pool.arrived:
        t += step
        pool.advance(t)
        parts.append(pool.drain_finished())
        assert t < limit
    return FinishedRequests.concat(parts)


def test_single_request_timing_matches_step_models() -> None:
    pool = EnginePool(PROFILE, 1)
    isl, osl = 300, 5
    pool.submit([0], [7], [0.5], [0.5], [isl], [osl])
    fin = run_to_end(pool)
    assert len(fin) == 1 and fin.request_id[0] == 7
    t_pre = float(PROFILE.prefill(isl, 1, isl**2))
    assert fin.first_token_s[0] == pytest.approx(0.5 + t_pre, rel=1e-12)
    # decode steps: the cache holds isl + generated tokens (generated = 1..osl-1 before each step)
    t_dec = sum(float(PROFILE.decode(1, isl + g)) for g in range(1, osl))
    assert fin.finish_s[0] == pytest.approx(0.5 + t_pre + t_dec, rel=1e-12)
    assert fin.ttft_s[0] == pytest.approx(t_pre, rel=1e-12)
    assert fin.tpot_s[0] == pytest.approx(t_dec / (osl - 1), rel=1e-12)
    assert fin.e2e_s[0] == pytest.approx(t_pre + t_dec, rel=1e-12)
    e_pre = float(PROFILE.energy.prefill(isl, isl**2))
    e_dec = sum(float(PROFILE.energy.decode(1, isl + g)) for g in range(1, osl))
    assert pool.energy_prefill_j[0] == pytest.approx(e_pre)
    assert pool.energy_decode_j[0] == pytest.approx(e_dec)
    # idle: before the arrival and after the finish, up to the last advance
    busy = t_pre + t_dec
    assert pool.energy_idle_j[0] == pytest.approx(PROFILE.idle_w * (pool.now_s - busy))


def test_osl_one_finishes_at_prefill_with_nan_tpot() -> None:
    pool = EnginePool(PROFILE, 1)
    pool.submit([0], [0], [0.0], [0.0], [100], [1])
    fin = run_to_end(pool)
    assert fin.finish_s[0] == fin.first_token_s[0]
    assert math.isnan(fin.tpot_s[0])
    assert pool.decode_steps[0] == 0 and pool.prefill_steps[0] == 1


@pytest.mark.parametrize("isl", [1, 2047, 2048, 2049, 5000, 10_000])
def test_chunked_prefill_splits_long_prompt(isl: int) -> None:
    budget = PROFILE.max_num_batched_tokens
    pool = EnginePool(PROFILE, 1)
    pool.submit([0], [0], [0.0], [0.0], [isl], [2])
    fin = run_to_end(pool)
    n_steps = math.ceil(isl / budget)
    assert pool.prefill_steps[0] == n_steps
    # each chunk's attention term is (p + c)^2 - p^2, so they sum to isl^2
    chunks = [min(budget, isl - p) for p in range(0, isl, budget)]
    starts = np.cumsum([0, *chunks[:-1]])
    t = sum(float(PROFILE.prefill(c, 1, (p + c) ** 2 - p**2)) for p, c in zip(starts, chunks, strict=True))
    assert fin.ttft_s[0] == pytest.approx(t, rel=1e-12)


def test_prefill_stalls_decode_and_shares_budget() -> None:
    """A long prompt admitted mid-decode stalls the running request for all its chunks."""
    pool = EnginePool(PROFILE, 1)
    pool.submit([0, 0], [0, 1], [0.0, 0.05], [0.0, 0.05], [100, 6000], [50, 2])
    fin = run_to_end(pool)
    by_id = dict(zip(fin.request_id.tolist(), range(len(fin)), strict=True))
    short, long_ = by_id[0], by_id[1]
    assert pool.prefill_steps[0] == 1 + math.ceil(6000 / PROFILE.max_num_batched_tokens)
    solo = EnginePool(PROFILE, 1)
    solo.submit([0], [0], [0.0], [0.0], [100], [50])
    alone = run_to_end(solo)
    stall = fin.tpot_s[short] * 49 - alone.tpot_s[0] * 49
    assert stall > float(PROFILE.prefill(2048, 1, 2048**2))  # at least one full chunk of stall
    assert fin.ttft_s[long_] > float(PROFILE.prefill(6000, 1, 6000**2))


def test_never_used_engine_charges_exactly_idle_power() -> None:
    pool = EnginePool(PROFILE, 3)
    pool.submit([0], [0], [0.0], [0.0], [500], [20])
    for t in (0.3, 1.7, 4.0, 10.0):
        pool.advance(t)
    assert pool.energy_j[1] == pytest.approx(PROFILE.idle_w * 10.0, rel=1e-12)
    assert pool.energy_idle_j[2] == pytest.approx(PROFILE.idle_w * 10.0, rel=1e-12)
    assert pool.energy_prefill_j[1] == 0 and pool.energy_decode_j[1] == 0
    # a used engine: busy + idle time covers the whole span once it drained
    assert pool.prefill_s[0] + pool.decode_s[0] + pool.idle_s[0] == pytest.approx(10.0, rel=1e-12)
    assert pool.energy_idle_j[0] == pytest.approx(PROFILE.idle_w * pool.idle_s[0])
    assert pool.energy_j.sum() == pytest.approx(
        (pool.energy_prefill_j + pool.energy_decode_j + pool.energy_idle_j).sum()
    )


def test_idle_charged_while_waiting_for_in_transit_request() -> None:
    pool = EnginePool(make_profile(tp=2), 1)
    pool.submit([0], [0], [0.0], [2.0], [50], [2])  # in transit for 2 s
    pool.advance(1.0)
    stats = pool.poll()
    assert stats.in_transit[0] == 1 and stats.queued[0] == 0 and stats.queued_tokens[0] == 0
    pool.advance(2.0)
    assert pool.energy_idle_j[0] == pytest.approx(2 * 72.0 * 2.0)  # idle_w = 72 W/GPU x tp
    assert pool.poll().queued[0] == 1


@st.composite
def streams(draw):
    n = draw(st.integers(1, 120))
    n_eng = draw(st.integers(1, 4))
    gaps = draw(st.lists(st.floats(0.0, 0.3), min_size=n, max_size=n))
    isl = draw(st.lists(st.integers(1, 5000), min_size=n, max_size=n))
    osl = draw(st.lists(st.integers(1, 200), min_size=n, max_size=n))
    delay = draw(st.lists(st.floats(0.0, 0.5), min_size=n, max_size=n))
    dt = draw(st.floats(0.01, 2.0))
    return n_eng, np.cumsum(gaps), np.array(isl), np.array(osl), np.array(delay), dt


@settings(max_examples=40, deadline=None)
@given(streams(), st.integers(8, 40), st.integers(6000, 20_000))
def test_conservation_caps_and_kv_on_random_streams(stream, max_seqs, kv_cap) -> None:
    n_eng, arrival, isl, osl, delay, dt = stream
    prof = make_profile(max_num_seqs=max_seqs, kv_capacity_tokens=kv_cap)
    pool = EnginePool(prof, n_eng, initial_capacity=16)
    # submit in chunks as a cluster would: every request is submitted before time reaches its creation
    order = np.arange(len(arrival))
    t, i = 0.0, 0
    while pool.finished < len(arrival):
        j = int(np.searchsorted(arrival, t + dt, side="left"))
        if j > i:
            sl = order[i:j]
            pool.submit(sl % n_eng, sl, arrival[sl], np.maximum(arrival[sl] + delay[sl], t), isl[sl], osl[sl])
            i = j
        t += dt
        pool.advance(t)
        pool.check_invariants()
        assert pool.arrived == pool.finished + pool.queued + pool.in_flight
        stats = pool.poll()
        assert (stats.batch <= max_seqs).all()
        assert (stats.kv_reserved_tokens <= kv_cap).all() and (stats.kv_frac <= 1.0).all()
        assert ((stats.prefill_duty >= 0) & (stats.prefill_duty <= 1)).all()
        if pool.finished % 7 == 0:
            pool.drain_finished()
        assert t < 1e4
    assert pool.arrived == len(arrival)


def test_kv_capacity_binds_admission() -> None:
    """With room for two requests' KV only, the third waits although the batch cap allows it."""
    prof = make_profile(kv_capacity_tokens=2500)
    pool = EnginePool(prof, 1)
    pool.submit([0, 0, 0], [0, 1, 2], [0.0] * 3, [0.0] * 3, [1000, 1000, 1000], [200, 200, 200])
    pool.advance(0.01)
    stats = pool.poll()
    assert stats.batch[0] == 2 and stats.queued[0] == 1
    assert stats.kv_reserved_tokens[0] == 2400
    assert stats.queued_tokens[0] == 1000  # the waiting prompt; the running step took both admitted prompts
    fin = run_to_end(pool)
    third = fin.first_token_s[fin.request_id == 2][0]
    assert third >= fin.finish_s[fin.request_id < 2].min()


def test_batch_cap_binds_admission() -> None:
    prof = make_profile(max_num_seqs=3)
    pool = EnginePool(prof, 1)
    pool.submit(np.zeros(10, int), np.arange(10), np.zeros(10), np.zeros(10), np.full(10, 50), np.full(10, 30))
    pool.advance(0.05)
    assert pool.poll().batch[0] == 3 and pool.queued == 7
    fin = run_to_end(pool, step=0.05)
    assert len(fin) == 10
    # FIFO: first tokens in submission order
    order = fin.request_id[np.argsort(fin.first_token_s, kind="stable")]
    assert order.tolist() == list(range(10))


def test_queue_is_ordered_by_ready_time() -> None:
    pool = EnginePool(make_profile(max_num_seqs=1), 1)
    # submitted in id order, but request 1 (remote) reaches the engine after request 2 (local)
    pool.submit([0, 0, 0], [0, 1, 2], [0.0, 0.0, 0.01], [0.0, 0.3, 0.02], [100, 100, 100], [3, 3, 3])
    fin = run_to_end(pool, step=0.1)
    order = fin.request_id[np.argsort(fin.first_token_s)]
    assert order.tolist() == [0, 2, 1]
    assert fin.ttft_s[fin.request_id == 1][0] >= 0.3  # TTFT includes the transfer delay


def _replay(step: float, seed: int = 3):
    rng = np.random.default_rng(seed)
    n = 400
    arr = np.cumsum(rng.exponential(1 / 25, n))
    isl, osl = rng.integers(20, 4000, n), rng.integers(1, 150, n)
    pool = EnginePool(PROFILE, 3)
    submit_stream(pool, arr, isl, osl, ready_delay=0.01)
    fin = run_to_end(pool, step=step)
    idx = np.argsort(fin.request_id)
    return fin, idx, pool


def test_deterministic_and_independent_of_advance_cadence() -> None:
    a, ia, pa = _replay(1.0)
    b, _, pb = _replay(1.0)
    for f in dataclasses.fields(FinishedRequests):
        np.testing.assert_array_equal(getattr(a, f.name), getattr(b, f.name))
    np.testing.assert_array_equal(pa.energy_j, pb.energy_j)
    c, ic, pc = _replay(0.037)
    np.testing.assert_array_equal(a.finish_s[ia], c.finish_s[ic])
    np.testing.assert_array_equal(a.first_token_s[ia], c.first_token_s[ic])
    np.testing.assert_allclose(pa.energy_j[:], pc.energy_j[:] - PROFILE.idle_w * (pc.now_s - pa.now_s), rtol=1e-9)


def test_poll_counters_and_duty_window() -> None:
    pool = EnginePool(PROFILE, 2)
    pool.submit([0, 0, 1], [0, 1, 2], [0.0, 0.0, 0.0], [0.0, 0.0, 0.5], [3000, 3000, 100], [10, 10, 10])
    pool.advance(0.001)  # the first prefill step (2048 tokens of request 0) is running
    s = pool.poll()
    assert s.batch.tolist() == [2, 0] and s.in_transit.tolist() == [0, 1]
    assert s.queued_tokens[0] == 6000 - 2048
    assert s.prefill_duty[0] == 1.0  # a step counts when it starts; clipped to the window
    pool.advance(100.0)
    s = pool.poll()
    assert 0 < s.prefill_duty[0] < 0.01 and s.window_s == pytest.approx(100.0 - 0.001)
    assert pool.poll().window_s == 0.0


def test_slots_are_reused_and_table_grows() -> None:
    pool = EnginePool(PROFILE, 2, initial_capacity=16)
    rng = np.random.default_rng(1)
    total = 0
    for k in range(30):
        n = int(rng.integers(0, 40))
        arr = np.full(n, float(k))
        pool.submit(np.arange(n) % 2, np.arange(total, total + n), arr, arr, rng.integers(1, 500, n), rng.integers(1, 20, n))
        total += n
        pool.advance(k + 1.0)
        pool.check_invariants()
        pool.drain_finished()
    fin = run_to_end(pool)
    assert pool.finished == total and len(fin) <= total


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(engine=[5]), "engine = 5"),
        (dict(isl=[0]), "input_tokens"),
        (dict(isl=[149_990], osl=[20]), "kv_capacity_tokens"),
        (dict(ready=[-1.0], created=[-1.0]), "now_s"),
        (dict(ready=[0.0], created=[1.0]), "ready_s must be >= created_s"),
        (dict(rid=[1, 2]), "equal lengths"),
    ],
)
def test_bad_submit_raises_and_leaves_state(kwargs, match) -> None:
    pool = EnginePool(PROFILE, 2)
    pool.advance(0.0)
    a = dict(engine=[0], rid=[1], created=[0.0], ready=[0.0], isl=[10], osl=[10])
    a.update(kwargs)
    with pytest.raises(ActionError, match=match):
        pool.submit(a["engine"], a["rid"], a["created"], a["ready"], a["isl"], a["osl"])
    assert pool.arrived == 0
    pool.check_invariants()


def test_bad_config_and_advance() -> None:
    with pytest.raises(ConfigError, match="n_engines"):
        EnginePool(PROFILE, 0)
    pool = EnginePool(PROFILE, 1)
    pool.advance(2.0)
    with pytest.raises(ActionError, match="t_end_s"):
        pool.advance(1.0)


def test_validate_cli_json_small_grid(capsys, tmp_path) -> None:
    from servegym.envs.geo import cli

    parser = argparse.ArgumentParser()
    cli.add_commands(parser.add_subparsers())
    path = str(tmp_path / "profile.json")
    make_profile().save(path)
    args = parser.parse_args(["geo", "validate", "--profile", path, "--rates", "2,60", "--requests", "200", "--json"])
    rc = args.func(args)
    res = json.loads(capsys.readouterr().out)
    for key in ("saturation_req_s", "tpot_ms_lowest_rate", "tpot_ms_highest_rate", "ttft_ms_lowest_rate"):
        assert res[key] > 0 and key in res["anchors"]
    assert rc == (0 if res["all_pass"] else 1)
    # the overloaded rate measures capacity, the light one its offered load
    assert res["per_rate"][1]["throughput_rps"] < 60 * 0.8
    assert res["per_rate"][0]["tpot_ms_mean"] < res["per_rate"][1]["tpot_ms_mean"]


@pytest.mark.slow
def test_validation_anchors_with_shipped_profile() -> None:
    from servegym.envs.geo.reports.validate import DEFAULT_PROFILE, validate

    assert DEFAULT_PROFILE in available_profiles()
    res = validate(DEFAULT_PROFILE)
    failed = {k: a for k, a in res["anchors"].items() if not a["pass"]}
    assert not failed, failed
