"""The multi-agent geo env: PettingZoo's API test, the return identity, determinism, the same run
as the single-agent core, clear errors, and SB3 training through SuperSuit parameter sharing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test
from servegym.envs.geo import parallel_env
from servegym.envs.geo.parallel import GeoRouteParallelEnv

from servegym.errors import ActionError

#: Two regions (two agents), a few seconds of the small preset.
SMALL = {"preset": "small", "geo": {"duration_s": 3.0}}


def _play(env: GeoRouteParallelEnv, seed: int, pick) -> tuple[float, list, dict]:
    obs, infos = env.reset(seed=seed)
    total, trace = [], []
    info: dict = {}
    while env.agents:
        acts = {a: pick(env, a, infos[a]) for a in env.agents}
        obs, rew, term, trunc, infos = env.step(acts)
        assert not any(term.values())
        assert len(set(trunc.values())) <= 1  # every agent's episode ends together
        total.extend(rew.values())
        trace.append((sorted(rew.items()), [o.tobytes() for o in obs.values()]))
        info = next(iter(infos.values()))
    return math.fsum(total), trace, info


def _masked_random(seed: int):
    rng = np.random.default_rng(seed)
    return lambda env, agent, info: int(rng.choice(np.flatnonzero(info["action_mask"])))


@pytest.mark.parametrize("mode", [{}, {"action_mode": "residual", "reference": "milp"}])
def test_parallel_api(mode: dict) -> None:
    env = parallel_env(config={**SMALL, **mode})
    assert env.possible_agents == ["scheduler_0", "scheduler_1"]
    parallel_api_test(env, num_cycles=400)


@pytest.mark.parametrize("mode", [{}, {"action_mode": "residual", "reference": "greedy:0", "reward": "poll"}])
def test_parallel_return_identity_and_determinism(mode: dict) -> None:
    """Summed over agents and steps, the rewards are -(carbon + w_slo x every miss) of the run;
    the same seed gives the same trajectory."""
    runs = []
    for _ in range(2):
        env = parallel_env(config={**SMALL, "w_slo": 0.5, **mode})
        total, trace, info = _play(env, 4, _masked_random(0))
        m = info["episode_metrics"]
        assert total == pytest.approx(-(m["carbon_with_drain_g"] + 0.5 * info["slo_misses"]), rel=1e-9)
        runs.append(trace)
    assert runs[0] == runs[1]


def test_parallel_agents_following_greedy_are_the_greedy_run() -> None:
    """Every agent taking the reference action reproduces the greedy baseline's run exactly: the
    agents drive the same simulator as the single-agent env."""
    from servegym.baselines.geo import make_policy

    env = parallel_env(config={**SMALL, "action_mode": "residual", "reference": "greedy:0"})
    info = _play(env, 1, lambda e, a, i: e.core.n_dcs)[2]
    sim = env.core.make_simulation(env.core.episode_config, env.core.scenario["sim_seed"])  # the split's draw
    theirs = sim.run(make_policy("greedy:0")).summary
    for key in ("carbon_g", "slo_violation_pct", "finished"):
        assert info["episode_metrics"][key] == theirs[key]


def test_parallel_observation_is_the_agents_own_request() -> None:
    env = parallel_env(config=SMALL)
    obs, infos = env.reset(seed=0)
    names = env.core.observation_names
    for r, agent in enumerate(env.possible_agents):
        o = obs[agent]
        assert infos[agent]["region"] in ("US-East", "South-America")
        assert o[names.index(f"origin[{r}]")] == 1.0
        if o[-1] == 1.0:  # has a request: it is its own region's
            assert env.core.state.scheduler[env._pending(r)] == r


def test_parallel_bad_actions_change_nothing() -> None:
    env, twin = parallel_env(config=SMALL), parallel_env(config=SMALL)
    env.reset(seed=2)
    twin.reset(seed=2)
    for bad in ([0, 1], {"scheduler_0": 9, "scheduler_1": 0}, {"scheduler_0": 0}):
        busy = all(env._pending(r) is not None for r in range(2))
        if isinstance(bad, dict) and len(bad) == 1 and not busy:
            continue
        with pytest.raises(ActionError):
            env.step(bad)
    acts = {a: 0 for a in env.agents}
    o1, r1, *_ = env.step(acts)
    o2, r2, *_ = twin.step(acts)
    assert r1 == r2
    for a in o1:
        np.testing.assert_array_equal(o1[a], o2[a])


def test_sb3_trains_through_supersuit_parameter_sharing() -> None:
    """One PPO policy shared by both schedulers (SuperSuit's vector env), a few thousand agent steps."""
    import supersuit as ss
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.utils import set_random_seed

    torch.set_num_threads(1)
    set_random_seed(0)
    env = parallel_env(config=SMALL)
    env.reset(seed=0)  # seeds the run draws of the unseeded resets SuperSuit makes
    vec = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(env), 1, num_cpus=0,
                                base_class="stable_baselines3")
    assert vec.num_envs == 2
    model = PPO("MlpPolicy", vec, n_steps=256, batch_size=128, n_epochs=2, device="cpu",
                policy_kwargs={"net_arch": [32, 32]})
    model.learn(total_timesteps=2048)
    assert model.num_timesteps >= 2048
    obs, _ = env.reset(seed=5)
    for agent, o in obs.items():
        action, _ = model.predict(o, deterministic=True)
        assert env.action_space(agent).contains(int(action))


def test_marl_learnability_reads_the_kpis_the_baselines_report() -> None:
    """benchmarks/marl_learnability.py compares the shared agents with baselines run in GeoRoute-v0,
    whose rows hold the run summary (carbon over the serving window). The agents' rows must come from
    the same summary, not from the top-level running ``carbon_g``, which includes the drain (the first
    version of the script read that one and overstated the agents' carbon)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "marl_learnability.py"
    spec = importlib.util.spec_from_file_location("marl_learnability", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    env = parallel_env(config={**SMALL, "action_mode": "residual", "reference": "greedy:0"})
    info = _play(env, 1, lambda e, a, i: e.core.n_dcs)[2]
    m = mod._metrics(info)
    summary = info["episode_metrics"]
    assert m["carbon_g"] == summary["carbon_g"] and m["slo_violation_pct"] == summary["slo_violation_pct"]
    assert info["carbon_g"] == pytest.approx(summary["carbon_with_drain_g"]) and info["carbon_g"] > m["carbon_g"]
    with pytest.raises(RuntimeError, match="episode_metrics"):
        mod._metrics({"carbon_g": 1.0})
