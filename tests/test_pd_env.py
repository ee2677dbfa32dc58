"""servegym/PDProvision-v0: env checkers, determinism, masks, errors, fluid conservation, request mode."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.envs.pd.env import OBS_FIELDS, PDEnvConfig, PDProvisionEnv
from servegym.envs.pd.sim.scenario import DayScenario, build_signals, mixture_moments

import servegym  # noqa: F401  (registers the ids)
from servegym.errors import ActionError, ConfigError

SHORT = {"scenario": {"horizon_steps": 60}}


@pytest.fixture(scope="module")
def env() -> PDProvisionEnv:
    return PDProvisionEnv(SHORT)


def test_gymnasium_env_checker() -> None:
    made = gym.make("servegym/PDProvision-v0", config=SHORT, render_mode="ansi")
    gym_check_env(made.unwrapped, skip_render_check=False)


def test_sb3_env_checker() -> None:
    sb3_checker = pytest.importorskip("stable_baselines3.common.env_checker", reason="needs the rl extra: pip install -e '.[rl]'")
    sb3_checker.check_env(PDProvisionEnv(SHORT), warn=True)


def test_registered_make_runs_a_day() -> None:
    e = gym.make("servegym/PDProvision-v0")
    obs, info = e.reset(seed=3)
    assert obs.shape == (len(OBS_FIELDS),)
    steps, truncated = 0, False
    while not truncated:
        obs, r, terminated, truncated, info = e.step(np.array([info["reference_p"], info["reference_d"]]))
        assert not terminated and np.isfinite(r)
        steps += 1
    assert steps == 1440
    assert e.observation_space.contains(obs)


def _rollout(e: PDProvisionEnv, seed: int, n: int) -> tuple[np.ndarray, list[float], list[float]]:
    obs, _ = e.reset(seed=seed)
    rng = np.random.default_rng(99)
    obs_l, rew, pw = [obs], [], []
    for _ in range(n):
        obs, r, term, trunc, info = e.step(np.array([rng.integers(1, 9), rng.integers(1, 6)]))
        obs_l.append(obs)
        rew.append(r)
        pw.append(info["power_w"])
        if term or trunc:
            break
    return np.array(obs_l), rew, pw


def test_deterministic_under_seed(env: PDProvisionEnv) -> None:
    a = _rollout(env, 7, 50)
    b = _rollout(PDProvisionEnv(SHORT), 7, 50)
    assert np.array_equal(a[0], b[0]) and a[1] == b[1] and a[2] == b[2]
    c = _rollout(env, 8, 50)
    assert not np.array_equal(a[0], c[0])  # the seed matters (trace phase, Poisson counts)


def test_action_masks_never_empty_and_mask_zero() -> None:
    for budget, mp, md in ((16, 12, 8), (2, 1, 1), (5, 12, 12), (40, 3, 3)):
        e = PDProvisionEnv({"gpu_budget": budget, "max_prefill": mp, "max_decode": md, **SHORT})
        m = e.action_masks()
        assert m.shape == (mp + 1 + md + 1,)
        mp_mask, md_mask = m[: mp + 1], m[mp + 1:]
        assert mp_mask.any() and md_mask.any()
        assert not mp_mask[0] and not md_mask[0]
        # any pair of unmasked values fits within the budget only if each is <= budget - 1
        assert np.flatnonzero(mp_mask).max() <= budget - 1 and np.flatnonzero(md_mask).max() <= budget - 1


def test_masked_actions_are_adjusted_as_documented() -> None:
    e = PDProvisionEnv(SHORT)
    e.reset(seed=0)
    _, _, _, _, info = e.step(np.array([0, 0]))
    assert info["action_adjusted"] and (info["target_p"], info["target_d"]) == (1, 1)
    _, _, _, _, info = e.step(np.array([12, 8]))  # 20 GPUs > budget 16: scaled onto the budget
    assert info["action_adjusted"]
    assert info["target_p"] + info["target_d"] <= 16
    assert (info["target_p"], info["target_d"]) == (10, 6)


@pytest.mark.parametrize("bad", [np.array([13, 1]), np.array([1, -1]), np.array([1, 2, 3]), np.array([1.5, 2.0]),
                                 "2p1d", np.array([np.nan, 1.0])])
def test_bad_actions_raise_action_error(bad: object) -> None:
    e = PDProvisionEnv(SHORT)
    e.reset(seed=0)
    before = (e.step_index, list(e.state.active), e.state.backlog)
    with pytest.raises(ActionError, match="allowed"):
        e.step(bad)
    assert (e.step_index, list(e.state.active), e.state.backlog) == before  # no state corrupted


def test_step_after_truncation_raises() -> None:
    e = PDProvisionEnv({"scenario": {"horizon_steps": 2}})
    e.reset(seed=0)
    e.step(np.array([2, 1]))
    *_, trunc, _ = e.step(np.array([2, 1]))
    assert trunc
    with pytest.raises(ActionError, match="reset"):
        e.step(np.array([2, 1]))


@pytest.mark.parametrize("overrides, field", [
    ({"mode": "exact"}, "mode"), ({"objective": "money"}, "objective"), ({"gpu_budget": 1}, "gpu_budget"),
    ({"pue": 0.5}, "pue"), ({"ttft_slo_s": 0}, "ttft_slo_s"), ({"bogus": 1}, "unknown config key"),
    ({"scenario": {"peak_rate_rps": -1}}, "peak_rate_rps"), ({"scenario": {"diurnal": [1.0] * 23}}, "diurnal"),
    ({"scenario": {"ci_zone": "XX"}}, "zone"), ({"scenario": {"nope": 1}}, "unknown scenario field"),
    ({"scenario": {"ci_start_utc": "2030-01-01"}}, "ci_start_utc"),
    ({"initial_deployment": (12, 8)}, "initial_deployment"), ({"arrivals": "bursty"}, "arrivals"),
    ({"scenario": {"mix_knots": [(3, 1, 0, 0), (1, 0, 1, 0)]}}, "mix_knots"),
])
def test_bad_configs_name_the_field(overrides: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        PDProvisionEnv(overrides)


def test_default_config_roundtrip() -> None:
    d = PDProvisionEnv.default_config()
    assert d["scenario"]["period_s"] == 60.0 and d["scenario"]["horizon_steps"] == 1440
    cfg = PDEnvConfig.from_dict(d)
    assert cfg == PDEnvConfig()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), actions=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 8)),
                                                     min_size=1, max_size=40),
       delay=st.sampled_from([0.0, 30.0, 60.0, 150.0]))
def test_fluid_backlog_conservation(seed: int, actions: list[tuple[int, int]], delay: float) -> None:
    e = PDProvisionEnv({"startup_delay_s": delay, **SHORT})
    _, info = e.reset(seed=seed)
    for a in actions:
        _, _, term, trunc, info = e.step(np.array(a))
        assert info["backlog"] >= 0
        assert info["served_total"] + info["backlog"] == pytest.approx(info["arrived_total"], rel=1e-9, abs=1e-6)
        assert 0.0 <= info["slo_violation_pct"] <= 100.0
        assert info["n_p"] >= 1 and info["n_d"] >= 1
        assert info["n_p"] + info["pending_p"] == info["target_p"]
        if term or trunc:
            break


def test_startup_delay_and_immediate_removal() -> None:
    e = PDProvisionEnv({"startup_delay_s": 90.0, "initial_deployment": (2, 1), **SHORT})
    e.reset(seed=0)
    _, _, _, _, info = e.step(np.array([4, 2]))
    assert (info["n_p"], info["n_d"], info["pending_p"], info["pending_d"]) == (2, 1, 2, 1)
    _, _, _, _, info = e.step(np.array([4, 2]))  # ready at 90 s, inside the second period
    assert (info["n_p"], info["n_d"], info["pending_p"]) == (4, 2, 0)
    _, _, _, _, info = e.step(np.array([1, 1]))
    assert (info["n_p"], info["n_d"]) == (1, 1)


def test_overload_grows_backlog_and_violates() -> None:
    e = PDProvisionEnv({"initial_deployment": (1, 1), "arrivals": "mean", "split": None, **SHORT})  # the peak-hour day
    e.reset(seed=0)
    backlogs = []
    for _ in range(10):
        _, _, _, _, info = e.step(np.array([1, 1]))
        backlogs.append(info["backlog"])
    assert np.all(np.diff(backlogs) > 0)
    assert info["slo_violation_pct"] > 90.0 and info["ttft_s"] > 60


def test_power_within_ramp_bounds_and_energy_units() -> None:
    e = PDProvisionEnv(SHORT)
    _, info = e.reset(seed=1)
    cal = e.config.system.calibration
    for _ in range(20):
        _, _, _, _, info = e.step(np.array([3, 2]))
        it = info["it_power_w"]
        lo = 3 * cal.prefill_ramp.p0_w + 2 * cal.decode_ramp.p0_w
        hi = 3 * cal.prefill_ramp.p_sat_w + 2 * cal.decode_ramp.p_sat_w + 5 * 115.0
        assert lo - 1e-6 <= it <= hi + 1e-6
        assert info["energy_kwh"] == pytest.approx(info["power_w"] * 60 / 3.6e6)
        assert info["carbon_g"] == pytest.approx(info["energy_kwh"] * info["ci_g_per_kwh"])


@pytest.mark.parametrize("objective", ["energy", "carbon", "cost"])
def test_reward_objectives(objective: str) -> None:
    e = PDProvisionEnv({"objective": objective, "slo_weight": 0.0, "cap_weight": 0.0, "backlog_weight": 0.0, **SHORT})
    e.reset(seed=0)
    _, r, _, _, info = e.step(np.array([3, 2]))
    expect = {"energy": info["energy_kwh"], "carbon": info["carbon_g"] / 1000, "cost": info["cost_usd"]}[objective]
    assert r == pytest.approx(-expect)


def test_cap_excess_during_demand_response_event() -> None:
    # no split: the event at local hour 0 must cover the first period
    e = PDProvisionEnv({"scenario": {"dr_events": [(0.0, 1.0, 1_000.0)], "horizon_steps": 10}, "split": None})
    e.reset(seed=0)
    info = e.step(np.array([8, 8]))[-1]
    assert info["cap_w"] == 1_000.0 and info["cap_excess_kwh"] > 0
    assert info["cap_excess_kwh"] == pytest.approx((info["power_w"] - 1_000.0) * 60 / 3.6e6, rel=1e-9)


def test_scenario_signals_are_documented_shapes() -> None:
    sig = build_signals(DayScenario())
    # Monday 13 May 2024 of both traces peaks at 0.95 of the week peak (Tuesday's), which peak_rate_rps scales
    assert sig.base_rate_rps.max() == pytest.approx(14.0 * 0.95, rel=0.01)
    assert sig.band.shape == (2, 3, 1440) and sig.pattern.size == 0
    assert len(sig.mix_weights) <= 96 and np.allclose(sig.mix_weights.sum(axis=1), 1.0)
    assert sig.ci_g_per_kwh.size == 1440 and np.all(sig.ci_g_per_kwh > 0)
    assert set(np.unique(sig.cap_w)) == {12_000.0, 5_500.0, 6_500.0}


def test_mixture_moments_match_pooled_samples() -> None:
    """Exact mixture moments equal the moments of the share-weighted pooled distribution."""
    from servegym.envs.pd.sim.workload_moments import WorkloadMoments

    a = WorkloadMoments.from_distribution([100, 300], [10, 50])
    b = WorkloadMoments.from_distribution([1000, 2000, 4000], [20, 20, 200])
    import servegym.envs.pd.sim.scenario as sc

    orig = sc.component_moments
    try:
        sc.component_moments = lambda name: {"a": a, "b": b}[name]  # type: ignore[assignment]
        mix = mixture_moments(np.array([0.25, 0.75]), components=("a", "b"))
    finally:
        sc.component_moments = orig
    pooled = WorkloadMoments.from_distribution([100, 300, 1000, 2000, 4000], [10, 50, 20, 20, 200],
                                               [0.125, 0.125, 0.25, 0.25, 0.25])
    for f in ("in_m1", "in_m2", "in_m3", "in_m4", "out_mean", "out_var", "cov_in_out"):
        assert getattr(mix, f) == pytest.approx(getattr(pooled, f), rel=1e-12)


def test_render_ansi_one_line() -> None:
    e = PDProvisionEnv({"startup_delay_s": 0.0, **SHORT}, render_mode="ansi")
    e.reset(seed=0)
    e.step(np.array([3, 2]))
    line = e.render()
    assert isinstance(line, str) and "\n" not in line and " 3p2d " in line
    with pytest.raises(ConfigError, match="render_mode"):
        PDProvisionEnv(SHORT, render_mode="human")


def test_request_mode_runs_and_agrees_on_energy() -> None:
    cfg = {"scenario": {"horizon_steps": 6, "peak_rate_rps": 4.0}, "initial_deployment": (3, 2)}
    fl = PDProvisionEnv({**cfg, "mode": "fluid"})
    rq = PDProvisionEnv({**cfg, "mode": "request"})
    fl.reset(seed=2)
    rq.reset(seed=2)
    e_f = e_r = 0.0
    for _ in range(6):
        _, _, _, _, i_f = fl.step(np.array([3, 2]))
        _, _, _, _, i_r = rq.step(np.array([3, 2]))
        e_f += i_f["energy_kwh"]
        e_r += i_r["energy_kwh"]
        assert i_r["served_total"] <= i_r["arrived_total"]
    assert e_r == pytest.approx(e_f, rel=0.15)


def test_request_mode_deterministic_and_conserves() -> None:
    cfg = {"mode": "request", "scenario": {"horizon_steps": 4, "peak_rate_rps": 3.0}, "initial_deployment": (2, 1)}
    runs = []
    for _ in range(2):
        e = PDProvisionEnv(cfg)
        e.reset(seed=5)
        infos = [e.step(np.array(a))[-1] for a in ((2, 1), (3, 2), (1, 1), (2, 2))]
        runs.append([(i["energy_kwh"], i["served_total"], i["backlog"], i["slo_violation_pct"]) for i in infos])
        sim = e.state.sim.counters()
        assert sim["arrived"] == sim["finished"] + sim["in_prefill_queue"] + sim["in_decode"]
        assert infos[-1]["arrived_total"] == sim["arrived"]
    assert runs[0] == runs[1]
