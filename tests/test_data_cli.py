"""`servegym data list` / `servegym data show`: in-process through cli.main, once as a real subprocess."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from servegym.envs.data.catalog import TRACES, all_datasets, summarize

from servegym.cli import main
from servegym.errors import ConfigError


def test_list_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NAME", "KIND", "ROWS/ZONES", "LICENCE"]
    rows = {line.split()[0]: line for line in out[1:]}
    assert "19366 rows" in rows["azure-conv"] and "CC-BY-4.0" in rows["azure-conv"]
    assert "12031 rows" in rows["mooncake"] and "Apache-2.0" in rows["mooncake"]
    assert "28257 rows" in rows["arxiv"] and "MIT" in rows["arxiv"]
    assert set(TRACES) <= set(rows)


def test_list_json_covers_the_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "list", "--json"]) == 0
    names = [r["name"] for r in json.loads(capsys.readouterr().out)]
    assert names == list(all_datasets())


def test_show_json_reports_the_real_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "show", "azure-conv", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rows"] == 19366 and data["kind"] == "trace" and data["license"] == "CC-BY-4.0"
    assert data["duration_s"] == pytest.approx(3501.72, abs=0.01)
    assert data["mean_rate_rps"] == pytest.approx(5.530, abs=0.001)
    for key in ("isl_mean", "isl_p50", "isl_p99", "osl_mean", "osl_p50", "osl_p99", "source", "citation"):
        assert key in data
    assert "Splitwise" in data["citation"]


@pytest.mark.parametrize("name", ["mooncake", "arxiv", "azure-code"])
def test_show_text(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "show", name]) == 0
    out = capsys.readouterr().out
    assert f"rows           {summarize(name)['rows']}" in out or str(summarize(name)["rows"]) in out
    assert "isl_p99" in out and "license" in out


def test_unknown_name_is_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "show", "sharegpt"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sharegpt" in err[0] and "azure-conv" in err[0] and "mooncake" in err[0]
    with pytest.raises(ConfigError):
        summarize("sharegpt")


def _console_script() -> str:
    local = Path(sys.executable).parent / "servegym"
    found = str(local) if local.exists() else shutil.which("servegym")
    if found is None:
        pytest.skip("the servegym console script is not on PATH (install with pip install -e .); the CLI's other "
                    "tests call it in-process")
    return found


def test_console_script_subprocess(tmp_path: Path) -> None:
    res = subprocess.run([_console_script(), "data", "show", "azure-conv", "--json"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["rows"] == 19366
