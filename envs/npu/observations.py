"""Observations of :class:`~servegym.envs.npu.env.NPUAutoscaleEnv`: the flat observation vector and its field names, the
state keys of ``info``, and rendering. A mixin of the env (module docstring there: "Observation")."""

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

from servegym.render import BLUE, GREEN, GREY, LIGHT_BLUE, LIGHT_ORANGE, ORANGE, RED, Bar, render_bars


class ObservationsMixin:
    """Observation and render methods of :class:`~servegym.envs.npu.env.NPUAutoscaleEnv`."""

    _compiled_obs = True  # False: the numpy parts only (the reference :func:`fill_obs` is tested against)

    def _obs_fields(self) -> list[str]:
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
            for ph, edge in self.groups:
                names.append(f"{ph}[{edge}].{f}")
        names += [
            "slo_recent_prefill", "slo_recent_decode",  # recent SLO satisfaction of each phase
            "slo_satisfaction_last", "slo_miss_share_last",  # last epoch's SLO satisfaction and miss share
            *[f"quota_left_{v}/quota" for v in VERSIONS],  # chips left per version / its quota (1: unlimited)
            "sin_hour", "cos_hour",  # hour of day
            "episode_progress",  # elapsed share of the episode
        ]
        return names

    def _state_info(self) -> dict[str, Any]:
        sim = self.sim
        assert sim is not None and self.last_ctx is not None
        per_v = dict.fromkeys(VERSIONS, 0)
        n = 0
        for cnt in self.last_ctx.counts.values():
            for cid, k in cnt.items():
                per_v[self.catalog.configs[cid].version] += k
                n += k
        held = sim.held_chips()
        return {"time_s": float(sim.now), "epoch": self._t, "vpods": n, "vpods_per_version": per_v,
                "chips": float(sum(held.values())), "energy_j": 0.0, "cost_usd": 0.0, "tokens": 0.0,
                "slo_violation_pct": 0.0, "slo_misses": 0.0, "power_w": 0.0, "arrived": 0, "finished": 0,
                "tokens_per_j": 0.0,
                "tokens_per_usd": 0.0, "action_adjusted": False, "episode_adjusted_actions": self._adjusted_actions,
                "emergency_scaleouts": 0}

    # ------------------------------------------------------------------------------------------ obs
    def _obs(self, ctx: Observation) -> NDArray[np.float32]:
        G = len(self.groups)
        maxl = float(self.levels[-1])
        rr = np.zeros(G)
        rp = np.zeros(G)
        tpr = np.zeros(G)
        arrays = (ctx.rate_recent, ctx.rate_peak, ctx.tokens_per_req)
        if all(a.dtype == np.float64 and a.shape == (2, NB) and a.flags.c_contiguous for a in arrays):
            # the loop below in one compiled call, in numpy's order of sums (sim/pairwise_sums.py)
            range_rates(*arrays, *self._range_arrays, rr, rp, tpr)
        else:
            for g, (p, lo, hi) in enumerate(self._ranges):
                rr[g] = ctx.rate_recent[p, lo:hi].sum()
                rp[g] = ctx.rate_peak[p, lo:hi].sum()
                w = ctx.rate_peak[p, lo:hi]
                tpr[g] = float((w * ctx.tokens_per_req[p, lo:hi]).sum() / w.sum()) if w.sum() > 0 else 0.0
        alive, ready, queue, peak_queue, util, per_v = GROUP_STATE_READERS[self.config.group_state_obs].read(self, ctx)
        quota = self.sim.quota if self.sim is not None else {}
        q_left = [1.0 if math.isinf(quota[v]) else (ctx.quota_left[v] / quota[v] if quota[v] > 0 else 0.0)
                  for v in VERSIONS]
        hour = (ctx.time_s / 3600.0 + float(self.scenario.get("start_hour", self.config.start_hour))) % 24.0
        trig = [math.sin(2 * math.pi * hour / 24.0), math.cos(2 * math.pi * hour / 24.0), self._t / self.horizon]
        flt = (rr, rp, tpr, alive, ready, util, self._ref_counts, ctx.slo_recent, per_v)
        if (self._compiled_obs and all(isinstance(x, np.ndarray) and x.dtype == np.float64 for x in flt)
                and per_v.shape == (len(VERSIONS), G)
                and all(x.shape == (G,) for x in flt[:7]) and ctx.slo_recent.shape == (2,)
                and self._option.dtype == np.int64 and self._option.shape == (G,)
                and len(self.obs_fields) == (12 + len(VERSIONS)) * G + 7 + len(VERSIONS)):
            # the parts below in one compiled pass into the buffer (the same float64 operations); the three
            # log1p parts stay numpy's (its float64 log1p is not libm's on every machine)
            obs = np.empty(len(self.obs_fields))
            fill_obs(obs, rr, rp, tpr, self.group_phase, alive, ready, per_v, self._option,
                     float(max(self.n_options - 1, 1)), util, self._ref_counts, self._vpod_full(tpr), ctx.slo_recent,
                     float(self._last["slo_satisfaction"]), float(self._last["slo_miss_share"]),
                     np.array(q_left, dtype=np.float64), *trig, float(self._mean_rate), maxl)
            obs[3 * G:4 * G] = np.log1p(tpr) / LOG_MAX_TOKENS
            o = (8 + len(VERSIONS)) * G  # after util: the queue and the peak queue
            obs[o:o + G] = np.log1p(queue) / 10.0
            obs[o + G:o + 2 * G] = np.log1p(peak_queue) / 10.0
            # np.clip's bounds as the two ufuncs (the same values, NaN kept, without np.clip's Python wrapper)
            return np.minimum(np.maximum(obs, -1.0, out=obs), 10.0, out=obs).astype(np.float32)
        share = np.zeros(G)
        for sel in self._phase_masks():
            tot = rr[sel].sum()
            if tot > 0:
                share[sel] = rr[sel] / tot
        parts = [
            rr / self._mean_rate, rp / self._mean_rate, share, np.log1p(tpr) / LOG_MAX_TOKENS,
            alive / maxl, ready / maxl, per_v.ravel() / maxl,
            self._option / max(self.n_options - 1, 1), util,
            np.log1p(queue) / 10.0, np.log1p(peak_queue) / 10.0,
            self._ref_counts / maxl, self._vpod_rate(tpr) / self._mean_rate,
            ctx.slo_recent, [self._last["slo_satisfaction"], self._last["slo_miss_share"]], q_left, trig,
        ]
        # each part into its slice of one float64 buffer (the values np.concatenate of the float64 parts gives)
        obs = np.empty(len(self.obs_fields))
        o = 0
        for x in parts:
            k = x.size if isinstance(x, np.ndarray) else len(x)
            obs[o:o + k] = x.ravel() if isinstance(x, np.ndarray) else x
            o += k
        if o != obs.size:  # pragma: no cover - the fields and the parts are listed together
            raise AssertionError(f"observation parts fill {o} of {obs.size} fields")
        return np.clip(obs, -1.0, 10.0, out=obs).astype(np.float32)

    def _phase_masks(self) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
        """``group_phase == p`` for p = 0, 1 (kept while the groups' phase array is the same object)."""
        cache = getattr(self, "_phase_mask_cache", None)
        if cache is None or cache[0] is not self.group_phase:
            cache = self._phase_mask_cache = (self.group_phase, (self.group_phase == 0, self.group_phase == 1))
        return cache[1]

    def _vpod_rate(self, tpr: NDArray[np.float64]) -> NDArray[np.float64]:
        """Per env group: requests/s one vPod of its configuration serves at its max batch (T_pod of
        §3.4) at the group's bucket and the window's tokens per request ``tpr`` (0 with no traffic)."""
        full = self._vpod_full(tpr)
        out = np.zeros(len(self.groups))
        for g in range(len(self.groups)):
            if tpr[g] <= 0:
                continue
            out[g] = full[g] / tpr[g]
        return out

    def _vpod_full(self, tpr: NDArray[np.float64]) -> NDArray[np.float64]:
        """Per env group with traffic (``tpr`` > 0): tokens/s of one vPod of its configuration at its bucket and max
        batch (0.0 elsewhere, and everywhere before ``reset``)."""
        sim = self.sim
        out = np.zeros(len(self.groups))
        if sim is None:
            return out
        # per group and option: tokens/s at the bucket and max batch, kept while the step tables and groups stay
        cache = getattr(self, "_full_tps_cache", None)
        if cache is None or cache[0] is not sim.tps or cache[1] is not sim.jmax or cache[2] is not self.options:
            width = max(self.n_options + 1, *(len(o) for o in self.options))
            table = np.zeros((len(self.groups), width))
            for g, opts in enumerate(self.options):
                b = self.group_bucket[g]
                for j, cid in enumerate(opts):
                    table[g, j] = float(sim.tps[cid, b, sim.jmax[cid, b]])
            cache = self._full_tps_cache = (sim.tps, sim.jmax, self.options, table)
        table = cache[3]
        idx = self.action_type.option_indices(self)
        return np.where(tpr > 0, table[np.arange(len(self.groups)), idx], 0.0)

    # ------------------------------------------------------------------------------------------ render
    def render(self) -> str | NDArray[np.uint8] | None:
        if self.render_mode == "rgb_array":
            return self._render_rgb()
        if self.render_mode != "ansi":
            return None
        sim, ctx = self.sim, self.last_ctx
        if sim is None or ctx is None:
            return "NPUAutoscale-v0 (not reset)\n"
        lines = [f"t = {sim.now / 3600.0:5.2f} h  epoch {self._t}/{self.horizon}  {self.cluster_config.model} on "
                 f"{self.workload.name}  slo(last epoch) {self._last['slo_satisfaction']:.3f}"]
        lines.append(f"{'group':>16} {'config':>28} {'alive':>5} {'ready':>5} {'queue':>6} {'util':>5}")
        for g, key in enumerate(self.groups):
            p, b = PHASES.index(key[0]), self.group_bucket[g]
            cid = self.options[g][self.action_type.option_index(self, g)]  # the residual mode offsets its choices
            lines.append(f"{key[0] + ' <=' + str(key[1]):>16} {self.catalog.configs[cid].label:>28} "
                         f"{int(ctx.alive[p, b]):>5} {int(ctx.ready[p, b]):>5} {int(ctx.queue[p, b]):>6} "
                         f"{ctx.util[p, b]:>5.2f}")
        return "\n".join(lines) + "\n"

    def _render_rgb(self) -> NDArray[np.uint8] | None:
        """A 96-px-high RGB picture of what the agent observes (None before ``reset()``): per env group (prefill
        blue, decode orange) ready vPods with booting ones stacked on top and the reference's target as a
        tick, all / the largest count level; then per group the utilization (green) and log1p(queue) / 10
        (red); then last epoch's SLO satisfaction (green) and the episode's progress (grey)."""
        if self.last_ctx is None:
            return None
        obs = self._obs(self.last_ctx)
        at = {name: float(v) for name, v in zip(self.obs_fields, obs, strict=True)}
        bars = []
        for g, (ph, edge) in enumerate(self.groups):
            key = f"{ph}[{edge}]"
            ready, alive = at[f"{key}.ready/max_level"], at[f"{key}.alive/max_level"]
            bars.append(Bar(ready, BLUE if self.group_phase[g] == 0 else ORANGE, max(alive - ready, 0.0),
                            LIGHT_BLUE if self.group_phase[g] == 0 else LIGHT_ORANGE,
                            at[f"{key}.reference_target/max_level"]))
        bars += [Bar(at[f"{ph}[{edge}].util"], GREEN) for ph, edge in self.groups]
        bars += [Bar(at[f"{ph}[{edge}].log1p_queue/10"], RED) for ph, edge in self.groups]
        bars += [Bar(at["slo_satisfaction_last"], GREEN), Bar(at["episode_progress"], GREY)]
        return render_bars(bars)


@njit(cache=True)
def fill_obs(obs, rr, rp, tpr, phase, alive, ready, per_v, option, opt_div, util, ref, full, slo, last0, last1, q_left,
             sin_h, cos_h, progress, mean_rate, maxl):  # pragma: no cover - compiled
    """The observation's parts in field order into ``obs`` (float64), except the three log1p parts (tokens per
    request, queue, peak queue), which the caller writes: the same float64 operations as the numpy parts of
    :meth:`ObservationsMixin._obs` (elementwise divisions; the length share's phase totals in numpy's summation
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
    def read(env: Any, ctx: Observation) -> tuple[NDArray[np.float64], ...]:
        raise NotImplementedError


class BucketGroupState(GroupStateReader):
    """``group_state_obs="bucket"`` (default): the entries at the group's own (top) length bucket."""

    @staticmethod
    def read(env: Any, ctx: Observation) -> tuple[NDArray[np.float64], ...]:
        G = len(env.groups)
        gp = env.group_phase
        gb, dec, gb_dec, ver = _group_tables(env)
        util = ctx.util[gp, gb].copy()
        sim = env.sim
        if sim is not None:
            # the simulator's util is the prefill fluid's busy share; for decode, batch-slot occupancy
            act = sim.decode_jobs()
            slots = ctx.slots[1, gb_dec]
            util[dec] = np.where(slots > 0, np.minimum(act[gb_dec] / np.maximum(slots, 1e-9), 1.0), 0.0)
        per_v = np.zeros((len(VERSIONS), G))
        for g, key in enumerate(env.groups):
            for cid, k in ctx.counts.get(key, {}).items():
                per_v[ver[cid], g] += k
        alive, ready = ctx.alive[gp, gb], ctx.ready[gp, gb]
        queue, peak_queue = ctx.queue[gp, gb], ctx.peak_queue[gp, gb]
        return alive, ready, queue, peak_queue, util, per_v


def _group_tables(env: Any) -> tuple[NDArray[np.int64], NDArray[np.bool_], NDArray[np.int64], list[int]]:
    """Per env group its bucket, whether it decodes, the decode groups' buckets, and per configuration its chip
    version's index in ``VERSIONS``; kept while the env's groups and catalog are the same objects."""
    key = (env.group_bucket, env.group_phase, env.catalog)
    cache = getattr(env, "_group_table_cache", None)
    if cache is None or any(a is not b for a, b in zip(cache[0], key, strict=True)):
        gb = np.array(env.group_bucket)
        dec = env.group_phase == 1
        ver = [VERSIONS.index(cf.version) for cf in env.catalog.configs]
        cache = env._group_table_cache = (key, (gb, dec, gb[dec], ver))
    return cache[1]


class RangeGroupState(GroupStateReader):
    """``group_state_obs="range"``: alive, ready, queue and peak queue (jobs; the sum of the buckets' peaks),
    utilization (prefill: busy share weighted by the ready vPods' batch slots; decode: active jobs / slots) and
    alive vPods per chip version, over every length bucket that maps to each env group (``_env_group``, as the
    residual mode's reference counts), so a reference's vPods at its own buckets inside the range count."""

    @staticmethod
    def read(env: Any, ctx: Observation) -> tuple[NDArray[np.float64], ...]:
        G = len(env.groups)
        eg = env._env_group.ravel()

        def agg(a: NDArray[np.float64]) -> NDArray[np.float64]:
            out = np.zeros(G)
            np.add.at(out, eg, np.asarray(a, dtype=np.float64).ravel())
            return out

        slots = np.asarray(ctx.slots, dtype=np.float64)
        busy = np.asarray(ctx.util, dtype=np.float64) * slots
        if env.sim is not None:
            busy[1] = env.sim.decode_jobs()
        sl = agg(slots)
        util = np.where(sl > 0, np.minimum(agg(busy) / np.maximum(sl, 1e-9), 1.0), 0.0)
        per_v = np.zeros((len(VERSIONS), G))
        for (phase, edge), cnt in ctx.counts.items():
            g = env._env_group[PHASES.index(phase), int(np.searchsorted(env.edges, edge))]
            for cid, k in cnt.items():
                per_v[VERSIONS.index(env.catalog.configs[cid].version), g] += k
        return agg(ctx.alive), agg(ctx.ready), agg(ctx.queue), agg(ctx.peak_queue), util, per_v


#: ``group_state_obs`` value -> its reader (the config's allowed values, ``GROUP_STATE_OBS``, must match).
GROUP_STATE_READERS: dict[str, type[GroupStateReader]] = {"bucket": BucketGroupState, "range": RangeGroupState}
