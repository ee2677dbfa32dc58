"""Routing of the cluster simulator (npu paper §3.4, §5.1): the length-to-group map, admission of new
requests (prefill by input length; decode by predicted total length with ``osl_accuracy``) and migration of
mispredicted decode jobs. A mixin of :class:`~servegym.envs.npu.sim.cluster.NPUCluster`, whose state it reads."""

from __future__ import annotations

import numpy as np
from servegym.envs.npu.sim.config import LEVELS, NB


class RoutingMixin:
    """Routing and admission methods of :class:`~servegym.envs.npu.sim.cluster.NPUCluster`."""

    def _active_groups(self, phase: int, ready: set[int] | None = None) -> np.ndarray:
        """Bucket indices (ascending) of the routable groups of a phase: positive target and a ready vPod
        (a new group joins the length-to-group map once it can serve); when no group of the phase is
        ready, every group with a positive target (requests then wait for the vPods to boot). ``ready``: the
        groups with a ready vPod now, if the caller has them (``set(self._ready_groups().tolist())``)."""
        tgt = [g for g, t in self.targets.items() if g // NB == phase and sum(t.values()) > 0]
        if ready is None:
            ready = set(self._ready_groups().tolist())
        act = [g for g in tgt if g in ready] or tgt
        return np.array(sorted(g - phase * NB for g in act), dtype=np.int64)

    def _route(self, phase: int, bk: np.ndarray, act: np.ndarray | None = None) -> np.ndarray:
        """Group (phase x 48 + bucket) of requests of buckets ``bk``: the smallest routable group at or above
        theirs, else the largest (``act``: the phase's ``_active_groups``, if the caller has them)."""
        if act is None:
            act = self._active_groups(phase)
        if act.size == 0:
            return phase * NB + bk
        i = np.minimum(np.searchsorted(act, bk, side="left"), act.size - 1)
        return phase * NB + act[i]

    def _reroute_orphans(self) -> None:
        """Move queued work out of groups that are no longer active to their route target."""
        for ph in (0, 1):
            act = self._active_groups(ph)
            if act.size == 0:
                continue
            if ph == 0 and self.p_g.size:
                orphan = ~np.isin(self.p_g - 0, act)
                if orphan.any():
                    self._move_prefill(np.flatnonzero(np.isin(self.p_g, np.unique(self.p_g[orphan]))))
            if ph == 1 and self.d_g.size:
                ready_groups = self._ready_groups()
                orphan = ~np.isin(self.d_g - NB, act) & ~(self.d_active & np.isin(self.d_g, ready_groups))
                if orphan.any():
                    idx = np.flatnonzero(orphan)
                    was = idx[self.d_active[idx]]
                    self.dec_time[self.d_req[was]] += self.now - self.d_arr[was]
                    self.d_arr[was] = self.now
                    self.d_g[idx] = self._route(1, self.d_bk[idx])
                    self.d_active[idx] = False

    def _ready_groups(self) -> np.ndarray:
        ok = (self.v_gone == np.inf) & (self.v_ready <= self.now)
        return np.unique(self.v_group[ok])

    def _move_prefill(self, idx: np.ndarray) -> None:
        """Move every unstarted prefill job of orphaned groups (``idx`` covers whole groups) to its route."""
        old = np.unique(self.p_g[idx])
        # residual tokens of a job already started there are dropped from the fluid: that job's finish
        # time is already scheduled
        self.A[old] = self.S[old]
        bk = self.bk_p[self.p_req[idx]]
        newg = self._route(0, bk)
        order = np.argsort(self.p_arr[idx], kind="stable")
        self.p_tok[idx] = self._prefill_work(newg, self.p_req[idx])
        for j, g in zip(idx[order].tolist(), newg[order].tolist(), strict=True):
            self.p_g[j] = g
            self.p_before[j] = self.A[g]
            self.A[g] += self.p_tok[j]

    def _prefill_work(self, g: np.ndarray, r: np.ndarray) -> np.ndarray:
        """Work of prefill jobs in seconds of one vPod of their group's dominant configuration at its best
        batch level, at each job's own length bucket (so a long-context group serving short prompts is
        not charged its long-context throughput)."""
        cid = self._dom_targets()[g]
        none = cid < 0
        if none.any():
            cid[none] = [self.cand[("prefill", int(self.edges[x]))][0] for x in g[none].tolist()]
        bk = self.bk_p[r]
        return self.isl[r] / np.maximum(self.tps[cid, bk, -1], 1e-300)

    def _admit_new(self, ids: np.ndarray) -> None:
        acc = self.config.osl_accuracy
        # prefill job: exact route by input length
        gp = self._route(0, self.bk_p[ids])
        tok = self._prefill_work(gp, ids)
        order = np.argsort(gp, kind="stable")  # ids are in arrival order, keep it within each group
        gs = gp[order]
        cs = np.cumsum(tok[order])
        start = np.searchsorted(gs, gs, side="left")
        base = np.concatenate([[0.0], cs])[start]
        before_sorted = self.A[gs] + (cs - tok[order]) - base
        before = np.empty(ids.size)
        before[order] = before_sorted
        np.add.at(self.A, gp, tok)
        self.p_req = np.concatenate([self.p_req, ids])
        self.p_g = np.concatenate([self.p_g, gp])
        self.p_before = np.concatenate([self.p_before, before])
        self.p_tok = np.concatenate([self.p_tok, tok])
        self.p_arr = np.concatenate([self.p_arr, self.arr[ids]])
        # decode: route by predicted total length
        act = self._active_groups(1)
        isl, osl = self.isl[ids], self.osl[ids]
        tot = isl + osl
        bk_true = self.bk_d[ids]
        g_true = self._route(1, bk_true)
        if act.size:
            edges_act = self.edges[act]
            lo = np.minimum(np.searchsorted(edges_act, isl + 1, side="left"), act.size - 1)
            pick = lo + np.floor(self.route_rng.random(ids.size) * (act.size - lo)).astype(np.int64)
            g_rand = NB + act[np.minimum(pick, act.size - 1)]
            right = self.route_rng.random(ids.size) < acc
            g1 = np.where(right, g_true, g_rand)
        else:
            g1 = g_true
            right = np.ones(ids.size, dtype=bool)
        edge1 = self.edges[g1 - NB]
        short = (edge1 < tot) & (g1 != g_true)
        # migration point: next bucket boundary after the input if the re-estimate is right, else 2x edge
        reest = self.route_rng.random(ids.size) < acc
        nxt = self.edges[np.minimum(np.searchsorted(self.edges, isl, side="right"), NB - 1)]
        mig_at = np.where(reest & (tot > 2 * edge1), np.minimum(nxt, 2 * edge1), 2 * edge1)
        migrate = short & (tot > mig_at)
        seg1 = np.where(migrate, np.clip(mig_at - isl, 1, np.maximum(osl - 1, 1)), osl).astype(float)
        seg1 = np.minimum(seg1, osl)
        migrate &= seg1 < osl
        self.jobs_left[ids] = 2 + migrate.astype(np.int8)
        self.n_migrations += int(migrate.sum())
        bk1 = np.searchsorted(self.edges, np.minimum(isl + seg1, self.edges[-1]))
        self._add_decode(ids, g1, seg1, self.arr[ids], bk1)
        if migrate.any():
            mi = np.flatnonzero(migrate)
            r = ids[mi]
            cid = self._dom_targets()[g1[mi]]
            nominal = np.where(cid >= 0, self.lat[np.maximum(cid, 0), bk1[mi], LEVELS.size - 1], 0.0)
            kv = (isl[mi] + seg1[mi]) * self.kv_bytes_tok
            xfer = np.where(cid >= 0, kv / self.cfg_dcn_bps[np.maximum(cid, 0)], 0.0)
            self.m_req = np.concatenate([self.m_req, r])
            self.m_g = np.concatenate([self.m_g, g_true[mi]])
            self.m_tok = np.concatenate([self.m_tok, (osl[mi] - seg1[mi]).astype(float)])
            self.m_t = np.concatenate([self.m_t, self.arr[r] + seg1[mi] * nominal + xfer])
            self.m_bk = np.concatenate([self.m_bk, bk_true[mi]])
            self.m_delay = np.concatenate([self.m_delay, xfer])

    def _dom_targets(self) -> np.ndarray:
        """Per group, the configuration with the largest target (-1 without a target)."""
        out = np.full(2 * NB, -1, dtype=np.int64)
        for g, t in self.targets.items():
            if t:
                out[g] = max(t, key=lambda c: t[c])
        return out

    def _add_decode(self, r: np.ndarray, g: np.ndarray, tok: np.ndarray, t: np.ndarray, bk: np.ndarray) -> None:
        self.d_req = np.concatenate([self.d_req, r])
        self.d_g = np.concatenate([self.d_g, g])
        self.d_left = np.concatenate([self.d_left, tok.astype(float)])
        self.d_arr = np.concatenate([self.d_arr, t])
        self.d_bk = np.concatenate([self.d_bk, bk])
        self.d_active = np.concatenate([self.d_active, np.zeros(r.size, dtype=bool)])
