"""The action modes of :class:`~servegym.envs.npu.env.NPUAutoscaleEnv` as small classes (``action_mode``).

Each mode owns its space, its masks, the text of its errors, what it provisions at reset, how an action
becomes the simulator's decision, and the reference it observes; :func:`make_action_mode` picks one from
the config, so the env's ``reset`` and ``step`` never branch on the mode. A new mode is a new class here.
The helpers they call (``_decision``, ``_residual_targets``, ``_warm_action``, ...) are the env's
(:mod:`~servegym.envs.npu.action_decoding`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray
from servegym.baselines.npu import make_policy, warm_start
from servegym.envs.npu.env_config import RESIDUAL_STEPS
from servegym.envs.npu.sim.records import ScalingDecision
from servegym.envs.npu.sim.roofline import PHASES

from servegym.errors import ActionError

if TYPE_CHECKING:
    from servegym.envs.npu.env import NPUAutoscaleEnv
    from servegym.envs.npu.sim.cluster import NPUCluster


class AbsoluteAction:
    """``absolute``: per group a count level and a configuration option, set outright (module docstring of
    the env, "Absolute action")."""

    name = "absolute"
    residual = False

    def nvec(self, env: NPUAutoscaleEnv) -> list[int]:
        return [env.levels.size, env.n_options] * len(env.groups)

    def group_masks(self, env: NPUAutoscaleEnv, i: int) -> list[NDArray[np.bool_]]:
        cnt = np.ones(env.levels.size, dtype=bool)
        if i in env.top_group:
            cnt &= env.levels > 0
        return [cnt, env._opt_ok[i]]

    def live_masks(self, env: NPUAutoscaleEnv, m: NDArray[np.bool_]) -> NDArray[np.bool_]:
        return m

    def kinds(self, d: int) -> tuple[str, ...]:
        return ("count", "option")

    def per_group(self, env: NPUAutoscaleEnv, d: int) -> str:
        return f"[count index in 0..{env.levels.size - 1}, option index in 0..{env.n_options - 1}]"

    def masked_option(self, env: NPUAutoscaleEnv, g: int) -> int:
        return int(np.flatnonzero(env._opt_ok[g])[0])

    def start(self, env: NPUAutoscaleEnv, sim: NPUCluster) -> None:
        if env.config.warm_start:
            a = env._warm_action()
            dec = env._decision(a)
            sim.provision(dec)
            env._targets = {k: dict(v) for k, v in dec.targets.items() if v}
            env._count = env.levels[a[0::2]]
            env._option = a[1::2].copy()

    def apply(self, env: NPUAutoscaleEnv, sim: NPUCluster, a: NDArray[np.int64]) -> None:
        dec = env._decision(a)
        sim.apply(dec)
        env._targets = {k: dict(v) for k, v in dec.targets.items() if v}
        env._count = env.levels[a[0::2]]
        env._option = a[1::2].copy()

    def observed(self, env: NPUAutoscaleEnv, truncated: bool) -> None:
        """After the epoch's observation (the residual mode computes its reference's next decision here)."""

    def reference_counts(self, env: NPUAutoscaleEnv) -> NDArray[np.float64]:
        if env.sim is not None and env.last_ctx is not None:
            return env.levels[env.heuristic_action()[0::2]].astype(float)
        return np.zeros(len(env.groups))

    def option_index(self, env: NPUAutoscaleEnv, g: int) -> int:
        return int(env._option[g])

    def option_indices(self, env: NPUAutoscaleEnv) -> NDArray[np.int64]:
        """:meth:`option_index` of every group (a new array)."""
        return env._option.copy()

    def require_absolute(self, what: str, why: str) -> None:
        """Absolute-mode helpers (``heuristic_action``, ``action_from_decision``) run in this mode."""


class ResidualAction:
    """``residual``: per group a change of the reference's decision (``reference``: NeuScale by default, or
    Base) by ``RESIDUAL_STEPS`` count levels (and, with ``residual_options``, an option; 0 keeps the
    reference's), so the all-zero action reproduces the reference (module docstring of the env, "Residual
    action")."""

    name = "residual"
    residual = True

    def __init__(self, options: bool) -> None:
        self.options = bool(options)

    def nvec(self, env: NPUAutoscaleEnv) -> list[int]:
        if self.options:
            return [len(RESIDUAL_STEPS), env.n_options + 1] * len(env.groups)
        return [len(RESIDUAL_STEPS)] * len(env.groups)

    def group_masks(self, env: NPUAutoscaleEnv, i: int) -> list[NDArray[np.bool_]]:
        parts = [np.ones(len(RESIDUAL_STEPS), dtype=bool)]
        if self.options:
            parts.append(np.concatenate([[True], env._opt_ok[i]]))
        return parts

    def live_masks(self, env: NPUAutoscaleEnv, m: NDArray[np.bool_]) -> NDArray[np.bool_]:
        """A group whose reference target is 0 vPods only allows 0 (no change)."""
        k = len(RESIDUAL_STEPS)
        stride = k + (env.n_options + 1 if self.options else 0)
        for g in np.flatnonzero(env._ref_counts <= 0).tolist():
            m[g * stride + 1: g * stride + k] = False
        return m

    def kinds(self, d: int) -> tuple[str, ...]:
        return ("change", "option")[:d]

    def per_group(self, env: NPUAutoscaleEnv, d: int) -> str:
        return (f"[change index in 0..{len(RESIDUAL_STEPS) - 1} (count-level changes {RESIDUAL_STEPS})"
                + (f", option index in 0..{env.n_options} (0 = the reference's)]" if d == 2 else "]"))

    def masked_option(self, env: NPUAutoscaleEnv, g: int) -> int:
        return 0

    def start(self, env: NPUAutoscaleEnv, sim: NPUCluster) -> None:
        # the reference drives this simulator exactly as run_policy does: its own warm start at t = 0,
        # then one decision per epoch boundary (computed when the boundary is observed, applied with the
        # agent's changes by the next step)
        env._ref_policy = pol = make_policy(env.config.reference)
        pol.reset(sim)
        sim.provision(ScalingDecision(env._capped(warm_start(sim, pol))))
        pol.targets = env._capped({k: v for k, v in pol.targets.items() if v})
        env._targets = pol.targets

    def apply(self, env: NPUAutoscaleEnv, sim: NPUCluster, a: NDArray[np.int64]) -> None:
        pol = env._ref_policy
        assert pol is not None
        if env._pending is None and not np.count_nonzero(a):
            pass  # the warm start stands, as in run_policy's first epoch
        else:
            base = env._pending.targets if env._pending is not None else dict(pol.targets)
            targets = env._residual_targets(a, base)
            sim.apply(ScalingDecision(targets))
            pol.targets = {k: v for k, v in targets.items() if v}
        env._targets = pol.targets
        if self.options:
            env._option = a[1::2].copy()

    def observed(self, env: NPUAutoscaleEnv, truncated: bool) -> None:
        if not truncated:
            assert env._ref_policy is not None
            env._pending = env._ref_policy.decide(env.last_ctx)

    def reference_counts(self, env: NPUAutoscaleEnv) -> NDArray[np.float64]:
        """The reference's decision for the next epoch (its warm start before the first), summed per env group."""
        assert env._ref_policy is not None
        ref = np.zeros(len(env.groups))
        tg = env._pending.targets if env._pending is not None else env._ref_policy.targets
        for key, tgt in tg.items():
            p, b = PHASES.index(key[0]), env._bucket_index(key[1])
            ref[int(env._env_group[p, b])] += sum(tgt.values())
        return ref

    def option_index(self, env: NPUAutoscaleEnv, g: int) -> int:
        """The reference's configuration (best fit) unless the agent chose one."""
        opt = int(env._option[g])
        return opt - 1 if opt > 0 else 0

    def option_indices(self, env: NPUAutoscaleEnv) -> NDArray[np.int64]:
        """:meth:`option_index` of every group (a new array)."""
        return np.maximum(env._option - 1, 0)

    def require_absolute(self, what: str, why: str) -> None:
        raise ActionError(f"{what}() returns an absolute action; with action_mode = 'residual' {why}")


def make_action_mode(action_mode: str, residual_options: bool) -> Any:
    """The action mode class of ``action_mode`` (validated by the config: one of ``ACTION_MODES``)."""
    if action_mode == "residual":
        return ResidualAction(residual_options)
    return AbsoluteAction()
