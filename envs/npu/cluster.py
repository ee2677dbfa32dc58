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
  (:func:`~servegym.envs.npu.roofline.evaluate`) precomputed per (configuration, bucket, batch level)
  so the inner loop is array lookups.
  The step tables charge the *scoring* model (:class:`~servegym.envs.npu.roofline.RooflineParams`), while the
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
  - Energy: ready vPods draw roofline step power (energy / period) while busy and static power
    (``static_power_frac`` x peak-compute power per chip) while idle; vPods being created, started,
    loaded or deleted draw static power. Cost: chips x USD/chip-hour for every second a vPod holds
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from servegym.envs.npu.catalog import CHIPS, MODELS, VERSIONS, model
from servegym.envs.npu.dse import SEQ_BUCKETS, BestFit, BestFitTable, check_versions, run_dse
from servegym.envs.npu.roofline import PHASES, RooflineParams, evaluate, space_for, weight_bytes_per_chip
from servegym.envs.npu.workloads import NPUWorkload

from servegym.errors import WEEK_S, ActionError, ConfigError, check_range
from servegym.names import resolve

#: Most chips a version's quota may hold (the paper's cluster has hundreds; a quota is a count of chips).
MAX_QUOTA_CHIPS = 1_000_000
CREATE_S: tuple[float, float] = (73.0, 108.0)
"""Table 3: create a vPod instance, 73-108 s (drawn uniformly)."""
DELETE_S = 15.0
"""Table 3: delete a vPod instance, ~15 s."""
ENGINE_START_S = 31.0
"""Table 3: NPU runtime and LLM serving engine start-up, ~31 s."""
LOAD_GBPS_PER_CHIP = 24.0
"""Table 3: load weights to the chips, 24 GB/s per chip (PCIe 4.0 x16)."""
LEVELS = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], dtype=np.int64)
"""Batch levels of the precomputed step tables (clipped to each configuration's max batch)."""
NB = len(SEQ_BUCKETS)
FIT_AT: tuple[str, ...] = ("best-batch", "operating")
"""``ClusterConfig.fit_at``: ``best-batch`` (default) -- the DSE's best fits at their best batch; ``operating`` -- the
catalog also holds each bucket's best fit at the batch its group runs at a forecast demand, static power and
collectives included (:mod:`servegym.envs.npu.selection`), NeuScale chooses among those by its window's peak
demand and Base by the trace's peak for the largest length, and coalescing only moves requests onto a vPod that
is not a worse fit for them. Not the default: on the focal scenario it makes NeuScale worse (the short-prompt
groups' picks alternate between near-equal allocations, recreating vPods; ``npu_ablation.md``)."""
STEP_MODELS: tuple[str, ...] = ("paper", "paper-hop", "scoring", "legacy")
"""``ClusterConfig.step_models``: ``paper`` (default) chooses configurations with the selection model (the FLOP/HBM
roofline of §3.3, :meth:`RooflineParams.selection`) and charges them with the scoring model (the full step cost,
:class:`RooflineParams`), as the paper chooses with XLA cost analysis and scores with its production simulator
(§4); ``paper-hop`` is ``paper`` with the earlier scoring model's collectives (a fixed launch cost plus 1 µs per
torus hop, :meth:`RooflineParams.hop`) instead of ring collectives whose latency grows with the group;
``scoring`` chooses with the scoring model too (the ablation); ``legacy`` uses servegym's single model from
before the two-model split (:meth:`RooflineParams.legacy`) for both."""


def _group_sum(g: np.ndarray, x: np.ndarray, n_groups: int) -> np.ndarray:
    """Sum the rows of ``x`` (shape (V, ...)) by group ``g`` (V ints in [0, n_groups)): (n_groups, ...)."""
    if g.size == 0:  # no vPods at all (e.g. a policy that provisioned nothing for an empty first window)
        return np.zeros((n_groups, *x.shape[1:]))
    flat = x.reshape(g.size, -1)
    width = flat.shape[1]
    idx = (g[:, None] * width + np.arange(width)[None, :]).ravel()
    out = np.bincount(idx, weights=flat.ravel(), minlength=n_groups * width)
    return out.reshape((n_groups, *x.shape[1:]))


@dataclass(frozen=True)
class ClusterConfig:
    """Simulator settings. Times in s; ``quota_chips``: chips per version (absent/None = unlimited).

    ``versions``: chip versions the DSE explores (leaving NPU-C or NPU-D out also changes the SLO, which
    §2.4 sets on whichever of them is faster). ``phase_versions``: chip versions each phase's vPods may use, e.g.
    ``{"prefill": ("NPU-D",), "decode": ("NPU-C",)}`` for the paper's "expert choice" mix (§5.4,
    Fig. 24); a phase not listed may use all of ``versions``; None (default) restricts nothing. Unlike
    ``versions`` it keeps the SLO of the full exploration, so clusters of different version mixes are
    judged against the same SLO: best fits, Pareto candidates and fail-overs are chosen among the
    listed versions only (:meth:`BestFitTable.best_of`).
    """

    model: str = "Llama-3-70B"
    objective: str = "energy"
    slo_factor: float = 5.0
    epoch_s: float = 300.0
    window_s: float = 1800.0
    check_s: float = 60.0
    substep_s: float = 5.0
    rate_bin_s: float = 10.0
    osl_accuracy: float = 0.6
    quota_chips: Mapping[str, int] | None = None
    versions: tuple[str, ...] = VERSIONS
    n_candidates: int = 4
    phase_versions: Mapping[str, Sequence[str]] | None = None
    step_models: str = "paper"
    fit_at: str = "best-batch"

    def __post_init__(self) -> None:
        # one canonical spelling (servegym.names): "llama3-70b" and "Llama-3-70B" are the same cluster
        object.__setattr__(self, "model", MODELS.resolve(self.model))
        if isinstance(self.versions, (tuple, list)):
            object.__setattr__(self, "versions", tuple(resolve(v, VERSIONS, "versions") for v in self.versions))
        if isinstance(self.quota_chips, Mapping):
            object.__setattr__(self, "quota_chips", {resolve(v, VERSIONS, "quota_chips key"): q
                                                     for v, q in self.quota_chips.items()})
        check_range("slo_factor", self.slo_factor, 1.0, 1000.0)
        # §4's loop runs 5-s sub-steps, 60-s checks, 5-min epochs over a 30-min window: a day per epoch and a
        # week per window are far beyond it and keep the per-epoch sub-step count bounded
        check_range("substep_s", self.substep_s, 0.5, 60.0)
        check_range("check_s", self.check_s, self.substep_s, 3600.0)
        check_range("epoch_s", self.epoch_s, self.check_s, 86_400.0)
        check_range("window_s", self.window_s, self.epoch_s, WEEK_S)
        check_range("rate_bin_s", self.rate_bin_s, 1.0, self.epoch_s)
        check_range("osl_accuracy", self.osl_accuracy, 0.0, 1.0)
        check_range("n_candidates", self.n_candidates, 1, 16)
        if self.fit_at not in FIT_AT:
            raise ConfigError(f"fit_at = {self.fit_at!r} is unknown; allowed: {', '.join(FIT_AT)}")
        if self.step_models not in STEP_MODELS:
            raise ConfigError(f"step_models = {self.step_models!r} is unknown; allowed: {', '.join(STEP_MODELS)}")
        for name, s in (("check_s", self.check_s), ("epoch_s", self.epoch_s), ("window_s", self.window_s)):
            if abs(s / self.substep_s - round(s / self.substep_s)) > 1e-9:
                raise ConfigError(f"{name} = {s:g} must be a multiple of substep_s = {self.substep_s:g}")
        if abs(self.epoch_s / self.check_s - round(self.epoch_s / self.check_s)) > 1e-9:
            raise ConfigError(f"epoch_s = {self.epoch_s:g} must be a multiple of check_s = {self.check_s:g}")
        if abs(self.epoch_s / self.rate_bin_s - round(self.epoch_s / self.rate_bin_s)) > 1e-9:
            raise ConfigError(f"epoch_s = {self.epoch_s:g} must be a multiple of rate_bin_s = {self.rate_bin_s:g}")
        if not self.versions or any(v not in VERSIONS for v in self.versions):
            raise ConfigError(f"versions = {self.versions!r}; allowed: a non-empty subset of {', '.join(VERSIONS)}")
        for v, q in (self.quota_chips or {}).items():
            if v not in VERSIONS:
                raise ConfigError(f"quota_chips key {v!r} is unknown; allowed: {', '.join(VERSIONS)}")
            if q is not None:
                check_range(f"quota_chips[{v}]", q, 0, MAX_QUOTA_CHIPS)
        if self.phase_versions is not None:
            if not isinstance(self.phase_versions, Mapping):
                raise ConfigError(f"phase_versions = {self.phase_versions!r}; allowed: None or a mapping "
                                  f"phase ({', '.join(PHASES)}) -> chip versions")
            for ph, vs in self.phase_versions.items():
                if ph not in PHASES:
                    raise ConfigError(f"phase_versions key {ph!r} is unknown; allowed: {', '.join(PHASES)}")
                # a subset of the explored versions: the others have no DSE entries to run
                check_versions(f"phase_versions[{ph!r}]", vs, self.versions)

    def step_params(self) -> tuple[RooflineParams, RooflineParams]:
        """(selection, scoring) step models of ``step_models`` (see :data:`STEP_MODELS`)."""
        if self.step_models == "paper":
            return RooflineParams.selection(), RooflineParams()
        if self.step_models == "paper-hop":
            return RooflineParams.selection(), RooflineParams.hop()
        if self.step_models == "scoring":
            return RooflineParams(), RooflineParams()
        return RooflineParams.legacy(), RooflineParams.legacy()

    def allowed_versions(self, phase: str) -> tuple[str, ...]:
        """Chip versions ``phase``'s vPods may use (``phase_versions[phase]``, else all of ``versions``)."""
        pv = self.phase_versions or {}
        return tuple(pv[phase]) if phase in pv else tuple(self.versions)


@dataclass(frozen=True)
class VPodConfig:
    """A vPod configuration the simulator can run: a DSE entry (allocation + max batch) of one phase."""

    id: int
    phase: str
    entry: BestFit

    @property
    def version(self) -> str:
        return self.entry.version

    @property
    def chips(self) -> int:
        return self.entry.chips

    @property
    def max_batch(self) -> int:
        return self.entry.batch

    @property
    def label(self) -> str:
        return f"{self.entry.label}_b{self.entry.batch}"


@dataclass(frozen=True)
class ScalingDecision:
    """Declarative per-group targets: ``targets[(phase, bucket_edge)] = {config id: vPod count}``.

    Groups not listed keep their targets; a listed group's configurations not in its mapping go to 0.
    Creation order (under a quota) follows the order of ``targets``.
    """

    targets: Mapping[tuple[str, int], Mapping[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Observation:
    """What a policy (or agent) sees at a decision point. Arrays are (2 phases, 48 buckets).

    Rates in req/s by bucket of the requests' lengths (prefill: input; decode: total), from the
    monitor: ``rate_recent`` over the last epoch, ``rate_peak`` the peak ``rate_bin_s`` rate over the
    window, ``epoch_peak`` the peak over the last epoch; ``tokens_per_req`` the mean prefill (input)
    or decode (output) tokens per request of the bucket over the window (0 when none). Group arrays
    (index = the group's bucket): ``ready``/``alive`` vPod counts, ``queue`` waiting jobs now,
    ``peak_queue`` the peak since the previous decision point, ``slots`` the summed max batch of
    ready vPods, ``util`` busy fraction over the last check interval. ``counts[(phase, edge)]`` maps
    config id -> vPods alive (not being deleted). ``quota_left`` chips per version (inf: unlimited).
    ``epoch_token_bins`` (bins of the last epoch x 2 x 48): the monitor's time series of tokens arrived
    per ``rate_bin_s`` bin and bucket (newest first), from which a policy takes the peak of a *group's*
    aggregate rate (§3.4: "the peak request rate ... that would be served by this group"); None when
    not available (a hand-built observation), which policies read as "bucket peaks coincide".
    """

    time_s: float
    epoch: int
    at_epoch_boundary: bool
    bucket_edges: np.ndarray
    rate_recent: np.ndarray
    rate_peak: np.ndarray
    epoch_peak: np.ndarray
    tokens_per_req: np.ndarray
    ready: np.ndarray
    alive: np.ndarray
    queue: np.ndarray
    peak_queue: np.ndarray
    slots: np.ndarray
    util: np.ndarray
    slo_recent: np.ndarray
    counts: dict[tuple[str, int], dict[int, int]]
    targets: dict[tuple[str, int], dict[int, int]]
    quota_left: dict[str, float]
    epoch_token_bins: np.ndarray | None = None


@dataclass
class EpochMetrics:
    """Totals of one advance call (per phase index 0 prefill, 1 decode): J, USD, tokens, requests."""

    t0_s: float
    t1_s: float
    energy_j: np.ndarray
    usd: np.ndarray
    tokens: np.ndarray
    finished: int
    slo_met: np.ndarray
    slo_total: float
    alive: np.ndarray
    energy_busy_j: np.ndarray = field(default_factory=lambda: np.zeros(2))
    usd_busy: np.ndarray = field(default_factory=lambda: np.zeros(2))

    @property
    def slo_violation_pct(self) -> float:
        """Share (%) of the requests finished in this span that missed TTFT or TPOT (0 when none finished)."""
        return float(100.0 * (1.0 - self.slo_met[2] / self.slo_total)) if self.slo_total else 0.0


class ConfigCatalog:
    """The configurations a simulator can run (per bucket: the DSE's candidates and per-version fail-overs)
    and their roofline step tables per (configuration, bucket, batch level). Build once per (model,
    objective, SLO factor, versions, candidates) and share between simulators (a few seconds to build)."""

    @staticmethod
    def key_of(c: ClusterConfig) -> tuple:
        pv = c.phase_versions or {}
        return (c.model, c.objective, float(c.slo_factor), tuple(c.versions), int(c.n_candidates),
                tuple((ph, tuple(pv[ph])) for ph in PHASES if ph in pv), c.step_models, c.fit_at)

    def __init__(self, config: ClusterConfig, table: BestFitTable | None = None,
                 scoring_table: BestFitTable | None = None) -> None:
        """``table``: the selection model's best-fit table (the configurations policies choose from);
        ``scoring_table``: the scoring model's (its SLO is the one requests are judged by, and its best fits
        are Ideal's). Either is built when not given; pass both from another catalog of the same model,
        objective, versions and ``step_models`` to share them."""
        self.key = self.key_of(config)
        self.config = config
        self.model = model(config.model)
        sel, sco = config.step_params()
        self.selection_params, self.scoring_params = sel, sco
        kw = dict(objective=config.objective, slo_factor=config.slo_factor, versions=config.versions)
        for name, t, want in (("table", table, sel), ("scoring_table", scoring_table, sco)):
            if t is not None and t.space.params != want:
                raise ConfigError(f"{name} was built with other step-model parameters than step_models = "
                                  f"{config.step_models!r} needs")
        # the SLO is set on the scoring model (§2.4 sets it on the production simulator); the selection
        # model chooses against it with its own latency estimates
        self.scoring_table = scoring_table if scoring_table is not None else run_dse(config.model, params=sco, **kw)
        if table is None:
            table = (self.scoring_table if sel == sco else
                     run_dse(config.model, params=sel, slo_s=self.scoring_table.slo_s, test_params=sco, **kw))
        self.table = table
        for t in (self.table, self.scoring_table):
            if t.objective != config.objective:
                raise ConfigError(f"table objective {t.objective!r} != config objective {config.objective!r}")
        self.edges = self.table.buckets
        if self.edges.size != NB or not np.array_equal(self.edges, SEQ_BUCKETS):
            raise ConfigError("the simulator needs the DSE's default 48 sequence-length buckets")
        before = set(self.__dict__)
        self._build_configs()
        self._build_tables()
        self.fields = {k: v for k, v in self.__dict__.items()
                       if k not in before or k in ("table", "scoring_table", "edges", "kv_bytes_tok")}

    def _build_configs(self) -> None:
        seen: dict[tuple[str, int, int], int] = {}
        self.configs: list[VPodConfig] = []
        self.cand: dict[tuple[str, int], list[int]] = {}
        self.failover: dict[tuple[str, int], list[int]] = {}
        # per bucket: the best fit the cluster can run (the table's, or among the phase's versions)
        self.best_fit: dict[tuple[str, int], BestFit] = {}
        pv = self.config.phase_versions or {}

        def add(e: BestFit, phase: str) -> int:
            key = (phase, e.alloc_index, e.batch)
            if key not in seen:
                seen[key] = len(self.configs)
                self.configs.append(VPodConfig(len(self.configs), phase, e))
            return seen[key]

        # per bucket: the scoring model's best fit the cluster can run (Ideal's, §5.1)
        self.ideal_fit: dict[tuple[str, int], BestFit] = {}
        for ph in self.table.phases:
            vs = tuple(pv[ph]) if ph in pv else None  # None: unrestricted, the table as explored
            for s in self.edges.tolist():
                best = self.table.lookup(ph, s) if vs is None else self.table.best_of(ph, s, vs)
                if best is not None:
                    self.best_fit[(ph, s)] = best
                ideal = (self.scoring_table.lookup(ph, s) if vs is None
                         else self.scoring_table.best_of(ph, s, vs))
                if ideal is not None:
                    self.ideal_fit[(ph, s)] = ideal
                # k = 1 needs no Pareto front (the front is the slow part of building a catalog)
                picks = ([best] if self.config.n_candidates == 1 and best is not None
                         else self.table.candidates(ph, s, self.config.n_candidates, versions=vs))
                cands = [add(e, ph) for e in picks]
                fos = [self.table.lookup(ph, s, v) for v in (VERSIONS if vs is None else vs)]
                fo = sorted((e for e in fos if e is not None),
                            key=lambda e: (not e.meets_slo, e.energy_j_per_token if self.config.objective == "energy"
                                           else e.usd_per_token))
                self.cand[(ph, s)] = cands
                self.failover[(ph, s)] = [add(e, ph) for e in fo]
        # per bucket and demand level: the operating-point pick (None: fall back to the best fit)
        self.op_cfg: dict[tuple[str, int], np.ndarray] = {}
        if self.config.fit_at == "operating":
            from servegym.envs.npu.selection import operating_fits

            sel, sco = self.selection_params, self.scoring_params
            op_params = (RooflineParams.selection_op(collectives=sco.collectives,
                                                     ici_step_latency_s=sco.ici_step_latency_s,
                                                     collective_launch_s=sco.collective_launch_s)
                         if sel.is_selection else sel)
            fits = operating_fits(self.model, self.config.objective, self.scoring_table.slo_s, self.edges.tolist(),
                                  self.config.versions, self.config.phase_versions, op_params, sco)
            tv = self.table.space.vpods
            for key, picks in fits.items():
                for e in picks:
                    if e is not None and (e.version, e.shape, e.tp, e.pp, e.ep) != (
                            tv[e.alloc_index].version, tv[e.alloc_index].shape, tv[e.alloc_index].tp,
                            tv[e.alloc_index].pp, tv[e.alloc_index].ep):
                        raise ConfigError("operating-point allocations must index the DSE's allocation space")
                best = self.cand[key][0] if self.cand.get(key) else -1
                self.op_cfg[key] = np.array([best if e is None else add(e, key[0]) for e in picks], dtype=np.int64)

    def _build_tables(self) -> None:
        t = self.table
        n = len(self.configs)
        J = LEVELS.size
        shape = (n, NB, J)
        self.lat = np.full(shape, np.inf)
        self.tps = np.zeros(shape)
        self.pow = np.zeros(shape)
        self.jmax = np.zeros((n, NB), dtype=np.int64)
        # the step tables charge the scoring model: evaluate the configurations' allocations (a small space)
        uniq = sorted({cf.entry.alloc_index for cf in self.configs})
        row_of = {ai: i for i, ai in enumerate(uniq)}
        space = space_for(self.model, [t.space.vpods[ai] for ai in uniq], self.scoring_params)
        alloc = np.array([row_of[cf.entry.alloc_index] for cf in self.configs], dtype=np.int64)
        maxb = np.array([cf.max_batch for cf in self.configs])
        ph = np.array([PHASES.index(cf.phase) for cf in self.configs])
        lvl = np.minimum(LEVELS[None, :], maxb[:, None])  # (n, J)
        bl = np.unique(lvl)
        bcol = {int(b): i for i, b in enumerate(bl.tolist())}
        cols = np.vectorize(lambda b: bcol[int(b)])(lvl)
        for pi, phase in enumerate(PHASES):
            sel = np.flatnonzero(ph == pi)
            if sel.size == 0:
                continue
            for bi, s in enumerate(self.edges.tolist()):
                sm = evaluate(space, phase, s, bl)
                rows = alloc[sel][:, None]
                cc = cols[sel]
                per = sm.period_s[rows, cc]
                self.lat[sel, bi] = sm.latency_s[rows, cc]
                self.tps[sel, bi] = np.broadcast_to(sm.tokens, sm.latency_s.shape)[rows, cc] / per
                self.pow[sel, bi] = sm.energy_j[rows, cc] / per
                feas = np.broadcast_to(sm.feasible, sm.latency_s.shape)[rows, cc]
                # largest feasible level (at least level 0 so a too-long request still has a latency)
                self.jmax[sel, bi] = np.where(feas.any(axis=1), J - 1 - np.argmax(feas[:, ::-1], axis=1), 0)
        jj = np.arange(J)[None, None, :]
        cap = self.jmax[:, :, None]
        idx = np.minimum(jj, cap)
        self.lat = np.take_along_axis(self.lat, idx, axis=2)
        self.tps = np.take_along_axis(self.tps, idx, axis=2)
        self.pow = np.take_along_axis(self.pow, idx, axis=2)
        self.cfg_levels = lvl
        self.cfg_chips = np.array([cf.chips for cf in self.configs], dtype=float)
        self.cfg_ver = np.array([VERSIONS.index(cf.version) for cf in self.configs])
        self.cfg_phase = ph
        self.cfg_maxb = maxb.astype(float)
        ps = self.scoring_params
        self.cfg_static_w = np.array([ps.static_power_frac * CHIPS[cf.version].tflops / CHIPS[cf.version].tflop_per_j
                                      for cf in self.configs]) * self.cfg_chips
        self.cfg_usd_s = np.array([CHIPS[cf.version].usd_per_chip_second for cf in self.configs]) * self.cfg_chips
        wb = np.array([weight_bytes_per_chip(self.model, cf.entry.vpod) for cf in self.configs])
        dcn = np.array([CHIPS[cf.version].dcn_gbps for cf in self.configs])
        self.cfg_boot_s = wb * 8.0 / (dcn * 1e9) + ENGINE_START_S + wb / (LOAD_GBPS_PER_CHIP * 1e9)
        self.cfg_dcn_bps = dcn * 1e9 / 8.0 * self.cfg_chips
        self.kv_bytes_tok = float(self.model.kv_bytes_per_token_layer * self.model.layers)


class NPUCluster:
    """The simulator. ``seed`` drives routing, creation times and nothing else (the workload is given)."""

    def __init__(self, config: ClusterConfig, workload: NPUWorkload, seed: int = 0,
                 catalog: ConfigCatalog | None = None) -> None:
        if not isinstance(config, ClusterConfig):
            raise ConfigError("config must be a ClusterConfig")
        if not isinstance(workload, NPUWorkload):
            raise ConfigError("workload must be an NPUWorkload (servegym.envs.npu.workloads.make_workload)")
        self.config = c = config
        self.workload = workload
        self.rng = np.random.default_rng(seed)
        self.model = model(c.model)
        cat = catalog if catalog is not None else ConfigCatalog(c)
        if cat.key != ConfigCatalog.key_of(c):
            raise ConfigError(f"catalog was built for {cat.key}, config needs {ConfigCatalog.key_of(c)}")
        self.catalog = cat
        self.__dict__.update(cat.fields)
        req = workload.requests
        self.n_req = len(req)
        self.arr = req.arrival_s
        self.isl = req.input_tokens
        self.osl = req.output_tokens
        tot = self.isl + self.osl
        self.bk_p = np.searchsorted(self.edges, np.minimum(self.isl, self.edges[-1]), side="left")
        self.bk_d = np.searchsorted(self.edges, np.minimum(tot, self.edges[-1]), side="left")
        slo = self.table.slo_s
        self.slo_p = np.array([slo[("prefill", int(e))] for e in self.edges])
        self.slo_d = np.array([slo[("decode", int(e))] for e in self.edges])
        # per-request outcomes
        self.ttft = np.full(self.n_req, np.nan)
        self.dec_time = np.zeros(self.n_req)
        self.jobs_left = np.zeros(self.n_req, dtype=np.int8)
        self.done_s = np.full(self.n_req, np.nan)
        self.started = np.zeros(self.n_req, dtype=bool)
        self._fresh_finished = np.zeros(0, dtype=np.int64)
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
        self.targets: dict[int, dict[int, int]] = {}
        self.target_order: list[int] = []
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
        self.totals = {k: np.zeros(2) for k in ("energy_j", "usd", "tokens", "energy_busy_j", "usd_busy")}
        # per-group decomposition (index = phase x 48 + bucket of the group): tokens served, energy (J, idle
        # and booting vPods included), USD, chip-seconds held, busy (request-attributed) energy, the sum
        # of batch x tokens (realized batch = batch_tok / tokens) and the static energy of the chips held (J)
        self.group_acc = {k: np.zeros(G) for k in ("tokens", "energy_j", "usd", "chip_s", "energy_busy_j",
                                                   "batch_tok", "static_j")}

    # ------------------------------------------------------------------ public helpers
    def group_index(self, phase: str, edge: int) -> int:
        if phase not in PHASES:
            raise ActionError(f"phase = {phase!r} is unknown; allowed: {', '.join(PHASES)}")
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
        (:mod:`servegym.envs.npu.selection`); the DSE's best fit with ``fit_at = "best-batch"``."""
        self.group_index(phase, edge)
        picks = self.op_cfg.get((phase, int(edge)))
        if picks is None or picks.size == 0:
            return self.cand[(phase, int(edge))][0]
        from servegym.envs.npu.selection import level_index

        return int(picks[level_index(tokens_per_s)])

    def max_rps(self, config_id: int, phase: str, edge: int, tokens_per_req: float) -> float:
        """T_pod: the most requests/s one vPod of ``config_id`` serves at its max batch for a bucket."""
        g = self.group_index(phase, edge)
        tpr = max(float(tokens_per_req), 1.0)
        j = int(self.jmax[config_id, g % NB])
        return float(self.tps[config_id, g % NB, j]) / tpr

    def held_chips(self) -> dict[str, float]:
        """Chips held per version now (creating, ready or deleting)."""
        out = dict.fromkeys(VERSIONS, 0.0)
        live = self.v_gone > self.now
        for vi, v in enumerate(VERSIONS):
            out[v] = float(self.cfg_chips[self.v_cfg[live]][self.cfg_ver[self.v_cfg[live]] == vi].sum())
        return out

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
        for g, tgt in parsed:
            self.targets[g] = tgt
            if g in self.target_order:
                self.target_order.remove(g)
        self.target_order = [g for g, _ in parsed] + self.target_order
        self._reconcile()

    def _reconcile(self) -> None:
        now = self.now
        alive = self.v_gone == np.inf
        # deletions first (creating ones before ready ones, newest first)
        for g, tgt in self.targets.items():
            sel = np.flatnonzero(alive & (self.v_group == g))
            for cid in np.unique(self.v_cfg[sel]).tolist():
                mine = sel[self.v_cfg[sel] == cid]
                extra = mine.size - tgt.get(cid, 0)
                if extra > 0:
                    order = mine[np.lexsort((-self.v_ready[mine], self.v_ready[mine] <= now))]
                    self.v_gone[order[:extra]] = now + DELETE_S
        held = self.held_chips()
        new_g, new_c, new_r = [], [], []
        for g in self.target_order:
            tgt = self.targets.get(g, {})
            sel = (self.v_gone == np.inf) & (self.v_group == g)
            for cid, cnt in tgt.items():
                have = int(np.count_nonzero(sel & (self.v_cfg == cid))) + sum(
                    1 for gg, cc in zip(new_g, new_c, strict=True) if gg == g and cc == cid)
                ver = self.configs[cid].version
                for _ in range(cnt - have):
                    if held[ver] + self.cfg_chips[cid] > self.quota[ver]:
                        break
                    held[ver] += self.cfg_chips[cid]
                    new_g.append(g)
                    new_c.append(cid)
                    boot = self.rng.uniform(*CREATE_S) + self.cfg_boot_s[cid]
                    new_r.append(now if getattr(self, "_instant", False) else now + boot)
        if new_g:
            self.v_group = np.concatenate([self.v_group, new_g]).astype(np.int64)
            self.v_cfg = np.concatenate([self.v_cfg, new_c]).astype(np.int64)
            self.v_ready = np.concatenate([self.v_ready, new_r])
            self.v_gone = np.concatenate([self.v_gone, np.full(len(new_g), np.inf)])
        held_now = self.held_chips()
        for v in VERSIONS:
            self.max_held[v] = max(self.max_held[v], held_now[v])
        self._reroute_orphans()

    def _active_groups(self, phase: int) -> np.ndarray:
        """Bucket indices (ascending) of the routable groups of a phase: positive target and a ready vPod
        (a new group joins the length-to-group map once it can serve); when no group of the phase is
        ready, every group with a positive target (requests then wait for the vPods to boot)."""
        tgt = [g for g, t in self.targets.items() if g // NB == phase and sum(t.values()) > 0]
        ready = set(self._ready_groups().tolist())
        act = [g for g in tgt if g in ready] or tgt
        return np.array(sorted(g - phase * NB for g in act), dtype=np.int64)

    def _route(self, phase: int, bk: np.ndarray) -> np.ndarray:
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

    # ------------------------------------------------------------------ observation
    def observe(self) -> Observation:
        c = self.config
        nb_epoch = round(c.epoch_s / c.rate_bin_s)
        order = (self.bin_index - 1 - np.arange(self.nbins_w)) % self.nbins_w
        counts = self.bin_counts[order]
        toks = self.bin_tokens[order]
        rates = counts / c.rate_bin_s
        recent = counts[:nb_epoch].sum(axis=0) / c.epoch_s
        tot_c = counts.sum(axis=0)
        tpr = np.where(tot_c > 0, toks.sum(axis=0) / np.maximum(tot_c, 1), 0.0)
        live = self.v_gone == np.inf
        ready = live & (self.v_ready <= self.now)
        G = 2 * NB
        n_ready = np.bincount(self.v_group[ready], minlength=G).astype(float)
        n_alive = np.bincount(self.v_group[live], minlength=G).astype(float)
        slots = np.bincount(self.v_group[ready], weights=self.cfg_maxb[self.v_cfg[ready]], minlength=G)
        queue = self._queue()
        cnt: dict[tuple[str, int], dict[int, int]] = {}
        for g, cid in zip(self.v_group[live].tolist(), self.v_cfg[live].tolist(), strict=True):
            key = (PHASES[g // NB], int(self.edges[g % NB]))
            cnt.setdefault(key, {})
            cnt[key][cid] = cnt[key].get(cid, 0) + 1
        held = self.held_chips()
        ctx = Observation(
            time_s=self.now, epoch=int(self.now // c.epoch_s),
            at_epoch_boundary=abs(self.now / c.epoch_s - round(self.now / c.epoch_s)) < 1e-9,
            bucket_edges=self.edges.copy(), rate_recent=recent, rate_peak=rates.max(axis=0),
            epoch_peak=rates[:nb_epoch].max(axis=0), tokens_per_req=tpr,
            ready=n_ready.reshape(2, NB), alive=n_alive.reshape(2, NB), queue=queue.reshape(2, NB),
            peak_queue=np.maximum(self.peak_queue, queue).reshape(2, NB), slots=slots.reshape(2, NB),
            util=self.util.reshape(2, NB).copy(), slo_recent=self.recent_slo.copy(), counts=cnt,
            targets={(PHASES[g // NB], int(self.edges[g % NB])): dict(t) for g, t in self.targets.items() if t},
            quota_left={v: self.quota[v] - held[v] for v in VERSIONS},
            epoch_token_bins=toks[:nb_epoch].copy(),
        )
        self.peak_queue = np.zeros(G)
        return ctx

    # ------------------------------------------------------------------ dynamics
    def advance_epoch(self) -> EpochMetrics:
        """Advance one epoch (``epoch_s``) without intermediate decisions; returns its metrics."""
        return self.advance(self.config.epoch_s)

    def advance(self, duration_s: float) -> EpochMetrics:
        """Advance ``duration_s`` (a multiple of ``substep_s``); returns the totals of that span."""
        c = self.config
        check_range("duration_s", duration_s, c.substep_s, None)
        K = round(duration_s / c.substep_s)
        if abs(K * c.substep_s - duration_s) > 1e-9:
            raise ConfigError(f"duration_s = {duration_s:g} must be a multiple of substep_s = {c.substep_s:g}")
        self._reconcile()
        t0 = self.now
        m = EpochMetrics(t0, t0 + duration_s, np.zeros(2), np.zeros(2), np.zeros(2), 0, np.zeros(3), 0.0,
                         np.zeros((2, NB)))
        # process in check_s chunks so the rate monitor and reconcile happen at a steady cadence
        kc = round(c.check_s / c.substep_s)
        done = 0
        while done < K:
            k = min(kc, K - done)
            self._chunk(k, m)
            done += k
        live = self.v_gone == np.inf
        m.alive = np.bincount(self.v_group[live], minlength=2 * NB).reshape(2, NB).astype(float)
        for key in self.totals:
            self.totals[key] += getattr(m, key)
        self.history.append(m)
        return m

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
        # drop vPods whose deletion has ended
        keepv = self.v_gone > t1
        if not keepv.all():
            self.v_group, self.v_cfg = self.v_group[keepv], self.v_cfg[keepv]
            self.v_ready, self.v_gone = self.v_ready[keepv], self.v_gone[keepv]
        self.peak_queue = np.maximum(self.peak_queue, self._queue())
        self._slo_tally(m, t0, t1)
        self._reconcile()

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
        n_act = np.bincount(self.d_g[ia], minlength=G).astype(float)
        nr = np.maximum(n_ready, 1e-12)
        # concurrency: jobs that reuse a slot within the sub-step do not add to the batch
        n_act = np.minimum(n_act, np.floor(slots + 1e-9))
        busy = np.minimum(1.0, np.where(n_ready > 0, n_act / nr, 0.0))
        # vPods with at least one job run at the batch active / busy vPods
        b_busy = np.where(busy > 0, n_act / np.maximum(busy * nr, 1e-12), 0.0)
        lvl_busy = np.minimum(np.searchsorted(LEVELS, np.ceil(np.maximum(b_busy, 1.0) - 1e-9)), LEVELS.size - 1)
        if ia.size == 0:
            energy[NB:] += dt * p_static_ready[NB:]
            return 0.0
        g = self.d_g[ia]
        cid = dom[g]
        okc = (cid >= 0) & (n_ready[g] > 0)
        tpot = np.where(okc, self.lat[np.maximum(cid, 0), self.d_bk[ia], lvl_busy[g]], np.inf)
        span = (t + dt) - np.maximum(self.d_arr[ia], t)
        prog = np.where(okc, span / tpot, 0.0)
        left = self.d_left[ia]
        fin = prog >= left
        made = np.minimum(prog, left)
        self.d_left[ia] = left - made
        c0, lv = np.maximum(cid, 0), lvl_busy[g]
        j_per_tok = self.pow[c0, self.d_bk[ia], lv] / np.maximum(self.tps[c0, self.d_bk[ia], lv], 1e-300)
        energy[NB:] += np.bincount(g - NB, weights=made * j_per_tok, minlength=NB)
        # idle share of the ready vPods' time at static power: busy vPod-time is the jobs' decode time,
        # divided by the batch they share (busy jobs per busy vPod)
        busy_t = np.bincount(g, weights=np.where(okc, made, 0.0) * np.where(okc, tpot, 0.0), minlength=G)
        share = np.where(n_ready > 0, np.minimum(1.0, busy_t / np.maximum(b_busy, 1.0) / (dt * nr)), 0.0)
        energy[NB:] += dt * (1.0 - share[NB:]) * p_static_ready[NB:]
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
            pick = lo + np.floor(self.rng.random(ids.size) * (act.size - lo)).astype(np.int64)
            g_rand = NB + act[np.minimum(pick, act.size - 1)]
            right = self.rng.random(ids.size) < acc
            g1 = np.where(right, g_true, g_rand)
        else:
            g1 = g_true
            right = np.ones(ids.size, dtype=bool)
        edge1 = self.edges[g1 - NB]
        short = (edge1 < tot) & (g1 != g_true)
        # migration point: next bucket boundary after the input if the re-estimate is right, else 2x edge
        reest = self.rng.random(ids.size) < acc
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

    # ------------------------------------------------------------------ accounting
    def open_requests(self) -> np.ndarray:
        """Ids of arrived requests not yet finished (some job queued, in service or migrating)."""
        return np.unique(np.concatenate([self.p_req, self.c_req, self.d_req, self.m_req]))

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
