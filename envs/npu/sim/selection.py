"""Best fit at the operating point: each bucket's vPod configuration chosen by J/token (or USD/token) at the
batch its group will actually run at a forecast demand, the pod's static power (or its chip-hours) included.

The DSE (:mod:`servegym.envs.npu.sim.dse`, §3.3) picks the allocation and batch with the lowest cost per token at
its *best* batch. At Table 4's rates a bucket's demand is a small share of one vPod's throughput at that
batch, so the vPod runs at a batch of a few requests and idles the rest of the time; what it then costs per
token is its static power over the epoch divided by the tokens it serves, plus the dynamic energy of steps at
the batch it runs. The paper's objective is the efficiency of serving the workload (§5.2: energy and cost
per token of the pool), so the choice here is made where the group operates:

For a demand of W tokens/s and an allocation a (whose max batch is the largest batch level at which it meets
the bucket's SLO and fits in HBM, both on the selection model and on the scoring model, §3.3's hardware test):

* N = max(1, ceil(W / T_a)) vPods, T_a = tokens/s of one vPod at its max batch;
* the operating batch: the smallest level whose tokens/s covers W / N;
* energy per token = N x static power x chips / W + dynamic J/token at the operating batch;
  cost per token = N x chips x USD/chip-s / W.

The allocation with the lowest figure wins (ties: fewer chips, then enumeration order); where no allocation
meets the SLO the DSE's best fit (best attainable latency) stays. Demand levels are powers of two of tokens/s
(:data:`DEMAND_LEVELS`); a policy looks up the level at or above its forecast. The baselines look up once, before
the run, at the trace's peak demand (:func:`servegym.baselines.npu.operating_picks`): re-picking at every epoch
changed configurations every few epochs, and each change booted new vPods.

The step model that chooses is the selection model with what XLA's cost analysis also sees (§2.4 names ICI
bandwidth among a workload's resource demands): ring collectives and their ICI energy, and the KV cache
sharded by batch where that is cheaper (so DeepSeek-V3's MLA latent is not replicated on every
tensor-parallel chip) -- :meth:`RooflineParams.selection_op`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from servegym.envs.npu.sim.catalog import VERSIONS, ModelSpec
from servegym.envs.npu.sim.dse import BestFit
from servegym.envs.npu.sim.roofline import PHASES, RooflineParams, enumerate_allocations, evaluate

DEMAND_LEVELS = 2.0 ** np.arange(0, 24)
"""Forecast demand levels (tokens/s): 1 ... 8.4 M."""
OP_BATCHES = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024], dtype=np.int64)
"""Batch levels the choice considers (the simulator's levels)."""


def level_index(w_tokens_s: float) -> int:
    """Index of the demand level at or above ``w_tokens_s`` (clipped to the grid)."""
    return int(min(np.searchsorted(DEMAND_LEVELS, max(float(w_tokens_s), 1.0) - 1e-9), DEMAND_LEVELS.size - 1))


def operating_fits(model: ModelSpec, objective: str, slo_s: Mapping[tuple[str, int], float],
                   buckets: Sequence[int], versions: Sequence[str] = VERSIONS,
                   phase_versions: Mapping[str, Sequence[str]] | None = None,
                   params: RooflineParams | None = None,
                   test_params: RooflineParams | None = None) -> dict[tuple[str, int], list[BestFit | None]]:
    """Per (phase, bucket edge): the operating-point pick at every demand level of :data:`DEMAND_LEVELS`
    (module docstring); None where no allocation meets the SLO at batch 1. ``params``: the choosing model
    (default :meth:`RooflineParams.selection_op`), ``test_params``: the model the SLO is tested on (default the
    scoring model). Deterministic."""
    params = params or RooflineParams.selection_op()
    test_params = test_params or RooflineParams()
    space = enumerate_allocations(model, tuple(versions), params=params)
    tspace = enumerate_allocations(model, tuple(versions), params=test_params)
    ver = space["version_idx"]
    chips = space["chips"]
    static_w = space["static_w"] * chips
    usd_s = space["usd_per_s"] * chips
    rank = np.empty(chips.size, dtype=np.int64)  # tie-break: fewer chips, then enumeration order
    rank[np.lexsort((np.arange(chips.size), chips))] = np.arange(chips.size)
    W = DEMAND_LEVELS
    out: dict[tuple[str, int], list[BestFit | None]] = {}
    for phase in PHASES:
        allowed = tuple((phase_versions or {}).get(phase, versions))
        vmask = np.isin(ver, [VERSIONS.index(v) for v in allowed])
        for s in buckets:
            key = (phase, int(s))
            slo = float(slo_s[key])
            sm = evaluate(space, phase, int(s), OP_BATCHES)
            tm = evaluate(tspace, phase, int(s), OP_BATCHES)
            ok = sm.feasible & (sm.latency_s <= slo) & tm.feasible & (tm.latency_s <= slo) & vmask[:, None]
            # the max batch: the largest level at which the allocation meets the SLO (levels above it are not run)
            any_ok = ok.any(axis=1)
            jmax = np.where(any_ok, ok.shape[1] - 1 - np.argmax(ok[:, ::-1], axis=1), 0)
            tps = np.broadcast_to(sm.tokens, sm.latency_s.shape) / sm.period_s
            dyn = (sm.energy_j - static_w[:, None] * sm.period_s) / np.broadcast_to(sm.tokens, sm.latency_s.shape)
            t_max = tps[np.arange(tps.shape[0]), jmax]
            picks: list[BestFit | None] = []
            cand = np.flatnonzero(any_ok)
            for w in W:
                if cand.size == 0:
                    picks.append(None)
                    continue
                n = np.maximum(1.0, np.ceil(w / t_max[cand] - 1e-9))
                per = w / n
                # operating level: the smallest level whose throughput covers the per-vPod demand
                cover = tps[cand] >= per[:, None]
                j_op = np.minimum(np.argmax(cover, axis=1), jmax[cand])
                j_op = np.where(cover.any(axis=1), j_op, jmax[cand])
                if objective == "energy":
                    fig = n * static_w[cand] / w + dyn[cand, j_op]
                else:
                    fig = n * usd_s[cand] / w
                k = cand[np.lexsort((rank[cand], fig))[0]]
                j = int(jmax[k])
                vp = space.vpods[k]
                picks.append(BestFit(
                    phase=phase, seq_len=int(s), role="operating", version=vp.version, shape=vp.shape,
                    chips=vp.chips, tp=vp.tp, pp=vp.pp, ep=vp.ep, batch=int(OP_BATCHES[j]),
                    latency_s=float(sm.latency_s[k, j]), period_s=float(sm.period_s[k, j]), slo_s=slo,
                    meets_slo=True, energy_j_per_token=float(sm.energy_j_per_token[k, j]),
                    usd_per_token=float(sm.usd_per_token[k, j]), tokens_per_s=float(tps[k, j]),
                    alloc_index=int(k)))
            out[key] = picks
    return out
