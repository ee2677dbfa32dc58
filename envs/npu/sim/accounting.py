"""Accounting of the cluster simulator (npu paper §2.4, §5.1): SLO tallies, request counters, the energy /
cost / chip decomposition per group and the run's summary (whole-pool and request-attributed figures). A mixin
of :class:`~servegym.envs.npu.sim.cluster.NPUCluster`, whose state it reads."""

from __future__ import annotations

import numpy as np
from servegym.envs.npu.sim.config import NB
from servegym.envs.npu.sim.records import EpochMetrics
from servegym.envs.npu.sim.roofline import PHASES


class AccountingMixin:
    """Accounting methods of :class:`~servegym.envs.npu.sim.cluster.NPUCluster`."""

    def _slo_tally(self, m: EpochMetrics, t0: float, t1: float) -> None:
        fin = self._fresh_finished
        self._fresh_finished = np.zeros(0, dtype=np.int64)
        if fin.size == 0:
            return
        ok_p, ok_d = self._slo_ok(fin)
        m.finished += int(fin.size)
        m.slo_met += np.array([ok_p.sum(), ok_d.sum(), (ok_p & ok_d).sum()], dtype=float)
        m.slo_total += float(fin.size)
        self.recent_slo = np.array([ok_p.mean(), ok_d.mean()])

    def _slo_ok(self, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ok_p = self.ttft[r] <= self.slo_p[self.bk_p[r]] + 1e-12
        ok_d = self.dec_time[r] / self.osl[r] <= self.slo_d[self.bk_d[r]] + 1e-12
        return ok_p, ok_d

    def open_requests(self) -> np.ndarray:
        """Ids of arrived requests not yet finished (some job queued, in service or migrating)."""
        return np.unique(np.concatenate([self.p_req, self.c_req, self.d_req, self.m_req]))

    def late_count(self) -> int:
        """Open requests already past their SLO (TTFT before the first token, or TPOT x output tokens)."""
        ids = self.open_requests()
        if ids.size == 0:
            return 0
        age = self.now - self.arr[ids]
        lp = np.isnan(self.ttft[ids]) & (age > self.slo_p[self.bk_p[ids]])
        ld = age > self.slo_d[self.bk_d[ids]] * self.osl[ids]
        return int((lp | ld).sum())

    def decode_jobs(self) -> np.ndarray:
        """Decode jobs in service per decode group (48)."""
        return np.bincount(self.d_g[self.d_active] - NB, minlength=NB).astype(float) if self.d_g.size else np.zeros(NB)

    def counters(self) -> dict[str, int]:
        """arrived, finished, queued (no job started yet) and in_flight requests.

        Counted from separate sources (the finish counter, the job containers, the arrival pointer), so
        ``arrived == finished + queued + in_flight`` is a real check of conservation.
        """
        open_ids = self.open_requests()
        queued = int(np.count_nonzero(~self.started[open_ids]))
        return {"arrived": int(self.next_req), "finished": int(self.n_finished), "queued": queued,
                "in_flight": int(open_ids.size - queued)}

    def decomposition(self) -> dict:
        """Where the energy, cost and chips went, per group and over time (the reproduction's decomposition).

        ``groups``: one row per (phase, group bucket edge) that served tokens or held chips: tokens, realized
        batch (token-weighted mean batch its steps ran at, in requests), chip-seconds per token, J/token
        (whole pool: idle and booting vPods included; ``_busy``: the serving steps only), USD/token, and the
        configurations it held. ``series``: per decision interval (``check_s``) and phase, vPods alive and
        groups with at least one vPod. ``totals``: the same per phase.
        """
        acc = self.group_acc
        rows = []
        held_cfg: dict[int, set[int]] = {}
        for g, t in self.targets.items():
            held_cfg.setdefault(g, set()).update(t)
        for g in np.flatnonzero((acc["tokens"] > 0) | (acc["chip_s"] > 0)).tolist():
            tok = float(acc["tokens"][g])

            def per(x: float, tok: float = tok) -> float:
                return x / tok if tok > 0 else float("inf")

            rows.append({"phase": PHASES[g // NB], "edge": int(self.edges[g % NB]), "tokens": tok,
                         "batch": per(float(acc["batch_tok"][g])) if tok > 0 else 0.0,
                         "chip_s_per_token": per(float(acc["chip_s"][g])),
                         "j_per_token": per(float(acc["energy_j"][g])),
                         "j_per_token_busy": per(float(acc["energy_busy_j"][g])),
                         "usd_per_token": per(float(acc["usd"][g])), "chip_s": float(acc["chip_s"][g]),
                         "energy_j": float(acc["energy_j"][g]), "usd": float(acc["usd"][g]),
                         "configs": sorted(self.configs[c].label for c in held_cfg.get(g, ()))})
        alive = np.array([h.alive for h in self.history]) if self.history else np.zeros((0, 2, NB))
        series = {"t_s": [h.t1_s for h in self.history],
                  "vpods": alive.sum(axis=2).tolist(), "groups": (alive > 0).sum(axis=2).tolist()}
        totals = {}
        for p, ph in enumerate(PHASES):
            sl = slice(p * NB, (p + 1) * NB)
            tok = float(acc["tokens"][sl].sum())
            totals[ph] = {"tokens": tok,
                          "batch": float(acc["batch_tok"][sl].sum()) / tok if tok else 0.0,
                          "chip_s_per_token": float(acc["chip_s"][sl].sum()) / tok if tok else float("inf"),
                          "j_per_token": float(acc["energy_j"][sl].sum()) / tok if tok else float("inf"),
                          "j_per_token_busy": float(acc["energy_busy_j"][sl].sum()) / tok if tok else float("inf"),
                          "usd_per_token": float(acc["usd"][sl].sum()) / tok if tok else float("inf"),
                          "static_share": (float(acc["static_j"][sl].sum()) / float(acc["energy_j"][sl].sum())
                                           if acc["energy_j"][sl].sum() > 0 else 0.0),
                          "vpods_mean": float(alive[:, p].sum(axis=1).mean()) if alive.size else 0.0,
                          "vpods_max": float(alive[:, p].sum(axis=1).max()) if alive.size else 0.0,
                          "groups_mean": float((alive[:, p] > 0).sum(axis=1).mean()) if alive.size else 0.0,
                          "groups_max": int((alive[:, p] > 0).sum(axis=1).max()) if alive.size else 0}
        return {"groups": rows, "series": series, "totals": totals}

    def summary(self) -> dict[str, float]:
        """Totals so far: energy (J), cost (USD), tokens, efficiencies (tokens/J, tokens/USD) and SLO
        violation (%, share of requests missing TTFT or TPOT: ``slo_violation_pct``; TTFT alone, the
        prefill phase: ``ttft_violation_pct``; TPOT alone, decode: ``tpot_violation_pct``). Requests still
        open count as violations once their age exceeds their SLO (TTFT, or TPOT x output tokens)."""
        e = self.totals["energy_j"]
        u = self.totals["usd"]
        tk = self.totals["tokens"]
        met = np.zeros(3)
        tot = 0.0
        for h in self.history:
            met += h.slo_met
            tot += h.slo_total
        open_ids = self.open_requests()
        late_p = late_d = late = 0
        if open_ids.size:
            age = self.now - self.arr[open_ids]
            lp = np.isnan(self.ttft[open_ids]) & (age > self.slo_p[self.bk_p[open_ids]])
            ld = age > self.slo_d[self.bk_d[open_ids]] * self.osl[open_ids]
            late_p, late_d, late = int(lp.sum()), int(ld.sum()), int((lp | ld).sum())

        def viol_pct(met: float, n: float) -> float:
            return 100.0 * (1.0 - met / n) if n else 0.0

        def ratio(a: float, b: float) -> float:
            return float(a / b) if b > 0 else 0.0

        return {
            "energy_j": float(e.sum()), "usd": float(u.sum()), "tokens": float(tk.sum()),
            "energy_j_prefill": float(e[0]), "energy_j_decode": float(e[1]),
            "usd_prefill": float(u[0]), "usd_decode": float(u[1]),
            "tokens_prefill": float(tk[0]), "tokens_decode": float(tk[1]),
            "energy_efficiency": ratio(tk.sum(), e.sum()), "cost_efficiency": ratio(tk.sum(), u.sum()),
            "energy_efficiency_prefill": ratio(tk[0], e[0]), "energy_efficiency_decode": ratio(tk[1], e[1]),
            "cost_efficiency_prefill": ratio(tk[0], u[0]), "cost_efficiency_decode": ratio(tk[1], u[1]),
            "ttft_violation_pct": viol_pct(met[0], tot + late_p),
            "tpot_violation_pct": viol_pct(met[1], tot + late_d),
            "slo_violation_pct": viol_pct(met[2], tot + late),
            "requests_finished": float(self.n_finished),
            "requests_open": float(open_ids.size),
            # request-attributed accounting (busy steps only, no idle/booting vPods), as a per-request
            # simulator such as the paper's reports it
            "energy_busy_j": float(self.totals["energy_busy_j"].sum()), "usd_busy": float(self.totals["usd_busy"].sum()),
            "energy_efficiency_busy": ratio(tk.sum(), self.totals["energy_busy_j"].sum()),
            "cost_efficiency_busy": ratio(tk.sum(), self.totals["usd_busy"].sum()),
            "energy_efficiency_busy_prefill": ratio(tk[0], self.totals["energy_busy_j"][0]),
            "energy_efficiency_busy_decode": ratio(tk[1], self.totals["energy_busy_j"][1]),
            "cost_efficiency_busy_prefill": ratio(tk[0], self.totals["usd_busy"][0]),
            "cost_efficiency_busy_decode": ratio(tk[1], self.totals["usd_busy"][1]),
        }
