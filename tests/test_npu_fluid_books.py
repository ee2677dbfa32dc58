"""The fluid npu simulator's compiled bookkeeping (envs/npu/sim/fluid_books.py, monitor_stats.py) equals the numpy formulation it
replaced bit for bit, on random arrays (fractional bin weights, so the summation order shows), and the fleet
version moves wherever the vPod arrays change."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.envs.npu.env import NPUAutoscaleEnv
from servegym.envs.npu.sim import fluid_books as fb
from servegym.envs.npu.sim import fluid_kernels as fk
from servegym.envs.npu.sim.cluster import NPUCluster
from servegym.envs.npu.sim.config import NB
from servegym.envs.npu.sim.fluid import FluidCluster
from servegym.envs.npu.sim.monitor_stats import window_stats


def _arrivals_numpy(counts, tokens, cum, bs, t0, t1):  # type: ignore[no-untyped-def]
    """FluidCluster._arrivals as it was written in numpy (before fluid_books.arrivals)."""
    i0, i1 = int(t0 // bs), min(math.ceil(t1 / bs - 1e-9), counts.shape[0])
    lo = np.arange(i0, i1) * bs
    length = np.minimum(lo + bs, t1) - np.maximum(lo, t0)
    w = length / bs
    cnt_k = w[:, None, None] * counts[i0:i1]
    tok_k = w[:, None] * tokens[i0:i1, 0]
    last = i1 - 1
    arrived = float(cum[last]) + w[-1] * float(cum[last + 1] - cum[last])
    k_pre = np.stack([cnt_k[:, 0], tok_k], axis=1)
    return cnt_k.sum(axis=0), w, arrived, np.maximum(lo, t0), length, k_pre


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(0.0, 500.0), st.floats(1.0, 400.0))
def test_arrivals_equal_the_numpy_formulation(seed: int, t0: float, span: float) -> None:
    rng = np.random.default_rng(seed)
    n_bins, bs = 90, 10.0
    counts = rng.integers(0, 50, (n_bins, 2, NB)).astype(float) * rng.random((n_bins, 2, NB))  # fractional on purpose
    tokens = counts * rng.integers(1, 9000, (n_bins, 2, NB))
    cum = np.concatenate([[0], np.cumsum(rng.integers(0, 100, n_bins))])
    t1 = t0 + span
    i0, i1 = int(t0 // bs), min(math.ceil(t1 / bs - 1e-9), n_bins)
    if i0 >= i1:
        return
    for a in (counts, tokens, cum):  # read-only, as the workload profile's tables are (production's compile)
        a.setflags(write=False)
    got = fb.arrivals(counts, tokens, cum, bs, i0, i1, t0, t1)
    want = _arrivals_numpy(counts, tokens, cum, bs, t0, t1)
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(1.0, 300.0))
def test_settle_equals_the_numpy_formulation(seed: int, T: float) -> None:
    rng = np.random.default_rng(seed)
    G = 2 * NB

    def r(*shape):  # type: ignore[no-untyped-def]
        return rng.random(shape) * 10.0 ** rng.integers(-3, 9)

    usd_s, chip_s, psa, tokens, batch_tok, energy, e_busy = (r(G) for _ in range(7))
    res = r(fk.N_RES)
    q_req = r(2, NB, NB) * (rng.random((2, NB, NB)) < 0.3)
    acc = [r(G) for _ in range(7)]
    mm = [r(2) for _ in range(5)]
    peak = r(G)
    q_pre = r(NB) * (rng.random(NB) < 0.5)  # the prefill job queue observed (ttft_misses' q_obs[1])
    want_acc = [a.copy() for a in acc]
    want_m = [a.copy() for a in mm]
    usd_g = usd_s * T
    for a, x in zip(want_acc, (usd_g, chip_s * T, psa * T, tokens, batch_tok, energy, e_busy), strict=True):
        a += x
    want_m[0] += res[[fk.R_E_P, fk.R_E_D]]
    want_m[1] += np.array([usd_g[:NB].sum(), usd_g[NB:].sum()])
    want_m[2] += res[[fk.R_EB_P, fk.R_EB_D]]
    want_m[3] += res[[fk.R_USDB_P, fk.R_USDB_D]]
    want_m[4] += res[[fk.R_TOKENS_P, fk.R_TOKENS_D]]
    # a prefill group's queue is its observed job queue, a decode group's its queued requests
    want_peak = np.maximum(peak, np.concatenate((q_pre, q_req[1].sum(axis=1))))
    fb.settle(T, usd_s, chip_s, psa, tokens, batch_tok, energy, e_busy, *acc, res, *mm, q_req, q_pre, peak)
    for a, b in zip([*acc, *mm, peak], [*want_acc, *want_m, want_peak], strict=True):
        assert np.array_equal(a, b)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(0, 40))
def test_fleet_state_and_rates_equal_the_numpy_formulation(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    t0 = 600.0
    t1 = t0 + 60.0
    v_ready = rng.choice([0.0, t0, t0 + 30.0, t1, t1 + 5.0, 300.0], n)
    v_gone = rng.choice([np.inf, t0 - 1.0, t0, t0 + 10.0, t1, t1 + 10.0], n)
    live = v_gone > t0
    ready = v_ready[live] <= t0
    steady = bool((ready | (v_ready[live] >= t1)).all() and (v_gone[live] >= t1).all())
    assert fb.fleet_state(v_ready, v_gone, t0, t1) == (int(live.sum()), int(ready.sum()), steady)
    rate = rng.random(NB)
    miss = rng.random(NB) * 5.0
    n_b = rng.random(NB) * 9.0 * (rng.random(NB) < 0.5)
    want = rate.copy()
    have = n_b > 0.0
    want[have] = miss[have] / n_b[have]
    fb.carry_rates(rate, miss, n_b)
    assert np.array_equal(rate, want)


def test_the_fleet_version_moves_with_the_vpod_arrays() -> None:
    # the fleet view's cache (fluid_fleet.py) keys on fleet_version: every change of the vPods must move it
    env = NPUAutoscaleEnv({"hours": 1.0, "split": None})
    env.reset(seed=1)
    sim = env.sim
    seen = {(sim.fleet_version, sim.v_group.tobytes(), sim.v_ready.tobytes(), sim.v_gone.tobytes())}
    rng = np.random.default_rng(0)
    splits = np.cumsum(env.action_space.nvec)[:-1]
    for _ in range(12):
        a = np.array([rng.choice(np.flatnonzero(m)) for m in np.split(env.action_masks(), splits)])
        env.step(a)
        # the fluid's caches keyed on it give what the request level's uncached forms give
        assert sim.held_chips() == NPUCluster.held_chips(sim)
        assert np.array_equal(sim._alive_counts(), NPUCluster._alive_counts(sim))
        assert np.array_equal(sim._ready_groups(), NPUCluster._ready_groups(sim))
        for a, b in zip(sim._fleet_counts(), NPUCluster._fleet_counts(sim), strict=True):
            assert np.array_equal(a, b)
        seen.add((sim.fleet_version, sim.v_group.tobytes(), sim.v_ready.tobytes(), sim.v_gone.tobytes()))
    versions = [s[0] for s in seen]
    assert len(versions) == len(set(versions)) > 5  # one version per content, and the content changed


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(0, 30))
def test_fleet_sums_and_groups_equal_the_numpy_formulation(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    G, J, n_cfg = 2 * NB, 11, 7
    t0, t1 = 600.0, 660.0
    T = t1 - t0
    v_group = rng.integers(0, G, n)
    v_cfg = rng.integers(0, n_cfg, n)
    v_ready = rng.choice([0.0, t0, t0 + 12.5, t1, t1 + 5.0], n)
    v_gone = rng.choice([np.inf, np.inf, t0 + 3.0, t1, t1 + 10.0], n)
    live = v_gone > t0 - 1.0
    static_w, usd, maxb, chips = (rng.random(n_cfg) * 10.0 ** rng.integers(0, 4) for _ in range(4))
    tps = rng.random((n_cfg, NB, J)) * 1e4
    pw = rng.random((n_cfg, NB, J)) * 1e3
    got = fb.fleet_sums(live, v_group, v_cfg, v_ready, v_gone, t0, t1, static_w, usd, maxb, chips, tps, pw, G)
    # the numpy formulation fluid_fleet._compute had before fluid_books.fleet_sums
    vg, vc, vr, vgone = v_group[live], v_cfg[live], v_ready[live], v_gone[live]
    serving = vgone == np.inf
    rf = np.where(serving, np.clip((t1 - np.maximum(vr, t0)) / T, 0.0, 1.0), 0.0)
    hf = np.clip((np.minimum(vgone, t1) - t0) / T, 0.0, 1.0)
    vb = vg % NB

    def bc(w):  # type: ignore[no-untyped-def]
        return np.bincount(vg, weights=w, minlength=G) if vg.size else np.zeros(G)

    avail = np.full(G, np.inf)
    dom = np.full(G, -1, dtype=np.int64)
    if vg.size:
        np.minimum.at(avail, vg[serving], np.maximum(vr[serving], t0))
        order = np.lexsort((-(rf + 1e-3 * serving), vg))
        vgo = vg[order]
        first = np.ones(order.size, dtype=bool)
        first[1:] = vgo[1:] != vgo[:-1]
        dom[vgo[first]] = vc[order][first]
    tps_v = tps[vc, vb] / np.maximum(tps[vc, vb, -1:], 1e-300)
    pre = vg < NB
    cap = np.zeros((NB, J))
    pbusy = np.zeros((NB, J))
    if pre.any():
        cell = (vg[pre][:, None] * J + np.arange(J)[None, :]).ravel()
        cap = np.bincount(cell, weights=(rf[pre, None] * tps_v[pre]).ravel(), minlength=NB * J).reshape(NB, J)
        pbusy = np.bincount(cell, weights=(rf[pre, None] * pw[vc[pre], vb[pre]]).ravel(),
                            minlength=NB * J).reshape(NB, J)
    want = (vg, vc, vr, serving, tps_v, bc(rf), bc(rf * static_w[vc]), bc(hf * static_w[vc]), bc(hf * usd[vc]),
            bc(rf * usd[vc]), bc(rf * maxb[vc]), bc(hf * chips[vc]),
            np.clip(np.where(np.isfinite(avail), avail, t1) - t0, 0.0, T), dom, cap, pbusy)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    now = t0 + 12.5
    ok = (v_gone == np.inf) & (v_ready <= now)
    assert np.array_equal(fb.ready_groups(v_group, v_ready, v_gone, now, G), np.unique(v_group[ok]))
    assert fb.ready_count(v_ready, now) == np.count_nonzero(v_ready <= now)
    rows = rng.random((NB, NB)) * (rng.random((NB, NB)) < 0.1)
    act = np.sort(rng.choice(NB, 5, replace=False))
    keep = rng.random(NB) < 0.3
    want_o = np.ones(NB, dtype=bool)
    want_o[act] = False
    want_o &= (rows.sum(axis=1) > 0) & ~keep
    got_o, anyone = fb.orphans(rows, act, keep)
    assert np.array_equal(got_o, want_o) and anyone == bool(want_o.any())
    # wide rows, mostly all zero (decode cohorts), some cancelling or negative or -0.0
    wide = np.zeros((NB, NB * 24))
    for g in rng.choice(NB, 6, replace=False):
        wide[g, rng.integers(0, wide.shape[1], 3)] = rng.random(3) - 0.3
    wide[act[0] if act.size else 0, 5:7] = [2.5, -2.5]
    wide[NB - 1, 100] = -0.0
    keep[:] = False
    got_o, anyone = fb.orphans(wide, act[1:], keep)
    want_o = np.ones(NB, dtype=bool)
    want_o[act[1:]] = False
    want_o &= wide.sum(axis=1) > 0
    assert np.array_equal(got_o, want_o) and anyone == bool(want_o.any())


def test_alive_keys_and_the_packed_fleet_view_sums_equal_their_reference_forms() -> None:
    from collections import Counter

    rng = np.random.default_rng(5)
    G, J, n_cfg = 2 * NB, 11, 7
    for n in (0, 1, 9, 40):
        v_group = rng.integers(0, 6, n) * 16  # few groups, so keys repeat
        v_cfg = rng.integers(0, n_cfg, n)
        v_ready = rng.uniform(500.0, 700.0, n)
        v_gone = np.where(rng.random(n) < 0.3, rng.uniform(600.0, 700.0, n), np.inf)
        keys, cnts = fb.alive_keys(v_group, v_cfg, v_gone, n_cfg)
        want = Counter((v_group[v_gone == np.inf] * n_cfg + v_cfg[v_gone == np.inf]).tolist())
        assert list(zip(keys.tolist(), cnts.tolist(), strict=True)) == list(want.items())
        args = (v_gone > 600.0, v_group, v_cfg, v_ready, v_gone, 600.0, 660.0, rng.random(n_cfg), rng.random(n_cfg),
                rng.integers(1, 64, n_cfg).astype(float), rng.integers(1, 9, n_cfg).astype(float),
                rng.random((n_cfg, NB, J)), rng.random((n_cfg, NB, J)), G)
        dom_t = np.where(rng.random(G) < 0.5, rng.integers(0, n_cfg, G), -1)
        fallback = rng.integers(0, n_cfg, G)
        full = fb.fleet_sums(*args)
        packed = fb.fleet_view_sums(*args, dom_t, fallback)
        for a, b in zip(packed[:5], full[:5], strict=True):
            assert np.array_equal(a, b)
        assert np.array_equal(packed[5], np.stack(full[5:13]))
        dom = np.where(full[13] >= 0, full[13], dom_t)
        assert np.array_equal(packed[6], np.where(dom >= 0, dom, fallback))
        assert np.array_equal(packed[7], full[14]) and np.array_equal(packed[8], full[15])
        # the fleet counts and the chips held per version (NPUCluster's numpy forms)
        maxb, cfg_ver, chips = args[9], rng.integers(0, 3, n_cfg), args[10]
        live = v_gone == np.inf
        ready = live & (v_ready <= 640.0)
        want_c = (np.bincount(v_group[ready], minlength=G).astype(float), np.bincount(v_group[live], minlength=G).astype(float),
                  np.bincount(v_group[ready], weights=maxb[v_cfg[ready]], minlength=G))
        for a, b in zip(fb.fleet_counts(v_group, v_cfg, v_ready, v_gone, 640.0, maxb, G), want_c, strict=True):
            assert np.array_equal(a, b)
        held = v_cfg[v_gone > 640.0]
        assert np.array_equal(fb.held_by_version(v_cfg, v_gone, 640.0, cfg_ver, chips, 3),
                              np.bincount(cfg_ver[held], weights=chips[held], minlength=3))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(0, 1000), st.sampled_from([(180, 30), (30, 30), (12, 30), (60, 1)]))
def test_window_stats_equal_the_numpy_formulation(seed: int, bin_index: int, sizes: tuple[int, int]) -> None:
    # NPUCluster.observe's monitor figures as they were written in numpy; fractional bins, so the order shows
    rng = np.random.default_rng(seed)
    nw, nb_epoch = sizes
    rate_bin_s, epoch_s = 10.0, 300.0
    bin_counts = rng.random((nw, 2, NB)) * rng.integers(0, 30, (nw, 2, NB)) * (rng.random((nw, 2, NB)) < 0.7)
    bin_tokens = bin_counts * rng.random((nw, 2, NB)) * 5000.0
    order = (bin_index - 1 - np.arange(nb_epoch)) % nw
    counts = bin_counts[order]
    tot_c = bin_counts.sum(axis=0)
    want = (bin_tokens[order], counts.sum(axis=0) / epoch_s,
            np.where(tot_c > 0, bin_tokens.sum(axis=0) / np.maximum(tot_c, 1), 0.0),
            bin_counts.max(axis=0) / rate_bin_s, (counts / rate_bin_s).max(axis=0))
    got = window_stats(bin_counts, bin_tokens, bin_index, nb_epoch, rate_bin_s, epoch_s)
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(a, b)


def test_either_missed_with_no_miss_of_one_kind_skips_the_overlap() -> None:
    # with no TTFT or no TPOT miss the overlap (>= 0) cannot lower the count: the same figure without the products
    class _Stub:
        def __init__(self, rng: np.random.Generator) -> None:
            self.profile = type("P", (), {"in_given_tot": rng.random((NB, NB))})()
            self._p_rate = rng.random(NB)

    rng = np.random.default_rng(0)
    for miss_p, miss_d in ((0.0, 7.5), (3.25, 0.0), (0.0, 0.0)):
        stub = _Stub(rng)
        n_p, miss_pb, md_b = rng.random(NB) * 4.0, rng.random(NB), rng.random(NB) * 2.0
        rate = stub._p_rate.copy()
        have = n_p > 0.0
        rate[have] = miss_pb[have] / n_p[have]
        both = float(md_b @ (stub.profile.in_given_tot @ rate))
        want = miss_p + miss_d - min(both, miss_p, miss_d)
        got = FluidCluster._either_missed(stub, miss_p, miss_d, n_p, miss_pb, md_b)
        assert got == want and np.array_equal(stub._p_rate, rate)


class _ScanEveryGroup(FluidCluster):
    """The fluid with the orphan scan of every non-routable decode group without a ready vPod (no skip of the groups
    known to be empty), the reference for the skip."""

    def _reroute_in_service(self) -> None:
        self._d_live[:] = True
        super()._reroute_in_service()


def test_the_orphan_scan_skips_only_groups_known_to_be_empty() -> None:
    from servegym.baselines.npu import NeuScalePolicy, run_policy
    from servegym.envs.npu.sim.cluster import ScalingDecision

    env = NPUAutoscaleEnv({"hours": 3, "fidelity": "fluid"})
    env.reset(seed=4)  # a scenario whose NeuScale fleet serves several decode groups after 2 h (four)
    sims = [cls(env.cluster_config, env.workload, seed=1, catalog=env.catalog) for cls in (FluidCluster, _ScanEveryGroup)]
    cleared = []
    a, b = sims
    orig = a._reroute_in_service

    def watch() -> None:  # records whether a call found a group it may skip from then on
        before = a._d_live.copy()
        orig()
        cleared.append(bool((before & ~a._d_live).any()))

    a._reroute_in_service = watch  # type: ignore[method-assign]
    for sim in sims:
        run_policy(sim, NeuScalePolicy(), hours=2)
    assert any(cleared), "no group left the decode routes empty: the skip was never exercised"
    # then the decode group holding the most jobs in service loses its vPods: its jobs move to the routes
    held = a.d_req.sum(axis=(1, 2))
    g = int(np.argmax(held))
    assert held[g] > 0 and (held > 0).sum() > 1
    for sim in sims:
        sim.apply(ScalingDecision({("decode", int(sim.edges[g])): {}}))
        sim.advance(600.0)
    assert a.d_req[g].sum() == 0.0
    for name in ("d_req", "d_tok", "d_sp", "q_req", "q_tok", "q_seg", "q_job"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.summary() == b.summary()


def test_bin_capacity_is_the_numpy_formulation() -> None:
    rng = np.random.default_rng(11)
    for trial in range(40):
        n, nk, L = int(rng.integers(0, 30)), int(rng.integers(1, 9)), 11
        vg = rng.integers(0, 2 * NB, n).astype(np.int64)
        serving = rng.random(n) < 0.8
        k_start = 600.0 * trial + 10.0 * np.arange(nk)
        k_len = np.full(nk, 10.0)
        k_len[-1] = float(rng.uniform(0.5, 10.0))
        vr = k_start[0] + rng.uniform(-30.0, 10.0 * nk + 30.0, n)
        vr[rng.random(n) < 0.3] = k_start[0] - 100.0  # ready before the interval
        tps_v = rng.uniform(0.0, 5e4, (n, L))
        want = np.zeros((NB, nk, L))
        pre = (vg < NB) & serving
        if pre.any():
            rfk = np.clip((k_start + k_len - np.maximum(vr[pre, None], k_start[None, :])) / k_len[None, :], 0.0, 1.0)
            np.add.at(want, vg[pre], rfk[:, :, None] * tps_v[pre, None, :])
        got = fb.bin_capacity(vg, serving, vr, tps_v, k_start, k_len, NB)
        assert np.array_equal(got, want), trial
