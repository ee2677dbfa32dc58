"""The pd observation's day-level entries (config ``rate_ema_periods``, on for the stress tracks): the space, a hand
computation of the moving average, determinism, the vector env, and the rule and reference that read them
(:class:`servegym.baselines.pd.MinPowerEmaForecast`, ``reference = "min-power+ema:RHO"``)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from servegym.agents.adapters import _pd_policy, run_pd_baseline
from servegym.baselines.pd import MinPowerEmaForecast, run_policy
from servegym.envs.pd.env import OBS_FIELDS, PDProvisionEnv
from servegym.envs.pd.observations import LEVEL_FIELDS
from servegym.envs.pd.vector import PDVectorEnv

import servegym  # noqa: F401 (registers the ids)
from servegym.errors import ConfigError

SHORT = {"scenario": {"horizon_steps": 40}}
TRACK = {**SHORT, "split": "validation", "track": "stress-delay"}


def test_level_entries_are_opt_in_and_the_spaces_match() -> None:
    base = PDProvisionEnv({**SHORT, "split": "validation"})
    assert base.config.rate_ema_periods == 0.0 and base.observation_space.shape == (len(OBS_FIELDS),) == (37,)
    obs, info = base.reset(seed=0)
    assert obs.shape == (37,) and "rate_level_ema" not in info
    for track in ("stress-delay", "stress-long-delay"):
        env = PDProvisionEnv({**SHORT, "split": "validation", "track": track})
        assert env.config.rate_ema_periods == 30.0
        assert env.obs_fields() == OBS_FIELDS + LEVEL_FIELDS and env.observation_space.shape == (40,)
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
    for env_id in ("servegym/PDProvision-v0", "servegym/PDProvisionResidual-v0", "servegym/PDProvisionFront-v0"):
        gym_check_env(gym.make(env_id, config={**TRACK}).unwrapped, skip_render_check=False)
    on = PDProvisionEnv({**SHORT, "rate_ema_periods": 5})  # also without a track
    assert on.observation_space.shape == (40,) and on.reset(seed=1)[0].shape == (40,)


def test_level_is_the_moving_average_of_observed_over_smooth_rate() -> None:
    """By hand: level_0 = first rate / smooth, then level += (arrived / period / smooth_k - level) / 30; the forecast
    entries are smooth x level over the start-up horizon (6 periods at 300 s), scaled by the configured peak."""
    env = PDProvisionEnv(TRACK)
    obs, info = env.reset(seed=4)
    smooth, period, peak = env.signals.base_rate_rps, env.config.scenario.period_s, env.config.scenario.peak_rate_rps
    level = env.state.rates[0] / smooth[0]
    f = {name: i for i, name in enumerate(env.obs_fields())}
    for k in range(25):
        assert info["rate_level_ema"] == pytest.approx(level, rel=1e-12)
        horizon = smooth[k: min(k + 6, 40)] * level
        assert info["level_forecast_rps"] == pytest.approx(horizon[0], rel=1e-12)
        assert info["level_forecast_max_rps"] == pytest.approx(horizon.max(), rel=1e-12)
        assert obs[f["rate_level_ema"]] == np.float32(level)
        assert obs[f["level_forecast_max / peak"]] == np.float32(horizon.max() / peak)
        obs, _, _, _, info = env.step(np.array([info["reference_p"], info["reference_d"]]))
        level += (info["arrived"] / period / smooth[k] - level) / 30.0
    assert 0.5 < level < 1.5


def test_level_entries_are_deterministic_and_the_vector_env_equals_single_envs() -> None:
    n = 3
    venv = PDVectorEnv(n, config=TRACK, action_mode="residual", max_episode_steps=15)
    singles = [PDProvisionEnv(TRACK, action_mode="residual") for _ in range(n)]
    obs, info = venv.reset(seed=[7, 8, 9])
    assert obs.shape == (n, 40) and np.array_equal(obs, np.stack([e.reset(seed=7 + i)[0] for i, e in enumerate(singles)]))
    rng = np.random.default_rng(0)
    for _ in range(12):
        acts = rng.integers(0, 5, size=(n, 2))
        obs, rew, _, _, info = venv.step(acts)
        for i, e in enumerate(singles):
            o, r, _, _, inf = e.step(acts[i])
            assert np.array_equal(obs[i], o) and rew[i] == r and info["rate_level_ema"][i] == inf["rate_level_ema"]
    again = PDProvisionEnv(TRACK, action_mode="residual")
    o = again.reset(seed=7)[0]
    rng = np.random.default_rng(0)
    for _ in range(12):
        o = again.step(rng.integers(0, 5, size=(n, 2))[0])[0]
    assert np.array_equal(o, singles[0]._obs())


def test_ema_rule_and_reference() -> None:
    """The rule parses, refuses an env without the level entries, and the residual mode's zero action around
    ``reference = "min-power+ema:RHO"`` plays the same deployments as the rule itself."""
    assert _pd_policy("min-power+ema:0.875").name == "min-power+ema:0.875"
    with pytest.raises(ConfigError, match="rate_ema_periods > 0"):
        run_policy(PDProvisionEnv({**SHORT, "split": "validation"}), MinPowerEmaForecast(0.85), seed=0)
    with pytest.raises(ConfigError, match=r"reference = 'min-power\+ema:0.9' sizes for the level forecast"):
        PDProvisionEnv({**SHORT, "reference": "min-power+ema:0.9"})
    rule = run_policy(PDProvisionEnv(TRACK), MinPowerEmaForecast(0.875), seed=3)
    res = gym.make("servegym/PDProvisionResidual-v0", config={**TRACK, "reference": "min-power+ema:0.875"}).unwrapped
    res.reset(seed=3)
    energy = reward = 0.0
    n_p, n_d = [], []
    for _ in range(40):
        _, r, te, tr, info = res.step(res.follow_action())
        energy, reward = energy + info["energy_kwh"], reward + r
        n_p.append(info["n_p"])
        n_d.append(info["n_d"])
        if te or tr:
            break
    assert n_p == list(rule.series["n_p"]) and n_d == list(rule.series["n_d"])
    assert (energy, reward) == pytest.approx((rule.energy_kwh, rule.reward), rel=1e-12)
    # through the benchmark's runner on the residual id (its absolute twin keeps the level entries)
    out = run_pd_baseline(gym.make("servegym/PDProvisionResidual-v0", config=TRACK), "min-power+ema:0.875", 3)
    assert out.policy == "min-power+ema:0.875" and out.length == 40
