"""The one table of servegym environment ids and their registration with Gymnasium.

Gymnasium 1.x has no plugin loader, so ``import servegym`` calls :func:`register_envs`.
It is idempotent and cheap (no env module is imported until ``gym.make``), and it
runs in every process that imports ``servegym``, including SubprocVecEnv children
started with ``spawn`` or ``forkserver``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EnvSpecEntry:
    """One registered id: ``entry_point`` is ``"module:Class"``, imported lazily by gym.make."""

    id: str
    entry_point: str
    max_episode_steps: int | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: ``"module:Class"`` of a native VectorEnv that ``gym.make_vec(id, num_envs=N,
    #: vectorization_mode="vector_entry_point")`` builds (None: only the sync/async modes)
    vector_entry_point: str | None = None


#: ``max_episode_steps`` of each id (gym.make wraps the env in a TimeLimit of this many steps). Episodes end by
#: the envs' own truncation; these values never cut an episode of the default config. Where the length
#: depends on the config they are the default config's length, and a config with longer episodes passes
#: ``gym.make(id, max_episode_steps=N)`` (or ``-1``: no TimeLimit):
#: - pd: one step per period, ``scenario.horizon_steps`` = 1440 (a day of 60-s periods); a curriculum stage
#:   or a shorter horizon ends earlier by itself.
#: - npu: one step per 5-min epoch, ``hours`` x 12 = 288 (24 h).
#: - geo: one step per request (GeoRoute-v0) or per scheduler window (GeoRouteWindow-v0), so the length is the
#:   episode's Poisson draw (about 18,000 requests and 1,150 windows on the default small preset). The limit
#:   is an upper bound over every named scenario at its own duration, the largest being the paper preset at
#:   high load under the shift-load split (x 1.5): 1.2M requests expected, and at most 4 schedulers x
#:   (200 s / 0.1-s windows + 1) + 1.3M / 300-request windows = 12,338 windows.
GEO_ROUTE_MAX_STEPS = 1_300_000
GEO_WINDOW_MAX_STEPS = 13_000
PD_MAX_STEPS = 1440
NPU_MAX_STEPS = 288
#: pd's native vector env: N scenarios stepped in one numpy batch (servegym.envs.pd.vector)
PD_VECTOR = "servegym.envs.pd.vector:PDVectorEnv"
#: npu's native vector env (servegym.envs.npu.vector)
NPU_VECTOR = "servegym.envs.npu.vector:NPUVectorEnv"

# Each family adds its ids here; tests/test_registration.py makes every one of them.
ENV_SPECS: tuple[EnvSpecEntry, ...] = (
    # geo: episodes end by the env's own truncation (end of the run or config max_steps)
    EnvSpecEntry("servegym/GeoRoute-v0", "servegym.envs.geo.env_route:GeoRouteEnv", GEO_ROUTE_MAX_STEPS),
    EnvSpecEntry("servegym/GeoRouteWindow-v0", "servegym.envs.geo.env_window:GeoRouteWindowEnv",
                 GEO_WINDOW_MAX_STEPS),
    # pd: one step per provisioning period; the env truncates at the scenario horizon itself
    EnvSpecEntry("servegym/PDProvision-v0", "servegym.envs.pd.env:PDProvisionEnv", PD_MAX_STEPS,
                 vector_entry_point=PD_VECTOR),
    # pd action modes: the same env driven by a change around min-power+lookahead, or by a front slot
    EnvSpecEntry("servegym/PDProvisionResidual-v0", "servegym.envs.pd.env:PDProvisionEnv", PD_MAX_STEPS,
                 kwargs={"action_mode": "residual"}, vector_entry_point=PD_VECTOR),
    EnvSpecEntry("servegym/PDProvisionFront-v0", "servegym.envs.pd.env:PDProvisionEnv", PD_MAX_STEPS,
                 kwargs={"action_mode": "front"}, vector_entry_point=PD_VECTOR),
    # npu: one step per 5-min epoch; the env truncates at its horizon (config "hours", 24 h) itself
    EnvSpecEntry("servegym/NPUAutoscale-v0", "servegym.envs.npu.env:NPUAutoscaleEnv", NPU_MAX_STEPS,
                 vector_entry_point=NPU_VECTOR),
    # npu learnable mode: per-group changes around NeuScale's decision, reward relative to Base
    EnvSpecEntry("servegym/NPUAutoscaleResidual-v0", "servegym.envs.npu.env:NPUAutoscaleEnv", NPU_MAX_STEPS,
                 kwargs={"action_mode": "residual", "reward_mode": "base"}, vector_entry_point=NPU_VECTOR),
)


def register_envs() -> list[str]:
    """Register every servegym id that is not registered yet; return the ids now registered.

    Calling it again is a no-op, so re-imports (spawned children, reloads) never warn. Gymnasium is imported
    here, not at module level, so the ``servegym`` command's ``--help`` (which defers registration, see
    :mod:`servegym_launch`) loads neither gymnasium nor numpy.
    """
    import gymnasium as gym

    for entry in ENV_SPECS:
        if entry.id in gym.registry:
            continue
        gym.register(
            id=entry.id,
            entry_point=entry.entry_point,
            max_episode_steps=entry.max_episode_steps,
            kwargs=dict(entry.kwargs),
            vector_entry_point=entry.vector_entry_point,
        )
    return [entry.id for entry in ENV_SPECS]
