"""The action modes of :class:`~servegym.envs.npu.env.NPUAutoscaleEnv` as action types (``action_mode``).

Each mode is an :class:`~servegym.envs.action_type.ActionType` over the
:class:`~servegym.envs.npu.sim.state.NPUState`: it owns its space, its mask, the validation of an action and the
text of its errors, its decoding into an :class:`~servegym.envs.npu.sim.state.NPUDecision` (per-group targets,
counts and options), what it provisions at reset, and the reference it observes. It reads the state and never
the env; the env applies what it returns (:func:`~servegym.envs.npu.sim.state.apply_decision`).
:func:`make_action_type` picks one from the config, so the env's ``reset`` and ``step`` never branch on the mode.
A new mode is a new registered class here and its name in ``ACTION_MODES``. The decoding helpers they call
are functions of the state (:mod:`~servegym.envs.npu.action_decoding`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray
from servegym.baselines.npu import make_policy, warm_start
from servegym.envs.action_type import ACTION_TYPES, ActionType, register
from servegym.envs.npu.action_decoding import (
    absolute_decision,
    heuristic_action,
    residual_targets,
    warm_action,
)
from servegym.envs.npu.env_config import RESIDUAL_STEPS, NPUEnvConfig
from servegym.envs.npu.sim.records import ScalingDecision
from servegym.envs.npu.sim.roofline import PHASES
from servegym.envs.npu.sim.state import GroupLayout, NPUDecision, NPUState, ReferencePolicy, capped

from servegym.errors import ActionError


class NPUActionType(ActionType[NPUState, NPUDecision]):
    """What both npu modes share: the MultiDiscrete space built at construction from the config and the group
    count, the mask (a static part per group layout and the mode's live part), and the validation of an
    action (:meth:`check`) that every :meth:`decode` starts with.

    Extras beyond the interface, all of the state: :meth:`start` (the reset's provisioning), :meth:`observed`
    (the reference's next decision), :meth:`reference_counts`, :meth:`option_index` / :meth:`option_indices`,
    and the text of errors (:meth:`kinds`, :meth:`per_group`, :meth:`masked_option`, :meth:`require_absolute`).
    """

    family = "npu"
    #: whether the action changes a reference's decision (the env's public ``residual``)
    residual = False

    def __init__(self, config: NPUEnvConfig, n_groups: int, n_options: int) -> None:
        self.config = config
        self.n_levels = len(config.count_levels)
        self.n_groups = int(n_groups)
        self.n_options = int(n_options)
        self._space = spaces.MultiDiscrete(np.array(self.nvec(), dtype=np.int64))
        n = self._space.nvec
        # where each dimension's values start in the concatenated masks
        self._offsets = np.concatenate([[0], np.cumsum(n)[:-1]])
        self._static: tuple[GroupLayout, NDArray[np.bool_]] | None = None

    # ------------------------------------------------------------------------------------------ interface
    def nvec(self) -> list[int]:
        """Values per action dimension, in ``env.groups`` order."""
        raise NotImplementedError

    def space(self) -> spaces.MultiDiscrete:
        return self._space

    def group_masks(self, layout: GroupLayout, i: int) -> list[NDArray[np.bool_]]:
        """The masks of group ``i``'s dimensions that hold for a whole scenario (quota, padding, top groups)."""
        raise NotImplementedError

    def static_mask(self, layout: GroupLayout) -> NDArray[np.bool_]:
        """Every group's :meth:`group_masks`, concatenated (read-only; kept while the layout is the same)."""
        if self._static is None or self._static[0] is not layout:
            m = np.concatenate([part for i in range(len(layout.groups)) for part in self.group_masks(layout, i)])
            m.setflags(write=False)
            self._static = (layout, m)
        return self._static[1]

    def live_masks(self, state: NPUState, m: NDArray[np.bool_]) -> NDArray[np.bool_]:
        """The static mask ``m`` (a fresh copy) with what the current state forbids."""
        return m

    def mask(self, state: NPUState) -> NDArray[np.bool_]:
        return self.live_masks(state, self.static_mask(state.layout).copy())

    def allowed(self, state: NPUState) -> str:
        """The "allowed: ..." part of an invalid action's error (formatted only when one is raised)."""
        n = self._space.nvec
        per = self.per_group(n.size // self.n_groups)
        return f"allowed: {n.size} integers, {per} per group {state.layout.groups}"

    def check(self, state: NPUState, action: Any) -> tuple[NDArray[np.int64], bool]:
        """``action`` as int64 values and whether a masked value was adjusted (``strict_masks``: an error
        instead); ActionError for anything outside the space (module docstring of the env, "Masks")."""
        a = np.asarray(action)
        n = self._space.nvec
        d = n.size // self.n_groups  # dimensions per group
        kinds = self.kinds(d)
        groups = state.layout.groups
        if a.shape != n.shape:
            raise ActionError(f"action has shape {a.shape}; {self.allowed(state)}")
        if a.dtype.kind not in "iu":  # bools, strings and complex numbers are not indices
            if a.dtype.kind != "f" or not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
                raise ActionError(f"action {str(a.tolist())[:200]} is not integer-valued; {self.allowed(state)}")
        # Range first, in the action's own dtype: a uint64 or float past int64 must not wrap when cast.
        bad = np.flatnonzero((a < 0) | (a >= n))
        if bad.size:
            i = int(bad[0])
            raise ActionError(f"action[{i}] = {a[i].item()} is out of range for group {groups[i // d]} "
                              f"({kinds[i % d]}); {self.allowed(state)}")
        a = a.astype(np.int64)
        ok = self.mask(state)[self._offsets + a]
        if np.count_nonzero(ok) == ok.size:  # ok.all() without its Python wrapper (~3 us a step)
            return a, False
        if self.config.strict_masks:
            i = int(np.flatnonzero(~ok)[0])
            what = {"count": "count 0 for the largest group of its phase",
                    "change": "a change for a group where the reference has no vPods",
                    "option": f"option {int(a[i])} (padding, or a version whose quota cannot hold one vPod)"}
            raise ActionError(f"action[{i}] = {int(a[i])} is masked for group {groups[i // d]}: "
                              f"{what[kinds[i % d]]}; see action_masks()")
        out = a.copy()
        for i in np.flatnonzero(~ok).tolist():
            g, kind = i // d, kinds[i % d]
            if kind == "count":
                out[i] = int(np.flatnonzero(state.levels > 0)[0])
            elif kind == "change":
                out[i] = 0  # follow the reference
            else:
                out[i] = self.masked_option(state, g)
        return out, True

    # ------------------------------------------------------------------------------------------ extras
    def kinds(self, d: int) -> tuple[str, ...]:
        """What each of a group's ``d`` dimensions sets (for error texts)."""
        raise NotImplementedError

    def per_group(self, d: int) -> str:
        """One group's dimensions and their ranges (for error texts)."""
        raise NotImplementedError

    def masked_option(self, state: NPUState, g: int) -> int:
        """The option a masked option of group ``g`` is adjusted to."""
        raise NotImplementedError

    def new_reference(self) -> ReferencePolicy | None:
        """A fresh reference policy to drive the simulator beside the agent (None: the mode has none)."""
        return None

    def start(self, state: NPUState) -> NPUDecision:
        """The deployment at t = 0 of a new episode (the state's simulator just built, nothing provisioned)."""
        raise NotImplementedError

    def observed(self, state: NPUState, truncated: bool) -> ScalingDecision | None:
        """After the epoch's observation: the reference's decision for the next epoch (the state's ``pending``)."""
        return state.pending

    def reference_counts(self, state: NPUState) -> NDArray[np.float64]:
        """The reference's target vPods per env group (the observation's ``reference_target``)."""
        raise NotImplementedError

    def option_index(self, state: NPUState, g: int) -> int:
        """The index into ``options[g]`` of group ``g``'s configuration."""
        raise NotImplementedError

    def option_indices(self, state: NPUState) -> NDArray[np.int64]:
        """:meth:`option_index` of every group (a new array)."""
        raise NotImplementedError

    def require_absolute(self, what: str, why: str) -> None:
        """Absolute-mode helpers (``heuristic_action``, ``action_from_decision``) run in this mode, or raise."""


@register
class AbsoluteAction(NPUActionType):
    """``absolute``: per group a count level and a configuration option, set outright (module docstring of
    the env, "Absolute action")."""

    mode = "absolute"

    def nvec(self) -> list[int]:
        return [self.n_levels, self.n_options] * self.n_groups

    def group_masks(self, layout: GroupLayout, i: int) -> list[NDArray[np.bool_]]:
        levels = np.array(self.config.count_levels, dtype=np.int64)
        cnt = np.ones(levels.size, dtype=bool)
        if i in layout.top_group:
            cnt &= levels > 0
        return [cnt, layout.opt_ok[i]]

    def kinds(self, d: int) -> tuple[str, ...]:
        return ("count", "option")

    def per_group(self, d: int) -> str:
        return f"[count index in 0..{self.n_levels - 1}, option index in 0..{self.n_options - 1}]"

    def masked_option(self, state: NPUState, g: int) -> int:
        return int(np.flatnonzero(state.layout.opt_ok[g])[0])

    def _outright(self, state: NPUState, a: NDArray[np.int64], adjusted: bool) -> NPUDecision:
        dec = absolute_decision(state, a)
        return NPUDecision(dec, {k: dict(v) for k, v in dec.targets.items() if v}, count=state.levels[a[0::2]],
                           option=a[1::2].copy(), adjusted=adjusted)

    def start(self, state: NPUState) -> NPUDecision:
        if self.config.warm_start:
            return self._outright(state, warm_action(state), False)
        return NPUDecision(None, {})

    def decode(self, state: NPUState, action: Any) -> NPUDecision:
        a, adjusted = self.check(state, action)
        return self._outright(state, a, adjusted)

    def reference_action(self, state: NPUState) -> NDArray[np.int64] | None:
        """The heuristic's action on the last observation (None before the first)."""
        return heuristic_action(state) if state.last_ctx is not None else None

    def reference_counts(self, state: NPUState) -> NDArray[np.float64]:
        if state.sim is not None and state.last_ctx is not None:
            return state.levels[heuristic_action(state)[0::2]].astype(float)
        return np.zeros(len(state.layout.groups))

    def option_index(self, state: NPUState, g: int) -> int:
        return int(state.option[g])

    def option_indices(self, state: NPUState) -> NDArray[np.int64]:
        return state.option.copy()


@register
class ResidualAction(NPUActionType):
    """``residual``: per group a change of the reference's decision (``reference``: NeuScale by default, or
    Base) by ``RESIDUAL_STEPS`` count levels (and, with ``residual_options``, an option; 0 keeps the
    reference's), so the all-zero action reproduces the reference (module docstring of the env, "Residual
    action")."""

    mode = "residual"
    residual = True

    def __init__(self, config: NPUEnvConfig, n_groups: int, n_options: int) -> None:
        self.options = bool(config.residual_options)
        super().__init__(config, n_groups, n_options)

    def nvec(self) -> list[int]:
        if self.options:
            return [len(RESIDUAL_STEPS), self.n_options + 1] * self.n_groups
        return [len(RESIDUAL_STEPS)] * self.n_groups

    def group_masks(self, layout: GroupLayout, i: int) -> list[NDArray[np.bool_]]:
        parts = [np.ones(len(RESIDUAL_STEPS), dtype=bool)]
        if self.options:
            parts.append(np.concatenate([[True], layout.opt_ok[i]]))
        return parts

    def live_masks(self, state: NPUState, m: NDArray[np.bool_]) -> NDArray[np.bool_]:
        """A group whose reference target is 0 vPods only allows 0 (no change)."""
        k = len(RESIDUAL_STEPS)
        stride = k + (self.n_options + 1 if self.options else 0)
        for g in np.flatnonzero(state.ref_counts <= 0).tolist():
            m[g * stride + 1: g * stride + k] = False
        return m

    def kinds(self, d: int) -> tuple[str, ...]:
        return ("change", "option")[:d]

    def per_group(self, d: int) -> str:
        return (f"[change index in 0..{len(RESIDUAL_STEPS) - 1} (count-level changes {RESIDUAL_STEPS})"
                + (f", option index in 0..{self.n_options} (0 = the reference's)]" if d == 2 else "]"))

    def masked_option(self, state: NPUState, g: int) -> int:
        return 0

    def new_reference(self) -> ReferencePolicy | None:
        return make_policy(self.config.reference)

    def start(self, state: NPUState) -> NPUDecision:
        # the reference drives this simulator exactly as run_policy does: its own warm start at t = 0, then one
        # decision per epoch boundary (computed when the boundary is observed, applied with the agent's changes by
        # the next step); the reference's decisions update its own memory (EWMA of R_peak), as in run_policy
        pol, sim = state.reference, state.sim
        assert pol is not None and sim is not None
        cap = int(self.config.max_group_vpods)
        pol.reset(sim)
        warm = ScalingDecision(capped(warm_start(sim, pol), cap))  # type: ignore[arg-type]
        return NPUDecision(warm, capped({k: v for k, v in pol.targets.items() if v}, cap))

    def decode(self, state: NPUState, action: Any) -> NPUDecision:
        a, adjusted = self.check(state, action)
        pol = state.reference
        assert pol is not None
        option = a[1::2].copy() if self.options else None
        if state.pending is None and not np.count_nonzero(a):  # the warm start stands, as in run_policy's first epoch
            return NPUDecision(None, pol.targets, option=option, adjusted=adjusted)
        base = state.pending.targets if state.pending is not None else dict(pol.targets)
        targets = residual_targets(state, a, base, self.options, int(self.config.max_group_vpods))
        return NPUDecision(ScalingDecision(targets), {k: v for k, v in targets.items() if v}, option=option,
                           adjusted=adjusted)

    def observed(self, state: NPUState, truncated: bool) -> ScalingDecision | None:
        if truncated:
            return state.pending
        assert state.reference is not None and state.last_ctx is not None
        return state.reference.decide(state.last_ctx)

    def reference_action(self, state: NPUState) -> NDArray[np.int64] | None:
        """The all-zero action: the reference's own decision."""
        return np.zeros(self._space.shape, dtype=np.int64)

    def reference_counts(self, state: NPUState) -> NDArray[np.float64]:
        """The reference's decision for the next epoch (its warm start before the first), summed per env group."""
        assert state.reference is not None
        lay = state.layout
        ref = np.zeros(len(lay.groups))
        tg = state.pending.targets if state.pending is not None else state.reference.targets
        for key, tgt in tg.items():
            p, b = PHASES.index(key[0]), lay.bucket_index(key[1])
            ref[int(lay.env_group[p, b])] += sum(tgt.values())
        return ref

    def option_index(self, state: NPUState, g: int) -> int:
        """The reference's configuration (best fit) unless the agent chose one."""
        opt = int(state.option[g])
        return opt - 1 if opt > 0 else 0

    def option_indices(self, state: NPUState) -> NDArray[np.int64]:
        return np.maximum(state.option - 1, 0)

    def require_absolute(self, what: str, why: str) -> None:
        raise ActionError(f"{what}() returns an absolute action; with action_mode = 'residual' {why}")


def make_action_type(config: NPUEnvConfig, n_groups: int, n_options: int) -> NPUActionType:
    """The registered action type of ``config.action_mode`` (validated by the config: one of ``ACTION_MODES``)
    for ``n_groups`` groups of at most ``n_options`` options each."""
    cls = ACTION_TYPES[("npu", config.action_mode)]
    assert issubclass(cls, NPUActionType)
    return cls(config, n_groups, n_options)
