"""Observations of :class:`~servegym.envs.npu.env.NPUAutoscaleEnv` as functions of its
:class:`~servegym.envs.npu.sim.state.NPUState`: the flat observation vector and its field names, the state keys of
``info``, and rendering (module docstring of the env: "Observation")."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray
from servegym.envs.npu.env_config import (
    LOG_MAX_TOKENS,
)
from servegym.envs.npu.sim.catalog import VERSIONS
from servegym.envs.npu.sim.cluster import (
    NB,
    Observation,
)
from servegym.envs.npu.sim.fluid_kernels import njit
from servegym.envs.npu.sim.pairwise_sums import pairwise_sum, range_rates
from servegym.envs.npu.sim.roofline import PHASES
from servegym.envs.npu.sim.state import GroupLayout, NPUState

from servegym.render import BLUE, GREEN, GREY, LIGHT_BLUE, LIGHT_ORANGE, ORANGE, RED, Bar, render_bars


def obs_fields(groups: list[tuple[str, int]]) -> list[str]:
    """The name of every observation entry for the env's ``groups`` (``env.obs_fields``)."""
    names: list[str] = []
    # one line per feature: the comments are the env cards' descriptions (servegym.env_cards)
    per_group = [
        "rate_recent/mean_rate",  # last epoch's request rate of the group's length range / the trace's mean rate
        "rate_peak/mean_rate",  # peak rate (10-s bins over the 30-min window) / the trace's mean rate
        "length_share",  # share of the phase's last-epoch requests in the group's range
        "log_tokens_per_req",  # log1p(mean tokens per request) / log1p(2^20)
        "alive/max_level",  # alive vPods / max count level
        "ready/max_level",  # ready vPods / max count level
        *[f"alive_{v}/max_level" for v in VERSIONS],  # alive vPods of each chip version / max count level
        "option/(n_options-1)",  # the targeted configuration option's index
        "util",  # prefill: busy share over the last 60 s; decode: active jobs / batch slots of ready vPods
        "log1p_queue/10",  # log1p(queued jobs) / 10, now
        "log1p_peak_queue/10",  # log1p(queued jobs) / 10 at the epoch's peak
        "reference_target/max_level",  # the reference's target vPods (residual: NeuScale's pending decision)
        "vpod_rate/mean_rate",  # T_pod: requests/s one vPod of the group's configuration serves / mean rate
    ]
    for f in per_group:
        for ph, edge in groups:
            names.append(f"{ph}[{edge}].{f}")
    names += [
        "slo_recent_prefill", "slo_recent_decode",  # recent SLO satisfaction of each phase
        "slo_satisfaction_last", "slo_miss_share_last",  # last epoch's SLO satisfaction and miss share
        *[f"quota_left_{v}/quota" for v in VERSIONS],  # chips left per version / its quota (1: unlimited)
        "sin_hour", "cos_hour",  # hour of day
        "episode_progress",  # elapsed share of the episode
    ]
    return names


def state_info(state: NPUState) -> dict[str, Any]:
    """The state keys of ``info`` (flows at zero: the step adds its own)."""
    sim = state.sim
    assert sim is not None and state.last_ctx is not None
    configs = state.layout.catalog.configs
    per_v = dict.fromkeys(VERSIONS, 0)
    n = 0
    for cnt in state.last_ctx.counts.values():
        for cid, k in cnt.items():
            per_v[configs[cid].version] += k
            n += k
    held = sim.held_chips()
    return {"time_s": float(sim.now), "epoch": state.t, "vpods": n, "vpods_per_version": per_v,
            "chips": float(sum(held.values())), "energy_j": 0.0, "cost_usd": 0.0, "tokens": 0.0,
            "slo_violation_pct": 0.0, "slo_misses": 0.0, "power_w": 0.0, "arrived": 0, "finished": 0,
            "tokens_per_j": 0.0,
            "tokens_per_usd": 0.0, "action_adjusted": False, "episode_adjusted_actions": state.adjusted_actions,
            "emergency_scaleouts": 0}


# ---------------------------------------------------------------------------------------------- obs
def observation(state: NPUState, ctx: Observation, group_state_obs: str, n_fields: int,
                option_idx: NDArray[np.int64], compiled: bool = True) -> NDArray[np.float32]:
    """The flat observation of ``ctx`` (``n_fields`` entries, :func:`obs_fields`' order; clipped to [-1, 10]):
    ``group_state_obs`` picks the group-state reader, ``option_idx`` is per group the index of its configuration
    in ``options[g]`` (the action type's :meth:`option_indices`); ``compiled`` False assembles it from the numpy
    parts alone (the reference :func:`fill_obs` is tested against)."""
    lay = state.layout
    G = len(lay.groups)
    maxl = float(state.levels[-1])
    rr = np.zeros(G)
    rp = np.zeros(G)
    tpr = np.zeros(G)
    arrays = (ctx.rate_recent, ctx.rate_peak, ctx.tokens_per_req)
    if all(a.dtype == np.float64 and a.shape == (2, NB) and a.flags.c_contiguous for a in arrays):
        # the loop below in one compiled call, in numpy's order of sums (sim/pairwise_sums.py)
        range_rates(*arrays, *lay.range_arrays, rr, rp, tpr)
    else:
        for g, (p, lo, hi) in enumerate(lay.ranges):
            rr[g] = ctx.rate_recent[p, lo:hi].sum()
            rp[g] = ctx.rate_peak[p, lo:hi].sum()
            w = ctx.rate_peak[p, lo:hi]
            tpr[g] = float((w * ctx.tokens_per_req[p, lo:hi]).sum() / w.sum()) if w.sum() > 0 else 0.0
    alive, ready, queue, peak_queue, util, per_v = GROUP_STATE_READERS[group_state_obs].read(state, ctx)
    quota = state.sim.quota if state.sim is not None else {}
    q_left = [1.0 if math.isinf(quota[v]) else (ctx.quota_left[v] / quota[v] if quota[v] > 0 else 0.0)
              for v in VERSIONS]
    hour = (ctx.time_s / 3600.0 + state.start_hour) % 24.0
    trig = [math.sin(2 * math.pi * hour / 24.0), math.cos(2 * math.pi * hour / 24.0), state.t / state.horizon]
    option, ref_counts, mean_rate = state.option, state.ref_counts, state.mean_rate
    flt = (rr, rp, tpr, alive, ready, util, ref_counts, ctx.slo_recent, per_v)
    if (compiled and all(isinstance(x, np.ndarray) and x.dtype == np.float64 for x in flt)
            and per_v.shape == (len(VERSIONS), G)
            and all(x.shape == (G,) for x in flt[:7]) and ctx.slo_recent.shape == (2,)
            and option.dtype == np.int64 and option.shape == (G,)
            and n_fields == (12 + len(VERSIONS)) * G + 7 + len(VERSIONS)):
        # the parts below in one compiled pass into the buffer (the same float64 operations); the three
        # log1p parts stay numpy's (its float64 log1p is not libm's on every machine)
        obs = np.empty(n_fields)
        fill_obs(obs, rr, rp, tpr, lay.group_phase, alive, ready, per_v, option,
                 float(max(lay.n_options - 1, 1)), util, ref_counts, vpod_full(state, tpr, option_idx),
                 ctx.slo_recent, float(state.slo_satisfaction), float(state.slo_miss_share),
                 np.array(q_left, dtype=np.float64), *trig, float(mean_rate), maxl)
        obs[3 * G:4 * G] = np.log1p(tpr) / LOG_MAX_TOKENS
        o = (8 + len(VERSIONS)) * G  # after util: the queue and the peak queue
        obs[o:o + G] = np.log1p(queue) / 10.0
        obs[o + G:o + 2 * G] = np.log1p(peak_queue) / 10.0
        # np.clip's bounds as the two ufuncs (the same values, NaN kept, without np.clip's Python wrapper)
        return np.minimum(np.maximum(obs, -1.0, out=obs), 10.0, out=obs).astype(np.float32)
    share = np.zeros(G)
    for sel in lay.phase_masks:
        tot = rr[sel].sum()
        if tot > 0:
            share[sel] = rr[sel] / tot
    parts = [
        rr / mean_rate, rp / mean_rate, share, np.log1p(tpr) / LOG_MAX_TOKENS,
        alive / maxl, ready / maxl, per_v.ravel() / maxl,
        option / max(lay.n_options - 1, 1), util,
        np.log1p(queue) / 10.0, np.log1p(peak_queue) / 10.0,
        ref_counts / maxl, vpod_rate(state, tpr, option_idx) / mean_rate,
        ctx.slo_recent, [state.slo_satisfaction, state.slo_miss_share], q_left, trig,
    ]
    # each part into its slice of one float64 buffer (the values np.concatenate of the float64 parts gives)
    obs = np.empty(n_fields)
    o = 0
    for x in parts:
        k = x.size if isinstance(x, np.ndarray) else len(x)
        obs[o:o + k] = x.ravel() if isinstance(x, np.ndarray) else x
        o += k
    if o != obs.size:  # pragma: no cover - the fields and the parts are listed together
        raise AssertionError(f"observation parts fill {o} of {obs.size} fields")
    return np.clip(obs, -1.0, 10.0, out=obs).astype(np.float32)


def vpod_rate(state: NPUState, tpr: NDArray[np.float64], option_idx: NDArray[np.int64]) -> NDArray[np.float64]:
    """Per env group: requests/s one vPod of its configuration serves at its max batch (T_pod of
    §3.4) at the group's bucket and the window's tokens per request ``tpr`` (0 with no traffic)."""
    full = vpod_full(state, tpr, option_idx)
    G = len(state.layout.groups)
    out = np.zeros(G)
    for g in range(G):
        if tpr[g] <= 0:
            continue
        out[g] = full[g] / tpr[g]
    return out


def vpod_full(state: NPUState, tpr: NDArray[np.float64], option_idx: NDArray[np.int64]) -> NDArray[np.float64]:
    """Per env group with traffic (``tpr`` > 0): tokens/s of one vPod of its configuration (``option_idx``: per
    group the index into its options) at its bucket and max batch (0.0 elsewhere, and everywhere before
    ``reset``)."""
    sim = state.sim
    lay = state.layout
    G = len(lay.groups)
    out = np.zeros(G)
    if sim is None:
        return out
    # per group and option: tokens/s at the bucket and max batch, kept while the step tables and groups stay
    cache = lay.memo.full_tps
    if cache is None or cache[0] is not sim.tps or cache[1] is not sim.jmax:
        width = max(lay.n_options + 1, *(len(o) for o in lay.options))
        table = np.zeros((G, width))
        for g, opts in enumerate(lay.options):
            b = lay.group_bucket[g]
            for j, cid in enumerate(opts):
                table[g, j] = float(sim.tps[cid, b, sim.jmax[cid, b]])
        cache = lay.memo.full_tps = (sim.tps, sim.jmax, table)
    table = cache[2]
    return np.where(tpr > 0, table[np.arange(G), option_idx], 0.0)


# ---------------------------------------------------------------------------------------------- render
def render_text(state: NPUState, model: str, option_idx: NDArray[np.int64]) -> str:
    """The ``ansi`` rendering: the episode's time and SLO, then per env group its configuration (``option_idx``:
    per group the index into its options), alive and ready vPods, queue and utilization."""
    sim, ctx = state.sim, state.last_ctx
    if sim is None or ctx is None:
        return "NPUAutoscale-v0 (not reset)\n"
    lay = state.layout
    lines = [f"t = {sim.now / 3600.0:5.2f} h  epoch {state.t}/{state.horizon}  {model} on "
             f"{state.workload.name}  slo(last epoch) {state.slo_satisfaction:.3f}"]
    lines.append(f"{'group':>16} {'config':>28} {'alive':>5} {'ready':>5} {'queue':>6} {'util':>5}")
    for g, key in enumerate(lay.groups):
        p, b = PHASES.index(key[0]), lay.group_bucket[g]
        cid = lay.options[g][int(option_idx[g])]  # the residual mode offsets its choices
        lines.append(f"{key[0] + ' <=' + str(key[1]):>16} {lay.catalog.configs[cid].label:>28} "
                     f"{int(ctx.alive[p, b]):>5} {int(ctx.ready[p, b]):>5} {int(ctx.queue[p, b]):>6} "
                     f"{ctx.util[p, b]:>5.2f}")
    return "\n".join(lines) + "\n"


def render_rgb(state: NPUState, obs: NDArray[np.float32], fields: list[str]) -> NDArray[np.uint8]:
    """A 96-px-high RGB picture of the observation ``obs`` (named by ``fields``): per env group (prefill
    blue, decode orange) ready vPods with booting ones stacked on top and the reference's target as a
    tick, all / the largest count level; then per group the utilization (green) and log1p(queue) / 10
    (red); then last epoch's SLO satisfaction (green) and the episode's progress (grey)."""
    lay = state.layout
    at = {name: float(v) for name, v in zip(fields, obs, strict=True)}
    bars = []
    for g, (ph, edge) in enumerate(lay.groups):
        key = f"{ph}[{edge}]"
        ready, alive = at[f"{key}.ready/max_level"], at[f"{key}.alive/max_level"]
        bars.append(Bar(ready, BLUE if lay.group_phase[g] == 0 else ORANGE, max(alive - ready, 0.0),
                        LIGHT_BLUE if lay.group_phase[g] == 0 else LIGHT_ORANGE,
                        at[f"{key}.reference_target/max_level"]))
    bars += [Bar(at[f"{ph}[{edge}].util"], GREEN) for ph, edge in lay.groups]
    bars += [Bar(at[f"{ph}[{edge}].log1p_queue/10"], RED) for ph, edge in lay.groups]
    bars += [Bar(at["slo_satisfaction_last"], GREEN), Bar(at["episode_progress"], GREY)]
    return render_bars(bars)


@njit(cache=True)
def fill_obs(obs, rr, rp, tpr, phase, alive, ready, per_v, option, opt_div, util, ref, full, slo, last0, last1, q_left,
             sin_h, cos_h, progress, mean_rate, maxl):  # pragma: no cover - compiled
    """The observation's parts in field order into ``obs`` (float64), except the three log1p parts (tokens per
    request, queue, peak queue), which the caller writes: the same float64 operations as the numpy parts of
    :func:`observation` (elementwise divisions; the length share's phase totals in numpy's summation
    order, :func:`~servegym.envs.npu.sim.pairwise_sums.pairwise_sum` over the phase's groups in order)."""
    G = rr.size
    V = per_v.shape[0]
    tmp = np.empty(G)
    for g in range(G):
        obs[g] = rr[g] / mean_rate
        obs[G + g] = rp[g] / mean_rate
        obs[2 * G + g] = 0.0
    for p in range(2):
        k = 0
        for g in range(G):
            if phase[g] == p:
                tmp[k] = rr[g]
                k += 1
        tot = pairwise_sum(tmp, 0, k)
        if tot > 0:
            for g in range(G):
                if phase[g] == p:
                    obs[2 * G + g] = rr[g] / tot
    o = 4 * G
    for g in range(G):
        obs[o + g] = alive[g] / maxl
        obs[o + G + g] = ready[g] / maxl
    o += 2 * G
    for v in range(V):
        for g in range(G):
            obs[o + v * G + g] = per_v[v, g] / maxl
    o += V * G
    for g in range(G):
        obs[o + g] = option[g] / opt_div
        obs[o + G + g] = util[g]
    o += 4 * G  # past the queue and peak queue
    for g in range(G):
        obs[o + g] = ref[g] / maxl
        r = 0.0
        if not tpr[g] <= 0:
            r = full[g] / tpr[g]
        obs[o + G + g] = r / mean_rate
    o += 2 * G
    obs[o] = slo[0]
    obs[o + 1] = slo[1]
    obs[o + 2] = last0
    obs[o + 3] = last1
    o += 4
    for v in range(q_left.size):
        obs[o + v] = q_left[v]
    o += q_left.size
    obs[o] = sin_h
    obs[o + 1] = cos_h
    obs[o + 2] = progress


class GroupStateReader:
    """One way to read a group's alive/ready/queue/peak-queue/utilization/per-version entries from an
    :class:`Observation` (``group_state_obs``); a new reading is a new subclass and an entry in
    :data:`GROUP_STATE_READERS`. Returns per env group: alive, ready, queue, peak queue (vPods, jobs), utilization
    (0-1) and alive vPods per chip version (versions x groups)."""

    @staticmethod
    def read(state: NPUState, ctx: Observation) -> tuple[NDArray[np.float64], ...]:
        raise NotImplementedError


class BucketGroupState(GroupStateReader):
    """``group_state_obs="bucket"`` (default): the entries at the group's own (top) length bucket."""

    @staticmethod
    def read(state: NPUState, ctx: Observation) -> tuple[NDArray[np.float64], ...]:
        lay = state.layout
        G = len(lay.groups)
        gp = lay.group_phase
        gb, dec, gb_dec, ver = _group_tables(lay)
        util = ctx.util[gp, gb].copy()
        sim = state.sim
        if sim is not None:
            # the simulator's util is the prefill fluid's busy share; for decode, batch-slot occupancy
            act = sim.decode_jobs()
            slots = ctx.slots[1, gb_dec]
            util[dec] = np.where(slots > 0, np.minimum(act[gb_dec] / np.maximum(slots, 1e-9), 1.0), 0.0)
        per_v = np.zeros((len(VERSIONS), G))
        for g, key in enumerate(lay.groups):
            for cid, k in ctx.counts.get(key, {}).items():
                per_v[ver[cid], g] += k
        alive, ready = ctx.alive[gp, gb], ctx.ready[gp, gb]
        queue, peak_queue = ctx.queue[gp, gb], ctx.peak_queue[gp, gb]
        return alive, ready, queue, peak_queue, util, per_v


def _group_tables(lay: GroupLayout) -> tuple[NDArray[np.int64], NDArray[np.bool_], NDArray[np.int64], list[int]]:
    """Per env group its bucket, whether it decodes, the decode groups' buckets, and per configuration its chip
    version's index in ``VERSIONS``; kept with the layout (its groups and catalog)."""
    cache = lay.memo.group_tables
    if cache is None:
        gb = np.array(lay.group_bucket)
        dec = lay.group_phase == 1
        ver = [VERSIONS.index(cf.version) for cf in lay.catalog.configs]
        cache = lay.memo.group_tables = (gb, dec, gb[dec], ver)
    return cache  # type: ignore[return-value]


class RangeGroupState(GroupStateReader):
    """``group_state_obs="range"``: alive, ready, queue and peak queue (jobs; the sum of the buckets' peaks),
    utilization (prefill: busy share weighted by the ready vPods' batch slots; decode: active jobs / slots) and
    alive vPods per chip version, over every length bucket that maps to each env group (``env_group``, as the
    residual mode's reference counts), so a reference's vPods at its own buckets inside the range count."""

    @staticmethod
    def read(state: NPUState, ctx: Observation) -> tuple[NDArray[np.float64], ...]:
        lay = state.layout
        G = len(lay.groups)
        eg = lay.env_group.ravel()

        def agg(a: NDArray[np.float64]) -> NDArray[np.float64]:
            out = np.zeros(G)
            np.add.at(out, eg, np.asarray(a, dtype=np.float64).ravel())
            return out

        slots = np.asarray(ctx.slots, dtype=np.float64)
        busy = np.asarray(ctx.util, dtype=np.float64) * slots
        if state.sim is not None:
            busy[1] = state.sim.decode_jobs()
        sl = agg(slots)
        util = np.where(sl > 0, np.minimum(agg(busy) / np.maximum(sl, 1e-9), 1.0), 0.0)
        per_v = np.zeros((len(VERSIONS), G))
        for (phase, edge), cnt in ctx.counts.items():
            g = lay.env_group[PHASES.index(phase), int(np.searchsorted(lay.edges, edge))]
            for cid, k in cnt.items():
                per_v[VERSIONS.index(lay.catalog.configs[cid].version), g] += k
        return agg(ctx.alive), agg(ctx.ready), agg(ctx.queue), agg(ctx.peak_queue), util, per_v


#: ``group_state_obs`` value -> its reader (the config's allowed values, ``GROUP_STATE_OBS``, must match).
GROUP_STATE_READERS: dict[str, type[GroupStateReader]] = {"bucket": BucketGroupState, "range": RangeGroupState}
