"""Episodes of named policies on one split of an env id: the env every benchmark plays (:func:`make_split_env`)
and the family baselines or ``follow`` on a list of seeds (:func:`run_policy_episodes`), which the single-policy
benchmark, the suite's tasks and the leaderboard all play through."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
from servegym.agents import protocol
from servegym.agents.families import EpisodeResult, family_for, run_baseline_episodes
from servegym.agents.rollout import play_episode


def make_split_env(env_id: str, split: str | None, env_kwargs: dict[str, Any] | None = None) -> gym.Env:
    """``gym.make(env_id, **env_kwargs, split=split)`` (the split keyword wins over a config's)."""
    import servegym  # noqa: F401  (registers the ids in fresh workers)

    return gym.make(env_id, **{**(env_kwargs or {}), "split": split})


def run_policy_episodes(env_id: str, env: gym.Env, names: Sequence[str], seeds: Sequence[int],
                        progress: Any = None) -> dict[str, list[EpisodeResult]]:
    """Every named policy (family baselines and ``follow``, the residual mode's zero action, which steps
    the env itself) on every seed of ``env``."""
    fam = family_for(env_id)
    out: dict[str, list[EpisodeResult]] = {}
    base_names = [n for n in names if n != protocol.FOLLOW]
    if base_names:
        out.update(run_baseline_episodes(fam, env, base_names, seeds, progress=progress))
    if protocol.FOLLOW in names:
        res = []
        for s in seeds:
            res.append(play_episode(env, lambda obs, info, e: protocol.follow_action(e), s, protocol.FOLLOW,
                                    fam.metrics))
            if progress is not None:
                progress.update(1)
        out[protocol.FOLLOW] = res
    return {n: out[n] for n in names if n in out}
