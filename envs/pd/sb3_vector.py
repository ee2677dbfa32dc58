"""Stable-Baselines3's VecEnv over :class:`servegym.envs.pd.vector.PDVectorEnv` (SB3 2.x takes its own
VecEnv, not a Gymnasium VectorEnv: given one, it would wrap it as a single env).

SB3's convention is a same-step autoreset: an env whose episode ends returns the next episode's first
observation at once, with the last one in ``info["terminal_observation"]`` and
``info["TimeLimit.truncated"]`` (every step) true for a truncation, as DummyVecEnv does over N separate envs (results
identical to it, tested). Infos are the single env's dicts, one per env; ``env_method("action_masks")``
serves sb3-contrib's MaskablePPO. Needs the ``rl`` extra (stable-baselines3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from servegym.envs.pd.vector import PDVectorEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvStepReturn


class PDSB3VecEnv(VecEnv):
    """SB3 VecEnv view of a :class:`PDVectorEnv` (module docstring)."""

    def __init__(self, venv: PDVectorEnv) -> None:
        self.venv = venv
        super().__init__(venv.num_envs, venv.single_observation_space, venv.single_action_space)
        self._actions: Any = None

    def reset(self) -> NDArray[np.float32]:
        seeds = list(self._seeds)
        opts = [o for o in self._options if o]
        obs, _ = self.venv.reset(seed=None if all(s is None for s in seeds) else seeds,
                                 options=opts[0] if opts else None)
        self.reset_infos = [dict(i) for i in self.venv.last_infos]
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: NDArray[Any]) -> None:
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, terms, truncs, _ = self.venv.step(self._actions)
        dones = terms | truncs
        infos = [dict(i) for i in self.venv.last_infos]
        for i, info in enumerate(infos):  # on every step, as DummyVecEnv
            info["TimeLimit.truncated"] = bool(truncs[i] and not terms[i])
        if dones.any():
            for i in np.flatnonzero(dones):
                infos[i]["terminal_observation"] = obs[i].copy()
            obs, _ = self.venv.reset(options={"reset_mask": dones})
            for i in np.flatnonzero(dones):
                self.reset_infos[i] = dict(self.venv.last_infos[i])
        return obs, rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        self.venv.close()

    def _targets(self, indices: VecEnvIndices) -> list[Any]:
        return [self.venv.envs[i] for i in self._get_indices(indices)]

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return [getattr(e, attr_name) for e in self._targets(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        for e in self._targets(indices):
            setattr(e, attr_name, value)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        return [getattr(e, method_name)(*method_args, **method_kwargs) for e in self._targets(indices)]

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> Sequence[bool]:
        return [False] * len(self._get_indices(indices))
