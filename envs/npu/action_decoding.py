"""The env's action helpers (a mixin of :class:`~servegym.envs.npu.env.NPUAutoscaleEnv`): spaces' masks, validation of an action, and its decoding into the
simulator's :class:`~servegym.envs.npu.sim.records.ScalingDecision` in both action modes (absolute targets,
or residual changes around NeuScale's decision), plus the absolute-mode reference actions. A mixin of the
env (module docstring there: "Action modes", "Masks"); the action mode classes that call them are in
:mod:`~servegym.envs.npu.actions`."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from typing import Any

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

from servegym.errors import (
    ActionError,
)


class ActionsMixin:
    """Action methods of :class:`~servegym.envs.npu.env.NPUAutoscaleEnv`."""

    def _static_masks(self) -> NDArray[np.bool_]:
        parts = []
        for i in range(len(self.groups)):
            parts += self.action_type.group_masks(self, i)
        m = np.concatenate(parts)
        m.setflags(write=False)
        return m

    def action_masks(self) -> NDArray[np.bool_]:
        """Valid values per action dimension, concatenated in ``action_space`` order (sb3-contrib's
        MultiDiscrete layout); never all-false per dimension. Residual mode: a group whose reference
        target is 0 vPods (no NeuScale group in its length range) only allows 0 (no change)."""
        return self.action_type.live_masks(self, self._masks.copy())

    def _residual_ladder(self) -> NDArray[np.int64]:
        """Count levels a residual step moves along: ``count_levels`` continued by factors of sqrt(2)
        (rounded up) to ``max_group_vpods`` (a reference count between levels moves to the next level)."""
        lv = [int(x) for x in self.config.count_levels]
        x = float(lv[-1])
        while lv[-1] < self.config.max_group_vpods:
            x *= math.sqrt(2.0)
            lv.append(min(max(math.ceil(x - 1e-9), lv[-1] + 1), int(self.config.max_group_vpods)))
        return np.array(sorted(set(lv)), dtype=np.int64)

    def _allowed(self) -> str:
        """The "allowed: ..." part of an invalid action's error (formatted only when one is raised)."""
        n = self.action_space.nvec
        per = self.action_type.per_group(self, n.size // len(self.groups))
        return f"allowed: {n.size} integers, {per} per group {self.groups}"

    def _check_action(self, action: Any) -> tuple[NDArray[np.int64], bool]:
        a = np.asarray(action)
        n = self.action_space.nvec
        d = n.size // len(self.groups)  # dimensions per group
        kinds = self.action_type.kinds(d)
        if a.shape != n.shape:
            raise ActionError(f"action has shape {a.shape}; {self._allowed()}")
        if a.dtype.kind not in "iu":  # bools, strings and complex numbers are not indices
            if a.dtype.kind != "f" or not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
                raise ActionError(f"action {str(a.tolist())[:200]} is not integer-valued; {self._allowed()}")
        # Range first, in the action's own dtype: a uint64 or float past int64 must not wrap when cast.
        bad = np.flatnonzero((a < 0) | (a >= n))
        if bad.size:
            i = int(bad[0])
            raise ActionError(f"action[{i}] = {a[i].item()} is out of range for group {self.groups[i // d]} "
                              f"({kinds[i % d]}); {self._allowed()}")
        a = a.astype(np.int64)
        offsets = getattr(self, "_mask_offsets", None)
        if offsets is None or offsets[0] is not n:  # where each dimension's values start in the masks
            offsets = self._mask_offsets = (n, np.concatenate([[0], np.cumsum(n)[:-1]]))
        ok = self.action_masks()[offsets[1] + a]
        if np.count_nonzero(ok) == ok.size:  # ok.all() without its Python wrapper (~3 us a step)
            return a, False
        if self.config.strict_masks:
            i = int(np.flatnonzero(~ok)[0])
            what = {"count": "count 0 for the largest group of its phase",
                    "change": "a change for a group where the reference has no vPods",
                    "option": f"option {int(a[i])} (padding, or a version whose quota cannot hold one vPod)"}
            raise ActionError(f"action[{i}] = {int(a[i])} is masked for group {self.groups[i // d]}: "
                              f"{what[kinds[i % d]]}; see action_masks()")
        out = a.copy()
        for i in np.flatnonzero(~ok).tolist():
            g, kind = i // d, kinds[i % d]
            if kind == "count":
                out[i] = int(np.flatnonzero(self.levels > 0)[0])
            elif kind == "change":
                out[i] = 0  # follow the reference
            else:
                out[i] = self.action_type.masked_option(self, g)
        return out, True

    def _capped(self, targets: dict[tuple[str, int], dict[int, int]]) -> dict[tuple[str, int], dict[int, int]]:
        """``targets`` with each group's total vPods at most ``max_group_vpods`` (removed from its last
        configurations first, the fail-overs); the same object when nothing exceeds the cap."""
        cap = int(self.config.max_group_vpods)
        if all(sum(v.values()) <= cap for v in targets.values()):
            return targets
        out: dict[tuple[str, int], dict[int, int]] = {}
        for key, tgt in targets.items():
            new, left = {}, cap
            for cid, n in tgt.items():
                new[cid] = min(int(n), left)
                left -= new[cid]
            out[key] = {c: n for c, n in new.items() if n > 0}
        return out

    def _shift(self, n: int, step: int, floor: int) -> int:
        """``n`` moved ``step`` levels along the residual ladder (not below ``floor``, not above the cap)."""
        lad = self.ladder
        if step > 0:
            up = lad[lad > n]
            return int(up[min(step, up.size) - 1]) if up.size else n
        down = lad[(lad < n) & (lad >= floor)]
        return int(down[max(down.size + step, 0)]) if down.size else n

    def _residual_targets(self, a: NDArray[np.int64], base: Mapping[tuple[str, int], Mapping[int, int]]
                          ) -> dict[tuple[str, int], dict[int, int]]:
        """The reference's targets ``base`` with the agent's changes: per env group, each of the
        reference's groups in its length range moves ``RESIDUAL_STEPS[a]`` levels along the ladder
        (added vPods go to its last configuration, the one being filled; removed ones come from its
        last configurations first); a group of the reference with 0 vPods stays at 0, and the largest
        one of each phase keeps at least 1. With ``residual_options``, option j >= 1 puts the group's
        vPods on ``options[g][j - 1]``. Key order (creation priority under a quota) is the reference's."""
        d = 2 if self.config.residual_options else 1
        top: dict[int, int] = {}
        bucket = self._bucket_index
        for key, tgt in base.items():
            if sum(tgt.values()) > 0:
                p, b = PHASES.index(key[0]), bucket(key[1])
                top[p] = max(top.get(p, -1), b)
        out: dict[tuple[str, int], dict[int, int]] = {}
        for key, tgt in base.items():
            tgt = {int(c): int(n) for c, n in tgt.items() if n > 0}
            n = sum(tgt.values())
            p, b = PHASES.index(key[0]), bucket(key[1])
            g = int(self._env_group[p, b])
            step = RESIDUAL_STEPS[int(a[d * g])]
            if n > 0 and step != 0:
                m = self._shift(n, step, 1 if top.get(p) == b else 0)
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
                tgt = {self.options[g][int(a[d * g + 1]) - 1]: sum(tgt.values())}
            out[key] = tgt
        return self._capped(out)

    def _bucket_index(self, edge: int) -> int:
        """``int(np.searchsorted(self.edges, edge))``, looked up in a table kept per ``edges`` array (the groups'
        edges recur every step)."""
        cache = getattr(self, "_bucket_cache", None)
        if cache is None or cache[0] is not self.edges:
            cache = self._bucket_cache = (self.edges, {})
        hit = cache[1].get(edge)
        if hit is None:
            hit = cache[1][edge] = int(np.searchsorted(self.edges, edge))
        return hit

    def _update_reference(self) -> None:
        """Reference target vPods per env group: NeuScale's decision for the next epoch (residual mode;
        its warm start before the first decision), or the heuristic's counts (absolute mode)."""
        self._ref_counts = self.action_type.reference_counts(self)

    def _decision(self, a: NDArray[np.int64]) -> ScalingDecision:
        targets: dict[tuple[str, int], dict[int, int]] = {}
        for g, key in enumerate(self.groups):
            n = int(self.levels[a[2 * g]])
            cid = self.options[g][int(a[2 * g + 1])]
            targets[key] = {cid: n} if n > 0 else {}
        return ScalingDecision(targets)

    def count_index(self, n: float) -> int:
        """Index of the smallest count level >= n (the largest level when n exceeds them all)."""
        memo = getattr(self, "_levels_memo", None)
        if memo is None or memo[0] is not self.levels:  # the levels as a list (bisect: np.searchsorted's index)
            memo = self._levels_memo = (self.levels, self.levels.tolist())
        return min(bisect.bisect_left(memo[1], math.ceil(n - 1e-9)), len(memo[1]) - 1)

    def _demand_action(self, rate: NDArray[np.float64], tpr: NDArray[np.float64]) -> NDArray[np.int64]:
        """Best fit per group, count = ceil(sum over the group's buckets of token demand / one vPod's
        tokens/s at that bucket) -- N_pod = ceil(R_peak / T_pod) of §3.4 on the env's fixed groups."""
        sim = self.sim
        assert sim is not None
        a = np.zeros(2 * len(self.groups), dtype=np.int64)
        # the same float64 products and sums on Python floats (numpy scalars cost more than their arithmetic)
        rates, tprs = rate.tolist(), tpr.tolist()
        memo = getattr(self, "_demand_memo", None)
        if memo is None or memo[0] is not self._opt_ok or memo[1] is not sim.tps or memo[2] is not sim.jmax:
            # per group: its first allowed option, and per bucket one vPod's tokens/s at its best level
            first = [int(np.flatnonzero(ok)[0]) for ok in self._opt_ok]
            caps = {}
            for g, opt in enumerate(first):
                cid = self.options[g][opt]
                caps[cid] = sim.tps[cid, np.arange(sim.tps.shape[1]), sim.jmax[cid]].tolist()
            memo = self._demand_memo = (self._opt_ok, sim.tps, sim.jmax, first, caps)
        first, caps = memo[3], memo[4]
        for g, (p, lo, hi) in enumerate(self._ranges):
            opt = first[g]
            cid = self.options[g][opt]
            need = 0.0
            rp, tp, cp = rates[p], tprs[p], caps[cid]
            for b in range(lo, hi):
                w = rp[b] * tp[b]
                if w > 0:
                    need += w / max(cp[b], 1e-300)
            n = max(math.ceil(need - 1e-9), 1 if g in self.top_group else 0)
            a[2 * g], a[2 * g + 1] = self.count_index(n), opt
        return a

    def _warm_action(self) -> NDArray[np.int64]:
        sim = self.sim
        assert sim is not None
        head = self.workload.requests.window(0.0, WARM_WINDOW_S)
        rate = np.zeros((2, NB))
        tpr = np.zeros((2, NB))
        if len(head):
            isl, osl = head.input_tokens, head.output_tokens
            bin_s = self.cluster_config.rate_bin_s
            nbin = int(WARM_WINDOW_S / bin_s)
            kb = np.minimum((head.arrival_s // bin_s).astype(np.int64), nbin - 1)
            for p, lengths, tok in ((0, isl, isl), (1, isl + osl, osl)):
                bb = np.searchsorted(self.edges, np.minimum(lengths, self.edges[-1]))
                cnt = np.zeros((nbin, NB))
                np.add.at(cnt, (kb, bb), 1.0)
                rate[p] = cnt.max(axis=0) / bin_s
                tpr[p] = np.bincount(bb, weights=tok, minlength=NB) / np.maximum(np.bincount(bb, minlength=NB), 1)
        return self._demand_action(rate, tpr)

    def heuristic_action(self) -> NDArray[np.int64]:
        """A reference action from the last observation: best fit per group, N_pod = ceil(R_peak / T_pod)
        on the window's peak rate (NeuScale's count rule without its x2 / ÷2 limits or coalescing); at t = 0
        the warm-start sizing on the first 10 minutes of arrivals."""
        if self.last_ctx is None:
            raise ActionError("heuristic_action() needs reset() first")
        self.action_type.require_absolute("heuristic_action", "the all-zero action follows the reference (NeuScale)")
        # a function of the last observation alone: computed once per observation (the absolute mode's
        # reference counts and a heuristic driver both ask for it every step)
        memo = getattr(self, "_heuristic_memo", None)
        if memo is not None and memo[0] is self.last_ctx:
            return memo[1].copy()
        if self.last_ctx.time_s <= 0.0:  # nothing observed yet: the warm-start sizing
            a = self._warm_action()
        else:
            a = self._demand_action(self.last_ctx.rate_peak, self.last_ctx.tokens_per_req)
        self._heuristic_memo = (self.last_ctx, a.copy())
        return a

    def action_from_decision(self, decision: ScalingDecision) -> NDArray[np.int64]:
        """Project a per-bucket :class:`ScalingDecision` (e.g. from ``NeuScalePolicy.decide``) onto the
        env's groups: each group gets the summed vPod count of the decision's groups in its length range
        (rounded up to a count level) on its best fit; unlisted groups keep their current target.
        Absolute mode only (in residual mode the all-zero action is NeuScale's own decision)."""
        self.action_type.require_absolute("action_from_decision", "the all-zero action follows NeuScale's decision")
        a = np.zeros(2 * len(self.groups), dtype=np.int64)
        add = np.zeros(len(self.groups))
        listed = np.zeros(len(self.groups), dtype=bool)
        for (ph, edge), tgt in decision.targets.items():
            p = PHASES.index(ph)
            mine = [g for g in range(len(self.groups)) if self.group_phase[g] == p]
            b = int(np.searchsorted(self.edges, edge))
            g = next((x for x in mine if self.group_bucket[x] >= b), mine[-1])
            add[g] += sum(tgt.values())
            listed[g] = True
        for g in range(len(self.groups)):
            n = add[g] if listed[g] else float(self._count[g])
            if g in self.top_group:
                n = max(n, 1.0)
            a[2 * g] = self.count_index(n)
            a[2 * g + 1] = int(np.flatnonzero(self._opt_ok[g])[0])
        return a
