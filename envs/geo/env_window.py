"""``servegym/GeoRouteWindow-v0``: admit a scheduling window's requests to DCs, one step per window.

A thin driver of :class:`~servegym.envs.geo.sim.cluster.GeoSimulation` in ``window`` decision mode:
each regional scheduler collects requests over a window of ``window_s`` (100 ms) or
``window_max_requests`` (300), whichever closes first, and the agent decides the whole window
in one step, like the paper's ILP schedulers, by setting per-DC admission limits.

**Action** ``Box(-1, 1, (D,), float32)``: ``share_d = (a_d + 1) / 2`` is the share of DC d's
batch-slot headroom this window may fill. The range is symmetric because SB3's Gaussian
policies are centred on 0 (an all-zero action admits half of every headroom). The window's
capacity at d is ``cap_d = floor(share_d · H'_d)`` requests, with ``H'_d = max(0, H_d −
dispatched_sd)``: ``H_d`` the estimator's headroom (``Estimator.headroom_requests``: free batch
slots of the whole DC net of its queue, the ILP's capacity) less what this scheduler already sent
to d since d's last poll. The requests are then placed by :func:`assign_within_caps`:

1. rounds of deferred acceptance: every unplaced request proposes its lowest-carbon DC among
   its candidates (the action mask: SLO-feasible DCs, or every DC when none is) that still
   has capacity; each DC admits proposals in arrival order up to its remaining capacity;
   rejected requests propose again next round (at most D + 1 rounds, each vectorized);
2. fallback, for requests left when no candidate has capacity: the lowest-carbon candidate,
   beyond the caps (the MOER choice; so all shares 0 = MOER, and ``info["overflow"]`` counts them).

**Residual action** (``action_mode="residual"``): the same ``Box(-1, 1, (D,))`` scales the
admission capacity of the reference window scheduler (``reference``: the facility MILP by
default, or the standard/iterative ILP), which then solves the window itself
(:mod:`servegym.baselines.geo.milp`; one model, two drivers). With ``H_d`` the scheduler's window
headroom (:func:`~servegym.baselines.geo.ilp.window_headroom`) and ``n`` the window's size,

- ``a_d < 0`` scales it down: ``H'_d = floor(H_d · (1 + a_d))`` (``a_d = -1``: d admits nothing
  through the solve; the scheduler's fallback may still use d when nothing else has room);
- ``a_d > 0`` over-admits beyond the estimator's headroom: ``H'_d = H_d + floor(a_d · n)``
  (``a_d = 1``: the whole window may go to d, as far as its requests are SLO-feasible there);
- ``a = 0`` passes ``H_d`` unchanged: the placements, scheduling delay (the scheduler's modelled
  solve time) and therefore the whole run are the reference scheduler's exactly (tested).

The requests leave after the scheduler's modelled solve delay, as in the baseline run. The
observation adds the reference's capacities ``ref_cap[d]`` = squash(H_d / window size) (D values,
after the window block).

The two modes are the classes ``WindowDirect`` and ``WindowResidual`` of :mod:`servegym.envs.geo.actions`.

Out-of-space actions (wrong shape, NaN/inf, outside [-1, 1]) raise
:class:`~servegym.errors.ActionError` and change nothing.

**Observation** ``Box(-1, 1, (15 D + R + 8,), float32)`` (the small preset: 70 values), in order
(:attr:`GeoRouteWindowEnv.observation_names`):

1. the snapshot, per DC (9 D): :data:`~servegym.envs.geo.env_common.DC_FEATURES` (``age`` and
   ``own_dispatched`` at the window's close, for its scheduler);
2. the window at each DC (6 D): ``feasible_frac`` (share of its requests SLO-feasible at d),
   ``ttft_mean`` / ``tpot_mean`` = squash(mean estimate / SLO), ``carbon_mean`` = squash(mean
   carbon estimate / c_ref), ``local`` (d in the scheduler's region), ``capacity`` =
   squash(H'_d / window size);
3. the window (3 + R): ``size`` = requests / window_max_requests, ``log_isl_mean``,
   ``log_osl_est_mean`` (as in GeoRoute-v0, averaged), then a one-hot of the scheduler;
4. time and grid (5): :data:`~servegym.envs.geo.env_common.TIME_FEATURES`.

Reward (per window step), truncation and the configuration are as in GeoRoute-v0
(:mod:`servegym.envs.geo.env_common`).

**Info** (reset and every step): as in GeoRoute-v0 (``carbon_g``, ``finished``, ``slo_violations``,
``slo_violation_pct``, ``unfinished``, ``slo_misses``, ``ttft_p99_s``, ``sim_time_s``, ``osl_mode``,
``steps``; reset adds ``scenario``, the step that ends the run ``episode_metrics``), plus ``overflow``
(requests of the last window placed beyond the caps).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray
from servegym.envs.geo.actions import window_action_type
from servegym.envs.geo.env_common import (
    DC_FEATURES,
    TIME_FEATURES,
    GeoEnvBase,
    GeoEnvConfig,
    forecast_names,
    safe_ratio_squash,
    squash,
)
from servegym.envs.geo.sim.decisions import DecisionContext
from servegym.envs.geo.sim.provisioner import Snapshot
from servegym.envs.geo.window_kernels import assign_within_caps_into, window_dc_block_into

from servegym.errors import ConfigError

#: Per-DC features of the window, in observation order (the comments are the env cards' descriptions).
WINDOW_DC_FEATURES: tuple[str, ...] = (
    "feasible_frac",  # share of the window's requests SLO-feasible at d
    "ttft_mean",      # squash(mean TTFT estimate at d / TTFT SLO)
    "tpot_mean",      # squash(mean TPOT estimate at d / TPOT SLO)
    "carbon_mean",    # squash(mean carbon estimate at d / c_ref)
    "local",          # 1 if d is in the window's scheduler's region
    "capacity",       # squash(H'_d / window size): the window's admission capacity at d
)
#: The window's own features after the per-DC blocks (then the one-hot of its scheduler, ``origin[r]``).
WINDOW_FEATURES: tuple[str, ...] = (
    "size",              # requests / window_max_requests
    "log_isl_mean",      # mean log(1 + input tokens) / log(1 + KV pool tokens)
    "log_osl_est_mean",  # mean log(1 + output-length estimate) / log(1 + KV pool tokens)
)


def window_observation_names(n_dcs: int, n_regions: int, residual: bool = False, forecast_h: int = 0,
                             residuals: bool = False) -> list[str]:
    """The name of every observation entry of GeoRouteWindow-v0, in order."""
    feats = DC_FEATURES + WINDOW_DC_FEATURES + (("ref_cap",) if residual else ())
    names = [f"{f}[{d}]" for f in feats for d in range(n_dcs)]
    names += list(WINDOW_FEATURES) + [f"origin[{r}]" for r in range(n_regions)]
    return names + list(TIME_FEATURES) + forecast_names(n_dcs, forecast_h, residuals)


def assign_within_caps(carbon_g: NDArray[np.float64], candidates: NDArray[np.bool_],
                       cap: NDArray[np.int64]) -> tuple[NDArray[np.int64], int]:
    """Lowest-carbon placement of n requests on D DCs within per-DC capacities.

    Args:
        carbon_g: (n, D) estimated carbon of each request at each DC (g).
        candidates: (n, D) allowed DCs per request; every row has at least one.
        cap: (D,) requests each DC may admit (>= 0).

    Returns:
        (DC index per request, number placed beyond the caps by the fallback); see the module
        docstring for the rounds and the fallback. Compiled
        (:func:`~servegym.envs.geo.window_kernels.assign_within_caps_into`); the same placements as
        :func:`assign_within_caps_numpy` (tested).
    """
    carbon = np.asarray(carbon_g, dtype=np.float64)
    out = np.empty(carbon.shape[0], dtype=np.int64)
    left = assign_within_caps_into(carbon, np.asarray(candidates, dtype=bool), np.asarray(cap, dtype=np.int64), out)
    return out, int(left)


def assign_within_caps_numpy(carbon_g: NDArray[np.float64], candidates: NDArray[np.bool_],
                             cap: NDArray[np.int64]) -> tuple[NDArray[np.int64], int]:
    """:func:`assign_within_caps` as vectorized rounds of numpy operations: the reference formulation."""
    n, d = carbon_g.shape
    out = np.full(n, -1, dtype=np.int64)
    remaining = np.asarray(cap, dtype=np.int64).copy()
    cost = np.where(candidates, carbon_g, np.inf)
    for _ in range(d + 1):
        todo = np.flatnonzero(out < 0)
        if todo.size == 0:
            break
        c = np.where((remaining > 0)[None, :], cost[todo], np.inf)
        best = np.argmin(c, axis=1)
        ok = np.isfinite(c[np.arange(todo.size), best])
        if not ok.any():
            break
        rows, choice = todo[ok], best[ok]
        # rank of each proposal among those to the same DC, in arrival order
        order = np.argsort(choice, kind="stable")
        counts = np.bincount(choice, minlength=d)
        starts = np.cumsum(counts) - counts
        rank = np.empty(choice.size, dtype=np.int64)
        rank[order] = np.arange(choice.size) - starts[choice[order]]
        take = rank < remaining[choice]
        out[rows[take]] = choice[take]
        remaining -= np.bincount(choice[take], minlength=d)
    left = np.flatnonzero(out < 0)
    if left.size:
        out[left] = np.argmin(cost[left], axis=1)
    return out, int(left.size)


class GeoRouteWindowEnv(GeoEnvBase):
    """One step per scheduling window (see the module docstring).

    Args:
        config: a :class:`GeoEnvConfig`, a dict of overrides of ``GeoEnvConfig.default_config()``,
            or None.
        render_mode: ``None``, ``"ansi"`` or ``"rgb_array"``.
        **overrides: further config keys.
    """

    decision_mode = "window"

    def __init__(self, config: GeoEnvConfig | dict[str, Any] | None = None, render_mode: str | None = None,
                 **overrides: Any) -> None:
        super().__init__(config, render_mode, **overrides)
        d, r = self.n_dcs, self.n_regions
        if self.config.decide_at != "arrival":
            raise ConfigError(f"decide_at = {self.config.decide_at!r} is for GeoRoute-v0; allowed for "
                              "GeoRouteWindow-v0: 'arrival' (the default: it decides per window anyway)")
        self.action_type = window_action_type(self.config, d)
        self.residual = self.action_type.residual
        k = 15 + self.action_type.extra_blocks
        self.obs_dim = k * d + r + 8 + self._fc_n + self._res_n
        self._time_lo = k * d + r + 3
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(self.obs_dim,), dtype=np.float32)
        self.action_space = self.action_type.space()
        self._overflow = 0

    @property
    def observation_names(self) -> list[str]:
        return window_observation_names(self.n_dcs, self.n_regions, self.residual, self.config.ci_forecast_h,
                                        self.config.observe_residuals)

    # -- Gymnasium API ------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[NDArray[np.float32], dict[str, Any]]:
        super().reset(seed=seed)
        sim = self._new_simulation(seed)
        # the scales of the window means: TTFT SLO, TPOT SLO (s), reference carbon (g)
        self._scales = np.array([sim.config.ttft_slo_s, sim.config.tpot_slo_s, self._c_ref])
        self.action_type.reset(sim)
        self._begin_window(sim.next_decision())
        self._overflow = 0
        assert self._tracker is not None
        self._tracker.update()
        info = dict(self._tracker.info)
        info["steps"] = 0
        info["scenario"] = dict(self.scenario)
        info["overflow"] = 0
        if self.state.ctx is None:
            self._episode_over = True
            return self.end_observation(), info
        return self._observation(), info

    def step(self, action: Any) -> tuple[NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        self._require_running()
        st = self.state
        placement = self.action_type.decode(st, action)
        sim, ctx = self.sim, st.ctx
        assert sim is not None and ctx is not None and self._tracker is not None
        est = ctx.estimates
        dc, overflow = placement.dc, placement.overflow
        sim.apply(ctx, dc, placement.sched_delay_s)
        reward = 0.0
        rows = np.arange(dc.size)
        if self.config.reward == "dense":
            cost = self._tracker.dense_costs(est.carbon_g[rows, dc], est.feasible[rows, dc])
            reward = -float(cost.sum())
        else:
            cost = rows[:0].astype(np.float64)
        self._tracker.record(ctx.request_id, cost, est.ttft_s[rows, dc], est.tpot_s[rows, dc])
        self._overflow = overflow
        self._begin_window(sim.next_decision())
        reward += self._tracker.update()
        run_over = st.ctx is None
        truncated, info = self.finish_step(run_over)
        info["overflow"] = overflow
        obs = self.end_observation() if run_over else self._observation()
        return obs, reward, False, truncated, info

    def placements(self, action: Any) -> NDArray[np.int64]:
        """The DC each request of the current window would get under ``action`` (nothing changes;
        direct mode only: the residual mode's solve advances its scheduler's state)."""
        self._require_running()
        assert self.state.ctx is not None
        return self.action_type.placements(self.state, action)

    # -- internals ------------------------------------------------------------------------------
    def _begin_window(self, ctx: DecisionContext | None) -> None:
        """The next window (``None``: the run is over) and the estimator's headroom of its snapshot."""
        self.state.begin_window(ctx, None if ctx is None else self._snapshot_features(ctx.snapshot)[1])

    def _observation(self) -> NDArray[np.float32]:
        st = self.state
        sim, ctx = self.sim, st.ctx
        assert sim is not None and ctx is not None
        d, r = self.n_dcs, self.n_regions
        cfg = sim.config
        snap = ctx.snapshot
        n = ctx.n_requests
        s = int(ctx.scheduler[0])
        obs = np.empty(self.obs_dim, dtype=np.float32)
        obs[:7 * d] = self._snapshot_features(snap)[0]
        self._window_block(obs)
        o = self.action_type.write(st, obs, 15 * d)
        obs[o] = min(n / cfg.window_max_requests, 1.0)
        obs[o + 1] = min(float(np.log1p(ctx.input_tokens).mean()) / self._ln_cap, 1.0)
        obs[o + 2] = min(float(np.log1p(ctx.osl_estimate).mean()) / self._ln_cap, 1.0)
        obs[o + 3:o + 3 + r] = np.arange(r) == s
        obs[o + 3 + r:o + 8 + r] = self._clock.features(ctx.time_s, snap)
        if self._fc_n:
            obs[o + 8 + r:o + 8 + r + self._fc_n] = self._clock.forecast(ctx.time_s)
        if self._res_n:
            obs[o + 8 + r + self._fc_n:] = self._tracker.residual_features()
        return obs

    def _window_block(self, obs: NDArray[np.floating]) -> None:
        """The observation's values ``age`` to ``capacity`` (``obs[7 D:15 D]``), compiled
        (:func:`~servegym.envs.geo.window_kernels.window_dc_block_into`), bit-identical to
        :meth:`_window_block_numpy` (tested, on float64 buffers too)."""
        ctx = self.state.ctx
        assert ctx is not None and self.sim is not None
        d = self.n_dcs
        if d < 2:  # one DC: numpy sums a single column pairwise, which the compiled row-order sum is not
            self._window_block_numpy(obs)
            return
        snap = ctx.snapshot
        est = ctx.estimates
        s = int(ctx.scheduler[0])
        window_dc_block_into(obs, 7 * d, ctx.time_s, snap.polled_at_s, self.sim.config.poll_interval_s,
                             ctx.dispatched[s], self._inv_e, est.ttft_s, est.tpot_s, est.carbon_g, est.feasible,
                             self._scales, snap.rtt_s[s], self.state.headroom)

    def _window_block_numpy(self, obs: NDArray[np.floating]) -> None:
        """The observation's values ``age`` to ``capacity`` (``obs[7 D:15 D]``) as numpy expressions: the
        reference :func:`~servegym.envs.geo.window_kernels.window_dc_block_into` is tested against."""
        sim, ctx = self.sim, self.state.ctx
        assert sim is not None and ctx is not None
        d = self.n_dcs
        cfg = sim.config
        snap = ctx.snapshot
        est = ctx.estimates
        n = ctx.n_requests
        s = int(ctx.scheduler[0])
        obs[7 * d:8 * d] = np.clip((ctx.time_s - snap.polled_at_s) / cfg.poll_interval_s, 0.0, 1.0)
        obs[8 * d:9 * d] = squash(ctx.dispatched[s] * self._inv_e)
        o = 9 * d
        inv_n = 1.0 / n
        obs[o:o + d] = np.count_nonzero(est.feasible, axis=0) * inv_n
        means = np.stack((est.ttft_s.sum(axis=0), est.tpot_s.sum(axis=0), est.carbon_g.sum(axis=0))) * inv_n
        obs[o + d:o + 4 * d] = safe_ratio_squash(means, self._scales[:, None]).ravel()
        obs[o + 4 * d:o + 5 * d] = snap.rtt_s[s] == 0.0
        obs[o + 5 * d:o + 6 * d] = squash(self.state.own_headroom() / max(n, 1))

    def _current_snapshot(self) -> Snapshot | None:
        ctx = self.state.ctx
        return ctx.snapshot if ctx is not None else None

    def _render_extra(self) -> str:
        ctx = self.state.ctx
        if ctx is None:
            return "end"
        return f"window sched={int(ctx.scheduler[0])} n={ctx.n_requests} overflow={self._overflow}"

    def _render_mask(self) -> NDArray[np.bool_] | None:
        ctx = self.state.ctx
        if ctx is None:
            return None
        return ctx.action_mask().any(axis=0)
