"""Rules both NeuScale-paper policies share (:mod:`servegym.baselines.npu`; NeuScale §3.4, §5.1).

* :class:`_CountRule` -- the count rule: EWMA of R_peak, at most x2 per epoch, ÷2 per 30-min window.
* :func:`coincidence` -- a group's peak aggregate 10-s demand over the sum of its buckets' peaks.
* :func:`emergency_decision` / :func:`emergency_possible` -- the emergency scale-out safety layer Base, NeuScale
  and the Gymnasium env's agent call at every 60-s decision point between epochs.
* :func:`trace_peak` / :func:`operating_picks` -- the trace metadata the configurations are sized by, and the
  operating-point best fits (``fit_at = "operating"``).

Rates are requests/s, demands tokens/s, times seconds. The reasons behind each rule are in
:mod:`servegym.baselines.npu`'s docstring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from servegym.envs.npu.sim.cluster import NB, NPUCluster, Observation, ScalingDecision
from servegym.envs.npu.sim.pairwise_sums import peak_ratio
from servegym.envs.npu.sim.roofline import PHASES


@dataclass
class _CountRule:
    """Shared count rule: EWMA of R_peak, x2 per epoch, ÷2 per window, emergency scale-out."""

    alpha: float = 0.5
    max_up: float = 2.0
    halve_window_s: float = 1800.0
    ewma: np.ndarray = field(default_factory=lambda: np.zeros((2, NB)))
    ref: dict[tuple[str, int], tuple[int, float, bool]] = field(default_factory=dict)

    def signal(self, ctx: Observation) -> np.ndarray:
        p = ctx.epoch_peak
        self.ewma = np.maximum(p, self.alpha * p + (1.0 - self.alpha) * self.ewma)
        return self.ewma

    def limit(self, key: tuple[str, int], want: int, current: int, now: float) -> int:
        """The count allowed now: at most x2 the current count per epoch; at most one halving per window,
        measured from the window's start count; a group created in this window is not scaled in before
        the window ends (its creation is its last scaling event), which keeps groups from flickering."""
        if current == 0:
            if want > 0:
                self.ref[key] = (want, now, True)
            return want
        n_ref, t_ref, fresh = self.ref.get(key, (current, now, False))
        if now - t_ref >= self.halve_window_s - 1e-9:
            n_ref, t_ref, fresh = current, now, False
        self.ref[key] = (n_ref, t_ref, fresh)
        out = min(want, math.floor(self.max_up * current))
        return max(out, min(current, n_ref) if fresh else n_ref // 2)


def coincidence(ctx: Observation, phase: int, buckets: np.ndarray, cap: np.ndarray) -> float:
    """Peak of a group's aggregate 10-s demand over the sum of its buckets' own peaks (in (0, 1]).

    Demand of a bin = sum over the group's ``buckets`` of tokens / (bin length x ``cap``, the bucket's
    tokens/s per vPod): vPods busy at full batch. §3.4 sizes a group by the peak rate "that would be
    served by this group"; the count rule keeps its EWMA per bucket, so the group's R_peak / T_pod is
    the sum of the buckets' EWMA demands times this factor, measured on the last epoch's bins. 1 when
    the observation has no bins or the group saw no traffic in the epoch.
    """
    bins = ctx.epoch_token_bins
    if bins is None or buckets.size == 0:
        return 1.0
    if bins.shape[0] and bins.dtype == np.float64 and bins.ndim == 3 and bins.flags.c_contiguous:
        # the numpy formula below in one compiled call, same order of sums (sim/pairwise_sums.py)
        return float(peak_ratio(bins, phase, np.asarray(buckets, dtype=np.int64), np.asarray(cap, dtype=np.float64)))
    x = bins[:, phase, buckets] / np.maximum(cap, 1e-300)
    peaks = float(x.max(axis=0).sum())
    return float(x.sum(axis=1).max()) / peaks if peaks > 0 else 1.0


def _alive_counts(ctx: Observation, key: tuple[str, int]) -> dict[int, int]:
    return dict(ctx.counts.get(key, {}))


def _emergency(sim: NPUCluster, ctx: Observation, targets: dict[tuple[str, int], dict[int, int]]) -> dict:
    """Emergency scale-out (bypasses the x2 limit) for groups whose peak queue exceeds what their alive
    vPods (booting included) absorb. Decode: queued jobs beyond the summed max batch, ceil(excess / max
    batch) more vPods. Prefill (max batches of 1-8 and a fluid queue): queued tokens beyond one check
    interval of the alive vPods' throughput, enough vPods to drain the excess in one interval."""
    out: dict[tuple[str, int], dict[int, int]] = {}
    dt = sim.config.check_s
    for key, tgt in targets.items():
        if not tgt:
            continue
        p, b = PHASES.index(key[0]), int(np.searchsorted(ctx.bucket_edges, key[1]))
        q = float(ctx.peak_queue[p, b])
        if q <= 0:
            continue
        alive = _alive_counts(ctx, key)
        main = max(tgt, key=lambda c: tgt[c])
        if p == 1:
            excess = q - sum(n * sim.configs[c].max_batch for c, n in alive.items())
            add = math.ceil(excess / sim.configs[main].max_batch) if excess > 0 else 0
        else:
            tpr = max(float(ctx.tokens_per_req[0][ctx.tokens_per_req[0] > 0].mean())
                      if (ctx.tokens_per_req[0] > 0).any() else 1.0, 1.0)
            cap = sum(n * sim.max_rps(c, key[0], key[1], 1.0) for c, n in alive.items()) * dt
            excess = q * tpr - cap
            add = math.ceil(excess / (sim.max_rps(main, key[0], key[1], 1.0) * dt)) if excess > 0 else 0
        if add > 0:
            new = dict(tgt)
            new[main] = max(tgt[main], alive.get(main, 0)) + add
            out[key] = new
    return out

def emergency_possible(sim: NPUCluster, targets: dict[tuple[str, int], dict[int, int]]) -> bool:
    """Whether :func:`emergency_decision` could scale anything out now: :func:`_emergency` only acts on a group
    with a target and a positive peak queue. When none has one, a decision point between epochs needs no
    observation (``sim.skip_observation()``, then an empty decision): the same dynamics at a fraction of the cost
    of :meth:`~servegym.envs.npu.sim.cluster.NPUCluster.observe` (between epochs, the usual case)."""
    # np.count_nonzero: ndarray.any()'s answer (NaN counts as nonzero in both) without its Python wrapper (~3 us)
    if (getattr(sim, "fidelity", None) == "fluid" and not np.count_nonzero(sim.peak_queue)
            and not np.count_nonzero(sim.q_obs[0]) and not np.count_nonzero(sim.q_req[1])):
        # the fluid's queues are its prefill job queue (q_obs) and queued decode requests (q_req[1]): none anywhere,
        # and no peak since the last observation, so peak_queue_now() below is all zero; tested without its sums
        # (the usual case between epochs)
        return False
    pq = sim.peak_queue_now()
    if not np.count_nonzero(pq):  # no queue anywhere (the usual case between epochs)
        return False
    edges = sim.edges
    for key, tgt in targets.items():
        if tgt and pq[PHASES.index(key[0]), int(np.searchsorted(edges, key[1]))] > 0:
            return True
    return False


def emergency_decision(sim: NPUCluster, ctx: Observation,
                       targets: dict[tuple[str, int], dict[int, int]]) -> ScalingDecision:
    """Between epochs both policies only scale out in an emergency; the new targets stick until the next epoch.

    The one emergency scale-out safety layer: Base, NeuScale and the Gymnasium env's agent (its
    ``safety_layer``, :mod:`servegym.envs.npu.env`) all call this at every 60-s decision point between
    epochs, with their current ``targets`` (updated in place)."""
    em = _emergency(sim, ctx, targets)
    targets.update(em)
    return ScalingDecision(em)


def trace_peak(sim: NPUCluster) -> tuple[float, np.ndarray, np.ndarray]:
    """The trace metadata both policies size their configurations by (§5.1: Base provisions "for the peak
    demand"): the peak ``rate_bin_s`` request rate (req/s), and per phase and bucket the mean tokens per
    request of the whole trace that fall in that bucket (input tokens by input length for prefill, output
    tokens by total length for decode), shape (2, NB); and the per-phase mean tokens per request (2,)."""
    req = sim.workload.requests
    n = len(req)
    share = np.zeros((2, NB))
    if n == 0:
        return 0.0, share, np.ones(2)
    bins = (req.arrival_s // sim.config.rate_bin_s).astype(np.int64)
    peak_rps = float(np.bincount(bins).max()) / sim.config.rate_bin_s
    isl, osl = req.input_tokens.astype(float), req.output_tokens.astype(float)
    bp = np.searchsorted(sim.edges, np.minimum(isl, sim.edges[-1]))
    bd = np.searchsorted(sim.edges, np.minimum(isl + osl, sim.edges[-1]))
    share[0] = np.bincount(bp, weights=isl, minlength=NB) / n
    share[1] = np.bincount(bd, weights=osl, minlength=NB) / n
    return peak_rps, share, np.array([isl.mean(), osl.mean()])


def operating_picks(sim: NPUCluster) -> dict[tuple[int, int], int]:
    """Per (phase index, bucket index): the operating-point best fit (:meth:`NPUCluster.op_fit`) at the demand of the
    group the bucket will be served in, from the trace's peak demand. Fixed for the run, like the paper's offline
    best-fit database. A bucket's demand is its share of the trace's peak, W_b = peak req/s x the trace's tokens
    in bucket b per request (tokens/s); consecutive buckets whose picks share an allocation form one group (as
    :meth:`NeuScalePolicy.groups` forms them), whose configuration is the pick of its top bucket at the group's
    summed demand, given to every member. Members then share an allocation, so groups only merge; repeated until
    none does (at most NB rounds). A bucket without traffic keeps its pick at 1 token/s."""
    peak_rps, share, _ = trace_peak(sim)
    out: dict[tuple[int, int], int] = {}
    for p in (0, 1):
        ph = PHASES[p]
        w = peak_rps * share[p]
        pick = {b: sim.op_fit(ph, int(sim.edges[b]), float(w[b])) for b in range(NB)}
        live = np.flatnonzero(w > 0).tolist()
        for _ in range(NB):
            runs: list[list[int]] = []
            for b in live:
                if runs and sim.configs[pick[b]].entry.alloc_index == sim.configs[pick[runs[-1][-1]]].entry.alloc_index:
                    runs[-1].append(b)
                else:
                    runs.append([b])
            new = dict(pick)
            for run in runs:
                c = sim.op_fit(ph, int(sim.edges[run[-1]]), float(w[run].sum()))
                new.update({b: c for b in run})
            if new == pick:
                break
            pick = new
        out.update({(p, b): c for b, c in pick.items()})
    return out
