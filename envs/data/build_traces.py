"""Rebuild the shipped trace files in ``traces/`` from the project's raw data.

Run ``python -m servegym.envs.data.build_traces --shared /work/shared/data``. The build is
reproducible: gzip is written with ``mtime=0`` and no file name, so a rebuild from the same
originals gives byte-identical files. Every original is checked against its sha256 first.

Transforms (one per output file):

* ``azure_conv.csv.gz`` / ``azure_code.csv.gz``: the Azure 2023 CSVs gzipped byte for byte
  (all rows, original columns ``TIMESTAMP,ContextTokens,GeneratedTokens``, CRLF line ends kept).
* ``mooncake_conversation.csv.gz``: the Mooncake ``conversation_trace.jsonl`` rewritten as CSV
  with header ``timestamp,input_length,output_length`` (timestamp in ms, as in the original);
  ``hash_ids`` (prefix-cache block hashes) are dropped because nothing in servegym models prefix
  caching and they are 3/4 of the bytes. All 12,031 rows are kept; the paper's <=38,000-input-token
  filter is applied at load time.
* ``arxiv_summarization_lengths.csv.gz``: Vidur's arXiv-summarization CSV reduced to its first two
  columns ``num_prefill_tokens,num_decode_tokens`` (copied as text); ``num_total_tokens`` and
  ``pd_ratio`` are derived columns and are dropped.

The summary statistics written to ``traces/PROVENANCE.md`` are computed here from the originals
with the standard library parsers (csv, json), independently of :mod:`servegym.envs.traces`, so
the tests that compare the loaders against PROVENANCE check two code paths against each other.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import gzip
import hashlib
import io
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from servegym.envs.data.catalog import MOONCAKE_CITATION, SPLITWISE_CITATION, TRACES, VIDUR_CITATION

# The pd paper (Appendix B.4) keeps Mooncake requests with input <= 38,000 tokens (context window 40,960).
MOONCAKE_MAX_INPUT_TOKENS = 38_000

DEFAULT_OUT = Path(__file__).resolve().parent / "traces"


@dataclass(frozen=True)
class Original:
    """A raw input file under ``--shared`` and its expected sha256 (from its folder's PROVENANCE.md)."""

    name: str          # catalog name of the output
    rel_path: str      # relative to --shared
    sha256: str
    out_file: str      # file name in traces/


ORIGINALS: tuple[Original, ...] = (
    Original("azure-conv", "azure_llm/AzureLLMInferenceTrace_conv.csv",
             "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8", "azure_conv.csv.gz"),
    Original("azure-code", "azure_llm/AzureLLMInferenceTrace_code.csv",
             "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6", "azure_code.csv.gz"),
    Original("mooncake", "mooncake/conversation_trace.jsonl",
             "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df",
             "mooncake_conversation.csv.gz"),
    Original("arxiv", "request_lengths/arxiv_summarization_llama2_tokenizer_vidur.csv",
             "9d3580538d915ca75e4aaaa54590b42dbb17abc6d74c8913310cf07c232adcdc",
             "arxiv_summarization_lengths.csv.gz"),
)

# Markdown table columns of the stats section; tests/test_traces.py parses this table.
STATS_COLUMNS = ("name", "rows", "duration_s", "mean_rate_rps", "isl_mean", "isl_p50", "isl_p99",
                 "osl_mean", "osl_p50", "osl_p99")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def gzip_bytes(data: bytes) -> bytes:
    """gzip with a fixed header (mtime 0, no file name) so rebuilds are byte-identical."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def _azure_seconds(stamp: str) -> float:
    """Seconds since 0001-01-01 of an Azure stamp like ``2023-11-16 18:17:03.9799600`` (no time zone)."""
    day, clock = stamp.split(" ")
    h, m, s = clock.split(":")
    return dt.date.fromisoformat(day).toordinal() * 86400.0 + int(h) * 3600 + int(m) * 60 + float(s)


def transform_azure(raw: bytes) -> tuple[bytes, dict[str, np.ndarray]]:
    rows = list(csv.reader(io.StringIO(raw.decode("utf-8"))))
    assert rows[0] == ["TIMESTAMP", "ContextTokens", "GeneratedTokens"], rows[0]
    t = np.array([_azure_seconds(r[0]) for r in rows[1:]])
    cols = {"t_s": t - t[0], "isl": np.array([int(r[1]) for r in rows[1:]]),
            "osl": np.array([int(r[2]) for r in rows[1:]])}
    return raw, cols


def transform_mooncake(raw: bytes) -> tuple[bytes, dict[str, np.ndarray]]:
    recs = [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
    out = io.StringIO()
    out.write("timestamp,input_length,output_length\n")
    for r in recs:
        out.write(f"{int(r['timestamp'])},{int(r['input_length'])},{int(r['output_length'])}\n")
    t = np.array([float(r["timestamp"]) for r in recs]) / 1000.0
    cols = {"t_s": t - t[0], "isl": np.array([int(r["input_length"]) for r in recs]),
            "osl": np.array([int(r["output_length"]) for r in recs])}
    return out.getvalue().encode("utf-8"), cols


def transform_arxiv(raw: bytes) -> tuple[bytes, dict[str, np.ndarray]]:
    rows = list(csv.reader(io.StringIO(raw.decode("utf-8"))))
    assert rows[0][:2] == ["num_prefill_tokens", "num_decode_tokens"], rows[0]
    out = io.StringIO()
    for r in rows:
        out.write(f"{r[0]},{r[1]}\n")
    cols = {"isl": np.array([int(r[0]) for r in rows[1:]]), "osl": np.array([int(r[1]) for r in rows[1:]])}
    return out.getvalue().encode("utf-8"), cols


TRANSFORMS = {"azure-conv": transform_azure, "azure-code": transform_azure,
              "mooncake": transform_mooncake, "arxiv": transform_arxiv}


def summary_stats(cols: dict[str, np.ndarray]) -> dict[str, float | int | None]:
    """rows; duration_s = last - first arrival; mean_rate_rps = rows / duration_s; ISL/OSL mean, p50, p99
    (numpy's default linear percentile). Length-only sets have no duration or rate (None)."""
    isl, osl = cols["isl"], cols["osl"]
    stats: dict[str, float | int | None] = {"rows": int(isl.size), "duration_s": None, "mean_rate_rps": None}
    if "t_s" in cols:
        duration = float(cols["t_s"][-1] - cols["t_s"][0])
        stats["duration_s"] = duration
        stats["mean_rate_rps"] = isl.size / duration
    for key, arr in (("isl", isl), ("osl", osl)):
        stats[f"{key}_mean"] = float(arr.mean())
        stats[f"{key}_p50"] = float(np.percentile(arr, 50))
        stats[f"{key}_p99"] = float(np.percentile(arr, 99))
    return stats


def _fmt(key: str, value: float | int | str | None) -> str:
    if value is None:
        return "-"
    if key in ("name", "rows"):
        return str(value)
    if key == "mean_rate_rps":
        return f"{value:.4f}"
    return f"{value:.3f}"


def provenance_markdown(results: list[tuple[Original, str, str, int, dict]],
                        extra_rows: Sequence[tuple[str, dict]] = ()) -> str:
    """The PROVENANCE.md text: sources, licences, hashes, transforms and the stats table."""
    lines = [
        "# Shipped traces and request-length sets",
        "",
        "Generated by `python -m servegym.envs.data.build_traces --shared /work/shared/data`",
        "(the module docstring of `envs/data/build_traces.py` documents every transform). Do not edit by",
        "hand: rebuild instead. gzip is written with mtime 0 and no file name, so rebuilds are byte-identical.",
        "",
        "## Sources and licences",
        "",
        "| name | file | source (repository, path @ commit that last changed it) | licence | cite |",
        "|---|---|---|---|---|",
    ]
    cites = {"azure-conv": SPLITWISE_CITATION, "azure-code": SPLITWISE_CITATION,
             "mooncake": MOONCAKE_CITATION, "arxiv": VIDUR_CITATION}
    for orig, _, _, _, _ in results:
        info = TRACES[orig.name]
        lines.append(f"| {orig.name} | `{orig.out_file}` | {info.source} | {info.license} | {cites[orig.name]} |")
    lines += [
        "",
        "Licence notes. Azure: the AzurePublicDataset repository licenses the data under Creative Commons",
        "Attribution 4.0 International and asks users to cite Splitwise (above). Mooncake: the repository's only",
        "licence is Apache-2.0 (`LICENSE-APACHE`); the trace README states no separate data licence. arXiv lengths:",
        "the vidur repository is MIT (Copyright (c) Microsoft Corporation); Vidur does not say which Hugging Face",
        "release of the arXiv-summarization documents it tokenized, and only token counts are shipped here.",
        "",
        "## Transforms and hashes",
        "",
        "| name | original (under ../shared/data) | original sha256 | transform | shipped sha256 | shipped bytes |",
        "|---|---|---|---|---|---|",
    ]
    transforms = {
        "azure-conv": "gzip of the original bytes (all rows, original columns, CRLF kept)",
        "azure-code": "gzip of the original bytes (all rows, original columns, CRLF kept)",
        "mooncake": "JSONL -> CSV `timestamp,input_length,output_length` (ms, tokens); `hash_ids` dropped; "
                    "all rows kept (the <=38,000-input filter is applied at load time)",
        "arxiv": "first two columns `num_prefill_tokens,num_decode_tokens` kept as text; derived "
                 "`num_total_tokens`, `pd_ratio` dropped",
    }
    for orig, orig_sha, out_sha, out_bytes, _ in results:
        lines.append(f"| {orig.name} | `{orig.rel_path}` | `{orig_sha}` | {transforms[orig.name]} | "
                     f"`{out_sha}` | {out_bytes} |")
    lines += [
        "",
        "## Summary statistics (computed from the originals by the build script)",
        "",
        "rows = requests; duration_s = last minus first arrival (s); mean_rate_rps = rows / duration_s (req/s);",
        "isl/osl = input/output tokens, mean and numpy linear-interpolated p50/p99. Azure timestamps carry no",
        "time zone; arrivals are taken relative to the first request. arXiv has no arrival times (`-`).",
        "The `mooncake` row is the whole file; `mooncake<=38000` applies the pd paper's filter (input <= 38,000",
        "tokens, Appendix B.4: it drops 647 of 12,031 rows), as `load_trace('mooncake', max_input_tokens=38000)` does.",
        "",
        "| " + " | ".join(STATS_COLUMNS) + " |",
        "|" + "---|" * len(STATS_COLUMNS),
    ]
    for orig, _, _, _, stats in results:
        row = {"name": orig.name, **stats}
        lines.append("| " + " | ".join(_fmt(k, row[k]) for k in STATS_COLUMNS) + " |")
    for label, stats in extra_rows:
        row = {"name": label, **stats}
        lines.append("| " + " | ".join(_fmt(k, row[k]) for k in STATS_COLUMNS) + " |")
    lines.append("")
    return "\n".join(lines)


def build(shared: Path, out_dir: Path) -> list[Path]:
    """Write every shipped trace file and PROVENANCE.md into ``out_dir``; returns the written paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    extra_rows = []
    written = []
    for orig in ORIGINALS:
        src = shared / orig.rel_path
        raw = src.read_bytes()
        digest = sha256_bytes(raw)
        if digest != orig.sha256:
            raise SystemExit(f"{src}: sha256 {digest} differs from the expected {orig.sha256}")
        payload, cols = TRANSFORMS[orig.name](raw)
        blob = gzip_bytes(payload)
        path = out_dir / orig.out_file
        path.write_bytes(blob)
        written.append(path)
        results.append((orig, digest, sha256_bytes(blob), len(blob), summary_stats(cols)))
        if orig.name == "mooncake":
            keep = cols["isl"] <= MOONCAKE_MAX_INPUT_TOKENS
            extra_rows.append((f"mooncake<={MOONCAKE_MAX_INPUT_TOKENS}",
                               summary_stats({k: v[keep] for k, v in cols.items()})))
    prov = out_dir / "PROVENANCE.md"
    prov.write_text(provenance_markdown(results, extra_rows))
    written.append(prov)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, required=True, help="the raw data folder (../shared/data)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    for path in build(args.shared, args.out):
        print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
