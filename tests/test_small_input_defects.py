"""Small input defects (issue #15, defect 9): non-real window actions, bool and uint64 npu actions, an empty
geo run explained at reset. (``--plot DIR`` is in test_cli_errors.py.)"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import servegym  # noqa: F401  (registers the ids)
from servegym.errors import ActionError, ConfigError

GEO_MINI = {"preset": "mini", "geo": {"duration_s": 1.0}}


@pytest.mark.parametrize("kind", ["str", "complex", "bool", "object"])
def test_window_rejects_non_real_actions_and_changes_nothing(kind: str) -> None:
    env = gym.make("servegym/GeoRouteWindow-v0", config=GEO_MINI)
    env.reset(seed=0)
    d = env.action_space.shape[0]
    action = {"str": np.array(["0.5"] * d), "complex": np.full(d, 0.5 + 0.5j), "bool": np.ones(d, dtype=bool),
              "object": np.array([0.5] * d, dtype=object)}[kind]
    with pytest.raises(ActionError, match="dtype"):
        env.step(action)
    # Nothing changed: the next valid step gives what it gives on an untouched env.
    ref = gym.make("servegym/GeoRouteWindow-v0", config=GEO_MINI)
    ref.reset(seed=0)
    zero = np.zeros(d, dtype=np.float32)
    got, want = env.step(zero), ref.step(zero)
    np.testing.assert_array_equal(got[0], want[0])
    assert got[1] == want[1]


@pytest.fixture(scope="module")
def npu_env() -> gym.Env:
    env = gym.make("servegym/NPUAutoscale-v0", config={"model": "Llama3-8B", "hours": 0.25, "n_candidates": 1,
                                                             "split": None})
    env.reset(seed=0)
    return env


def test_npu_rejects_bool_actions(npu_env: gym.Env) -> None:
    with pytest.raises(ActionError, match="integer-valued"):
        npu_env.step(np.ones(npu_env.action_space.shape, dtype=bool))


@pytest.mark.parametrize("value", [np.iinfo(np.uint64).max, 2**63])
def test_npu_reports_huge_unsigned_actions_as_they_are(npu_env: gym.Env, value: int) -> None:
    a = np.zeros(npu_env.action_space.shape, dtype=np.uint64)
    a[0] = value
    with pytest.raises(ActionError) as exc:
        npu_env.step(a)
    assert str(int(value)) in str(exc.value) and "= -1" not in str(exc.value)


@pytest.mark.parametrize("env_id", ["servegym/GeoRoute-v0", "servegym/GeoRouteWindow-v0"])
def test_empty_geo_run_is_explained_at_reset(env_id: str) -> None:
    env = gym.make(env_id, config={"preset": "mini", "geo": {"rate_rps": 1e-9, "duration_s": 1.0}})
    with pytest.raises(ConfigError, match=r"no request to route.*rate_rps"):
        env.reset(seed=0)
