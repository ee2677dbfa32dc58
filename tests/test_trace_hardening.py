"""Trace files from users: spaced headers, huge numbers, time zones, deep JSON, huge lines and gzip bombs
give a result or a short :class:`TraceFormatError`, never another exception (issue #15, defect 4)."""

from __future__ import annotations

import gzip
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from servegym.envs.traces import MAX_TOKENS, load_lengths, load_trace

from servegym.errors import TraceFormatError

HEADER = "arrival_s,input_tokens,output_tokens\n"


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


def test_header_with_spaces_is_read(tmp_path: Path) -> None:
    p = _write(tmp_path, "t.csv", "arrival_s, input_tokens , output_tokens\n0.0, 10, 5\n1.5,20 , 7\n")
    r = load_trace(p)
    np.testing.assert_array_equal(r.arrival_s, [0.0, 1.5])
    np.testing.assert_array_equal(r.input_tokens, [10, 20])
    np.testing.assert_array_equal(r.output_tokens, [5, 7])
    isl, osl = load_lengths(_write(tmp_path, "l.csv", " input_tokens,output_tokens \n3,4\n"))
    assert isl.tolist() == [3] and osl.tolist() == [4]


@pytest.mark.parametrize(("name", "text", "field"), [
    ("digits.jsonl", '{"timestamp": 0, "input_length": ' + "9" * 5000 + ', "output_length": 5}\n', None),
    ("wrap.jsonl", f'{{"timestamp": 0, "input_length": {2**63 + 5}, "output_length": 5}}\n', "input_length"),
    ("wrap.csv", HEADER + f"0,{2**63 + 5},5\n", "input_tokens"),
    ("wrap64.csv", HEADER + f"0,5,{2**64}\n", "output_tokens"),
    ("over.csv", HEADER + f"0,{MAX_TOKENS + 1},5\n", "input_tokens"),
    ("nested.jsonl", '{"timestamp": 0, "input_length": {"a": [1]}, "output_length": 5}\n', "input_length"),
])
def test_huge_or_odd_numbers_are_clear_errors(tmp_path: Path, name: str, text: str, field: str | None) -> None:
    with pytest.raises(TraceFormatError) as exc:
        load_trace(_write(tmp_path, name, text))
    assert exc.value.line == 1 + name.endswith(".csv")
    assert exc.value.field == field


def test_deep_json_nesting_is_a_clear_error(tmp_path: Path) -> None:
    deep = "[" * 200_000 + "]" * 200_000
    p = _write(tmp_path, "deep.jsonl", '{"timestamp": 0, "input_length": 1, "output_length": 2}\n'
               '{"timestamp": 1, "input_length": ' + deep + ', "output_length": 5}\n')
    with pytest.raises(TraceFormatError, match="nested too deeply") as exc:
        load_trace(p)
    assert exc.value.line == 2


def test_time_zones_all_offsets_convert_to_utc_and_a_mix_is_refused(tmp_path: Path) -> None:
    azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    ok = _write(tmp_path, "ok.csv", azure + "2023-11-16 18:00:00+01:00,10,5\n2023-11-16 17:00:30Z,10,5\n"
                "2023-11-16 18:01:00+0100,10,5\n")
    np.testing.assert_allclose(load_trace(ok).arrival_s, [0.0, 30.0, 60.0])
    mixed = _write(tmp_path, "mixed.csv", azure + "2023-11-16 18:00:00+01:00,10,5\n2023-11-16 18:00:01,10,5\n")
    with pytest.raises(TraceFormatError, match="UTC offset") as exc:
        load_trace(mixed)
    assert exc.value.line == 3


@pytest.mark.parametrize("content", [b"\0" * (4 * 2**20), (HEADER + "0," + "1" * (4 * 2**20) + ",5\n").encode(),
                                     ("x" * (4 * 2**20)).encode()])
def test_errors_quote_a_bounded_part_of_the_file(tmp_path: Path, content: bytes) -> None:
    with pytest.raises(TraceFormatError) as exc:
        load_trace(_write(tmp_path, "big.csv", content))
    assert len(str(exc.value)) < 1000


def test_reading_is_capped_and_a_gzip_bomb_is_cut_off_while_streaming(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.csv.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as fh:
        fh.write(HEADER.encode())
        chunk = b"0,1,1\n" * 2**20
        for _ in range(24):  # ~150 MB of text in ~0.2 MB of gzip
            fh.write(chunk)
    assert bomb.stat().st_size < 2**20
    tracemalloc.start()
    try:
        with pytest.raises(TraceFormatError, match="max_bytes"):
            load_trace(bomb, max_bytes=2**20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20
    plain = _write(tmp_path, "plain.csv", HEADER + "0,1,1\n" * 100_000)
    with pytest.raises(TraceFormatError, match="max_bytes"):
        load_trace(plain, max_bytes=2**16)
    assert len(load_trace(plain)) == 100_000
