"""The npu VectorEnv (make_vec's vector entry point) equals N separate envs; the fluid mode is the default and
its request-level cross-check holds on a small scenario."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from servegym.envs.npu.env import NPUAutoscaleEnv
from servegym.envs.npu.vector import NPUVectorEnv

import servegym  # noqa: F401 (registers the ids)
from servegym.errors import ActionError, ConfigError

# one model, 20-min episodes, so a vector of 3 ends and autoresets within the test
SMALL = {"hours": 1.0 / 3.0, "split_models": ["Llama-3-70B"]}


@pytest.mark.parametrize("env_id", ["servegym/NPUAutoscale-v0", "servegym/NPUAutoscaleResidual-v0"])
def test_make_vec_vector_entry_point_equals_separate_envs(env_id: str) -> None:
    n = 3
    venv = gym.make_vec(env_id, num_envs=n, vectorization_mode="vector_entry_point", **SMALL)
    assert isinstance(venv.unwrapped, NPUVectorEnv)
    envs = [gym.make(env_id, **SMALL) for _ in range(n)]
    assert venv.single_action_space == envs[0].action_space
    obs, _ = venv.reset(seed=3)
    for i, e in enumerate(envs):
        o, info = e.reset(seed=3 + i)
        assert np.array_equal(obs[i], o) and info["fidelity"] == "fluid"
    venv.action_space.seed(1)
    done = np.zeros(n, dtype=bool)
    ends = 0
    for _ in range(6):
        acts = venv.action_space.sample()
        o_v, r_v, te_v, tr_v, info_v = venv.step(acts)
        for i, e in enumerate(envs):
            if done[i]:
                o, _ = e.reset()
                r, te, tr = 0.0, False, False
            else:
                o, r, te, tr, info = e.step(acts[i])
                assert info_v["energy_j"][i] == info["energy_j"]
            assert np.array_equal(o_v[i], o) and r_v[i] == r and te_v[i] == te and tr_v[i] == tr
        done = te_v | tr_v
        ends += int(done.sum())
    assert ends >= n
    with pytest.raises(ActionError):  # an invalid action of one env leaves every env as it was
        venv.step(np.full(venv.action_space.shape, 99))
    with pytest.raises(ConfigError, match="num_envs"):
        NPUVectorEnv(0)
    venv.close()


def test_fidelity_switch_is_validated_and_request_mode_runs() -> None:
    with pytest.raises(ConfigError, match="fidelity"):
        NPUAutoscaleEnv({"fidelity": "coarse"})
    env = NPUAutoscaleEnv({**SMALL, "fidelity": "request"})
    _, info = env.reset(seed=0)
    assert info["fidelity"] == "request"
    env.step(env.action_space.sample())


@pytest.mark.slow
def test_fluid_crosschecks_the_request_level_on_a_small_scenario() -> None:
    from servegym.envs.npu.reports.fluid_check import (
        ENERGY_COST_TOL,
        SLO_TOL_PP,
        crosscheck,
    )
    from servegym.envs.npu.scenarios import segment_scenario
    from servegym.envs.npu.sim.cluster import ClusterConfig

    # the tiled 2023 hour (a named bursty scenario) on its test segment. Energy and cost are within tolerance.
    # The fluid was pessimistic on the coding trace here (+1.18 pp Base, +1.29 pp NeuScale) while it added the
    # stationary M/G/1 tail on top of the Lindley backlog in bins the largest level cannot keep up with (the
    # queue counted twice); with the tail only where the server empties: +0.19 / +0.56 pp, within 1 pp.
    sc, wl = segment_scenario("test", "azure-code", 1.0)
    for row in crosscheck(ClusterConfig(model="Llama-3-70B", n_candidates=1), wl, seed=sc["simulation_seed"]):
        assert abs(row["energy_rel"]) <= ENERGY_COST_TOL and abs(row["usd_rel"]) <= ENERGY_COST_TOL
        assert abs(row["slo_pp"]) <= SLO_TOL_PP


@pytest.mark.slow
def test_fluid_ttft_misses_follow_the_request_level_on_the_conversation_trace() -> None:
    from servegym.envs.npu.env import NPUEnvConfig
    from servegym.envs.npu.reports.fluid_check import SLO_TOL_PP, crosscheck
    from servegym.envs.npu.scenarios import segment_scenario

    # Base's one prefill group serves every prompt length, so a short prompt waits behind long ones: the
    # fluid's TTFT wait uses the group's length mix (it read each bucket's own moments before and gave
    # 0.84 % against the request level's 11.68 % here, Llama-3-8B). Llama-3-70B since the model runs at the serving
    # efficiency fitted to Figure 16: Base's 8B vPod then misses only 2.3 % here, the 70B one 46.0 % (fluid -0.05 pp)
    sc, wl = segment_scenario("test", "azure-conv", 1.0)
    (row,) = crosscheck(NPUEnvConfig(split=None, model="Llama-3-70B").cluster_config(), wl,
                        seed=sc["simulation_seed"], policies=("base",))
    assert row["slo_violation_pct_request"] > 5.0  # a scenario with misses to follow
    assert abs(row["slo_pp"]) <= SLO_TOL_PP


@pytest.mark.slow
def test_fluid_ttft_follows_the_request_level_under_sustained_prefill_overload() -> None:
    from servegym.envs.npu.env import NPUEnvConfig
    from servegym.envs.npu.reports.fluid_check import SLO_TOL_PP, crosscheck
    from servegym.envs.npu.scenarios import segment_scenario

    # the cross-check table's DeepSeek-V3 LVEval NeuScale row (2023, 6 h): long-prompt prefill groups with few vPods
    # stay overloaded for minutes. The request level prices each prefill job at the capacity of the level of the
    # sub-step it arrives in, while the level follows the token fluid, so the job queue drains slower than the
    # largest level would; the fluid drained its backlog at the largest level and gave -1.78 pp (TTFT 52.4 % against
    # 54.7 %); with the job queue priced as the request level prices it: +0.19 pp
    sc, wl = segment_scenario("shift-lveval", "azure-code", 6.0)
    (row,) = crosscheck(NPUEnvConfig(split=None, model="DeepSeek-V3-671B").cluster_config(), wl,
                        seed=sc["simulation_seed"], policies=("neuscale",))
    assert row["ttft_violation_pct_request"] > 20.0  # the overloaded scenario
    assert abs(row["slo_pp"]) <= SLO_TOL_PP


def test_compare_fast_uses_the_fluid_simulator() -> None:
    from servegym.baselines.npu import compare

    fast = compare("Llama-3-8B", "azure", 0.25, ("base",), fidelity="fluid")[0].summary
    slow = compare("Llama-3-8B", "azure", 0.25, ("base",), fidelity="request")[0].summary
    assert fast["usd"] == pytest.approx(slow["usd"], rel=0.03)
    assert fast["energy_j"] == pytest.approx(slow["energy_j"], rel=0.03)
    assert "requests_open" in fast and fast != slow
