"""Fluid NPU cluster: the request-level simulator's model at 60-s resolution with no per-request state.

:class:`FluidCluster` is :class:`~servegym.envs.npu.sim.cluster.NPUCluster` with the serving step replaced; the
decision points, vPod lifecycle (Table 3 overheads, quota, reconcile), routing map, monitor, observation and
step tables are the simulator's own, so Base, NeuScale and the env drive it unchanged. Per decision interval
(``check_s``) and vPod group the serving step computes, for all 96 groups at once (the fleet's aggregates in
numpy, :mod:`~servegym.envs.npu.sim.fluid_fleet`, cached while the fleet is steady; the traffic arithmetic in one
compiled loop, :func:`~servegym.envs.npu.sim.fluid_kernels.serve`):

* **Arrivals** from the workload's per-10-s bins (:mod:`~servegym.envs.npu.sim.fluid_profile`): prefill tokens
  and requests by input bucket, decode by total-length bucket, routed by the same length-to-group map;
  decode's misrouted share (1 - ``osl_accuracy``) goes uniformly to the active groups at or above the
  request's input bucket, and the part of a short-routed request beyond its migration point to its true
  group (the migration: at the next bucket boundary after the input when the re-estimate is right,
  ``osl_accuracy``, else at 2x the group's edge, as the request level's router), using each (input, total)
  bucket cell's mean lengths.
* **Prefill**: a token fluid per group. Work in vPod-seconds at the group's dominant configuration's
  best level (as the request level charges a job); the operating level is the smallest whose capacity
  (ready vPods, each for the share of the interval it is ready) covers backlog + arrivals; unserved
  work stays queued. Energy = busy share x step power + idle share x static power + static power of
  the vPods not ready.
* **Decode**: per group, the batch is the fixed point of Little's law: active jobs = tokens x TPOT(level)
  / interval, level = the batch level of active jobs per ready vPod; jobs beyond the batch slots wait.
  Admitted jobs stay in service across intervals (per group and bucket, one cohort per admission interval,
  its jobs' remaining tokens spread only by when they arrived, so a burst's jobs finish together,
  :func:`~servegym.envs.npu.sim.fluid_cohorts.decode_in_service`): as the request level decodes a job over
  output tokens x TPOT, an interval makes the tokens its jobs in service produce, stepped in the request
  level's sub-steps, each at the level of its own active jobs per ready vPod and charged that level's J/token;
  the vPods' idle share is at static power. (Serving every job's whole output in its arrival interval put a
  long OpenThoughts job's tokens, and the batch they ran at, in one interval: up to 11 % off the request
  level's energy; one level per interval at the mean batch missed the batch's steps as bursts leave: up to
  5 %.)
* **SLO**: TTFT = roofline latency at the operating level + the wait of an FCFS server at the group's
  utilization (Pollaczek-Khinchine mean, exponential tail; only where the largest level keeps up, else the
  job queue is the wait: each bin's arrivals priced at the capacity of the level chosen when they arrive,
  waiting jobs repriced at each ``check_s`` chunk's start, as the request level prices its jobs; at least the
  share of arrivals that wait out the rest of a long job in service), or the wait
  for the first ready vPod of a group; effective TPOT = TPOT + wait / output tokens, its miss share from the bucket's output-length
  distribution. Requests served from a backlog count as misses. A request misses if either does, the two paired
  per (input, total) length bucket cell (:meth:`FluidCluster._either_missed`).
* **Observed queues**: a prefill group's queue (what Base's and NeuScale's emergency scale-out read) is the TTFT
  job queue's waiting jobs less the last sub-step's arrivals, as the request level's; a decode group's its queued
  requests.

Its cross-check against the request-level simulator is ``benchmarks/npu_fluid_crosscheck.py``
(``benchmarks/results/npu_fluid_crosscheck.md``).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray
from servegym.envs.npu.sim import fluid_books as fb
from servegym.envs.npu.sim import fluid_kernels as fk
from servegym.envs.npu.sim.cluster import (
    LEVELS,
    NB,
    PHASES,
    VERSIONS,
    ClusterConfig,
    ConfigCatalog,
    EpochMetrics,
    NPUCluster,
)
from servegym.envs.npu.sim.fluid_fleet import fleet_view
from servegym.envs.npu.sim.fluid_profile import workload_profile
from servegym.envs.npu.sim.fluid_split import decode_split
from servegym.envs.npu.sim.pairwise_sums import pairwise_sum, row_sums
from servegym.envs.npu.sim.workloads import NPUWorkload

from servegym.errors import choice_error

FIDELITIES: tuple[str, ...] = ("fluid", "request")
"""Simulator modes: ``fluid`` (:class:`FluidCluster`, per-interval aggregates) or ``request`` (:class:`NPUCluster`,
every request)."""
_AR = np.arange(NB)
# decode cohorts in service per (group, bucket): one per admission interval; an OpenThoughts job spans up to ~17
# intervals at the request level, so more are rarely alive at once (a new one merges when all are taken)
N_COHORTS = 24
_NO_CAP3 = np.zeros((1, 1, 1))  # the kernel's per-bin capacity when the fleet is steady (unused then)


class FluidCluster(NPUCluster):
    """The fluid simulator (module docstring). Same constructor and decision-point API as :class:`NPUCluster`;
    ``seed`` drives creation times only (routing is in expectation); they come from the same boot-time streams
    as the request level's (:meth:`NPUCluster.boot_stream`), so a creation boots in the same time in both."""

    fidelity = "fluid"

    def __init__(self, config: ClusterConfig, workload: NPUWorkload, seed: int = 0,
                 catalog: ConfigCatalog | None = None) -> None:
        self._init_model(config, workload, seed, catalog)
        self.profile = workload_profile(workload, self.edges, config.rate_bin_s)
        self._init_fleet()
        self._fallback = np.array([(self.cand.get((("prefill", "decode")[g // NB], int(self.edges[g % NB]))) or [0])[0]
                                   for g in range(2 * NB)], dtype=np.int64)
        self._unlimited = all(np.isinf(q) for q in self.quota.values())  # no quota on any version
        # finite step tables: the serving kernel may skip the empty (group, bucket) cells (fluid_kernels.serve)
        self._finite_tables = bool(np.isfinite(self.lat).all() and np.isfinite(self.tps).all()
                                   and np.isfinite(self.pow / np.maximum(self.tps, 1e-300)).all())
        self._signature: tuple | None = None
        self._rec_at: tuple | None = None  # (now, fleet_version) of the last reconcile (_reconcile)
        self.targets_version = 0  # bumped whenever the targets' content changes
        self._tkey: tuple = ()
        self._fleet_cache: tuple | None = None
        # ((targets_version, ready key), act0, act1, gp, ready, (positive-target groups, ready groups)): _routes
        self._route_state: tuple | None = None
        self._counts_cache: tuple | None = None  # (ready key, ready / alive vPods and slots per group): observe
        self._held_cache: tuple | None = None  # ((fleet_version, vPods held), chips held per version)
        self._alive_cache: tuple | None = None  # (fleet_version, alive vPods per group)
        self._split_last: tuple | None = None  # (the active decode groups array, its _decode_split)
        self._by_config_cache: tuple | None = None  # (fleet_version, alive vPods per group and configuration)
        # ((fleet_version, ready count), ready count, ready groups, their set, (fleet_version, now) of the last count)
        self._ready_cache: tuple | None = None
        self._dom_tables: tuple | None = None  # (dominant configurations, their tps_best and latd): fluid_fleet.py
        self._dom_cache: tuple | None = None  # (targets_version, _dom_targets)
        # decode groups whose jobs in service (d_req rows) may be non-zero: jobs join a group's cohorts from its decode
        # queue (q_seg), which only routable groups receive, so a group outside them found empty with an empty queue
        # stays empty until it is routable again (_reroute_in_service)
        self._d_live = np.zeros(NB, dtype=bool)
        # fluid state: per phase, queued tokens and requests per (group bucket, request bucket)
        self.q_tok = np.zeros((2, NB, NB))
        self.q_req = np.zeros((2, NB, NB))
        self.q_job = np.zeros(NB)  # prefill job queue's waiting work per group, best-level vPod-s (ttft_misses)
        self.n_job = np.zeros(NB)  # its waiting jobs per group (ttft_misses)
        # the prefill queue the policies observe per group (jobs waiting longer than a sub-step): at the last
        # interval's end (row 0) and its largest at the interval's chunk ends (row 1; ttft_misses)
        self.q_obs = np.zeros((2, NB))
        self.n_act = np.zeros(NB)  # decode jobs in service per group at the interval's end
        # decode jobs in service (admitted, not finished making tokens): output tokens left and jobs per
        # (group bucket, request bucket, cohort), carried across intervals (fluid_cohorts.decode_in_service)
        self.d_tok = np.zeros((NB, NB, N_COHORTS))
        self.d_req = np.zeros((NB, NB, N_COHORTS))
        self.d_sp = np.zeros((NB, NB, N_COHORTS))  # width of a cohort's remaining tokens per job (uniform)
        self.q_seg = np.zeros((NB, NB))  # decode jobs queued (q_req[1] counts requests where they finish)
        self.arrived = 0.0
        self.finished = 0.0
        self._late = 0.0
        self._late_pd = (0.0, 0.0)
        # TTFT miss rate per input bucket, as of the last interval with arrivals in it (pairs TTFT and TPOT misses)
        self._p_rate = np.zeros(NB)
        self._pair_bufs = (np.empty(NB), np.empty(NB), np.empty(NB))  # serve's per-bucket outputs
        self._arr_bufs: dict[int, tuple[NDArray[np.float64], ...]] = {}  # _arrivals' arrays per count of profile bins
        # serve's per-group energy, busy energy, tokens, tokens x batch (96 each) and scalar results, read within a chunk
        self._chunk_bufs = (*(np.empty(2 * NB) for _ in range(4)), np.empty(fk.N_RES))
        self._route_cache: dict[tuple[int, ...], tuple[NDArray[np.float64], NDArray[np.float64]]] = {}
        # the request-level containers the env and policies may read, empty in this mode
        self.d_g = np.zeros(0, dtype=np.int64)
        self.d_active = np.zeros(0, dtype=bool)

    def _chunk_substeps(self, K: int) -> int:
        """Without a quota, the whole advance is one chunk (nothing waits for chips between decision points,
        and the chunk's per-bin arrivals keep the bursts); with one, ``check_s`` worth, as the request level."""
        if self._unlimited:
            return K
        return super()._chunk_substeps(K)

    # ------------------------------------------------------------------ per-request views for the oracle
    @property
    def bk_p(self) -> NDArray[np.int16]:
        """Input-length bucket of every request (the oracle's, :func:`~servegym.baselines.npu.ideal_metrics`)."""
        return self.profile.bk_p

    @property
    def bk_d(self) -> NDArray[np.int16]:
        """Total-length bucket of every request."""
        return self.profile.bk_d

    # ------------------------------------------------------------------ decisions
    def _reconcile(self) -> None:
        """:meth:`NPUCluster._reconcile`, skipped when it cannot change anything: a second one at the same instant
        with the same vPods and no :meth:`apply` since (a reconcile is idempotent at a fixed time: the first met every
        target the quota allowed and moved every orphaned queue), or the same targets as at the last one, no vPod gone
        or newly ready (so no orphaned queue), and no quota (so no creation waits for chips)."""
        if not self.targets_touched and self._rec_at == (self.now, self.fleet_version):
            return
        self._reconcile_changed()
        self._rec_at = (self.now, self.fleet_version)

    def _reconcile_changed(self) -> None:
        if self.targets_touched:  # only apply() sets targets: compare their content only after one
            self.targets_touched = False
            tkey = tuple((g, tuple(t.items())) for g, t in self.targets.items())
            if tkey != self._tkey:  # new targets: the fleet view (fluid_fleet.py) changes with them
                self._tkey = tkey
                self.targets_version += 1
        sig = (self.targets_version, self.v_group.size, self._ready_now()[0])
        if self._signature == sig and self._unlimited:
            return
        if self._unlimited and self._signature is not None and self._signature[0] == sig[0]:
            # the same targets as at the last reconcile, which met every target (no quota): since then only vPods
            # became ready or, their deletion over, were dropped (only a reconcile creates or deletes vPods), so the
            # alive ones still meet every target, nothing is to create or delete and the peak chips held cannot rise;
            # only the routes change
            self._reroute_orphans()  # moves queued work only: the vPods and so the signature stay as they are
        else:
            super()._reconcile()
            sig = (self.targets_version, self.v_group.size, self._ready_now()[0])
        self._signature = sig

    def _ready_now(self) -> tuple[int, NDArray[np.int64], set[int]]:
        """The vPods with ``v_ready <= now`` (deleting ones included) counted, and the groups with a ready, not
        deleting vPod (:meth:`_ready_groups`) as an array and a set; kept while the vPods (``fleet_version``) and the
        count stay the same (for fixed vPod arrays the ready ones are a threshold set of their ready times)."""
        hit = self._ready_cache
        at = (self.fleet_version, self.now)
        if hit is not None and hit[4] == at:  # counted at this instant for these vPods already (a step asks ~13 times)
            return hit[1], hit[2], hit[3]
        n = fb.ready_count(self.v_ready, self.now)
        key = (self.fleet_version, n)
        if hit is None or hit[0] != key:
            groups = fb.ready_groups(self.v_group, self.v_ready, self.v_gone, self.now, 2 * NB)
            groups.setflags(write=False)
            hit = (key, n, groups, set(groups.tolist()), at)
        else:
            hit = (*hit[:4], at)
        self._ready_cache = hit
        return hit[1], hit[2], hit[3]

    def held_chips(self) -> dict[str, float]:
        """:meth:`NPUCluster.held_chips` (its sums in one compiled pass, ``fluid_books.held_by_version``), kept while the
        vPods (``fleet_version``) and the ones held (a threshold set of their deletion ends, named by its count) stay
        the same (a new dict each call)."""
        key = (self.fleet_version, fb.count_after(self.v_gone, self.now))
        hit = self._held_cache
        if hit is None or hit[0] != key:
            held = fb.held_by_version(self.v_cfg, self.v_gone, self.now, self.cfg_ver, self.cfg_chips, len(VERSIONS))
            hit = self._held_cache = (key, {v: float(held[vi]) for vi, v in enumerate(VERSIONS)})
        return dict(hit[1])

    def _alive_counts(self) -> NDArray[np.float64]:
        """:meth:`NPUCluster._alive_counts`, kept per ``fleet_version`` (a copy each call)."""
        hit = self._alive_cache
        if hit is None or hit[0] != self.fleet_version:
            hit = self._alive_cache = (self.fleet_version, super()._alive_counts())
        return hit[1].copy()

    def _alive_by_config(self, live: NDArray[np.bool_]) -> dict[tuple[str, int], dict[int, int]]:
        """:meth:`NPUCluster._alive_by_config`, kept per ``fleet_version`` (the alive vPods change only with the vPod
        arrays; a copy each call, keys in the same order). ``live`` is the alive mask the caller has
        (``v_gone == inf``), which the compiled count reads from ``v_gone`` itself."""
        hit = self._by_config_cache
        if hit is None or hit[0] != self.fleet_version:
            # the alive vPods counted per (group, configuration) in one compiled pass, keys in order of first appearance
            ncfg = len(self.configs)
            keys, cnts = fb.alive_keys(self.v_group, self.v_cfg, self.v_gone, ncfg)
            cnt: dict[tuple[str, int], dict[int, int]] = {}
            for k, n in zip(keys.tolist(), cnts.tolist(), strict=True):
                g, cid = divmod(k, ncfg)
                cnt.setdefault((PHASES[g // NB], int(self.edges[g % NB])), {})[cid] = n
            hit = self._by_config_cache = (self.fleet_version, cnt)
        return {k: dict(v) for k, v in hit[1].items()}

    def _fleet_counts(self) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """:meth:`NPUCluster._fleet_counts` (in one compiled pass, ``fluid_books.fleet_counts``), kept while the vPods
        and the ready ones (:meth:`_ready_now`'s key) stay the same (copies each call)."""
        self._ready_now()
        key = self._ready_cache[0]
        hit = self._counts_cache
        if hit is None or hit[0] != key:
            hit = self._counts_cache = (key, fb.fleet_counts(self.v_group, self.v_cfg, self.v_ready, self.v_gone, self.now,
                                                             self.cfg_maxb, 2 * NB))
        return hit[1][0].copy(), hit[1][1].copy(), hit[1][2].copy()

    def _drop_gone(self, t: float) -> None:
        """:meth:`NPUCluster._drop_gone` with the usual case (no deletion ends by ``t``) counted in one call."""
        if fb.count_after(self.v_gone, t) < self.v_gone.size:
            super()._drop_gone(t)

    def _dom_targets(self) -> NDArray[np.int64]:
        """:meth:`NPUCluster._dom_targets`, kept while the targets' content (``targets_version``) stays the same (read
        only; only :meth:`apply` changes the targets, and it reconciles at once, which keeps the version current)."""
        hit = self._dom_cache
        if hit is None or hit[0] != self.targets_version:
            out = super()._dom_targets()
            out.setflags(write=False)
            hit = self._dom_cache = (self.targets_version, out)
        return hit[1]

    def _ready_groups(self) -> NDArray[np.int64]:
        return self._ready_now()[1]

    # ------------------------------------------------------------------ routing and queues
    def _routes(self) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.bool_]]:
        """The routable prefill and decode groups (bucket indices, :meth:`_active_groups`), the prefill route of
        every input bucket (:meth:`_route`) and which of the 96 groups have a ready vPod; kept while the targets
        (``targets_version``, current from a reconcile on) and the ready vPods (:meth:`_ready_now`) stay the same."""
        _, groups, ready = self._ready_now()
        key = (self.targets_version, self._ready_cache[0])
        hit = self._route_state
        if hit is None or hit[0] != key:
            # what the routes are made of: the groups with a positive target and the ready ones. New targets with the
            # same positive groups (a count changed) or a vPod created or deleted with the same groups ready (the
            # usual reconcile) leave them as they are: the same arrays, so the decode split's cache keeps hitting
            content = (frozenset(g for g, t in self.targets.items() if sum(t.values()) > 0), groups.tobytes())
            if hit is not None and hit[5] == content:
                hit = self._route_state = (key, *hit[1:])
            else:
                act0, act1 = self._active_groups(0, ready), self._active_groups(1, ready)
                is_ready = np.zeros(2 * NB, dtype=bool)
                is_ready[groups] = True
                hit = self._route_state = (key, act0, act1, self._route(0, _AR, act0), is_ready, content)
            self._d_live[hit[2]] = True
        return hit[1], hit[2], hit[3], hit[4]

    def _reroute_orphans(self) -> None:
        """Move the queued work of groups that left the length map to their route (as the request level does)."""
        routes = self._routes()
        found = fb.queue_orphans(self.q_req, routes[0], routes[1])  # both phases in one call (none moves often)
        for p in (0, 1):
            act = routes[p]
            orphan, any_orphan = found[2 * p], found[2 * p + 1]
            if not any_orphan:
                continue
            tok = self.q_tok[p][orphan].sum(axis=0)
            req = self.q_req[p][orphan].sum(axis=0)
            self.q_tok[p][orphan] = 0.0
            if p == 0:  # the moved tokens join the new group's token backlog, which bounds its job queue from below
                self.q_job[orphan] = 0.0
                self.n_job[orphan] = 0.0
                self.q_obs[:, orphan] = 0.0  # as the request level's queue: its jobs are the new group's now
            self.q_req[p][orphan] = 0.0
            to = self._route(p, _AR, act) - p * NB
            self.q_tok[p][to, _AR] += tok
            self.q_req[p][to, _AR] += req
            if p == 1:
                seg = self.q_seg[orphan].sum(axis=0)
                self.q_seg[orphan] = 0.0
                self.q_seg[to, _AR] += seg
        self._reroute_in_service()

    def _reroute_in_service(self) -> None:
        """Move the decode jobs in service on groups that left the length map and have no ready vPod to their
        route (the request level keeps an active job where a vPod of its group still serves it, and moves the
        rest)."""
        _, act, _, is_ready = self._routes()
        if act.size == 0:
            return
        # the cohorts of a group as one row (a view): any job in service there. Only the groups that may hold jobs
        # are scanned (an all-zero row is no orphan either way); those outside the routable ones are empty once this
        # returns, and stay so until routable again unless decode jobs queued there (q_seg) join them
        # (in one compiled call: fluid_books.in_service_orphans)
        orphan, any_orphan = fb.in_service_orphans(self.d_req.reshape(NB, -1), act, is_ready, self._d_live, self.q_seg)
        if not any_orphan:
            return
        tok = self.d_tok[orphan].sum(axis=0)
        req = self.d_req[orphan].sum(axis=0)
        sp = self.d_sp[orphan].max(axis=0)
        self.d_tok[orphan] = 0.0
        self.d_req[orphan] = 0.0
        self.d_sp[orphan] = 0.0
        to = self._route(1, _AR, act) - NB
        self.d_tok[to, _AR] += tok
        self.d_req[to, _AR] += req
        # a merged cohort keeps the wider spread, within what its mean allows
        self.d_sp[to, _AR] = np.minimum(np.maximum(self.d_sp[to, _AR], sp),
                                        2.0 * self.d_tok[to, _AR] / np.maximum(self.d_req[to, _AR], 1e-300))

    def _queue(self) -> NDArray[np.float64]:
        """Waiting jobs per group (96), as the request level's :meth:`NPUCluster._queue`: a prefill group's job queue
        less its last sub-step's arrivals (``q_obs[0]``, :func:`~servegym.envs.npu.sim.fluid_kernels.ttft_misses`),
        a decode group's queued requests (each row summed in numpy's order in one compiled call)."""
        return np.concatenate((self.q_obs[0], row_sums(self.q_req[1])))

    def _decode_split(self, act: NDArray[np.int64]) -> tuple[NDArray[np.float64], NDArray[np.float64],
                                                              NDArray[np.float64]]:
        """Per total-length bucket (rows), the share of its output tokens, of its requests (where they
        finish) and of its decode jobs (a migrated request is a job in its short group, making its first
        tokens, and another in its true group) served by each decode group (columns) under the active decode
        groups ``act``."""
        last = self._split_last
        if last is not None and last[0] is act:  # the same array from _routes: the same groups
            return last[1]
        key = tuple(act.tolist())
        hit = self._route_cache.get(key)
        if hit is not None:
            self._split_last = (act, hit)
            return hit
        tok, req, seg = decode_split(self.profile, self.edges, self.config.osl_accuracy, act)
        if len(self._route_cache) > 64:
            self._route_cache.clear()
        self._route_cache[key] = (tok, req, seg)
        self._split_last = (act, (tok, req, seg))
        return tok, req, seg

    # ------------------------------------------------------------------ dynamics
    def _arrivals(self, t0: float, t1: float) -> tuple[NDArray[np.float64], NDArray[np.float64], float,
                                                        NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """Arrivals in [t0, t1): requests and tokens per (phase, bucket), the arrived count at t1, and per
        profile bin overlapping the span: its start (s), its length within the span (s) and its prefill
        requests and tokens per input bucket."""
        prof = self.profile
        bs = prof.bin_s
        i0, i1 = int(t0 // bs), min(math.ceil(t1 / bs - 1e-9), prof.n_bins)
        if i0 >= i1:
            z = np.zeros((2, NB))
            return z, z.copy(), float(prof.cum_counts[-1]), np.array([t0]), np.array([t1 - t0]), np.zeros((1, 2, NB))
        nk = i1 - i0
        bufs = self._arr_bufs.get(nk)
        if bufs is None:  # the chunk's arrays, written in place each interval (read within it only)
            bufs = self._arr_bufs[nk] = (np.empty((2, NB)), np.empty((1, nk)), np.empty(nk), np.empty(nk),
                                         np.empty((nk, 2, NB)))
        cnt, w, k_start, k_len, k_pre = bufs
        arrived = fb.arrivals_into(prof.counts, prof.tokens, prof.cum_counts, bs, i0, i1, t0, t1, cnt, w[0], k_start,
                                   k_len, k_pre)
        # np.tensordot(w, tokens, axes=1) without its Python overhead: the same dot on the same (1, k) x (k, 2 NB) layout
        tok = np.dot(w, prof.tokens[i0:i1].reshape(nk, -1)).reshape(2, NB)
        return cnt, tok, arrived, k_start, k_len, k_pre

    def _monitor_bins(self, t0: float, t1: float) -> None:
        """The rate monitor's bins of [t0, t1) from the profile (one fancy assignment for the span's bins)."""
        c = self.config
        prof = self.profile
        nbin = round((t1 - t0) / c.rate_bin_s)
        if nbin <= 0:
            return
        start = self.bin_index % self.nbins_w
        k0 = int(t0 // prof.bin_s)
        if (prof.bin_s == c.rate_bin_s and t0 % prof.bin_s == 0.0 and start + nbin <= self.nbins_w
                and k0 + nbin <= prof.n_bins):
            # the usual span (whole profile bins, no wrap of the window, inside the trace): the same copy by slices
            self.bin_counts[start:start + nbin] = prof.counts[k0:k0 + nbin]
            self.bin_tokens[start:start + nbin] = prof.tokens[k0:k0 + nbin]
            self.bin_index += nbin
            return
        b = np.arange(nbin)
        i = (self.bin_index + b) % self.nbins_w
        k = ((t0 + b * c.rate_bin_s) // prof.bin_s).astype(np.int64)
        have = k < prof.n_bins
        if nbin > self.nbins_w:  # only the last nbins_w bins stay in the window (later ones overwrite earlier)
            i, k, have = i[-self.nbins_w:], k[-self.nbins_w:], have[-self.nbins_w:]
        self.bin_counts[i[have]] = prof.counts[k[have]]
        self.bin_tokens[i[have]] = prof.tokens[k[have]]
        self.bin_counts[i[~have]] = 0.0
        self.bin_tokens[i[~have]] = 0.0
        self.bin_index += nbin

    def _chunk(self, K: int, m: EpochMetrics) -> None:
        c = self.config
        T = K * c.substep_s
        t0 = self.now
        t1 = t0 + T
        G = 2 * NB
        cnt, tok, arrived, k_start, k_len, k_pre = self._arrivals(t0, t1)
        self._monitor_bins(t0, t1)
        self.next_req = round(arrived)
        # ---- the fleet over the interval (fluid_fleet.py: cached while it cannot change)
        fv = fleet_view(self, t0, t1)
        psa = fv.psa
        # ---- serving (fluid_kernels.serve): prefill fluid, TTFT misses, decode by Little's law, SLO shares
        cap3 = _NO_CAP3
        if not fv.steady:  # a vPod ready or deleted within the interval: each profile bin's own capacity
            cap3 = fb.bin_capacity(fv.vg, fv.serving, fv.vr, fv.tps_v, k_start, k_len, NB)
        f_tok, f_req, f_seg = self._decode_split(fv.act)
        prof = self.profile
        energy, e_busy, tokens, batch_tok, res = self._chunk_bufs
        util = np.empty(G)
        n_act = np.empty(NB)
        miss_pb, md_b, fin_b = self._pair_bufs
        fk.serve(T, c.substep_s, fv.steady, LEVELS, cnt, tok, k_len, k_pre, self.q_tok, self.q_req, fv.gp, fv.n_ready,
                 fv.psr, psa, fv.usd_ready, fv.slots, fv.unavail, fv.dom, fv.cap, cap3, fv.pbusy, fv.tps_best, fv.latd,
                 f_tok, f_req, f_seg, self.q_seg, self.lat, self.pow, self.pow_dyn, self.tps, self.cfg_levels, self.slo_p, self.slo_d,
                 prof.isl_m1, prof.isl_m2, prof.osl_cdf, self._finite_tables, self.d_tok, self.d_req, self.d_sp,
                 energy, e_busy, tokens, batch_tok, n_act, util, res, miss_pb, md_b, fin_b, c.check_s, self.q_job,
                 self.n_job, self.q_obs)
        self.n_act = n_act
        self.util = util
        # ---- the interval's totals per group and phase, and the peak queues (fluid_books.settle)
        acc = self.group_acc
        fb.settle(T, fv.usd_s, fv.chip_s, psa, tokens, batch_tok, energy, e_busy, acc["usd"], acc["chip_s"],
                  acc["static_j"], acc["tokens"], acc["batch_tok"], acc["energy_j"], acc["energy_busy_j"], res,
                  m.energy_j, m.usd, m.energy_busy_j, m.usd_busy, m.tokens, self.q_req, self.q_obs[1], self.peak_queue)
        # ---- requests finish with their decode; a request misses if its TTFT or its TPOT does (_either_missed)
        r = res.tolist()  # the scalars as Python floats (the same doubles; scalar arithmetic without numpy's)
        fin = r[fk.R_FIN]
        n_p = pairwise_sum(cnt[0], 0, NB)  # cnt[0].sum(), numpy's order
        rate_p = r[fk.R_MISS_P] / max(n_p, 1e-12) if n_p > 0 else (1.0 if r[fk.R_SERVED_P] > 0 else 0.0)
        rate_d = r[fk.R_MISS_D] / fin if fin > 0 else 0.0
        before = self.finished
        self.finished += fin
        m.finished += int(round(self.finished) - round(before))
        m.slo_total += fin
        met = m.slo_met
        met[0] += fin * (1.0 - rate_p)
        met[1] += fin * (1.0 - rate_d)
        met[2] += fin - self._either_missed(fin * rate_p, r[fk.R_MISS_D], cnt[0], miss_pb, md_b)
        if fin > 0:
            self.recent_slo = np.array([1.0 - rate_p, 1.0 - rate_d])
        self.n_finished = round(self.finished)
        lp, ld = r[fk.R_LATE_P], r[fk.R_LATE_D]
        self._late_pd = (lp, ld)
        self._late = lp + ld
        self.now = t1
        self._drop_gone(t1)
        self._reconcile()

    def _either_missed(self, miss_p: float, miss_d: float, n_p: NDArray[np.float64], miss_pb: NDArray[np.float64],
                       md_b: NDArray[np.float64]) -> float:
        """Finishing requests that miss their TTFT or their TPOT SLO, counted once, from ``miss_p`` TTFT and ``miss_d``
        TPOT misses among them. The request level counts a request once if it misses either, and the two misses are
        not independent across a group's requests: both depend on the request's lengths (a long prompt has the
        least TTFT slack and a long total lands in the slowest decode group; DeepSeek-V3 on LVEval, Base: every
        TTFT miss also misses TPOT). Within one (input bucket, total bucket) cell they are taken as independent:
        TTFT miss rate of the input bucket (``miss_pb`` / ``n_p``, the interval's arrivals, carried over while a
        bucket has none) x the cell's TPOT misses, the cells from the profile's input-given-total shares and the
        TPOT misses ``md_b`` per total bucket. The overlap is at most either count (requests, fluid)."""
        fb.carry_rates(self._p_rate, miss_pb, n_p)
        if miss_p == 0.0 or miss_d == 0.0:
            # the overlap, a sum of products of non-negative figures, is >= 0, so the min is that zero either way
            return miss_p + miss_d - 0.0
        both = float(md_b @ (self.profile.in_given_tot @ self._p_rate))
        return miss_p + miss_d - min(both, miss_p, miss_d)

    # ------------------------------------------------------------------ accounting
    def late_count(self) -> int:
        """Open requests already past their SLO (estimated from the queues)."""
        return round(self._late)

    def decode_jobs(self) -> NDArray[np.float64]:
        """Decode jobs in service per decode group (48) at the last interval's end."""
        return self.n_act.copy()

    def open_requests(self) -> NDArray[np.int64]:
        """The fluid keeps no request ids: always empty (see :meth:`counters` for the counts)."""
        return np.zeros(0, dtype=np.int64)

    def counters(self) -> dict[str, int]:
        """arrived, finished, queued (waiting for prefill or a decode slot) and in_flight requests (rounded)."""
        arrived = round(self.arrived if self.arrived > self.next_req else self.next_req)
        finished = round(self.finished)
        queued = round(float(self.q_req[0].sum()))
        return {"arrived": arrived, "finished": finished, "queued": min(queued, arrived - finished),
                "in_flight": max(arrived - finished - queued, 0)}

    def summary(self) -> dict[str, float]:
        """:meth:`NPUCluster.summary` with the open requests past their SLO estimated from the queues."""
        s = super().summary()
        met = np.zeros(3)
        tot = 0.0
        for h in self.history:
            met += h.slo_met
            tot += h.slo_total
        lp, ld = self._late_pd
        for key, i, late in (("ttft_violation_pct", 0, lp), ("tpot_violation_pct", 1, ld),
                             ("slo_violation_pct", 2, lp + ld)):
            n = tot + late
            s[key] = 100.0 * (1.0 - met[i] / n) if n else 0.0
        s["requests_finished"] = float(self.finished)
        s["requests_open"] = max(float(self.next_req) - self.finished, 0.0)
        return s


def make_cluster(config: ClusterConfig, workload: NPUWorkload, seed: int = 0, catalog: ConfigCatalog | None = None,
                 fidelity: str = "request") -> NPUCluster:
    """The simulator of ``fidelity`` (:data:`FIDELITIES`) for the same arguments as :class:`NPUCluster`."""
    if fidelity not in FIDELITIES:
        raise choice_error("fidelity", fidelity, FIDELITIES)
    cls = FluidCluster if fidelity == "fluid" else NPUCluster
    return cls(config, workload, seed=seed, catalog=catalog)
