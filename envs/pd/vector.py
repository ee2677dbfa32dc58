"""A native :class:`gymnasium.vector.VectorEnv` for the pd ids: N scenarios stepped in one numpy batch.

``gymnasium.make_vec("servegym/PDProvision-v0", num_envs=N, vectorization_mode="vector_entry_point")``
(and the Residual / Front ids) builds :class:`PDVectorEnv`. It holds N
:class:`~servegym.envs.pd.env.PDProvisionEnv` instances (each its own drawn day, generator and state) and
runs a step as the single env does, in three parts: each env decodes its action and draws its arrivals,
then the fluid periods of all N run as one array program (:func:`servegym.envs.pd.fluid.fluid_periods`, the
same function the single env calls with itself alone), then each env computes its reward, reference,
info and observation. Results equal N separate envs with the same seeds (tested, bit for bit), including
Gymnasium 1.x's default next-step autoreset: the step after an episode ends resets that env (reward 0,
not terminated, not truncated, the reset's observation and info) and ignores its action, as
:class:`gymnasium.vector.SyncVectorEnv` does. ``reset(seed=s)`` seeds env i with s + i; a list gives one
seed per env; ``options={"reset_mask": mask}`` resets only the masked envs. ``max_episode_steps`` (passed
by ``make_vec`` from the id's spec) truncates as :class:`gymnasium.wrappers.TimeLimit` would.
:meth:`action_masks` stacks the envs' masks, one row per env. ``mode="request"`` is accepted and steps
its simulators one after another (no batch). Speed: ``benchmarks/pd_vector_speed.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, iterate
from numpy.typing import NDArray
from servegym.envs.pd.env import PDEnvConfig, PDProvisionEnv
from servegym.envs.pd.fluid import fluid_periods

from servegym.errors import ConfigError

MAX_NUM_ENVS = 65_536


class PDVectorEnv(VectorEnv):
    """N pd environments of one config stepped as one batch (see the module docstring)."""

    metadata: dict[str, Any] = {  # noqa: RUF012 (gymnasium API)
        "autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": ["ansi", "rgb_array"]}

    def __init__(self, num_envs: int, config: PDEnvConfig | dict[str, Any] | None = None,
                 render_mode: str | None = None, action_mode: str | None = None,
                 max_episode_steps: int | None = None, **overrides: Any) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or not (
                1 <= num_envs <= MAX_NUM_ENVS):
            raise ConfigError(f"num_envs = {num_envs!r}; allowed: an integer in [1, {MAX_NUM_ENVS}]")
        if max_episode_steps is not None and (isinstance(max_episode_steps, bool) or not isinstance(
                max_episode_steps, (int, np.integer))):
            raise ConfigError(f"max_episode_steps = {max_episode_steps!r}; allowed: None or an integer")
        self.envs = [PDProvisionEnv(config, render_mode=render_mode, action_mode=action_mode, **overrides)
                     for _ in range(int(num_envs))]
        first = self.envs[0]
        self.num_envs = int(num_envs)
        self.config = first.config
        self.render_mode = render_mode
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.observation_space = batch_space(first.observation_space, self.num_envs)
        self.action_space = batch_space(first.action_space, self.num_envs)
        # as gym.make: a positive limit wraps in TimeLimit, None or -1 does not
        self.max_episode_steps = int(max_episode_steps) if max_episode_steps and max_episode_steps > 0 else None
        self._elapsed = np.zeros(self.num_envs, dtype=np.int64)
        self._autoreset = np.zeros(self.num_envs, dtype=np.bool_)
        self._all = np.ones(self.num_envs, dtype=np.bool_)
        self._obs = np.zeros(self.observation_space.shape, dtype=np.float32)
        #: each env's info of the last step or reset (the dicts the batched infos were built from)
        self.last_infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]

    # ------------------------------------------------------------------------------------------ reset
    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None
              ) -> tuple[NDArray[np.float32], dict[str, Any]]:
        """Reset every env (or those of ``options["reset_mask"]``): env i gets seed ``seed + i``."""
        if seed is None:
            seeds: list[int | None] = [None] * self.num_envs
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise ValueError(f"{len(seeds)} seeds for num_envs = {self.num_envs}; pass one per env or an int")
        mask = np.ones(self.num_envs, dtype=np.bool_)
        if options is not None and "reset_mask" in options:
            options = dict(options)
            mask = options.pop("reset_mask")
            if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (self.num_envs,):
                raise TypeError(f"options['reset_mask'] must be a bool numpy array of shape ({self.num_envs},)")
        got: list[dict[str, Any] | None] = [None] * self.num_envs
        for i in np.flatnonzero(mask):
            self._obs[i], info = self.envs[i].reset(seed=seeds[i], options=options)
            self.last_infos[i] = got[i] = info
            self._elapsed[i] = 0
            self._autoreset[i] = False
        return self._obs.copy(), self._batch_infos(got)

    # ------------------------------------------------------------------------------------------- step
    def step(self, actions: Any) -> tuple[NDArray[np.float32], NDArray[np.float64], NDArray[np.bool_],
                                          NDArray[np.bool_], dict[str, Any]]:
        """One period of every env; an env whose episode ended on the last step is reset instead."""
        acts = list(iterate(self.action_space, actions))
        if len(acts) != self.num_envs:
            raise ValueError(f"{len(acts)} actions for num_envs = {self.num_envs}")
        # decode every action first, so an invalid one leaves every env as it was
        stepping = [i for i in range(self.num_envs) if not self._autoreset[i]]
        decoded = {i: self.envs[i]._decode(acts[i]) for i in stepping}
        begun = {i: self.envs[i]._begin_period(*decoded[i][:2]) for i in stepping}
        if not stepping:  # every env resets this step
            periods: dict[int, dict[str, Any]] = {}
        elif self.config.mode == "fluid":
            periods = dict(zip(stepping, fluid_periods([self.envs[i] for i in stepping],
                                                       [begun[i] for i in stepping]), strict=True))
        else:
            periods = {i: self.envs[i]._request_period(begun[i]) for i in stepping}
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terms = np.zeros(self.num_envs, dtype=np.bool_)
        truncs = np.zeros(self.num_envs, dtype=np.bool_)
        for i, env in enumerate(self.envs):
            if self._autoreset[i]:
                self._obs[i], info = env.reset()
                self._elapsed[i] = 0
            else:
                self._obs[i], rewards[i], terms[i], truncs[i], info = env._finish_step(
                    *decoded[i], begun[i], periods[i])
                self._elapsed[i] += 1
                if self.max_episode_steps is not None and self._elapsed[i] >= self.max_episode_steps:
                    truncs[i] = True
            self.last_infos[i] = info
        self._autoreset = terms | truncs
        return self._obs.copy(), rewards, terms, truncs, self._batch_infos(self.last_infos)

    def _batch_infos(self, infos: list[dict[str, Any] | None]) -> dict[str, Any]:
        """The envs' infos (None: no info from that env) batched as :meth:`VectorEnv._add_info` batches them
        one env at a time (an array per key, dtype from the first env holding it, and a ``_key`` mask),
        key by key instead: _add_info allocates a mask per key per env, a third of a 256-env step."""
        out: dict[str, Any] = {}
        present = [(i, info) for i, info in enumerate(infos) if info is not None]
        for key in dict.fromkeys(k for _, info in present for k in info):
            rows = [(i, info[key]) for i, info in present if key in info]
            first = rows[0][1]
            full = len(rows) == self.num_envs  # the common case: every env stepped and reports the key
            if full:
                mask = self._all.copy()  # a copy per key, as _add_info gives (np.ones costs 4x more)
            else:
                mask = np.zeros(self.num_envs, dtype=np.bool_)
                mask[[i for i, _ in rows]] = True
            if isinstance(first, dict):
                sub: list[dict[str, Any] | None] = [None] * self.num_envs
                for i, v in rows:
                    sub[i] = v
                out[key] = self._batch_infos(sub)
            else:
                if type(first) in (int, float, bool) or issubclass(type(first), np.number):
                    if full and all(type(v) is type(first) for _, v in rows):  # one conversion, same values
                        out[key], out[f"_{key}"] = np.array([v for _, v in rows], dtype=type(first)), mask
                        continue
                    arr = np.zeros(self.num_envs, dtype=type(first))
                elif isinstance(first, np.ndarray):
                    arr = np.zeros((self.num_envs, *first.shape), dtype=first.dtype)
                else:
                    arr = np.full(self.num_envs, fill_value=None, dtype=object)
                for i, v in rows:
                    arr[i] = v
                out[key] = arr
            out[f"_{key}"] = mask
        return out

    # ------------------------------------------------------------------------------------------ extras
    def action_masks(self) -> NDArray[np.bool_]:
        """Each env's :meth:`~servegym.envs.pd.env.PDProvisionEnv.action_masks`, one row per env."""
        return np.stack([e.action_masks() for e in self.envs])

    def render(self) -> tuple[Any, ...] | None:
        """Each env's render (``render_mode`` "ansi" or "rgb_array"), as SyncVectorEnv returns them."""
        if self.render_mode is None:
            return None
        return tuple(e.render() for e in self.envs)

    def close_extras(self, **kwargs: Any) -> None:
        for e in self.envs:
            e.close()
