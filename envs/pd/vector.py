"""A native :class:`gymnasium.vector.VectorEnv` for the pd ids: N scenarios stepped in one numpy batch.

``gymnasium.make_vec("servegym/PDProvision-v0", num_envs=N, vectorization_mode="vector_entry_point")``
(and the Residual / Front ids) builds :class:`PDVectorEnv`. It holds N
:class:`~servegym.envs.pd.env.PDProvisionEnv` instances (each its own drawn day, generator and state) and
runs a step as the single env does, in three parts: each env decodes its action and draws its arrivals
(``decode_action``, ``begin_period``), then the fluid periods of all N states run as one array program
(:func:`servegym.envs.pd.sim.fluid.fluid_periods`, the same function the single env calls with its own state
alone), then each env computes its reward, reference, info and observation (``finish_step``). Results
equal N separate envs with the same seeds (tested, bit for bit), including Gymnasium 1.x's default
next-step autoreset: the step after an episode ends resets that env (reward 0, not terminated, not
truncated, the reset's observation and info) and ignores its action, as
:class:`gymnasium.vector.SyncVectorEnv` does. ``reset(seed=s)`` seeds env i with s + i; a list gives one
seed per env; ``options={"reset_mask": mask}`` resets only the masked envs. ``max_episode_steps`` (passed
by ``make_vec`` from the id's spec) truncates as :class:`gymnasium.wrappers.TimeLimit` would.
:meth:`action_masks` stacks the envs' masks, one row per env. ``mode="request"`` is accepted and steps
its simulators one after another (no batch). Speed: ``benchmarks/pd_vector_speed.py``.
"""

from __future__ import annotations

from typing import Any

from servegym.envs.pd.env import PDEnvConfig, PDProvisionEnv
from servegym.envs.vector_base import MAX_NUM_ENVS, EnvBatch, StepResult, check_vector_args

__all__ = ["MAX_NUM_ENVS", "PDVectorEnv"]


class PDVectorEnv(EnvBatch):
    """N pd environments of one config stepped as one batch (see the module docstring)."""

    def __init__(self, num_envs: int, config: PDEnvConfig | dict[str, Any] | None = None,
                 render_mode: str | None = None, action_mode: str | None = None,
                 max_episode_steps: int | None = None, **overrides: Any) -> None:
        check_vector_args(num_envs, max_episode_steps)
        envs = [PDProvisionEnv(config, render_mode=render_mode, action_mode=action_mode, **overrides)
                for _ in range(int(num_envs))]
        super().__init__(envs, render_mode, max_episode_steps)

    def _step_envs(self, stepping: list[int], acts: list[Any]) -> dict[int, StepResult]:
        """Decode every action first (an invalid one leaves every env as it was), begin each period, run the
        fluid periods of all as one array program, then finish each env's step."""
        envs = self.envs
        decoded = {i: envs[i].decode_action(acts[i]) for i in stepping}
        begun = {i: envs[i].begin_period(*decoded[i][:2]) for i in stepping}
        dynamics = envs[0].dynamics  # one config for all: the fluid periods run as one array program
        runs = dynamics.run([envs[i].state for i in stepping], [begun[i] for i in stepping],
                            [envs[i].np_random for i in stepping])
        periods = dict(zip(stepping, runs, strict=True))
        return {i: envs[i].finish_step(*decoded[i], begun[i], periods[i]) for i in stepping}
