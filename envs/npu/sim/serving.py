"""Serving dynamics of the cluster simulator (npu paper §4): one ``check_s`` chunk of 5-s sub-steps -- the
prefill token fluid per group, per-job decode, energy and cost of every vPod, the rate monitor. A mixin of
:class:`~servegym.envs.npu.sim.cluster.NPUCluster`, whose state it reads and advances."""

from __future__ import annotations

import numpy as np
from servegym.envs.npu.sim.config import LEVELS, NB
from servegym.envs.npu.sim.records import EpochMetrics


def _group_sum(g: np.ndarray, x: np.ndarray, n_groups: int) -> np.ndarray:
    """Sum the rows of ``x`` (shape (V, ...)) by group ``g`` (V ints in [0, n_groups)): (n_groups, ...)."""
    if g.size == 0:  # no vPods at all (e.g. a policy that provisioned nothing for an empty first window)
        return np.zeros((n_groups, *x.shape[1:]))
    flat = x.reshape(g.size, -1)
    width = flat.shape[1]
    idx = (g[:, None] * width + np.arange(width)[None, :]).ravel()
    out = np.bincount(idx, weights=flat.ravel(), minlength=n_groups * width)
    return out.reshape((n_groups, *x.shape[1:]))



class ServingMixin:
    """Sub-step dynamics of :class:`~servegym.envs.npu.sim.cluster.NPUCluster`."""

    def _chunk(self, K: int, m: EpochMetrics) -> None:
        c = self.config
        dt = c.substep_s
        t0 = self.now
        t1 = t0 + K * dt
        G = 2 * NB
        tk = t0 + dt * np.arange(K)
        # ---- new arrivals
        i0 = self.next_req
        i1 = int(np.searchsorted(self.arr, t1, side="left"))
        self.next_req = i1
        ids = np.arange(i0, i1)
        self._monitor(ids, t0, t1)
        if ids.size:
            self._admit_new(ids)
        # migrations in transit whose time has come
        if self.m_t.size:
            due = self.m_t < t1
            if due.any():
                self._add_decode(self.m_req[due], self.m_g[due], self.m_tok[due], self.m_t[due], self.m_bk[due])
                self.dec_time[self.m_req[due]] += self.m_delay[due]
                keep = ~due
                self.m_req, self.m_g, self.m_tok = self.m_req[keep], self.m_g[keep], self.m_tok[keep]
                self.m_t, self.m_bk, self.m_delay = self.m_t[keep], self.m_bk[keep], self.m_delay[keep]
        # ---- capacity of each group per sub-step and batch level
        live = self.v_gone > t0
        vg, vc = self.v_group[live], self.v_cfg[live]
        vr, vgone = self.v_ready[live], self.v_gone[live]
        serving = vgone == np.inf
        frac = np.clip((tk[None, :] + dt - vr[:, None]) / dt, 0.0, 1.0) * serving[:, None]  # (V, K)
        heldfrac = np.clip((np.minimum(vgone, t1)[:, None] - tk[None, :]) / dt, 0.0, 1.0)  # chips held
        vb = vg % NB
        # prefill capacity in vPod-equivalents: each level's throughput relative to the vPod's best level
        # (jobs carry their work in seconds of the group's dominant configuration at its best level)
        tps_v = self.tps[vc, vb] / np.maximum(self.tps[vc, vb, -1:], 1e-300)  # (V, J)
        pow_v = self.pow[vc, vb]
        J = LEVELS.size
        # per-group sums by bincount, not one-hot matrix products: tiny BLAS calls oversubscribe a shared
        # box with a multi-threaded BLAS (4x slower), and bincount is as fast single-threaded
        cap = _group_sum(vg, frac[:, :, None] * tps_v[:, None, :], G)  # (G, K, J)
        pbusy = _group_sum(vg, frac[:, :, None] * pow_v[:, None, :], G)
        stat_w = self.cfg_static_w[vc]
        p_static_ready = _group_sum(vg, frac * stat_w[:, None], G)  # (G, K)
        p_static_all = _group_sum(vg, heldfrac * stat_w[:, None], G)
        n_ready = _group_sum(vg, frac, G)
        slots = _group_sum(vg, frac * self.cfg_maxb[vc][:, None], G)
        usd_g = _group_sum(vg, (heldfrac * self.cfg_usd_s[vc][:, None]).sum(axis=1), G) * dt
        acc = self.group_acc
        acc["usd"] += usd_g
        acc["chip_s"] += _group_sum(vg, heldfrac.sum(axis=1) * self.cfg_chips[vc], G) * dt
        acc["static_j"] += _group_sum(vg, heldfrac.sum(axis=1) * self.cfg_static_w[vc], G) * dt
        usd_ready = _group_sum(vg, frac * self.cfg_usd_s[vc][:, None], G)  # (G, K) USD/s of ready vPods
        # earliest time each group has a serving vPod ready (no job starts before it)
        avail = np.full(G, np.inf)
        if vg.size:
            np.minimum.at(avail, vg[serving], np.maximum(vr[serving], t0))
        # dominant config per group (most ready vPods) for latency lookups
        dom = np.full(G, -1, dtype=np.int64)
        if vg.size:
            score = frac.sum(axis=1) + 1e-3 * serving
            order = np.lexsort((-score, vg))
            first = np.ones(order.size, dtype=bool)
            first[1:] = vg[order][1:] != vg[order][:-1]
            dom[vg[order][first]] = vc[order][first]
        # ---- prefill: token fluid per group
        energy = np.zeros(G)
        tokens = np.zeros(2)
        arr_k = np.zeros((G, K))
        new = self.p_arr >= t0
        if new.any():
            kk = np.minimum(((self.p_arr[new] - t0) // dt).astype(np.int64), K - 1)
            np.add.at(arr_k, (self.p_g[new], kk), self.p_tok[new])
        backlog = self.A - self.S - arr_k.sum(axis=1)
        backlog = np.maximum(backlog, 0.0)
        S_b = np.zeros((G, K + 1))
        S_b[:, 0] = self.S
        jop = np.zeros((G, K), dtype=np.int64)
        busy_frac = np.zeros((G, K))
        for k in range(K):
            d = backlog + arr_k[:, k]
            need = d / dt
            ok = cap[:, k, :] >= need[:, None] - 1e-9
            j = np.where(ok.any(axis=1), np.argmax(ok, axis=1), J - 1)
            cj = cap[np.arange(G), k, j]
            served = np.minimum(d, cj * dt)
            backlog = d - served
            S_b[:, k + 1] = S_b[:, k] + served
            u = np.where(cj > 0, served / np.maximum(cj * dt, 1e-300), 0.0)
            jop[:, k] = j
            busy_frac[:, k] = u
        self.S = S_b[:, K].copy()
        # energy of prefill groups from the sub-step utilization
        gi = np.arange(G)[:, None]
        ki = np.arange(K)[None, :]
        pb = pbusy[gi, ki, jop]
        energy_pre = dt * (busy_frac * pb + (1.0 - busy_frac) * p_static_ready + (p_static_all - p_static_ready))
        energy[:NB] = energy_pre[:NB].sum(axis=1)
        # request-attributed ("busy") energy and cost: the steps that served jobs only
        busy_e = np.zeros(2)
        busy_u = np.zeros(2)
        busy_e[0] = float((dt * busy_frac * pb)[:NB].sum())
        acc["energy_busy_j"][:NB] += (dt * busy_frac * pb)[:NB].sum(axis=1)
        busy_u[0] = float((dt * busy_frac * usd_ready)[:NB].sum())
        self._busy = (busy_e, busy_u)
        # resolve prefill starts: FCFS per group (order of queue position), Lindley recursion on the group's
        # aggregated server, vectorized as start_n = sum_{i<n} s_i + max(free_at, max_{k<=n} (a_k - sum_{i<k} s_i))
        if self.p_g.size:
            self._start_prefill(t0, t1, K, dt, cap, jop, dom, tokens, avail)
        # ---- decode: per job
        dec_tokens = 0.0
        for k in range(K):
            t = tk[k]
            dec_tokens += self._decode_substep(t, dt, n_ready[:, k], slots[:, k], dom, p_static_ready[:, k], energy,
                                               usd_ready[:, k])
        energy[NB:] += dt * (p_static_all[NB:] - p_static_ready[NB:]).sum(axis=1)
        tokens[1] = dec_tokens
        # ---- completions of prefill jobs in service
        if self.c_req.size:
            fin = self.c_done <= t1
            if fin.any():
                self._job_done(self.c_req[fin], self.c_done[fin])
                self.c_req, self.c_done = self.c_req[~fin], self.c_done[~fin]
        # ---- bookkeeping
        self.util = np.where(n_ready.sum(axis=1) > 0, busy_frac.mean(axis=1), 0.0)
        m.energy_j += np.array([energy[:NB].sum(), energy[NB:].sum()])
        self.group_acc["energy_j"] += energy
        m.usd += np.array([usd_g[:NB].sum(), usd_g[NB:].sum()])
        m.energy_busy_j += busy_e
        m.usd_busy += busy_u
        m.tokens += tokens
        self.now = t1
        self._drop_gone(t1)
        self.peak_queue = np.maximum(self.peak_queue, self._queue())
        self._slo_tally(m, t0, t1)
        self._reconcile()

    def _drop_gone(self, t: float) -> None:
        """Drop the vPods whose deletion has ended by ``t``."""
        keepv = self.v_gone > t
        if not keepv.all():
            self.v_group, self.v_cfg = self.v_group[keepv], self.v_cfg[keepv]
            self.v_ready, self.v_gone = self.v_ready[keepv], self.v_gone[keepv]
            self.fleet_version += 1

    def _start_prefill(self, t0: float, t1: float, K: int, dt: float, cap: np.ndarray, jop: np.ndarray,
                       dom: np.ndarray, tokens: np.ndarray, avail: np.ndarray) -> None:
        G = 2 * NB
        order = np.lexsort((self.p_before, self.p_g))
        g = self.p_g[order]
        a = np.maximum(self.p_arr[order], np.minimum(avail[g], t1))
        k = np.minimum(((a - t0) // dt).astype(np.int64), K - 1)
        capk = cap[np.arange(G)[:, None], np.arange(K)[None, :], jop]  # (G, K) vPod-equivalents
        # next sub-step (>= k) with capacity, per group
        has = capk > 0
        nxt = np.where(has, np.arange(K)[None, :], K)
        nxt = np.minimum.accumulate(nxt[:, ::-1], axis=1)[:, ::-1]
        kk = nxt[g, k]
        blocked = kk >= K
        kk = np.minimum(kk, K - 1)
        a = np.where(kk > k, np.maximum(a, t0 + kk * dt), a)
        c = capk[g, kk]
        s_i = np.where(blocked, 0.0, self.p_tok[order] / np.maximum(c, 1e-300))
        first = np.ones(g.size, dtype=bool)
        first[1:] = g[1:] != g[:-1]
        seg = np.cumsum(first) - 1
        cs_all = np.cumsum(s_i)
        seg_start = np.flatnonzero(first)
        cs = cs_all - s_i - (cs_all - s_i)[seg_start][seg]  # exclusive, within group
        span = 1e10
        v = a - cs + seg * span
        best = np.maximum.accumulate(v) - seg * span
        start = cs + np.maximum(best, self.free_at[g])
        blk = np.cumsum(blocked) - (np.cumsum(blocked) - blocked)[seg_start][seg] > 0
        ok = ~blk & (start < t1)
        if not ok.any():
            return
        idx = order[ok]
        st = start[ok]
        np.maximum.at(self.free_at, g[ok], st + s_i[ok])
        r = self.p_req[idx]
        gg = self.p_g[idx]
        ks = np.minimum(((st - t0) // dt).astype(np.int64), K - 1)
        lat = self.lat[np.maximum(dom[gg], 0), self.bk_p[r], jop[gg, ks]]
        self.ttft[r] = st + lat - self.arr[r]
        self.started[r] = True
        tokens[0] += float(self.isl[r].sum())
        acc = self.group_acc
        acc["tokens"] += np.bincount(gg, weights=self.isl[r], minlength=G)
        # the batch a prefill job ran at: the operating level of its group when it started, in requests
        acc["batch_tok"] += np.bincount(gg, weights=self.isl[r] * self.cfg_levels[np.maximum(dom[gg], 0), jop[gg, ks]],
                                        minlength=G)
        self.c_req = np.concatenate([self.c_req, r])
        self.c_done = np.concatenate([self.c_done, st + lat])
        keep = np.ones(self.p_g.size, dtype=bool)
        keep[idx] = False
        self.p_req, self.p_g, self.p_before = self.p_req[keep], self.p_g[keep], self.p_before[keep]
        self.p_tok, self.p_arr = self.p_tok[keep], self.p_arr[keep]

    def _queue(self) -> np.ndarray:
        """Waiting jobs per group: decode jobs without a batch slot; prefill jobs that have waited more than
        one sub-step (the fluid serves a sub-step's arrivals together, so younger ones are not a queue)."""
        G = 2 * NB
        q = np.zeros(G)
        if self.p_g.size:
            q += np.bincount(self.p_g[self.p_arr < self.now - self.config.substep_s], minlength=G)
        if self.d_g.size:
            q += np.bincount(self.d_g[~self.d_active], minlength=G)
        return q

    def _decode_substep(self, t: float, dt: float, n_ready: np.ndarray, slots: np.ndarray,
                        dom: np.ndarray, p_static_ready: np.ndarray, energy: np.ndarray,
                        usd_ready: np.ndarray) -> float:
        G = 2 * NB
        if self.d_g.size == 0:
            energy[NB:] += dt * p_static_ready[NB:]
            return 0.0
        # admit waiting jobs FCFS into free batch slots. A slot is dt slot-seconds per sub-step: short jobs
        # reuse a slot within the sub-step (a job needing x s of it starts after the slot-seconds queued
        # ahead of it, spread over the group's slots)
        present = self.d_arr < t + dt
        act = self.d_active
        wait = np.flatnonzero(~act & present)
        if wait.size:
            cap_slots = np.floor(slots + 1e-9)
            ia0 = np.flatnonzero(act)
            used = np.zeros(G)
            if ia0.size:
                c0 = np.maximum(dom[self.d_g[ia0]], 0)
                need0 = np.minimum(dt, self.d_left[ia0] * self.lat[c0, self.d_bk[ia0], 0])
                used = np.bincount(self.d_g[ia0], weights=need0, minlength=G)
            o = wait[np.lexsort((self.d_arr[wait], self.d_g[wait]))]
            gw = self.d_g[o]
            cw = np.maximum(dom[gw], 0)
            need = np.where(dom[gw] >= 0, np.minimum(dt, self.d_left[o] * self.lat[cw, self.d_bk[o], 0]), dt)
            startpos = np.searchsorted(gw, gw, side="left")
            csum = np.cumsum(need)
            before = csum - need - (csum - need)[startpos]
            free_ss = cap_slots * dt - used
            ok = (cap_slots[gw] > 0) & (before + need <= free_ss[gw] + 1e-9)
            adm = o[ok]
            if adm.size:
                self.d_active[adm] = True
                self.started[self.d_req[adm]] = True
                lag = np.maximum(0.0, before[ok] + used[gw[ok]] - (cap_slots[gw[ok]] - 1) * dt) / cap_slots[gw[ok]]
                st = np.maximum(self.d_arr[adm], np.minimum(t + lag, t + dt))
                self.dec_time[self.d_req[adm]] += st - self.d_arr[adm]  # queueing wait
                self.d_arr[adm] = st  # from now on d_arr is the service start
        act = self.d_active & (self.d_arr < t + dt)
        ia = np.flatnonzero(act)
        nr = np.maximum(n_ready, 1e-12)

        def batch(n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """Jobs in service per group -> batch per busy vPod and its level (vPods with at least one job run at
            the jobs / busy vPods; jobs beyond the slots wait)."""
            n = np.minimum(n, np.floor(slots + 1e-9))
            busy = np.minimum(1.0, np.where(n_ready > 0, n / nr, 0.0))
            b = np.where(busy > 0, n / np.maximum(busy * nr, 1e-12), 0.0)
            return b, np.minimum(np.searchsorted(LEVELS, np.ceil(np.maximum(b, 1.0) - 1e-9)), LEVELS.size - 1)

        if ia.size == 0:
            energy[NB:] += dt * p_static_ready[NB:]
            return 0.0
        g = self.d_g[ia]
        cid = dom[g]
        okc = (cid >= 0) & (n_ready[g] > 0)
        span = (t + dt) - np.maximum(self.d_arr[ia], t)
        left = self.d_left[ia]
        # concurrency: the jobs in service averaged over the sub-step (Little's law: a job in service for part of it
        # counts for that part), found from the upper bound (every job present for the whole sub-step) down: a
        # lower level runs the jobs no slower, so the levels only fall
        b_busy, lvl_busy = batch(np.bincount(g, minlength=G).astype(float))
        for _ in range(LEVELS.size):
            tpot = np.where(okc, self.lat[np.maximum(cid, 0), self.d_bk[ia], lvl_busy[g]], np.inf)
            made = np.minimum(np.where(okc, span / tpot, 0.0), left)
            b_busy, lvl = batch(np.bincount(g, weights=np.where(okc, made * tpot, 0.0), minlength=G) / dt)
            if (lvl >= lvl_busy).all():
                break
            lvl_busy = np.minimum(lvl, lvl_busy)
        fin = np.where(okc, span / tpot, 0.0) >= left
        self.d_left[ia] = left - made
        c0, lv = np.maximum(cid, 0), lvl_busy[g]
        # pool energy: the tokens' dynamic energy at their level and the ready vPods' idle floor for the whole
        # sub-step (the floor is not charged at the level's period, which is shorter when the batch sits below it);
        # request-attributed ("busy") energy: the tokens' steps at their level, floor included
        tps_t = np.maximum(self.tps[c0, self.d_bk[ia], lv], 1e-300)
        j_per_tok = self.pow[c0, self.d_bk[ia], lv] / tps_t
        energy[NB:] += np.bincount(g - NB, weights=made * (self.pow_dyn[c0, self.d_bk[ia], lv] / tps_t), minlength=NB)
        energy[NB:] += dt * p_static_ready[NB:]
        # busy share of the ready vPods' time: busy vPod-time is the jobs' decode time, divided by the batch they
        # share (busy jobs per busy vPod)
        busy_t = np.bincount(g, weights=np.where(okc, made, 0.0) * np.where(okc, tpot, 0.0), minlength=G)
        share = np.where(n_ready > 0, np.minimum(1.0, busy_t / np.maximum(b_busy, 1.0) / (dt * nr)), 0.0)
        self._busy[0][1] += float((made * j_per_tok).sum())
        acc = self.group_acc
        acc["tokens"] += np.bincount(g, weights=made, minlength=G)
        acc["energy_busy_j"] += np.bincount(g, weights=made * j_per_tok, minlength=G)
        acc["batch_tok"] += np.bincount(g, weights=made * b_busy[g], minlength=G)
        self._busy[1][1] += float((dt * share * usd_ready)[NB:].sum())
        if fin.any():
            fi = ia[fin]
            tfin = np.maximum(self.d_arr[fi], t) + left[fin] * tpot[fin]
            r = self.d_req[fi]
            self.dec_time[r] += tfin - self.d_arr[fi]
            self._job_done(r, tfin)
            keep = np.ones(self.d_g.size, dtype=bool)
            keep[fi] = False
            self.d_req, self.d_g, self.d_left = self.d_req[keep], self.d_g[keep], self.d_left[keep]
            self.d_arr, self.d_bk, self.d_active = self.d_arr[keep], self.d_bk[keep], self.d_active[keep]
        return float(made.sum())

    def _job_done(self, r: np.ndarray, t: np.ndarray) -> None:
        np.subtract.at(self.jobs_left, r, 1)
        cur = self.done_s[r]
        self.done_s[r] = np.where(np.isnan(cur), t, np.maximum(cur, t))
        # a request appears at most once per call in practice; recount to be safe
        fin = np.unique(r[self.jobs_left[r] == 0])
        self.n_finished += int(fin.size)
        self._fresh_finished = np.concatenate([getattr(self, "_fresh_finished", np.zeros(0, dtype=np.int64)), fin])

    def _monitor(self, ids: np.ndarray, t0: float, t1: float) -> None:
        c = self.config
        nbin = round((t1 - t0) / c.rate_bin_s)
        for b in range(nbin):
            lo, hi = t0 + b * c.rate_bin_s, t0 + (b + 1) * c.rate_bin_s
            i = self.bin_index % self.nbins_w
            self.bin_counts[i] = 0.0
            self.bin_tokens[i] = 0.0
            if ids.size:
                sel = ids[(self.arr[ids] >= lo) & (self.arr[ids] < hi)]
                if sel.size:
                    self.bin_counts[i, 0] = np.bincount(self.bk_p[sel], minlength=NB)
                    self.bin_counts[i, 1] = np.bincount(self.bk_d[sel], minlength=NB)
                    self.bin_tokens[i, 0] = np.bincount(self.bk_p[sel], weights=self.isl[sel], minlength=NB)
                    self.bin_tokens[i, 1] = np.bincount(self.bk_d[sel], weights=self.osl[sel], minlength=NB)
            self.bin_index += 1
