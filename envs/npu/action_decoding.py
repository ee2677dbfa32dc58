"""The npu action types' decoding helpers, as functions of the :class:`~servegym.envs.npu.sim.state.NPUState`:
an absolute action's :class:`~servegym.envs.npu.sim.records.ScalingDecision`, the residual changes around the
reference's decision along the count ladder, and the absolute-mode reference actions (the heuristic's
``N_pod = ceil(R_peak / T_pod)`` per group, and a per-bucket decision projected onto the env's groups). The
action types that call them are in :mod:`~servegym.envs.npu.actions` (module docstring of the env: "Action
modes", "Masks")."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray
from servegym.envs.npu.env_config import (
    RESIDUAL_STEPS,
    WARM_WINDOW_S,
)
from servegym.envs.npu.sim.cluster import (
    NB,
    ScalingDecision,
)
from servegym.envs.npu.sim.roofline import PHASES
from servegym.envs.npu.sim.state import NPUState, Targets, capped


def residual_ladder(count_levels: tuple[int, ...] | list[int], max_group_vpods: int) -> NDArray[np.int64]:
    """Count levels a residual step moves along: ``count_levels`` continued by factors of sqrt(2)
    (rounded up) to ``max_group_vpods`` (a reference count between levels moves to the next level)."""
    lv = [int(x) for x in count_levels]
    x = float(lv[-1])
    while lv[-1] < max_group_vpods:
        x *= math.sqrt(2.0)
        lv.append(min(max(math.ceil(x - 1e-9), lv[-1] + 1), int(max_group_vpods)))
    return np.array(sorted(set(lv)), dtype=np.int64)


def shift(ladder: NDArray[np.int64], n: int, step: int, floor: int) -> int:
    """``n`` vPods moved ``step`` levels along ``ladder`` (not below ``floor``, not above its top)."""
    if step > 0:
        up = ladder[ladder > n]
        return int(up[min(step, up.size) - 1]) if up.size else n
    down = ladder[(ladder < n) & (ladder >= floor)]
    return int(down[max(down.size + step, 0)]) if down.size else n


def residual_targets(state: NPUState, a: NDArray[np.int64], base: Mapping[tuple[str, int], Mapping[int, int]],
                     with_options: bool, cap: int) -> Targets:
    """The reference's targets ``base`` with the agent's changes ``a``: per env group, each of the
    reference's groups in its length range moves ``RESIDUAL_STEPS[a]`` levels along the ladder
    (added vPods go to its last configuration, the one being filled; removed ones come from its
    last configurations first); a group of the reference with 0 vPods stays at 0, and the largest
    one of each phase keeps at least 1. With ``with_options`` (``residual_options``), option j >= 1 puts the
    group's vPods on ``options[g][j - 1]``. Key order (creation priority under a quota) is the reference's;
    every group's total is capped at ``cap`` vPods."""
    lay = state.layout
    d = 2 if with_options else 1
    top: dict[int, int] = {}
    bucket = lay.bucket_index
    for key, tgt in base.items():
        if sum(tgt.values()) > 0:
            p, b = PHASES.index(key[0]), bucket(key[1])
            top[p] = max(top.get(p, -1), b)
    out: Targets = {}
    for key, tgt in base.items():
        tgt = {int(c): int(n) for c, n in tgt.items() if n > 0}
        n = sum(tgt.values())
        p, b = PHASES.index(key[0]), bucket(key[1])
        g = int(lay.env_group[p, b])
        step = RESIDUAL_STEPS[int(a[d * g])]
        if n > 0 and step != 0:
            m = shift(state.ladder, n, step, 1 if top.get(p) == b else 0)
            cids = list(tgt)
            if m > n:
                tgt[cids[-1]] += m - n
            else:
                drop = n - m
                for c in reversed(cids):
                    k = min(drop, tgt[c])
                    tgt[c] -= k
                    drop -= k
                tgt = {c: k for c, k in tgt.items() if k > 0}
        if d == 2 and int(a[d * g + 1]) > 0 and tgt:
            tgt = {lay.options[g][int(a[d * g + 1]) - 1]: sum(tgt.values())}
        out[key] = tgt
    return capped(out, cap)


def absolute_decision(state: NPUState, a: NDArray[np.int64]) -> ScalingDecision:
    """The simulator's decision for an absolute action: every env group's target outright (its count level on
    its option's configuration; an empty target at count 0)."""
    lay = state.layout
    targets: Targets = {}
    for g, key in enumerate(lay.groups):
        n = int(state.levels[a[2 * g]])
        cid = lay.options[g][int(a[2 * g + 1])]
        targets[key] = {cid: n} if n > 0 else {}
    return ScalingDecision(targets)


def count_index(state: NPUState, n: float) -> int:
    """Index of the smallest count level >= n vPods (the largest level when n exceeds them all)."""
    levels = state.level_list  # bisect on the list gives np.searchsorted's index
    return min(bisect.bisect_left(levels, math.ceil(n - 1e-9)), len(levels) - 1)


def demand_action(state: NPUState, rate: NDArray[np.float64], tpr: NDArray[np.float64]) -> NDArray[np.int64]:
    """Best fit per group, count = ceil(sum over the group's buckets of token demand / one vPod's
    tokens/s at that bucket) -- N_pod = ceil(R_peak / T_pod) of §3.4 on the env's fixed groups (``rate``: req/s
    and ``tpr``: tokens per request, per phase and bucket)."""
    sim = state.sim
    assert sim is not None
    lay = state.layout
    a = np.zeros(2 * len(lay.groups), dtype=np.int64)
    # the same float64 products and sums on Python floats (numpy scalars cost more than their arithmetic)
    rates, tprs = rate.tolist(), tpr.tolist()
    memo = lay.memo.demand
    if memo is None or memo[0] is not sim.tps or memo[1] is not sim.jmax:
        # per group: its first allowed option, and per bucket one vPod's tokens/s at its best level
        first = [int(np.flatnonzero(ok)[0]) for ok in lay.opt_ok]
        caps = {}
        for g, opt in enumerate(first):
            cid = lay.options[g][opt]
            caps[cid] = sim.tps[cid, np.arange(sim.tps.shape[1]), sim.jmax[cid]].tolist()
        memo = lay.memo.demand = (sim.tps, sim.jmax, first, caps)
    first, caps = memo[2], memo[3]
    for g, (p, lo, hi) in enumerate(lay.ranges):
        opt = first[g]
        cid = lay.options[g][opt]
        need = 0.0
        rp, tp, cp = rates[p], tprs[p], caps[cid]
        for b in range(lo, hi):
            w = rp[b] * tp[b]
            if w > 0:
                need += w / max(cp[b], 1e-300)
        n = max(math.ceil(need - 1e-9), 1 if g in lay.top_group else 0)
        a[2 * g], a[2 * g + 1] = count_index(state, n), opt
    return a


def warm_action(state: NPUState) -> NDArray[np.int64]:
    """The absolute action sized on the first ``WARM_WINDOW_S`` (10 minutes) of the workload's arrivals: per
    group the peak ``rate_bin_s`` rate and the mean tokens per request of its buckets (:func:`demand_action`)."""
    sim = state.sim
    assert sim is not None
    edges = state.layout.edges
    head = state.workload.requests.window(0.0, WARM_WINDOW_S)
    rate = np.zeros((2, NB))
    tpr = np.zeros((2, NB))
    if len(head):
        isl, osl = head.input_tokens, head.output_tokens
        bin_s = sim.config.rate_bin_s
        nbin = int(WARM_WINDOW_S / bin_s)
        kb = np.minimum((head.arrival_s // bin_s).astype(np.int64), nbin - 1)
        for p, lengths, tok in ((0, isl, isl), (1, isl + osl, osl)):
            bb = np.searchsorted(edges, np.minimum(lengths, edges[-1]))
            cnt = np.zeros((nbin, NB))
            np.add.at(cnt, (kb, bb), 1.0)
            rate[p] = cnt.max(axis=0) / bin_s
            tpr[p] = np.bincount(bb, weights=tok, minlength=NB) / np.maximum(np.bincount(bb, minlength=NB), 1)
    return demand_action(state, rate, tpr)


def heuristic_action(state: NPUState) -> NDArray[np.int64]:
    """The absolute heuristic's action on the last observation (a new array): best fit per group,
    N_pod = ceil(R_peak / T_pod) on the window's peak rate; at t = 0 the warm-start sizing. Needs ``last_ctx``."""
    ctx = state.last_ctx
    assert ctx is not None
    # a function of the last observation alone: computed once per observation (the absolute mode's
    # reference counts and a heuristic driver both ask for it every step)
    memo = state.heuristic_memo
    if memo is not None and memo[0] is ctx:
        return memo[1].copy()
    if ctx.time_s <= 0.0:  # nothing observed yet: the warm-start sizing
        a = warm_action(state)
    else:
        a = demand_action(state, ctx.rate_peak, ctx.tokens_per_req)
    state.heuristic_memo = (ctx, a.copy())
    return a


def action_from_decision(state: NPUState, decision: ScalingDecision) -> NDArray[np.int64]:
    """Project a per-bucket :class:`ScalingDecision` onto the env's groups as an absolute action: each group
    gets the summed vPod count of the decision's groups in its length range (rounded up to a count level) on
    its best fit; unlisted groups keep the agent's current count."""
    lay = state.layout
    G = len(lay.groups)
    a = np.zeros(2 * G, dtype=np.int64)
    add = np.zeros(G)
    listed = np.zeros(G, dtype=bool)
    for (ph, edge), tgt in decision.targets.items():
        p = PHASES.index(ph)
        mine = [g for g in range(G) if lay.group_phase[g] == p]
        b = int(np.searchsorted(lay.edges, edge))
        g = next((x for x in mine if lay.group_bucket[x] >= b), mine[-1])
        add[g] += sum(tgt.values())
        listed[g] = True
    for g in range(G):
        n = add[g] if listed[g] else float(state.count[g])
        if g in lay.top_group:
            n = max(n, 1.0)
        a[2 * g] = count_index(state, n)
        a[2 * g + 1] = int(np.flatnonzero(lay.opt_ok[g])[0])
    return a
