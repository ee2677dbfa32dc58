"""Trace loaders: shipped files reproduce PROVENANCE, rebuilds are byte-identical, bad files fail clearly."""

from __future__ import annotations

import gzip
import re
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from servegym.envs.data import build_traces
from servegym.envs.data.catalog import TRACES
from servegym.envs.traces import (
    MOONCAKE_MAX_INPUT_TOKENS,
    available_traces,
    load_lengths,
    load_trace,
    trace_stats,
)
from servegym.envs.workload import Requests

from servegym.errors import ConfigError, TraceFormatError

PROVENANCE = Path(str(resources.files("servegym.envs.data").joinpath("traces", "PROVENANCE.md")))


def _provenance_stats() -> dict[str, dict[str, float | None]]:
    text = PROVENANCE.read_text()
    header = "| " + " | ".join(build_traces.STATS_COLUMNS) + " |"
    assert header in text, "PROVENANCE.md lost its stats table"
    rows = {}
    for line in text[text.index(header):].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = {k: (None if v == "-" else float(v))
                          for k, v in zip(build_traces.STATS_COLUMNS[1:], cells[1:], strict=True)}
    return rows


PROV = _provenance_stats()


def _assert_matches(stats: dict, expected: dict) -> None:
    for key, want in expected.items():
        got = stats[key]
        if want is None:
            assert got is None, key
        else:
            # PROVENANCE rounds to 3 decimals (4 for the rate).
            assert got == pytest.approx(want, abs=6e-4 if key != "mean_rate_rps" else 6e-5), key


@pytest.mark.parametrize("name", list(TRACES))
def test_shipped_stats_match_provenance(name: str) -> None:
    assert name in PROV
    _assert_matches(trace_stats(name), PROV[name])


def test_expected_row_counts() -> None:
    assert PROV["azure-conv"]["rows"] == 19366
    assert PROV["azure-code"]["rows"] == 8819
    assert PROV["mooncake"]["rows"] == 12031
    assert PROV["arxiv"]["rows"] == 28257


def test_mooncake_filter_matches_paper_and_provenance() -> None:
    key = f"mooncake<={MOONCAKE_MAX_INPUT_TOKENS}"
    stats = trace_stats("mooncake", max_input_tokens=MOONCAKE_MAX_INPUT_TOKENS)
    _assert_matches(stats, PROV[key])
    # pd paper, Appendix B.4: the filter excludes 647 of the 12,031 requests.
    assert 12031 - stats["rows"] == 647
    req = load_trace("mooncake", max_input_tokens=MOONCAKE_MAX_INPUT_TOKENS)
    assert len(req) == 11384 and req.input_tokens.max() <= MOONCAKE_MAX_INPUT_TOKENS


def test_load_trace_returns_requests_relative_to_first_arrival() -> None:
    req = load_trace("azure-conv")
    assert isinstance(req, Requests) and len(req) == 19366
    assert req.arrival_s[0] == 0.0 and np.all(np.diff(req.arrival_s) >= 0)
    assert req.arrival_s[-1] == pytest.approx(3501.721937, abs=1e-6)
    assert req.input_tokens[:2].tolist() == [374, 396] and req.output_tokens[:2].tolist() == [44, 109]
    assert np.all(req.origin == 0)
    fast = load_trace("azure-conv", time_scale=0.5)
    np.testing.assert_allclose(fast.arrival_s, req.arrival_s * 0.5)


def test_lengths_only_set() -> None:
    with pytest.raises(ConfigError, match="no arrival times"):
        load_trace("arxiv")
    isl, osl = load_lengths("arxiv")
    assert isl.size == osl.size == 28257 and isl[0] == 3772 and osl[0] == 54
    assert available_traces(with_arrivals=True) == ["azure-conv", "azure-code", "mooncake"]


def test_unknown_name_and_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="azure-conv"):
        load_trace("no-such-trace")
    with pytest.raises(ConfigError, match="time_scale"):
        load_trace("azure-conv", time_scale=0)
    with pytest.raises(ConfigError, match="max_input_tokens"):
        load_trace("azure-conv", max_input_tokens=0)


def test_shipped_files_are_package_data() -> None:
    pkg = resources.files("servegym.envs.data")
    for info in TRACES.values():
        data = pkg.joinpath(info.file).read_bytes()
        assert data[:2] == b"\x1f\x8b"
        assert data[4:8] == b"\0\0\0\0", "gzip mtime must be 0 for reproducible builds"


def test_rebuild_is_byte_identical(shared_data: Path, tmp_path: Path) -> None:
    build_traces.build(shared_data, tmp_path)
    shipped = PROVENANCE.parent
    for orig in build_traces.ORIGINALS:
        assert (tmp_path / orig.out_file).read_bytes() == (shipped / orig.out_file).read_bytes(), orig.out_file
    assert (tmp_path / "PROVENANCE.md").read_text() == PROVENANCE.read_text()


def test_azure_file_keeps_original_bytes(shared_data: Path) -> None:
    shipped = resources.files("servegym.envs.data").joinpath(TRACES["azure-code"].file).read_bytes()
    assert gzip.decompress(shipped) == (shared_data / "azure_llm/AzureLLMInferenceTrace_code.csv").read_bytes()


# --------------------------------------------------------------------------- path loading and errors


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _error(path: Path) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as info:
        load_trace(path)
    err = info.value
    assert str(path) in str(err)
    return err


def test_generic_csv_mooncake_jsonl_and_gzip(tmp_path: Path) -> None:
    p = _write(tmp_path, "g.csv", "arrival_s,input_tokens,output_tokens\n1.5,10,2\n1.5,20,3\n4,30,4\n")
    req = load_trace(p)
    assert req.arrival_s.tolist() == [0.0, 0.0, 2.5] and req.input_tokens.tolist() == [10, 20, 30]
    j = _write(tmp_path, "m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}\n'
                                    '{"timestamp": 1500, "input_length": 6, "output_length": 2, "hash_ids": []}\n')
    req = load_trace(j)
    assert req.arrival_s.tolist() == [0.0, 1.5] and req.output_tokens.tolist() == [1, 2]
    z = tmp_path / "g.csv.gz"
    z.write_bytes(gzip.compress(p.read_bytes()))
    assert load_trace(z).input_tokens.tolist() == [10, 20, 30]


def test_bad_header(tmp_path: Path) -> None:
    err = _error(_write(tmp_path, "h.csv", "time,in,out\n0,1,1\n"))
    assert err.line == 1 and "header" in str(err) and "arrival_s,input_tokens,output_tokens" in str(err)


def test_negative_tokens(tmp_path: Path) -> None:
    err = _error(_write(tmp_path, "n.csv", "arrival_s,input_tokens,output_tokens\n0,5,5\n1,-3,5\n"))
    assert (err.line, err.field) == (3, "input_tokens")
    assert "line 3" in str(err) and "'input_tokens'" in str(err) and ">= 1" in str(err)


def test_zero_and_non_numeric_tokens(tmp_path: Path) -> None:
    err = _error(_write(tmp_path, "z.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                           "2023-11-16 18:17:03.97,5,5\n2023-11-16 18:17:04.0,5,0\n"))
    assert (err.line, err.field) == (3, "GeneratedTokens")
    err = _error(_write(tmp_path, "x.csv", "arrival_s,input_tokens,output_tokens\n0,5,5\n1,5,5\n2,abc,5\n"))
    assert (err.line, err.field) == (4, "input_tokens") and "not a number" in str(err)


def test_non_monotone_timestamps(tmp_path: Path) -> None:
    err = _error(_write(tmp_path, "t.csv", "arrival_s,input_tokens,output_tokens\n0,5,5\n2,5,5\n1,5,5\n3,5,5\n"))
    assert (err.line, err.field) == (4, "arrival_s") and "must not decrease" in str(err)
    err = _error(_write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                           "2023-11-16 18:17:03.9799600,5,5\n2023-11-16 18:17:02.0,5,5\n"))
    assert (err.line, err.field) == (3, "TIMESTAMP")


def test_bad_timestamp_and_missing_field(tmp_path: Path) -> None:
    err = _error(_write(tmp_path, "b.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,5\n"))
    assert (err.line, err.field) == (2, "TIMESTAMP")
    err = _error(_write(tmp_path, "m.csv", "arrival_s,input_tokens,output_tokens\n0,5,5\n1,5\n"))
    assert (err.line, err.field) == (3, "output_tokens") and "missing" in str(err)
    err = _error(_write(tmp_path, "e.csv", "arrival_s,input_tokens,output_tokens\n0,5,5\n1,5,5,9\n"))
    assert err.line == 3


def test_empty_and_header_only_files(tmp_path: Path) -> None:
    err = _error(_write(tmp_path, "empty.csv", ""))
    assert "empty file" in str(err)
    err = _error(_write(tmp_path, "head.csv", "arrival_s,input_tokens,output_tokens\n"))
    assert "no data rows" in str(err)


def test_blank_lines(tmp_path: Path) -> None:
    # Trailing blank lines are tolerated; an interior one is an error at its own line.
    assert len(load_trace(_write(tmp_path, "ok.csv", "arrival_s,input_tokens,output_tokens\n0,1,1\n\n\n"))) == 1
    err = _error(_write(tmp_path, "gap.csv", "arrival_s,input_tokens,output_tokens\n0,1,1\n\n2,1,1\n"))
    assert err.line == 3


def test_bad_json_line(tmp_path: Path) -> None:
    p = _write(tmp_path, "j.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
                                    '{"timestamp": 1, "input_length": 5, "output_length": 1\n')
    err = _error(p)
    assert err.line == 2 and "bad JSON" in str(err)
    p = _write(tmp_path, "k.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
                                    '{"timestamp": 1, "output_length": 1}\n')
    err = _error(p)
    assert (err.line, err.field) == (2, "input_length")
    p = _write(tmp_path, "n.jsonl", '{"timestamp": 5, "input_length": 5, "output_length": 1}\n'
                                    '{"timestamp": 1, "input_length": 5, "output_length": 1}\n')
    assert (_error(p).line, _error(p).field) == (2, "timestamp")


def test_error_message_format(tmp_path: Path) -> None:
    err = _error(_write(tmp_path, "n.csv", "arrival_s,input_tokens,output_tokens\n0,5,-1\n"))
    assert re.fullmatch(rf"{re.escape(str(tmp_path))}/n\.csv, line 2, field 'output_tokens': .*", str(err))


@pytest.mark.slow
def test_wheel_ships_the_traces_and_loads_without_the_source_tree(repo_root: Path, tmp_path: Path) -> None:
    import subprocess
    import sys
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    # Build from the files git tracks (what a fresh clone has), never from the working folder's extras.
    archive = subprocess.run(["git", "-C", str(repo_root), "archive", "HEAD"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", ".",
                    "-w", str(tmp_path / "whl")], cwd=src, check=True, capture_output=True, timeout=600)
    wheel = next((tmp_path / "whl").glob("servegym-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for info in TRACES.values():
        assert f"servegym/envs/data/{info.file}" in names
    assert "servegym/envs/data/traces/PROVENANCE.md" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("import servegym.envs.traces as t, sys; assert t.__file__.startswith(sys.argv[1]), t.__file__;"
            "print(t.trace_stats('azure-conv')['rows'], t.trace_stats('arxiv')['rows'])")
    res = subprocess.run([sys.executable, "-c", code, str(site)], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["19366", "28257"]
