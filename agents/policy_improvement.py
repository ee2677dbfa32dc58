"""Rollout policy improvement with common random numbers around the teacher, learned by DAgger, after the warm start.

The warm start (:mod:`servegym.agents.warm_start`) makes the policy play the teacher (the strongest baseline
where the env's reference is it). PPO from there rarely finds the small, safe improvements that exist, since
a gain of a few Wh a period is far below the reward's per-period noise and the clone is nearly deterministic
(``benchmarks/results/learnability/pd_ablation.md``). This step measures them directly, as a rollout
algorithm does (one step of policy improvement over a base policy by simulation: Bertsekas and Tsitsiklis,
*Neuro-Dynamic Programming*, 1996, sec. 6.1; classification-based approximate policy iteration: Lagoudakis and
Parr, ICML 2003), and has the network imitate the improved teacher on its own states (DAgger: Ross, Gordon and
Bagnell, AISTATS 2011):

1. play the **visiting policy** (round 1: the teacher, :func:`~servegym.agents.warm_start.teacher_action`;
   later rounds: the network's greedy action) on training episodes (seeds from the run's seed and the round)
   and, at every ``stride``-th state, up to ``states`` states a round:
2. branch copies of the env: for each candidate (the teacher's action, and the teacher's action plus each of
   ``offsets`` that the action mask allows) play it for ``hold`` periods, then the teacher for ``horizon``
   periods, and sum the rewards (undiscounted: the return is the KPI). Every candidate is played under the
   same ``futures`` streams of exogenous randomness (the first: the episode's own; the others: the env's
   ``np_random`` reseeded from (seed, round, state, episode, future)), so the differences between candidates
   are paired exactly (common random numbers): in pd's fluid mode the arrival counts are the only draws and
   no action touches them (:meth:`~servegym.envs.pd.env.PDProvisionEnv.hindsight_arrivals`). A state whose
   branches reach the episode's end before ``hold + horizon`` periods is skipped (the horizon would cut off
   a backlog's cost);
3. label the state with the candidate of the largest mean paired gain over the teacher's action, if that gain
   is above ``margin`` (reward units per state) **and** the candidate is no worse in every future; else the
   teacher's action ("keep following unless the improvement is clear": a wrong deviation costs backlogs, far
   more than a right one saves);
4. fit the policy on every round's (observation -> label) pairs so far with the warm start's loss
   (:func:`~servegym.agents.warm_start.fit_policy`, from the current weights, observations normalized with the
   clone's statistics);
5. play the policy on the validation episodes (the run's evaluation seeds) after each round; the round with
   the best mean validation return is kept (the clone is round 0), so a round that hurts is dropped on
   validation only, never on test.

A hyperparameter section turns it on, after ``warm_start`` (which it requires)::

    policy_improvement: {rounds: 2, states: 4000, horizon: 10, futures: 4, offsets: [[-1, 0]]}

``offsets`` are added to the teacher's action entry by entry (MultiDiscrete: one list per candidate with an
entry per action dimension; Discrete: one integer per candidate, e.g. ``[-1]`` the next lower slot). It needs
an env that defines ``reference_action()`` and ``hindsight_arrivals()`` (whose exogenous draws are independent
of the actions; pd's fluid mode) and a Discrete or MultiDiscrete action space; otherwise a one-line
ConfigError. What each round did (states, relabelled count per offset, mean gain, fit agreement, validation
return, CPU-s) goes to ``run.json`` (``policy_improvement``).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from servegym.agents.warm_start import check_number, section_mapping

from servegym.errors import ConfigError, shown

#: Bounds of the scalar fields (integers unless named in FLOATS).
LIMITS: dict[str, tuple[float, float]] = {
    "rounds": (1, 10), "states": (1, 1_000_000), "stride": (1, 10_000), "horizon": (1, 10_000),
    "futures": (1, 64), "hold": (1, 100), "margin": (0.0, 1e6), "epochs": (1, 1_000),
    "batch_size": (1, 65_536), "learning_rate": (1e-6, 1.0)}
FLOATS = ("margin", "learning_rate")
#: Candidate offsets: at most this many, each entry within +-OFFSET_MAX.
MAX_OFFSETS = 16
OFFSET_MAX = 8


@dataclass(frozen=True)
class PolicyImprovement:
    """A checked ``policy_improvement`` section (module docstring; ``margin`` in reward units per state)."""

    rounds: int = 1
    states: int = 4000
    stride: int = 1
    horizon: int = 10
    futures: int = 4
    hold: int = 1
    offsets: tuple[tuple[int, ...], ...] = ((-1, 0),)
    margin: float = 0.0
    epochs: int = 20
    batch_size: int = 256
    learning_rate: float = 1e-3


def parse_policy_improvement(raw: Any, source: str) -> PolicyImprovement | None:
    """``raw`` (the section's ``policy_improvement`` value: None/false, true or a mapping) checked field by field."""
    fields = ", ".join([*LIMITS, "offsets"])
    raw = section_mapping(raw, "policy_improvement", source, fields)
    if raw is None or raw is True:
        return None if raw is None else PolicyImprovement()
    out: dict[str, Any] = {}
    for key, val in raw.items():
        if key == "offsets":
            out[key] = _offsets(val, source)
            continue
        if key not in LIMITS:
            raise ConfigError(f"{source}: policy_improvement.{str(key)[:40]} is not a field; allowed: {fields}")
        out[key] = check_number(f"{source}: policy_improvement.{key}", val, LIMITS[key], key not in FLOATS)
    return PolicyImprovement(**out)


def _offsets(val: Any, source: str) -> tuple[tuple[int, ...], ...]:
    allowed = (f"allowed: a list of 1 to {MAX_OFFSETS} candidates, each an integer or a list of integers in "
               f"[-{OFFSET_MAX}, {OFFSET_MAX}], not all 0, all of one length")
    if not isinstance(val, list) or not 1 <= len(val) <= MAX_OFFSETS:
        raise ConfigError(f"{source}: policy_improvement.offsets = {shown(val)}; {allowed}")
    out = []
    for item in val:
        entries = item if isinstance(item, list) else [item]
        ok = 1 <= len(entries) <= 8 and all(
            isinstance(e, int) and not isinstance(e, bool) and abs(e) <= OFFSET_MAX for e in entries)
        if not ok or not any(entries):
            raise ConfigError(f"{source}: policy_improvement.offsets entry {shown(item)}; {allowed}")
        out.append(tuple(int(e) for e in entries))
    if len({len(o) for o in out}) != 1:
        raise ConfigError(f"{source}: policy_improvement.offsets = {shown(val)}; {allowed}")
    return tuple(out)


def check_env(env: gym.Env, pi: PolicyImprovement, source: str) -> None:
    """A one-line ConfigError unless ``env`` can be branched with common random numbers and ``pi.offsets``
    fit its action space (module docstring)."""
    u = env.unwrapped
    space = env.action_space
    if not callable(getattr(u, "reference_action", None)) or not callable(getattr(u, "hindsight_arrivals", None)):
        raise ConfigError(f"{source}: policy_improvement needs an env with reference_action() and "
                          f"hindsight_arrivals() (exogenous draws independent of the actions); "
                          f"{type(u).__name__} lacks them; allowed: the pd ids")
    u.hindsight_arrivals()  # ConfigError where the actions touch the draws (pd's request mode)
    if isinstance(space, gym.spaces.MultiDiscrete):
        dims = int(np.asarray(space.nvec).size)
    elif isinstance(space, gym.spaces.Discrete):
        dims = 1
    else:
        raise ConfigError(f"{source}: policy_improvement needs a Discrete or MultiDiscrete action space, not "
                          f"{space}; allowed: those")
    if len(pi.offsets[0]) != dims:
        raise ConfigError(f"{source}: policy_improvement.offsets have {len(pi.offsets[0])} entries but the action "
                          f"space {space} has {dims}; allowed: {dims} entries per candidate")


def _valid(space: gym.Space, mask: np.ndarray | None, action: np.ndarray) -> bool:
    """Whether ``action`` is in ``space`` and allowed by ``mask`` (sb3-contrib's layout)."""
    if isinstance(space, gym.spaces.Discrete):
        a = int(action.reshape(()))
        return 0 <= a < int(space.n) and (mask is None or bool(mask[a]))
    nvec = np.asarray(space.nvec).ravel()
    if np.any(action < 0) or np.any(action >= nvec):
        return False
    if mask is None:
        return True
    starts = np.concatenate([[0], np.cumsum(nvec)[:-1]])
    return bool(np.all(mask[starts + action]))


def _as_env_action(space: gym.Space, a: np.ndarray) -> Any:
    return int(a.reshape(())) if isinstance(space, gym.spaces.Discrete) else a.astype(np.int64)


class _Visitor:
    """The policy whose states a round labels: the teacher (round 1), else the network's greedy action
    (observations normalized with ``normalize``, the env's action mask where the model is maskable)."""

    def __init__(self, model: Any | None, normalize: Callable[[np.ndarray], np.ndarray] | None) -> None:
        self.model = model
        self.normalize = normalize
        self.masked = model is not None and type(model).__name__.startswith("Maskable")

    def __call__(self, env: Any, obs: np.ndarray) -> np.ndarray:
        from servegym.agents.warm_start import teacher_action

        if self.model is None:
            return np.asarray(teacher_action(env))
        x = np.asarray(obs, dtype=np.float32)[None]
        if self.normalize is not None:
            x = self.normalize(x)
        if self.masked:
            act, _ = self.model.predict(x, deterministic=True,
                                        action_masks=np.asarray(env.action_masks(), dtype=bool)[None])
        else:
            act, _ = self.model.predict(x, deterministic=True)
        return np.asarray(act[0])


def _branch_returns(env: Any, cands: list[np.ndarray], pi: PolicyImprovement, space: gym.Space,
                    seeds: list[Any]) -> np.ndarray | None:
    """(futures, candidates) undiscounted returns of each candidate held ``pi.hold`` periods then the teacher
    for ``pi.horizon``, from copies of ``env`` under common random numbers; None where the episode ends
    (truncated) before ``hold + horizon`` periods."""
    from servegym.agents.warm_start import teacher_action

    rets = np.zeros((pi.futures, len(cands)))
    for f in range(pi.futures):
        for c, cand in enumerate(cands):
            b = copy.deepcopy(env)
            if f > 0:
                b.np_random = np.random.default_rng(seeds[f])
            for t in range(pi.hold + pi.horizon):
                a = cand if t < pi.hold else np.asarray(teacher_action(b))
                _, r, term, trunc, _ = b.step(_as_env_action(space, a))
                rets[f, c] += float(r)
                if term:
                    break
                if trunc:
                    if t + 1 < pi.hold + pi.horizon:
                        return None
                    break
    return rets


def improvement_round(make_env: Callable[[], gym.Env], pi: PolicyImprovement, seed: int, rnd: int,
                      normalize: Callable[[np.ndarray], np.ndarray] | None, net: Any | None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, dict[str, Any]]:
    """One round's labelled states: (raw observations, labels, masks or None, summary). ``net``: the network
    whose states are labelled (None: the teacher's, round 1)."""
    from servegym.agents.warm_start import teacher_action

    env = make_env()
    space = env.action_space
    u = env.unwrapped
    visit = _Visitor(net, normalize)
    masked = callable(getattr(u, "action_masks", None))
    obs_l, lab_l, mask_l = [], [], []
    relabel = np.zeros(len(pi.offsets), dtype=int)
    gains: list[float] = []
    skipped = 0
    visited = 0
    ep = 0
    first = seed * 1_000 + rnd * 100_000  # round r's training days differ from round r-1's
    obs, _ = env.reset(seed=first)
    try:
        while len(obs_l) < pi.states:
            if visited % pi.stride == 0:
                teacher = np.asarray(teacher_action(u))
                mask = np.asarray(u.action_masks(), dtype=bool) if masked else None
                cands = [teacher]
                which = []
                for j, off in enumerate(pi.offsets):
                    a = teacher + np.asarray(off, dtype=np.int64).reshape(teacher.shape)
                    if _valid(space, mask, a):
                        cands.append(a)
                        which.append(j)
                seeds = [None, *([seed, rnd, visited, ep, f] for f in range(1, pi.futures))]
                rets = _branch_returns(u, cands, pi, space, seeds) if len(cands) > 1 else None
                label = teacher
                if rets is None and len(cands) > 1:
                    skipped += 1
                else:
                    if rets is not None:
                        diff = rets[:, 1:] - rets[:, :1]
                        mean = diff.mean(axis=0)
                        ok = (diff.min(axis=0) >= 0) & (mean > pi.margin)
                        if ok.any():
                            best = int(np.argmax(np.where(ok, mean, -np.inf)))
                            label = cands[1 + best]
                            relabel[which[best]] += 1
                            gains.append(float(mean[best]))
                    obs_l.append(np.asarray(obs, dtype=np.float32))
                    lab_l.append(np.asarray(label))
                    if mask is not None:
                        mask_l.append(mask)
            visited += 1
            obs, _, term, trunc, _ = env.step(_as_env_action(space, visit(u, obs)))
            if term or trunc:
                ep += 1
                obs, _ = env.reset(seed=first + ep)
    finally:
        env.close()
    n = len(obs_l)
    summary = {"states": n, "episodes": ep + 1, "skipped_at_episode_end": skipped,
               "relabelled": {str(list(o)): int(k) for o, k in zip(pi.offsets, relabel, strict=True)},
               "relabelled_share": float(relabel.sum() / max(n, 1)),
               "mean_gain_relabelled": float(np.mean(gains)) if gains else 0.0}
    return (np.stack(obs_l), np.stack(lab_l), np.stack(mask_l) if mask_l else None, summary)


def improve_policy(model: Any, make_env: Callable[[], gym.Env], pi: PolicyImprovement, seed: int,
                   validate: Callable[[], float]) -> dict[str, Any]:
    """Rounds of rollout improvement on ``model`` (already cloned); keeps the round with the best ``validate()``
    (mean validation return; round 0 = the clone). Returns the per-round record for run.json."""
    from servegym.agents.warm_start import WarmStart, fit_policy

    t_all = time.process_time()
    probe = make_env()
    try:
        check_env(probe, pi, "policy_improvement")
    finally:
        probe.close()
    vn = model.get_vec_normalize_env()
    normalize = vn.normalize_obs if vn is not None and vn.norm_obs else None
    fit = WarmStart(steps=1, epochs=pi.epochs, batch_size=pi.batch_size, learning_rate=pi.learning_rate)
    best_val = validate()
    best_state = copy.deepcopy(model.policy.state_dict())
    rounds: list[dict[str, Any]] = [{"round": 0, "validation_return": best_val}]
    kept = 0
    data: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []
    for rnd in range(1, pi.rounds + 1):
        t0 = time.process_time()
        obs, lab, masks, summary = improvement_round(make_env, pi, seed, rnd, normalize,
                                                     None if rnd == 1 else model)
        data.append((normalize(obs) if normalize is not None else obs, lab, masks))
        # DAgger: fit on every round's labelled states so far (the later rounds' come from the network's own
        # states, where its mistakes take it)
        x = np.concatenate([d[0] for d in data])
        y = np.concatenate([d[1] for d in data])
        m = None if data[0][2] is None else np.concatenate([d[2] for d in data])
        loss, agree = fit_policy(model, x, y, m, fit, seed + rnd)
        val = validate()
        summary.update(round=rnd, fit_states=len(x), fit_loss=loss, fit_agreement=agree,
                       validation_return=val, cpu_s=time.process_time() - t0)
        rounds.append(summary)
        if val > best_val:
            best_val, kept = val, rnd
            best_state = copy.deepcopy(model.policy.state_dict())
    model.policy.load_state_dict(best_state)
    return {"rounds": rounds, "kept_round": kept, "validation_return": best_val,
            "cpu_s": time.process_time() - t_all}
