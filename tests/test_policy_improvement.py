"""Rollout policy improvement with common random numbers after the warm start
(servegym.agents.policy_improvement): the hyperparameter section's checks, the paired branches, the labels
and their determinism, and a tiny training run that records each round."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from servegym.agents.hparams import parse_section
from servegym.agents.policy_improvement import (
    PolicyImprovement,
    _branch_returns,
    check_env,
    improvement_round,
    parse_policy_improvement,
)

import servegym  # noqa: F401
from servegym.errors import ConfigError

PD = "servegym/PDProvisionResidual-v0"
KW = {"config": {"reference": "min-power+forecast:0.97", "scenario": {"horizon_steps": 60}}}
WS = {"steps": 256, "epochs": 2}
#: a busier hour (peak 45 req/s on the default 16 GPUs), where the reference leaves room to deviate
BUSY = {"config": {"reference": "min-power+forecast:0.97", "scenario": {"horizon_steps": 60, "peak_rate_rps": 45}}}
#: the same on a fixed busy hour (the default day, Monday 13 May 2024 from 10:00 UTC): a drawn train hour may be a
#: coding night (0.08 of the week peak), where the reference's deployment is the smallest and nothing pays
BUSY_HOUR = {"config": {"split": None, "reference": "min-power+forecast:0.97",
                        "scenario": {"horizon_steps": 60, "peak_rate_rps": 45, "start_hour": 10.0}}}


def test_section_is_checked_field_by_field() -> None:
    hp = parse_section({"warm_start": WS, "policy_improvement": {"rounds": 2, "offsets": [[-1, 0], [0, -1]],
                                                                 "margin": 0.001}}, "f.yml")
    assert hp.policy_improvement == PolicyImprovement(rounds=2, offsets=((-1, 0), (0, -1)), margin=0.001)
    assert "policy_improvement" not in hp.algo_kwargs
    assert parse_section({"warm_start": WS, "policy_improvement": True}, "f").policy_improvement == PolicyImprovement()
    assert parse_policy_improvement(False, "f") is None
    bad = (({"rounds": 0}, "policy_improvement.rounds = 0"), ({"states": 1.5}, "policy_improvement.states = 1.5"),
           ({"futures": True}, "policy_improvement.futures = True"), ({"steps": 3}, "steps is not a field"),
           ({"margin": float("nan")}, "policy_improvement.margin"), ({"offsets": []}, "offsets = \\[\\]"),
           ({"offsets": [[0, 0]]}, "offsets entry \\[0, 0\\]"), ({"offsets": [[-1, 0], [1]]}, "all of one length"),
           ({"offsets": [[99, 0]]}, "offsets entry"), ("yes", "policy_improvement = 'yes'"))
    for raw, msg in bad:
        with pytest.raises(ConfigError, match=msg) as exc:
            parse_section({"warm_start": WS, "policy_improvement": raw}, "f.yml")
        assert "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match="needs warm_start"):
        parse_section({"policy_improvement": True}, "f.yml")


def test_env_checks_name_the_field() -> None:
    env = gym.make(PD, **KW)
    env.reset(seed=0)
    check_env(env, PolicyImprovement(), "x")
    with pytest.raises(ConfigError, match="offsets have 1 entries"):
        check_env(env, PolicyImprovement(offsets=((-1,),)), "x")
    req = gym.make(PD, config={**KW["config"], "mode": "request"})
    req.reset(seed=0)
    with pytest.raises(ConfigError, match="mode = 'request'"):
        check_env(req, PolicyImprovement(), "x")


def test_cli_exits_2_on_a_bad_section(tmp_path) -> None:
    hp = tmp_path / "hp.yml"
    hp.write_text("maskable-ppo:\n  n_timesteps: 64\n  warm_start: {steps: 64}\n  policy_improvement: {horizon: 0}\n")
    out = subprocess.run([sys.executable, "-m", "servegym.cli", "train", "--env", PD, "--algo", "maskable-ppo",
                          "--hyperparams", str(hp), "--out", str(tmp_path / "m.zip")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "policy_improvement.horizon = 0" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_branches_are_paired_exactly() -> None:
    """The same candidate twice gives the same return in every future (common random numbers), the futures
    differ from each other, and the env being branched is left untouched."""
    env = gym.make(PD, **BUSY).unwrapped
    env.reset(seed=3)
    for _ in range(10):
        env.step(env.follow_action())
    before = (env.step_index, env.np_random.bit_generator.state["state"]["state"])
    f = env.follow_action()
    pi = PolicyImprovement(horizon=5, futures=3)
    rets = _branch_returns(env, [f, f, f - np.array([1, 0])], pi, env.action_space, [None, [0, 1], [0, 2]])
    assert rets is not None and rets.shape == (3, 3)
    assert np.array_equal(rets[:, 0], rets[:, 1])
    assert len(set(np.round(rets[:, 0], 12))) > 1  # the futures are different arrival streams
    assert (env.step_index, env.np_random.bit_generator.state["state"]["state"]) == before
    # near the episode's end the horizon would be cut: no returns
    while env.step_index < 57:
        env.step(f)
    assert _branch_returns(env, [f, f], pi, env.action_space, [None, [0, 1], [0, 2]]) is None


def test_round_labels_are_valid_and_deterministic() -> None:
    pi = PolicyImprovement(states=30, stride=2, horizon=4, futures=2, offsets=((-1, 0), (0, -1)))
    make = lambda: gym.make(PD, **BUSY_HOUR)  # noqa: E731
    a = improvement_round(make, pi, seed=1, rnd=1, normalize=None, net=None)
    b = improvement_round(make, pi, seed=1, rnd=1, normalize=None, net=None)
    obs, lab, masks, summary = a
    assert obs.shape == (30, 37) and lab.shape == (30, 2) and masks is not None and masks.shape[0] == 30
    for x, y in zip(a[:3], b[:3], strict=True):
        assert np.array_equal(x, y)
    assert summary == b[3]
    follow = np.array([2, 2])
    changed = ~np.all(lab == follow, axis=1)
    assert summary["relabelled_share"] == pytest.approx(changed.mean())
    offs = {(-1, 0), (0, -1)}
    assert all(tuple(x - follow) in offs for x in lab[changed])
    assert changed.any() and summary["mean_gain_relabelled"] > 0  # a pool -1 pays in some of these states
    assert summary["skipped_at_episode_end"] > 0  # 60-period episodes: the last states are skipped


@pytest.mark.slow
def test_improved_run_records_its_rounds_and_keeps_the_best_on_validation(tmp_path) -> None:
    from servegym.agents.train import TrainConfig, train

    hp = tmp_path / "hp.yml"
    hp.write_text("maskable-ppo:\n  n_envs: 2\n  n_timesteps: 64\n  normalize: true\n  n_steps: 32\n"
                  "  batch_size: 32\n  n_epochs: 1\n  policy_kwargs: {net_arch: [32, 32]}\n"
                  "  warm_start: {steps: 512, epochs: 4}\n"
                  "  policy_improvement: {rounds: 2, states: 40, horizon: 4, futures: 2, epochs: 2}\n")
    cfg = dict(env_id=PD, algo="maskable-ppo", hyperparams=str(hp), env_kwargs=BUSY, eval_freq=0, eval_episodes=1,
               baselines="none", checkpoint_freq=0, progress=False, verbose=0, tb=None)
    res = train(TrainConfig(**cfg, out=str(tmp_path / "a" / "m.zip")))
    run = json.loads(res.run_file.read_text())
    rec = run["policy_improvement"]
    assert [r["round"] for r in rec["rounds"]] == [0, 1, 2]
    vals = [r["validation_return"] for r in rec["rounds"]]
    assert rec["validation_return"] == max(vals) and vals[rec["kept_round"]] == max(vals)
    # the step-0 evaluation plays the kept round's policy on the same validation episode (PPO's first reset
    # updates VecNormalize's running statistics by one observation per env, hence not exactly)
    assert run["eval_history"][0]["mean_reward"] == pytest.approx(max(vals), abs=0.05)
    again = json.loads(train(TrainConfig(**cfg, out=str(tmp_path / "b" / "m.zip"))).run_file.read_text())
    assert [r["validation_return"] for r in again["policy_improvement"]["rounds"]] == vals
