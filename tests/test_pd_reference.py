"""The pd envs' configurable reference (``reference = "min-power+forecast:RHO"``): the residual mode's zero
action plays the strongest baseline exactly, every mode's observation reads that reference, and
``reference_action`` (a behaviour-cloning teacher) decodes to the reference's deployment in each mode."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from servegym.baselines.pd import MinPowerForecast, MinPowerPareto, run_policy
from servegym.envs.pd.env import ACTION_MODES, PDProvisionEnv

import servegym  # noqa: F401  (registers the ids)
from servegym.errors import ConfigError

STRONG = "min-power+forecast:0.97"
DAY = {"scenario": {"horizon_steps": 240}, "split": "validation"}


def _follow(env: PDProvisionEnv, seed: int) -> tuple[float, list[dict]]:
    _, info = env.reset(seed=seed)
    total, rows = 0.0, []
    while True:
        _, r, term, trunc, info = env.step(env.reference_action())
        total += r
        rows.append(info)
        if term or trunc:
            return total, rows


@pytest.mark.parametrize("reference, policy", [(STRONG, MinPowerForecast(rho_bar=0.97)),
                                               (None, MinPowerPareto(lookahead=1))])
def test_zero_action_plays_the_configured_reference_exactly(reference: str | None, policy) -> None:
    extra = {} if reference is None else {"reference": reference}  # None: the default stays the paper's rule
    base = run_policy(PDProvisionEnv({**DAY, **extra}), policy, seed=1003)
    total, rows = _follow(PDProvisionEnv({**DAY, **extra, "action_mode": "residual"}), 1003)
    assert len(rows) == base.steps == 240
    for key in ("n_p", "n_d", "power_w", "backlog", "slo_violation_pct"):
        assert np.array_equal(np.array([i[key] for i in rows], dtype=float), base.series[key]), key
    assert total == base.reward
    # the absolute mode's reference action is the same deployment (the teacher of every mode)
    total_abs, _ = _follow(PDProvisionEnv({**DAY, **extra}), 1003)
    assert total_abs == base.reward


def test_reference_changes_observation_and_reward_only_through_the_action() -> None:
    """Same actions, two references: identical dynamics and rewards; the suggestion entries differ."""
    a = PDProvisionEnv({**DAY})
    b = PDProvisionEnv({**DAY, "reference": STRONG})
    oa, _ = a.reset(seed=7)
    ob, _ = b.reset(seed=7)
    rng = np.random.default_rng(0)
    differs = 0
    for _ in range(240):
        act = np.array([rng.integers(1, 9), rng.integers(1, 8)])
        oa, ra, ta, ua, _ = a.step(act)
        ob, rb, tb, ub, _ = b.step(act)
        assert ra == rb and (ta, ua) == (tb, ub)
        assert np.array_equal(oa[:24], ob[:24])  # everything but what the reference suggests
        assert b.observation_space.contains(ob)
        differs += int(not np.array_equal(oa[24:], ob[24:]))
        if ta or ua:
            break
    assert differs > 0


def test_front_reference_action_is_the_covering_front_point() -> None:
    e = PDProvisionEnv({**DAY, "reference": STRONG, "action_mode": "front"})
    e.reset(seed=2)
    for _ in range(60):
        a = int(e.reference_action())
        assert e.action_masks()[a]
        ref = e.state.ref
        grid = e.reference.mix_cache(ref.mix).grid
        rows = e.state.front_rows(ref.mix, e.front_slots)
        mu = grid.mu[rows]
        assert mu[a] >= ref.capacity_rps or a == rows.size - 1
        assert a == 0 or mu[a - 1] < ref.capacity_rps
        e.step(a)


@pytest.mark.parametrize("mode", ACTION_MODES)
def test_checkers_and_determinism_with_the_strongest_reference(mode: str) -> None:
    from gymnasium.utils.env_checker import check_env as gym_check_env

    ids = {"absolute": "servegym/PDProvision-v0", "residual": "servegym/PDProvisionResidual-v0",
           "front": "servegym/PDProvisionFront-v0"}
    cfg = {"scenario": {"horizon_steps": 60}, "reference": STRONG}
    gym_check_env(gym.make(ids[mode], config=cfg).unwrapped)

    def roll(seed: int) -> tuple[list, list]:
        e = gym.make(ids[mode], config=cfg).unwrapped
        obs, _ = e.reset(seed=seed)
        rng = np.random.default_rng(1)
        out, rew = [obs], []
        for _ in range(60):
            m = e.action_masks()
            if mode == "front":
                a = int(rng.choice(np.flatnonzero(m)))
            else:
                n0 = int(e.action_space.nvec[0])
                a = np.array([rng.choice(np.flatnonzero(m[:n0])), rng.choice(np.flatnonzero(m[n0:]))])
            obs, r, *_ = e.step(a)
            assert e.observation_space.contains(obs)
            out.append(obs)
            rew.append(r)
        return out, rew

    x, y, z = roll(3), roll(3), roll(4)
    assert all(np.array_equal(p, q) for p, q in zip(x[0], y[0], strict=True)) and x[1] == y[1]
    assert x[1] != z[1]


@pytest.mark.parametrize("bad", ["milp", "min-power+forecast:1.5", "min-power+forecast:0", "min-power+forecast:nan",
                                 "min-power+forecast:x", "min-power", 3, "x" * 100])
def test_bad_reference_names_the_field(bad) -> None:
    with pytest.raises(ConfigError, match="reference"):
        PDProvisionEnv({"reference": bad})
