"""The NeuScale paper's policies for :class:`~servegym.envs.npu.sim.cluster.NPUCluster` (§3.4, §5.1).

* :class:`BasePolicy` -- one homogeneous configuration (the best fit of the trace's largest sequence
  length, per phase) scaled by count only, with the same count rule as NeuScale (peak rate over
  T_pod, x2 / ÷2 limits, emergency scale-out), so the comparison isolates heterogeneity and grouping. That is
  the reading of §5.1 taken (a count-only autoscaler, as Autopilot and the HPA it cites; "to provision for the
  peak demand" sizes the configuration); ``count="trace-peak"`` holds the trace's peak count instead (a bound).
* :class:`NeuScalePolicy` -- §3.4 in full: per-bucket best-fit groups, N_pod = ceil(R_peak / T_pod)
  every 5-min epoch, at most x2 per epoch and ÷2 per 30 min, emergency scale-out at every decision
  point when a group's peak queue exceeds its aggregated max batch, an EWMA on R_peak, coalescing of
  groups with N_L = R_peak / T_pod < 0.5 into the next larger group when it has the spare capacity
  and meets their SLO, fail-over to another version's best fit when the quota runs out, and eviction
  (lower-R_peak groups get chips last) when nothing else fits.
* :func:`ideal_metrics` -- the oracle of §5.1 (**uses oracle information**: every request's true
  lengths): each request on its best-fit vPod at a maximum-size batch of its own sequence length;
  no SLO violations by construction.

:func:`run_policy` drives the simulator's decision loop (the same loop the Gymnasium env drives). The rules both
policies share (count rule, coincidence, emergency scale-out, trace sizing) are in :mod:`servegym.baselines.npu_rules`;
the ``servegym npu compare`` runner and the Ideal oracle in :mod:`servegym.baselines.npu_compare` (both names are
importable from here too).

With ``fit_at = "operating"`` both policies fix their configurations before the run at the trace's peak demand
(:func:`operating_picks`; §5.1: "We generate the best-fit allocations for each unique sequence length for each
model before running the experiments"): NeuScale per bucket at the demand of the group the bucket lands in, Base for
the largest length at the whole trace's peak.

Choices the paper leaves open (documented, not tuned): R_peak is the peak 10-s request rate; the EWMA
is R <- max(P, alpha P + (1 - alpha) R) over each epoch's peak P with alpha = 0.5 (fast scale-in after
a burst, immediate scale-out); a new group may start at its full N_pod (doubling from 0 is
undefined); emergency scale-out adds ceil(excess queue / max batch) vPods.

Readings of §3.4 that fix earlier artefacts (both policies):

* **A group's R_peak is the peak of its aggregate rate** ("the peak request rate ... that would be
  served by this group"), not the sum of its buckets' own 10-s peaks. The EWMA stays per bucket; the
  group's demand is the sum of its buckets' EWMA demands times :func:`coincidence` (peak of the sum
  over sum of the peaks, measured on the last epoch's 10-s bins). Summing bucket peaks overstated a
  group's peak by 1.02-1.08x on Azure and 1.5-1.8x on LVEval/OpenThoughts (sparse buckets peak in
  different bins), most for Base, whose one group spans every bucket.
* **Groups are distinct allocations**, not (allocation, max batch) pairs: the paper compares "the new
  set of vPod allocations with existing vPod groups"; max batch is an admission limit of the engine
  (DSE metadata). Consecutive buckets whose best fits share an allocation form one group that runs the
  largest bucket's entry. Splitting them had put identical 32-chip decode vPods in separate groups
  (Llama-3-70B/OpenThoughts decode 0.79x of Base before, 1.00x after).
* **A coalesced group is gone at once**: its requests go to the absorbing group and its vPods are
  released in the same epoch. Holding it under the ÷2-per-window rule kept it in the length-to-group
  map, so it went on splitting traffic (and batch size) off the group that was meant to absorb it.
  Groups that only lost their traffic still shrink by at most ÷2 per window.
* **Make before break.** A group that leaves the length-to-group map (coalesced, or its lengths now served by
  a group keyed at another edge) keeps its vPods until the group that takes its lengths has a ready vPod;
  releasing it first left the phase with no ready group while the new vPods booted (about 2 min), and the
  queue that built up set off emergency scale-outs (17-140 decode vPods on the focal scenario).
* **A group only absorbs requests it serves within their SLO.** Coalescing needs "sufficient spare
  capacity to absorb all its requests", and "NeuScale prioritizes SLO guarantees" (§5.2); a merge is
  therefore taken only if the absorbing group's vPod meets the SLO (TTFT for prefill, TPOT for decode)
  of every merged bucket at its max batch, the DSE's own criterion (``slo_aware_merge``; ``False``
  restores the capacity-only rule). At Table 4's rates every group has N_L << 0.5, so without this
  check the merges cascade into the largest group, i.e. Base's deep-pipeline configuration, and short
  prompts miss their TTFT (Llama-3.1-405B/OpenThoughts: every 128-token prompt, prefill SLO 0.52).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from servegym.baselines.npu_grouping import OK, grouping_tables, neuscale_groups
from servegym.baselines.npu_rules import (  # noqa: F401  (re-exported: their home before the split)
    _alive_counts,
    _CountRule,
    _emergency,
    coincidence,
    emergency_decision,
    emergency_possible,
    operating_picks,
    trace_peak,
)
from servegym.envs.npu.sim.cluster import NB, NPUCluster, Observation, ScalingDecision
from servegym.envs.npu.sim.roofline import PHASES

from servegym.errors import ConfigError, check_choice, check_range

_BUCKETS = np.arange(NB)
_NO_BINS = np.zeros((1, 2, NB))  # the grouping kernel's bins when the observation has none (unused then)

POLICIES: tuple[str, ...] = ("base", "neuscale", "ideal")


class NeuScalePolicy:
    """NeuScale's autoscaler (§3.4); ``coalesce_below`` is N_L (0.5), ``coalescing=False`` disables it."""

    name = "neuscale"

    def __init__(self, coalesce_below: float = 0.5, coalescing: bool = True, alpha: float = 0.5,
                 slo_aware_merge: bool = True, max_groups: int | None = None, fit_aware_merge: bool = True) -> None:
        check_range("coalesce_below", coalesce_below, 0.0, None)
        if max_groups is not None:
            check_range("max_groups", max_groups, 1, None)
        # Fig. 26: at most this many groups per phase (the lowest-N_L group merges into the next larger one,
        # whatever its spare capacity or SLO, until few enough remain); None = NeuScale's own grouping
        self.max_groups = max_groups
        check_range("alpha", alpha, 0.0, 1.0, low_inclusive=False)
        self.coalesce_below = coalesce_below
        self.coalescing = coalescing
        # with fit_at = "operating": merge only where the absorbing group is not a worse fit (see _not_worse_fit)
        self.fit_aware_merge = fit_aware_merge
        self.slo_aware_merge = slo_aware_merge
        self.rule = _CountRule(alpha=alpha)
        self.targets: dict[tuple[str, int], dict[int, int]] = {}
        self.merged: list[tuple[str, int, int]] = []
        self.main: dict[tuple[str, int], int] = {}

    def reset(self, sim: NPUCluster) -> None:
        self.sim = sim
        self.rule = _CountRule(alpha=self.rule.alpha, halve_window_s=sim.config.window_s)
        self.targets = {}
        self.main: dict[tuple[str, int], int] = {}
        # fit_at = "operating": each bucket's configuration is fixed before the run (§5.1: "We generate the
        # best-fit allocations for each unique sequence length for each model before running the experiments";
        # §3.3: the DSE "only needs to be performed once"), at the operating point the trace puts that bucket
        # at: its share of the trace's peak demand (the trace metadata Base sizes its one configuration by)
        self.fixed = operating_picks(sim) if sim.config.fit_at == "operating" else {}
        # per-run lookups of the catalog (decide runs every epoch): each configuration's allocation, and the
        # merge check's verdicts (a function of the catalog's step tables)
        self._alloc = [cf.entry.alloc_index for cf in sim.configs]
        self._ver_of = [cf.version for cf in sim.configs]
        self._chips_of = [cf.chips for cf in sim.configs]
        self._slo_ok: dict[tuple[int, int, tuple[int, ...]], bool] = {}
        self._best: dict[tuple[str, int], int] = {}  # (phase, bucket index) -> the DSE's best fit
        self._tps_full: dict[tuple[int, int], float] = {}  # (config, bucket index) -> tokens/s at its max batch
        # the compiled grouping's per-run tables and output buffers (npu_grouping.py)
        kt = grouping_tables(sim, self.fixed)
        self._n_alloc = int(kt["alloc"].max()) + 1 if kt["alloc"].size else 1
        self._no_prev = np.full(self._n_alloc, -1, dtype=np.int64)  # no current group of any allocation (read only)
        self._kbuf = tuple(np.empty(NB, dtype=t) for t in (np.int64, float, float, np.int64, float, np.int64, np.int64))
        # per phase, the kernel's arguments that are fixed for the run (its tables, then its output buffers)
        self._kargs = tuple((kt["pick"][p], kt["alloc"], kt["full_tps"], kt["slo_ok"][p], kt["tps"], kt["pow"],
                             kt["jmax"], kt["static_w"], kt["per_s"], *self._kbuf) for p in (0, 1))

    def _candidates(self, phase: str, edge: int) -> list[int]:
        """``sim.candidates(phase, edge)`` (best fit first) without its validation and copy for a known group (read only)."""
        hit = self.sim.cand.get((phase, edge))
        return hit if hit is not None else self.sim.candidates(phase, edge)

    def _failovers(self, phase: str, edge: int) -> list[int]:
        """``sim.failovers(phase, edge)`` without its validation and copy for a known group (read only)."""
        hit = self.sim.failover.get((phase, edge))
        return hit if hit is not None else self.sim.failovers(phase, edge)

    def _best_fit(self, ph: str, b: int, ctx: Observation) -> int:
        """The DSE's best fit of bucket index ``b`` of phase ``ph`` (``_candidates(...)[0]``, cached per run)."""
        hit = self._best.get((ph, b))
        if hit is None:
            hit = self._best[(ph, b)] = self._candidates(ph, int(ctx.bucket_edges[b]))[0]
        return hit

    def _full_batch_tps(self, cid: int, b: int) -> float:
        """Tokens/s of one vPod of ``cid`` at bucket index ``b`` at its max batch (the step table's, cached per run)."""
        hit = self._tps_full.get((cid, b))
        if hit is None:
            hit = self._tps_full[(cid, b)] = float(self.sim.tps[cid, b, self.sim.jmax[cid, b]])
        return hit

    def groups(self, ctx: Observation, phase: int, signal: np.ndarray) -> list[tuple[int, float, float, int]]:
        """(bucket index, token rate W (tokens/s), per-vPod capacity C (tokens/s), best-fit id, R_peak
        (req/s)) after coalescing, for buckets with traffic in the window: :meth:`_groups_py` in one compiled call
        (:mod:`servegym.baselines.npu_grouping`, the same figures bit for bit), or that method itself where the
        kernel does not apply."""
        out = self._groups_compiled(ctx, phase, signal)
        return self._groups_py(ctx, phase, signal) if out is None else out

    def _groups_compiled(self, ctx: Observation, phase: int, signal: np.ndarray
                         ) -> list[tuple[int, float, float, int]] | None:
        """:meth:`_groups_py` by :func:`~servegym.baselines.npu_grouping.neuscale_groups`; None where it does not
        apply (no per-run tables, ``max_groups``, inputs not float64 (2, buckets), bins other than
        :func:`coincidence`'s compiled case) or reports that the Python method must run (it would raise)."""
        kargs = getattr(self, "_kargs", None)
        tpr, sig, bins = ctx.tokens_per_req, signal, ctx.epoch_token_bins
        if kargs is None or self.max_groups is not None:
            return None
        for a in (tpr, sig):
            if not (isinstance(a, np.ndarray) and a.dtype == np.float64 and a.shape == (2, NB)):
                return None
        if bins is None:
            use_bins, bins = False, _NO_BINS
        elif (isinstance(bins, np.ndarray) and bins.ndim == 3 and bins.shape[0] and bins.shape[1:] == (2, NB)
              and bins.dtype == np.float64 and bins.flags.c_contiguous):
            use_bins = True
        else:
            return None
        ph = PHASES[phase]
        cfg = self.sim.config
        sticky = cfg.fit_at == "operating"
        prev = self._no_prev
        if sticky:  # the current groups by allocation (the last one of an allocation wins, as a dict would)
            prev = prev.copy()
            for k, c in self.main.items():
                if k[0] == ph:
                    prev[self._alloc[c]] = int(np.searchsorted(ctx.bucket_edges, k[1]))
        ob, ow, oc, ocid, orr, mb, mt = self._kbuf
        ng, nm, status = neuscale_groups(
            phase, np.ascontiguousarray(tpr[phase]), np.ascontiguousarray(sig[phase]), bins, use_bins, sticky, prev,
            self.coalescing, float(self.coalesce_below), self.slo_aware_merge,
            self.fit_aware_merge and sticky, cfg.objective == "cost", *kargs[phase])
        if status != OK:
            return None
        edges = ctx.bucket_edges
        for i in range(nm):
            self.merged.append((ph, int(edges[mb[i]]), int(edges[mt[i]])))
        return list(zip(ob[:ng].tolist(), ow[:ng].tolist(), oc[:ng].tolist(), ocid[:ng].tolist(), orr[:ng].tolist(),
                        strict=True))

    def _groups_py(self, ctx: Observation, phase: int, signal: np.ndarray) -> list[tuple[int, float, float, int]]:
        """:meth:`groups` in Python: the reference the compiled grouping is tested against, and its fallback."""
        sim = self.sim
        ph = PHASES[phase]
        tpr = ctx.tokens_per_req[phase]
        live = np.flatnonzero((tpr > 0) & (signal[phase] > 0))
        # the per-bucket loops below read Python floats (the same float64 products, without numpy's per-element
        # dispatch)
        lv = live.tolist()
        tpr_l = tpr.tolist()
        rp_l = ctx.rate_peak[phase].tolist()
        sig_l = signal[phase].tolist()
        # one group per distinct best-fit allocation over a run of consecutive buckets (§3.4: all vPods of
        # a group share a configuration; "compares the new set of vPod allocations with existing vPod
        # groups to determine if a new group needs to be created"), keyed by the run's largest bucket so
        # the length-to-group map sends the whole run there. Buckets whose best fits differ only in max
        # batch (the engine's admission limit, metadata of the DSE entry, not part of the vPod) share
        # one group; it runs the largest bucket's entry, whose max batch fits the longest requests.
        groups: dict[int, list[float]] = {}
        run: list[int] = []
        prev = None
        if sim.config.fit_at == "operating":
            pick = {b: self._pick(ctx, phase, b, rp_l[b] * tpr_l[b]) for b in lv}
        else:  # the bucket's best fit (_pick without the demand it does not use)
            pick = {b: self._best_fit(ph, b, ctx) for b in lv}
        alloc_of = self._alloc
        for b in lv:
            alloc = alloc_of[pick[b]]
            if prev is not None and alloc != prev[1]:
                run.append(prev[0])
            prev = (b, alloc)
        if prev is not None:
            run.append(prev[0])
        ends = np.array(run, dtype=np.int64)
        # a group is its allocation (§3.4: the recommender "compares the new set of vPod allocations with existing
        # vPod groups to determine if a new group needs to be created"): a run whose allocation an existing group
        # already holds keeps that group (and its length edge, if it still lies below the next run's top), so a
        # run boundary moving by a bucket does not recreate the group's vPods
        sticky: dict[int, tuple[int, int]] = {}
        if self.sim.config.fit_at == "operating":
            prev_groups = {alloc_of[c]: (int(np.searchsorted(ctx.bucket_edges, k[1])), c)
                           for k, c in self.main.items() if k[0] == ph}
            for i, top in enumerate(ends.tolist()):
                hit = prev_groups.get(alloc_of[pick[top]])
                nxt = int(ends[i + 1]) if i + 1 < ends.size else NB
                if hit is not None and top <= hit[0] < nxt:
                    sticky[top] = hit
        top_of = {b: sticky.get(t, (t, 0))[0]
                  for b, t in zip(lv, ends[np.searchsorted(ends, live)].tolist(), strict=True)}
        # the group's configuration: its top bucket's pick at the group's own forecast demand (the batch the
        # group runs depends on all the tokens it serves), the top bucket's best fit with fit_at = best-batch (a
        # kept group keeps its key; its configuration follows its demand)
        group_w: dict[int, float] = {}
        for b in lv:
            group_w[top_of[b]] = group_w.get(top_of[b], 0.0) + rp_l[b] * tpr_l[b]
        group_cid = {top: self._pick(ctx, phase, top, w) for top, w in group_w.items()}
        members: dict[int, list[tuple[int, float]]] = {}
        for b in lv:
            top = top_of[b]
            cid = group_cid[top]
            # tokens/s of one vPod at bucket b (= sim.max_rps(cid, ph, edge of b, 1.0), read from the table)
            cap_b = self._full_batch_tps(cid, b)
            w = sig_l[b] * tpr_l[b]
            g = groups.setdefault(top, [0.0, 0.0, cid, 0.0])
            g[1] += w / cap_b  # vPods needed (at full batch) for this bucket's tokens
            g[0] += w
            g[3] += sig_l[b]  # R_peak of the group (req/s)
            members.setdefault(top, []).append((b, cap_b))
        # the group's peak is that of its aggregate rate, not the sum of its buckets' peaks; store (W, C)
        # with C the effective tokens/s per vPod of the group's mix
        for top, v in groups.items():
            bs, caps = zip(*members[top], strict=True)
            k = coincidence(ctx, phase, np.array(bs), np.array(caps))
            v[0], v[3] = v[0] * k, v[3] * k
            v[1] = v[0] / (v[1] * k) if v[1] > 0 else 1.0
        if self.coalescing:
            while True:
                order = sorted(groups, key=lambda b: (groups[b][0] / groups[b][1], b))
                merged = False
                for b in order:
                    w, c, _, r = groups[b]
                    if w / c >= self.coalesce_below:
                        break
                    larger = [x for x in groups if x > b]
                    if not larger:
                        continue
                    t = min(larger)
                    wt, ct, cid_t, _rt = groups[t]
                    spare = max(1, math.ceil(wt / ct)) * ct - wt
                    if spare >= w and (not self.slo_aware_merge
                                       or self._serves_within_slo(phase, int(cid_t), [m for m, _ in members[b]])) \
                            and (not self._fit_aware or self._not_worse_fit(phase, b, groups[b], t, groups[t])):
                        groups[t][0] = wt + w
                        groups[t][3] += r
                        members[t].extend(members.pop(b))
                        del groups[b]
                        self.merged.append((ph, int(ctx.bucket_edges[b]), int(ctx.bucket_edges[t])))
                        merged = True
                        break
                if not merged:
                    break
        while self.max_groups is not None and len(groups) > self.max_groups:
            b = min((x for x in groups if x != max(groups)), key=lambda x: (groups[x][0] / groups[x][1], x))
            t = min(x for x in groups if x > b)
            groups[t][0] += groups[b][0]
            groups[t][3] += groups[b][3]
            members[t].extend(members.pop(b))
            del groups[b]
            self.merged.append((ph, int(ctx.bucket_edges[b]), int(ctx.bucket_edges[t])))
        return [(b, v[0], v[1], int(v[2]), v[3]) for b, v in sorted(groups.items())]

    @property
    def _fit_aware(self) -> bool:
        return self.fit_aware_merge and self.sim.config.fit_at == "operating"

    def _level(self, cid: int, b: int, per_vpod: float) -> int:
        """The operating batch level of one vPod of ``cid`` at bucket ``b`` serving ``per_vpod`` tokens/s."""
        tps = self.sim.tps[cid, b]
        j = int(np.searchsorted(tps, per_vpod - 1e-12))
        return min(j, int(self.sim.jmax[cid, b]))

    def _rate(self, cid: int, b: int, w: float, n: int) -> float:
        """Energy (J/s) or cost (USD/s) beyond the chips' idle draw that ``w`` tokens/s at bucket ``b`` add on ``n``
        vPods of ``cid``: dynamic power at the operating batch, pro rata of the vPods' busy time."""
        sim = self.sim
        if sim.config.objective == "cost":
            return 0.0
        j = self._level(cid, b, w / max(n, 1))
        dyn = max(float(sim.pow[cid, b, j]) - float(sim.cfg_static_w[cid]), 0.0) / float(sim.tps[cid, b, j])
        return dyn * w

    def _not_worse_fit(self, phase: int, b: int, gb: list[float], t: int, gt: list[float]) -> bool:
        """Coalescing moves group ``b``'s requests onto group ``t``'s vPods only if that is not a worse fit for them:
        what they add there (dynamic energy at ``t``'s operating batch; nothing for cost, the chips are held anyway)
        is no more than what they cost on their own vPods (the static power or chip-hours of those vPods over the
        epoch plus their dynamic energy). Without it, the cascade folds every group into the largest one."""
        sim = self.sim
        w, c, cid_b = gb[0], gb[1], int(gb[2])
        wt, ct, cid_t = gt[0], gt[1], int(gt[2])
        n_b = max(1, math.ceil(w / c - 1e-9))
        n_t = max(1, math.ceil(wt / ct - 1e-9))
        per_s = sim.cfg_usd_s if sim.config.objective == "cost" else sim.cfg_static_w
        own = n_b * float(per_s[cid_b]) + self._rate(cid_b, b, w, n_b)
        moved = self._rate(cid_t, b, w + wt, n_t) - self._rate(cid_t, b, wt, n_t) if wt > 0 else self._rate(
            cid_t, b, w, n_t)
        return moved <= own + 1e-12

    def _pick(self, ctx: Observation, phase: int, b: int, w_tokens_s: float) -> int:
        """Config id for bucket ``b`` at a forecast demand (tokens/s): the operating-point best fit (the window's
        peak rate, §3.4: "based on the peak load ... observed in the last 30-minute time window"), or the DSE's
        best fit with ``fit_at = "best-batch"``."""
        edge = int(ctx.bucket_edges[b])
        ph = PHASES[phase]
        if self.sim.config.fit_at == "operating":
            return self.fixed[(phase, b)]
        return self._candidates(ph, edge)[0]

    def _serves_within_slo(self, phase: int, cid: int, buckets: list[int]) -> bool:
        """Whether a vPod of ``cid`` meets every bucket's SLO (TTFT for prefill, TPOT for decode) at its
        max batch, the DSE's own criterion (a group runs at that batch under load, and the TTFT of a
        prefill batch is the batch's latency): a group may only absorb requests it serves within their SLO."""
        key = (phase, cid, tuple(buckets))
        hit = self._slo_ok.get(key)
        if hit is None:
            sim = self.sim
            slo = sim.slo_p if phase == 0 else sim.slo_d
            b = np.asarray(buckets, dtype=np.int64)
            hit = self._slo_ok[key] = bool(np.all(sim.lat[cid, b, -1] <= slo[b] + 1e-12))
        return hit

    def decide(self, ctx: Observation) -> ScalingDecision:
        sim = self.sim
        if not ctx.at_epoch_boundary:
            return emergency_decision(sim, ctx, self.targets)
        signal = self.rule.signal(ctx)
        wanted: list[tuple[float, tuple[str, int], int]] = []
        keep: set[tuple[str, int]] = set()
        n_merged = len(self.merged)
        main: dict[tuple[str, int], int] = {}
        edges = ctx.bucket_edges.tolist()
        counts = ctx.counts
        for p in (0, 1):
            for b, w, c, cid_g, r_peak in self.groups(ctx, p, signal):
                key = (PHASES[p], edges[b])
                main[key] = cid_g
                n = max(1, math.ceil(w / c - 1e-9))
                cur = sum(counts.get(key, {}).values())
                wanted.append((r_peak, key, self.rule.limit(key, n, cur, ctx.time_s)))
                keep.add(key)
        # a coalesced group is gone: the larger group absorbs all its requests (§3.4), so it leaves the
        # length-to-group map and its vPods are released now (holding them would keep splitting its
        # traffic off the absorbing group, the underutilization coalescing exists to remove); groups that
        # merely lost their traffic shrink under the ÷2-per-window limit, then go
        merged_now = {(ph, e) for ph, e, _t in self.merged[n_merged:]} - keep
        # ... once the group that now takes its lengths can serve: while that group has no ready vPod (it is new,
        # or booting) a group leaving the map keeps its vPods and its traffic for one more epoch (make before
        # break; releasing it first left the phase without a ready group, and the queue that built up while the
        # new vPods booted set off emergency scale-outs of up to 140 vPods on the focal scenario)
        for key in list(self.targets):
            if key not in keep:
                cur = sum(_alive_counts(ctx, key).values())
                p = PHASES.index(key[0])
                succ = sorted(e for ph, e in keep if ph == key[0])
                heir = next((e for e in succ if e >= key[1]), succ[-1] if succ else None)
                heir_ready = heir is None or ctx.ready[p, int(np.searchsorted(ctx.bucket_edges, heir))] > 0
                if not heir_ready:
                    n_left = cur
                else:
                    n_left = 0 if key in merged_now else self.rule.limit(key, 0, cur, ctx.time_s)
                    if key in merged_now:
                        self.rule.ref.pop(key, None)
                wanted.append((0.0, key, n_left))
        # quota: highest-R_peak (req/s) groups first; best fit, then fail-over versions; the rest is evicted
        budget = dict(ctx.quota_left)
        ver, chips = self._ver_of, self._chips_of  # each configuration's chip version and chips
        for alive in counts.values():
            for cid, n in alive.items():
                budget[ver[cid]] += n * chips[cid]
        targets: dict[tuple[str, int], dict[int, int]] = {}
        for _w, key, n in sorted(wanted, key=lambda x: -x[0]):
            tgt: dict[int, int] = {}
            left = n
            first = main.get(key, self.main.get(key, self._candidates(*key)[0]))
            # a group whose configuration changed keeps its old vPods for this epoch, while the new ones boot
            # (make before break; they go at the next epoch)
            old = self.main.get(key)
            if old is not None and old != first and n > 0:
                keep_old = _alive_counts(ctx, key).get(old, 0)
                if keep_old > 0:
                    tgt[old] = keep_old
                    budget[ver[old]] -= keep_old * chips[old]
            for cid in [first, *self._failovers(*key)]:
                if left <= 0:
                    break
                v = ver[cid]
                fit = left if math.isinf(budget[v]) else min(left, int(budget[v] // chips[cid]))
                if fit > 0:
                    tgt[cid] = tgt.get(cid, 0) + fit
                    budget[v] -= fit * chips[cid]
                    left -= fit
            targets[key] = tgt
        self.targets = {k: v for k, v in targets.items() if v}
        self.main = {**{k: v for k, v in self.main.items() if k in keep}, **main}
        return ScalingDecision(targets)


BASE_COUNTS: tuple[str, ...] = ("window", "trace-peak")
"""``BasePolicy(count=...)``: ``window`` (default) -- the count-only autoscaler of §5.1, N = ceil(R_peak / T_pod) over
the last window with NeuScale's limits (x2 per epoch, ÷2 per window, EWMA, emergency scale-out), the rule of
Autopilot's horizontal scaling and the Kubernetes HPA that §5.1 cites (a count from a recent window's peak, limited
scale-in); ``trace-peak`` -- a sensitivity bound, not §5.1's Base: one count for the whole run, the vPods the trace's
peak 10-s request rate needs at full batch (every bucket at its share of the trace's tokens), never scaled in."""


class BasePolicy:
    """Homogeneous count-only autoscaling: the best fit for the trace's largest sequence length; ``count``: see
    :data:`BASE_COUNTS`."""

    name = "base"

    def __init__(self, alpha: float = 0.5, count: str = "window") -> None:
        check_choice("count", count, BASE_COUNTS)
        self.count = count
        self.rule = _CountRule(alpha=alpha)
        self.targets: dict[tuple[str, int], dict[int, int]] = {}

    def reset(self, sim: NPUCluster) -> None:
        self.sim = sim
        self.rule = _CountRule(alpha=self.rule.alpha, halve_window_s=sim.config.window_s)
        w = sim.workload
        edges = sim.edges
        self.keys = (("prefill", int(edges[np.searchsorted(edges, min(w.max_input_tokens, edges[-1]))])),
                     ("decode", int(edges[np.searchsorted(edges, min(w.max_total_tokens, edges[-1]))])))
        if sim.config.fit_at == "operating":
            # the same rule as NeuScale's, for the largest length, "to provision for the peak demand" (§5.1): the
            # trace's peak 10-s request rate x its mean tokens per request and phase (trace metadata, like the
            # maximum lengths); one configuration for the whole run
            peak_rps, _, mean_tok = trace_peak(sim)
            self.cfg = {k: sim.op_fit(k[0], k[1], peak_rps * float(mean_tok[i])) for i, k in enumerate(self.keys)}
        else:
            self.cfg = {k: sim.candidates(*k)[0] for k in self.keys}
        self._caps = {}  # per key: each bucket's full-batch tokens/s, floored at 1e-300, and the bucket indices
        for k, cid in self.cfg.items():
            cap = sim.tps[cid, _BUCKETS, sim.jmax[cid]]
            self._caps[k] = (cap, np.maximum(cap, 1e-300), np.arange(cap.size))
        self.fixed_n: dict[tuple[str, int], int] = {}
        if self.count == "trace-peak":  # vPods at full batch for the trace's peak rate, its token mix per bucket
            peak_rps, share, _ = trace_peak(sim)
            for i, k in enumerate(self.keys):
                self.fixed_n[k] = max(1, math.ceil(float((peak_rps * share[i] / self._caps[k][1]).sum()) - 1e-9))
        self.targets = {}

    def decide(self, ctx: Observation) -> ScalingDecision:
        sim = self.sim
        if not ctx.at_epoch_boundary:
            return emergency_decision(sim, ctx, self.targets)
        signal = self.rule.signal(ctx)
        out: dict[tuple[str, int], dict[int, int]] = {}
        for p, key in enumerate(self.keys):
            cid = self.cfg[key]
            wb = signal[p] * ctx.tokens_per_req[p]
            w = float(wb.sum())
            # T_pod at the requests' own lengths: tokens/s of the configuration at each bucket, weighted
            # (= sim.max_rps(cid, phase, edge, 1.0) per bucket; the configuration is fixed for the run)
            cap, cap_floor, buckets = self._caps[key]
            # vPods needed at full batch for the group's peak (the aggregate's peak, not the buckets' sum)
            vpod_s = float((wb / cap_floor).sum()) * coincidence(ctx, p, buckets, cap)
            n = max(1, math.ceil(vpod_s - 1e-9)) if w > 0 else 1
            cur = sum(_alive_counts(ctx, key).values())
            fixed = self.fixed_n.get(key)
            out[key] = {cid: self.rule.limit(key, n, cur, ctx.time_s) if fixed is None else fixed}
            budget = ctx.quota_left[sim.configs[cid].version] + cur * sim.configs[cid].chips
            if not math.isinf(budget):
                out[key][cid] = min(out[key][cid], int(budget // sim.configs[cid].chips))
        self.targets = out
        return ScalingDecision(out)


def make_policy(name: str) -> NeuScalePolicy | BasePolicy:
    if name == "neuscale":
        return NeuScalePolicy()
    if name == "base":
        return BasePolicy()
    if name == "hindsight":  # the hindsight plan (knows the episode's future demand): a feasible bound
        from servegym.baselines.npu_hindsight import HindsightPolicy

        return HindsightPolicy()  # type: ignore[return-value]
    raise ConfigError(f"policy = {name!r} is unknown; allowed: base, neuscale, hindsight (ideal is an oracle bound)")


def run_policy(sim: NPUCluster, policy: NeuScalePolicy | BasePolicy, hours: float | None = None,
               progress: Callable[[int], None] | None = None) -> dict[str, float]:
    """Drive ``sim`` with ``policy`` at every decision point (``check_s``) for ``hours`` (default: the
    workload's horizon); returns :meth:`NPUCluster.summary`. ``progress(n)`` is called per epoch."""
    c = sim.config
    horizon = sim.workload.duration_s if hours is None else hours * 3600.0
    check_range("hours", horizon / 3600.0, c.epoch_s / 3600.0, None)
    policy.reset(sim)
    n_epochs = int(horizon // c.epoch_s)
    per = round(c.epoch_s / c.check_s)
    # a policy that changes its targets between epochs (the hindsight plan) is asked at every decision point
    every_point = bool(getattr(policy, "decides_between_epochs", False))
    for e in range(n_epochs):
        for _ in range(per):
            if not every_point and not sim.at_epoch_boundary() and not emergency_possible(sim, policy.targets):
                # between epochs both policies only call emergency_decision, which has nothing to act on
                sim.skip_observation()  # no apply: an empty decision only reconciles, as the advance does first
                sim.advance(c.check_s)
                continue
            ctx = sim.observe()
            if e == 0 and ctx.at_epoch_boundary:
                # the service exists at t = 0, sized by the policy on the first 10 minutes of arrivals
                sim.provision(ScalingDecision(warm_start(sim, policy)))
            else:
                sim.apply(policy.decide(ctx))
            sim.advance(c.check_s)
        if progress is not None:
            progress(e)
    return sim.summary()


def warm_start(sim: NPUCluster, policy: NeuScalePolicy | BasePolicy) -> dict:
    """Initial deployment from the first 10 minutes of arrivals (a provisioned service at t = 0),
    sized by the policy's own rule on a synthetic observation of those arrivals."""
    c = sim.config
    w = sim.workload
    head = w.requests.window(0.0, 600.0)
    rate = np.zeros((2, NB))
    tok = np.zeros((2, NB))
    bins = np.zeros((round(600.0 / c.rate_bin_s), 2, NB))
    if len(head):
        isl, osl = head.input_tokens, head.output_tokens
        bp = np.searchsorted(sim.edges, np.minimum(isl, sim.edges[-1]))
        bd = np.searchsorted(sim.edges, np.minimum(isl + osl, sim.edges[-1]))
        nbin = 600.0 / c.rate_bin_s
        kb = np.minimum((head.arrival_s // c.rate_bin_s).astype(int), int(nbin) - 1)
        for p, bb, t in ((0, bp, isl), (1, bd, osl)):
            cnt = np.zeros((int(nbin), NB))
            np.add.at(cnt, (kb, bb), 1.0)
            np.add.at(bins[:, p], (kb, bb), t.astype(float))
            rate[p] = cnt.max(axis=0) / c.rate_bin_s
            tok[p] = np.bincount(bb, weights=t, minlength=NB) / np.maximum(np.bincount(bb, minlength=NB), 1)
    ctx = sim.observe()
    warm = Observation(**{**ctx.__dict__, "rate_recent": rate, "rate_peak": rate, "epoch_peak": rate,
                          "tokens_per_req": tok, "at_epoch_boundary": True,
                          "epoch_token_bins": bins})
    dec = policy.decide(warm)
    return dict(dec.targets)


# the compare runner's old home: ``from servegym.baselines.npu import compare`` keeps working (its module imports
# this one, so the names come in at the end, once the policies above exist)
from servegym.baselines.npu_compare import (  # noqa: E402,F401
    PAPER_SATISFACTION_KEYS,
    CompareResult,
    _slo,
    compare,
    ideal_metrics,
    paper_satisfaction,
    plot_compare,
)
