"""Build the shipped Azure LLM inference trace 2024 series (``envs/data/azure2024/``).

``python -m servegym.envs.data.build_azure2024 --shared /work/shared/data`` reads the digitized series
in ``azure_llm_2024/`` (see that folder's PROVENANCE.md: the plots of the dataset's own analysis
notebook, turned into numbers by its ``digitize.py``) and writes two small gzipped CSVs:

* ``rate.csv.gz`` -- ``trace,minute,rate_low,rate_mid,rate_high``: invocations per minute of the coding
  and conversation traces, one row per plot pixel column (about 7.2 min), minutes since the trace's
  first midnight (coding 2024-05-10, conversation 2024-05-12, 00:00 UTC); rows copied as digitized.
* ``lengths_cdf.csv.gz`` -- ``trace,kind,tokens,cdf``: CDF (0-1) of input (``ContextTokens``) and output
  (``GeneratedTokens``) tokens per trace; ``cdf`` is the midpoint of the drawn line's upper and lower edge,
  made non-decreasing in ``tokens`` (running maximum) and ending at 1; several rows at one token count
  (the line's vertical runs) keep the largest.

gzip is written with mtime 0 and no file name, so rebuilds are byte-identical.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
from collections.abc import Sequence
from pathlib import Path

TRACES = {"coding": "coding_rate_per_min.csv", "conversation": "conversation_rate_per_min.csv"}
OUT = Path(__file__).resolve().parent / "azure2024"


def _rows(path: Path) -> list[list[str]]:
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    return [r for r in csv.reader(lines[1:])]


def rate_csv(src: Path) -> str:
    out = io.StringIO()
    out.write("trace,minute,rate_low,rate_mid,rate_high\n")
    for trace, name in TRACES.items():
        for minute, lo, mid, hi in _rows(src / name):
            out.write(f"{trace},{float(minute):.1f},{int(lo)},{int(mid)},{int(hi)}\n")
    return out.getvalue()


def cdf_csv(src: Path) -> str:
    out = io.StringIO()
    out.write("trace,kind,tokens,cdf\n")
    for kind, name in (("input", "input_tokens_cdf.csv"), ("output", "output_tokens_cdf.csv")):
        rows = _rows(src / name)
        for trace in TRACES:
            best: dict[int, float] = {}
            for tr, tok, hi, lo in rows:
                if tr != trace:
                    continue
                v = (float(hi) + float(lo)) / 200.0
                best[int(tok)] = max(best.get(int(tok), 0.0), v)
            run = 0.0
            toks = sorted(best)
            for i, t in enumerate(toks):
                run = max(run, best[t])
                if i == len(toks) - 1:
                    run = 1.0
                out.write(f"{trace},{kind},{t},{run:.5f}\n")
    return out.getvalue()


def build(shared: Path, out_dir: Path = OUT) -> list[Path]:
    src = shared / "azure_llm_2024"
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in (("rate.csv.gz", rate_csv(src)), ("lengths_cdf.csv.gz", cdf_csv(src))):
        p = out_dir / name
        tmp = p.with_suffix(".tmp")
        tmp.write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))
        tmp.replace(p)
        paths.append(p)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, required=True, help="folder holding azure_llm_2024/")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    for p in build(args.shared, args.out):
        print(p, p.stat().st_size, "bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
