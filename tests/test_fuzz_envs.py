"""Fuzzing every env's config and action space (hypothesis): any input gives either a valid result or a
:class:`~servegym.errors.ServegymError`, never another exception, a NaN or an infinity.

Bounded for CI: configs are fuzzed on top of a tiny scenario per env (a rejected config costs only its
validation; a valid one builds an env with one short episode), and actions are fuzzed on one env per id.
About 30-60 s on a shared 2-core machine.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servegym.envs.geo.env_common import GeoEnvConfig
from servegym.envs.geo.sim.config import GeoConfig
from servegym.envs.npu.env import NPUEnvConfig
from servegym.envs.pd.env import PDEnvConfig
from servegym.envs.pd.sim.scenario import DayScenario

import servegym  # noqa: F401  (registers the ids)
from servegym.errors import ServegymError

# Tiny scenarios: one short episode each.
BASE: dict[str, dict[str, Any]] = {
    "servegym/GeoRoute-v0": {"preset": "mini", "geo": {"duration_s": 1.0, "drain_s": 5.0}},
    "servegym/GeoRouteWindow-v0": {"preset": "mini", "geo": {"duration_s": 1.0, "drain_s": 5.0}},
    "servegym/PDProvision-v0": {"scenario": {"horizon_steps": 6}},
    "servegym/NPUAutoscale-v0": {"model": "Llama3-8B", "hours": 0.25, "n_candidates": 1, "split": None},
}

# Anything a user might type where a number, a string or a flag belongs.
GARBAGE = st.one_of(
    st.none(), st.booleans(), st.text(max_size=8), st.lists(st.integers(-3, 3), max_size=3),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 2**63, -(2**63), 1j, {"a": 1}, (1, 2), b"x"]),
    st.integers(-(10**12), 10**12), st.floats(allow_nan=True, allow_infinity=True),
)

# Fields whose valid values are all cheap (no field here changes the episode's length or the fleet's size
# beyond a small factor), fuzzed with numbers near and across their ranges.
CHEAP_NUMBERS = st.one_of(st.floats(-2.0, 5.0), st.integers(-2, 5), st.sampled_from([0, 0.0, 1e-9, 1, 2.5]))
CHEAP_FIELDS = {
    "servegym/GeoRoute-v0": ["w_carbon", "w_slo", "max_steps", "geo.ttft_slo_s", "geo.tpot_slo_s",
                             "geo.poll_interval_s", "geo.pue", "geo.host_power_w", "geo.drain_s"],
    "servegym/GeoRouteWindow-v0": ["w_carbon", "w_slo", "geo.window_s", "geo.window_max_requests",
                                   "geo.poll_interval_s"],
    "servegym/PDProvision-v0": ["objective_weight", "slo_weight", "cap_weight", "pue", "ttft_slo_s", "tpot_slo_s",
                                "startup_delay_s", "scenario.burstiness", "scenario.peak_rate_rps"],
    "servegym/NPUAutoscale-v0": ["objective_weight", "slo_penalty", "slo_factor", "osl_accuracy", "start_hour"],
}
CONFIG_CLASSES = {"geo": GeoEnvConfig, "geo.geo": GeoConfig, "pd": PDEnvConfig, "pd.scenario": DayScenario,
                  "npu": NPUEnvConfig}


def _with(base: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    cfg = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    if "." in field:
        outer, inner = field.split(".", 1)
        cfg.setdefault(outer, {})[inner] = value
    else:
        cfg[field] = value
    return cfg


def _finite(x: Any) -> bool:
    if isinstance(x, dict):
        return all(_finite(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return all(_finite(v) for v in x)
    if isinstance(x, (float, np.floating)):
        return math.isfinite(x)
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        return bool(np.isfinite(x).all())
    return True


def _play(env: gym.Env, actions: list[Any], seed: int) -> None:
    """Reset and step with ``actions``; every outcome must be valid or a ServegymError."""
    try:
        obs, info = env.reset(seed=seed)
    except ServegymError:
        return
    assert env.observation_space.contains(obs) and _finite(obs)
    for action in actions:
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except ServegymError:
            continue
        assert math.isfinite(float(reward)), (action, reward)
        assert env.observation_space.contains(obs) and _finite(obs), action
        assert _finite({k: v for k, v in info.items() if isinstance(v, (int, float, np.floating))}), info
        if terminated or truncated:
            return


def _config_fields() -> list[tuple[str, str]]:
    out = []
    for env_id, prefix, cls in (("servegym/GeoRoute-v0", "", GeoEnvConfig), ("servegym/GeoRoute-v0", "geo.", GeoConfig),
                                ("servegym/PDProvision-v0", "", PDEnvConfig),
                                ("servegym/PDProvision-v0", "scenario.", DayScenario),
                                ("servegym/NPUAutoscale-v0", "", NPUEnvConfig)):
        for f in dataclasses.fields(cls):
            if prefix == "" and f.name in ("geo", "scenario", "system"):
                continue
            out.append((env_id, prefix + f.name))
    return out


CONFIG_FIELDS = _config_fields()


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CONFIG_FIELDS), GARBAGE)
def test_any_value_in_any_config_field_is_valid_or_a_servegym_error(field: tuple[str, str], value: Any) -> None:
    """Validation only: a config that passes is not built into an env here (its size could be anything)."""
    env_id, name = field
    cfg = _with(BASE[env_id], name, value)
    build = {"servegym/GeoRoute-v0": GeoEnvConfig.from_dict, "servegym/PDProvision-v0": PDEnvConfig.from_dict,
             "servegym/NPUAutoscale-v0": NPUEnvConfig.from_dict}[env_id]
    try:
        build(cfg)
    except ServegymError:
        pass


@pytest.mark.parametrize("env_id", list(BASE))
def test_fuzzed_cheap_configs_build_and_play_or_fail_cleanly(env_id: str) -> None:
    @settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(st.sampled_from(CHEAP_FIELDS[env_id]), st.one_of(CHEAP_NUMBERS, GARBAGE), st.integers(0, 2**31 - 1))
    def run(field: str, value: Any, seed: int) -> None:
        try:
            env = gym.make(env_id, config=_with(BASE[env_id], field, value))
        except ServegymError:
            return
        try:
            rng = np.random.default_rng(seed)
            env.action_space.seed(seed)
            _play(env, [env.action_space.sample() for _ in range(int(rng.integers(1, 30)))], seed)
        finally:
            env.close()

    run()


def _bad_actions(space: gym.Space) -> st.SearchStrategy:
    shape = space.shape or ()
    size = int(np.prod(shape)) if shape else 1
    arrays = st.sampled_from([np.full(shape, np.nan), np.full(shape, np.inf), np.full(shape, -1e30),
                              np.full(shape, 1e30), np.full(shape, True), np.full(shape, "1"),
                              np.full(shape, 1 + 1j), np.full(shape, np.iinfo(np.uint64).max, dtype=np.uint64),
                              np.zeros(size + 1), np.zeros((2, *shape)), np.array([])])
    scalars = st.one_of(st.none(), st.text(max_size=4), st.integers(-(2**70), 2**70),
                        st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                        st.sampled_from([[], {}, object(), 1j, b"\x00"]))
    return st.one_of(arrays, scalars)


@pytest.fixture(scope="module")
def envs() -> dict[str, gym.Env]:
    made = {env_id: gym.make(env_id, config=cfg) for env_id, cfg in BASE.items()}
    yield made
    for env in made.values():
        env.close()


@pytest.mark.parametrize("env_id", list(BASE))
def test_fuzzed_actions_give_valid_steps_or_servegym_errors(env_id: str, envs: dict[str, gym.Env]) -> None:
    env = envs[env_id]

    @settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow,
                                                                      HealthCheck.function_scoped_fixture])
    @given(st.lists(st.one_of(st.just(None).map(lambda _: env.action_space.sample()), _bad_actions(env.action_space)),
                    min_size=1, max_size=25), st.integers(0, 2**31 - 1))
    def run(actions: list[Any], seed: int) -> None:
        _play(env, actions, seed)

    run()
