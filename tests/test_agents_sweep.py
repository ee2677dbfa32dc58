"""Sweeps without a learning stack: a 2x2 grid of baselines on the local process pool, tidy and
deterministic; Parquet output; the Ray path's message when Ray is absent."""

from __future__ import annotations

import importlib.util
import json

import gymnasium as gym
import pandas as pd
import pytest
import yaml
from servegym.agents.sweep import _import_ray, load_sweep, run_task

import servegym  # noqa: F401  (registers the ids)
from servegym.cli import main
from servegym.errors import ConfigError

PD = "servegym/PDProvision-v0"
pytestmark = pytest.mark.skipif(PD not in gym.registry, reason=f"{PD} is not registered yet")
SHORT = {"config": {"scenario": {"horizon_steps": 24}}}


@pytest.fixture()
def sweep_yml(tmp_path):
    doc = {"name": "t", "env": PD,
           "scenarios": [{"name": "energy", "env_kwargs": SHORT},
                         {"name": "carbon", "env_kwargs": {"config": {**SHORT["config"], "objective": "carbon"}}}],
           "policies": ["static-peak", "min-power"], "seeds": [7]}
    p = tmp_path / "sweep.yml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_sweep_2x2_process_pool_matches_serial(sweep_yml, tmp_path, capsys) -> None:
    out = tmp_path / "res.csv"
    assert main(["sweep", str(sweep_yml), "--workers", "2", "--out", str(out), "--json"]) == 0
    df = pd.read_csv(out)
    assert len(df) == 4
    assert list(df.columns[:7]) == ["sweep", "scenario", "env_id", "policy", "seed", "reward", "length"]
    assert {"carbon_g", "energy_kwh", "slo_violation_pct", "wall_s"} <= set(df.columns)
    assert (df["length"] == 24).all()
    # The pool's rows equal the same cells run in this process (determinism across processes).
    cfg = load_sweep(sweep_yml)
    serial = pd.DataFrame([run_task(t) for t in cfg.tasks()]).sort_values(["scenario", "policy", "seed"])
    for col in ("reward", "carbon_g", "energy_kwh"):
        assert df[col].tolist() == pytest.approx(serial[col].tolist(), rel=1e-12)
    # The objective changes the reward, not the physics: same energy in both scenarios.
    e = df.pivot(index="policy", columns="scenario", values="energy_kwh")
    assert e["energy"].tolist() == pytest.approx(e["carbon"].tolist())
    summary = json.loads(capsys.readouterr().out)
    assert {(r["scenario"], r["policy"]) for r in summary} == {(s, p) for s in ("energy", "carbon")
                                                               for p in ("static-peak", "min-power")}


def test_sweep_parquet_and_bad_suffix(sweep_yml, tmp_path) -> None:
    if importlib.util.find_spec("pyarrow") is None:
        assert main(["sweep", str(sweep_yml), "--out", str(tmp_path / "r.parquet")]) == 2
        return
    assert main(["sweep", str(sweep_yml), "--workers", "1", "--out", str(tmp_path / "r.parquet")]) == 0
    assert len(pd.read_parquet(tmp_path / "r.parquet")) == 4
    assert main(["sweep", str(sweep_yml), "--workers", "1", "--out", str(tmp_path / "r.xlsx")]) == 2


def test_ray_absent_is_a_clear_message(monkeypatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ConfigError, match=r"--ray needs Ray, which is not installed; install it with pip install"):
        _import_ray()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="Ray is not installed (optional extra: pip install 'servegym[ray]')")
def test_sweep_on_local_ray_matches_pool(sweep_yml, tmp_path) -> None:
    out = tmp_path / "ray.csv"
    assert main(["sweep", str(sweep_yml), "--ray", "--workers", "2", "--out", str(out), "--json"]) == 0
    df = pd.read_csv(out)
    cfg = load_sweep(sweep_yml)
    serial = pd.DataFrame([run_task(t) for t in cfg.tasks()]).sort_values(["scenario", "policy", "seed"])
    assert df["carbon_g"].tolist() == pytest.approx(serial["carbon_g"].tolist(), rel=1e-12)


@pytest.mark.parametrize("name", ["geo", "pd", "npu"])
def test_shipped_sweep_examples_parse(name) -> None:
    """benchmarks/sweeps/*.yml name registered ids and their families' baselines (load_sweep checks both)."""
    from pathlib import Path

    cfg = load_sweep(Path(__file__).resolve().parents[1] / "benchmarks" / "sweeps" / f"{name}.yml")
    assert all(sc.env_id in gym.registry for sc in cfg.scenarios) and len(cfg.tasks()) >= 6


def test_sweep_prints_a_summary_table(sweep_yml, tmp_path, capsys) -> None:
    out = tmp_path / "res.csv"
    assert main(["sweep", str(sweep_yml), "--workers", "1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "t: 4 runs (2 policies x 2 scenarios x seed 7); means over seeds:" in text
    assert "energy: verdict: best mean reward: " in text and f"every run: {out}" in text
    assert all(len(line) <= 120 for line in text.splitlines())
