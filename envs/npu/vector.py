"""A native :class:`gymnasium.vector.VectorEnv` for the npu ids.

``gymnasium.make_vec("servegym/NPUAutoscale-v0", num_envs=N, vectorization_mode="vector_entry_point")`` (and
``NPUAutoscaleResidual-v0``) builds :class:`NPUVectorEnv`: N :class:`~servegym.envs.npu.env.NPUAutoscaleEnv`
instances of one config (each its own drawn scenario, generator and simulator) with the shared vector
machinery of :mod:`servegym.envs.vector_base` (next-step autoreset, seeds ``seed + i``, ``reset_mask``,
``max_episode_steps``, infos batched key by key, :meth:`~servegym.envs.vector_base.EnvBatch.action_masks`
one row per env). Every action is checked before any env steps; then each env runs its own ``step``: an
npu step is mostly the decision loop (the autoscalers' decisions, vPod reconcile, observation), which is
Python per env, while the fluid serving step is one compiled call per env and interval
(:func:`~servegym.envs.npu.sim.fluid_kernels.serve`, about 0.1 ms), so batching it across the envs would save
little; the envs are stepped one after another and the batch saves only the per-env wrapper overhead of
:class:`gymnasium.vector.SyncVectorEnv`. Results equal N separate envs with the same seeds
(tested). Speed: ``benchmarks/npu_vector_speed.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servegym.envs.npu.env import NPUAutoscaleEnv, NPUEnvConfig
from servegym.envs.vector_base import EnvBatch, check_vector_args


class NPUVectorEnv(EnvBatch):
    """N npu environments of one config (see the module docstring)."""

    def __init__(self, num_envs: int, config: NPUEnvConfig | Mapping[str, Any] | None = None,
                 render_mode: str | None = None, max_episode_steps: int | None = None, **overrides: Any) -> None:
        check_vector_args(num_envs, max_episode_steps)
        envs = [NPUAutoscaleEnv(config, render_mode=render_mode, **overrides) for _ in range(int(num_envs))]
        super().__init__(envs, render_mode, max_episode_steps)
