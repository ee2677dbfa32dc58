"""`servegym npu dse` and `servegym npu catalog`, in process through servegym.cli.main."""

from __future__ import annotations

import json
import math

import pytest

from servegym.cli import main

KEYS = {"phase", "seq_len", "version", "chips", "tp", "pp", "batch", "latency_s", "energy_j_per_token",
        "usd_per_token"}


def test_dse_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["npu", "dse", "--model", "Llama-3-8B", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert isinstance(rows, list) and len(rows) == 96
    assert all(KEYS <= set(r) for r in rows)
    assert [r["seq_len"] for r in rows if r["phase"] == "prefill"][:3] == [128, 256, 384]
    assert {r["phase"] for r in rows} == {"prefill", "decode"}
    assert all(math.isfinite(r[k]) and r[k] > 0 for r in rows
               for k in ("latency_s", "energy_j_per_token", "usd_per_token", "slo_s"))
    assert all(r["version"] in {"NPU-A", "NPU-B", "NPU-C", "NPU-D"} and r["tp"] * r["pp"] == r["chips"]
               for r in rows)


def test_dse_one_phase_with_fallbacks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["npu", "dse", "--model", "Llama-3-70B", "--phase", "decode", "--fallbacks", "--json",
                 "--objective", "cost"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["phase"] for r in rows} == {"decode"}
    assert sum(r["role"] == "best" for r in rows) == 48
    assert {r["version"] for r in rows if r["role"] == "fallback"} == {"NPU-A", "NPU-B", "NPU-C", "NPU-D"}


def test_dse_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["npu", "dse", "--model", "DeepSeek-V3-671B", "--phase", "prefill"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("DeepSeek-V3-671B") and out[1].split()[:5] == ["phase", "seq", "len", "role", "vPod"]
    assert len(out) == 3 + 48 and out[3].split()[:2] == ["prefill", "128"]  # title, header, rule, 48 buckets
    assert "e+0" not in "\n".join(out) and max(map(len, out)) <= 120


@pytest.mark.parametrize(("argv", "needle"), [
    (["npu", "dse", "--model", "GPT-9"], "model = 'GPT-9'"),
    (["npu", "dse", "--model", "Llama-3-8B", "--phase", "train"], "phase = 'train'"),
    (["npu", "dse", "--model", "Llama-3-8B", "--objective", "carbon"], "objective = 'carbon'"),
])
def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    assert main(argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("servegym: error:") and needle in err[0]


def test_catalog(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["npu", "catalog", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in data["chips"]] == ["NPU-A", "NPU-B", "NPU-C", "NPU-D"]
    assert main(["npu", "catalog"]) == 0
    assert "usd_per_chip_hour".upper() in capsys.readouterr().out
