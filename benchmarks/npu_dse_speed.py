"""Wall time of the full best-fit table (48 buckets x prefill/decode, all allocations x 68 batches).

Target: DeepSeek-V3-671B in ≤ 10 s on the 2-core dev machine. NeuScale reports about
10 minutes per sequence length on 120 cores (paper §3.3). Timed per model: the scoring model's
DSE (``run_dse`` defaults), the selection model's (``RooflineParams.selection()``), the selection DSE that
also tests its picks on the scoring model (what ``ConfigCatalog`` builds), and the whole catalog. Run:
    .venv/bin/python benchmarks/npu_dse_speed.py [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import time

# the catalog is timed as built, not read from the disk cache of the DSE tables (servegym.user_cache)
os.environ.setdefault("SERVEGYM_NO_CACHE", "1")

from servegym.envs.npu.sim.catalog import MODELS
from servegym.envs.npu.sim.cluster import ClusterConfig, ConfigCatalog
from servegym.envs.npu.sim.dse import BATCH_BUCKETS, SEQ_BUCKETS, run_dse
from servegym.envs.npu.sim.roofline import RooflineParams


def _best(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


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
        sel_s, _ = _best(lambda name=name: run_dse(name, params=RooflineParams.selection()), args.repeat)
        tested_s, _ = _best(lambda name=name, table=table: run_dse(name, params=RooflineParams.selection(),
                                                                   slo_s=table.slo_s, test_params=RooflineParams()),
                            args.repeat)
        cat_s, _ = _best(lambda name=name: ConfigCatalog(ClusterConfig(model=name, n_candidates=1)), 1)
        rows.append({"model": name, "allocations": n_alloc, "cells": cells, "best_s": min(times),
                     "median_s": sorted(times)[len(times) // 2], "entries": len(table.entries()),
                     "selection_s": sel_s, "selection_tested_s": tested_s, "catalog_s": cat_s})
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'model':18s} {'allocs':>6s} {'cells':>10s} {'scoring_s':>9s} {'selection_s':>11s} {'tested_s':>8s} "
          f"{'catalog_s':>9s}")
    for r in rows:
        print(f"{r['model']:18s} {r['allocations']:6d} {r['cells']:10d} {r['best_s']:9.2f} {r['selection_s']:11.2f} "
              f"{r['selection_tested_s']:8.2f} {r['catalog_s']:9.2f}")


if __name__ == "__main__":
    main()
