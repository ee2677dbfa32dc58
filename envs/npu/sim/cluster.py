"""Cluster simulator of heterogeneous NPU autoscaling (paper §3.4, §4, §5.1): a model with decision points.

One loop, two drivers: ``sim = NPUCluster(config, workload, seed)``; at each decision point
``ctx = sim.observe()``; ``sim.apply(ScalingDecision(...))``; ``sim.advance(sim.config.check_s)``
(or ``advance_epoch()`` for one 5-min epoch). Baselines (``servegym.baselines.npu``) and the Gymnasium
env both drive this loop; neither holds a copy of the dynamics.

Model
-----
* **Groups.** One potential vPod group per (phase, sequence-length bucket) of the DSE (48 buckets
  per phase, §3.3); prefill and decode pools are separate (§5.1). A group may hold vPods of several
  configurations (its best fit and fail-overs of other versions, §3.4). A group is *active* when its
  target count is positive; requests of a bucket go to the smallest active group whose bucket edge
  is ≥ theirs (the largest active group otherwise) -- the sequence-length-to-group map that
  coalescing updates.
* **Routing.** Prefill by input length (known). Decode by predicted total length: with probability
  ``osl_accuracy`` (0.6) to the group of the true total length, otherwise to a random active group
  whose edge is ≥ the current length (§5.1). A request in a group whose edge is shorter than its
  total length migrates to its correct group when its context passes 2x the edge, or at the next
  bucket boundary when the re-estimate (correct with ``osl_accuracy``) exceeds 2x the edge (§3.4);
  the KV cache moves over the source vPod's DCN (chips x DCN bandwidth), and the migrated part joins
  the new group's queue after the first part's nominal decode time plus that transfer.
* **Overheads (Table 3).** A vPod is ready ``create`` (uniform 73-108 s) + weight download
  (bytes per chip / DCN bandwidth per chip) + engine start (31 s) + weight load (bytes per chip /
  24 GB/s) after it is requested; deleting holds its chips (and bills them) for 15 s.
* **Serving, in sub-steps of ``substep_s`` (5 s).** Step times and energies come from the roofline
  (:func:`~servegym.envs.npu.sim.roofline.evaluate`) precomputed per (configuration, bucket, batch level)
  so the inner loop is array lookups.
  The step tables charge the *scoring* model (:class:`~servegym.envs.npu.sim.roofline.RooflineParams`), while the
  configurations come from the *selection* model's DSE (``step_models``, :data:`STEP_MODELS`), as the paper
  chooses with XLA cost analysis and scores with its production simulator; the SLO is the scoring model's.
  - Prefill is a token fluid per group: capacity = sum over ready vPods of tokens/s at the operating
    batch level, which is the smallest level whose capacity covers backlog + arrivals (the largest
    feasible one when overloaded); FCFS. A job starts when the cumulative served tokens of its
    group reach the tokens queued ahead of it (only in sub-steps with capacity); TTFT = wait +
    roofline batch latency at its own length bucket and the operating level.
  - Decode is per job: a group admits waiting jobs FCFS while its ready vPods have free batch slots
    (sum of max batches); each active job advances one token per TPOT, where TPOT is the roofline
    latency of the group's dominant configuration at the job's length bucket and the per-vPod batch
    (active jobs / ready vPods, load balanced). Effective TPOT = (waits + decode time) / output tokens.
  - The decode pool sees a request at its arrival time rather than after its prefill (the two pools
    are scaled independently, §5.1; prefill takes well under one sub-step for most requests).
  - Energy: ready vPods draw roofline step power (energy / period: the chips' idle floor plus the compute, HBM
    and ICI energy above it, :mod:`~servegym.envs.npu.sim.roofline`) while busy and the idle floor
    (``static_power_frac`` x Table 2's whole-chip power at peak compute) while idle; vPods being created, started,
    loaded or deleted draw the idle floor (their chips are powered and reserved); chips in no vPod draw nothing. Cost: chips x USD/chip-hour for every second a vPod holds
    its chips (creation to the end of deletion).
* **SLO (§2.4).** Per request: TTFT ≤ the DSE SLO of its input-length bucket and effective TPOT ≤ the
  decode SLO of its total-length bucket. Requests unfinished at the end count as violations only once
  they are already past their SLO.
* **Quota** per chip version (chips, None = unlimited, the paper's default): the simulator never
  holds more; creations that do not fit wait until chips free (targets are declarative, reconciled
  at every decision point, in the decision's group order).

Granularity: 5-s sub-steps (decode jobs advance in fluid tokens within a sub-step), 60-s decision
points (emergency checks), 300-s epochs. A 24-hour replay takes 4.1-4.3 s wall on Azure (2.4 M
requests, 288 epochs) and 2.4-3.3 s on LVEval/OpenThoughts (Llama-3-70B, NeuScale or Base; wall = CPU
on the shared 2-core dev machine at load < 1; up to 23 s wall under load 5), within the 60-s budget,
whatever the BLAS thread count (per-group sums are np.bincount, not matrix products;
``benchmarks/npu_replay_speed.py``, ``benchmarks/results/npu_replay_speed.md``).

Differences from the paper's simulator: roofline step tables instead of a production NPU simulator per
request; fluid prefill and per-job decode at 5-s sub-steps rather than per-token events; the decode
pool sees requests at arrival; the KV transfer of a migration uses the source vPod's DCN bandwidth
(the paper fits a link model to Fig. 13, whose numbers are not public); request-attributed ("busy")
energy and cost are reported beside the whole-pool figures.
"""

from __future__ import annotations

import copy
from collections import Counter

import numpy as np

# the names this module has always exported (the simulator's public surface), re-exported from their modules
from servegym.envs.npu.sim.accounting import AccountingMixin
from servegym.envs.npu.sim.catalog import CHIPS, MODELS, VERSIONS, model
from servegym.envs.npu.sim.config import (
    CREATE_S,
    DELETE_S,
    ENGINE_START_S,
    FIT_AT,
    LEVELS,
    LOAD_GBPS_PER_CHIP,
    MAX_QUOTA_CHIPS,
    NB,
    STEP_MODELS,
    ClusterConfig,
)
from servegym.envs.npu.sim.dse import SEQ_BUCKETS, BestFit, BestFitTable, check_versions, run_dse
from servegym.envs.npu.sim.monitor_stats import window_stats
from servegym.envs.npu.sim.records import EpochMetrics, Observation, ScalingDecision
from servegym.envs.npu.sim.roofline import PHASES, RooflineParams, evaluate, space_for, weight_bytes_per_chip
from servegym.envs.npu.sim.routing import RoutingMixin
from servegym.envs.npu.sim.serving import ServingMixin, _group_sum
from servegym.envs.npu.sim.vpods import ConfigCatalog, VPodConfig
from servegym.envs.npu.sim.workloads import NPUWorkload

from servegym.errors import ActionError, ConfigError, check_range

__all__ = ["BOOT_STREAM", "CHIPS", "CREATE_S", "DELETE_S", "ENGINE_START_S", "FIT_AT", "LEVELS",
           "LOAD_GBPS_PER_CHIP", "MAX_QUOTA_CHIPS", "MODELS", "NB", "PHASES", "ROUTE_STREAM", "SEQ_BUCKETS",
           "STEP_MODELS", "VERSIONS", "BestFit",
           "BestFitTable", "ClusterConfig", "ConfigCatalog", "EpochMetrics", "NPUCluster", "NPUWorkload",
           "Observation", "RooflineParams", "ScalingDecision", "VPodConfig", "_group_sum", "check_versions",
           "evaluate", "model", "run_dse", "space_for", "weight_bytes_per_chip"]

ROUTE_STREAM = 0
"""Spawn key of the request level's routing stream (``SeedSequence(seed, spawn_key=(ROUTE_STREAM,))``)."""
BOOT_STREAM = 1
"""First spawn key of the boot-time streams (``SeedSequence(seed, spawn_key=(BOOT_STREAM, group, cid))``)."""
_TOTALS = ("energy_j", "usd", "tokens", "energy_busy_j", "usd_busy")  # the per-phase totals (``totals``' keys)


class NPUCluster(RoutingMixin, ServingMixin, AccountingMixin):
    """The simulator. ``seed`` drives routing and creation times and nothing else (the workload is given), from
    separate streams (:meth:`boot_stream`)."""

    def __init__(self, config: ClusterConfig, workload: NPUWorkload, seed: int = 0,
                 catalog: ConfigCatalog | None = None) -> None:
        self._init_model(config, workload, seed, catalog)
        c = self.config
        req = workload.requests
        self.arr = req.arrival_s
        self.isl = req.input_tokens
        self.osl = req.output_tokens
        tot = self.isl + self.osl
        self.bk_p = np.searchsorted(self.edges, np.minimum(self.isl, self.edges[-1]), side="left")
        self.bk_d = np.searchsorted(self.edges, np.minimum(tot, self.edges[-1]), side="left")
        # per-request outcomes
        self.ttft = np.full(self.n_req, np.nan)
        self.dec_time = np.zeros(self.n_req)
        self.jobs_left = np.zeros(self.n_req, dtype=np.int8)
        self.done_s = np.full(self.n_req, np.nan)
        self.started = np.zeros(self.n_req, dtype=bool)
        self._fresh_finished = np.zeros(0, dtype=np.int64)
        self._init_fleet()
        # prefill fluid state per group
        G = 2 * NB
        self.A = np.zeros(G)
        self.S = np.zeros(G)
        self.free_at = np.zeros(G)
        self.p_req = np.zeros(0, dtype=np.int64)
        self.p_g = np.zeros(0, dtype=np.int64)
        self.p_before = np.zeros(0)
        self.p_tok = np.zeros(0)
        self.p_arr = np.zeros(0)
        # decode jobs: waiting and active
        self.d_req = np.zeros(0, dtype=np.int64)
        self.d_g = np.zeros(0, dtype=np.int64)
        self.d_left = np.zeros(0)
        self.d_arr = np.zeros(0)
        self.d_bk = np.zeros(0, dtype=np.int64)
        self.d_active = np.zeros(0, dtype=bool)
        # jobs in service with a known finish (prefill) and migrations in transit
        self.c_req = np.zeros(0, dtype=np.int64)
        self.c_done = np.zeros(0)
        self.m_req = np.zeros(0, dtype=np.int64)
        self.m_g = np.zeros(0, dtype=np.int64)
        self.m_tok = np.zeros(0)
        self.m_t = np.zeros(0)
        self.m_bk = np.zeros(0, dtype=np.int64)
        self.m_delay = np.zeros(0)
        del c

    def _init_model(self, config: ClusterConfig, workload: NPUWorkload, seed: int,
                    catalog: ConfigCatalog | None) -> None:
        """Validated settings, workload, generator, catalog (step tables) and per-bucket SLOs (both fidelities)."""
        if not isinstance(config, ClusterConfig):
            raise ConfigError("config must be a ClusterConfig")
        if not isinstance(workload, NPUWorkload):
            raise ConfigError("workload must be an NPUWorkload (servegym.envs.npu.sim.workloads.make_workload)")
        self.config = c = config
        self.workload = workload
        self.seed = seed
        # Random streams of the scenario seed, one per purpose (SeedSequence spawn keys, independent of each other):
        # the request level's routing draws, and vPod boot times, one stream per (group, configuration) (boot_stream).
        # Boot times used to come from the routing stream, so the request level and the fluid (which routes in
        # expectation) drew different boot times for the same creation and their fleets diverged near saturation.
        self.route_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(ROUTE_STREAM,)))
        self.boot_rngs: dict[tuple[int, int], np.random.Generator] = {}
        self.model = model(c.model)
        cat = catalog if catalog is not None else ConfigCatalog(c)
        if cat.key != ConfigCatalog.key_of(c):
            raise ConfigError(f"catalog was built for {cat.key}, config needs {ConfigCatalog.key_of(c)}")
        self.catalog = cat
        self.__dict__.update(cat.fields)
        self.n_req = len(workload.requests)
        slo = self.table.slo_s
        self.slo_p = np.array([slo[("prefill", int(e))] for e in self.edges])
        self.slo_d = np.array([slo[("decode", int(e))] for e in self.edges])

    def _init_fleet(self) -> None:
        """vPods, targets, monitor and accounting at t = 0 (both fidelities)."""
        c = self.config
        self.next_req = 0
        self.now = 0.0
        self.n_finished = 0
        self.n_migrations = 0
        self.max_held = dict.fromkeys(VERSIONS, 0.0)  # peak chips held per version (quota checks)
        self.quota = {v: (np.inf if (c.quota_chips or {}).get(v) is None else float(c.quota_chips[v]))
                      for v in VERSIONS}
        # vPods (parallel lists, compacted when deleted ones expire)
        self.v_group = np.zeros(0, dtype=np.int64)
        self.v_cfg = np.zeros(0, dtype=np.int64)
        self.v_ready = np.zeros(0)
        self.v_gone = np.zeros(0)  # inf while not deleting; end of deletion otherwise
        self.fleet_version = 0  # bumped wherever the vPod arrays above change (the fluid's caches key on it)
        self.targets: dict[int, dict[int, int]] = {}
        self.targets_touched = False  # set by apply() (the fluid's reconcile reads and clears it)
        self.target_order: list[int] = []
        G = 2 * NB
        # monitor
        self.nbins_w = round(c.window_s / c.rate_bin_s)
        self.bin_counts = np.zeros((self.nbins_w, 2, NB))
        self.bin_tokens = np.zeros((self.nbins_w, 2, NB))
        self.bin_index = 0
        self.peak_queue = np.zeros(G)
        self.util = np.zeros(G)
        self.recent_slo = np.ones(2)
        self.history: list[EpochMetrics] = []
        self._epoch_acc: EpochMetrics | None = None
        # the totals per phase: rows of one block (in _TOTALS' order), so an advance adds its own in one operation
        self._totals = np.zeros((len(_TOTALS), 2))
        self.totals = dict(zip(_TOTALS, self._totals, strict=True))
        # per-group decomposition (index = phase x 48 + bucket of the group): tokens served, energy (J, idle
        # and booting vPods included), USD, chip-seconds held, busy (request-attributed) energy, the sum
        # of batch x tokens (realized batch = batch_tok / tokens) and the static energy of the chips held (J)
        self.group_acc = {k: np.zeros(G) for k in ("tokens", "energy_j", "usd", "chip_s", "energy_busy_j",
                                                   "batch_tok", "static_j")}

    # ------------------------------------------------------------------ random streams
    def boot_stream(self, group: int, cid: int) -> np.random.Generator:
        """The creation times (Table 3's uniform 73-108 s) of the vPods ``group`` creates on configuration ``cid``,
        in creation order: the n-th such vPod takes the stream's n-th draw at either fidelity, whatever the
        routing drew or other groups created (seeded by the scenario seed, group and configuration)."""
        rng = self.boot_rngs.get((group, cid))
        if rng is None:
            rng = self.boot_rngs[(group, cid)] = np.random.default_rng(
                np.random.SeedSequence(self.seed, spawn_key=(BOOT_STREAM, group, cid)))
        return rng

    def random_state(self) -> tuple[np.random.Generator, dict[tuple[int, int], np.random.Generator]]:
        """A copy of every random stream's state (routing, boot times), for :meth:`set_random_state`."""
        return copy.deepcopy((self.route_rng, self.boot_rngs))

    def set_random_state(self, state: tuple[np.random.Generator, dict[tuple[int, int], np.random.Generator]]) -> None:
        """Continue from ``state`` (:meth:`random_state`; copied, so one state can seed several simulators)."""
        self.route_rng, self.boot_rngs = copy.deepcopy(state)

    # ------------------------------------------------------------------ public helpers
    def group_index(self, phase: str, edge: int) -> int:
        if phase not in PHASES:
            raise ActionError(f"phase = {phase!r} is unknown; allowed: {', '.join(PHASES)}")
        if type(edge) is int:  # the usual key: a dict lookup gives np.searchsorted's index of an exact edge
            pos = self.__dict__.get("_edge_pos")
            if pos is None or pos[0] is not self.edges:
                first: dict[int, int] = {}
                for k, e in enumerate(self.edges.tolist()):
                    first.setdefault(int(e), k)  # np.searchsorted's side="left": the first equal edge
                pos = self._edge_pos = (self.edges, first)
            i = pos[1].get(edge)
            if i is not None:
                return PHASES.index(phase) * NB + i
        i = int(np.searchsorted(self.edges, edge))
        if i >= NB or int(self.edges[i]) != int(edge):
            raise ActionError(f"bucket = {edge!r} is not a sequence-length bucket edge; allowed: the DSE's 48 edges "
                              f"{int(self.edges[0])}..{int(self.edges[-1])}")
        return PHASES.index(phase) * NB + i

    def candidates(self, phase: str, edge: int) -> list[int]:
        """Config ids of a bucket's SLO-meeting Pareto candidates, best fit first."""
        self.group_index(phase, edge)
        return list(self.cand[(phase, int(edge))])

    def failovers(self, phase: str, edge: int) -> list[int]:
        """Config ids of each version's best fit for a bucket, most efficient (SLO-meeting) first."""
        self.group_index(phase, edge)
        return list(self.failover[(phase, int(edge))])

    def op_fit(self, phase: str, edge: int, tokens_per_s: float) -> int:
        """Config id of the bucket's best fit at the operating point for a forecast demand (tokens/s) -- the
        allocation with the lowest J/token (or USD/token) at the batch it would run, static power included
        (:mod:`servegym.envs.npu.sim.selection`); the DSE's best fit with ``fit_at = "best-batch"``."""
        self.group_index(phase, edge)
        picks = self.op_cfg.get((phase, int(edge)))
        if picks is None or picks.size == 0:
            return self.cand[(phase, int(edge))][0]
        from servegym.envs.npu.sim.selection import level_index

        return int(picks[level_index(tokens_per_s)])

    def max_rps(self, config_id: int, phase: str, edge: int, tokens_per_req: float) -> float:
        """T_pod: the most requests/s one vPod of ``config_id`` serves at its max batch for a bucket."""
        g = self.group_index(phase, edge)
        tpr = max(float(tokens_per_req), 1.0)
        j = int(self.jmax[config_id, g % NB])
        return float(self.tps[config_id, g % NB, j]) / tpr

    def held_chips(self) -> dict[str, float]:
        """Chips held per version now (creating, ready or deleting)."""
        cfg = self.v_cfg[self.v_gone > self.now]
        # chip counts are whole numbers, so the per-version sums are exact in any order
        held = np.bincount(self.cfg_ver[cfg], weights=self.cfg_chips[cfg], minlength=len(VERSIONS))
        return {v: float(held[vi]) for vi, v in enumerate(VERSIONS)}

    # ------------------------------------------------------------------ decisions
    def provision(self, decision: ScalingDecision) -> None:
        """Initial deployment at t = 0: like :meth:`apply` but the vPods are ready at once (the service
        exists before the replay starts); only allowed before the first :meth:`advance`."""
        if self.now > 0 or self.v_group.size:
            raise ActionError("provision() is only allowed before the first advance and on an empty cluster")
        self._instant = True
        try:
            self.apply(decision)
        finally:
            self._instant = False

    def apply(self, decision: ScalingDecision) -> None:
        """Set targets (validated in full before anything changes) and reconcile now."""
        if not isinstance(decision, ScalingDecision):
            raise ActionError("decision must be a ScalingDecision")
        parsed: list[tuple[int, dict[int, int]]] = []
        for key, mapping in decision.targets.items():
            if not (isinstance(key, tuple) and len(key) == 2):
                raise ActionError(f"target key {key!r} must be (phase, bucket_edge)")
            g = self.group_index(key[0], key[1])
            tgt: dict[int, int] = {}
            for cid, cnt in mapping.items():
                if not (isinstance(cid, (int, np.integer)) and 0 <= int(cid) < len(self.configs)):
                    raise ActionError(f"config id = {cid!r} is out of range; allowed: [0, {len(self.configs) - 1}]")
                if self.configs[int(cid)].phase != key[0]:
                    raise ActionError(f"config id = {cid} is a {self.configs[int(cid)].phase} configuration; "
                                      f"group {key} needs a {key[0]} one")
                if not (isinstance(cnt, (int, np.integer)) and 0 <= int(cnt) <= 100_000):
                    raise ActionError(f"count = {cnt!r} for config {cid} is out of range; allowed: [0, 100000]")
                if int(cnt) > 0:
                    tgt[int(cid)] = int(cnt)
            parsed.append((g, tgt))
        if parsed:
            self.targets_touched = True  # the fluid compares the targets' content at its next reconcile
        for g, tgt in parsed:
            self.targets[g] = tgt
            if g in self.target_order:
                self.target_order.remove(g)
        self.target_order = [g for g, _ in parsed] + self.target_order
        self._reconcile()

    def _reconcile(self) -> None:
        now = self.now
        # deletions first (creating ones before ready ones, newest first); the alive vPods counted per (group,
        # configuration) by one C-level count (a fleet under random actions holds hundreds: a Python pass listing
        # each one cost more than the rest of the step), their indices gathered only where a target asks for fewer
        idx = np.flatnonzero(self.v_gone == np.inf)
        key = self.v_group[idx] * len(self.configs) + self.v_cfg[idx]
        alive_at: dict[int, dict[int, int]] = {}  # alive vPods per group and configuration
        for k, n in Counter(key.tolist()).items():
            g, cid = divmod(k, len(self.configs))
            alive_at.setdefault(g, {})[cid] = n
        for g, tgt in self.targets.items():
            have = alive_at.get(g)
            if not have:
                continue
            for cid in sorted(have):
                extra = have[cid] - tgt.get(cid, 0)
                if extra > 0:
                    mine = idx[key == g * len(self.configs) + cid]  # in index order
                    order = mine[np.lexsort((-self.v_ready[mine], self.v_ready[mine] <= now))]
                    self.v_gone[order[:extra]] = now + DELETE_S
                    self.fleet_version += 1
        held = self.held_chips()
        new_g: list[int] = []
        new_c: list[int] = []
        new_r: list[float] = []
        made: dict[tuple[int, int], int] = {}  # vPods created below per (group, configuration)
        for g in self.target_order:
            tgt = self.targets.get(g, {})
            have_g = alive_at.get(g, {})
            for cid, cnt in tgt.items():
                # alive (not deleting) now: the deletions above kept at most the target of each configuration
                have = min(have_g.get(cid, 0), cnt) + made.get((g, cid), 0)
                ver = self.configs[cid].version
                if self.quota[ver] == np.inf:  # every one fits (held chips stay finite)
                    k = max(cnt - have, 0)
                else:  # the new vPods that fit the quota, one by one
                    k = 0
                    for _ in range(cnt - have):
                        if held[ver] + self.cfg_chips[cid] > self.quota[ver]:
                            break
                        held[ver] += self.cfg_chips[cid]
                        k += 1
                if k == 0:
                    continue
                new_g += [g] * k
                new_c += [cid] * k
                made[(g, cid)] = made.get((g, cid), 0) + k
                # their boot times in one draw: the same values, in the same order, as k draws of one
                boot = self.boot_stream(g, cid).uniform(*CREATE_S, size=k) + self.cfg_boot_s[cid]
                new_r += [now] * k if getattr(self, "_instant", False) else (now + boot).tolist()
        if new_g:
            self.v_group = np.concatenate([self.v_group, new_g]).astype(np.int64)
            self.v_cfg = np.concatenate([self.v_cfg, new_c]).astype(np.int64)
            self.v_ready = np.concatenate([self.v_ready, new_r])
            self.v_gone = np.concatenate([self.v_gone, np.full(len(new_g), np.inf)])
            self.fleet_version += 1
        held_now = self.held_chips()
        for v in VERSIONS:
            self.max_held[v] = max(self.max_held[v], held_now[v])
        self._reroute_orphans()

    # ------------------------------------------------------------------ observation
    def at_epoch_boundary(self) -> bool:
        """Whether ``now`` is an epoch boundary (the ``at_epoch_boundary`` of :meth:`observe`)."""
        c = self.config
        return abs(self.now / c.epoch_s - round(self.now / c.epoch_s)) < 1e-9

    def peak_queue_now(self) -> np.ndarray:
        """The ``peak_queue`` (2 x 48 groups) :meth:`observe` would report now, without observing."""
        return np.maximum(self.peak_queue, self._queue()).reshape(2, NB)

    def skip_observation(self) -> None:
        """For a decision point that needs no :class:`Observation` (an emergency check that cannot act,
        :func:`~servegym.baselines.npu.emergency_possible`): the one effect :meth:`observe` has on the
        simulator, the restart of the peak-queue window."""
        self.peak_queue = np.zeros(2 * NB)

    def _fleet_counts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per group (96) now: ready and alive (not deleting) vPods and the ready ones' batch slots (new arrays)."""
        live = self.v_gone == np.inf
        ready = live & (self.v_ready <= self.now)
        G = 2 * NB
        return (np.bincount(self.v_group[ready], minlength=G).astype(float),
                np.bincount(self.v_group[live], minlength=G).astype(float),
                np.bincount(self.v_group[ready], weights=self.cfg_maxb[self.v_cfg[ready]], minlength=G))

    def _alive_by_config(self, live: np.ndarray) -> dict[tuple[str, int], dict[int, int]]:
        """Alive vPods per (phase, edge) and configuration (``live``: the alive mask), counted at C level (keys in
        order of first appearance in index order, as a pass over the vPods would insert them); a new dict."""
        cnt: dict[tuple[str, int], dict[int, int]] = {}
        ncfg = len(self.configs)
        for k, n in Counter((self.v_group[live] * ncfg + self.v_cfg[live]).tolist()).items():
            g, cid = divmod(k, ncfg)
            cnt.setdefault((PHASES[g // NB], int(self.edges[g % NB])), {})[cid] = n
        return cnt

    def observe(self) -> Observation:
        c = self.config
        nb_epoch = round(c.epoch_s / c.rate_bin_s)
        # the last epoch's bins, newest first, and the window's sums and maxima in one compiled pass (monitor_stats)
        toks, recent, tpr, rate_peak, epoch_peak = window_stats(self.bin_counts, self.bin_tokens, self.bin_index,
                                                                nb_epoch, c.rate_bin_s, c.epoch_s)
        live = self.v_gone == np.inf
        G = 2 * NB
        n_ready, n_alive, slots = self._fleet_counts()
        queue = self._queue()
        cnt = self._alive_by_config(live)
        held = self.held_chips()
        ctx = Observation(
            time_s=self.now, epoch=int(self.now // c.epoch_s),
            at_epoch_boundary=self.at_epoch_boundary(),
            bucket_edges=self.edges.copy(), rate_recent=recent, rate_peak=rate_peak,
            epoch_peak=epoch_peak, tokens_per_req=tpr,
            ready=n_ready.reshape(2, NB), alive=n_alive.reshape(2, NB), queue=queue.reshape(2, NB),
            peak_queue=np.maximum(self.peak_queue, queue).reshape(2, NB), slots=slots.reshape(2, NB),
            util=self.util.reshape(2, NB).copy(), slo_recent=self.recent_slo.copy(), counts=cnt,
            targets={(PHASES[g // NB], int(self.edges[g % NB])): dict(t) for g, t in self.targets.items() if t},
            quota_left={v: self.quota[v] - held[v] for v in VERSIONS},
            epoch_token_bins=toks,
        )
        self.peak_queue = np.zeros(G)
        return ctx

    # ------------------------------------------------------------------ dynamics
    def advance_epoch(self) -> EpochMetrics:
        """Advance one epoch (``epoch_s``) without intermediate decisions; returns its metrics."""
        return self.advance(self.config.epoch_s)

    def _chunk_substeps(self, K: int) -> int:
        """Sub-steps per serving chunk of an advance of ``K`` sub-steps: ``check_s`` worth, so the rate monitor
        and reconcile happen at a steady cadence."""
        return round(self.config.check_s / self.config.substep_s)

    def _alive_counts(self) -> np.ndarray:
        """vPods alive (not deleting) per group now, (2, 48) floats (a new array)."""
        live = self.v_gone == np.inf
        return np.bincount(self.v_group[live], minlength=2 * NB).reshape(2, NB).astype(float)

    def advance(self, duration_s: float) -> EpochMetrics:
        """Advance ``duration_s`` (a multiple of ``substep_s``); returns the totals of that span."""
        c = self.config
        check_range("duration_s", duration_s, c.substep_s, None)
        K = round(duration_s / c.substep_s)
        if abs(K * c.substep_s - duration_s) > 1e-9:
            raise ConfigError(f"duration_s = {duration_s:g} must be a multiple of substep_s = {c.substep_s:g}")
        self._reconcile()
        t0 = self.now
        span = np.zeros((len(_TOTALS), 2))  # the span's totals (_TOTALS' order), added to the run's block at the end
        m = EpochMetrics(t0, t0 + duration_s, span[0], span[1], span[2], 0, np.zeros(3), 0.0, np.zeros((2, NB)),
                         span[3], span[4])
        kc = self._chunk_substeps(K)
        done = 0
        while done < K:
            k = min(kc, K - done)
            self._chunk(k, m)
            done += k
        m.alive = self._alive_counts()
        self._totals += span  # every total's own sum, element by element (the rows are the totals' arrays)
        self.history.append(m)
        return m
