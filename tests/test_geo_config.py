"""Geo scenario configs and presets: Table II values, validation errors that name the field."""

from __future__ import annotations

import pytest
from servegym.envs.geo.sim.cluster import GeoSimulation
from servegym.envs.geo.sim.config import PAPER_MODELS, GeoConfig, preset
from servegym.envs.grid import get_topology

from servegym.errors import ConfigError


def test_paper_preset_is_table_ii() -> None:
    cfg = preset("paper")
    assert cfg.topology == "geo-paper" and cfg.nodes_per_dc == 4 and cfg.gpus_per_node == 8
    assert cfg.engines_per_dc == 32 and len(get_topology(cfg.topology).sites) * cfg.engines_per_dc == 512
    assert (cfg.ttft_slo_s, cfg.tpot_slo_s, cfg.poll_interval_s, cfg.pue) == (3.0, 0.1, 1.0, 1.1)
    assert (cfg.window_s, cfg.window_max_requests) == (0.1, 300)
    assert [preset("paper", load=x).rate_rps for x in ("low", "moderate", "high")] == [1200, 2400, 4000]
    mix = preset("paper", model="Mixtral-8x7B", load="moderate")
    assert mix.tpot_slo_s == 0.2 and mix.rate_rps == 1200 and mix.engines_per_dc == 8


def test_small_presets_keep_the_paper_per_gpu_rate() -> None:
    paper = preset("paper", load="moderate")
    paper_gpus = 16 * paper.nodes_per_dc * paper.gpus_per_node
    for name in ("small", "mini"):
        cfg = preset(name, load="moderate")
        gpus = len(get_topology(cfg.topology).sites) * cfg.nodes_per_dc * cfg.gpus_per_node
        assert cfg.rate_rps == pytest.approx(paper.rate_rps * gpus / paper_gpus, rel=1e-3)
    assert preset("mini", decision_mode="window").decision_mode == "window"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"rate_rps": -5.0}, "rate_rps"),
        ({"duration_s": 0.0}, "duration_s"),
        ({"nodes_per_dc": 0}, "nodes_per_dc"),
        ({"poll_interval_s": 0.0}, "poll_interval_s"),
        ({"poll_mode": "sometimes"}, "poll_mode"),
        ({"decision_mode": "batch"}, "decision_mode"),
        ({"osl_mode": "psychic"}, "osl_mode"),
        ({"pue": 0.9}, "pue"),
        ({"topology": "moon"}, "topology"),
        ({"profile": "gpt-5_h100"}, "profile"),
        ({"window_max_requests": 0}, "window_max_requests"),
        ({"ci_start": "not a time"}, "ci_start"),
        ({"max_input_tokens": 10_000_000}, "max_input_tokens"),
    ],
)
def test_bad_fields_raise_config_error_naming_them(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        GeoConfig(**kwargs)


def test_tp_must_divide_gpus_per_node() -> None:
    with pytest.raises(ConfigError, match=r"gpus_per_node = 6 .*tp = 4"):
        preset("paper", model="Mixtral-8x7B", gpus_per_node=6)


def test_unknown_names_are_rejected() -> None:
    with pytest.raises(ConfigError, match="unknown GeoConfig fields"):
        preset("paper", rate=3)
    with pytest.raises(ConfigError, match="unknown GeoConfig fields"):
        GeoConfig().replace(nodes=2)
    with pytest.raises(ConfigError, match="preset"):
        preset("huge")
    with pytest.raises(ConfigError, match="model"):
        preset("paper", model="gpt")
    with pytest.raises(ConfigError, match="load"):
        preset("paper", load="extreme")


def test_kv_pool_smaller_than_longest_request_is_rejected() -> None:
    cfg = preset("mini", duration_s=1.0, kv_capacity_tokens=300)
    with pytest.raises(ConfigError, match="kv_capacity_tokens = 300"):
        GeoSimulation(cfg)


def test_every_paper_model_preset_builds() -> None:
    for model in PAPER_MODELS:
        cfg = preset("paper", model=model)
        assert cfg.gpus_per_node % cfg.engine_profile().tp == 0
