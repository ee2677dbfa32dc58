"""Benchmark splits (issue 11): every env id samples its scenario from a named split, deterministically,
with the test split disjoint from train and validation."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.envs.geo import env_common
from servegym.envs.npu import env as npu_env
from servegym.envs.pd import env as pd_env
from servegym.envs.pd.sim.scenario import DayScenario, draw_scenario

import servegym  # noqa: F401  (registers the ids)
from servegym import splits
from servegym.errors import ConfigError

GEO = {"preset": "mini", "geo": {"duration_s": 2.0}}
PD = {"scenario": {"horizon_steps": 30}}
NPU = {"hours": 0.5, "split_models": ["Llama3-8B"], "count_levels": [0, 1, 2, 4]}
ENVS: dict[str, tuple[str, dict[str, Any]]] = {
    "servegym/GeoRoute-v0": ("geo", GEO),
    "servegym/GeoRouteWindow-v0": ("geo", GEO),
    "servegym/PDProvision-v0": ("pd", PD),
    "servegym/NPUAutoscale-v0": ("npu", NPU),
}
DOCS = {"geo": env_common.__doc__, "pd": pd_env.__doc__, "npu": npu_env.__doc__}


def _make(env_id: str, split: str | None) -> gym.Env:
    return gym.make(env_id, config={**ENVS[env_id][1], "split": split}).unwrapped


@pytest.mark.parametrize("family", sorted(splits.FAMILY_SPLITS))
def test_every_family_has_base_splits_a_shift_and_documents_them(family: str) -> None:
    names = splits.splits_of(family)
    assert names[:3] == splits.BASE_SPLITS
    assert any(n.startswith("shift-") for n in names)
    for name in names:
        assert f"``{name}``" in DOCS[family], (family, name)


@pytest.mark.parametrize("env_id", list(ENVS))
def test_bad_split_is_a_clear_config_error(env_id: str) -> None:
    with pytest.raises(ConfigError, match=r"split = 'tset' is not allowed; allowed: None, train"):
        gym.make(env_id, config={**ENVS[env_id][1], "split": "tset"})
    with pytest.raises(ConfigError, match="split"):
        gym.make(env_id, config={**ENVS[env_id][1], "split": 3})


@pytest.mark.parametrize("env_id", list(ENVS))
def test_split_keyword_of_gym_make(env_id: str) -> None:
    env = gym.make(env_id, config=ENVS[env_id][1], split="validation").unwrapped
    assert env.config.split == "validation"
    _, info = env.reset(seed=5)
    assert info["scenario"]["split"] == "validation" and env.scenario == info["scenario"]


@pytest.mark.parametrize("env_id", list(ENVS))
def test_same_seed_and_split_same_scenario_train_and_test_differ(env_id: str) -> None:
    family = ENVS[env_id][0]
    train, test = _make(env_id, "train"), _make(env_id, "test")
    obs_a, info_a = train.reset(seed=7)
    obs_b, info_b = _make(env_id, "train").reset(seed=7)
    assert info_a["scenario"] == info_b["scenario"]
    np.testing.assert_array_equal(obs_a, obs_b)
    again, _ = train.reset(seed=7)  # the same env, reset again
    np.testing.assert_array_equal(obs_a, again)
    _, info_t = test.reset(seed=7)
    sa, st_ = info_a["scenario"], info_t["scenario"]
    assert sa != st_
    if family == "geo":
        assert sa["ci_start"] != st_["ci_start"] and sa["sim_seed"] != st_["sim_seed"]
    elif family == "pd":
        assert sa["ci_day"] != st_["ci_day"] and sa["pattern_day"] != st_["pattern_day"]
    else:
        assert sa["workload_seed"] != st_["workload_seed"] and sa["day_label"] != st_["day_label"]
    # another seed gives another scenario within a split
    _, info_c = _make(env_id, "train").reset(seed=8)
    assert info_c["scenario"] != sa


def test_geo_test_split_never_reaches_train_days() -> None:
    """geo-mini's series cover 2021-2024: train and validation start in 2021-2023, test in 2024, and
    validation days are never train days; 40 draws each."""
    seen: dict[str, set[pd.Timestamp]] = {}
    for split in ("train", "validation", "test"):
        env = _make("servegym/GeoRoute-v0", split)
        days = set()
        for seed in range(40):
            start = pd.Timestamp(env.episode_scenario(seed)[1]["ci_start"])
            days.add(start.floor("D"))
            assert (start.year == 2024) == (split == "test")
        seen[split] = days
    assert not seen["train"] & seen["validation"] and not seen["test"] & (seen["train"] | seen["validation"])


def test_geo_paper_splits_within_2022_by_day_of_month() -> None:
    env = gym.make("servegym/GeoRouteWindow-v0", config={"preset": "paper", "split": "test"}).unwrapped
    for seed in range(20):
        start = pd.Timestamp(env.episode_scenario(seed)[1]["ci_start"])
        assert start.year == 2022 and start.day >= 24


def test_geo_shifts_change_what_they_name_and_keep_the_spaces() -> None:
    base = _make("servegym/GeoRoute-v0", "test")
    _, info = base.reset(seed=1)
    for split, key, want in (("shift-load", "rate_rps", info["scenario"]["rate_rps"] * 1.5),
                             ("shift-stale", "poll_interval_s", 5.0),
                             ("shift-topology", "topology", "geo-mini-shift")):
        env = _make("servegym/GeoRoute-v0", split)
        _, inf = env.reset(seed=1)
        assert inf["scenario"][key] == pytest.approx(want) if isinstance(want, float) else inf["scenario"][key] == want
        assert env.observation_space == base.observation_space and env.action_space == base.action_space
        assert pd.Timestamp(inf["scenario"]["ci_start"]).year == 2024
    with pytest.raises(ConfigError, match="shift-topology"):
        gym.make("servegym/GeoRoute-v0", config={"preset": "paper", "split": "shift-topology"})


def test_geo_split_owns_ci_start() -> None:
    with pytest.raises(ConfigError, match=r"geo.ci_start .* is drawn by split = 'train'"):
        gym.make("servegym/GeoRoute-v0", config={**GEO, "geo": {"ci_start": "2023-01-01T00:00Z"}})
    env = gym.make("servegym/GeoRoute-v0", config={**GEO, "split": None,
                                                   "geo": {"ci_start": "2023-01-01T00:00Z"}}).unwrapped
    _, info = env.reset(seed=3)
    assert info["scenario"] == {"split": None, "track": None, "seed": 3, "ci_start": "2023-01-01T00:00Z",
                                "topology": "geo-mini",
                                "rate_rps": env.geo_config.rate_rps, "poll_interval_s": 1.0, "sim_seed": 3}


def test_pd_draws_disjoint_days_segments_and_held_out_traces() -> None:
    base = DayScenario()
    by_split: dict[str, set[str]] = {}
    for split in splits.splits_of("pd"):
        days = set()
        for seed in range(30):
            day, rec = draw_scenario(base, split, splits.scenario_rng(split, seed))
            dom = pd.Timestamp(rec["ci_day"]).day
            data = splits.data_split(split)
            assert {"train": dom <= 20, "validation": 21 <= dom <= 23, "test": dom >= 24}[data]
            assert 0.85 * 14.0 <= day.peak_rate_rps / rec["level_scale"] <= 1.15 * 14.0
            assert day.mix_knots[0][1:] == tuple(1.0 if c == rec["trace"] else 0.0 for c in
                                                 ("azure-code", "azure-conv", "mooncake"))
            days.add(rec["ci_day"])
        by_split[split] = days
    assert not by_split["train"] & (by_split["validation"] | by_split["test"])
    env = _make("servegym/PDProvision-v0", "shift-mooncake")
    _, info = env.reset(seed=0)
    assert info["scenario"]["trace"] == "mooncake" and np.allclose(info["mix_weights"], [0, 0, 1])
    with pytest.raises(ConfigError, match=r"scenario.start_hour = 5.0 is drawn by split = 'train'"):
        gym.make("servegym/PDProvision-v0", config={"scenario": {"start_hour": 5.0}})


def test_pd_start_hour_shifts_the_local_clock_and_the_grid_series() -> None:
    from servegym.envs.pd.sim.scenario import build_signals

    a = build_signals(DayScenario(horizon_steps=120))
    b = build_signals(DayScenario(horizon_steps=120, start_hour=1.0))
    np.testing.assert_allclose(b.hour[:60], a.hour[60:])  # one hour later on the clock
    np.testing.assert_allclose(b.base_rate_rps[:60], a.base_rate_rps[60:])
    np.testing.assert_allclose(b.ci_g_per_kwh[:60], a.ci_g_per_kwh[60:])  # and on the grid series


def test_npu_spaces_are_fixed_across_splits_and_models() -> None:
    envs = {s: _make("servegym/NPUAutoscale-v0", s) for s in ("train", "test", "shift-lveval")}
    spaces = {(e.observation_space.shape, tuple(e.action_space.nvec)) for e in envs.values()}
    assert len(spaces) == 1
    two = gym.make("servegym/NPUAutoscale-v0",
                   config={**NPU, "split_models": ["Llama3-8B", "Llama3-70B"]}).unwrapped
    models = set()
    for seed in range(6):
        obs, info = two.reset(seed=seed)
        models.add(info["scenario"]["model"])
        assert two.observation_space.contains(obs) and two.cluster_config.model == info["scenario"]["model"]
        assert tuple(two.action_space.nvec) == next(iter(spaces))[1]
        masks = np.split(two.action_masks(), np.cumsum(two.action_space.nvec)[:-1])
        assert all(m.any() for m in masks)
    assert models == {"Llama-3-8B", "Llama-3-70B"}
    _, info = envs["shift-lveval"].reset(seed=0)
    assert info["scenario"]["trace"] == "lveval" and info["scenario"]["day_label"] == "Fri 2024-05-10"
    # the longest LVEval request fits the top prefill group
    lens = envs["shift-lveval"].workload.requests.input_tokens
    top_edge = max(edge for ph, edge in envs["shift-lveval"].groups if ph == "prefill")
    assert lens.max() <= top_edge


def test_npu_splits_replay_their_own_2024_days() -> None:
    """Each npu split draws its days of the 2024 Azure week (train, validation and test weekdays disjoint as
    dates; the weekend shift on Saturdays and Sundays; the length shifts on the test day), 30 draws each."""
    from servegym.envs.npu.sim import azure2024
    from servegym.envs.npu.sim.workloads import AZURE2024_TRACE

    dates: dict[str, set[str]] = {}
    for split in splits.splits_of("npu"):
        for seed in range(30):
            sc = npu_env.draw_scenario(split, seed)
            tr = AZURE2024_TRACE[sc["azure_trace"]]
            want = {"shift-weekend": "weekend", "train": "train", "validation": "validation"}.get(split, "test")
            assert sc["day"] in azure2024.SPLIT_DAYS[tr][want]
            assert sc["day_label"] == azure2024.day_label(tr, sc["day"])
            dates.setdefault(want, set()).add(sc["day_label"])
    assert all(d.split()[0] in ("Sat", "Sun") for d in dates["weekend"])
    assert all(d.split()[0] not in ("Sat", "Sun") for w in ("train", "validation", "test") for d in dates[w])
    for a, b in (("train", "validation"), ("train", "test"), ("validation", "test"), ("test", "weekend")):
        assert not dates[a] & dates[b], (a, b)


def test_npu_split_owns_the_scenario_fields() -> None:
    for field, value in (("model", "Llama3-8B"), ("trace", "lveval"), ("rate_rpm", 100.0), ("start_hour", 3.0)):
        with pytest.raises(ConfigError, match=rf"{field} = .* is drawn by split = 'test'"):
            npu_env.NPUEnvConfig.from_dict({field: value, "split": "test"})
    with pytest.raises(ConfigError, match="split_models"):
        npu_env.NPUEnvConfig.from_dict({"split_models": ["GPT-5"]})


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["geo-mini", "geo-paper"]), st.integers(0, 72))
def test_split_days_are_disjoint_and_windows_stay_inside(topology: str, window: int) -> None:
    from servegym.envs.grid import get_topology

    hours = get_topology(topology).common_hours()
    try:
        out = {s: splits.split_days(s, hours[0], hours[-1], (0.0, float(window))) for s in splits.BASE_SPLITS}
    except ConfigError:
        assert window > 48  # only windows longer than the 3-day validation blocks of 2022 run out
        return
    # every day an episode window touches belongs to its split: windows of different splits never overlap
    n_days = max(1, -(-window // 24))
    floors = {s: {d + pd.Timedelta(days=k) for d in days for k in range(n_days)} for s, days in out.items()}
    assert not floors["train"] & floors["test"] and not floors["validation"] & floors["test"]
    assert not floors["train"] & floors["validation"]
    for days in out.values():
        assert days.min() >= hours[0] and days.max() + pd.Timedelta(hours=window) <= hours[-1] + pd.Timedelta(hours=1)


def test_scenario_seed_differs_per_split_and_is_deterministic() -> None:
    a = {s: splits.scenario_seed(s, 0) for s in splits.splits_of("geo")}
    assert len(set(a.values())) == len(a)
    assert splits.scenario_seed("train", 0) == splits.scenario_seed("train", 0)
    assert splits.check_split("pd", None) is None
