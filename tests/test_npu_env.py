"""servegym/NPUAutoscale-v0: checkers, determinism, masks, errors that leave the state alone, info, reward, learning."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servegym.envs.npu.action_decoding import demand_action
from servegym.envs.npu.env import NPUAutoscaleEnv, NPUEnvConfig
from servegym.envs.npu.sim.catalog import VERSIONS

from servegym.errors import ActionError, ConfigError

#: Half an hour of the configured default scenario (no split: Llama-3-70B, Azure at Table 4's rate): 6 epochs.
QUICK: dict[str, Any] = {"hours": 0.5, "split": None}
#: A light load and a short count ladder for the runs with random actions (fewer vPods, faster steps).
LIGHT: dict[str, Any] = {"rate_rpm": 120.0, "count_levels": [0, 1, 2, 4]}
INFO_KEYS = {"energy_j", "cost_usd", "tokens", "slo_violation_pct", "power_w", "vpods", "tokens_per_j", "tokens_per_usd",
             "slo_misses", "arrived", "finished", "vpods_per_version", "chips", "time_s", "action_adjusted"}


def make(render_mode: str | None = None, **over: Any) -> NPUAutoscaleEnv:
    return NPUAutoscaleEnv({**QUICK, **over}, render_mode=render_mode)


def split_masks(env: NPUAutoscaleEnv) -> list[np.ndarray]:
    m = env.action_masks()
    assert m.shape == (int(env.action_space.nvec.sum()),) and m.dtype == bool
    return np.split(m, np.cumsum(env.action_space.nvec)[:-1])


def random_valid(env: NPUAutoscaleEnv, rng: np.random.Generator) -> np.ndarray:
    return np.array([rng.choice(np.flatnonzero(m)) for m in split_masks(env)], dtype=np.int64)


def test_both_checkers_pass() -> None:
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    # through gym.make, so the checker also exercises the render modes the spec declares
    made = gym.make("servegym/NPUAutoscale-v0", config={**QUICK, **LIGHT}, render_mode="ansi")
    check_env(made.unwrapped, skip_render_check=False)
    env = make(render_mode="ansi", **LIGHT)
    sb3_check_env(env, warn=True)
    assert "prefill <=" in env.render()


def test_layout_is_documented_and_consistent() -> None:
    env = make()
    obs, info = env.reset(seed=0)
    assert len(env.obs_fields) == env.observation_space.shape[0] == obs.shape[0]
    assert env.observation_space.contains(obs)
    n = len(env.groups)
    assert env.action_space.nvec.tolist() == [len(env.config.count_levels), env.n_options] * n
    # groups: prefill first, ascending edges per phase; the top group fits the longest request
    phases = [g[0] for g in env.groups]
    assert phases == sorted(phases, key=lambda p: p != "prefill")
    r = env.workload.requests
    for ph, longest in (("prefill", r.input_tokens.max()), ("decode", (r.input_tokens + r.output_tokens).max())):
        edges = [e for p, e in env.groups if p == ph]
        assert edges == sorted(edges) and edges[-1] >= longest
    # option 0 is the bucket's best fit; every option serves the group's phase
    for (ph, edge), opts in zip(env.groups, env.options, strict=True):
        best = env.catalog.table.lookup(ph, edge)
        e0 = env.catalog.configs[opts[0]].entry
        assert (e0.alloc_index, e0.batch) == (best.alloc_index, best.batch)
        assert all(env.catalog.configs[c].phase == ph for c in opts)
    assert INFO_KEYS - {"action_adjusted"} <= set(info)


def test_same_seed_same_episode_other_seed_differs() -> None:
    def roll(seed: int) -> list[Any]:
        env = make(**LIGHT)
        rng = np.random.default_rng(3)
        obs, _ = env.reset(seed=seed)
        out: list[Any] = [obs.tobytes()]
        for _ in range(4):
            obs, r, _, _, info = env.step(random_valid(env, rng))
            out += [obs.tobytes(), r, info["energy_j"], info["slo_misses"]]
        return out

    a, b = roll(11), roll(11)
    assert a == b
    assert roll(12) != a


def test_masks_never_all_false_and_mask_the_documented_values() -> None:
    env = make()
    env.reset(seed=0)
    parts = split_masks(env)
    assert all(p.any() for p in parts)
    for g, _key in enumerate(env.groups):
        count_m, opt_m = parts[2 * g], parts[2 * g + 1]
        assert opt_m[: len(env.options[g])].all() and not opt_m[len(env.options[g]):].any()
        assert count_m[0] == (g not in env.top_group)  # 0 vPods only below the top group of a phase


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(VERSIONS), st.integers(0, 64), min_size=1, max_size=3))
def test_quota_masks_options_that_cannot_fit_one_vpod(quota: dict[str, int]) -> None:
    try:
        env = make(quota_chips=quota)
    except ConfigError as exc:  # only when some group has no option that fits the quota
        assert "quota_chips" in str(exc)
        return
    for g, parts in enumerate(zip(*[iter(split_masks(env))] * 2, strict=True)):
        opt_m = parts[1]
        assert opt_m.any()
        for j, cid in enumerate(env.options[g]):
            cf = env.catalog.configs[cid]
            assert opt_m[j] == (cf.chips <= quota.get(cf.version, math.inf))


def _state(env: NPUAutoscaleEnv) -> tuple:
    sim = env.sim
    assert sim is not None
    return (sim.now, sim.next_req, repr(sim.targets), sim.v_cfg.tobytes(), sim.v_ready.tobytes(), env.state.t,
            sim.route_rng.bit_generator.state["state"]["state"],
            sorted((k, r.bit_generator.state["state"]["state"]) for k, r in sim.boot_rngs.items()))


@pytest.mark.parametrize("bad", [
    "shape", "range_high", "negative", "fraction", "nan", "masked_strict",
])
def test_bad_actions_raise_and_leave_state_unchanged(bad: str) -> None:
    env = make(strict_masks=True)
    ref = make(strict_masks=True)
    env.reset(seed=5)
    ref.reset(seed=5)
    good = env.heuristic_action()
    a: Any = good.copy()
    if bad == "shape":
        a = good[:-1]
    elif bad == "range_high":
        a[1] = env.n_options
    elif bad == "negative":
        a[0] = -1
    elif bad == "fraction":
        a = good.astype(float)
        a[0] += 0.5
    elif bad == "nan":
        a = good.astype(float)
        a[2] = np.nan
    elif bad == "masked_strict":
        top = max(env.top_group)
        a[2 * top] = 0
    before = _state(env)
    with pytest.raises(ActionError, match=r"action|allowed"):
        env.step(a)
    assert _state(env) == before
    o1, r1, *_ = env.step(good)
    o2, r2, *_ = ref.step(good)
    assert np.array_equal(o1, o2) and r1 == r2


def test_masked_action_is_adjusted_when_not_strict() -> None:
    env, ref = make(), make()
    env.reset(seed=2)
    ref.reset(seed=2)
    a = env.heuristic_action()
    top = max(env.top_group)
    a[2 * top] = 0
    fixed = a.copy()
    fixed[2 * top] = 1  # the smallest positive level of the default ladder
    o1, r1, _, _, i1 = env.step(a)
    o2, r2, _, _, i2 = ref.step(fixed)
    assert i1["action_adjusted"] and not i2["action_adjusted"]
    assert np.array_equal(o1, o2) and r1 == r2
    # the episode's count of adjusted actions: 1 after it, still 1 after an allowed action, 0 again at reset
    assert (i1["episode_adjusted_actions"], i2["episode_adjusted_actions"]) == (1, 0)
    assert env.step(fixed)[-1]["episode_adjusted_actions"] == 1
    assert env.reset(seed=2)[1]["episode_adjusted_actions"] == 0


def test_step_before_reset_and_after_truncation() -> None:
    env = make(hours=1.0 / 6.0)  # 2 epochs
    with pytest.raises(ActionError, match="reset"):
        env.step(env.action_space.sample())
    env.reset(seed=0)
    flags = [env.step(env.heuristic_action())[3] for _ in range(2)]
    assert flags == [False, True]
    with pytest.raises(ActionError, match="truncated"):
        env.step(env.heuristic_action())


@pytest.mark.parametrize(("over", "field"), [
    ({"bogus": 1}, "bogus"),
    ({"trace": "nope"}, "trace"),
    ({"objective": "carbon"}, "objective"),
    ({"hours": 0.3}, "hours"),
    ({"hours": -1.0}, "hours"),
    ({"count_levels": [0, 4, 2]}, "count_levels"),
    ({"count_levels": [0]}, "count_levels"),
    ({"groups_per_phase": 0}, "groups_per_phase"),
    ({"slo_penalty": -1.0}, "slo_penalty"),
    ({"osl_accuracy": 1.5}, "osl_accuracy"),
    ({"model": "GPT-9"}, "GPT-9"),
    ({"quota_chips": {"NPU-Z": 8}}, "quota_chips"),
    ({"workload_seed": -2}, "workload_seed"),
    ({"versions": ["NPU-D"], "quota_chips": {"NPU-D": 0}}, "quota_chips"),
    ({"phase_versions": {"prefill": ["NPU-X"]}}, "phase_versions"),
    ({"phase_versions": {"train": ["NPU-C"]}}, "phase_versions"),
    ({"phase_versions": {"decode": "NPU-C"}}, "phase_versions"),
    ({"phase_versions": {"decode": 3}}, "phase_versions"),
    ({"phase_versions": ["NPU-C"]}, "phase_versions"),
    ({"versions": ["NPU-D"], "phase_versions": {"decode": ["NPU-C"]}}, "phase_versions"),
])
def test_bad_config_names_the_field(over: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        NPUAutoscaleEnv({**QUICK, **over})


def test_render_mode_and_default_config_round_trip() -> None:
    with pytest.raises(ConfigError, match="render_mode"):
        make(render_mode="human")
    d = NPUAutoscaleEnv.default_config()
    assert NPUEnvConfig.from_dict(d) == NPUEnvConfig()
    assert NPUEnvConfig().horizon_epochs == 288


def test_info_reward_and_episode_accounting() -> None:
    env = make()
    env.reset(seed=1)
    total_misses = 0.0
    for _ in range(env.horizon):
        _, r, term, trunc, info = env.step(env.heuristic_action())
        assert INFO_KEYS <= set(info) and not term
        assert r == pytest.approx(info["reward_objective"] + info["reward_slo"])
        assert info["energy_j"] > 0 and info["cost_usd"] > 0 and 0 <= info["slo_violation_pct"] <= 100
        assert info["tokens_per_j"] == pytest.approx(info["tokens"] / info["energy_j"])
        assert info["vpods"] == sum(info["vpods_per_version"].values()) > 0
        total_misses += info["slo_misses"]
    assert trunc
    s = env.sim.summary()
    n_req = s["requests_finished"] + s["requests_open"]
    # per-epoch misses telescope to the simulator's count (clipping at 0 can only add)
    # (the share's denominator counts finished + late-open requests, so share x finished <= misses)
    assert total_misses >= s["slo_violation_pct"] / 100.0 * s["requests_finished"] - 1e-6
    assert total_misses <= s["slo_violation_pct"] / 100.0 * n_req + 0.01 * n_req + 2


def test_reward_prefers_serving_to_starving() -> None:
    """The heuristic (N_pod = ceil(R_peak / T_pod)) earns more than one vPod per top group and nothing else."""
    def episode(policy: str) -> float:
        env = make()
        env.reset(seed=4)
        total = 0.0
        for _ in range(env.horizon):
            a = env.heuristic_action()
            if policy == "starve":
                a[0::2] = [1 if g in env.top_group else 0 for g in range(len(env.groups))]
            total += env.step(a)[1]
        return total

    assert episode("heuristic") > episode("starve")


def test_neuscale_decisions_project_onto_valid_actions() -> None:
    from servegym.baselines.npu import NeuScalePolicy

    env = make()
    env.reset(seed=0)
    pol = NeuScalePolicy()
    pol.reset(env.sim)
    for _ in range(3):
        a = env.action_from_decision(pol.decide(env.last_ctx))
        masks = split_masks(env)
        assert all(m[v] for m, v in zip(masks, a.tolist(), strict=True))
        _, _, _, _, info = env.step(a)
        assert not info["action_adjusted"]


@pytest.mark.slow  # torch import + 200 env steps: ~30 s wall on the shared 2-core box
def test_short_maskable_ppo_run() -> None:
    """A few hundred MaskablePPO steps (a smoke test of the masks and spaces with sb3-contrib)."""
    sb3c = pytest.importorskip("sb3_contrib", reason="needs the rl extra: pip install -e '.[rl]'")
    env = make(hours=0.25, **LIGHT)  # 3 epochs per episode
    model = sb3c.MaskablePPO("MlpPolicy", env, n_steps=100, batch_size=50, n_epochs=2, seed=0, device="cpu")
    model.learn(total_timesteps=200)
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs, action_masks=env.action_masks(), deterministic=True)
    assert all(m[v] for m, v in zip(split_masks(env), np.asarray(action).tolist(), strict=True))


def test_workload_seed_none_draws_the_trace_from_the_reset_seed() -> None:
    env = make(workload_seed=None, rate_rpm=120.0)
    env.reset(seed=1)
    a = env.workload.requests.arrival_s.copy()
    env.reset(seed=2)
    b = env.workload.requests.arrival_s.copy()
    env.reset(seed=1)
    assert np.array_equal(env.workload.requests.arrival_s, a) and not np.array_equal(a, b)
    fixed = make(rate_rpm=120.0)  # workload_seed 0: the same trace whatever the reset seed
    fixed.reset(seed=1)
    w1 = fixed.workload
    fixed.reset(seed=2)
    assert fixed.workload is w1


def test_cost_objective_and_cold_start() -> None:
    env = make(objective="cost", n_candidates=1, warm_start=False, **LIGHT)
    _, info = env.reset(seed=0)
    assert info["vpods"] == 0  # cold start: nothing provisioned
    assert env.n_options >= 1 and all(opts for opts in env.options)
    ratios = []
    for _ in range(3):
        _, _, _, _, info = env.step(env.heuristic_action())
        ratios.append(-info["reward_objective"] / info["cost_usd"])
    # the objective term is cost / (the oracle's mean USD per epoch): one constant ratio
    assert np.allclose(ratios, ratios[0]) and ratios[0] > 0


def test_phase_versions_restrict_every_configuration_choice() -> None:
    env = make(phase_versions={"prefill": ["NPU-D"], "decode": ["NPU-C"]}, **LIGHT)
    assert env.cluster_config.phase_versions == {"prefill": ("NPU-D",), "decode": ("NPU-C",)}
    want = {"prefill": "NPU-D", "decode": "NPU-C"}
    assert env.catalog.configs and all(c.version == want[c.phase] for c in env.catalog.configs)
    env.reset(seed=0)
    # every group at its largest count with its first option: vPods of both phases get created
    env.step(np.tile([len(env.levels) - 1, 0], len(env.groups)))
    sim = env.sim
    assert sim is not None and sim.max_held["NPU-A"] == sim.max_held["NPU-B"] == 0.0
    assert sim.max_held["NPU-C"] > 0 and sim.max_held["NPU-D"] > 0


def test_demand_action_and_count_index_equal_their_numpy_form() -> None:
    # the heuristic's sizing runs on Python floats and bisect (speed); the same figures as its numpy form
    env = NPUAutoscaleEnv({"hours": 1.0, "split": None})
    env.reset(seed=2)
    sim = env.sim
    rng = np.random.default_rng(0)
    for _ in range(5):
        rate = rng.random((2, 48)) * 10.0 * (rng.random((2, 48)) < 0.6)
        tpr = rng.random((2, 48)) * 4000.0
        want = np.zeros(2 * len(env.groups), dtype=np.int64)
        for g, (p, lo, hi) in enumerate(env.state.layout.ranges):
            opt = int(np.flatnonzero(env.state.layout.opt_ok[g])[0])
            cid = env.options[g][opt]
            need = 0.0
            for b in range(lo, hi):
                w = float(rate[p, b] * tpr[p, b])
                if w > 0:
                    need += w / max(float(sim.tps[cid, b, sim.jmax[cid, b]]), 1e-300)
            n = max(math.ceil(need - 1e-9), 1 if g in env.top_group else 0)
            want[2 * g] = int(min(np.searchsorted(env.levels, math.ceil(n - 1e-9), side="left"), env.levels.size - 1))
            want[2 * g + 1] = opt
        assert np.array_equal(demand_action(env.state, rate, tpr), want)
    for n in [0, 0.5, 1, 1.0000000001, 3, 7.2, 63.9, 64, 65, 1e9, *rng.random(20) * 80.0]:
        assert env.count_index(n) == int(min(np.searchsorted(env.levels, math.ceil(n - 1e-9), side="left"),
                                             env.levels.size - 1))
