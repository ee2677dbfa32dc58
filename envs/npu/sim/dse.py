"""Roofline design-space exploration (DSE) and the best-fit vPod table (paper §3.3, §2.4).

For each phase (prefill, decode) and sequence-length bucket, every allocation of
:func:`~servegym.envs.npu.sim.roofline.enumerate_allocations` is evaluated at every batch bucket in one
numpy call. The SLO of a bucket is ``slo_factor`` (5, §2.4) times the single-request latency on the
minimum number of NPU-C or NPU-D chips that fits it, whichever version is faster. The best fit is the
allocation and batch with the lowest energy per token (or USD per token) whose latency meets the
SLO; when nothing meets it, the one with the best attainable latency (§2.4). The table also keeps
a best fit per chip version (the fail-over candidates of §3.4).

Differences from NeuScale: FLOPs and bytes come from :mod:`servegym.envs.npu.sim.roofline` rather than
from XLA HLO cost analysis, and the whole table is computed in 0.3-0.6 s instead of about 10
minutes per sequence length on 120 cores (§3.3).

Reuse by the cluster simulator / env / baselines: :meth:`BestFitTable.lookup` gives the best fit
(or a version's fail-over) for any (phase, seq_len); :meth:`BestFitTable.pareto` the Pareto
candidates of a bucket; :func:`servegym.envs.npu.sim.roofline.step_cost` the latency/energy/cost of a
vPod at any batch.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
from servegym.envs.npu.sim.catalog import VERSIONS, ModelSpec, VPod, model
from servegym.envs.npu.sim.roofline import (
    PHASES,
    AllocationSpace,
    RooflineParams,
    StepMetrics,
    check_phase,
    enumerate_allocations,
    evaluate,
)

from servegym.errors import ConfigError, check_range

OBJECTIVES: tuple[str, ...] = ("energy", "cost")
MAX_SEQ_LEN = 1 << 20
SLO_REFERENCE_VERSIONS: tuple[str, ...] = ("NPU-C", "NPU-D")
"""§2.4: the SLO is set on "the minimum number of NPU-C or NPU-D chips, whichever is faster"."""


def seq_len_buckets(max_seq_len: int = MAX_SEQ_LEN, first_step: int = 128, first_edge: int = 1024) -> np.ndarray:
    """Sequence-length bucket upper edges (tokens), §3.3.

    ``first_step``-token steps up to ``first_edge``, then the step doubles at every power of two:
    128, 256, ..., 1024, 1280, 1536, 1792, 2048, 2560, ... , 2^20 — 48 buckets for the defaults.
    """
    check_range("first_step", first_step, 1, None)
    check_range("first_edge", first_edge, first_step, None)
    check_range("max_seq_len", max_seq_len, first_step, None)
    edges = list(range(first_step, first_edge + 1, first_step))
    step, hi = first_step, first_edge
    while hi < max_seq_len:
        step *= 2
        nxt = hi * 2
        edges.extend(range(hi + step, nxt + 1, step))
        hi = nxt
    return np.array([e for e in edges if e <= max_seq_len], dtype=np.int64)


def batch_buckets(max_batch: int = 1024) -> np.ndarray:
    """Batch sizes of §3.3: powers of two below 16, then multiples of 16 up to ``max_batch``."""
    check_range("max_batch", max_batch, 1, None)
    small = [b for b in (1, 2, 4, 8) if b <= max_batch]
    return np.array(small + list(range(16, max_batch + 1, 16)), dtype=np.int64)


SEQ_BUCKETS = seq_len_buckets()
BATCH_BUCKETS = batch_buckets()


def bucket_for(seq_len: float, buckets: np.ndarray = SEQ_BUCKETS) -> int:
    """The bucket edge (tokens) serving ``seq_len``: the smallest edge ≥ seq_len."""
    check_range("seq_len", float(seq_len), 1, float(buckets[-1]))
    return int(buckets[int(np.searchsorted(buckets, seq_len, side="left"))])


def pareto_mask(latency: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """True where no other point has latency ≤ and cost ≤ with one strictly smaller (any shape).

    Exact duplicates are all kept. O(n log n): unique (latency, cost) pairs sorted by latency then
    cost are Pareto iff their cost is below every earlier pair's.
    """
    lat = np.asarray(latency, dtype=float).ravel()
    c = np.asarray(cost, dtype=float).ravel()
    if lat.shape != c.shape:
        raise ConfigError(f"latency and cost must have the same shape; got {lat.shape} and {c.shape}")
    if lat.size == 0:
        return np.zeros(np.shape(latency), dtype=bool)
    pts, inv = np.unique(np.stack([lat, c], axis=1), axis=0, return_inverse=True)
    prev_min = np.concatenate([[np.inf], np.minimum.accumulate(pts[:-1, 1])])
    keep = pts[:, 1] < prev_min
    return keep[np.asarray(inv).ravel()].reshape(np.shape(latency))


#: Step metrics kept per table: each is ~10 float arrays of allocations x batches (tens of MB for the large
#: models), and a table filled one per (phase, bucket) as episodes visited new buckets, which kept NPUAutoscale-v0's
#: memory rising (benchmarks/results/npu_memory.md). The Pareto fronts derived from them are kept instead.
METRICS_CACHE_MAX = 2


@dataclass(frozen=True)
class BestFit:
    """One entry of the best-fit table: an allocation and batch for a (phase, bucket).

    ``role`` is ``"best"`` (the overall best fit) or ``"fallback"`` (best fit of ``version`` only).
    Units: seconds, J/token, USD/token, tokens/s.
    """

    phase: str
    seq_len: int
    role: str
    version: str
    shape: tuple[int, ...]
    chips: int
    tp: int
    pp: int
    ep: int
    batch: int
    latency_s: float
    period_s: float
    slo_s: float
    meets_slo: bool
    energy_j_per_token: float
    usd_per_token: float
    tokens_per_s: float
    alloc_index: int

    @property
    def vpod(self) -> VPod:
        return VPod(self.version, self.shape, self.tp, self.pp, self.ep, max_batch=self.batch)

    @property
    def label(self) -> str:
        return self.vpod.label

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shape"] = list(self.shape)
        d["label"] = self.label
        return d


@dataclass
class BestFitTable:
    """Best-fit allocations per (phase, bucket), with per-version fail-overs and Pareto queries."""

    model: ModelSpec
    objective: str
    slo_factor: float
    space: AllocationSpace
    batches: np.ndarray
    buckets: np.ndarray
    phases: tuple[str, ...]
    slo_s: dict[tuple[str, int], float]
    best: dict[tuple[str, int], BestFit]
    per_version: dict[tuple[str, int, str], BestFit]
    _cache: OrderedDict[tuple[str, int], StepMetrics] = field(default_factory=OrderedDict, repr=False)
    _fronts: dict[tuple[Any, ...], tuple[BestFit, ...]] = field(default_factory=dict, repr=False)

    def metrics(self, phase: str, seq_len: int) -> StepMetrics:
        """Step metrics (allocations x batches) of a bucket; the last :data:`METRICS_CACHE_MAX` are kept."""
        key = (check_phase(phase), bucket_for(seq_len, self.buckets))
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        while self._cache and len(self._cache) >= METRICS_CACHE_MAX:
            self._cache.popitem(last=False)
        self._cache[key] = sm = evaluate(self.space, key[0], key[1], self.batches)
        return sm

    def _key(self, phase: str, seq_len: float) -> tuple[str, int]:
        check_phase(phase)
        if phase not in self.phases:
            raise ConfigError(f"phase = {phase!r} was not explored; allowed: {', '.join(self.phases)}")
        return phase, bucket_for(seq_len, self.buckets)

    def lookup(self, phase: str, seq_len: float, version: str | None = None) -> BestFit | None:
        """Best fit for ``seq_len`` rounded up to its bucket; with ``version``, that version's fail-over.

        None when nothing (of that version) fits in memory for the bucket.
        """
        key = self._key(phase, seq_len)
        if version is None:
            return self.best.get(key)
        if version not in VERSIONS:
            raise ConfigError(f"version = {version!r} is unknown; allowed: {', '.join(VERSIONS)}")
        return self.per_version.get((*key, version))

    def best_of(self, phase: str, seq_len: float, versions: Iterable[str]) -> BestFit | None:
        """Best fit for ``seq_len`` among the chip ``versions`` only (a cluster that lacks the others).

        Chosen from the per-version best fits with the table's own rule (lowest objective per token
        meeting the SLO; else the lowest latency), so with every explored version it is
        :meth:`lookup`'s best fit. The SLO stays the table's (set on NPU-C/D, §2.4): restricting the
        versions a cluster owns does not change what its users are promised. None when nothing of
        ``versions`` fits the bucket in memory.
        """
        key = self._key(phase, seq_len)
        ents = [self.per_version[(*key, v)] for v in check_versions("versions", versions)
                if (*key, v) in self.per_version]
        if not ents:
            return None

        def obj(e: BestFit) -> float:
            return e.energy_j_per_token if self.objective == "energy" else e.usd_per_token

        meet = [e for e in ents if e.meets_slo]
        # the tie-breaks of _pick: latency, chips, then enumeration order (alloc index, batch)
        if meet:
            e = min(meet, key=lambda e: (obj(e), e.latency_s, e.chips, e.alloc_index, e.batch))
        else:
            e = min(ents, key=lambda e: (e.latency_s, obj(e), e.chips, e.alloc_index, e.batch))
        return replace(e, role="best")

    def entries(self, phase: str | None = None, fallbacks: bool = False) -> list[BestFit]:
        """Best-fit entries ordered by phase then bucket (fail-overs after each best when asked)."""
        out: list[BestFit] = []
        for ph in self.phases if phase is None else (check_phase(phase),):
            for s in self.buckets.tolist():
                if (ph, s) in self.best:
                    out.append(self.best[(ph, s)])
                if fallbacks:
                    out.extend(self.per_version[(ph, s, v)] for v in VERSIONS if (ph, s, v) in self.per_version)
        return out

    def pareto(self, phase: str, seq_len: float, objective: str | None = None,
               versions: Iterable[str] | None = None) -> list[BestFit]:
        """Pareto-optimal (latency vs objective per token) feasible allocation/batch pairs of a bucket,
        sorted by latency; with ``versions``, the front of those chip versions' allocations only."""
        key = self._key(phase, seq_len)
        obj = _check_objective(objective or self.objective)
        fkey = (key, obj, None if versions is None else tuple(check_versions("versions", versions)))
        if fkey not in self._fronts:  # the fronts are kept (a few kB each), the metrics behind them are not
            self._fronts[fkey] = tuple(self._front(key, obj, versions))
        return list(self._fronts[fkey])

    def _front(self, key: tuple[str, int], obj: str, versions: Iterable[str] | None) -> list[BestFit]:
        sm = self.metrics(*key)
        ok = sm.feasible
        if versions is not None:
            vi = [VERSIONS.index(v) for v in check_versions("versions", versions)]
            ok = ok & np.isin(self.space["version_idx"], vi)[:, None]
        cost = _objective_array(sm, obj)
        lat = np.where(ok, sm.latency_s, np.inf)
        cost = np.where(ok, cost, np.inf)
        mask = pareto_mask(lat, cost) & ok
        idx = np.argwhere(mask)
        idx = idx[np.lexsort((cost[mask], lat[mask]))]
        return [_entry(self, key, "pareto", sm, int(i), int(j)) for i, j in idx]


    def candidates(self, phase: str, seq_len: float, k: int = 4,
                   versions: Iterable[str] | None = None) -> list[BestFit]:
        """Up to ``k`` SLO-meeting Pareto points of a bucket for an action space: the best fit first,
        then points spread evenly over the rest of the SLO-meeting front (faster, costlier ones).

        When no point meets the SLO, the fastest point alone. ``versions``: only those chip versions
        (best fit by :meth:`best_of`). Deterministic; ``k`` ≥ 1.
        """
        check_range("k", k, 1, None)
        front = self.pareto(phase, seq_len, versions=versions)
        if not front:
            return []
        best = self.lookup(phase, seq_len) if versions is None else self.best_of(phase, seq_len, versions)
        assert best is not None  # a non-empty front has a feasible point, hence a best fit
        meet = [e for e in front if e.meets_slo]
        if not meet:
            return [best]  # nothing meets the SLO: the best attainable latency (tested, where the table tests)
        rest = [e for e in meet if (e.alloc_index, e.batch) != (best.alloc_index, best.batch)]
        if k == 1 or not rest:
            picks: list[BestFit] = []
        else:
            idx = np.unique(np.round(np.linspace(0, len(rest) - 1, min(k - 1, len(rest)))).astype(int))
            picks = [rest[i] for i in idx]
        # the best fit leads even where it is off the estimated front (a front point failed its test)
        head = next((e for e in meet if (e.alloc_index, e.batch) == (best.alloc_index, best.batch)),
                    replace(best, role="pareto"))
        return [head, *picks]

def check_versions(name: str, versions: Iterable[str], allowed: Sequence[str] = VERSIONS) -> tuple[str, ...]:
    """``versions`` as a tuple after checking it is a non-empty, duplicate-free subset of ``allowed``;
    :class:`ConfigError` naming ``name`` otherwise."""
    if isinstance(versions, str):
        raise ConfigError(f"{name} = {versions!r}; allowed: a sequence of versions (a subset of "
                          f"{', '.join(allowed)}), not one string")
    vs = tuple(versions)
    if not vs or len(set(vs)) != len(vs) or any(v not in allowed for v in vs):
        raise ConfigError(f"{name} = {vs!r}; allowed: a non-empty subset of {', '.join(allowed)} without repeats")
    return vs


def _check_objective(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective = {objective!r} is unknown; allowed: {', '.join(OBJECTIVES)}")
    return objective


def _objective_array(sm: StepMetrics, objective: str) -> np.ndarray:
    return sm.energy_j_per_token if objective == "energy" else sm.usd_per_token


def _entry(t: BestFitTable, key: tuple[str, int], role: str, sm: StepMetrics, i: int, j: int,
           tested: np.ndarray | None = None) -> BestFit:
    vp = t.space.vpods[i]
    slo = t.slo_s.get(key, float("nan"))
    lat = float(sm.latency_s[i, j])
    passed = bool(lat <= slo) and (tested is None or bool(tested[i, j]))
    return BestFit(
        phase=key[0], seq_len=key[1], role=role, version=vp.version, shape=vp.shape, chips=vp.chips,
        tp=vp.tp, pp=vp.pp, ep=vp.ep, batch=int(t.batches[j]), latency_s=lat,
        period_s=float(sm.period_s[i, j]), slo_s=slo, meets_slo=passed,
        energy_j_per_token=float(sm.energy_j_per_token[i, j]), usd_per_token=float(sm.usd_per_token[i, j]),
        tokens_per_s=float(sm.tokens_per_s[i, j]), alloc_index=i,
    )


def _pick(cost: np.ndarray, lat: np.ndarray, chips: np.ndarray, ok: np.ndarray, slo: float,
          tested: np.ndarray | None = None, tested_lat: np.ndarray | None = None) -> tuple[int, int] | None:
    """Lowest cost meeting the SLO (ties: latency, chips, index); else the lowest latency (ties: cost).

    ``tested``: where a test on the real system (the scoring model) also meets the SLO; the pick must pass it
    too, and without any passing point the lowest ``tested_lat`` wins (the best attainable latency).
    """
    if not ok.any():
        return None
    flat_ok = ok.ravel()
    meet = flat_ok & (lat.ravel() <= slo)
    if tested is not None:
        meet &= np.broadcast_to(tested, lat.shape).ravel()
    n = flat_ok.size
    order_idx = np.arange(n)
    ch = np.broadcast_to(chips, lat.shape).ravel()
    if meet.any():
        cand = np.flatnonzero(meet)
        k = cand[np.lexsort((order_idx[cand], ch[cand], lat.ravel()[cand], cost.ravel()[cand]))[0]]
    else:
        cand = np.flatnonzero(flat_ok)
        fl = (lat if tested_lat is None else tested_lat).ravel()
        k = cand[np.lexsort((order_idx[cand], ch[cand], cost.ravel()[cand], fl[cand]))[0]]
    return divmod(int(k), lat.shape[1])


def reference_latency(space: AllocationSpace, sm: StepMetrics) -> float:
    """Single-request (batch index 0) latency on the minimum feasible chip count of NPU-C or NPU-D,
    whichever is faster (§2.4); all versions in the space when neither C nor D is present/feasible."""
    ver = space["version_idx"]
    chips = space["chips"]
    feas = sm.feasible[:, 0]
    lat = sm.latency_s[:, 0]
    for pool in (SLO_REFERENCE_VERSIONS, VERSIONS):
        best = np.inf
        for v in pool:
            sel = feas & (ver == VERSIONS.index(v))
            if sel.any():
                n_min = chips[sel].min()
                best = min(best, float(lat[sel & (chips == n_min)].min()))
        if np.isfinite(best):
            return best
    return float("nan")


def explore_bucket(table: BestFitTable, key: tuple[str, int], tspace: AllocationSpace | None,
                   slo_s: Mapping[tuple[str, int], float] | None) -> StepMetrics:
    """Set ``table``'s SLO, best fit and per-version fail-overs of one (phase, bucket) ``key`` from every
    allocation x batch of ``table.space`` (what :func:`run_dse` does for each bucket); the bucket's step metrics.
    ``tspace``: the real system's allocations to test picks on (None: no test). Also used to re-derive a sample
    of a table read from the disk cache, to check it against this code (:mod:`.table_cache`)."""
    space, bs = table.space, table.batches
    sm = evaluate(space, key[0], key[1], bs)
    if slo_s is not None:
        if key not in slo_s:
            raise ConfigError(f"slo_s has no entry for {key}; allowed: a mapping over every explored (phase, bucket)")
        slo = float(slo_s[key])
    else:
        slo = table.slo_factor * reference_latency(space, sm)
    table.slo_s[key] = slo
    cost = _objective_array(sm, table.objective)
    ok = sm.feasible
    ver = space["version_idx"][:, None]
    chips = space["chips"][:, None]
    tested = tested_lat = None
    if tspace is not None:
        tm = evaluate(tspace, key[0], key[1], bs)
        tested, tested_lat = tm.feasible & (tm.latency_s <= slo), np.where(tm.feasible, tm.latency_s, np.inf)
    pick = _pick(cost, sm.latency_s, chips, ok, slo, tested, tested_lat)
    if pick is not None:
        table.best[key] = _entry(table, key, "best", sm, *pick, tested)
    for vi in sorted(set(space["version_idx"].tolist())):
        pick = _pick(cost, sm.latency_s, chips, ok & (ver == vi), slo, tested, tested_lat)
        if pick is not None:
            table.per_version[(*key, VERSIONS[vi])] = _entry(table, key, "fallback", sm, *pick, tested)
    return sm


def run_dse(model_name: str | ModelSpec, objective: str = "energy", phases: Sequence[str] = PHASES,
            versions: Iterable[str] = VERSIONS, seq_lens: Sequence[int] | np.ndarray | None = None,
            batches: Sequence[int] | np.ndarray | None = None, slo_factor: float = 5.0,
            params: RooflineParams | None = None, max_chips: int = 1024, progress: bool = False,
            slo_s: Mapping[tuple[str, int], float] | None = None,
            test_params: RooflineParams | None = None) -> BestFitTable:
    """Explore every allocation x batch for each phase and bucket and build the best-fit table.

    ``params``: the step model the table chooses with (default :class:`RooflineParams`, the scoring
    model; :meth:`RooflineParams.selection` is the paper's FLOP/HBM roofline, §3.3). ``slo_s``: the
    SLO (s) per (phase, bucket edge) to meet, e.g. one set on the scoring model while choosing with the
    selection model (§2.4 sets the SLO on the real system); default: ``slo_factor`` x this model's own
    single-request latency on the smallest NPU-C/D allocation. ``test_params``: the model of the real
    system on which a pick is tested before deployment (§3.3: "testing an allocation on real hardware is
    necessary to guarantee SLO"): candidates are taken in order of this table's estimated efficiency and
    the first whose tested latency also meets the SLO is the best fit; when none passes, the one with the
    best tested latency. The efficiency ranking stays this model's own.

    ``seq_lens`` defaults to the 48 buckets of :func:`seq_len_buckets`, ``batches`` to
    :func:`batch_buckets`. Batch 1 is always included (the SLO reference needs it). Deterministic:
    no randomness, ties broken by latency, then chip count, then enumeration order.
    """
    spec = model_name if isinstance(model_name, ModelSpec) else model(model_name)
    _check_objective(objective)
    phases = tuple(check_phase(p) for p in phases)
    if not phases:
        raise ConfigError("phases is empty; allowed: a non-empty subset of prefill, decode")
    check_range("slo_factor", slo_factor, 1.0, None)
    buckets = SEQ_BUCKETS if seq_lens is None else np.unique(np.asarray(seq_lens, dtype=np.int64))
    if buckets.size == 0 or buckets[0] < 1 or buckets[-1] > MAX_SEQ_LEN:
        raise ConfigError(f"seq_lens must be non-empty integers in [1, {MAX_SEQ_LEN}]")
    bs = BATCH_BUCKETS if batches is None else np.unique(np.asarray(batches, dtype=np.int64))
    if bs.size == 0 or bs[0] < 1:
        raise ConfigError("batches must be non-empty integers ≥ 1")
    if bs[0] != 1:
        bs = np.concatenate([[1], bs])
    space = enumerate_allocations(spec, tuple(versions), max_chips=max_chips, params=params)
    tspace = (None if test_params is None or test_params == space.params else
              enumerate_allocations(spec, tuple(versions), max_chips=max_chips, params=test_params))
    table = BestFitTable(model=spec, objective=objective, slo_factor=float(slo_factor), space=space,
                         batches=bs, buckets=buckets, phases=phases, slo_s={}, best={}, per_version={})
    jobs = [(p, int(s)) for p in phases for s in buckets.tolist()]
    it: Iterable = jobs
    if progress:
        from tqdm import tqdm

        it = tqdm(jobs, desc=f"DSE {spec.name}", unit="bucket")
    for key in it:
        explore_bucket(table, key, tspace, slo_s)
    return table
