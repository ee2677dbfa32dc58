"""Opt-in wrappers for RL clients that read action masks from the observation rather than from
``env.action_masks()`` (sb3-contrib's convention, which every servegym env follows).

``ActionMaskObservation(gym.make(id))`` turns the observation into a ``Dict`` with the env's observation under
``"observation"`` and its current mask under ``"action_mask"`` (1 = allowed), the key RLlib's action-masking
RLModules and TorchRL's ``ActionMask`` transform read. The mask is ``MultiBinary`` (int8, what
``Space.sample(mask)`` and PettingZoo take) by default; TorchRL's ``ActionMask`` takes boolean masks only, so
for TorchRL pass ``torchrl=True``: a boolean ``Box``, shaped (dimensions, n) for a ``MultiDiscrete`` space whose
dimensions all have n actions (TorchRL turns such a space into one spec of that shape)::

    env = TransformedEnv(GymWrapper(ActionMaskObservation(gym.make(id), torchrl=True)), ActionMask())

The mask's layout is ``action_masks()``'s: one entry per action for a ``Discrete`` space, the per-dimension
masks concatenated for a ``MultiDiscrete`` space. ``action_masks()`` stays available through the wrapper
(``env.get_wrapper_attr("action_masks")``), so MaskablePPO works on it too. To sample an allowed action without
a wrapper, see :mod:`servegym.masks` (``servegym.action_mask_for_sample``, ``servegym.sample_masked_action``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from servegym.errors import ConfigError


def mask_size(space: gym.Space[Any]) -> int:
    """Entries of an ``action_masks()`` vector for ``space`` (``Discrete``: n; ``MultiDiscrete``: sum of nvec)."""
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    raise ConfigError(f"action_space = {space!r} has no action mask; allowed: Discrete or MultiDiscrete")


class ActionMaskObservation(gym.ObservationWrapper[dict[str, Any], Any, Any]):
    """Observation ``{"observation": obs, "action_mask": int8 mask}`` (module docstring)."""

    def __init__(self, env: gym.Env[Any, Any], torchrl: bool = False) -> None:
        super().__init__(env)
        n = mask_size(env.action_space)
        self._shape: tuple[int, ...] = (n,)
        mask_space: gym.Space[Any] = spaces.MultiBinary(n)
        if torchrl:
            nvec = getattr(env.action_space, "nvec", None)
            if nvec is not None and nvec.size > 1 and np.all(nvec == nvec.flat[0]):
                self._shape = (int(nvec.size), int(nvec.flat[0]))
            mask_space = spaces.Box(0, 1, self._shape, dtype=np.bool_)
        self._dtype = mask_space.dtype
        self.observation_space = spaces.Dict({"observation": env.observation_space, "action_mask": mask_space})

    def observation(self, observation: Any) -> dict[str, Any]:
        mask: NDArray[Any] = np.asarray(self.env.get_wrapper_attr("action_masks")(), dtype=self._dtype)
        return {"observation": observation, "action_mask": mask.reshape(self._shape)}
