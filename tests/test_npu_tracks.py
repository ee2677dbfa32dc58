"""The npu stress track ``stress-quota`` (``track`` config key, :mod:`servegym.envs.npu.tracks`): the versions and
per-model quotas it sets, the base split's draws, that the quota binds, determinism, errors and the env checkers."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from servegym.baselines.npu import make_policy, run_policy
from servegym.envs.npu import tracks
from servegym.envs.npu.env import NPUAutoscaleEnv
from servegym.envs.npu.sim.catalog import MODELS, VERSIONS

from servegym import splits
from servegym.errors import ConfigError

TWO_H: dict[str, Any] = {"hours": 2.0}


def _env(split: str | None = "validation", track: str | None = "stress-quota", **cfg: Any) -> NPUAutoscaleEnv:
    return NPUAutoscaleEnv({**TWO_H, **cfg, "split": split, "track": track})


def test_track_is_documented_with_its_reason() -> None:
    assert splits.tracks_of("npu") == ("stress-quota",) == tuple(tracks.TRACK_QUOTAS) == tuple(tracks.TRACK_VERSIONS)
    doc = " ".join(tracks.__doc__.split())
    for name, (desc, why) in splits.FAMILY_TRACKS["npu"].items():
        assert f"``{name}``: {' '.join(desc.split())}. Why: {' '.join(why.split())}" in doc
    # every model a split draws has its quota, in the paper's C:D ratio (8B's C raised to its smallest decode vPod)
    quotas = tracks.TRACK_QUOTAS["stress-quota"]
    assert set(quotas) == set(MODELS)
    assert all(q["NPU-C"] == q["NPU-D"] // 2 for m, q in quotas.items() if m != "Llama-3-8B")


@pytest.mark.slow  # builds the DSE catalog of every model (~5 s each); the track's fast tests cover one
def test_every_models_quota_leaves_every_group_a_configuration() -> None:
    for m in MODELS:
        env = _env("train", split_models=[m], hours=0.5)
        env.reset(seed=0)
        assert env.cluster_config.quota_chips == tracks.TRACK_QUOTAS["stress-quota"][m]


@pytest.mark.slow  # builds the DSE catalog of every model (~5 s each); the track's fast tests cover one
def test_track_sets_versions_and_the_drawn_models_quota_on_the_splits_draws() -> None:
    for split in ("train", "test"):
        env, plain = _env(split, hours=0.5), _env(split, None, hours=0.5)
        assert env.config.versions == ("NPU-C", "NPU-D") and plain.config.versions == VERSIONS
        for seed in (1000,):
            _, info = env.reset(seed=seed)
            _, base = plain.reset(seed=seed)
            sc = dict(info["scenario"])
            assert sc.pop("track") == "stress-quota"
            assert sc.pop("quota_chips") == tracks.TRACK_QUOTAS["stress-quota"][sc["model"]]
            assert sc == base["scenario"]  # the base split's draw, unchanged
            assert env.cluster_config.quota_chips == tracks.TRACK_QUOTAS["stress-quota"][sc["model"]]
            assert "track" not in base["scenario"] and plain.cluster_config.quota_chips is None
    # the track's versions given explicitly are the same config
    assert _env(versions=["NPU-C", "NPU-D"], hours=0.5).config == _env(hours=0.5).config


def test_quota_binds_on_busy_episodes_and_not_on_quiet_ones() -> None:
    """Validation seed 1007 (DeepSeek-V3, a coding day at 17:00) needs 960 NPU-D chips under Base unconstrained: on
    the track Base's peak reaches the 320-chip quota; seed 1006 (DeepSeek-V3 at 07:00, 128 chips) stays below it."""
    env = _env()
    held = {}
    for seed in (1007, 1006):
        env.reset(seed=seed)
        sim = env._episode().fresh_cluster()
        run_policy(sim, make_policy("base"), hours=2.0)
        held[seed] = (tracks.quota_binds(sim), dict(sim.max_held))
    assert held[1007][0] and held[1007][1]["NPU-D"] == 320
    assert not held[1006][0] and held[1006][1]["NPU-D"] < 320
    assert all(h["NPU-A"] == h["NPU-B"] == 0 for _, h in held.values())  # no fail-over to NPU-A/B


def test_track_is_deterministic() -> None:
    a, b = _env(), _env()
    ra, rb = a.run_baseline("neuscale", 1007), b.run_baseline("neuscale", 1007)
    assert (ra["reward"], ra["summary"]["energy_j"]) == (rb["reward"], rb["summary"]["energy_j"])
    oa, _ = a.reset(seed=1007)
    ob, _ = b.reset(seed=1007)
    np.testing.assert_array_equal(oa, ob)
    rng = np.random.default_rng(0)
    for _ in range(4):
        masks = np.split(a.action_masks(), np.cumsum(a.action_space.nvec)[:-1])
        act = np.array([rng.choice(np.flatnonzero(m)) for m in masks], dtype=np.int64)
        oa, ra_, *_ = a.step(act)
        ob, rb_, *_ = b.step(act)
        np.testing.assert_array_equal(oa, ob)
        assert ra_ == rb_


def test_track_errors_are_one_line_config_errors() -> None:
    cases = [({"split": "shift-weekend", "track": "stress-quota"}, r"track = 'stress-quota' with split = 'shift-weekend'"),
             ({"track": "stress-load"}, r"track = 'stress-load' is not allowed; allowed: None, stress-quota"),
             ({"track": 3}, r"track"),
             ({"track": "stress-quota", "versions": ["NPU-D"]}, r"versions = \['NPU-D'\] is set by track"),
             ({"track": "stress-quota", "quota_chips": {"NPU-D": 64}}, r"quota_chips = .* is set by track"),
             ({"track": "stress-quota", "phase_versions": {"decode": ["NPU-C"]}}, r"phase_versions = .* is set by track")]
    for cfg, msg in cases:
        with pytest.raises(ConfigError, match=msg) as e:
            NPUAutoscaleEnv({**TWO_H, **cfg})
        assert "\n" not in str(e.value)


def test_checkers_pass_on_the_track() -> None:
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    made = gym.make("servegym/NPUAutoscaleResidual-v0", config={"hours": 0.5, "reference": "base",
                                                                "split": "validation", "track": "stress-quota"})
    check_env(made.unwrapped, skip_render_check=True)
    sb3_check_env(gym.make("servegym/NPUAutoscale-v0", config={"hours": 0.5, "split": "train",
                                                               "track": "stress-quota"}).unwrapped, warn=True)
