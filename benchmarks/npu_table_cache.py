"""CPU time of the npu configuration catalogs with the disk cache cold and warm (servegym.envs.npu.sim.table_cache).

Two measurements, each in a fresh cache folder (a tmp folder: the user's cache is never touched):

1. Per model, in one process: a catalog built with the cache empty (cold: the DSE, its Pareto fronts and the
   step tables, then the entries written), the same catalog again (warm: the tables read back), and once more
   in a second empty folder (the cold build measured again after the first, so the warm one is not favoured by
   anything the process warmed up). The warm/cold ratio is against the mean of the two cold builds.
2. A new user's first ``reset()`` of NPUAutoscale-v0 (``gym.make`` + ``reset(seed=0)``, each in a new process,
   imports excluded): with an empty cache folder, then with the folder the first process filled.

Run: ``.venv/bin/python benchmarks/npu_table_cache.py [--out benchmarks/results/npu_table_cache.md]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_CHILD = r"""
import json, os, resource, sys, time
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
import gymnasium as gym
import servegym  # noqa: F401
c0, w0 = cpu(), time.perf_counter()
env = gym.make("servegym/NPUAutoscale-v0")
env.reset(seed=0)
print(json.dumps({"cpu_s": cpu() - c0, "wall_s": time.perf_counter() - w0}))
"""


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _catalog_cpu(model: str, folder: str) -> float:
    from servegym.envs.npu.sim.config import ClusterConfig
    from servegym.envs.npu.sim.vpods import ConfigCatalog

    os.environ["SERVEGYM_CACHE_DIR"] = folder
    c0 = _cpu()
    ConfigCatalog(ClusterConfig(model=model))
    return _cpu() - c0


def _first_reset(folder: str) -> dict[str, float]:
    env = {**os.environ, "SERVEGYM_CACHE_DIR": folder, "OMP_NUM_THREADS": "1"}
    env.pop("SERVEGYM_NO_CACHE", None)
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="write the Markdown table here (atomically)")
    args = ap.parse_args()
    os.environ.pop("SERVEGYM_NO_CACHE", None)
    from servegym.envs.npu.sim.catalog import MODELS

    rows = []
    with tempfile.TemporaryDirectory(prefix="servegym-cache-bench-") as tmp:
        for name in MODELS:
            a, b = os.path.join(tmp, f"{name}-a"), os.path.join(tmp, f"{name}-b")
            cold = _catalog_cpu(name, a)
            warm = _catalog_cpu(name, a)
            cold2 = _catalog_cpu(name, b)
            size = sum(p.stat().st_size for p in Path(a).rglob("*.npz"))
            rows.append((name, cold, cold2, warm, size))
            print(f"{name}: cold {cold:.2f} / {cold2:.2f} CPU-s, warm {warm:.2f} CPU-s, {size / 1e6:.2f} MB", flush=True)
        folder = os.path.join(tmp, "env")
        first = _first_reset(folder)
        second = _first_reset(folder)
        print(f"NPUAutoscale-v0 make + reset(seed=0): cold {first['cpu_s']:.2f} CPU-s, warm {second['cpu_s']:.2f}",
              flush=True)
    lines = [
        "# npu configuration catalogs: disk cache cold vs warm",
        "",
        f"`benchmarks/npu_table_cache.py`, {time.strftime('%Y-%m-%d')}, one process, one thread, on the shared 2-core "
        "dev machine (CPU-s, which the other jobs there distort less than wall time). Cold: the cache folder is "
        "empty (the DSE, its Pareto fronts and the step tables are built, then the two tables are written); warm: "
        "the same catalog again, its tables read from the folder (`ConfigCatalog(ClusterConfig(model=...))`, "
        "default settings).",
        "",
        "| model | cold CPU-s (1st / 2nd build) | warm CPU-s | warm / cold | entries on disk |",
        "|---|---|---|---|---|",
    ]
    for name, c1, c2, w, size in rows:
        lines.append(f"| {name} | {c1:.2f} / {c2:.2f} | {w:.2f} | {w / ((c1 + c2) / 2):.2f} | {size / 1e6:.2f} MB |")
    lines += [
        "",
        "A new process's first `gym.make(\"servegym/NPUAutoscale-v0\")` + `reset(seed=0)` (imports excluded; "
        "the rest is the split's groups, the workload and the catalogs of the models the seed draws):",
        "",
        "| cache | CPU-s | wall s |",
        "|---|---|---|",
        f"| cold (empty folder) | {first['cpu_s']:.2f} | {first['wall_s']:.2f} |",
        f"| warm (filled by the cold process) | {second['cpu_s']:.2f} | {second['wall_s']:.2f} |",
        "",
        "What stays after a warm read: the allocation space (~10 ms), the read and field-by-field check of the "
        "entries, and the catalog's step tables (`ConfigCatalog._build_tables`), which are not cached.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        from servegym.outputs import write_text

        write_text(args.out, text)


if __name__ == "__main__":
    main()
