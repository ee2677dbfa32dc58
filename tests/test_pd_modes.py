"""PDProvision action modes (absolute, residual, front), reference observations, backlog penalty and
termination, the return-equals-KPIs identity, reward bounds and the horizon curriculum (issue 13)."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.baselines.pd import MinPowerPareto, run_policy
from servegym.envs.pd.env import ACTION_MODES, OBS_FIELDS, PDProvisionEnv

import servegym  # noqa: F401  (registers the ids)
from servegym.errors import ActionError, ConfigError

IDS = {"absolute": "servegym/PDProvision-v0", "residual": "servegym/PDProvisionResidual-v0",
       "front": "servegym/PDProvisionFront-v0"}
SHORT = {"scenario": {"horizon_steps": 60}}


def _masked_random(env: PDProvisionEnv, rng: np.random.Generator) -> np.ndarray | int:
    """A uniformly random valid action of the env's mode (per-dimension masks)."""
    m = env.action_masks()
    space = env.action_space
    if isinstance(space, gym.spaces.Discrete):
        return int(rng.choice(np.flatnonzero(m)))
    out, i = [], 0
    for n in space.nvec:
        out.append(int(rng.choice(np.flatnonzero(m[i: i + n]))))
        i += n
    return np.array(out)


def _terms(env: PDProvisionEnv, info: dict) -> float:
    """Minus the reward of one step rebuilt from its info KPIs (module docstring's formula)."""
    c = env.config
    obj = {"energy": info["energy_kwh"], "carbon": info["carbon_g"] / 1000.0, "cost": info["cost_usd"]}[c.objective]
    return (c.objective_weight * obj + c.slo_weight * info["slo_violation_pct"] / 100.0
            + c.backlog_weight * info["backlog_frac"]
            + c.cap_weight * info["cap_excess_kwh"] + info["termination_penalty"])


@pytest.mark.parametrize("mode", ACTION_MODES)
def test_both_checkers_every_mode(mode: str) -> None:
    made = gym.make(IDS[mode], config=SHORT, render_mode="ansi")
    gym_check_env(made.unwrapped, skip_render_check=False)
    sb3_checker = pytest.importorskip("stable_baselines3.common.env_checker", reason="needs the rl extra: pip install -e '.[rl]'")
    sb3_checker.check_env(PDProvisionEnv({**SHORT, "action_mode": mode}), warn=True)


@pytest.mark.parametrize("mode", ACTION_MODES)
def test_deterministic_every_mode(mode: str) -> None:
    def roll(seed: int) -> tuple[list, list]:
        e = gym.make(IDS[mode], config={"scenario": {"horizon_steps": 120}}).unwrapped
        obs, _ = e.reset(seed=seed)
        rng = np.random.default_rng(5)
        obs_l, rew = [obs], []
        for _ in range(120):
            obs, r, term, trunc, _ = e.step(_masked_random(e, rng))
            obs_l.append(obs)
            rew.append(r)
            if term or trunc:
                break
        return obs_l, rew

    a, b, c = roll(11), roll(11), roll(12)
    assert all(np.array_equal(x, y) for x, y in zip(a[0], b[0], strict=True)) and a[1] == b[1]
    assert not np.array_equal(np.array(a[0][:5]), np.array(c[0][:5]))


def test_residual_zero_reproduces_min_power_lookahead_exactly() -> None:
    """Action [L, L] every period equals MinPowerPareto(lookahead=1) on the absolute driver, step by step."""
    ref = run_policy(PDProvisionEnv(), MinPowerPareto(lookahead=1), seed=4)
    e = PDProvisionEnv({"action_mode": "residual"})
    _, info = e.reset(seed=4)
    lv = e.config.residual_levels
    total, rows = 0.0, []
    while True:
        _, r, term, trunc, info = e.step(np.array([lv, lv]))
        total += r
        rows.append(info)
        assert not info["action_adjusted"]
        if term or trunc:
            break
    assert len(rows) == ref.steps == 1440
    for key in ("n_p", "n_d", "power_w", "backlog", "slo_violation_pct"):
        assert np.array_equal(np.array([i[key] for i in rows], dtype=float), ref.series[key]), key
    assert total == ref.reward
    assert sum(i["energy_kwh"] for i in rows) == ref.energy_kwh


def test_residual_zero_in_request_mode_follows_the_reference() -> None:
    cfg = {"mode": "request", "scenario": {"horizon_steps": 3, "peak_rate_rps": 3.0}}
    ref = run_policy(PDProvisionEnv(cfg), MinPowerPareto(lookahead=1), seed=2)
    e = PDProvisionEnv({**cfg, "action_mode": "residual"})
    e.reset(seed=2)
    lv = e.config.residual_levels
    infos = [e.step(np.array([lv, lv]))[-1] for _ in range(3)]
    for key in ("power_w", "n_p", "n_d", "backlog"):
        assert np.array_equal(np.array([i[key] for i in infos], dtype=float), ref.series[key]), key


def test_residual_changes_and_masks() -> None:
    e = PDProvisionEnv({**SHORT, "action_mode": "residual", "residual_levels": 2})
    _, info = e.reset(seed=0)
    rp, rd = info["reference_p"], info["reference_d"]
    m = e.action_masks()
    assert m.shape == (10,) and m[2] and m[7]  # change 0 is always valid
    for i_p in np.flatnonzero(m[:5]):
        assert 1 <= rp + i_p - 2 <= 12
    _, _, _, _, info = e.step(np.array([3, 1]))
    assert (info["target_p"], info["target_d"]) == (rp + 1, rd - 1) or info["action_adjusted"]
    with pytest.raises(ActionError, match=r"allowed: \[i_P, i_D\] integers in \[0, 4\]"):
        e.step(np.array([5, 2]))


def test_residual_clips_and_flags_outside_the_pool() -> None:
    e = PDProvisionEnv({**SHORT, "action_mode": "residual", "initial_deployment": (1, 1),
                        "scenario": {"horizon_steps": 60, "peak_rate_rps": 0.5}})
    _, info = e.reset(seed=0)
    assert info["reference_p"] == 1 and info["reference_d"] == 1  # a tiny load: 1p1d
    assert not e.action_masks()[0]  # change -2 would leave the pool empty
    _, _, _, _, info = e.step(np.array([0, 0]))
    assert info["action_adjusted"] and (info["target_p"], info["target_d"]) == (1, 1)


@pytest.mark.parametrize("cfg", [{**SHORT}, {**SHORT, "action_mode": "residual", "residual_levels": 3, "gpu_budget": 7},
                                 {**SHORT, "action_mode": "residual", "gpu_budget": 6}])
def test_action_masks_given_is_exactly_the_pairs_applied_as_sent(cfg: dict) -> None:
    """The autoregressive mask allows (n_P, then n_D) exactly the pairs the env decodes unadjusted, in every
    state visited; the per-dimension masks allow more (the GPU budget binds the pair), so the check can fail."""
    e = PDProvisionEnv(cfg)
    e.reset(seed=5)
    nvec = e.action_space.nvec
    rng = np.random.default_rng(5)
    looser = 0
    for _ in range(12):
        as_sent = np.array([[not e.action_type.decode(e.state, np.array([i, j]))[2] for j in range(nvec[1])]
                            for i in range(nvec[0])])
        first = e.action_masks_given()
        np.testing.assert_array_equal(first, as_sent.any(axis=1))
        for i in range(nvec[0]):
            np.testing.assert_array_equal(e.action_masks_given([i]), as_sent[i])
        m = e.action_masks()
        looser += int((np.outer(m[:nvec[0]], m[nvec[0]:]) & ~as_sent).sum())
        e.step(_masked_random(e, rng))
    assert looser > 0  # per-dimension masks did allow adjusted pairs in these states
    with pytest.raises(ConfigError, match=r"allowed: \[\] or \[i_P\]"):
        e.action_masks_given([0, 0])


def test_episode_adjusted_actions_counts_the_adjusted_steps() -> None:
    """info["episode_adjusted_actions"] is the episode's running count of info["action_adjusted"] (per-dimension
    sampling on PDProvision-v0 sends over-budget pairs); a reset starts it again."""
    e = PDProvisionEnv(SHORT)
    rng = np.random.default_rng(0)
    for seed in (0, 1):
        e.reset(seed=seed)
        flags = []
        while True:
            _, _, term, trunc, info = e.step(_masked_random(e, rng))
            flags.append(info["action_adjusted"])
            assert info["episode_adjusted_actions"] == sum(flags)
            if term or trunc:
                break
        assert sum(flags) > 0


def test_front_actions_are_front_points() -> None:
    e = PDProvisionEnv({**SHORT, "action_mode": "front"})
    _, info = e.reset(seed=1)
    assert isinstance(e.action_space, gym.spaces.Discrete) and e.action_space.n == e.front_slots
    cache = e.reference.mix_cache(e.mix_index())
    front = cache.front
    m = e.action_masks()
    assert m.sum() == front.size and m[: front.size].all()
    mus = cache.grid.mu[front]
    assert np.all(np.diff(mus) > 0)  # capacity ascending
    _, _, _, _, info = e.step(front.size - 1)
    row = front[-1]
    assert (info["target_p"], info["target_d"]) == (cache.grid.n_p[row], cache.grid.n_d[row])
    assert not info["action_adjusted"]
    if front.size < e.front_slots:
        _, _, _, _, info = e.step(e.front_slots - 1)
        assert info["action_adjusted"]
    with pytest.raises(ActionError, match="front"):
        e.step(e.front_slots)


def test_observation_carries_what_the_baselines_read() -> None:
    e = PDProvisionEnv({**SHORT, "action_mode": "residual"})
    obs, info = e.reset(seed=3)
    assert obs.shape == (len(OBS_FIELDS),) == (37,)
    f = {name: i for i, name in enumerate(OBS_FIELDS)}
    assert obs[f["ref_n_p / max_prefill"]] == pytest.approx(info["reference_p"] / 12)
    assert obs[f["ref_n_d / max_decode"]] == pytest.approx(info["reference_d"] / 8)
    assert obs[f["capacity_suggested / peak"]] == pytest.approx(info["reference_capacity_rps"] / 14.0, rel=1e-6)
    _, _, _, _, info = e.step(np.array([2, 2]))
    obs = e._obs()
    assert obs[f["prefill_util_last"]] == pytest.approx(info["prefill_util"], rel=1e-6)
    assert obs[f["decode_util_last"]] == pytest.approx(info["decode_util"], rel=1e-6)
    assert obs[f["backlog / backlog_limit"]] == pytest.approx(info["backlog"] / e.backlog_limit, abs=1e-7)
    assert obs[f["capacity_active / rate_last"]] == pytest.approx(
        min(info["capacity_rps"] / info["rate_rps"], 10.0), rel=1e-6)
    assert obs[f["steps_left / episode_steps"]] == pytest.approx(59 / 60)


def test_backlog_terminates_with_the_stated_penalty() -> None:
    # no split: the configured day's load at hour 0 overloads 1p1d
    e = PDProvisionEnv({"initial_deployment": (1, 1), "arrivals": "mean", "backlog_limit_s": 60.0,
                        "scenario": {"horizon_steps": 120}, "split": None})
    e.reset(seed=0)
    bound = e.per_step_reward_bound()
    total = terms = 0.0
    steps = 0
    while True:
        _, r, term, trunc, info = e.step(np.array([1, 1]))
        steps += 1
        total += r
        terms += _terms(e, info)
        assert info["backlog_frac"] == pytest.approx(min(info["backlog"] / (60.0 * 14.0), 1.0))
        if term:
            break
        assert not trunc and info["termination_penalty"] == 0.0 and -bound <= r <= 0.0
    assert term and not trunc and info["backlog"] > 60.0 * 14.0
    assert info["termination_penalty"] == pytest.approx((120 - steps) * bound)
    assert total == pytest.approx(-terms, rel=1e-12)
    with pytest.raises(ActionError, match="reset"):
        e.step(np.array([1, 1]))
    e2 = PDProvisionEnv(dataclasses.replace(e.config, termination_penalty=50.0))
    e2.reset(seed=0)
    for _ in range(steps):
        *_, info = e2.step(np.array([1, 1]))
    assert info["termination_penalty"] == 50.0


def test_penalty_grows_with_the_backlog_after_violations_saturate() -> None:
    e = PDProvisionEnv({"initial_deployment": (1, 1), "arrivals": "mean", "slo_weight": 2.0, "backlog_weight": 2.0,
                        "objective_weight": 0.0, "cap_weight": 0.0, "scenario": {"horizon_steps": 120},
                        "split": None})  # the configured day (overloads 1p1d from hour 0)
    e.reset(seed=0)
    rewards, viol = [], []
    for _ in range(12):
        _, r, term, _, info = e.step(np.array([1, 1]))
        rewards.append(r)
        viol.append(info["slo_violation_pct"])
        assert not term
    sat = [i for i, v in enumerate(viol) if v == 100.0]
    assert len(sat) >= 3
    assert np.all(np.diff(np.array(rewards)[sat]) < 0)  # all arrivals miss, yet the penalty keeps growing


@settings(max_examples=30, deadline=None)
@given(mode=st.sampled_from(ACTION_MODES), objective=st.sampled_from(["energy", "carbon", "cost"]),
       seed=st.integers(0, 10_000), weights=st.tuples(*[st.floats(0.0, 50.0)] * 4),
       limit_s=st.sampled_from([5.0, 60.0, 300.0]), budget=st.integers(2, 24))
def test_return_equals_kpis_and_rewards_bounded(mode: str, objective: str, seed: int,
                                                 weights: tuple[float, ...], limit_s: float, budget: int) -> None:
    w_obj, w_slo, w_b, w_cap = weights
    e = PDProvisionEnv({"action_mode": mode, "objective": objective, "objective_weight": w_obj, "slo_weight": w_slo,
                        "backlog_weight": w_b, "cap_weight": w_cap, "backlog_limit_s": limit_s,
                        "gpu_budget": budget, "scenario": {"horizon_steps": 40}})
    e.reset(seed=seed)
    bound = e.per_step_reward_bound()
    rng = np.random.default_rng(seed)
    total = terms = 0.0
    for k in range(40):
        _, r, term, trunc, info = e.step(_masked_random(e, rng))
        total += r
        terms += _terms(e, info)
        if term:
            assert -bound * (1 + 40 - (k + 1)) - 1e-9 <= r <= 0.0
            break
        assert -bound - 1e-9 <= r <= 0.0
        if trunc:
            break
    assert total == pytest.approx(-terms, rel=1e-12, abs=1e-12)


def test_curriculum_stages_and_random_start() -> None:
    cfg = {"curriculum": [[60, 2], [240, 1], [1440, 0]], "random_start": True}
    e = PDProvisionEnv(cfg)
    lengths, starts = [], []
    for ep in range(5):
        _, info = e.reset(seed=ep)
        lengths.append(info["episode_steps"])
        starts.append(info["start_step"])
        n = 0
        while True:
            *_, term, trunc, info = e.step(np.array([info["reference_p"], info["reference_d"]]))
            n += 1
            if term or trunc:
                break
        assert n == lengths[-1] and trunc
    assert lengths == [60, 60, 240, 1440, 1440]
    assert starts[3] == starts[4] == 0 and len(set(starts[:3])) == 3
    # the same seed and stage give the same episode; a pinned stage ignores the count
    a = PDProvisionEnv(cfg).reset(seed=9, options={"curriculum_stage": 1})
    b = PDProvisionEnv(cfg).reset(seed=9, options={"curriculum_stage": 1})
    assert np.array_equal(a[0], b[0]) and a[1]["start_step"] == b[1]["start_step"]
    # the local clock: the split's drawn start hour plus the curriculum's start step
    hour = (a[1]["start_step"] / 60 + a[1]["scenario"]["start_hour"]) % 24
    assert a[1]["episode_steps"] == 240 and a[1]["hour"] == pytest.approx(hour)
    with pytest.raises(ConfigError, match="curriculum_stage"):
        e.reset(seed=0, options={"curriculum_stage": 3})
    # without a curriculum the full-length episode and its draws are unchanged
    x, y = PDProvisionEnv(), PDProvisionEnv({"curriculum": [[1440, 0]], "random_start": True})
    assert np.array_equal(x.reset(seed=3)[0], y.reset(seed=3)[0])
    # without random_start a short episode starts at the scenario's first period
    z = PDProvisionEnv({"curriculum": [[60, 0]]})
    assert {z.reset(seed=s)[1]["start_step"] for s in range(4)} == {0}
    # a stage longer than the scenario plays the whole scenario
    w = PDProvisionEnv({"curriculum": [[240, 0]], "random_start": True, "scenario": {"horizon_steps": 90}})
    assert w.reset(seed=0)[1]["episode_steps"] == 90


def test_training_normalizes_with_the_algorithms_gamma(tmp_path, monkeypatch) -> None:
    """The trainer wraps pd training envs in VecNormalize (observations and rewards) with the algorithm's
    gamma, and the shipped curriculum reaches the training envs only."""
    pytest.importorskip("sb3_contrib", reason="needs the rl extra: pip install -e '.[rl]'")
    import stable_baselines3.common.vec_env as vec_env
    from servegym.agents.train import TrainConfig, train

    seen: dict = {}
    real = vec_env.VecNormalize

    class Spy(real):  # type: ignore[misc, valid-type]
        def __init__(self, venv, **kw):
            seen.update(kw, curricula=venv.get_attr("config"))
            super().__init__(venv, **kw)

    monkeypatch.setattr(vec_env, "VecNormalize", Spy)
    hp = tmp_path / "hp.yml"
    hp.write_text("maskable-ppo:\n  n_envs: 2\n  n_steps: 32\n  batch_size: 32\n  n_epochs: 1\n  gamma: 0.95\n"
                  "  normalize: true\n  train_env_kwargs: {config: {curriculum: [[30, 1], [60, 0]]}}\n")
    res = train(TrainConfig(env_id=IDS["residual"], algo="maskable-ppo", timesteps=64, hyperparams=str(hp),
                            env_kwargs={"config": {"scenario": {"horizon_steps": 60}}}, tb=None, eval_freq=0,
                            eval_episodes=1, baselines="none", checkpoint_freq=0, progress=False,
                            out=str(tmp_path / "m.zip")))
    assert seen["gamma"] == 0.95 and seen["norm_obs"] and seen["norm_reward"]
    assert all(c.curriculum == ((30, 1), (60, 0)) for c in seen["curricula"])
    import json

    run = json.loads(res.run_file.read_text())
    assert "curriculum" not in run["env_kwargs"]["config"]  # evaluation envs play env_kwargs as they are


@pytest.mark.parametrize("overrides, field", [
    ({"action_mode": "delta"}, "action_mode"), ({"residual_levels": 0}, "residual_levels"),
    ({"residual_levels": 1.5}, "residual_levels"), ({"front_eps": 0.0}, "front_eps"),
    ({"backlog_limit_s": 0.0}, "backlog_limit_s"), ({"termination_penalty": -1.0}, "termination_penalty"),
    ({"backlog_weight": -1.0}, "backlog_weight"), ({"curriculum": [[60]]}, "curriculum"),
    ({"curriculum": [[0, 5]]}, "episode_steps"), ({"curriculum": [[60, -1]]}, "episodes"),
    ({"curriculum": 5}, "curriculum"), ({"curriculum": "x"}, r"curriculum = 'x'"),
    ({"curriculum": [60, 5]}, r"curriculum = \[60, 5\]"), ({"slo_weight": 1e7}, "slo_weight"),
])
def test_bad_mode_configs_name_the_field(overrides: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        PDProvisionEnv(overrides)


def test_registered_ids_and_mode_conflict() -> None:
    for mode, env_id in IDS.items():
        e = gym.make(env_id, config=SHORT)
        assert e.unwrapped.action_mode == mode
    e = gym.make(IDS["residual"], config={"action_mode": "residual", **SHORT})
    assert e.unwrapped.action_mode == "residual"
    with pytest.raises(ConfigError, match="action_mode"):
        gym.make(IDS["residual"], config={"action_mode": "front"})


def test_family_baselines_on_mode_ids_match_the_absolute_env() -> None:
    from servegym.agents.families import family_for

    fam = family_for(IDS["residual"])
    assert fam.name == "pd" and set(IDS.values()) <= set(fam.env_ids)
    kw = {"config": {"scenario": {"horizon_steps": 90}}}
    a = fam.run_baseline(gym.make(IDS["residual"], **kw), "min-power+lookahead", 3)
    b = fam.run_baseline(gym.make(IDS["absolute"], **kw), "min-power+lookahead", 3)
    assert a.reward == b.reward and a.metrics == b.metrics and a.length == 90
    env = gym.make(IDS["front"], config={"curriculum": [[60, 1], [120, 0]]})
    twin = env.unwrapped.absolute_twin()
    assert twin is env.unwrapped.absolute_twin() and twin.action_mode == "absolute"
    lengths = [fam.run_baseline(env, "static-peak", s).length for s in (1, 2)]
    assert lengths == [60, 120]  # the twin's curriculum count advances as the absolute env's would


def test_shipped_pd_hyperparams_give_200_updates_and_matched_normalization() -> None:
    from servegym.agents.hparams import load_hyperparams, merge_kwargs

    for env_id in IDS.values():
        for algo in ("maskable-ppo", "ppo"):
            hp = load_hyperparams(env_id, algo)
            per_update = hp.n_envs * int(hp.algo_kwargs["n_steps"])
            assert hp.n_timesteps // per_update >= 200, (env_id, algo)
            assert per_update * 200 <= 51_200  # a quick budget of 51,200 steps already gives 200 updates
            assert hp.normalize == {}  # VecNormalize on observations and rewards (gamma from algo_kwargs)
            assert "gamma" in hp.algo_kwargs
    hp = load_hyperparams(IDS["residual"], "maskable-ppo")
    kw = merge_kwargs(hp.train_env_kwargs, {"config": {"objective": "carbon"}})
    assert kw["config"]["objective"] == "carbon" and kw["config"]["curriculum"][0] == [60, 50]
    assert kw["config"]["random_start"] is True
    mine = merge_kwargs(hp.train_env_kwargs, {"config": {"curriculum": [[30, 1]]}})
    assert mine["config"]["curriculum"] == [[30, 1]]  # the user's env kwargs win over the file's extras
    PDProvisionEnv(kw["config"])  # the shipped curriculum is a valid config


def test_static_peak_plans_the_episode_it_plays() -> None:
    """A curriculum episode starting later in the day: static peak covers each of the episode's periods under
    that period's own mix (the mix swings from all azure-code at 0 h to all Mooncake at 12 h)."""
    from servegym.baselines.pd import StaticPeak

    e = PDProvisionEnv({"curriculum": [[120, 0]], "random_start": True, "split": None,  # a configured mix
                        "scenario": {"mix_knots": [(0.0, 1, 0, 0), (12.0, 0, 0, 1)], "peak_rate_rps": 3.0}})
    for seed in range(6):
        _, info = e.reset(seed=seed)
        pol = StaticPeak()
        pol.reset(e, info)
        k0 = info["start_step"]
        rates = e.forecast_rates(10_000)
        assert rates.size == 120
        n_p, n_d = pol.deployment
        assert np.all(e.tables.mu[e.signals.mix_index[k0: k0 + 120], n_p, n_d] >= rates / pol.rho_bar)
