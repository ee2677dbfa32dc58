"""Multi-agent geo routing: a PettingZoo ``ParallelEnv`` with one agent per regional scheduler.

``from servegym.envs.geo import parallel_env``; ``env = parallel_env(config={...}, **overrides)``
takes GeoRoute-v0's configuration (:class:`~servegym.envs.geo.env_common.GeoEnvConfig`: preset,
reward, ``action_mode`` direct or residual, grid clock, residuals, ...). It is a driver of the same
GeoRoute-v0 core (and through it of the same simulator): the agents' placements are applied by
the core exactly as if one agent had made them one by one in arrival order, which gives the same
run because a request's observation depends only on the snapshot and on its own scheduler's
dispatches (the schedulers share nothing else within a poll interval, as in the paper).

Agents ``scheduler_<r>`` (``r`` the region index; ``info["region"]`` names it). At every
parallel step each agent whose region has an undecided request in the current poll interval
decides its next one (in its arrival order); an agent without one gets an observation with
``has_request = 0`` and its action is ignored (any valid action). When every request of the
interval is decided the interval is applied and the next one loaded.

- **Observation** (per agent): GeoRoute-v0's observation of the agent's current request (its
  own region's request, the shared snapshot, stale by up to Δp = ``geo.poll_interval_s``, its own
  dispatch counts; in residual mode the reference's choice), then ``has_request`` (1/0).
  ``Box(-1, 1, (GeoRoute-v0's size + 1,))``. An idle agent sees the snapshot block, its time
  features and zeros.
- **Action** (per agent): GeoRoute-v0's (``Discrete(D)`` or ``Discrete(D + 1)``);
  ``infos[agent]["action_mask"]`` carries GeoRoute-v0's mask for it (all ones when idle) as int8, the
  dtype ``Space.sample(mask)`` and PettingZoo's API tests require (``action_masks(agent)`` gives it as bool).
- **Reward**: a deciding agent gets its decision's dense credit; the poll settlements (and, in
  ``reward="poll"``, the measured cost) are shared equally by all agents (the fleet's cost is
  common). The sum over agents and steps equals GeoRoute-v0's return identity:
  ``-(w_carbon * gCO2 + w_slo * every miss)`` of the run (tested).
- **Episode end**: truncation of every agent when the run is complete (or after ``max_steps``
  parallel steps); never termination.

A dead-reckoned residual reference (``<rule>+dr``) is refused: its occupancy counts every scheduler's
placements, so the agents' observations would depend on each other's decisions of the same step.

Window decisions (GeoRouteWindow-v0) are not offered per agent here: the window env already decides
one scheduler's window per step.

Requires the ``marl`` extra (``pip install "servegym[marl]"``: pettingzoo, supersuit).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from servegym.errors import ActionError, ConfigError

try:
    from pettingzoo import ParallelEnv
except ImportError as exc:  # pragma: no cover - the extra is installed in CI
    raise ConfigError("the multi-agent geo env needs pettingzoo; allowed: pip install 'servegym[marl]'") from exc

from servegym.envs.geo.env_common import GeoEnvConfig
from servegym.envs.geo.env_route import GeoRouteEnv


class GeoRouteParallelEnv(ParallelEnv):
    """One agent per regional scheduler on GeoRoute-v0's core (module docstring).

    Args:
        config: a :class:`GeoEnvConfig`, a dict of overrides, or None.
        render_mode: ``None``, ``"ansi"`` or ``"rgb_array"`` (GeoRoute-v0's renderings).
        **overrides: further config keys.
    """

    metadata: dict[str, Any] = {"name": "servegym_geo_route_parallel_v0",  # noqa: RUF012 (PettingZoo API)
                                "render_modes": ["ansi", "rgb_array"], "is_parallelizable": True}

    def __init__(self, config: GeoEnvConfig | dict[str, Any] | None = None, render_mode: str | None = None,
                 **overrides: Any) -> None:
        self.core = GeoRouteEnv(config, render_mode=render_mode, **overrides)
        self.config = self.core.config
        planner = getattr(self.core.action_type, "planner", None)
        if planner is not None and planner.dead_reckoned:
            raise ConfigError(f"reference = {self.config.reference!r} dead-reckons from every scheduler's placements, "
                              "which the agents here decide out of arrival order; allowed: a reference without "
                              "'+dr' (GeoRoute-v0 takes it)")
        self.render_mode = render_mode
        n_regions = self.core.n_regions
        self.possible_agents = [f"scheduler_{r}" for r in range(n_regions)]
        self.agents: list[str] = []
        self._dim = self.core.obs_dim + 1
        from servegym.envs.grid import get_topology

        self.region_names = get_topology(self.core.geo_config.topology).regions
        self._steps = 0

    @functools.cache  # noqa: B019 (PettingZoo convention: the same space object per agent)
    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, shape=(self._dim,), dtype=np.float32)

    @functools.cache  # noqa: B019
    def action_space(self, agent: str) -> spaces.Discrete:
        return spaces.Discrete(int(self.core.action_space.n))

    # -- API ------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, NDArray[np.float32]], dict[str, dict[str, Any]]]:
        core = self.core
        _, info = core.reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        self._steps = 0
        self._info = info
        if core.state.ctx is None:  # an empty run: nothing to decide
            self._rows_of = [np.zeros(0, dtype=np.int64) for _ in self.possible_agents]
            self._next = [0] * len(self.possible_agents)
            obs = {a: self._idle_observation(r) for r, a in enumerate(self.agents)}
            infos = self._infos(info)
            self.agents = []
            return obs, infos
        self._queue_interval()
        return self._observations(), self._infos(info)

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, NDArray[np.float32]], dict[str, float],
                                                      dict[str, bool], dict[str, bool], dict[str, dict[str, Any]]]:
        core = self.core
        if not self.agents:
            raise ActionError("the episode is over (or reset() was never called); call reset() first")
        if not isinstance(actions, dict):
            raise ActionError(f"actions = {actions!r} is not a dict; allowed: {{agent: action}} for {self.agents}")
        decided: list[tuple[int, int]] = []
        for r, agent in enumerate(self.possible_agents):
            row = self._pending(r)
            if row is None:
                continue
            if agent not in actions:
                raise ActionError(f"actions has no entry for {agent!r}, which has a request to place; "
                                  f"allowed: a dict with every agent of {self.agents}")
            decided.append((r, core.action_type.check(actions[agent])))
        rewards = {a: 0.0 for a in self.agents}
        st = core.state
        cursor = st.i  # the single-agent env's row, which these rows are decided around
        for r, a in decided:  # checked all first: a bad action changes nothing
            row = self._pending(r)
            assert row is not None
            st.i = row
            rewards[self.possible_agents[r]] += core.decide_row(a)
            self._next[r] += 1
            self._left -= 1
        st.i = cursor
        if self._left == 0:
            shared = core.close_interval() / len(self.agents)
            for a in rewards:
                rewards[a] += shared
            if st.ctx is not None:
                self._queue_interval()
        self._steps += 1
        run_over = st.ctx is None
        truncated, info = core.finish_step(run_over)  # also max_steps, counted in parallel steps
        self._info = info
        if run_over:
            obs = {a: self._end_observation() for a in self.agents}
        else:
            obs = self._observations()
        infos = self._infos(info)
        terms = {a: False for a in self.agents}
        truncs = {a: truncated for a in self.agents}
        if truncated:
            core.end_episode()
            self.agents = []
        return obs, rewards, terms, truncs, infos

    def render(self) -> str | NDArray[np.uint8] | None:
        return self.core.render()

    def close(self) -> None:
        self.core.close()

    def action_masks(self, agent: str) -> NDArray[np.bool_]:
        """The agent's mask for its current request (all True when it has none)."""
        r = self.possible_agents.index(agent)
        row = self._pending(r) if self.agents else None
        n = int(self.core.action_space.n)
        if row is None:
            return np.ones(n, dtype=bool)
        mask = self.core.state.feasible[row]
        return np.append(mask, True) if n > self.core.n_dcs else mask.copy()

    # -- internals ------------------------------------------------------------------------------
    def _queue_interval(self) -> None:
        """Per scheduler, the rows of the newly loaded interval in arrival order."""
        sched = np.asarray(self.core.state.scheduler, dtype=np.int64)
        self._rows_of = [np.flatnonzero(sched == r) for r in range(len(self.possible_agents))]
        self._next = [0] * len(self.possible_agents)
        self._left = int(sched.size)

    def _pending(self, r: int) -> int | None:
        rows = self._rows_of[r]
        k = self._next[r]
        return int(rows[k]) if k < rows.size else None

    def _observations(self) -> dict[str, NDArray[np.float32]]:
        out = {}
        for r, agent in enumerate(self.agents):
            row = self._pending(r)
            if row is None:
                out[agent] = self._idle_observation(r)
            else:
                obs = np.empty(self._dim, dtype=np.float32)
                obs[:-1] = self.core.row_observation(row)
                obs[-1] = 1.0
                out[agent] = obs
        return out

    def _idle_observation(self, r: int) -> NDArray[np.float32]:
        obs = self._end_observation()
        names_r = self.core.observation_names.index(f"origin[{r}]")
        obs[names_r] = 1.0
        return obs

    def _end_observation(self) -> NDArray[np.float32]:
        obs = np.zeros(self._dim, dtype=np.float32)
        obs[:-1] = self.core.end_observation()
        return obs

    def _infos(self, info: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {a: {**info, "region": self.region_names[r], "action_mask": self.action_masks(a).astype(np.int8)}
                for r, a in enumerate(self.possible_agents) if a in self.agents}


def parallel_env(config: GeoEnvConfig | dict[str, Any] | None = None, render_mode: str | None = None,
                 **overrides: Any) -> GeoRouteParallelEnv:
    """The multi-agent geo routing env (PettingZoo convention; see :class:`GeoRouteParallelEnv`)."""
    return GeoRouteParallelEnv(config, render_mode=render_mode, **overrides)
