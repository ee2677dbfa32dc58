"""``servegym/GeoRoute-v0``: route each request of the geo simulator to a DC, one step per request.

A thin driver of :class:`~servegym.envs.geo.sim.cluster.GeoSimulation` in ``request`` decision mode.
At each provisioner poll interval the env takes the interval's arrivals as one context
(``sim.next_batch()``: every one of them is decided on the same snapshot) and hands them to the
agent one per step, in arrival order; when the last one is decided it applies the interval's
placements (``sim.apply``), which is exactly what deciding them one by one would do (the
simulator buffers placements until the poll anyway). The scheduler's own dispatch counts
(``ctx.dispatched``) are advanced step by step, as the simulator would. Observations and masks
of a whole interval are built in one vectorized pass; a step only writes the scheduler's
dispatch counts into the request's row. (When ``max_steps`` truncates an episode inside a poll
interval, that interval's decided requests are never applied: the run is discarded at reset.)

**Action** ``Discrete(D)`` (``action_mode="direct"``, the default): the DC index of the current
request. ``action_mode="residual"``: ``Discrete(D + 1)``, where action ``D`` means "what the
reference scheduler (``reference``, the facility MILP's window plan by default, or greedy)
would do for this request", computed on the same snapshot and own-dispatch counts
(:mod:`servegym.envs.geo.reference`); the observation then ends with a one-hot of that choice
(``ref[d]``, D values). With a window reference and ``decide_at="window"`` the simulator hands out the
reference's own windows (one step per request of a window, all leaving at the window's close plus the
reference's modelled solve delay), so action ``D`` at every step is the reference's own run exactly
(tested); by default (``decide_at="arrival"``) each request leaves at its arrival instead. Anything else (out of range, a float, a bool, a wrong shape) raises
:class:`~servegym.errors.ActionError` and changes nothing. :meth:`GeoRouteEnv.action_masks`
gives the SLO-feasible DCs under the shared estimator (``Estimates.mask``: all DCs when none is
feasible; the reference action is always allowed), the mask sb3-contrib's MaskablePPO reads.
Each mode is a class of :mod:`servegym.envs.geo.actions` (``RouteDirect``, ``RouteResidual``,
``RouteResidualWindow``), chosen from the config.
The mask is advice, not a constraint: a masked DC is a real placement (the estimator may be wrong, and
sending a request to a predicted-infeasible DC is a choice the agent may make and pay for in the reward), so
it is executed as chosen and never altered. That is why there is no ``info["action_adjusted"]`` here: pd and
npu set it because they replace an infeasible action; geo replaces nothing.

**Observation** ``Box(-1, 1, (14 D + R + 7,), float32)`` with D DCs and R regions (schedulers);
the small preset has D = 4, R = 2: 65 values. Blocks, in order (feature-major: a D-block holds
one feature for DC 0..D-1; :attr:`GeoRouteEnv.observation_names` names every entry):

1. the snapshot, per DC (9 D): :data:`~servegym.envs.geo.env_common.DC_FEATURES`;
2. this request at each DC (5 D): ``ttft`` = squash(TTFT estimate / TTFT SLO) (0.5 = on the
   budget), ``tpot`` = squash(TPOT estimate / TPOT SLO), ``carbon`` = squash(carbon estimate /
   c_ref) with c_ref the engine carbon of a mean request on an idle engine at 1000 g/kWh,
   ``feasible`` (0/1, both estimates within the SLO), ``local`` (1 if the DC is in the
   request's region: no RTT);
3. the request (2 + R): ``log_isl`` = log(1 + ISL) / log(1 + KV pool tokens),
   ``log_osl_est`` likewise for the OSL estimate the estimator used (the workload mean, or the
   true OSL in oracle mode), then a one-hot of its scheduler (region);
4. time and grid (5): :data:`~servegym.envs.geo.env_common.TIME_FEATURES`.

``squash(x) = x / (1 + x)``. Reward, truncation and the configuration are described in
:mod:`servegym.envs.geo.env_common`.

**Info** (reset and every step): the running ``carbon_g``, ``finished`` (requests), ``slo_violations``
(finished requests that missed TTFT or TPOT), ``slo_violation_pct`` (of finished requests),
``unfinished`` (requests that never finished: 0 until the run ends), ``slo_misses``
(``slo_violations + unfinished``, the count the reward charges), ``ttft_p99_s``, ``sim_time_s``,
``osl_mode``, ``steps``; reset adds ``scenario`` (the episode's draw), and the step that ends the run
adds ``episode_metrics`` (the simulator's full summary, the figures the baselines report).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray
from servegym.envs.geo.actions import route_action_class, route_action_type
from servegym.envs.geo.env_common import (
    DC_FEATURES,
    TIME_FEATURES,
    GeoEnvBase,
    GeoEnvConfig,
    forecast_names,
    safe_ratio_squash,
)
from servegym.envs.geo.sim.provisioner import Snapshot

#: Per-DC features of the current request, in observation order (the comments are the env cards' descriptions).
REQUEST_DC_FEATURES: tuple[str, ...] = (
    "ttft",      # squash(TTFT estimate at d / TTFT SLO): 0.5 = on the budget
    "tpot",      # squash(TPOT estimate at d / TPOT SLO)
    "carbon",    # squash(carbon estimate at d / c_ref), c_ref a mean request on an idle engine at 1000 g/kWh
    "feasible",  # 1 if both estimates are within the SLO at d, else 0
    "local",     # 1 if d is in the request's region (no RTT)
)
#: The request's own features after the per-DC blocks (then the one-hot of its region, ``origin[r]``).
REQUEST_FEATURES: tuple[str, ...] = (
    "log_isl",      # log(1 + input tokens) / log(1 + KV pool tokens)
    "log_osl_est",  # log(1 + the output-length estimate the estimator used) / log(1 + KV pool tokens)
)


def route_observation_names(n_dcs: int, n_regions: int, residual: bool = False, forecast_h: int = 0,
                            residuals: bool = False) -> list[str]:
    """The name of every observation entry of GeoRoute-v0, in order."""
    names = [f"{f}[{d}]" for f in DC_FEATURES + REQUEST_DC_FEATURES for d in range(n_dcs)]
    names += list(REQUEST_FEATURES) + [f"origin[{r}]" for r in range(n_regions)]
    names += list(TIME_FEATURES) + forecast_names(n_dcs, forecast_h, residuals)
    return names + ([f"ref[{d}]" for d in range(n_dcs)] if residual else [])


class GeoRouteEnv(GeoEnvBase):
    """One step per request decision (see the module docstring).

    Args:
        config: a :class:`GeoEnvConfig`, a dict of overrides of ``GeoEnvConfig.default_config()``,
            or None.
        render_mode: ``None``, ``"ansi"`` (one line of state) or ``"rgb_array"`` (per-DC bars).
        **overrides: further config keys (``gym.make(id, w_slo=2.0)``).
    """

    decision_mode = "request"

    def __init__(self, config: GeoEnvConfig | dict[str, Any] | None = None, render_mode: str | None = None,
                 **overrides: Any) -> None:
        super().__init__(config, render_mode, **overrides)
        d, r = self.n_dcs, self.n_regions
        self.action_type = route_action_type(self.config, self.geo_config, d)
        self.residual = self.action_type.residual
        self._base_dim = 14 * d + r + 7 + self._fc_n + self._res_n
        self._res_lo = 14 * d + r + 7 + self._fc_n
        self.obs_dim = self._base_dim + self.action_type.extra_dims
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(self.obs_dim,), dtype=np.float32)
        self.action_space = self.action_type.space()
        self._disp_lo, self._disp_hi = 8 * d, 9 * d
        self._time_lo = 14 * d + r + 2
        self._dense = self.config.reward == "dense"

    def simulator_mode(self) -> str:
        """``"window"`` with ``decide_at = "window"`` (the simulator hands out the reference's windows), else
        ``"request"`` (the action mode's, :mod:`servegym.envs.geo.actions`)."""
        return route_action_class(self.config).simulator_mode

    @property
    def observation_names(self) -> list[str]:
        return route_observation_names(self.n_dcs, self.n_regions, self.residual, self.config.ci_forecast_h,
                                       self.config.observe_residuals)

    # -- Gymnasium API ------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[NDArray[np.float32], dict[str, Any]]:
        super().reset(seed=seed)
        sim = self._new_simulation(seed)
        self.action_type.reset(sim)
        self._load_interval()
        assert self._tracker is not None
        self._tracker.update()
        self._write_residuals()
        info = dict(self._tracker.info)
        info["steps"] = 0
        info["scenario"] = dict(self.scenario)
        if self.state.ctx is None:  # an empty run
            self._episode_over = True
            return self.end_observation(), info
        return self._observation(), info

    def step(self, action: Any) -> tuple[NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        self._require_running()
        st = self.state
        reward = self.decide_row(action)
        st.i += 1
        if st.i == st.n:
            reward += self.close_interval()
        run_over = st.ctx is None
        truncated, info = self.finish_step(run_over)
        obs = self.end_observation() if run_over else self._observation()
        return obs, reward, False, truncated, info

    def decide_row(self, action: Any) -> float:
        """Place the current row (``state.i``) on the DC ``action`` means in the action mode (ActionError if it is
        not one, and nothing changes); its dense reward."""
        st = self.state
        i = st.i
        a = self.action_type.decode(st, action)
        st.record(i, a)
        return -float(self._cost[i, a]) if self._dense else 0.0

    def close_interval(self) -> float:
        """Every request of the interval is decided: apply them, advance the simulator to the next
        decision, and return the settlement (dense) or the measured cost (poll)."""
        st = self.state
        assert self.sim is not None and self._tracker is not None and st.ctx is not None
        ctx, rows, placed = st.ctx, np.arange(st.n), st.placed
        # decide_at = "window": the window leaves after the reference's modelled solve delay, as in its own run
        self.sim.apply(ctx, placed, self.action_type.delay_s(st))
        if self._dense or self._res_n:
            est = ctx.estimates
            self._tracker.record(ctx.request_id, self._cost[rows, placed] if self._dense else rows[:0],
                                 est.ttft_s[rows, placed], est.tpot_s[rows, placed])
        self._load_interval()
        reward = self._tracker.update()
        self._write_residuals()
        return reward

    def action_masks(self) -> NDArray[np.bool_]:
        """(D,) DCs the estimator deems SLO-feasible for the current request; all DCs when none is
        (or when no request is pending). A fresh array."""
        if self.state.ctx is None or self._episode_over:
            return np.ones(self.action_space.n, dtype=bool)
        return self.action_type.mask(self.state)

    def follow_action(self) -> int:
        """The residual mode's "do what the reference does" action, ``D`` (the benchmark's ``follow``
        policy); the direct mode has none (ConfigError)."""
        return self.action_type.follow_action()

    # -- internals ------------------------------------------------------------------------------
    def _load_interval(self) -> None:
        """Take the next poll interval's arrivals and precompute their observation rows and masks."""
        sim = self.sim
        assert sim is not None
        ctx = sim.next_batch()
        st = self.state
        st.begin_interval(ctx)
        if ctx is None:
            return
        n, d, r = ctx.n_requests, self.n_dcs, self.n_regions
        snap = ctx.snapshot
        est = ctx.estimates
        cfg = sim.config
        g = np.empty((n, self.obs_dim), dtype=np.float32)
        g[:, :7 * d] = self._snapshot_features(snap)[0]
        t = ctx.decision_s
        g[:, 7 * d:8 * d] = np.clip((t[:, None] - snap.polled_at_s[None, :]) / cfg.poll_interval_s, 0.0, 1.0)
        o = 9 * d
        g[:, o:o + d] = safe_ratio_squash(est.ttft_s, cfg.ttft_slo_s)
        g[:, o + d:o + 2 * d] = safe_ratio_squash(est.tpot_s, cfg.tpot_slo_s)
        g[:, o + 2 * d:o + 3 * d] = safe_ratio_squash(est.carbon_g, self._c_ref)
        g[:, o + 3 * d:o + 4 * d] = est.feasible
        sched = np.asarray(ctx.scheduler, dtype=np.int64)
        g[:, o + 4 * d:o + 5 * d] = snap.rtt_s[sched] == 0.0
        o += 5 * d
        g[:, o] = np.minimum(np.log1p(ctx.input_tokens) / self._ln_cap, 1.0)
        g[:, o + 1] = np.minimum(np.log1p(ctx.osl_estimate) / self._ln_cap, 1.0)
        g[:, o + 2:o + 2 + r] = sched[:, None] == np.arange(r)[None, :]
        g[:, o + 2 + r:o + 7 + r] = self._clock.features(t, snap)
        if self._fc_n:
            g[:, o + 7 + r:o + 7 + r + self._fc_n] = self._clock.forecast(t)
        self._rows = g
        self.action_type.load(st, g, self._base_dim)
        if self._dense:
            assert self._tracker is not None
            self._cost = self._tracker.dense_costs(est.carbon_g, est.feasible)

    def _write_residuals(self) -> None:
        """The residual block of the interval's rows, once the tracker has seen its polls."""
        if self._res_n and self.state.ctx is not None and self._tracker is not None:
            self._rows[:, self._res_lo:self._res_lo + self._res_n] = self._tracker.residual_features()

    def _observation(self) -> NDArray[np.float32]:
        return self.row_observation(self.state.i)

    def row_observation(self, i: int) -> NDArray[np.float32]:
        """Row ``i``'s observation (a view of the interval's table, current own-dispatch counts)."""
        st = self.state
        row = self._rows[i]
        x = st.dispatched[st.scheduler[i]] * self._inv_e
        row[self._disp_lo:self._disp_hi] = x / (1.0 + x)
        self.action_type.write(st, row, self._base_dim, i)
        return row

    def _current_snapshot(self) -> Snapshot | None:
        ctx = self.state.ctx
        return ctx.snapshot if ctx is not None else None

    def _render_extra(self) -> str:
        st = self.state
        if st.ctx is None:
            return "end"
        i = min(st.i, st.n - 1)
        return (f"req={int(st.ctx.request_id[i])} sched={st.scheduler[i]} "
                f"ISL={int(st.ctx.input_tokens[i])}")

    def _render_mask(self) -> NDArray[np.bool_] | None:
        return self.action_masks()
