"""Inference speed of the shipped OSL predictor (``servegym.envs.geo.sim.osl.OSLPredictor``).

The paper's predictor "runs in under 0.1 ms per request". Run:
    .venv/bin/python benchmarks/osl_speed.py [--repeat 20] [--out benchmarks/results/osl_speed.json]
Reports the median wall time of ``predict_osl`` (features + forward pass + quantiles, input
validation included) per call and per request, for one request, a 300-request scheduler window,
and larger batches, with ISLs resampled from the azure-conv trace or all distinct.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
from servegym.envs.geo.sim.osl import OSLPredictor
from servegym.envs.traces import load_lengths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None, help="also write the rows as JSON here")
    args = ap.parse_args()
    pred = OSLPredictor.load()
    isl_all, _ = load_lengths("azure-conv")
    rng = np.random.default_rng(0)
    rows = []
    for kind in ("trace", "distinct"):
        for n in (1, 300, 10_000, 100_000, 1_000_000):
            if kind == "distinct" and n > 100_000:
                continue
            # "trace": ISLs resampled from azure-conv (repeats, as in a run); "distinct": every ISL
            # different (the worst case of the once-per-distinct-ISL evaluation).
            isl = rng.choice(isl_all, size=n) if kind == "trace" else rng.permutation(n) + 1
            pred.predict_osl(isl, "azure-llm", "azure-conv")  # warm-up
            times = []
            for _ in range(args.repeat if n <= 100_000 else 3):
                t0 = time.perf_counter()
                pred.predict_osl(isl, "azure-llm", "azure-conv")
                times.append(time.perf_counter() - t0)
            med = statistics.median(times)
            rows.append({"isl": kind, "batch": n, "median_call_ms": 1e3 * med, "us_per_request": 1e6 * med / n})
    print("| ISLs | batch (requests) | median per call (ms) | per request (us) |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['isl']} | {r['batch']} | {r['median_call_ms']:.3f} | {r['us_per_request']:.3f} |")
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
