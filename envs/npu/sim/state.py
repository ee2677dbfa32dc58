"""The npu env's state as the model owns it: the groups an agent acts on and the episode's dynamic state.

:class:`GroupLayout` is the env's fixed groups under the current configuration catalog (one per scenario's
model: rebuilt when a split draws another model) and :class:`NPUState` everything an episode changes: the
simulator and its last :class:`~servegym.envs.npu.sim.records.Observation`, the agent's targets, counts and
options, the reference policy and its pending decision, the counters of the reward and the observation. The
env (``envs/npu/env.py``) holds one ``NPUState``; its action types, observations and rewards read it, and the
functions here transform it (:func:`apply_decision`), so no module reaches into the env's private attributes.
An action type's decoding returns an :class:`NPUDecision` that :func:`apply_decision` applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray
from servegym.envs.npu.sim.cluster import NB, NPUCluster
from servegym.envs.npu.sim.records import Observation, ScalingDecision
from servegym.envs.npu.sim.roofline import PHASES
from servegym.envs.npu.sim.vpods import ConfigCatalog
from servegym.envs.npu.sim.workloads import NPUWorkload

from servegym.errors import ConfigError

#: ``targets[(phase, bucket_edge)] = {config id: vPods}``, a simulator group's declarative target
Targets = dict[tuple[str, int], dict[int, int]]


class ReferencePolicy(Protocol):
    """A policy that drives the env's simulator beside the agent (the residual mode's NeuScale or Base,
    :mod:`servegym.baselines.npu`): its own memory, its targets, and its decision at a decision point."""

    targets: Targets

    def reset(self, sim: NPUCluster) -> None: ...

    def decide(self, ctx: Observation) -> ScalingDecision: ...


@dataclass(eq=False)
class LayoutMemo:
    """Tables derived from a layout and the simulator's step tables, built on first use and kept while the
    objects they came from are the same (each keyed by those objects' identities)."""

    #: (sim.tps, sim.jmax, per group its first allowed option, per config id its tokens/s per bucket at max batch)
    demand: tuple[Any, ...] | None = None
    #: (sim.tps, sim.jmax, groups x options table of tokens/s at the group's bucket and max batch)
    full_tps: tuple[Any, ...] | None = None
    #: per group its bucket, whether it decodes, the decode groups' buckets, per config its version's index
    group_tables: tuple[Any, ...] | None = None
    #: bucket edge -> its index in ``edges``
    bucket_index: dict[int, int] = field(default_factory=dict)


@dataclass(eq=False)
class GroupLayout:
    """The env's groups under one configuration catalog (module docstring of the env, "Groups").

    Per group ``g`` (prefill first, ascending edge): ``groups[g] = (phase, bucket_edge)``, its top bucket
    ``group_bucket[g]`` and first bucket ``group_lo[g]`` (indices into ``edges``, tokens), its configuration
    ids ``options[g]`` (best fits, then fail-overs) and which of them the quota can hold (``opt_ok[g]``, padded
    to ``n_options``)."""

    catalog: ConfigCatalog
    edges: NDArray[Any]
    picks: list[list[int]]
    groups: list[tuple[str, int]]
    group_bucket: list[int]
    group_lo: list[int]
    options: list[list[int]]
    group_phase: NDArray[np.int64]
    n_options: int
    #: the largest group of each phase (its count may not be 0)
    top_group: set[int]
    opt_ok: list[NDArray[np.bool_]]
    #: per group (phase index, first bucket, top bucket + 1): its length range as a bucket slice
    ranges: list[tuple[np.int64, int, int]]
    #: ``ranges`` as three int64 arrays (phase, lo, hi)
    range_arrays: tuple[NDArray[np.int64], ...]
    #: env group of every (phase, bucket): the first of the phase whose edge is >= the bucket's, else its top
    env_group: NDArray[np.int64]
    #: ``group_phase == p`` for p = 0, 1
    phase_masks: tuple[NDArray[np.bool_], NDArray[np.bool_]]
    memo: LayoutMemo = field(default_factory=LayoutMemo)

    def bucket_index(self, edge: int) -> int:
        """``int(np.searchsorted(self.edges, edge))``, kept per edge (the groups' edges recur every step)."""
        table = self.memo.bucket_index
        hit = table.get(edge)
        if hit is None:
            hit = table[edge] = int(np.searchsorted(self.edges, edge))
        return hit


def build_layout(catalog: ConfigCatalog, quota: dict[str, int], picks_per_phase: list[list[int]], model: str,
                 n_options: int | None = None) -> GroupLayout:
    """The groups of the bucket picks ``picks_per_phase`` (per phase, ascending bucket indices), their options
    under ``catalog`` and the option masks under ``quota`` (chips per version); ``n_options`` pads every option
    list to that length. A group nothing fits is dropped; a phase with no group, or a group the quota leaves no
    option, is a ConfigError (``model`` names it)."""
    edges = catalog.edges
    groups: list[tuple[str, int]] = []
    group_bucket: list[int] = []
    group_lo: list[int] = []
    options: list[list[int]] = []
    for p, picks in enumerate(picks_per_phase):
        ph = PHASES[p]
        lo = 0
        for b in picks:
            edge = int(edges[b])
            cands = list(catalog.cand[(ph, edge)])
            opts = cands + [c for c in catalog.failover[(ph, edge)] if c not in cands]
            if not opts:  # nothing fits this length at all: the group cannot exist
                continue
            groups.append((ph, edge))
            group_bucket.append(b)
            group_lo.append(lo)
            options.append(opts)
            lo = b + 1
        if not any(g[0] == ph for g in groups):
            raise ConfigError(f"no {ph} configuration of {model} fits the trace's lengths")
    group_phase = np.array([PHASES.index(g[0]) for g in groups], dtype=np.int64)
    n_opt = max(len(o) for o in options) if n_options is None else int(n_options)
    if any(len(o) > n_opt for o in options):  # pragma: no cover - bound by construction
        raise ConfigError(f"a group has more than n_options = {n_opt} configurations")
    top = {}
    for i, g in enumerate(groups):
        top[g[0]] = i
    opt_ok = []
    for i, opts in enumerate(options):
        ok = np.zeros(n_opt, dtype=bool)
        for j, cid in enumerate(opts):
            cf = catalog.configs[cid]
            q = quota.get(cf.version)
            ok[j] = q is None or cf.chips <= q
        if not ok.any():
            raise ConfigError(f"quota_chips = {dict(quota)!r} leaves group {groups[i]} no configuration "
                              f"(needs at least {min(catalog.configs[c].chips for c in opts)} chips of one of "
                              f"{sorted({catalog.configs[c].version for c in opts})})")
        opt_ok.append(ok)
    ranges = [(group_phase[i], group_lo[i], group_bucket[i] + 1) for i in range(len(groups))]
    range_arrays = tuple(np.array([r[k] for r in ranges], dtype=np.int64) for k in range(3))
    env_group = np.zeros((2, NB), dtype=np.int64)
    for p in (0, 1):
        mine = [g for g in range(len(groups)) if group_phase[g] == p]
        for b in range(NB):
            env_group[p, b] = next((g for g in mine if group_bucket[g] >= b), mine[-1])
    return GroupLayout(catalog=catalog, edges=edges, picks=picks_per_phase, groups=groups, group_bucket=group_bucket,
                       group_lo=group_lo, options=options, group_phase=group_phase, n_options=n_opt,
                       top_group=set(top.values()), opt_ok=opt_ok, ranges=ranges, range_arrays=range_arrays,
                       env_group=env_group, phase_masks=(group_phase == 0, group_phase == 1))


@dataclass(frozen=True, eq=False)
class NPUDecision:
    """What an action decodes to, for :func:`apply_decision` to apply.

    ``scaling``: the simulator's decision (None: nothing to apply this epoch, e.g. the residual mode's warm
    start standing); ``targets``: the agent's targets once it is applied (the reference's too, when a reference
    drives the simulator); ``count`` and ``option``: per env group the count level (vPods) and the option index
    the agent chose (None: unchanged); ``adjusted``: whether a masked value was changed before decoding."""

    scaling: ScalingDecision | None
    targets: Targets
    count: NDArray[np.int64] | None = None
    option: NDArray[np.int64] | None = None
    adjusted: bool = False


@dataclass(eq=False)
class NPUState:
    """The npu env's dynamic state (module docstring): read by its action types, observations and rewards."""

    layout: GroupLayout
    #: the absolute mode's vPod count levels (``count_levels``) and, as a list, for bisection
    levels: NDArray[np.int64]
    level_list: list[int]
    #: the count levels a residual change moves along (``count_levels`` continued to ``max_group_vpods``)
    ladder: NDArray[np.int64]
    #: epochs per episode
    horizon: int
    workload: NPUWorkload
    sim: NPUCluster | None = None
    last_ctx: Observation | None = None
    #: epochs stepped in this episode
    t: int = 0
    #: the start hour of the episode's trace (0-24, the observation's hour of day)
    start_hour: float = 0.0
    #: the trace's mean arrival rate (req/s), the observation's rate scale
    mean_rate: float = 1.0
    #: the agent's current targets (the reference policy's own object while one drives the simulator)
    targets: Targets = field(default_factory=dict)
    #: per env group the agent's count (vPods) and option index (absolute; residual: 0 = the reference's)
    count: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    option: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: the reference's target vPods per env group (residual: its pending decision; absolute: the heuristic's)
    ref_counts: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    #: the policy driving the simulator beside the agent (residual mode) and its decision for the next epoch
    reference: ReferencePolicy | None = None
    pending: ScalingDecision | None = None
    #: open requests already past their SLO at the last epoch's end (the misses' running difference)
    late_prev: int = 0
    #: last epoch's SLO satisfaction and miss share (0-1)
    slo_satisfaction: float = 1.0
    slo_miss_share: float = 0.0
    #: this episode's actions the env changed before applying them
    adjusted_actions: int = 0
    #: reward_mode "base": Base's flows per epoch of this episode, and the episode they belong to
    base_flows: dict[str, NDArray[np.float64]] | None = None
    base_key: tuple[Any, ...] | None = None
    #: (the observation, the heuristic's action on it): the heuristic is a function of the last observation
    heuristic_memo: tuple[Observation, NDArray[np.int64]] | None = None

    def begin_episode(self, sim: NPUCluster, mean_rate: float, start_hour: float) -> None:
        """A new episode on ``sim``: every per-episode field back to its start (nothing provisioned yet)."""
        n = len(self.layout.groups)
        self.sim = sim
        self.mean_rate = mean_rate
        self.start_hour = start_hour
        self.t = 0
        self.adjusted_actions = 0
        self.late_prev = 0
        self.slo_satisfaction, self.slo_miss_share = 1.0, 0.0
        self.option = np.zeros(n, dtype=np.int64)
        self.count = np.zeros(n, dtype=np.int64)
        self.targets = {}
        self.pending = None
        self.reference = None


def apply_decision(state: NPUState, dec: NPUDecision, provision: bool = False) -> None:
    """Apply ``dec`` to the state's simulator (``provision``: as the deployment at t = 0, created ready) and
    record the agent's targets, counts and options; a reference driving the simulator takes the same targets
    (as :func:`~servegym.baselines.npu.run_policy` records its own decision)."""
    if dec.scaling is not None:
        sim = state.sim
        assert sim is not None
        if provision:
            sim.provision(dec.scaling)
        else:
            sim.apply(dec.scaling)
    if state.reference is not None:
        state.reference.targets = dec.targets
    state.targets = dec.targets
    if dec.count is not None:
        state.count = dec.count
    if dec.option is not None:
        state.option = dec.option


def capped(targets: Targets, cap: int) -> Targets:
    """``targets`` with each group's total vPods at most ``cap`` (removed from its last configurations first,
    the fail-overs); the same object when nothing exceeds the cap."""
    if all(sum(v.values()) <= cap for v in targets.values()):
        return targets
    out: Targets = {}
    for key, tgt in targets.items():
        new, left = {}, cap
        for cid, n in tgt.items():
            new[cid] = min(int(n), left)
            left -= new[cid]
        out[key] = {c: n for c, n in new.items() if n > 0}
    return out
