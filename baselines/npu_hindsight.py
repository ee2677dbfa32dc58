"""Hindsight provisioning of :class:`~servegym.envs.npu.sim.cluster.NPUCluster`: the least-energy vPod plan of the
whole episode with its demand known in advance, under the real vPod boot times, played through the simulator.

**What it knows.** Everything a policy cannot: the episode's arrivals at 10-s resolution per (phase, length
bucket) with their true lengths (the fluid simulator's own workload profile,
:func:`~servegym.envs.npu.sim.fluid_profile.workload_profile`), a fresh cluster at t = 0, and in hindsight which of
its candidate plans played best on the episode (each candidate is played on a copy of the episode's simulator,
same workload and same generator state, so the copy's run is the real run).

**The planning model** (per phase; prefill and decode pools are separate, as in the simulator). The controller's
decisions are the simulator's: per group (a bucket edge whose group serves the contiguous range of length buckets
below it, the simulator's length-to-group map), one configuration for the episode and a vPod count at every 60-s
decision point (``check_s``).

* *Capacity at the SLO*, in vPods a group needs ready in decision interval k, from the simulator's own tables:
  prefill, the peak 10-s bin of the interval of sum_b tokens/s_b / tps[c, b, best level] (the fluid sizes its
  prefill capacity in best-level vPod-seconds and charges TTFT per 10-s bin); decode, the interval's mean of
  sum_b tokens/s_b x TPOT[c, b, batch 1] / max batch[c] (the fluid admits decode jobs while the batch slots hold
  their single-request TPOT work, Little's law), with the decode traffic of each group after the router's
  output-length misprediction (``osl_accuracy``: the simulator's own routing shares,
  :meth:`FluidCluster._decode_split`). Divided by a utilization target rho and rounded up.
* *Boot delay.* A vPod ordered at decision point k serves from k + L_c, L_c = ceil((108 s, the longest create
  time of Table 3, + the configuration's download, engine start and weight load) / 60 s): ready in time for every
  draw of the creation time. The initial deployment at t = 0 is ready at once (the baselines' warm start).
* *Energy.* A held vPod (booting or ready) draws its static power; a deleted one holds its chips 15 s more
  (``DELETE_S``); tokens add their dynamic energy at the full-batch level (per configuration and bucket).
* *The count problem* of one group is then: minimize the held vPod-intervals (+ 0.25 per deletion) subject to
  ready(k) >= d(k). It is solved exactly by :func:`count_plan` (one level of the demand at a time: each unit
  layer holds a vPod over a run of intervals where d >= level, keeps it through a gap no longer than the boot
  delay plus the deletion hold, else deletes and re-orders it L intervals ahead; exact for this problem, checked
  against HiGHS's MILP in the tests, :func:`milp_count_plan`, which also gives its LP relaxation).
* *The grouping* (which length buckets share a group, and each group's configuration among its top bucket's
  SLO-meeting candidates and fail-overs that serve every member bucket within its SLO at max batch) is chosen by
  an exact dynamic program over contiguous bucket ranges, each range costed by its exact count plan plus its
  dynamic energy (decode with exact routing for the DP: the misprediction couples the ranges; the chosen
  partition is then re-planned with the real routing shares). A one-group-per-phase structure (Base's shape)
  is planned beside it.

**The played policy** (:class:`HindsightPolicy`, name ``hindsight``): among the candidate plans (the two
structures per phase x the prefill and decode utilization targets :data:`PREFILL_UTILIZATIONS`,
:data:`DECODE_UTILIZATIONS`, refined next to the best, and a per-epoch splice of the played plans; the class
docstring gives the search), the one whose played episode has the best return as the env's oracle-mode reward
counts it (energy per Ideal epoch + ``slo_penalty`` x misses per arrived request per epoch; run by the env, its
``slo_penalty / objective_weight``), then played on the real simulator through the same decision loop as Base and
NeuScale (:func:`~servegym.baselines.npu.run_policy`, which asks it at every 60-s point,
``decides_between_epochs``; no emergency layer: the plan already knows the future). Its energy, cost and SLO are
the simulator's. About 9-20 distinct plans are played per episode: 1.4-4.2 CPU-s per 2-h episode, 14-17 CPU-s per
24-h one (measured 2026-12-06 on the shared 2-core machine, where the DP's count problems in numpy took 7-8 CPU-s
per 2-h episode before they were compiled; benchmarks/results/npu_yardsticks.md has the suite's figures).

**What the result is.** The played plan is a **feasible** policy of the real simulator, so its return is a
*lower bound* on the hindsight optimum of the simulator (not an upper bound on anything a policy can do). The
planning optimum (:attr:`HindsightPlan.planned_energy_j`) is an optimum of the planning model only: the
simulator charges idle vPods at static power while busy ones draw step power at their operating batch, and its
SLO (TTFT waits, misprediction, migration) is not the planning model's capacity rule. The paper's Ideal
(:func:`~servegym.baselines.npu.ideal_metrics`) stays the relaxation (an upper bound on every policy's return).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from servegym.envs.npu.sim.cluster import NB, NPUCluster, Observation, ScalingDecision
from servegym.envs.npu.sim.config import CREATE_S, DELETE_S
from servegym.envs.npu.sim.fluid import FluidCluster, make_cluster
from servegym.envs.npu.sim.fluid_kernels import (
    njit,  # numba, or plain Python without it (as every npu kernel)
)
from servegym.envs.npu.sim.roofline import PHASES

from servegym.errors import ConfigError, check_range

#: The prefill utilization targets rho of the candidate plans (capacity planned = demand / rho): the fluid's TTFT
#: waits grow with a group's utilization, so prefill needs headroom (measured: 25 % TTFT misses at rho = 1).
PREFILL_UTILIZATIONS: tuple[float, ...] = (1.0, 0.85, 0.7, 0.5, 0.35, 0.25)
#: The decode utilization targets (the first is the one the structure search uses).
DECODE_UTILIZATIONS: tuple[float, ...] = (1.0, 0.7, 0.5)
#: The candidate structures per phase: the DP's partition, or one group per phase (Base's shape).
STRUCTURES: tuple[str, ...] = ("partition", "single")


# ----------------------------------------------------------------------------------------- count problem
def count_plan(demand: NDArray[np.int64], lead: int, delete_cost: float = DELETE_S / 60.0
               ) -> tuple[NDArray[np.int64], float]:
    """The least-cost vPod counts of one group (module docstring, *the count problem*).

    ``demand`` (K,): vPods needed ready in each decision interval; ``lead``: intervals from an order to
    service (>= 1; the count at interval 0 is the initial deployment, ready at once); ``delete_cost``: the
    held intervals a deletion costs. Returns (target count per interval, cost in held vPod-intervals +
    ``delete_cost`` per deletion). Per demand level the needed intervals form runs; runs separated by at most
    ``lead + delete_cost`` intervals share one vPod (holding through the gap costs no more than deleting and
    re-ordering it), each merged block holding from ``lead`` intervals before its first needed one (interval
    0 at the earliest) to its last. Levels with the same needed set are handled together."""
    d = np.asarray(demand, dtype=np.int64)
    if d.ndim != 1 or (d < 0).any():
        raise ConfigError("demand must be a 1-D array of non-negative vPod counts")
    check_range("lead", lead, 1, None)
    if d.size == 0:
        return np.zeros(0, dtype=np.int64), 0.0
    held, cost = _count_layers(d, int(lead), float(delete_cost))
    return held, float(cost)


@njit(cache=True)
def _hold(held: NDArray[np.int64], b_start: int, b_end: int, lead: int, mult: int) -> int:
    """Hold ``mult`` vPods over the block [b_start - lead (0 at the earliest), b_end]; its held intervals."""
    h0 = max(b_start - lead, 0)
    for t in range(h0, b_end + 1):
        held[t] += mult
    return b_end - h0 + 1


@njit(cache=True)
def _count_layers(d: NDArray[np.int64], lead: int, delete_cost: float) -> tuple[NDArray[np.int64], float]:
    """:func:`count_plan`'s layers in one compiled pass (the planner calls it ~10^4 times per episode). Per level
    ``lv`` of the demand (ascending, ``mult`` = its step above the previous level): scan the runs of d >= lv,
    merge runs whose gap is at most ``lead + delete_cost`` intervals into blocks, and hold ``mult`` vPods over
    each block from ``lead`` intervals before its start (interval 0 at the earliest) to its end; a block that
    ends before the last interval is deleted. Integer held counts, and the cost summed level by level as
    mult x (held intervals + ``delete_cost`` x deletions), the same float operations in the same order as the
    array form it replaces."""
    K = d.size
    held = np.zeros(K, dtype=np.int64)
    cost = 0.0
    top = 0
    for k in range(K):
        top = max(top, d[k])
    present = np.zeros(top + 1, dtype=np.bool_)  # the demand's levels, ascending by index (no sort to compile)
    for k in range(K):
        present[d[k]] = True
    prev = 0
    for lv in range(1, top + 1):
        if not present[lv]:
            continue
        mult = lv - prev
        prev = lv
        total = 0  # held intervals of this level's blocks
        n_del = 0
        b_start = -1  # the open block [b_start, b_end] (-1: none yet)
        b_end = -1
        k = 0
        while k < K:
            if d[k] < lv:
                k += 1
                continue
            s = k  # a run [s, e] of needed intervals
            while k < K and d[k] >= lv:
                k += 1
            e = k - 1
            if b_start >= 0 and s - b_end - 1 <= lead + delete_cost:
                b_end = e  # the gap is short: the block holds through it
                continue
            if b_start >= 0:
                total += _hold(held, b_start, b_end, lead, mult)
                n_del += 1  # a later run follows, so this block ends before the last interval
            b_start = s
            b_end = e
        total += _hold(held, b_start, b_end, lead, mult)
        if b_end < K - 1:
            n_del += 1
        cost += mult * (float(total) + delete_cost * n_del)
    return held, cost


def milp_count_plan(demand: NDArray[np.int64], lead: int, delete_cost: float = DELETE_S / 60.0,
                    relax: bool = False) -> float:
    """The count problem of :func:`count_plan` as a MILP solved by HiGHS (``relax``: its LP relaxation); the
    optimal cost. Variables per interval k: held h_k, ordered c_k, deleted x_k (integers >= 0);
    h_k = h_{k-1} + c_k - x_k; ready_k = h_k - sum of c_j over the last ``lead`` - 1 intervals (j >= 1: the
    initial deployment is ready at once) >= demand_k; minimize sum h_k + ``delete_cost`` x sum x_k."""
    import highspy

    d = np.asarray(demand, dtype=float)
    K = d.size
    inf = highspy.kHighsInf
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("mip_rel_gap", 0.0)
    # columns: h_0..h_{K-1}, c_0..c_{K-1}, x_0..x_{K-1}
    for k in range(K):
        h.addVar(0.0, inf)
        h.changeColCost(k, 1.0)
    for _ in range(K):
        h.addVar(0.0, inf)
    for k in range(K):
        h.addVar(0.0, 0.0 if k == 0 else inf)
        h.changeColCost(2 * K + k, delete_cost)
    if not relax:
        for j in range(3 * K):
            h.changeColIntegrality(j, highspy.HighsVarType.kInteger)
    for k in range(K):
        idx = [k, K + k, 2 * K + k] + ([k - 1] if k > 0 else [])
        val = [1.0, -1.0, 1.0] + ([-1.0] if k > 0 else [])
        h.addRow(0.0, 0.0, len(idx), np.array(idx, dtype=np.int32), np.array(val))
        recent = [K + j for j in range(max(1, k - lead + 1), k + 1)]
        idx = [k, *recent]
        val = [1.0] + [-1.0] * len(recent)
        h.addRow(float(d[k]), inf, len(idx), np.array(idx, dtype=np.int32), np.array(val))
    h.run()
    return float(h.getInfo().objective_function_value)


def _at_target(need: NDArray[np.float64], rho: float) -> NDArray[np.int64]:
    """vPods to plan per interval for the fractional ``need`` at utilization target ``rho`` (rounded up)."""
    return np.ceil(need / rho - 1e-9).astype(np.int64)


# ----------------------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class GroupPlan:
    """One planned group: its key (phase, bucket edge), configuration id, target count per decision interval,
    and its planned demand (vPods needed ready per interval) and boot lead (intervals)."""

    key: tuple[str, int]
    config: int
    counts: NDArray[np.int64]
    demand: NDArray[np.int64]
    lead: int


@dataclass(frozen=True)
class HindsightPlan:
    """A candidate plan: its groups, the structure and utilization target it was planned with, and what the
    planning model predicts (J): static energy of the held vPods (deletion holds included) + dynamic energy."""

    groups: tuple[GroupPlan, ...]
    structure: tuple[str, str]
    utilization: tuple[float, float]
    planned_energy_j: float
    planned_static_j: float

    def targets(self, k: int) -> dict[tuple[str, int], dict[int, int]]:
        """The targets of decision interval ``k`` (every planned group, 0 where it holds no vPod)."""
        out: dict[tuple[str, int], dict[int, int]] = {}
        for g in self.groups:
            n = int(g.counts[min(k, g.counts.size - 1)])
            out[g.key] = {g.config: n} if n > 0 else {}
        return out


class _Planner:
    """The planning model of one episode (module docstring) on a fluid twin of ``sim`` (same settings, catalog
    and workload: its profile and routing shares; the twin is never advanced)."""

    def __init__(self, sim: NPUCluster) -> None:
        c = sim.config
        self.sim = sim
        # a separate twin (never advanced), so planning leaves the played simulator's caches untouched
        self.fl: FluidCluster = make_cluster(c, sim.workload, seed=0, catalog=sim.catalog,  # type: ignore[assignment]
                                             fidelity="fluid")
        prof = self.fl.profile
        self.dt = c.check_s
        self.K = max(math.ceil(sim.workload.duration_s / c.check_s - 1e-9), 1)
        per = round(c.check_s / prof.bin_s)
        nbin = self.K * per
        tok = np.zeros((nbin, 2, NB))
        m = min(nbin, prof.n_bins)
        tok[:m] = prof.tokens[:m]
        self.tok = tok.reshape(self.K, per, 2, NB) / prof.bin_s  # tokens/s per (interval, bin, phase, bucket)
        self.tok_total = tok.sum(axis=0)  # tokens per (phase, bucket) over the episode
        self.slo = (sim.slo_p, sim.slo_d)
        self.static_j = sim.cfg_static_w * c.check_s  # J per held vPod-interval
        self._parts: dict[tuple[int, float], list[tuple[int, int]]] = {}
        self._range_cache: dict[tuple[int, int, int], list[tuple[int, NDArray[np.float64], float]]] = {}

    def lead(self, cid: int) -> int:
        return max(math.ceil((CREATE_S[1] + float(self.sim.cfg_boot_s[cid])) / self.dt - 1e-9), 1)

    def per_vpod(self, phase: int, cid: int) -> NDArray[np.float64]:
        """vPods per token/s of each bucket on configuration ``cid`` (the capacity rule, module docstring)."""
        s = self.sim
        if phase == 0:
            return 1.0 / np.maximum(s.tps[cid, :, -1], 1e-300)
        return s.lat[cid, :, 0] / max(float(s.cfg_maxb[cid]), 1.0)

    def dyn_j(self, phase: int, cid: int) -> NDArray[np.float64]:
        """Dynamic J per token of each bucket on ``cid`` at its full-batch level."""
        s = self.sim
        return np.maximum(s.pow[cid, :, -1] - s.cfg_static_w[cid], 0.0) / np.maximum(s.tps[cid, :, -1], 1e-300)

    def need(self, phase: int, cid: int, rate: NDArray[np.float64]) -> NDArray[np.float64]:
        """vPods needed ready per interval at utilization 1 for the token rates ``rate`` (K, bins, NB) routed to
        the group (fractional)."""
        w = (rate * self.per_vpod(phase, cid)).sum(axis=2)  # (K, bins)
        return w.max(axis=1) if phase == 0 else w.mean(axis=1)

    def demand(self, phase: int, cid: int, rate: NDArray[np.float64], rho: float) -> NDArray[np.int64]:
        """vPods needed ready per interval for the token rates ``rate`` (K, bins, NB) routed to the group."""
        return _at_target(self.need(phase, cid, rate), rho)

    def dynamic_j(self, phase: int, cid: int, rate: NDArray[np.float64]) -> float:
        """Planned dynamic energy (J) of the token rates ``rate`` (K, bins, NB) on ``cid``."""
        return float((rate.mean(axis=1).sum(axis=0) * self.dyn_j(phase, cid)).sum()) * self.dt

    def configs(self, phase: int, top: int, members: list[int]) -> list[int]:
        """Configurations a group keyed at bucket ``top`` may run: its SLO-meeting candidates and fail-overs
        that serve every member bucket within its SLO at max batch (the DSE's criterion)."""
        s = self.sim
        ph, edge = PHASES[phase], int(s.edges[top])
        out = []
        for cid in [*s.candidates(ph, edge), *s.failovers(ph, edge)]:
            if cid not in out and bool(np.all(s.lat[cid, members, -1] <= self.slo[phase][members] + 1e-12)):
                out.append(cid)
        return out or list(s.candidates(ph, edge)[:1] or s.failovers(ph, edge)[:1])

    def group_cost(self, phase: int, cid: int, rate: NDArray[np.float64], rho: float
                   ) -> tuple[float, float, NDArray[np.int64], NDArray[np.int64]]:
        """(planned energy J, its static part, counts, demand) of one group on ``cid`` for ``rate``."""
        return self._cost(cid, self.demand(phase, cid, rate, rho), self.dynamic_j(phase, cid, rate))

    def _cost(self, cid: int, d: NDArray[np.int64], dyn: float
              ) -> tuple[float, float, NDArray[np.int64], NDArray[np.int64]]:
        # the count problem's kernel without count_plan's input checks: d is a fresh non-negative int64 array
        counts, held = _count_layers(d, self.lead(cid), DELETE_S / 60.0) if d.size else count_plan(d, 1)
        static = held * float(self.static_j[cid])
        return static + dyn, static, counts, d

    def partition(self, phase: int, rho: float) -> list[tuple[int, int]]:
        """The DP's grouping of the live buckets (exact routing): [(top bucket, config)], ascending."""
        if (phase, rho) not in self._parts:
            self._parts[(phase, rho)] = self._partition(phase, rho)
        return self._parts[(phase, rho)]

    def _partition(self, phase: int, rho: float) -> list[tuple[int, int]]:
        live = np.flatnonzero(self.tok_total[phase] > 0).tolist()
        if not live:
            return []
        n = len(live)
        best = np.full(n + 1, np.inf)
        best[0] = 0.0
        arg: list[tuple[int, int]] = [(0, -1)] * (n + 1)
        for j in range(1, n + 1):  # best[j]: the first j live buckets grouped
            for i in range(j):
                for cid, need, dyn in self._ranges(phase, live, i, j):
                    cst = best[i] + self._cost(cid, _at_target(need, rho), dyn)[0]
                    if cst < best[j]:
                        best[j], arg[j] = cst, (i, cid)
        out, j = [], n
        while j > 0:
            i, cid = arg[j]
            out.append((live[j - 1], cid))
            j = i
        return out[::-1]

    def _ranges(self, phase: int, live: list[int], i: int, j: int) -> list[tuple[int, NDArray[np.float64], float]]:
        """(config, need at utilization 1, dynamic J) of the group of the live buckets ``live[i:j]`` on each
        configuration it may run: what the DP costs a range with, kept across its utilization targets (the DP
        runs once per phase and target; only the rounding to vPods depends on the target)."""
        key = (phase, i, j)
        if key not in self._range_cache:
            members = live[i:j]
            rate = self.tok[:, :, phase, :]
            r = np.zeros_like(rate)
            r[:, :, members] = rate[:, :, members]
            self._range_cache[key] = [(cid, self.need(phase, cid, r), self.dynamic_j(phase, cid, r))
                                      for cid in self.configs(phase, live[j - 1], members)]
        return self._range_cache[key]

    def single(self, phase: int, rho: float) -> list[tuple[int, int]]:
        """One group per phase at the top live bucket, on its cheapest allowed configuration."""
        live = np.flatnonzero(self.tok_total[phase] > 0).tolist()
        if not live:
            return []
        rate = self.tok[:, :, phase, :]
        cands = self.configs(phase, live[-1], live)
        cid = min(cands, key=lambda c: self.group_cost(phase, c, rate, rho)[0])
        return [(live[-1], cid)]

    def plan(self, structure: tuple[str, str], rho_prefill: float, rho_decode: float) -> HindsightPlan:
        """The plan of ``structure`` (per phase) at the phases' utilization targets, decode re-planned on the
        real routing shares of its groups."""
        groups: list[GroupPlan] = []
        total = static = 0.0
        for phase in (0, 1):
            rho = (rho_prefill, rho_decode)[phase]
            parts = self.partition(phase, rho) if structure[phase] == "partition" else self.single(phase, rho)
            if not parts:
                continue
            tops = np.array([t for t, _ in parts], dtype=np.int64)
            rate = self.tok[:, :, phase, :]
            if phase == 0:
                route = np.minimum(np.searchsorted(tops, np.arange(NB), side="left"), tops.size - 1)
                share = np.zeros((NB, tops.size))
                share[np.arange(NB), route] = 1.0
            else:  # the simulator's decode routing shares (tokens of each total bucket -> each active group)
                f_tok = self.fl._decode_split(tops)[0]
                share = f_tok[:, tops]
            for gi, (top, cid) in enumerate(parts):
                e, s, counts, d = self.group_cost(phase, cid, rate * share[:, gi], rho)
                total += e
                static += s
                groups.append(GroupPlan((PHASES[phase], int(self.sim.edges[top])), cid, counts, d, self.lead(cid)))
        return HindsightPlan(tuple(groups), structure, (rho_prefill, rho_decode), total, static)


# ----------------------------------------------------------------------------------------- the policy
class _PlanPolicy:
    """Plays a fixed :class:`HindsightPlan` at every decision point (the run_policy protocol): every group's
    target at an epoch boundary, only the targets that change at the points between (targets are declarative,
    so this is the same fleet; the env's ``emergency_scaleouts`` counts those between-epoch changes)."""

    name = "hindsight"
    decides_between_epochs = True  # run_policy asks it at every decision point

    def __init__(self, plan: HindsightPlan) -> None:
        self.plan = plan
        self.last: dict[tuple[str, int], dict[int, int]] = {}

    def reset(self, sim: NPUCluster) -> None:
        self.sim = sim
        self.last = {}

    def decide(self, ctx: Observation) -> ScalingDecision:
        tgt = self.plan.targets(round(ctx.time_s / self.sim.config.check_s))
        out = tgt if ctx.at_epoch_boundary else {k: v for k, v in tgt.items() if self.last.get(k) != v}
        self.last = tgt
        return ScalingDecision(out)


def interval_costs(sim: NPUCluster, ideal_epoch: float, slo_penalty: float) -> NDArray[np.float64]:
    """The env's oracle-mode cost of each played decision interval (its share of minus the return): objective /
    the Ideal's mean epoch + ``slo_penalty`` x misses / arrivals per epoch (misses: finished requests that missed;
    the open ones already late at the end are added to the last interval, as the env's flows sum them)."""
    c = sim.config
    h = sim.history
    obj = np.array([float(m.energy_j.sum() if c.objective == "energy" else m.usd.sum()) for m in h])
    misses = np.array([float(m.slo_total - m.slo_met[2]) for m in h])
    misses[-1:] += float(sim.late_count())
    epochs = max(sim.workload.duration_s / c.epoch_s, 1.0)
    arrivals = max(float(np.searchsorted(sim.workload.requests.arrival_s, sim.now, side="left")), 1.0) / epochs
    return obj / max(ideal_epoch, 1e-12) + slo_penalty * misses / arrivals


def episode_cost(sim: NPUCluster, ideal_epoch: float, slo_penalty: float) -> float:
    """Minus the env's oracle-mode return of a played episode (:func:`interval_costs` summed)."""
    return float(interval_costs(sim, ideal_epoch, slo_penalty).sum())


def splice(plans: list[HindsightPlan], choice: NDArray[np.int64], per_epoch: int,
           static_j: NDArray[np.float64]) -> HindsightPlan:
    """One plan from ``plans`` (the same groups and configurations, different utilization targets): epoch e takes
    the demand of ``plans[choice[e]]``, and each group's counts are re-solved exactly on that demand (``static_j``:
    J per held vPod-interval of each configuration). Its utilization target reads NaN (per-epoch); its planned
    dynamic energy is the plans' own (the same groups serve the same tokens)."""
    groups = []
    static = 0.0
    for gi, g in enumerate(plans[0].groups):
        d = np.concatenate([plans[int(choice[e])].groups[gi].demand[e * per_epoch:(e + 1) * per_epoch]
                            for e in range(choice.size)])[: g.demand.size]
        counts, held = count_plan(d, g.lead)
        static += held * float(static_j[g.config])
        groups.append(GroupPlan(g.key, g.config, counts, d, g.lead))
    p0 = plans[0]
    return HindsightPlan(tuple(groups), p0.structure, (math.nan, p0.utilization[1]),
                         p0.planned_energy_j - p0.planned_static_j + static, static)


@dataclass
class HindsightPolicy:
    """The ``hindsight`` policy (module docstring): plans the candidates at ``reset``, plays each on a copy of the
    episode's simulator, keeps the best, and plays its targets at every decision point.

    The search (each distinct plan played once): every structure pair (prefill, decode) at every prefill
    utilization target of ``prefill_utilizations`` with decode at the first of ``decode_utilizations``; then the
    best one at the midpoints next to its prefill target; then at the other decode targets; then a splice: the
    played plans with the best one's groups and decode target, each epoch taking the prefill demand of the plan
    whose played epoch cost least (counts re-solved exactly on the spliced demand), kept if it plays better."""

    prefill_utilizations: tuple[float, ...] = PREFILL_UTILIZATIONS
    decode_utilizations: tuple[float, ...] = DECODE_UTILIZATIONS
    structures: tuple[str, ...] = STRUCTURES
    slo_penalty: float = 50.0
    name: str = "hindsight"
    decides_between_epochs: bool = True  # run_policy asks it at every decision point (its plan changes there)
    plan: HindsightPlan | None = None
    candidates: list[dict[str, Any]] = field(default_factory=list)  # every distinct plan played: its figures
    kept: dict[str, Any] = field(default_factory=dict)  # the row of ``candidates`` that was kept

    def __post_init__(self) -> None:
        for nm in ("prefill_utilizations", "decode_utilizations"):
            u = getattr(self, nm)
            if not u or not all(0.0 < x <= 1.0 for x in u):
                raise ConfigError(f"{nm} = {u!r}; allowed: a non-empty tuple of values in (0, 1]")
        if not self.structures:
            raise ConfigError(f"structures is empty; allowed: a non-empty subset of {', '.join(STRUCTURES)}")
        for s in self.structures:
            if s not in STRUCTURES:
                raise ConfigError(f"structures: {s!r} is unknown; allowed: {', '.join(STRUCTURES)}")
        check_range("slo_penalty", self.slo_penalty, 0.0, None)

    def reset(self, sim: NPUCluster) -> None:
        from servegym.baselines.npu import ideal_metrics, run_policy

        if sim.history or sim.now > 0:
            raise ConfigError("the hindsight policy plans on a fresh simulator (reset before the first advance)")
        self.sim = sim
        planner = _Planner(sim)
        c = sim.config
        ideal = ideal_metrics(sim)
        epochs = max(sim.workload.duration_s / c.epoch_s, 1.0)
        ideal_epoch = (ideal["energy_j"] if c.objective == "energy" else ideal["usd"]) / epochs
        hours = sim.workload.duration_s / 3600.0
        rng0 = sim.random_state()  # the episode's routing and creation-time draws: each copy replays them
        played: dict[tuple, tuple[float, HindsightPlan, NDArray[np.float64], dict[str, Any]]] = {}
        self.candidates = []
        best: list[Any] = [math.inf, None, None]

        def play(st: tuple[str, str], rp: float, rd: float, plan: HindsightPlan | None = None) -> None:
            plan = planner.plan(st, rp, rd) if plan is None else plan
            sig = tuple((g.key, g.config, g.counts.tobytes()) for g in plan.groups)
            if sig not in played:
                twin = make_cluster(c, sim.workload, seed=0, catalog=sim.catalog, fidelity=sim.fidelity)
                twin.set_random_state(rng0)
                summary = run_policy(twin, _PlanPolicy(plan), hours=hours)
                per = interval_costs(twin, ideal_epoch, self.slo_penalty)
                row = {"structure": list(st), "utilization": [rp, rd], "cost": float(per.sum()),
                       "planned_energy_j": plan.planned_energy_j, "played_energy_j": float(summary["energy_j"]),
                       "slo_violation_pct": float(summary["slo_violation_pct"])}
                played[sig] = (float(per.sum()), plan, per, row)
                self.candidates.append(row)
            if played[sig][0] < best[0]:
                best[:] = [played[sig][0], plan, (st, rp, rd)]
                self.kept = played[sig][3]

        pairs = [(a, b) for a in self.structures for b in self.structures]
        grid = sorted(self.prefill_utilizations, reverse=True)
        for st in pairs:
            for rp in grid:
                play(st, rp, self.decode_utilizations[0])
        st, rp, rd = best[2]
        i = grid.index(rp)
        for j in (i - 1, i + 1):  # refine the prefill target next to the best
            if 0 <= j < len(grid):
                play(st, 0.5 * (rp + grid[j]), rd)
        st, rp, rd = best[2]
        for rd2 in self.decode_utilizations[1:]:
            play(st, rp, rd2)
        # the splice: per epoch the prefill target whose played epoch cost least, among plans with the best's groups
        top: HindsightPlan = best[1]
        shape = [(g.key, g.config) for g in top.groups]
        same = [(p, per) for _, p, per, _ in played.values()
                if [(g.key, g.config) for g in p.groups] == shape and p.utilization[1] == top.utilization[1]
                and math.isfinite(p.utilization[0])]
        per_epoch = round(c.epoch_s / c.check_s)
        if len(same) > 1:
            n_ep = math.ceil(planner.K / per_epoch)
            cost = np.full((len(same), n_ep), 0.0)
            for i, (_, per) in enumerate(same):
                pad = np.zeros(n_ep * per_epoch)
                pad[:per.size] = per
                cost[i] = pad.reshape(n_ep, per_epoch).sum(axis=1)
            choice = np.argmin(cost, axis=0)
            if np.unique(choice).size > 1:
                play(top.structure, math.nan, top.utilization[1], splice([p for p, _ in same], choice, per_epoch,
                                                                              planner.static_j))
        self.plan = best[1]
        self._play = _PlanPolicy(self.plan)
        self._play.reset(sim)

    def decide(self, ctx: Observation) -> ScalingDecision:
        if self.plan is None:
            raise ConfigError("HindsightPolicy.decide before reset")
        return self._play.decide(ctx)
