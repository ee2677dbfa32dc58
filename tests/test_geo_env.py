"""The geo routing environments: thin drivers of the simulator, deterministic, clear errors."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.envs.geo.env_common import GeoEnvConfig
from servegym.envs.geo.env_route import GeoRouteEnv, route_observation_names
from servegym.envs.geo.env_window import GeoRouteWindowEnv, assign_within_caps
from servegym.envs.geo.sim.cluster import GeoSimulation

import servegym  # noqa: F401  (registers the ids)
from servegym.errors import ActionError, ConfigError

#: Short runs: the mini preset (3 DCs, 1 region) or small (4 DCs, 2 regions), a few seconds long.
MINI = {"preset": "mini", "geo": {"duration_s": 4.0}}
SMALL = {"preset": "small", "load": "high", "geo": {"duration_s": 3.0}}


def _rule(request_id: int, n_dcs: int) -> int:
    """A fixed, request-dependent placement rule (not a policy anyone would use)."""
    return (request_id * 7 + request_id // 3) % n_dcs


@pytest.mark.parametrize("cfg", [MINI, SMALL])
def test_route_env_is_the_simulator_loop(cfg: dict) -> None:
    """Same placements through the env and through next_decision/apply one by one: identical run,
    identical masks (the estimator's), and the episode's reward sum is -(carbon + w_slo x misses)."""
    env = GeoRouteEnv(config={**cfg, "w_slo": 0.5})
    env.reset(seed=11)
    sim = GeoSimulation(env.episode_config, seed=env.scenario["sim_seed"])  # the split's draw
    total, steps, info = 0.0, 0, {}
    while True:
        ctx = sim.next_decision()
        assert ctx is not None
        rid = int(ctx.request_id[0])
        np.testing.assert_array_equal(env.action_masks(), ctx.action_mask()[0])
        a = _rule(rid, env.n_dcs)
        sim.apply(ctx, a)
        _, r, terminated, truncated, info = env.step(a)
        total += r
        steps += 1
        assert not terminated
        if truncated:
            break
    assert sim.next_decision() is None
    assert steps == sim.n_requests
    mine, theirs = info["episode_metrics"], sim.metrics(policy="agent").summary
    for key in ("carbon_g", "carbon_with_drain_g", "slo_violation_pct", "ttft_p99_s", "finished", "arrived"):
        assert mine[key] == theirs[key], key
    assert info["carbon_g"] == pytest.approx(sim.carbon_g)
    assert info["slo_violations"] == sim.n_finished_violations
    assert total == pytest.approx(-(sim.carbon_g + 0.5 * sim.n_finished_violations), rel=1e-9)


def test_route_observation_layout_and_bounds() -> None:
    env = GeoRouteEnv(config=SMALL)
    obs, info = env.reset(seed=2)
    d, r = env.n_dcs, env.n_regions
    names = env.observation_names
    assert len(names) == env.observation_space.shape[0] == 14 * d + r + 7 == len(route_observation_names(d, r))
    assert {"carbon_g", "finished", "slo_violation_pct", "ttft_p99_s", "sim_time_s"} <= set(info)
    idx = {n: i for i, n in enumerate(names)}
    rng = np.random.default_rng(0)
    seen_origins = set()
    for _ in range(600):
        assert env.observation_space.contains(obs)
        mask = env.action_masks()
        feas = np.array([obs[idx[f"feasible[{k}]"]] for k in range(d)]) > 0.5
        # the mask is the feasible set, or everything when nothing is feasible
        np.testing.assert_array_equal(mask, feas if feas.any() else np.ones(d, bool))
        origin = [k for k in range(r) if obs[idx[f"origin[{k}]"]] == 1.0]
        assert len(origin) == 1
        seen_origins.add(origin[0])
        assert 0.0 < obs[idx["log_isl"]] <= 1.0
        obs, _, _, truncated, info = env.step(int(rng.choice(np.flatnonzero(mask))))
        if truncated:
            break
    assert seen_origins == set(range(r))


def test_route_own_dispatch_feature_counts_placements() -> None:
    """Within a poll interval the scheduler's own dispatches show up step by step."""
    env = GeoRouteEnv(config={**MINI, "geo": {"duration_s": 4.0, "poll_interval_s": 2.0}})
    obs, _ = env.reset(seed=0)
    col = env.observation_names.index("own_dispatched[1]")
    for _ in range(5):
        obs, *_ = env.step(1)
    e = env.sim.engines_per_dc
    assert obs[col] == pytest.approx((5 / e) / (1 + 5 / e), rel=1e-6)


def _trajectory(env: gym.Env, seed: int, n: int) -> tuple[list, list, list]:
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    rng = np.random.default_rng(seed)
    observations, rewards, infos = [obs.copy()], [], []
    for _ in range(n):
        if isinstance(env.action_space, gym.spaces.Discrete):
            a = int(rng.choice(np.flatnonzero(env.unwrapped.action_masks())))
        else:
            a = env.action_space.sample()
        obs, r, _, truncated, info = env.step(a)
        observations.append(obs.copy())
        rewards.append(r)
        infos.append({k: v for k, v in info.items() if k != "episode_metrics"})
        if truncated:
            break
    return observations, rewards, infos


@pytest.mark.parametrize("env_id", ["servegym/GeoRoute-v0", "servegym/GeoRouteWindow-v0"])
def test_envs_are_deterministic(env_id: str) -> None:
    n = 700 if "Window" not in env_id else 40
    a = _trajectory(gym.make(env_id, config=MINI), 5, n)
    b = _trajectory(gym.make(env_id, config=MINI), 5, n)
    assert len(a[0]) == len(b[0])
    for x, y in zip(a[0], b[0], strict=True):
        np.testing.assert_array_equal(x, y)
    assert a[1] == b[1]
    assert a[2] == b[2]
    assert any(r != 0.0 for r in a[1])  # carbon accrued at some poll
    c = _trajectory(gym.make(env_id, config=MINI), 6, n)
    assert not all(np.array_equal(x, y) for x, y in zip(a[0], c[0], strict=False))


def test_unseeded_resets_differ_but_follow_the_first_seed() -> None:
    env = GeoRouteEnv(config=MINI)
    o1, _ = env.reset(seed=3)
    o2, _ = env.reset()
    assert not np.array_equal(o1, o2)
    env2 = GeoRouteEnv(config=MINI)
    env2.reset(seed=3)
    o3, _ = env2.reset()
    np.testing.assert_array_equal(o2, o3)
    assert env.sim.seed != 3


def test_max_steps_truncates() -> None:
    env = GeoRouteEnv(config={**MINI, "max_steps": 25})
    env.reset(seed=0)
    for k in range(25):
        _, _, terminated, truncated, info = env.step(0)
        assert not terminated
        assert truncated == (k == 24)
    assert info["steps"] == 25
    with pytest.raises(ActionError, match="reset"):
        env.step(0)


@pytest.mark.parametrize("bad", [3, -1, 1.0, True, np.array([0, 1]), np.array(0.5), "1", None])
def test_route_bad_actions_raise_and_change_nothing(bad: object) -> None:
    env, twin = GeoRouteEnv(config=MINI), GeoRouteEnv(config=MINI)
    env.reset(seed=1)
    twin.reset(seed=1)
    env.step(2)
    twin.step(2)
    with pytest.raises(ActionError, match=r"allowed: an integer in \[0, 2\]"):
        env.step(bad)
    for a in (np.int64(1), np.array(0), np.array([2]), 1):
        o1, r1, _, _, i1 = env.step(a)
        o2, r2, _, _, i2 = twin.step(int(np.asarray(a).reshape(-1)[0]))
        np.testing.assert_array_equal(o1, o2)
        assert (r1, i1) == (r2, i2)


@pytest.mark.parametrize("bad", [np.zeros(2), np.zeros((3, 1)), np.array([0.0, np.nan, 0.0]),
                                 np.array([0.0, 1.5, 0.0]), np.array([-1.01, 0.0, 0.0]), "x"])
def test_window_bad_actions_raise_and_change_nothing(bad: object) -> None:
    env, twin = GeoRouteWindowEnv(config=MINI), GeoRouteWindowEnv(config=MINI)
    env.reset(seed=1)
    twin.reset(seed=1)
    with pytest.raises(ActionError, match="allowed"):
        env.step(bad)
    a = np.array([0.2, -0.4, 1.0], dtype=np.float32)
    o1, r1, _, _, i1 = env.step(a)
    o2, r2, _, _, i2 = twin.step(a)
    np.testing.assert_array_equal(o1, o2)
    assert (r1, i1) == (r2, i2)


@pytest.mark.parametrize(("overrides", "match"), [
    ({"nope": 1}, "'nope'"),  # config key: 'unknown config key'; keyword: Python's TypeError wording
    ({"w_slo": -1.0}, "w_slo"),
    ({"w_carbon": float("nan")}, "w_carbon"),
    ({"w_slo": math.inf}, "w_slo"),
    ({"w_slo": "big"}, "w_slo"),
    ({"preset": "huge"}, "preset"),
    ({"load": "extreme"}, "load"),
    ({"model": "gpt"}, "model"),
    ({"max_steps": 0}, "max_steps"),
    ({"geo": {"rate_rps": -5.0}}, "rate_rps"),
    ({"geo": {"bogus": 1}}, "unknown GeoConfig fields"),
    ({"geo": {"decision_mode": "window"}}, "decision_mode"),
    ({"geo": {"seed": 4}}, "seed"),
    ({"geo": {"osl_mode": "sampled"}}, "osl_mode"),
    ({"geo": [1, 2]}, "geo"),
])
def test_bad_configs_raise_config_error(overrides: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        GeoRouteEnv(config=overrides)
    with pytest.raises(ConfigError, match=match):
        gym.make("servegym/GeoRouteWindow-v0", **overrides)


def test_config_overrides_and_defaults() -> None:
    defaults = GeoEnvConfig.default_config()
    assert defaults["preset"] == "small" and defaults["w_carbon"] == 1.0
    env = gym.make("servegym/GeoRoute-v0", config={"preset": "mini"}, w_slo=3.0)
    cfg = env.unwrapped.config
    assert (cfg.preset, cfg.w_slo) == ("mini", 3.0)
    with pytest.raises(ConfigError, match="render_mode"):
        GeoRouteEnv(render_mode="human")
    assert GeoRouteEnv(config=GeoEnvConfig(preset="mini")).config.preset == "mini"


def test_oracle_mode_is_named_in_info() -> None:
    env = GeoRouteEnv(config={"preset": "mini", "geo": {"duration_s": 2.0, "osl_mode": "oracle"}})
    _, info = env.reset(seed=0)
    assert info["osl_mode"] == "oracle"


def test_render_modes() -> None:
    env = GeoRouteEnv(config=SMALL, render_mode="ansi")
    env.reset(seed=0)
    line = env.render()
    assert isinstance(line, str) and "\n" not in line and "CI" in line
    env = GeoRouteWindowEnv(config=SMALL, render_mode="rgb_array")
    env.reset(seed=0)
    img = env.render()
    assert img.dtype == np.uint8 and img.shape == (96, 32 * env.n_dcs, 3)
    assert (img != 255).any()


def test_window_env_is_the_simulator_loop() -> None:
    """The window env's placements, replayed through GeoSimulation in window mode, give the same run."""
    env = GeoRouteWindowEnv(config={**SMALL, "w_slo": 2.0})
    env.reset(seed=4)
    sim = GeoSimulation(env.episode_config, seed=env.scenario["sim_seed"])  # the split's draw
    rng = np.random.default_rng(0)
    total = 0.0
    while True:
        a = rng.uniform(-1, 1, env.n_dcs)
        dc = env.placements(a)
        ctx = sim.next_decision()
        assert ctx is not None and ctx.n_requests == dc.size
        assert np.all(ctx.action_mask()[np.arange(dc.size), dc])  # always a candidate DC
        sim.apply(ctx, dc)
        _, r, _, truncated, info = env.step(a)
        total += r
        if truncated:
            break
    assert sim.next_decision() is None
    assert info["episode_metrics"]["carbon_g"] == sim.metrics().summary["carbon_g"]
    assert total == pytest.approx(-(sim.carbon_g + 2.0 * sim.n_finished_violations), rel=1e-9)


def test_window_shares_limit_admission() -> None:
    env = GeoRouteWindowEnv(config=SMALL)
    env.reset(seed=0)
    ctx = env.state.ctx
    est = ctx.estimates
    zero = env.placements(-np.ones(env.n_dcs))
    # all shares 0: every request overflows to its lowest-carbon candidate (the MOER choice)
    np.testing.assert_array_equal(zero, np.argmin(np.where(est.mask, est.carbon_g, np.inf), axis=1))
    only = np.full(env.n_dcs, -1.0)
    only[2] = 1.0
    cap = np.floor(env.state.own_headroom()).astype(int)
    placed = env.placements(only)
    assert np.count_nonzero(placed == 2) >= min(cap[2], int(est.mask[:, 2].sum()))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), d=st.integers(1, 6), seed=st.integers(0, 10_000))
def test_assign_within_caps_invariants(n: int, d: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    carbon = rng.uniform(0.1, 1.0, (n, d))
    cand = rng.random((n, d)) < 0.6
    cand[~cand.any(axis=1), rng.integers(0, d)] = True
    cap = rng.integers(0, n // 2 + 2, d)
    dc, overflow = assign_within_caps(carbon, cand, cap)
    assert dc.shape == (n,)
    assert np.all(cand[np.arange(n), dc])
    counts = np.bincount(dc, minlength=d)
    assert np.sum(np.maximum(counts - cap, 0)) <= overflow
    if overflow:
        # overflow only happens when some request had no candidate with capacity left
        assert overflow <= n
    else:
        assert np.all(counts <= cap)
    # unlimited capacity: everyone gets its lowest-carbon candidate
    free, none = assign_within_caps(carbon, cand, np.full(d, n))
    assert none == 0
    np.testing.assert_array_equal(free, np.argmin(np.where(cand, carbon, np.inf), axis=1))


def test_maskable_ppo_trains_on_georoute() -> None:
    """sb3-contrib's MaskablePPO runs a few hundred steps on the env with its masks."""
    import torch
    from sb3_contrib import MaskablePPO

    torch.set_num_threads(1)
    env = gym.make("servegym/GeoRoute-v0", config={"preset": "mini", "geo": {"duration_s": 1.5}})
    model = MaskablePPO("MlpPolicy", env, n_steps=128, batch_size=64, n_epochs=2, seed=0, device="cpu",
                        policy_kwargs={"net_arch": [32, 32]})
    model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256
    obs, _ = env.reset(seed=0)
    mask = env.unwrapped.action_masks()
    action, _ = model.predict(obs, action_masks=mask, deterministic=True)
    assert mask[int(action)]


def _episode(env: gym.Env, act, seed: int) -> tuple[float, list[float], dict]:
    env.reset(seed=seed)
    rewards, info = [], {}
    while True:
        _, r, terminated, truncated, info = env.step(act(env))
        assert not terminated
        rewards.append(r)
        if truncated:
            return math.fsum(rewards), rewards, info


def _measured_return(env: gym.Env, info: dict) -> float:
    """-(w_carbon x gCO2 + w_slo x every miss) as the run's episode_metrics count them."""
    m = info["episode_metrics"]
    cfg = env.unwrapped.config
    misses = m["slo_violation_pct"] / 100.0 * (m["finished"] + m["unfinished"])
    return -(cfg.w_carbon * m["carbon_with_drain_g"] + cfg.w_slo * misses)


#: Everything to DC 0 at high load with a 1 s drain: an overloaded DC and unfinished requests.
OVERLOAD = {"preset": "small", "load": "high", "w_slo": 0.5, "geo": {"duration_s": 3.0, "drain_s": 1.0}}


@pytest.mark.parametrize("reward", ["dense", "poll"])
@pytest.mark.parametrize("env_cls", [GeoRouteEnv, GeoRouteWindowEnv])
@pytest.mark.parametrize("cfg", [MINI, OVERLOAD])
def test_return_is_measured_carbon_and_every_miss(reward: str, env_cls: type, cfg: dict) -> None:
    """The return identity (issue 12 item 1, issue 15 defect 2): the episode return equals
    -(w_carbon x carbon with drain + w_slo x every miss, unfinished requests included), in both
    reward modes, also for a policy that overloads one DC and leaves requests unfinished."""
    env = env_cls(config={**cfg, "reward": reward})
    if env_cls is GeoRouteEnv:
        act = (lambda e: 0) if cfg is OVERLOAD else (lambda e: int(np.flatnonzero(e.action_masks())[-1]))
    else:
        act = (lambda e: np.array([1.0] + [-1.0] * (e.n_dcs - 1))) if cfg is OVERLOAD else (lambda e: np.zeros(e.n_dcs))
    total, rewards, info = _episode(env, act, 7)
    m = info["episode_metrics"]
    if cfg is OVERLOAD:
        assert m["unfinished"] > 100  # the case the old reward got wrong
    assert info["slo_misses"] == env.sim.n_finished_violations + m["unfinished"]
    assert total == pytest.approx(_measured_return(env, info), rel=1e-9, abs=1e-9)
    if reward == "dense":
        assert all(r != 0.0 for r in rewards)  # every decision is credited
    else:
        assert sum(r != 0.0 for r in rewards) < len(rewards)


def test_dense_reward_is_the_estimators_cost_between_polls() -> None:
    """Between polls the dense reward of a decision is -(w_carbon x estimated carbon + w_slo x
    predicted miss) of the chosen DC on the shared estimator."""
    env = GeoRouteEnv(config={**MINI, "w_slo": 2.0, "geo": {"duration_s": 4.0, "poll_interval_s": 2.0}})
    env.reset(seed=1)
    for k in range(20):
        i, est = env.state.i, env.state.ctx.estimates
        a = k % env.n_dcs
        _, r, _, _, _ = env.step(a)
        assert env.state.i == i + 1  # still inside the poll interval: no settlement on this step
        assert r == pytest.approx(-(est.carbon_g[i, a] + 2.0 * (not est.feasible[i, a])), rel=1e-12)


#: Every env and mode combination the identity, determinism and checker tests run on.
MODES = [
    (GeoRouteEnv, {"action_mode": "direct"}),
    (GeoRouteEnv, {"action_mode": "residual", "reference": "milp"}),
    (GeoRouteEnv, {"action_mode": "residual", "reference": "greedy:0.5"}),
    (GeoRouteEnv, {"action_mode": "residual", "reference": "iter-ilp", "decide_at": "window"}),
    (GeoRouteEnv, {"action_mode": "residual", "reference": "iter-ilp+dr:1.5", "decide_at": "window"}),
    (GeoRouteWindowEnv, {"action_mode": "direct"}),
    (GeoRouteWindowEnv, {"action_mode": "residual", "reference": "milp"}),
    (GeoRouteEnv, {"ci_time_scale": 1800.0, "ci_forecast_h": 2, "ci_forecast_noise": 0.2}),
    (GeoRouteWindowEnv, {"action_mode": "residual", "ci_time_scale": 1800.0, "ci_forecast_h": 2}),
    # stale snapshots (a 2 s poll period) with the estimator's residuals observed
    (GeoRouteEnv, {"action_mode": "residual", "observe_residuals": True, "geo": {"duration_s": 4.0,
                                                                                  "poll_interval_s": 2.0}}),
    (GeoRouteWindowEnv, {"observe_residuals": True, "reward": "poll", "geo": {"duration_s": 4.0,
                                                                               "poll_interval_s": 2.0}}),
]


def _random_policy(seed: int):
    rng = np.random.default_rng(seed)

    def act(env):
        if isinstance(env.action_space, gym.spaces.Discrete):
            return int(rng.choice(np.flatnonzero(env.action_masks())))
        return rng.uniform(-1, 1, env.n_dcs).astype(np.float32)

    return act


@pytest.mark.parametrize(("env_cls", "mode"), MODES, ids=lambda x: str(x))
def test_every_mode_identity_determinism_and_checkers(env_cls: type, mode: dict) -> None:
    """Each action mode: the return identity on a real episode with random (masked) actions, the
    same trajectory twice from the same seed, and both env checkers (gymnasium's and SB3's)."""
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    cfg = {**MINI, **mode}
    runs = []
    for _ in range(2):
        env = env_cls(config=cfg)
        total, rewards, info = _episode(env, _random_policy(3), 4)
        assert total == pytest.approx(_measured_return(env, info), rel=1e-9)
        runs.append((rewards, info["episode_metrics"]["carbon_g"]))
    assert runs[0] == runs[1]
    env_id = "servegym/GeoRoute-v0" if env_cls is GeoRouteEnv else "servegym/GeoRouteWindow-v0"
    env = gym.make(env_id, config=cfg).unwrapped  # with a spec: every render mode checked too
    check_env(env)
    sb3_check_env(env, warn=True)


def test_residual_route_follows_greedy_exactly() -> None:
    """Action D (the reference) at every step reproduces the greedy baseline's run: the reference's
    choice is greedy's own decision on the same snapshot and own-dispatch counts."""
    from servegym.baselines.geo import make_policy

    env = GeoRouteEnv(config={**MINI, "action_mode": "residual", "reference": "greedy:0"})
    assert env.action_space.n == env.n_dcs + 1
    obs, _ = env.reset(seed=9)
    names = env.observation_names
    ref_cols = [names.index(f"ref[{d}]") for d in range(env.n_dcs)]
    while True:
        assert obs[ref_cols].sum() == 1.0 and env.action_masks()[-1]
        obs, _, _, truncated, info = env.step(env.n_dcs)
        if truncated:
            break
    sim = GeoSimulation(env.episode_config, seed=env.scenario["sim_seed"])
    theirs = sim.run(make_policy("greedy:0")).summary
    for key in ("carbon_g", "slo_violation_pct", "ttft_p99_s", "finished"):
        assert info["episode_metrics"][key] == theirs[key], key


def test_residual_route_reference_action_is_the_observed_choice() -> None:
    """Taking the reference action equals taking the DC its one-hot shows, also after deviations
    (the MILP plan and greedy replanned from the agent's actual dispatches)."""
    for ref in ("milp", "greedy:0"):
        cfg = {**SMALL, "action_mode": "residual", "reference": ref}
        a_env, b_env = GeoRouteEnv(config=cfg), GeoRouteEnv(config=cfg)
        oa, _ = a_env.reset(seed=2)
        b_env.reset(seed=2)
        cols = [a_env.observation_names.index(f"ref[{d}]") for d in range(a_env.n_dcs)]
        for k in range(400):
            shown = int(np.argmax(oa[cols]))
            if k % 5 == 0:  # deviate now and then
                a, b = (shown + 1) % a_env.n_dcs, (shown + 1) % a_env.n_dcs
            else:
                a, b = a_env.n_dcs, shown
            oa, ra, _, ta, _ = a_env.step(a)
            ob, rb, _, tb, _ = b_env.step(b)
            assert (ra, ta) == (rb, tb)
            np.testing.assert_array_equal(oa[:cols[0]], ob[:cols[0]])
            if ta:
                break


@pytest.mark.parametrize("cfg", [MINI, {**SMALL, "geo": {"duration_s": 4.0}}])
def test_window_residual_action_zero_is_the_milp_exactly(cfg: dict) -> None:
    """GeoRouteWindow-v0 residual, action 0 in every window: the facility MILP's run, exactly."""
    from servegym.baselines.geo import make_policy

    env = GeoRouteWindowEnv(config={**cfg, "action_mode": "residual"})
    assert "ref_cap[0]" in env.observation_names
    info = _episode(env, lambda e: np.zeros(e.n_dcs, dtype=np.float32), 5)[2]
    sim = GeoSimulation(env.episode_config, seed=env.scenario["sim_seed"])
    theirs = sim.run(make_policy("milp")).summary
    mine = info["episode_metrics"]
    for key in ("carbon_g", "carbon_with_drain_g", "slo_violation_pct", "ttft_p99_s", "finished",
                "sched_overhead_ms"):
        assert mine[key] == theirs[key], key
    np.testing.assert_array_equal(env.sim.placed_dc, sim.placed_dc)


@pytest.mark.parametrize(("cfg", "ref"), [(MINI, "iter-ilp"), ({**SMALL, "geo": {"duration_s": 4.0}}, "ilp")])
def test_route_residual_decided_at_windows_is_the_reference_exactly(cfg: dict, ref: str) -> None:
    """GeoRoute-v0 residual with decide_at = "window": the zero action at every request reproduces the
    window scheduler's own run (windows, solve delays, snapshots), and the runner's return equals the env's."""
    from servegym.agents.adapters import run_geo_baseline
    from servegym.baselines.geo import make_policy

    env = GeoRouteEnv(config={**cfg, "action_mode": "residual", "reference": ref, "decide_at": "window"})
    assert env.decision_mode == "request" and env.simulator_mode() == "window"
    total, _, info = _episode(env, lambda e: e.n_dcs, 5)
    sim = GeoSimulation(env.episode_config, seed=env.scenario["sim_seed"])
    theirs = sim.run(make_policy(ref)).summary
    mine = info["episode_metrics"]
    for key in ("carbon_g", "carbon_with_drain_g", "slo_violation_pct", "ttft_p99_s", "finished",
                "sched_overhead_ms"):
        assert mine[key] == theirs[key], key
    np.testing.assert_array_equal(env.sim.placed_dc, sim.placed_dc)
    assert run_geo_baseline(env, ref, 5).reward == pytest.approx(total, rel=1e-9)
    # deciding at arrival (the default) is a different run: no window wait, no solve delay
    arrival = GeoRouteEnv(config={**cfg, "action_mode": "residual", "reference": ref})
    assert _episode(arrival, lambda e: e.n_dcs, 5)[2]["episode_metrics"]["ttft_p99_s"] != mine["ttft_p99_s"]


def test_window_residual_over_admits_a_clean_dc() -> None:
    """Scaling the cleanest DC's capacity up admits more there than the MILP's headroom allows
    (high load: the headroom binds); scaling it down admits less."""
    cfg = {**SMALL, "geo": {"duration_s": 5.0}, "action_mode": "residual"}
    counts = {}
    for name, level in (("zero", 0.0), ("up", 1.0), ("down", -1.0)):
        env = GeoRouteWindowEnv(config=cfg)
        env.reset(seed=0)
        clean = int(np.argmin(env.sim.snapshot.ci_g_per_kwh))
        a = np.zeros(env.n_dcs, dtype=np.float32)
        a[clean] = level
        while not env.step(a)[3]:
            pass
        counts[name] = int(np.count_nonzero(env.sim.placed_dc == clean))
    assert counts["up"] > counts["zero"] > counts["down"]


def test_residual_bad_references() -> None:
    with pytest.raises(ConfigError, match="reference"):
        GeoRouteEnv(config={**MINI, "action_mode": "residual", "reference": "oracle"})
    with pytest.raises(ConfigError, match="window scheduler"):
        GeoRouteWindowEnv(config={**MINI, "action_mode": "residual", "reference": "greedy:0"})
    with pytest.raises(ConfigError, match="action_mode"):
        GeoRouteEnv(config={**MINI, "action_mode": "shares"})
    for bad in ({"decide_at": "window"}, {"action_mode": "residual", "reference": "moer", "decide_at": "window"},
                {"action_mode": "residual", "decide_at": "close"}):
        with pytest.raises(ConfigError, match="decide_at"):
            GeoRouteEnv(config={**MINI, **bad})
    with pytest.raises(ConfigError, match="decide_at"):
        GeoRouteWindowEnv(config={**MINI, "action_mode": "residual", "decide_at": "window"})


#: A compressed grid day: 1800 CI-clock seconds per simulated second (a 4 s run crosses two hours).
GRID = {**MINI, "ci_time_scale": 1800.0, "ci_forecast_h": 3}


@pytest.mark.parametrize("env_cls", [GeoRouteEnv, GeoRouteWindowEnv])
def test_ci_follows_the_hourly_series_within_an_episode(env_cls: type) -> None:
    """The CI every DC sees (and every poll charges) is the real hourly series at the CI clock's
    hour; it changes within the episode; the return identity holds across the changes; the
    noiseless forecast is the next hours of the same series."""
    from servegym.envs.grid import get_topology

    env = env_cls(config=GRID)
    obs, _ = env.reset(seed=0)
    topo = get_topology(env.geo_config.topology)
    start = pd.Timestamp(env.scenario["ci_start"])  # the split's drawn start hour
    names = env.observation_names
    fc = [names.index(f"ci_fc{k}h[{d}]") for k in (1, 2, 3) for d in range(env.n_dcs)]
    seen, total = set(), 0.0
    act = (lambda: 0) if env_cls is GeoRouteEnv else (lambda: np.zeros(env.n_dcs, dtype=np.float32))
    while True:
        snap = env.sim.snapshot
        h = int(snap.time_s * 1800.0 // 3600.0)
        np.testing.assert_array_equal(snap.ci_g_per_kwh, topo.ci(start + pd.Timedelta(hours=h)))
        seen.add(h)
        obs, r, _, truncated, info = env.step(act())
        total += r
        if truncated:
            break
        t = env.sim.now_s
        h = int(t * 1800.0 // 3600.0)
        want = np.concatenate([topo.ci(start + pd.Timedelta(hours=h + k)) for k in (1, 2, 3)]) / 1000.0
        np.testing.assert_allclose(obs[fc], np.minimum(want, 1.0), rtol=1e-6)
    assert len(seen) >= 2
    assert total == pytest.approx(_measured_return(env, info), rel=1e-9)


def test_noisy_forecast_is_seeded_and_unbiased_in_log() -> None:
    env = GeoRouteEnv(config={**GRID, "ci_forecast_noise": 0.3})
    a, _ = env.reset(seed=1)
    b, _ = GeoRouteEnv(config={**GRID, "ci_forecast_noise": 0.3}).reset(seed=1)
    exact, _ = GeoRouteEnv(config=GRID).reset(seed=1)
    cols = [i for i, n in enumerate(env.observation_names) if n.startswith("ci_fc")]
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a[cols], exact[cols])
    clk = env._clock
    errs = np.log(np.concatenate([clk.forecast_at_hour(h) for h in range(400)]) /
                  np.concatenate([GeoRouteEnv(config=GRID)._make_run(env.episode_config, 1)[1].forecast_at_hour(h)
                                  for h in range(400)]))
    assert abs(errs.mean() + 0.5 * 0.09 * 2.0) < 0.05  # E[log] = -sigma^2 k / 2, k = 1..3 (mean 2)


def test_baseline_runs_share_the_envs_grid_clock() -> None:
    """The family's baseline runner plays the env's own scenario (grid clock included): greedy run by
    the runner = the residual env following greedy at every step."""
    from servegym.agents.adapters import run_geo_baseline

    env = GeoRouteEnv(config={**GRID, "action_mode": "residual", "reference": "greedy:0"})
    info = _episode(env, lambda e: e.n_dcs, 3)[2]
    res = run_geo_baseline(env, "greedy:0", 3)
    assert res.metrics["carbon_g"] == info["episode_metrics"]["carbon_g"]
    default = run_geo_baseline(GeoRouteEnv(config={**MINI, "ci_time_scale": 1.0}), "greedy:0", 3)
    assert default.metrics["carbon_g"] != res.metrics["carbon_g"]


def test_predicted_osl_mode_runs_in_the_envs() -> None:
    env = GeoRouteEnv(config={**MINI, "geo": {"duration_s": 2.0, "osl_mode": "predicted"}})
    obs, info = env.reset(seed=0)
    assert info["osl_mode"] == "predicted"
    col = env.observation_names.index("log_osl_est")
    seen = set()
    for _ in range(50):
        seen.add(round(float(obs[col]), 6))
        obs, *_ = env.step(0)
    assert len(seen) > 1  # a per-request prediction, not the workload mean


@pytest.mark.parametrize(("overrides", "match"), [
    ({"ci_time_scale": 0.5}, "ci_time_scale"), ({"ci_time_scale": "fast"}, "ci_time_scale"),
    ({"ci_forecast_h": 25}, "ci_forecast_h"), ({"ci_forecast_h": 1.5}, "ci_forecast_h"),
    ({"ci_forecast_noise": -0.1}, "ci_forecast_noise"), ({"reward": "sparse"}, "reward"),
    ({"geo": {"ci_start": "1990-01-01T00:00Z"}}, "ci_start"),
])
def test_bad_grid_and_mode_configs(overrides: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        GeoRouteEnv(config={**MINI, **overrides})


@pytest.mark.parametrize("env_cls", [GeoRouteEnv, GeoRouteWindowEnv])
def test_residual_features_track_the_estimators_error(env_cls: type) -> None:
    """observe_residuals: per-DC EMA of (realized - predicted) / SLO. Overloading DC 0 makes its
    realized TTFT run past the estimate (a positive residual) while DCs that served nothing stay 0."""
    env = env_cls(config={**OVERLOAD, "observe_residuals": True})
    obs, _ = env.reset(seed=0)
    names = env.observation_names
    cols = {f"{f}[{d}]": names.index(f"{f}[{d}]") for f in ("ttft_resid", "tpot_resid") for d in range(env.n_dcs)}
    assert all(obs[c] == 0.0 for c in cols.values())
    act = (lambda: 0) if env_cls is GeoRouteEnv else (lambda: np.array([1.0] + [-1.0] * (env.n_dcs - 1)))
    peak = 0.0
    while True:
        obs, _, _, truncated, _ = env.step(act())
        assert env.observation_space.contains(obs)
        peak = max(peak, float(obs[cols["ttft_resid[0]"]]))
        if env_cls is GeoRouteEnv:
            assert all(obs[cols[f"ttft_resid[{d}]"]] == 0.0 for d in range(1, env.n_dcs))
        if truncated:
            break
    assert peak > 0.05


@pytest.mark.parametrize("env_cls", [GeoRouteEnv, GeoRouteWindowEnv])
def test_residual_envs_copy_mid_episode(env_cls: type) -> None:
    """Vector-env wrappers (SuperSuit, SB3) copy envs with cloudpickle: a residual env holding a
    MILP (and its HiGHS instance) copies mid-episode and both copies continue identically."""
    import cloudpickle

    env = env_cls(config={**MINI, "action_mode": "residual"})
    env.reset(seed=3)
    pick = _random_policy(0)
    for _ in range(5):
        env.step(pick(env))
    twin = cloudpickle.loads(cloudpickle.dumps(env))
    for _ in range(30):
        a = pick(env)
        o1, r1, _, t1, _ = env.step(a)
        o2, r2, _, t2, _ = twin.step(a)
        np.testing.assert_array_equal(o1, o2)
        assert (r1, t1) == (r2, t2)
        if t1:
            break


def test_compressed_grid_clock_crosses_an_hour_inside_the_serving_window() -> None:
    """ci_time_scale=120 on the mini preset (30 s = one grid hour): a split starts the clock inside its hour,
    so the CI changes at a poll time of the serving window; day, hour and arrivals stay scale 1's."""
    from servegym.envs.geo.env_common import GridClock

    fast = GeoRouteEnv(config={"preset": "mini", "split": "test", "ci_time_scale": 120.0})
    slow = GeoRouteEnv(config={"preset": "mini", "split": "test"})
    for seed in range(5):
        cfg, scen = fast.episode_scenario(seed)
        _, scen1 = slow.episode_scenario(seed)
        assert scen["sim_seed"] == scen1["sim_seed"]
        assert pd.Timestamp(scen1["ci_start"]).minute == 0
        assert pd.Timestamp(scen["ci_start"]).floor("h") == pd.Timestamp(scen1["ci_start"])
        clock = GridClock(cfg, 120.0)
        hours = clock.hour_index(np.arange(0.0, cfg.duration_s, cfg.poll_interval_s))
        assert hours[0] == 0 and hours[-1] == 1  # one boundary inside the window, on the poll grid
        t_cross = cfg.poll_interval_s * int(np.argmax(hours > 0))
        assert clock.hour_index(t_cross - 1e-6) == 0 and clock.hour_index(t_cross) == 1


def test_follow_action_is_the_reference_choice() -> None:
    env = GeoRouteEnv(config={**MINI, "action_mode": "residual", "reference": "moer"})
    assert env.follow_action() == env.n_dcs
    with pytest.raises(ConfigError, match="residual"):
        GeoRouteEnv(config=MINI).follow_action()
