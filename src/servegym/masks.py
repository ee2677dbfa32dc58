"""Action masks in the forms clients take, for any env ``gym.make`` returns (wrapped or not).

Every servegym id with a discrete action (all but GeoRouteWindow-v0, whose action is a ``Box``) has
``action_masks()``, sb3-contrib's convention: a boolean vector, one entry per action for a ``Discrete`` space,
the per-dimension masks concatenated for a ``MultiDiscrete`` one. Through the wrappers ``gym.make`` adds
(``TimeLimit``, ``OrderEnforcing``, ``PassiveEnvChecker``) it is reached as
``env.get_wrapper_attr("action_masks")()``, which is also how sb3-contrib's ``get_action_masks(env)`` and
``is_masking_supported(env)`` find it. Gymnasium's ``Space.sample(mask=...)`` wants another form: int8, and
for ``MultiDiscrete`` a tuple of one array per dimension. :func:`action_mask_for_sample` gives that form::

    env = gym.make("servegym/NPUAutoscale-v0")
    obs, info = env.reset(seed=0)
    action = env.action_space.sample(mask=servegym.action_mask_for_sample(env))

Per-dimension masks cannot say everything: pd's absolute and residual ids must keep n_P + n_D within the GPU
budget, so two allowed values may make an action the env fits to the budget (``info["action_adjusted"]``;
[10, 8] becomes 9/7). Those envs also define ``action_masks_given(chosen)``, the exact mask of the next
dimension given the earlier ones, and :func:`sample_masked_action` samples from it (one dimension after the
other), so the action it returns is always applied as sent. It is the documented way to sample an allowed
action of any id::

    action = servegym.sample_masked_action(env)   # seeded by env.action_space.seed(...)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from servegym.errors import ConfigError


def _wrapper_attr(env: gym.Env[Any, Any], name: str) -> Any:
    """``env``'s attribute ``name`` through any wrappers (None when neither a wrapper nor the env has it)."""
    try:
        return env.get_wrapper_attr(name)
    except AttributeError:
        return None


def action_mask_for_sample(env: gym.Env[Any, Any]) -> NDArray[np.int8] | tuple[NDArray[np.int8], ...]:
    """``env``'s current ``action_masks()`` in the form ``env.action_space.sample(mask=...)`` takes: an int8
    array for a ``Discrete`` space, a tuple of one int8 array per dimension for a ``MultiDiscrete`` one.

    Raises :class:`~servegym.errors.ConfigError` for an env without masks (GeoRouteWindow-v0's ``Box``)."""
    space = env.action_space
    masks = _wrapper_attr(env, "action_masks")
    if masks is None or not isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)):
        raise ConfigError(f"{_name(env)} has no action_masks(); allowed: an env with a Discrete or MultiDiscrete "
                          "action space (every servegym id but GeoRouteWindow-v0)")
    flat = np.asarray(masks(), dtype=np.int8)
    if isinstance(space, spaces.Discrete):
        return flat
    return tuple(np.split(flat, np.cumsum(space.nvec.ravel())[:-1]))


def sample_masked_action(env: gym.Env[Any, Any]) -> Any:
    """A random action of ``env`` that its masks allow and that the env applies as sent (module docstring).

    Each dimension is uniform over its allowed values; where the env has ``action_masks_given`` (a joint
    constraint such as pd's GPU budget) each dimension's mask is conditioned on the values drawn before it.
    Draws from ``env.action_space``'s generator, so ``env.action_space.seed(s)`` makes it reproducible. An env
    without masks (GeoRouteWindow-v0) gets ``env.action_space.sample()``."""
    space = env.action_space
    if _wrapper_attr(env, "action_masks") is None:
        return space.sample()
    given = _wrapper_attr(env, "action_masks_given")
    if given is None or not isinstance(space, spaces.MultiDiscrete):  # one dimension: its mask is exact
        return space.sample(mask=action_mask_for_sample(env))
    rng = space.np_random
    chosen: list[int] = []
    for _ in range(space.nvec.size):
        allowed = np.flatnonzero(given(tuple(chosen)))
        chosen.append(int(rng.choice(allowed)))
    return np.array(chosen, dtype=space.dtype).reshape(space.shape)


def _name(env: gym.Env[Any, Any]) -> str:
    spec = env.unwrapped.spec
    return spec.id if spec is not None else type(env.unwrapped).__name__
