"""Every duration, horizon and count of a family's config has an upper bound, checked when the config is
built (a one-line ConfigError naming the field and the allowed range), so that a mistyped exponent never
hangs reset(); the unwrapped envs refuse step() before reset(); the CLI turns an unexpected error into
one line pointing to --debug."""

from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.envs.geo.env_common import GeoEnvConfig
from servegym.envs.geo.sim.config import GeoConfig, preset
from servegym.envs.npu.env import NPUEnvConfig
from servegym.envs.npu.sim.cluster import ClusterConfig
from servegym.envs.pd.env import PDEnvConfig

import servegym
from servegym.cli import main
from servegym.errors import MONTH_S, WEEK_S, ActionError, ConfigError

NPU_TINY = {"model": "Llama3-8B", "hours": 1.0, "n_candidates": 1, "split": None}


def _geo(**kw):
    return preset("mini", **kw)


def _geo_env(**kw):
    return GeoEnvConfig.from_dict({"preset": "mini", **kw})


def _pd(**kw):
    return PDEnvConfig.from_dict(kw)


def _npu(**kw):
    return NPUEnvConfig.from_dict({**NPU_TINY, **kw})


# (builder, kwargs, field named in the message, allowed range as printed)
TOO_BIG = [
    (_geo, {"drain_s": 1e18}, "drain_s", "[0, 86400]"),
    (_geo, {"duration_s": 1e12}, "duration_s", "(0, 604800]"),
    (_geo, {"trace": "azure-code", "duration_s": 1e12}, "duration_s", "(0, 604800]"),
    (_geo, {"ttft_slo_s": 1e9}, "ttft_slo_s", "(0, 3600]"),
    (_geo, {"tpot_slo_s": 1e9}, "tpot_slo_s", "(0, 60]"),
    (_geo, {"trace_time_scale": 1e9}, "trace_time_scale", "(0, 1000]"),
    (_geo, {"window_max_requests": 10**12}, "window_max_requests", "[1, 1e+06]"),
    (_geo, {"kv_capacity_tokens": 10**15}, "kv_capacity_tokens", "[1, 1e+09]"),
    (_geo, {"max_expected_requests": 10**15}, "max_expected_requests", "[1, 2e+08]"),
    (_geo_env, {"geo": {"drain_s": 1e18}}, "drain_s", "[0, 86400]"),
    (_geo_env, {"max_steps": 10**15}, "max_steps", "[1, 1,000,000,000]"),
    (_pd, {"scenario": {"horizon_steps": 100_000, "period_s": 3600.0, "mix_block_s": 3600.0}},
     "scenario.period_s x scenario.horizon_steps", f"<= {MONTH_S:g} s"),
    (_pd, {"ttft_slo_s": 1e12}, "ttft_slo_s", "(0, 3600]"),
    (_pd, {"tpot_slo_s": 1e12}, "tpot_slo_s", "(0, 60]"),
    (_pd, {"curriculum": [[24, 1]] * 1001}, "curriculum", "at most 1000"),
    (_pd, {"scenario": {"dr_events": [[1.0, 1.0, 1000.0]] * 1001}}, "scenario.dr_events", "at most 1000"),
    (_pd, {"max_expected_requests": 10**15}, "max_expected_requests", "[1, 2e+08]"),
    (_npu, {"hours": 1e9}, "hours", "[0.0833333, 168]"),
    (_npu, {"max_expected_requests": 10**15}, "max_expected_requests", "[1, 2e+08]"),
    (_npu, {"quota_chips": {"NPU-C": 10**12}}, "quota_chips[NPU-C]", "[0, 1e+06]"),
    (ClusterConfig, {"epoch_s": 1e12, "window_s": 2e12}, "epoch_s", "[60, 86400]"),
    (ClusterConfig, {"window_s": 1e12}, "window_s", f"[300, {WEEK_S:g}]"),
    (ClusterConfig, {"slo_factor": 1e12}, "slo_factor", "[1, 1000]"),
]


@pytest.mark.parametrize(("build", "kw", "field", "allowed"), TOO_BIG,
                         ids=[f"{b.__name__.strip('_')}-{f}" for b, _, f, _ in TOO_BIG])
def test_huge_values_fail_at_construction(build, kw, field, allowed) -> None:
    with pytest.raises(ConfigError) as info:
        build(**kw)
    msg = str(info.value)
    assert len(msg.splitlines()) == 1 and field in msg and allowed in msg, msg


def test_the_bounds_leave_real_use_alone() -> None:
    # a week of geo arrivals with a day of drain, a month of pd provisioning, a week of npu: all build
    _geo(duration_s=WEEK_S, drain_s=86_400.0, rate_rps=1.0)
    _pd(scenario={"horizon_steps": 744, "period_s": 3600.0, "mix_block_s": 3600.0})
    _npu(hours=168.0)


@settings(max_examples=40, deadline=None)
@given(duration=st.floats(1e-3, 1e30), drain=st.floats(0.0, 1e30))
def test_geo_durations_are_accepted_only_within_bounds(duration: float, drain: float) -> None:
    ok = duration <= WEEK_S and drain <= 86_400.0
    try:
        GeoConfig(duration_s=duration, drain_s=drain, rate_rps=1.0)
    except ConfigError as exc:
        assert not ok or "max_expected_requests" in str(exc) or "expected requests" in str(exc), exc
        return
    assert ok


@settings(max_examples=40, deadline=None)
@given(period=st.floats(1.0, 3600.0), horizon=st.integers(1, 100_000))
def test_pd_episode_span_is_accepted_only_within_a_month(period: float, horizon: int) -> None:
    from servegym.envs.pd.sim.scenario import DayScenario

    try:
        DayScenario(period_s=period, horizon_steps=horizon, mix_block_s=max(900.0, period))
    except ConfigError as exc:
        assert period * horizon > MONTH_S and "scenario.period_s x scenario.horizon_steps" in str(exc), exc
        return
    assert period * horizon <= MONTH_S


def test_a_split_without_room_for_the_episode_fails_at_construction() -> None:
    # a week of arrivals at 3600 grid seconds per simulated second is 69 years of CI clock: no start day
    with pytest.raises(ConfigError, match="has no start day"):
        gym.make("servegym/GeoRoute-v0", preset="mini", geo={"duration_s": WEEK_S, "rate_rps": 0.01},
                 ci_time_scale=3600.0)


@pytest.mark.parametrize("env_id", [e.id for e in servegym.ENV_SPECS])
def test_unwrapped_envs_refuse_step_before_reset(env_id: str) -> None:
    small = {"servegym/NPUAutoscale-v0": {"config": NPU_TINY}, "servegym/NPUAutoscaleResidual-v0": {"config": NPU_TINY}}
    env = gym.make(env_id, **small.get(env_id, {})).unwrapped
    try:
        with pytest.raises(ActionError, match="reset"):
            env.step(env.action_space.sample())
    finally:
        env.close()


def test_unexpected_errors_are_one_line_pointing_to_debug(tmp_path, monkeypatch, capsys) -> None:
    # a bug stands in here for anything servegym did not anticipate: the sweep loader raising ZeroDivisionError
    from servegym.agents import sweep

    def broken(path):
        return 1 / 0

    monkeypatch.setattr(sweep, "load_sweep", broken)
    assert main(["sweep", str(tmp_path / "s.yml")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ("servegym: unexpected error: ZeroDivisionError: division by zero (rerun with --debug for the "
                   "traceback, and please report it)")
    with pytest.raises(ZeroDivisionError):
        main(["sweep", str(tmp_path / "s.yml"), "--debug"])


def test_a_user_error_raised_on_a_ray_worker_is_one_line(capsys) -> None:
    # Ray re-raises a worker's error as RayTaskError(<its type>), whose message holds the worker's traceback;
    # the CLI prints the worker's own one-line message
    rx = pytest.importorskip("ray.exceptions")
    from servegym.cli import _cause

    worker = ConfigError("unknown config key(s) ['foo']; allowed: [...]")
    wrapped = rx.RayTaskError("run_task", "Traceback (most recent call last):\n  File x\nConfigError: ...",
                              worker).as_instanceof_cause()
    assert isinstance(wrapped, ConfigError) and len(str(wrapped).splitlines()) > 1
    assert _cause(wrapped) is worker
    assert _cause(worker) is worker
