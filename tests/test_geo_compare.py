"""``servegym geo compare`` and the comparison runner (tiny mini-preset runs, a few seconds)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from servegym.envs.geo.reports.compare import METRICS, json_records, run_comparison, summarize
from servegym.envs.geo.sim.config import preset

from servegym.cli import main

BASE_KEYS = {"policy", "osl_mode", "seeds", *METRICS}
TINY = ["--preset", "mini", "--sim-seconds", "2"]


def _tiny_config(**kw):
    return preset("mini", load="moderate", duration_s=2.0, drain_s=30.0, osl_mode="oracle", **kw)


def test_cli_json_keys_and_files(tmp_path, capsys):
    out = tmp_path / "res"
    rc = main(["geo", "compare", *TINY, "--policies", "ll,greedy:0,milp", "--out-dir", str(out), "--json"])
    assert rc == 0
    recs = json.loads(capsys.readouterr().out)  # nothing but the JSON on stdout
    # RR is added as the reference before the asked policies.
    assert [r["policy"] for r in recs] == ["rr", "ll", "greedy:0", "milp"]
    for r in recs:
        assert set(r) == BASE_KEYS
        assert r["osl_mode"] == "oracle"
        assert r["seeds"] == [0]
        assert r["carbon_g"] > 0
        assert 0.0 <= r["slo_violation_pct"] <= 100.0
        assert r["ttft_p50_s"] <= r["ttft_p90_s"] <= r["ttft_p99_s"]
    assert recs[0]["carbon_saving_pct"] == 0.0
    by = {r["policy"]: r for r in recs}
    assert by["greedy:0"]["carbon_saving_pct"] > 0  # carbon-only routing beats RR on carbon
    assert by["milp"]["sched_overhead_ms"] > 0 and by["ll"]["sched_overhead_ms"] == 0
    for name in ("compare.png", "compare.csv", "compare_runs.csv", "compare.md"):
        assert (out / name).stat().st_size > 0
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    csv = pd.read_csv(out / "compare_runs.csv")
    assert list(csv["policy"]) == ["rr", "ll", "greedy:0", "milp"]


def test_cli_json_with_seeds_has_ci_fields(tmp_path, capsys):
    rc = main(["geo", "compare", *TINY, "--policies", "rr,moer", "--seeds", "2", "--out-dir", str(tmp_path), "--json"])
    assert rc == 0
    recs = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in recs] == ["rr", "moer"]
    for r in recs:
        assert set(r) == BASE_KEYS | {f"{m}_ci95" for m in METRICS}
        assert r["seeds"] == [0, 1]
    assert recs[0]["carbon_saving_pct"] == 0.0 and recs[0]["carbon_saving_pct_ci95"] == 0.0


def test_cli_table_on_stdout(tmp_path, capsys):
    rc = main(["geo", "compare", *TINY, "--policies", "greedy:0.5", "--out-dir", str(tmp_path)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "saving vs RR (%)" in text and "greedy:0.5" in text and "\nrr " in text


def test_unknown_policy_is_one_line_error(tmp_path, capsys):
    rc = main(["geo", "compare", *TINY, "--policies", "rr,bogus", "--out-dir", str(tmp_path)])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "'bogus'" in err and "greedy:<alpha>" in err and "milp" in err and "green-llm" in err
    assert not (tmp_path / "compare.csv").exists()


@pytest.mark.parametrize("argv", [["--sim-seconds", "0"], ["--seeds", "0"], ["--load", "extreme"], ["--osl", "psychic"]])
def test_bad_arguments_are_one_line_errors(tmp_path, capsys, argv):
    rc = main(["geo", "compare", "--preset", "mini", "--policies", "rr", "--out-dir", str(tmp_path), *argv])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("servegym: error:") and "\n" not in err


def test_unwritable_out_dir_fails_before_running(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc = main(["geo", "compare", *TINY, "--policies", "rr", "--out-dir", str(blocker / "sub")])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert "--out-dir" in err and "\n" not in err


def test_runner_is_deterministic_and_saving_is_against_rr_per_seed():
    cfg = _tiny_config()
    a = run_comparison(cfg, ["greedy:0"], seeds=[3, 4])
    b = run_comparison(cfg, ["greedy:0"], seeds=[3, 4])
    cols = [c for c in a.columns if c != "wall_s"]
    pd.testing.assert_frame_equal(a[cols], b[cols])
    assert list(a["policy"]) == ["rr", "rr", "greedy:0", "greedy:0"]
    rr = a[a["policy"] == "rr"].set_index("seed")["carbon_g"]
    g = a[a["policy"] == "greedy:0"].set_index("seed")["carbon_g"]
    assert (a.loc[a["policy"] == "rr", "carbon_saving_pct"] == 0).all()
    got = a[a["policy"] == "greedy:0"].set_index("seed")["carbon_saving_pct"]
    pd.testing.assert_series_equal(got, 100 * (1 - g / rr), check_names=False)
    # Different seeds are different runs.
    assert rr.loc[3] != rr.loc[4]


def test_process_pool_gives_the_same_rows():
    cfg = _tiny_config()
    a = run_comparison(cfg, ["rr", "milp"], seeds=1)
    b = run_comparison(cfg, ["rr", "milp"], seeds=1, workers=2)
    cols = [c for c in a.columns if c != "wall_s"]
    pd.testing.assert_frame_equal(a[cols], b[cols])


def test_summary_mean_and_ci_from_runs():
    runs = pd.DataFrame({"policy": ["rr"] * 3 + ["x"] * 3, "seed": [0, 1, 2] * 2, "osl_mode": "oracle",
                         **{m: [1.0, 2.0, 3.0, 2.0, 2.0, 2.0] for m in METRICS}})
    s = summarize(runs).set_index("policy")
    assert s.loc["rr", "carbon_g"] == 2.0
    # t(0.975, 2) = 4.3027; sd = 1; n = 3.
    assert s.loc["rr", "carbon_g_ci95"] == pytest.approx(4.302653 / 3 ** 0.5, rel=1e-5)
    assert s.loc["x", "ttft_p99_s_ci95"] == 0.0
    recs = json_records(runs)
    assert recs[1]["seeds"] == [0, 1, 2] and recs[1]["policy"] == "x"


def test_predicted_osl_mode_runs():
    cfg = _tiny_config().replace(osl_mode="predicted")
    runs = run_comparison(cfg, ["greedy:0.5"], seeds=1)
    assert set(runs["osl_mode"]) == {"predicted"}
    assert runs["carbon_g"].gt(0).all()


def test_a_previous_comparison_is_replaced_only_with_force(tmp_path, capsys):
    """As train and evaluate: --out-dir holding a comparison is refused (one line, nothing run or written)
    unless --force."""
    args = ["geo", "compare", *TINY, "--policies", "rr", "--out-dir", str(tmp_path), "--json"]
    assert main(args) == 0
    before = (tmp_path / "compare_runs.csv").read_bytes()
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already holds a comparison (compare_runs.csv, compare.csv" in err
    assert "pass --force to replace it" in err
    assert (tmp_path / "compare_runs.csv").read_bytes() == before
    (tmp_path / "compare_runs.csv").write_bytes(b"stale")
    assert main([*args, "--force"]) == 0
    assert (tmp_path / "compare_runs.csv").read_bytes().startswith(b"policy,seed")  # a new run, replaced
