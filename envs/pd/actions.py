"""The action modes of the pd env as small classes (config ``action_mode``).

Each class implements the one action-type interface (:class:`servegym.envs.action_type.ActionType`, family
``"pd"``, mode the config's ``action_mode``, registered with :func:`~servegym.envs.action_type.register`) over
the model's state (:class:`~servegym.envs.pd.sim.state.PDState`), never the env: its action space, its mask,
how an action becomes the target (n_P, n_D, adjusted) that the one model then applies, the action that plays
the reference's suggestion (``state.ref``), and whether it has a zero action; pool-target modes add the exact
autoregressive mask :meth:`~PoolTargetAction.mask_given`. :func:`pd_action_type` picks one from the config,
so :class:`~servegym.envs.pd.env.PDProvisionEnv` never branches on the mode. A new mode is a new class here
and a line in :data:`ACTION_TYPES` (and, for a registered id, an entry in ``servegym.registration``). The
modes themselves are described in the env's module docstring.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray
from servegym.envs.action_type import ActionType, register
from servegym.envs.pd.sim.state import PDState

from servegym.errors import ActionError, ConfigError

if TYPE_CHECKING:
    from servegym.envs.pd.env_config import PDEnvConfig

#: the decision an action decodes into: the target (n_P, n_D) and whether the action was adjusted to reach it
PDTarget = tuple[int, int, bool]


def int_action(action: Any, shape: tuple[int, ...], highs: tuple[int, ...], allowed: str) -> list[int]:
    """The action's values as ints (row-major) after checking shape, integrality and range."""
    try:
        a = np.asarray(action)
    except Exception as exc:  # pragma: no cover - asarray accepts nearly anything
        raise ActionError(f"action {action!r} is not array-like") from exc
    if a.shape != shape and not (shape == () and a.shape == (1,)):
        raise ActionError(f"action {action!r} has shape {a.shape}; {allowed}")
    if a.dtype.kind not in "iu":
        if a.dtype.kind != "f" or not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
            raise ActionError(f"action {action!r} is not integer-valued; {allowed}")
    vals = [int(v) for v in a.ravel().tolist()]
    if any(v < 0 or v > h for v, h in zip(vals, highs, strict=True)):
        raise ActionError(f"action {action!r} is out of range; {allowed}")
    return vals


def fit_budget(cfg: PDEnvConfig, n_p: int, n_d: int, adjusted: bool) -> tuple[int, int, bool]:
    """A 0 raised to 1; a target above ``gpu_budget`` scaled onto it (the env's module docstring)."""
    if n_p < 1 or n_d < 1:
        n_p, n_d, adjusted = max(n_p, 1), max(n_d, 1), True
    budget = cfg.gpu_budget
    if n_p + n_d > budget:
        p2 = min(cfg.max_prefill, max(1, round(budget * n_p / (n_p + n_d))))
        n_p, n_d, adjusted = p2, min(cfg.max_decode, budget - p2), True
    return n_p, n_d, adjusted


class PDAction(ActionType[PDState, PDTarget]):
    """One pd action mode: its space, mask, decoding into the target (n_P, n_D) and the reference's action,
    all read from the episode's :class:`~servegym.envs.pd.sim.state.PDState`."""

    family: ClassVar[str] = "pd"

    def __init__(self, cfg: PDEnvConfig, front_slots: int) -> None:
        self.cfg = cfg
        self.front_slots = front_slots  # the front mode's slots (the env sizes them from the day's mixes)

    @abc.abstractmethod
    def space(self) -> spaces.Space[Any]:
        """The action space."""

    @abc.abstractmethod
    def mask(self, state: PDState) -> NDArray[np.bool_]:
        """The valid actions in ``state``, in sb3-contrib's layout (a fresh array)."""

    def mask_given(self, state: PDState, chosen: Sequence[int]) -> NDArray[np.bool_]:
        """The mask of action dimension ``len(chosen)`` once the dimensions before it hold ``chosen``: the
        values that (with some value of each later dimension) make an action the env applies as sent, never
        ``action_adjusted``. A mode whose valid actions are the product of its per-dimension masks (one
        dimension: the front mode) returns that dimension of :meth:`mask`."""
        if len(chosen) != 0:
            raise ConfigError(f"chosen = {list(chosen)!r} is not allowed; allowed: [] (one action dimension)")
        return self.mask(state)

    @abc.abstractmethod
    def decode(self, state: PDState, action: Any) -> PDTarget:
        """The target (n_P, n_D, adjusted) of ``action`` in ``state``; ActionError if invalid."""

    @abc.abstractmethod
    def reference_action(self, state: PDState) -> NDArray[np.int64]:
        """The action that plays the reference's suggestion (``state.ref``) for the coming period (a
        behaviour-cloning teacher)."""

    def follow_action(self) -> NDArray[np.int64]:
        """The zero action (no change to the reference); only the residual mode has one."""
        raise ConfigError(f"follow_action: action_mode = {self.mode!r} has no zero action; allowed: 'residual'")


class PoolTargetAction(PDAction):
    """A mode whose action is one value per pool, ``[i_P, i_D]``, each naming that pool's target count on its
    own. Its per-dimension masks keep each count in range, but the GPU budget binds the pair
    (n_P + n_D <= ``gpu_budget``), so an action of two allowed values may still be fitted to the budget
    (``action_adjusted``): 10 of the 96 pairs the default absolute masks allow exceed the 16-GPU budget. :meth:`mask_given`
    is the exact, autoregressive mask (n_P first, then the n_D that fit beside it) that
    ``servegym.sample_masked_action`` samples from."""

    @abc.abstractmethod
    def pool_targets(self, state: PDState) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The target n_P of each value of the first dimension and n_D of each value of the second."""

    def mask_given(self, state: PDState, chosen: Sequence[int]) -> NDArray[np.bool_]:
        m = self.mask(state)
        n_p, n_d = self.pool_targets(state)
        # allowed by both per-dimension masks and within the budget: the pairs decode applies as sent (the
        # masks already keep each count in [1, pool max], so fit_budget's scaling is the only adjustment left)
        joint = m[:n_p.size, None] & m[None, n_p.size:] & (n_p[:, None] + n_d[None, :] <= self.cfg.gpu_budget)
        if len(chosen) == 0:
            return joint.any(axis=1)
        if len(chosen) == 1 and 0 <= int(chosen[0]) < n_p.size:
            return joint[int(chosen[0])]
        raise ConfigError(f"chosen = {list(chosen)!r} is not allowed; allowed: [] or [i_P] with 0 <= i_P < "
                          f"{n_p.size}")


@register
class AbsoluteAction(PoolTargetAction):
    """``absolute``: ``MultiDiscrete([max_prefill + 1, max_decode + 1])``, the target (n_P, n_D) itself; the
    mask drops 0 and counts above ``gpu_budget - 1``."""

    mode = "absolute"

    def __init__(self, cfg: PDEnvConfig, front_slots: int) -> None:
        super().__init__(cfg, front_slots)
        mask_p = np.zeros(cfg.max_prefill + 1, dtype=bool)
        mask_p[1: min(cfg.max_prefill, cfg.gpu_budget - 1) + 1] = True
        mask_d = np.zeros(cfg.max_decode + 1, dtype=bool)
        mask_d[1: min(cfg.max_decode, cfg.gpu_budget - 1) + 1] = True
        self._masks = np.concatenate([mask_p, mask_d])
        self._masks.setflags(write=False)

    def space(self) -> spaces.Space[Any]:
        return spaces.MultiDiscrete([self.cfg.max_prefill + 1, self.cfg.max_decode + 1])

    def mask(self, state: PDState) -> NDArray[np.bool_]:
        return self._masks.copy()

    def pool_targets(self, state: PDState) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        return np.arange(self.cfg.max_prefill + 1), np.arange(self.cfg.max_decode + 1)

    def decode(self, state: PDState, action: Any) -> PDTarget:
        cfg = self.cfg
        a = int_action(action, (2,), (cfg.max_prefill, cfg.max_decode),
                       f"allowed: [n_P, n_D] integers with 0 <= n_P <= {cfg.max_prefill}, "
                       f"0 <= n_D <= {cfg.max_decode}")
        return fit_budget(cfg, int(a[0]), int(a[1]), False)

    def reference_action(self, state: PDState) -> NDArray[np.int64]:
        return np.array([state.ref.n_p, state.ref.n_d], dtype=np.int64)


@register
class ResidualAction(PoolTargetAction):
    """``residual``: ``MultiDiscrete([2L + 1, 2L + 1])``, per pool a change i - L of the reference's suggestion;
    the mask keeps each pool in [1, min(pool max, gpu_budget - 1)]; [L, L] follows the reference."""

    mode = "residual"

    def space(self) -> spaces.Space[Any]:
        lv = 2 * self.cfg.residual_levels + 1
        return spaces.MultiDiscrete([lv, lv])

    def mask(self, state: PDState) -> NDArray[np.bool_]:
        cfg = self.cfg
        hi_p, hi_d = min(cfg.max_prefill, cfg.gpu_budget - 1), min(cfg.max_decode, cfg.gpu_budget - 1)
        p, d = self.pool_targets(state)
        return np.concatenate([(p >= 1) & (p <= hi_p), (d >= 1) & (d <= hi_d)])

    def pool_targets(self, state: PDState) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        delta = np.arange(-self.cfg.residual_levels, self.cfg.residual_levels + 1)
        return state.ref.n_p + delta, state.ref.n_d + delta

    def decode(self, state: PDState, action: Any) -> PDTarget:
        cfg = self.cfg
        lv = cfg.residual_levels
        a = int_action(action, (2,), (2 * lv, 2 * lv),
                       f"allowed: [i_P, i_D] integers in [0, {2 * lv}] (change = i - {lv})")
        n_p, n_d = state.ref.n_p + int(a[0]) - lv, state.ref.n_d + int(a[1]) - lv
        c_p, c_d = min(max(n_p, 1), cfg.max_prefill), min(max(n_d, 1), cfg.max_decode)
        return fit_budget(cfg, c_p, c_d, (c_p, c_d) != (n_p, n_d))

    def reference_action(self, state: PDState) -> NDArray[np.int64]:
        return self.follow_action()

    def follow_action(self) -> NDArray[np.int64]:
        lv = int(self.cfg.residual_levels)
        return np.array([lv, lv], dtype=np.int64)


@register
class FrontAction(PDAction):
    """``front``: ``Discrete(front_slots)``, slot i is the i-th point (capacity ascending) of the coming mix's
    epsilon-Pareto front within the budget; slots beyond the coming front are masked (sent anyway: the
    largest-capacity point, ``action_adjusted``)."""

    mode = "front"

    def space(self) -> spaces.Space[Any]:
        return spaces.Discrete(self.front_slots)

    def mask(self, state: PDState) -> NDArray[np.bool_]:
        m = np.zeros(self.front_slots, dtype=bool)
        m[: state.front_rows(state.mix_index(), self.front_slots).size] = True
        return m

    def decode(self, state: PDState, action: Any) -> PDTarget:
        a = int_action(action, (), (self.front_slots - 1,),
                       f"allowed: an integer in [0, {self.front_slots - 1}] (a slot of the eps-Pareto front)")
        mix = state.mix_index()
        rows = state.front_rows(mix, self.front_slots)
        i = a[0]
        adjusted = i >= rows.size
        row = int(rows[min(i, rows.size - 1)])
        g = state.rule.mix_cache(mix).grid
        return int(g.n_p[row]), int(g.n_d[row]), adjusted

    def reference_action(self, state: PDState) -> NDArray[np.int64]:
        """The first slot whose front point has at least the suggestion's capacity (the observation's
        ``front_index_suggested``; the front holds the suggestion only up to ``front_eps``)."""
        ref = state.ref
        front = state.front_rows(ref.mix, self.front_slots)
        mu = state.rule.mix_cache(ref.mix).grid.mu[front]
        return np.array(min(int(np.searchsorted(mu, ref.capacity_rps)), front.size - 1), dtype=np.int64)


#: ``action_mode`` -> its class (the factory's table; a new mode adds a line)
ACTION_TYPES: dict[str, type[PDAction]] = {"absolute": AbsoluteAction, "residual": ResidualAction,
                                           "front": FrontAction}


def pd_action_type(cfg: PDEnvConfig, front_slots: int) -> PDAction:
    """The action type of ``cfg.action_mode`` (the config checked it is one of :data:`ACTION_TYPES`)."""
    return ACTION_TYPES[cfg.action_mode](cfg, front_slots)
