"""The fluid's decode split computed from the per-profile constants equals the whole computation (its form before
the constants were kept), bit for bit, for random sets of active decode groups and routing accuracies; and its
compiled contractions equal ``np.einsum``'s, bit for bit, on random tensors."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.envs.npu.env import NPUAutoscaleEnv
from servegym.envs.npu.sim.config import NB
from servegym.envs.npu.sim.fluid_split import _CONSTS, contractions, decode_split

_AR = np.arange(NB)


def _whole(prof, edges, acc, act):  # type: ignore[no-untyped-def]
    """The split as computed in one piece (every tensor from scratch, the routing matrix row by row)."""
    true = np.minimum(np.searchsorted(act, _AR, side="left"), act.size - 1)
    gt = act[true] if act.size else _AR
    tok = np.zeros((NB, NB))
    req = np.zeros((NB, NB))
    tok[_AR, gt] = acc
    req[_AR, gt] = acc
    seg = req
    if act.size and acc < 1.0:
        lo = np.minimum(np.searchsorted(act, _AR, side="left"), act.size - 1)
        U = np.zeros((NB, NB))
        for bi in range(NB):
            U[bi, act[lo[bi]:]] = 1.0 / (act.size - lo[bi])
        P = prof.in_given_tot
        osl = prof.osl_mean.T
        isl = prof.isl_mean.T
        w_tok = P * osl
        w_tok = w_tok / np.maximum(w_tok.sum(axis=1, keepdims=True), 1e-300)
        edge_g = edges[None, None, :].astype(float)
        o1 = np.maximum(osl[:, :, None], 1.0)
        late = np.clip((2.0 * edge_g - isl[:, :, None]) / o1, 0.0, 1.0)
        nxt = edges[np.minimum(np.searchsorted(edges, isl, side="right"), NB - 1)].astype(float)
        early = np.clip((np.minimum(nxt[:, :, None], 2.0 * edge_g) - isl[:, :, None]) / o1, 0.0, 1.0)
        first = np.where(late < 1.0, acc * early + (1.0 - acc) * late, late)
        short = _AR[None, None, :] < _AR[:, None, None]
        f1 = np.where(short, first, 1.0)
        mis_tok = np.einsum("ti,ig,tig->tg", w_tok, U, f1)
        moved_tok = np.einsum("ti,ig,tig->t", w_tok, U, 1.0 - f1)
        stays = f1 >= 1.0
        mis_req = np.einsum("ti,ig,tig->tg", P, U, stays.astype(float))
        moved_req = np.einsum("ti,ig,tig->t", P, U, (~stays).astype(float))
        tok += (1.0 - acc) * mis_tok
        tok[_AR, gt] += (1.0 - acc) * moved_tok
        req += (1.0 - acc) * mis_req
        req[_AR, gt] += (1.0 - acc) * moved_req
        seg = req + (1.0 - acc) * np.einsum("ti,ig,tig->tg", P, U, (~stays & (f1 > 0.0)).astype(float))
    return tok, req, seg


def test_the_split_from_kept_constants_is_the_whole_computation() -> None:
    env = NPUAutoscaleEnv({"hours": 1, "fidelity": "fluid"})
    env.reset(seed=0)
    prof, edges = env.sim.profile, env.sim.edges
    rng = np.random.default_rng(5)
    for trial in range(12):
        acc = (0.6, 1.0, float(rng.uniform(0.0, 1.0)))[trial % 3]
        act = np.sort(rng.choice(NB, size=int(rng.integers(0, 9)), replace=False)).astype(np.int64)
        got = decode_split(prof, edges, acc, act)
        want = _whole(prof, edges, acc, act)
        for g, w in zip(got, want, strict=True):
            assert np.array_equal(g, w), (trial, acc, act)
    # the constants were kept for the profile (one entry per accuracy seen last), not rebuilt per active set
    assert any(entry[0]() is prof for entry in _CONSTS.values())


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([1, 5, 48]), scale=st.sampled_from([1e-6, 1.0, 1e6]))
def test_the_compiled_contractions_are_einsums(seed: int, n: int, scale: float) -> None:
    """Each of the five outputs equals its ``np.einsum`` bit for bit: random non-negative factors of mixed magnitude,
    exact zeros among them, a routing matrix nonzero on a random ascending set of columns (and zero in some rows
    there, as an input bucket above a group's edge)."""
    rng = np.random.default_rng(seed)
    act = np.sort(rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False)).astype(np.int64)
    U = np.zeros((n, n))
    U[:, act] = rng.random((n, act.size)) * (rng.random((n, act.size)) < 0.7)
    w = rng.random((n, n)) * scale * (rng.random((n, n)) < 0.8)
    P = rng.random((n, n)) * (rng.random((n, n)) < 0.8)
    f1 = rng.random((n, n, n)) * (rng.random((n, n, n)) < 0.9)
    rest, stays, moves, first = 1.0 - f1, (f1 >= 0.5).astype(float), (f1 < 0.5).astype(float), rng.random((n, n, n))
    got = contractions(w, P, U, act, f1, rest, stays, moves, first)
    want = (np.einsum("ti,ig,tig->tg", w, U, f1), np.einsum("ti,ig,tig->t", w, U, rest),
            np.einsum("ti,ig,tig->tg", P, U, stays), np.einsum("ti,ig,tig->t", P, U, moves),
            np.einsum("ti,ig,tig->tg", P, U, first))
    for g, x in zip(got, want, strict=True):
        assert g.shape == x.shape
        assert np.array_equal(g, x)
