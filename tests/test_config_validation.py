"""Config fields are type-checked first and named, every env takes ``gym.make(id, key=value)``, weights are
finite, and the expected request count of a run has a ceiling with an explicit override (issue #15,
defects 3 and 6)."""

from __future__ import annotations

import math

import gymnasium as gym
import pytest
from servegym.envs.geo.env_common import GeoEnvConfig
from servegym.envs.geo.sim.config import preset
from servegym.envs.npu.env import NPUEnvConfig
from servegym.envs.pd.env import PDEnvConfig

import servegym  # noqa: F401  (registers the ids)
from servegym.cli import main
from servegym.errors import MAX_EXPECTED_REQUESTS, ConfigError

NPU_TINY = {"model": "Llama3-8B", "hours": 1.0, "n_candidates": 1, "split": None}  # a configured scenario
BAD = [("string", "1.0"), ("none", None), ("list", [1.0]), ("nan", math.nan), ("inf", math.inf),
       ("complex", 1j), ("bool", True)]


def _geo(field: str, v):
    if field.startswith("geo."):
        return GeoEnvConfig.from_dict({"preset": "mini", "geo": {field[4:]: v}})
    return GeoEnvConfig.from_dict({"preset": "mini", field: v})


def _pd(field: str, v):
    if field.startswith("scenario."):
        return PDEnvConfig.from_dict({"scenario": {field[9:]: v}})
    return PDEnvConfig.from_dict({field: v})


def _npu(field: str, v):
    return NPUEnvConfig.from_dict({**NPU_TINY, field: v})


# (builder, field, whether None is allowed there)
FIELDS = [
    (_geo, "w_slo", False), (_geo, "w_carbon", False), (_geo, "max_steps", True), (_geo, "geo.rate_rps", False),
    (_geo, "geo.duration_s", False), (_geo, "geo.nodes_per_dc", False), (_geo, "geo.pue", True),
    (_pd, "slo_weight", False), (_pd, "objective_weight", False), (_pd, "cap_weight", False), (_pd, "pue", False),
    (_pd, "gpu_budget", False), (_pd, "scenario.peak_rate_rps", False), (_pd, "scenario.horizon_steps", False),
    (_npu, "slo_penalty", False), (_npu, "objective_weight", False), (_npu, "hours", False),
    (_npu, "rate_rpm", True), (_npu, "n_candidates", False), (_npu, "start_hour", False),
]


@pytest.mark.parametrize(("build", "field", "none_ok"), FIELDS, ids=[f"{b.__name__[1:]}-{f}" for b, f, _ in FIELDS])
@pytest.mark.parametrize(("kind", "value"), BAD, ids=[k for k, _ in BAD])
def test_bad_field_types_are_config_errors_naming_the_field(build, field, none_ok, kind, value) -> None:
    if value is None and none_ok:
        pytest.skip("this field accepts None, so there is no error to check (nothing wrong)")
    with pytest.raises(ConfigError) as exc:
        build(field, value)
    msg = str(exc.value)
    assert field.split(".")[-1] in msg and "\n" not in msg


@pytest.mark.parametrize(("build", "field"), [(_geo, "w_slo"), (_geo, "w_carbon"), (_pd, "slo_weight"),
                                              (_pd, "cap_weight"), (_pd, "objective_weight"), (_npu, "slo_penalty"),
                                              (_npu, "objective_weight")])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_reward_weights_are_rejected(build, field, value) -> None:
    with pytest.raises(ConfigError, match=field):
        build(field, value)


@pytest.mark.parametrize(("env_id", "base", "key", "value"), [
    ("servegym/GeoRoute-v0", {"preset": "mini"}, "w_slo", 2.5),
    ("servegym/GeoRouteWindow-v0", {"preset": "mini"}, "w_slo", 2.5),
    ("servegym/PDProvision-v0", {}, "slo_weight", 3.5),
    ("servegym/NPUAutoscale-v0", NPU_TINY, "slo_penalty", 7.0),
])
def test_every_env_takes_keyword_overrides(env_id: str, base: dict, key: str, value: float) -> None:
    env = gym.make(env_id, config=dict(base), **{key: value})
    assert getattr(env.unwrapped.config, key) == value
    env.close()
    # keywords update a config object too, and a misspelt keyword names the allowed fields
    env = gym.make(env_id, config=env.unwrapped.config, **{key: value + 1})
    assert getattr(env.unwrapped.config, key) == value + 1
    env.close()
    with pytest.raises(ConfigError, match="unexpected keyword argument 'not_a_field'; allowed: config") as err:
        gym.make(env_id, config=dict(base), not_a_field=1)
    assert isinstance(err.value, TypeError)  # what RL clients catch to retry without an optional argument


# ---------------------------------------------------------------------------------------- request ceiling

@pytest.mark.parametrize(("rate", "duration"), [(1e12, 200.0), (4000.0, 1e5), (1e6, 100.0)])
def test_geo_expected_requests_have_a_ceiling(rate: float, duration: float) -> None:
    with pytest.raises(ConfigError, match=r"expected requests; allowed: <= 20,000,000.*max_expected_requests"):
        preset("mini", rate_rps=rate, duration_s=duration)
    with pytest.raises(ConfigError, match="max_expected_requests"):
        gym.make("servegym/GeoRoute-v0", config={"preset": "mini", "geo": {"rate_rps": rate, "duration_s": duration}})


def test_geo_ceiling_has_an_explicit_override() -> None:
    cfg = preset("mini", rate_rps=1e6, duration_s=100.0, max_expected_requests=200_000_000)
    assert cfg.max_expected_requests == 200_000_000
    # the env takes the override through its geo dict (construction only: no simulation is built)
    GeoEnvConfig.from_dict({"preset": "mini", "geo": {"rate_rps": 1e6, "duration_s": 100.0,
                                                     "max_expected_requests": 200_000_000}})


def test_pd_request_mode_expected_requests_have_a_ceiling() -> None:
    big = {"peak_rate_rps": 10_000.0, "horizon_steps": 744, "period_s": 3600.0, "mix_block_s": 3600.0}
    with pytest.raises(ConfigError, match=r"scenario\.peak_rate_rps.*max_expected_requests"):
        PDEnvConfig.from_dict({"mode": "request", "scenario": big})
    PDEnvConfig.from_dict({"mode": "fluid", "scenario": big})  # the fluid model keeps no per-request state
    # the ceiling is raised explicitly, up to its own bound
    PDEnvConfig.from_dict({"mode": "request", "scenario": {**big, "peak_rate_rps": 50.0},
                           "max_expected_requests": 200_000_000})
    with pytest.raises(ConfigError, match=r"max_expected_requests = 10000000000000 is out of range"):
        PDEnvConfig.from_dict({"mode": "request", "scenario": big, "max_expected_requests": 10**13})


def test_npu_expected_requests_have_a_ceiling() -> None:
    with pytest.raises(ConfigError, match=r"rate_rpm.*max_expected_requests"):
        NPUEnvConfig.from_dict({**NPU_TINY, "rate_rpm": 1e12})
    NPUEnvConfig.from_dict({**NPU_TINY, "rate_rpm": 1e6, "max_expected_requests": 200_000_000})
    with pytest.raises(ConfigError, match=r"max_expected_requests = 1000000000 is out of range"):
        NPUEnvConfig.from_dict({**NPU_TINY, "rate_rpm": 1e7, "max_expected_requests": 10**9})
    # a week of Azure at Table 4's rate (16.8M requests) is under the default ceiling
    assert 1667.0 * 60 * 168 < MAX_EXPECTED_REQUESTS
    NPUEnvConfig.from_dict({**NPU_TINY, "trace": "azure", "hours": 168.0})


CLI_CEILING = [
    ["bench", "speed", "geo", "--rate", "1e12"],
    ["bench", "speed", "geo", "--sim-seconds", "1e12"],
    ["bench", "speed", "geo", "--rate", "inf"],
    ["geo", "compare", "--rate", "1e12", "--policies", "rr"],
    ["geo", "compare", "--load", "high", "--sim-seconds", "1e9", "--policies", "rr"],
    ["pd", "simulate", "--deployment", "1p1d", "--rate", "1e5", "--duration", "1e6"],
    ["npu", "compare", "--rate-rpm", "1e12", "--hours", "1"],
    ["npu", "compare", "--rate-rpm", "inf", "--hours", "1"],
]


@pytest.mark.parametrize("argv", CLI_CEILING, ids=[" ".join(a[:3]) + " " + a[3] for a in CLI_CEILING])
def test_cli_load_flags_have_a_ceiling(argv: list[str], capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "--max-requests" in err or "finite" in err or "--sim-seconds" in err


def test_cli_seeds_are_bounded(capsys) -> None:
    assert main(["geo", "compare", "--seeds", "100000000", "--policies", "rr", "--preset", "mini"]) == 2
    assert "--seeds" in capsys.readouterr().err


@pytest.mark.parametrize(("field", "value"), [("nodes_per_dc", 10**7), ("gpus_per_node", 10**4),
                                              ("max_num_seqs", 10**7)])
def test_geo_fleet_size_is_bounded(field: str, value: int) -> None:
    """A fleet that would allocate gigabytes of per-engine state is refused by name (no env is built)."""
    with pytest.raises(ConfigError, match=field):
        preset("mini", **{field: value})


def _string_fields() -> list[tuple[type, str]]:
    """Every string field (``str`` or ``str | None``) of the envs' config classes and the geo/pd nested ones."""
    import dataclasses
    import typing

    from servegym.envs.geo.sim.config import GeoConfig
    from servegym.envs.pd.sim.scenario import DayScenario

    out = []
    for cls in (GeoEnvConfig, GeoConfig, NPUEnvConfig, PDEnvConfig, DayScenario):
        hints = typing.get_type_hints(cls)
        out += [(cls, f.name) for f in dataclasses.fields(cls) if hints[f.name] in (str, str | None)]
    return out


@pytest.mark.parametrize(("cls", "field"), _string_fields(), ids=[f"{c.__name__}-{f}" for c, f in _string_fields()])
def test_a_string_field_given_another_type_names_its_values(cls: type, field: str) -> None:
    """``load = 0.8`` says which strings load takes, not just "a string": every string field of the configs has
    its FIELD_CHOICES entry, and an enumerated field's list holds its own default."""
    with pytest.raises(ConfigError, match=rf"\b{field} = 0.8 \(float\) is not allowed; allowed: ") as exc:
        cls(**{field: 0.8})
    allowed = str(exc.value).split("allowed: ", 1)[1]
    assert allowed not in ("a string", "a string or None")
    spec = cls.FIELD_CHOICES[field]
    default = getattr(cls(), field)
    if not isinstance(spec, str) and default is not None:
        assert str(default) in allowed.split(", "), allowed
