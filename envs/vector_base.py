"""The machinery every native servegym :class:`gymnasium.vector.VectorEnv` shares: N single envs of one config,
Gymnasium 1.x's next-step autoreset, seeds ``seed + i`` (or one per env), ``options["reset_mask"]``, a
:class:`gymnasium.wrappers.TimeLimit`-style ``max_episode_steps`` and infos batched key by key.

A family's vector env subclasses :class:`EnvBatch` and overrides :meth:`EnvBatch._step_envs`, the step of the
envs that are not autoresetting (the pd one runs their fluid periods as one array program); the default steps
each env with its own ``step`` after checking every action first, so an invalid one changes no env.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, iterate
from numpy.typing import NDArray

from servegym.errors import ConfigError

MAX_NUM_ENVS = 65_536
StepResult = tuple[Any, float, bool, bool, dict[str, Any]]


def check_vector_args(num_envs: Any, max_episode_steps: Any) -> None:
    """One-line ConfigErrors for ``num_envs`` (an integer in [1, MAX_NUM_ENVS]) and ``max_episode_steps``."""
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or not (
            1 <= num_envs <= MAX_NUM_ENVS):
        raise ConfigError(f"num_envs = {num_envs!r}; allowed: an integer in [1, {MAX_NUM_ENVS}]")
    if max_episode_steps is not None and (isinstance(max_episode_steps, bool) or not isinstance(
            max_episode_steps, (int, np.integer))):
        raise ConfigError(f"max_episode_steps = {max_episode_steps!r}; allowed: None or an integer")


class EnvBatch(VectorEnv):
    """N environments of one config stepped together (see the module docstring)."""

    metadata: dict[str, Any] = {  # noqa: RUF012 (gymnasium API)
        "autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": ["ansi", "rgb_array"]}

    def __init__(self, envs: list[gym.Env], render_mode: str | None, max_episode_steps: int | None) -> None:
        self.envs = envs
        first = self.envs[0]
        self.num_envs = len(envs)
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
        """One step of every env; an env whose episode ended on the last step is reset instead."""
        acts = list(iterate(self.action_space, actions))
        if len(acts) != self.num_envs:
            raise ValueError(f"{len(acts)} actions for num_envs = {self.num_envs}")
        stepping = [i for i in range(self.num_envs) if not self._autoreset[i]]
        results = self._step_envs(stepping, acts) if stepping else {}
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terms = np.zeros(self.num_envs, dtype=np.bool_)
        truncs = np.zeros(self.num_envs, dtype=np.bool_)
        for i, env in enumerate(self.envs):
            if self._autoreset[i]:
                self._obs[i], info = env.reset()
                self._elapsed[i] = 0
            else:
                self._obs[i], rewards[i], terms[i], truncs[i], info = results[i]
                self._elapsed[i] += 1
                if self.max_episode_steps is not None and self._elapsed[i] >= self.max_episode_steps:
                    truncs[i] = True
            self.last_infos[i] = info
        self._autoreset = terms | truncs
        return self._obs.copy(), rewards, terms, truncs, self._batch_infos(self.last_infos)

    def _step_envs(self, stepping: list[int], acts: list[Any]) -> dict[int, StepResult]:
        """Step the envs ``stepping`` with their actions: every action checked first (``_check_action``), so an
        invalid one raises before any env moves; then each env's own ``step``."""
        for i in stepping:
            self.envs[i]._check_action(acts[i])
        return {i: self.envs[i].step(acts[i]) for i in stepping}

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
        """Each env's :meth:`~action_masks`, one row per env."""
        return np.stack([e.action_masks() for e in self.envs])

    def render(self) -> tuple[Any, ...] | None:
        """Each env's render (``render_mode`` "ansi" or "rgb_array"), as SyncVectorEnv returns them."""
        if self.render_mode is None:
            return None
        return tuple(e.render() for e in self.envs)

    def close_extras(self, **kwargs: Any) -> None:
        for e in self.envs:
            e.close()
