"""Loaders for request traces: the shipped ones by name, or a trace file by path.

Shipped names (see ``servegym/envs/data/traces/PROVENANCE.md``): ``azure-conv``, ``azure-code``,
``mooncake`` (traces with arrivals) and ``arxiv`` (request lengths only). A path may point to

* an Azure-format CSV: header ``TIMESTAMP,ContextTokens,GeneratedTokens``, wall-clock stamps;
* a Mooncake trace: JSONL with ``timestamp`` (ms), ``input_length``, ``output_length`` per line
  (other keys such as ``hash_ids`` are ignored), or the same three columns as a CSV header;
* a generic CSV: header ``arrival_s,input_tokens,output_tokens`` (seconds, tokens);
* a lengths-only CSV (for :func:`load_lengths`): ``num_prefill_tokens,num_decode_tokens`` (Vidur)
  or ``input_tokens,output_tokens``.

Files may be gzipped (``.gz``). Extra columns after the recognised ones are ignored; header names may
carry spaces around them. Token counts are integers in ``[1, MAX_TOKENS]``; timestamps either all carry a
UTC offset (converted to UTC) or none does. Reading stops with an error past ``MAX_TRACE_BYTES`` of text
(after decompression: a gzip bomb is cut off while streaming); a file with more data lines than the run's
request ceiling (``max_rows``) is refused by a streaming count before it is read; an error quotes at most
``QUOTE_CHARS`` characters of the file. Parsing is
vectorized (pandas); validation is a cheap vectorized pass that, on failure, reports the first
offending line as :class:`~servegym.errors.TraceFormatError` (file, 1-based line as in the file, field).
Arrival times are returned in seconds relative to the first request.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import re
import zlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from servegym.envs.data.catalog import TRACES
from servegym.envs.workload import Requests

from servegym.errors import (
    MAX_EXPECTED_REQUESTS,
    MAX_REQUEST_CEILING,
    ConfigError,
    TraceFormatError,
    check_range,
)

# The pd paper (Appendix B.4) keeps Mooncake requests with input <= 38,000 tokens so that the output
# fits its 40,960-token context window; this drops 647 of the 12,031 requests.
MOONCAKE_MAX_INPUT_TOKENS = 38_000
#: Largest token count a trace row may hold (10M: far above any model's context window; values past it,
#: e.g. >= 2**63, would wrap when stored as int64).
MAX_TOKENS = 10_000_000
#: Largest trace text read (after decompression), bytes; ``max_bytes=`` raises it explicitly.
MAX_TRACE_BYTES = 256 * 2**20
#: At most this many characters of file content are quoted in an error message.
QUOTE_CHARS = 80
_TZ_SUFFIX = re.compile(r"(?:Z|[+-]\d\d:?\d\d)$")


def _quote(text: Any) -> str:
    """``repr`` of file content, cut to :data:`QUOTE_CHARS` characters."""
    s = str(text)
    r = repr(s[: QUOTE_CHARS + 1])
    if len(r) > QUOTE_CHARS + 2:  # escapes (e.g. NUL bytes) count at their printed length
        return r[:QUOTE_CHARS] + f"... ({len(s):,} characters)"
    return r


@dataclass(frozen=True)
class _Format:
    name: str
    columns: tuple[str, ...]     # (time, input, output) or (input, output) for lengths-only formats
    time_kind: str | None        # "datetime", "ms", "s" or None (no arrivals)


_FORMATS: tuple[_Format, ...] = (
    _Format("azure", ("TIMESTAMP", "ContextTokens", "GeneratedTokens"), "datetime"),
    _Format("mooncake", ("timestamp", "input_length", "output_length"), "ms"),
    _Format("generic", ("arrival_s", "input_tokens", "output_tokens"), "s"),
    _Format("vidur-lengths", ("num_prefill_tokens", "num_decode_tokens"), None),
    _Format("lengths", ("input_tokens", "output_tokens"), None),
)


@dataclass(frozen=True)
class ParsedTrace:
    """A validated trace: arrivals (s from the first request; ``None`` for lengths-only data) and tokens."""

    source: str
    arrival_s: NDArray[np.float64] | None
    input_tokens: NDArray[np.int64]
    output_tokens: NDArray[np.int64]


def _expected_headers() -> str:
    return "; ".join(",".join(f.columns) for f in _FORMATS) + "; or JSONL with " + ",".join(_FORMATS[1].columns)


def _match_format(header: list[str]) -> _Format | None:
    for fmt in _FORMATS:
        if tuple(header[: len(fmt.columns)]) == fmt.columns:
            return fmt
    return None


def _first_bad(mask: NDArray[np.bool_]) -> int | None:
    idx = np.flatnonzero(mask)
    return int(idx[0]) if idx.size else None


def _validate_tokens(df: pd.DataFrame, col: str, source: str, line_of: NDArray[np.int64]) -> NDArray[np.int64]:
    raw = df[col]
    vals = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(vals) | (vals < 1) | (vals > MAX_TOKENS) | (vals != np.floor(vals))
    i = _first_bad(bad)
    if i is not None:
        text = raw.iloc[i]
        allowed = f"expected an integer token count >= 1 and <= {MAX_TOKENS:,}"
        if text is None or (isinstance(text, float) and np.isnan(text)) or str(text).strip() == "":
            problem = "missing value"
        elif not np.isfinite(vals[i]):
            problem = f"{_quote(text)} is not a number; {allowed}"
        else:
            problem = f"{_quote(text)} is out of range; {allowed}"
        raise TraceFormatError(source, int(line_of[i]), col, problem)
    return vals.astype(np.int64)


def _validate_time(df: pd.DataFrame, fmt: _Format, source: str, line_of: NDArray[np.int64]) -> NDArray[np.float64]:
    col = fmt.columns[0]
    raw = df[col]
    if fmt.time_kind == "datetime":
        stamps = _parse_stamps(raw, col, source, line_of)
        bad = stamps.isna().to_numpy()
        i = _first_bad(bad)
        if i is not None:
            raise TraceFormatError(source, int(line_of[i]), col,
                                   f"{_quote(raw.iloc[i])} is not a timestamp like '2023-11-16 18:17:03.9799600'")
        ns = stamps.to_numpy(dtype="datetime64[ns]").astype(np.int64)
        t = (ns - ns[0]).astype(np.float64) / 1e9
    else:
        vals = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
        i = _first_bad(~np.isfinite(vals) | (vals < 0))
        if i is not None:
            problem = ("missing value" if str(raw.iloc[i]).strip() in ("", "nan", "None")
                       else f"{_quote(raw.iloc[i])} is not a finite time >= 0")
            raise TraceFormatError(source, int(line_of[i]), col, problem)
        t = vals / 1000.0 if fmt.time_kind == "ms" else vals
    i = _first_bad(np.diff(t) < 0)
    if i is not None:
        raise TraceFormatError(source, int(line_of[i + 1]), col,
                               f"{_quote(raw.iloc[i + 1])} is earlier than the previous row's {_quote(raw.iloc[i])}; "
                               "timestamps must not decrease")
    return t - t[0]


def _parse_stamps(raw: pd.Series, col: str, source: str, line_of: NDArray[np.int64]) -> pd.Series:
    """ISO 8601 stamps; unparsable ones become NaT. With a UTC offset on every stamp (offsets may differ)
    they are converted to UTC; a file that mixes stamps with and without an offset is refused."""
    has_tz = raw.astype(str).str.strip().str.contains(_TZ_SUFFIX).to_numpy()
    if has_tz.any() and not has_tz.all():
        i = _first_bad(has_tz != has_tz[0])
        assert i is not None
        raise TraceFormatError(source, int(line_of[i]), col,
                               f"{_quote(raw.iloc[i])} {'has' if has_tz[i] else 'has no'} UTC offset, unlike line "
                               f"{int(line_of[0])}; expected every timestamp with an offset or none")
    try:
        return pd.to_datetime(raw, format="ISO8601", errors="coerce", utc=bool(has_tz.any()))
    except (ValueError, TypeError, OverflowError) as exc:
        raise TraceFormatError(source, None, col, f"timestamps do not parse ({type(exc).__name__}: "
                               f"{_quote(exc)})") from None


def _strip_trailing_blank(lines: list[str]) -> list[str]:
    end = len(lines)
    while end > 0 and not lines[end - 1].strip():
        end -= 1
    return lines[:end]


def _parse_jsonl(text: str, source: str) -> tuple[_Format, pd.DataFrame, NDArray[np.int64]]:
    fmt = _FORMATS[1]
    lines = _strip_trailing_blank(text.splitlines())
    try:
        # One C-level json call for the whole file; fall back to a per-line pass only to locate an error.
        records = json.loads("[" + ",".join(lines) + "]")
        if len(records) != len(lines) or not all(isinstance(r, dict) for r in records):
            raise ValueError
    except (ValueError, RecursionError):
        # ValueError covers JSONDecodeError and ints past Python's digit limit; RecursionError deep nesting.
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                raise TraceFormatError(source, n, None, "blank line inside the trace") from None
            try:
                rec = json.loads(line)
            except RecursionError:
                raise TraceFormatError(source, n, None, "bad JSON: nested too deeply") from None
            except ValueError as exc:
                raise TraceFormatError(source, n, None, f"bad JSON: {_quote(getattr(exc, 'msg', exc))}") from None
            if not isinstance(rec, dict):
                raise TraceFormatError(source, n, None, "each line must be a JSON object") from None
        raise TraceFormatError(source, None, None, "bad JSON") from None  # pragma: no cover
    df = pd.DataFrame.from_records(records, columns=list(fmt.columns))
    # Values are checked as text, like the CSV's: a nested object or a huge int never reaches numpy as such.
    df = df.map(lambda v: v if isinstance(v, (str, float)) or v is None else
                (str(v) if isinstance(v, int) and not isinstance(v, bool) else repr(v)[:QUOTE_CHARS + 1]))
    return fmt, df, np.arange(1, len(df) + 1, dtype=np.int64)


def _parse_csv(text: str, source: str) -> tuple[_Format, pd.DataFrame, NDArray[np.int64]]:
    first, _, _ = text.partition("\n")
    header = [h.strip() for h in first.rstrip("\r").split(",")]
    fmt = _match_format(header)
    if fmt is None:
        raise TraceFormatError(source, 1, None, f"unrecognised header {_quote(first.rstrip())}; expected one of: "
                               f"{_expected_headers()}")
    # None of these formats quotes fields, so a comma count finds rows with extra fields (pandas would
    # otherwise shift a whole row into the index or drop data silently).
    n_fields = len(header)
    counts = np.fromiter((line.count(",") for line in text.split("\n")), dtype=np.int64)
    i = _first_bad(counts[1:] >= n_fields)
    if i is not None:
        raise TraceFormatError(source, i + 2, None, f"{counts[i + 1] + 1} fields where the header has {n_fields}")
    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, skip_blank_lines=False,
                         index_col=False)
    except pd.errors.ParserError as exc:  # pragma: no cover - the comma check above catches field counts
        raise TraceFormatError(source, None, None, f"malformed CSV: {exc}") from None
    # The header matched with spaces stripped; strip the column names and values the same way.
    df = df.rename(columns=lambda c: c.strip())[list(fmt.columns)].apply(lambda s: s.str.strip())
    # Rows are file lines 2.. in order because blank lines are kept as empty rows; drop the trailing ones.
    empty = (df == "").all(axis=1).to_numpy()
    n = len(df)
    while n > 0 and empty[n - 1]:
        n -= 1
    df = df.iloc[:n]
    return fmt, df, np.arange(2, n + 2, dtype=np.int64)


def parse_trace_text(text: str, source: str, *, need_arrivals: bool = True) -> ParsedTrace:
    """Parse and validate trace text (CSV or JSONL); ``source`` names the file in error messages."""
    if not text.strip():
        raise TraceFormatError(source, None, None, "empty file (no header and no rows)")
    if text.lstrip().startswith("{"):
        fmt, df, line_of = _parse_jsonl(text, source)
    else:
        fmt, df, line_of = _parse_csv(text, source)
    if len(df) == 0:
        raise TraceFormatError(source, 2, None, "no data rows after the header")
    if need_arrivals and fmt.time_kind is None:
        raise TraceFormatError(source, 1, None, f"this file holds lengths only ({','.join(fmt.columns)}); "
                               "a trace needs arrival times: " + _expected_headers())
    offset = 0 if fmt.time_kind is None else 1
    isl = _validate_tokens(df, fmt.columns[offset], source, line_of)
    osl = _validate_tokens(df, fmt.columns[offset + 1], source, line_of)
    arrival = None if fmt.time_kind is None else _validate_time(df, fmt, source, line_of)
    return ParsedTrace(source, arrival, isl, osl)


def _too_big(source: str, max_bytes: int) -> TraceFormatError:
    return TraceFormatError(source, None, None, f"more than {max_bytes:,} bytes of text; allowed: <= "
                            f"{max_bytes:,} (raise it explicitly with max_bytes=)")


def _read_text(data: bytes, source: str, max_bytes: int = MAX_TRACE_BYTES) -> str:
    if data[:2] == b"\x1f\x8b":
        # Streamed, at most max_bytes + 1 out: a small gzip bomb cannot inflate gigabytes into memory.
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as gz:
                data = gz.read(max_bytes + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(source, None, None, f"corrupt gzip data: {_quote(exc)}") from None
    if len(data) > max_bytes:
        raise _too_big(source, max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(source, None, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _read_file(path: Path, max_bytes: int) -> bytes:
    """The file's bytes; a plain file past ``max_bytes`` is refused before it is read (a gzip file is
    read whole: it is then cut off while decompressing)."""
    with open(path, "rb") as fh:
        head = fh.read(2)
        if head != b"\x1f\x8b" and path.stat().st_size > max_bytes:
            raise _too_big(str(path), max_bytes)
        return head + fh.read(max_bytes + 1 if head != b"\x1f\x8b" else -1)


SCAN_CHUNK_BYTES = 8 * 2**20
"""Bytes read at a time by :func:`_count_lines` (its whole memory)."""


def _count_lines(path: Path, max_bytes: int) -> int:
    """Lines of text in ``path`` (gzip streamed), counting at most ``max_bytes`` + 1 bytes of it, read
    :data:`SCAN_CHUNK_BYTES` at a time: a trace's rows are counted before any of it is held or parsed. A
    corrupt gzip stream stops the count (the real read then reports it)."""
    n, last = 0, b""
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        fh: Any = gzip.GzipFile(fileobj=raw) if gz else raw
        left = max_bytes + 1
        try:
            while left > 0:
                chunk = fh.read(min(SCAN_CHUNK_BYTES, left))
                if not chunk:
                    break
                n += chunk.count(b"\n")
                left -= len(chunk)
                last = chunk[-1:]
        except (OSError, EOFError, zlib.error):
            pass
    return n + (last not in (b"", b"\n"))


def _check_rows(path: Path, max_bytes: int, max_rows: int) -> None:
    """A :class:`TraceFormatError` naming the file when it holds more than ``max_rows`` data lines (all but a
    header line), checked before it is read: parsing pays ~125 bytes per row in memory and time (a 28M-row
    CSV under the byte cap took 50 s and 3.5 GB in ``reset()``), and a run replays at most its request
    ceiling anyway."""
    rows = _count_lines(path, max_bytes) - 1
    if rows > max_rows:
        raise TraceFormatError(str(path), None, None, f"{rows:,} or more request rows; allowed: <= {max_rows:,} "
                               "(the config's max_expected_requests; raise it explicitly, up to "
                               f"{MAX_REQUEST_CEILING:,})")


def _freeze(a: NDArray[Any] | None) -> NDArray[Any] | None:
    if a is not None:
        a.setflags(write=False)
    return a


@functools.cache
def _load_shipped(name: str) -> ParsedTrace:
    info = TRACES[name]
    source = f"servegym.envs.data/{info.file}"
    data = resources.files("servegym.envs.data").joinpath(info.file).read_bytes()
    parsed = parse_trace_text(_read_text(data, source), source, need_arrivals=False)
    return ParsedTrace(source, _freeze(parsed.arrival_s), _freeze(parsed.input_tokens),
                       _freeze(parsed.output_tokens))


def available_traces(with_arrivals: bool = False) -> list[str]:
    """Shipped trace names; ``with_arrivals=True`` leaves out lengths-only sets (``arxiv``)."""
    return [n for n, info in TRACES.items() if not with_arrivals or info.kind == "trace"]


def _load(name_or_path: str | Path, max_bytes: int = MAX_TRACE_BYTES,
          max_rows: int = MAX_EXPECTED_REQUESTS) -> ParsedTrace:
    if isinstance(name_or_path, str) and name_or_path in TRACES:
        return _load_shipped(name_or_path)  # shipped data: within every ceiling
    check_range("max_bytes", max_bytes, 1, None)
    check_range("max_rows", max_rows, 1, MAX_REQUEST_CEILING)
    path = Path(name_or_path)
    if not path.is_file():
        raise ConfigError(f"trace = {_quote(name_or_path)} is neither a shipped trace nor a file; allowed names: "
                          f"{', '.join(TRACES)}")
    _check_rows(path, max_bytes, max_rows)
    return parse_trace_text(_read_text(_read_file(path, max_bytes), str(path), max_bytes), str(path),
                            need_arrivals=False)


def _filter_mask(isl: NDArray[np.int64], max_input_tokens: int | None) -> NDArray[np.bool_] | None:
    if max_input_tokens is None:
        return None
    check_range("max_input_tokens", max_input_tokens, 1)
    return isl <= max_input_tokens


def load_lengths(name_or_path: str | Path, max_input_tokens: int | None = None, max_bytes: int = MAX_TRACE_BYTES,
                 max_rows: int = MAX_EXPECTED_REQUESTS) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(input tokens, output tokens) of every request, in file order; optionally only inputs <= the cap.

    Works for traces and lengths-only sets. The arrays of shipped data are read-only views of a cache.
    ``max_rows``: a file with more data lines is refused before it is read (see :func:`load_trace`).
    """
    t = _load(name_or_path, max_bytes, max_rows)
    keep = _filter_mask(t.input_tokens, max_input_tokens)
    if keep is None:
        return t.input_tokens, t.output_tokens
    if not keep.any():
        raise ConfigError(f"max_input_tokens = {max_input_tokens} leaves no request of {t.source}")
    return t.input_tokens[keep], t.output_tokens[keep]


def load_trace(name_or_path: str | Path, time_scale: float = 1.0,
               max_input_tokens: int | None = None, max_bytes: int = MAX_TRACE_BYTES,
               max_rows: int = MAX_EXPECTED_REQUESTS) -> Requests:
    """Replay a trace as :class:`Requests` (origin 0), arrivals in s from the first request.

    ``time_scale`` multiplies every arrival time: 0.5 replays the trace twice as fast (double the
    rate), 2.0 half as fast. ``max_input_tokens`` drops requests with more input tokens (e.g.
    :data:`MOONCAKE_MAX_INPUT_TOKENS` for the pd paper's Mooncake filter); arrivals of the kept
    requests are not shifted. ``max_bytes`` caps the text read (:data:`MAX_TRACE_BYTES`). ``max_rows``: a
    file with more data lines is refused before any of it is read or parsed (counted in a streaming pass;
    default the request ceiling, :data:`~servegym.errors.MAX_EXPECTED_REQUESTS`; a config passes its own
    ``max_expected_requests``), since the byte cap alone still lets ~28M short rows through.
    """
    check_range("time_scale", time_scale, 0.0, None, low_inclusive=False)
    t = _load(name_or_path, max_bytes, max_rows)
    if t.arrival_s is None:
        raise ConfigError(f"trace = {str(name_or_path)!r} has request lengths but no arrival times; use "
                          "load_lengths() or length_sampler(); traces with arrivals: "
                          f"{', '.join(available_traces(with_arrivals=True))}")
    arrival, isl, osl = t.arrival_s, t.input_tokens, t.output_tokens
    keep = _filter_mask(isl, max_input_tokens)
    if keep is not None:
        arrival, isl, osl = arrival[keep], isl[keep], osl[keep]
    return Requests(arrival * time_scale, isl.copy(), osl.copy(), np.zeros(isl.size, dtype=np.int16))


def trace_stats(name_or_path: str | Path, max_input_tokens: int | None = None) -> dict[str, Any]:
    """rows, duration_s (last - first arrival), mean_rate_rps (rows / duration_s; req/s) and ISL/OSL
    mean, p50, p99 (tokens; numpy linear percentiles). Duration and rate are ``None`` without arrivals."""
    t = _load(name_or_path)
    keep = _filter_mask(t.input_tokens, max_input_tokens)
    isl, osl, arr = t.input_tokens, t.output_tokens, t.arrival_s
    if keep is not None:
        isl, osl = isl[keep], osl[keep]
        arr = None if arr is None else arr[keep]
    out: dict[str, Any] = {"rows": int(isl.size), "duration_s": None, "mean_rate_rps": None}
    if arr is not None and arr.size > 1:
        duration = float(arr[-1] - arr[0])
        out["duration_s"] = duration
        out["mean_rate_rps"] = isl.size / duration if duration > 0 else None
    for key, a in (("isl", isl), ("osl", osl)):
        out[f"{key}_mean"] = float(a.mean())
        out[f"{key}_p50"] = float(np.percentile(a, 50))
        out[f"{key}_p99"] = float(np.percentile(a, 99))
    return out
