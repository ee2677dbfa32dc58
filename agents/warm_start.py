"""Warm start by behaviour cloning: before RL, fit the policy to the reference's action (the teacher).

In a residual action mode the zero action (:func:`servegym.agents.protocol.follow_action`) plays the
reference baseline exactly, so "clone the reference's trajectories" reduces to "make the follow action
the policy's choice on the states the reference visits". An env that defines ``reference_action()`` (pd:
every action mode, so the absolute and front modes clone the reference's deployment too) names its teacher
itself; otherwise the teacher is the follow action. A hyperparameter section turns it on with::

    warm_start: {steps: 4096, epochs: 10, learning_rate: 1.0e-3}

:func:`behaviour_clone` then plays the teacher action for ``steps`` steps in a training env (episodes
seeded from the run's seed), and fits the policy for ``epochs`` passes of minibatches on them:

- discrete actions: the cross-entropy of the teacher action under the policy's (masked) distribution;
- continuous actions: the squared error of the policy's mean action to the teacher action (the
  exploration noise, ``log_std``, is left as configured, so RL still explores around the reference).

The value head is not fitted: PPO's first rollouts fit it on the cloned policy's own returns.
Cost: ``steps`` env steps of the reference plus a few seconds of gradient steps (reported in run.json).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from servegym.errors import ConfigError, shown

#: Bounds of the ``warm_start`` fields (steps: env steps of the reference; epochs: passes over them).
LIMITS: dict[str, tuple[float, float]] = {"steps": (1, 1_000_000), "epochs": (1, 1_000),
                                          "batch_size": (1, 65_536), "learning_rate": (1e-6, 1.0)}


@dataclass(frozen=True)
class WarmStart:
    """A checked ``warm_start`` section (module docstring)."""

    steps: int = 4096
    epochs: int = 10
    batch_size: int = 256
    learning_rate: float = 1e-3


def parse_warm_start(raw: Any, source: str) -> WarmStart | None:
    """``raw`` (the section's ``warm_start`` value: None/false, true or a mapping) checked field by field."""
    raw = section_mapping(raw, "warm_start", source, ", ".join(LIMITS))
    if raw is None or raw is True:
        return None if raw is None else WarmStart()
    out: dict[str, Any] = {}
    for key, val in raw.items():
        if key not in LIMITS:
            raise ConfigError(f"{source}: warm_start.{str(key)[:40]} is not a field; allowed: {', '.join(LIMITS)}")
        out[key] = check_number(f"{source}: warm_start.{key}", val, LIMITS[key], key != "learning_rate")
    return WarmStart(**out)


def section_mapping(raw: Any, name: str, source: str, fields: str) -> dict[str, Any] | bool | None:
    """A trainer section's value: None for none/false, True for true, else the mapping (a one-line
    ConfigError naming ``name`` and its ``fields`` for anything else)."""
    if raw is None or raw is False:
        return None
    if raw is True or isinstance(raw, dict):
        return raw
    raise ConfigError(f"{source}: {name} = {shown(raw)}; allowed: true, false or a mapping with {fields}")


def check_number(name: str, val: Any, bounds: tuple[float, float], integer: bool) -> int | float:
    """``val`` as an int (``integer``) or float within ``bounds``, else a one-line ConfigError naming ``name``."""
    lo, hi = bounds
    ok = not isinstance(val, bool) and isinstance(val, (int, float)) and bool(np.isfinite(val))
    if ok and integer:
        ok = float(val).is_integer()
    if not ok or not lo <= float(val) <= hi:
        kind = "an integer" if integer else "a number"
        raise ConfigError(f"{name} = {shown(val)}; allowed: {kind} in [{lo:g}, {hi:g}]")
    return int(val) if integer else float(val)


def teacher_action(env: gym.Env) -> Any:
    """The action to clone in ``env``'s current state: the env's ``reference_action()`` where it defines one
    (pd: the reference's deployment in every action mode), else the residual follow action."""
    from servegym.agents.protocol import follow_action

    fn = getattr(env.unwrapped, "reference_action", None)
    return fn() if callable(fn) else follow_action(env)


def follow_rollout(make_env: Callable[[], gym.Env], steps: int, seed: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(observations, teacher actions (:func:`teacher_action`), action masks or None) of ``steps`` steps of
    the teacher, episodes reset with seeds ``seed, seed + 1, ...``."""
    env = make_env()
    try:
        masked = callable(getattr(env.unwrapped, "action_masks", None))
        obs_l, act_l, mask_l = [], [], []
        ep = 0
        obs, _ = env.reset(seed=seed)
        while len(obs_l) < steps:
            a = teacher_action(env)
            obs_l.append(np.asarray(obs, dtype=np.float32))
            act_l.append(np.asarray(a))
            if masked:
                mask_l.append(np.asarray(env.unwrapped.action_masks(), dtype=bool))
            obs, _, term, trunc, _ = env.step(a)
            if term or trunc:
                ep += 1
                obs, _ = env.reset(seed=seed + ep)
    finally:
        env.close()
    return np.stack(obs_l), np.stack(act_l), (np.stack(mask_l) if masked else None)


def behaviour_clone(model: Any, make_env: Callable[[], gym.Env], ws: WarmStart, seed: int) -> dict[str, float]:
    """Fit ``model``'s policy to the teacher action (module docstring); returns what it did: steps, final
    loss, share of the states where the policy's greedy action is the teacher action, CPU seconds."""
    t0 = time.process_time()
    obs, act, masks = follow_rollout(make_env, ws.steps, seed)
    vn = model.get_vec_normalize_env()
    if vn is not None and vn.norm_obs:
        # start the running statistics from the reference's states: normalized with the fresh statistics
        # (mean 0, variance 1) the cloned mapping would shift as soon as RL updates them
        vn.obs_rms.update(obs)
        obs = vn.normalize_obs(obs)
    loss_v, agree = fit_policy(model, obs, act, masks, ws, seed)
    return {"steps": float(len(obs)), "loss": loss_v, "agreement": agree, "cpu_s": time.process_time() - t0}


def fit_policy(model: Any, obs: np.ndarray, act: np.ndarray, masks: np.ndarray | None, ws: WarmStart,
               seed: int) -> tuple[float, float]:
    """Fit ``model``'s policy to the actions ``act`` on the (already normalized) observations ``obs`` for
    ``ws.epochs`` passes of ``ws.batch_size`` minibatches (module docstring's losses), from its current
    weights; returns (final minibatch loss, share of the states whose greedy action is ``act``)."""
    import torch as th

    policy = model.policy
    discrete = isinstance(model.action_space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete))
    if not discrete and not isinstance(model.action_space, gym.spaces.Box):
        raise ConfigError(f"warm_start: action space {model.action_space} is not Discrete, MultiDiscrete or Box; "
                          "allowed: those")
    opt = th.optim.Adam(policy.parameters(), lr=ws.learning_rate)
    rng = np.random.default_rng(seed)
    n = len(obs)
    obs_t = th.as_tensor(obs, device=policy.device)
    act_t = th.as_tensor(act.astype(np.int64 if discrete else np.float32), device=policy.device)
    loss_v = float("nan")
    policy.set_training_mode(True)
    for _ in range(ws.epochs):
        for idx in np.array_split(rng.permutation(n), max(n // ws.batch_size, 1)):
            loss = _loss(policy, obs_t[idx], act_t[idx], None if masks is None else masks[idx], discrete)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_v = float(loss.detach())
    policy.set_training_mode(False)
    with th.no_grad():
        agree = _agreement(policy, obs_t, act_t, masks, discrete)
    return loss_v, agree


def _distribution(policy: Any, obs: Any, masks: np.ndarray | None) -> Any:
    if masks is not None:
        return policy.get_distribution(obs, action_masks=masks)
    return policy.get_distribution(obs)


def _loss(policy: Any, obs: Any, act: Any, masks: np.ndarray | None, discrete: bool) -> Any:
    dist = _distribution(policy, obs, masks)
    if discrete:
        return -dist.log_prob(act).mean()
    return ((dist.distribution.mean - act) ** 2).mean()


def _agreement(policy: Any, obs: Any, act: Any, masks: np.ndarray | None, discrete: bool) -> float:
    """Share of the states whose greedy action is the teacher action (continuous: within 0.05 on every entry)."""
    dist = _distribution(policy, obs, masks)
    mode = dist.mode()
    if discrete:  # MultiDiscrete: every entry equal
        eq = mode == act
        return float((eq.all(dim=-1) if eq.dim() > 1 else eq).float().mean())
    return float(((mode - act).abs() <= 0.05).all(dim=-1).float().mean())
