"""Wall time of the full best-fit table (48 buckets x prefill/decode, all allocations x 68 batches).

Target: DeepSeek-V3-671B in ≤ 10 s on the 2-core dev machine. NeuScale reports about
10 minutes per sequence length on 120 cores (paper §3.3). Run:
    .venv/bin/python benchmarks/npu_dse_speed.py [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

from servegym.envs.npu.catalog import MODELS
from servegym.envs.npu.dse import BATCH_BUCKETS, SEQ_BUCKETS, run_dse


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per model; the best is reported")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for name in MODELS:
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            table = run_dse(name)
            times.append(time.perf_counter() - t0)
        n_alloc = len(table.space)
        cells = n_alloc * len(BATCH_BUCKETS) * len(SEQ_BUCKETS) * 2
        rows.append({"model": name, "allocations": n_alloc, "cells": cells, "best_s": min(times),
                     "median_s": sorted(times)[len(times) // 2], "entries": len(table.entries())})
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'model':18s} {'allocs':>6s} {'cells':>10s} {'best_s':>7s} {'median_s':>8s}")
    for r in rows:
        print(f"{r['model']:18s} {r['allocations']:6d} {r['cells']:10d} {r['best_s']:7.2f} {r['median_s']:8.2f}")


if __name__ == "__main__":
    main()
