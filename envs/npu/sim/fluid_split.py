"""The fluid's decode split: which decode group serves each total-length bucket's tokens, requests and jobs.

:meth:`~servegym.envs.npu.sim.fluid.FluidCluster._decode_split` keys the split on the active decode groups and
computes it here on a miss. The (total bucket, input bucket, group) tensors of a misrouted request (where its
migration falls, whether it stays in its short group) depend on the workload's profile, the bucket edges and
``osl_accuracy`` only, not on the active groups: they are kept per profile (:data:`_CONSTS`, as many as the
profiles :mod:`~servegym.envs.npu.sim.fluid_profile` keeps), so a new set of active groups costs the five
contractions with its routing matrix instead of the whole (48 x 48 x 48) arithmetic again (about 4 ms a miss, a
few times per 24-h episode in the residual mode). The values are the same arrays, so the split is the same bit for
bit. The five contractions run in one compiled pass (:func:`contractions`) over the routing matrix's nonzero
entries only, in ``np.einsum``'s summation order (about 0.8 -> 0.13 ms a miss, profiled; a 4-h residual episode
of the default scenario misses about four times, some 5 % of its step time before). Shares are fractions
(dimensionless).
"""

from __future__ import annotations

import weakref
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray
from servegym.envs.npu.sim.config import NB
from servegym.envs.npu.sim.fluid_kernels import njit
from servegym.envs.npu.sim.fluid_profile import PROFILE_CACHE_MAX, WorkloadProfile

_AR = np.arange(NB)


class _Consts(NamedTuple):
    """A profile's act-independent tensors of the misrouted share (``fluid.py``, "Arrivals")."""

    w_tok: NDArray[np.float64]  # (total, input): output-token weight of each input bucket within a total bucket
    f1: NDArray[np.float64]  # (total, input, group): share of the output served in the first group
    rest: NDArray[np.float64]  # 1 - f1
    stays: NDArray[np.float64]  # f1 >= 1 as 0/1
    moves: NDArray[np.float64]  # f1 < 1 as 0/1
    first_job: NDArray[np.float64]  # a job in the short group: moves and f1 > 0, as 0/1


# id(profile) -> (a weak reference to the profile, edges, osl_accuracy, constants): the reference tells a reused id
# from its profile without keeping an evicted profile (and its per-request arrays) alive
_CONSTS: dict[int, tuple[weakref.ref, NDArray[np.int64], float, _Consts]] = {}


def _consts(prof: WorkloadProfile, edges: NDArray[np.int64], acc: float) -> _Consts:
    hit = _CONSTS.get(id(prof))
    if hit is not None and hit[0]() is prof and hit[2] == acc and np.array_equal(hit[1], edges):
        return hit[3]
    P = prof.in_given_tot  # (total bucket, input bucket)
    osl = prof.osl_mean.T  # (total, input)
    isl = prof.isl_mean.T
    w_tok = P * osl
    w_tok = w_tok / np.maximum(w_tok.sum(axis=1, keepdims=True), 1e-300)
    edge_g = edges[None, None, :].astype(float)
    # share of the output served before the migration (short groups only): at 2x the group's edge, or, when the
    # re-estimate is right (osl_accuracy) and the total passes 2x the edge, at the next bucket boundary after the
    # input (routing: mig_at), which lies below the group's edge
    o1 = np.maximum(osl[:, :, None], 1.0)
    late = np.clip((2.0 * edge_g - isl[:, :, None]) / o1, 0.0, 1.0)
    nxt = edges[np.minimum(np.searchsorted(edges, isl, side="right"), NB - 1)].astype(float)
    early = np.clip((np.minimum(nxt[:, :, None], 2.0 * edge_g) - isl[:, :, None]) / o1, 0.0, 1.0)
    first = np.where(late < 1.0, acc * early + (1.0 - acc) * late, late)
    short = _AR[None, None, :] < _AR[:, None, None]  # group bucket < total bucket
    f1 = np.where(short, first, 1.0)  # (total, input, group)
    stays = f1 >= 1.0
    out = _Consts(w_tok, f1, 1.0 - f1, stays.astype(float), (~stays).astype(float),
                  (~stays & (f1 > 0.0)).astype(float))
    while len(_CONSTS) >= PROFILE_CACHE_MAX:
        del _CONSTS[next(iter(_CONSTS))]
    _CONSTS[id(prof)] = (weakref.ref(prof), edges.copy(), acc, out)
    return out


@njit(cache=True)
def contractions(w_tok, P, U, act, f1, rest, stays, moves, first_job):  # pragma: no cover - compiled
    """The five contractions of the misrouted share with the routing matrix ``U`` (input bucket, group; nonzero
    only in the active groups' columns ``act``, ascending): per (total bucket t, group g) ``mis_tok`` =
    einsum("ti,ig,tig->tg", w_tok, U, f1), ``mis_req`` (P, U, stays) and ``first`` (P, U, first_job), and per
    total bucket ``moved_tok`` = einsum("ti,ig,tig->t", w_tok, U, rest) and ``moved_req`` (P, U, moves).

    ``np.einsum`` forms each term as (a b) c and adds the terms of an output element one by one from 0 in the C
    order of the summed indices (i, then g); so does this loop, which equals it bit for bit
    (tests/test_npu_fluid_split.py). A term with ``U`` = 0 is an exact 0 (every factor finite and >= 0), and
    adding it leaves a sum that starts at +0 unchanged, so the loop visits only the active groups' columns."""
    n = w_tok.shape[0]
    mis_tok = np.zeros((n, n))
    mis_req = np.zeros((n, n))
    first = np.zeros((n, n))
    moved_tok = np.zeros(n)
    moved_req = np.zeros(n)
    for t in range(n):
        mt = 0.0
        mr = 0.0
        for i in range(n):
            wt = w_tok[t, i]
            p = P[t, i]
            for a in range(act.size):
                g = act[a]
                u = U[i, g]
                if u == 0.0:
                    continue
                wu = wt * u
                pu = p * u
                mis_tok[t, g] += wu * f1[t, i, g]
                mt += wu * rest[t, i, g]
                mis_req[t, g] += pu * stays[t, i, g]
                mr += pu * moves[t, i, g]
                first[t, g] += pu * first_job[t, i, g]
        moved_tok[t] = mt
        moved_req[t] = mr
    return mis_tok, moved_tok, mis_req, moved_req, first


def decode_split(prof: WorkloadProfile, edges: NDArray[np.int64], acc: float, act: NDArray[np.int64]
                 ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Per total-length bucket (rows), the share of its output tokens, of its requests (where they finish) and of
    its decode jobs (a migrated request is a job in its short group, making its first tokens, and another in its
    true group) served by each decode group (columns) under the active decode groups ``act`` (bucket indices,
    ascending), with ``acc`` = ``osl_accuracy`` of the requests routed by their true total length."""
    true = np.minimum(np.searchsorted(act, _AR, side="left"), act.size - 1)
    gt = act[true] if act.size else _AR
    tok = np.zeros((NB, NB))
    req = np.zeros((NB, NB))
    tok[_AR, gt] = acc
    req[_AR, gt] = acc
    seg = req
    if act.size and acc < 1.0:
        c = _consts(prof, edges, acc)
        P = prof.in_given_tot
        # a misrouted request goes to a random active group whose edge is >= its input length
        lo = np.minimum(np.searchsorted(act, _AR, side="left"), act.size - 1)  # per input bucket
        U = np.zeros((NB, NB))
        U[:, act] = np.where(np.arange(act.size)[None, :] >= lo[:, None], (1.0 / (act.size - lo))[:, None], 0.0)
        mis_tok, moved_tok, mis_req, moved_req, first = contractions(c.w_tok, P, U, act, c.f1, c.rest, c.stays,
                                                                     c.moves, c.first_job)
        tok += (1.0 - acc) * mis_tok
        tok[_AR, gt] += (1.0 - acc) * moved_tok
        req += (1.0 - acc) * mis_req
        req[_AR, gt] += (1.0 - acc) * moved_req
        # the first part of a migrated request: a job in its short group (where it makes tokens there)
        seg = req + (1.0 - acc) * first
    return tok, req, seg
