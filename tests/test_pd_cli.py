"""``servegym pd`` commands run in-process through servegym.cli.main."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from servegym.envs.pd.sim.model import PDModel
from servegym.envs.pd.sim.workload_moments import WorkloadMoments

from servegym.cli import main


def test_capacity_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pd", "capacity", "--workload", "fixed:4096:256", "--deployment", "3p2d", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"mu", "mu_p", "mu_d", "batch", "mu_d_max", "power_w"} <= out.keys()
    ref = PDModel(WorkloadMoments.fixed(4096, 256)).capacity(3, 2)
    assert out["mu"] == pytest.approx(ref.mu) and out["power_w"] == pytest.approx(ref.power_w)
    assert out["mu"] == pytest.approx(min(3 * out["mu_p"], 2 * out["mu_d"]))


def test_capacity_overrides_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pd", "capacity", "--workload", "fixed:4096:256", "--deployment", "3p1d",
                 "--kv-tokens", "300000", "--reserve", "256", "--json"]) == 0
    big = json.loads(capsys.readouterr().out)
    assert big["kv_tokens"] == 300000 and big["reserve_tokens"] == 256
    assert main(["pd", "capacity", "--workload", "fixed:4096:256", "--deployment", "3p1d"]) == 0
    text = capsys.readouterr().out
    assert "3p1d" in text and "req/s" in text


def test_pareto_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    png = tmp_path / "front.png"
    assert main(["pd", "pareto", "--workload", "fixed:2048:256", "--max-instances", "6", "--json",
                 "--plot", str(png)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["deployments"] == 15
    caps = [r["mu"] for r in out["front"]]
    powers = [r["power_w"] for r in out["front"]]
    assert caps == sorted(caps) and powers == sorted(powers)
    assert {r["deployment"] for r in out["front"]} <= {r["deployment"] for r in out["exact_front"]}
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_validate_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["pd", "validate", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == (0 if out["passed"] else 1)
    caps = [c for c in out["checks"] if c["name"].startswith("capacity ") and c["required"]]
    assert len(caps) == 4 and out["passed"] is True and code == 0
    assert "legend" in out and {c["role"] for c in out["checks"]} == {"fitted", "held out", "info"}
    assert all(c["passed"] == (abs(c["rel_error"]) <= c["tolerance"]) for c in out["checks"]
               if c["tolerance"] is not None)
    assert out["passed"] == all(c["passed"] for c in out["checks"] if c["required"])


@pytest.mark.parametrize(("argv", "needle"), [
    (["pd", "capacity", "--workload", "fixed:4096", "--deployment", "3p2d"], "workload"),
    (["pd", "capacity", "--workload", "sharegpt", "--deployment", "3p2d"], "workload"),
    (["pd", "capacity", "--workload", "fixed:4096:256", "--deployment", "3x2"], "deployment"),
    (["pd", "capacity", "--workload", "fixed:4096:256", "--deployment", "0p2d"], "n_P"),
    (["pd", "capacity", "--workload", "fixed:4096:256", "--deployment", "1p1d", "--kv-tokens", "-1"], "kv_tokens"),
    (["pd", "pareto", "--workload", "fixed:4096:256", "--max-instances", "1"], "max_instances"),
])
def test_bad_input_is_one_line_error(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("servegym: error:") and needle in err and "\n" not in err


def test_validate_with_overridden_pool(capsys: pytest.CaptureFixture[str]) -> None:
    main(["pd", "validate", "--kv-tokens", "250000"])
    text = capsys.readouterr().out
    assert "C_tok = 250,000" in text and "capacity 3p1d" in text


def test_validate_passes_with_legend_and_exit_zero(capsys: pytest.CaptureFixture[str]) -> None:
    """Default (fitted C_tok): every required anchor passes, exit 0, and the output explains its result column."""
    assert main(["pd", "validate"]) == 0
    text = capsys.readouterr().out
    assert "required anchors: 7 of 7 pass" in text and "FAIL held out" not in text
    assert "PASS fitted" in text and text.count("PASS held out") == 6
    assert "result: PASS / FAIL = a required anchor" in text and "informational" in text
    assert max(len(line) for line in text.splitlines()) <= 120
    # SGLang's profiled pool (a named reading) misses the 3p1d capacity: a FAIL, and exit status 1.
    assert main(["pd", "validate", "--kv-tokens", "sglang-profiled"]) == 1
    text = capsys.readouterr().out
    assert "C_tok = 269,499" in text and "FAIL fitted" in text
    assert main(["pd", "validate", "--kv-tokens", "many"]) == 2
    assert "--kv-tokens" in capsys.readouterr().err


def test_pareto_picks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pd", "pareto", "--workload", "fixed:4096:256", "--rate", "3.1", "--budget", "3000", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # §5.3.1: at 3.1 req/s, 3p1d suffices (the paper removes a decode instance from 3p2d); with
    # rho_bar = 0.85 the model asks for 3.65 req/s, which 2p1d (4.43) already gives at less power.
    assert out["min_power"]["deployment"] == "2p1d"
    assert out["max_capacity"]["power_w"] <= 3000
    assert main(["pd", "pareto", "--workload", "fixed:4096:256", "--rate", "3.1", "--rho-bar", "0.65"]) == 0
    assert "3p1d" in capsys.readouterr().out.splitlines()[-1]


def test_calibrate_pd_kv_refits_and_writes_only_where_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from servegym.calibration.pd_kv import shipped_record

    assert main(["calibrate", "pd-kv"]) == 0
    text = capsys.readouterr().out
    assert "C_tok = 244,190 tokens" in text and "identical" in text and "written" not in text
    assert max(len(line) for line in text.splitlines()) <= 120
    out = tmp_path / "kv.json"
    assert main(["calibrate", "pd-kv", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(out.read_text()) == shipped_record()


def test_capacity_semantics_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pd", "capacity", "--workload", "mooncake", "--deployment", "1p1d", "--semantics", "sglang",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    from servegym.envs.pd.sim.workload_moments import parse_workload

    ref = PDModel(parse_workload("mooncake"), semantics="sglang").capacity(1, 1)
    assert out["semantics"] == "sglang" and out["mu"] == pytest.approx(ref.mu)
    assert out["mu"] > PDModel(parse_workload("mooncake")).capacity(1, 1).mu
    with pytest.raises(SystemExit) as exc:
        main(["pd", "capacity", "--workload", "mooncake", "--deployment", "1p1d", "--semantics", "vllm"])
    assert exc.value.code == 2 and "--semantics" in capsys.readouterr().err
