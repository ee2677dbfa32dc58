"""Speed of the whole geo simulator (cluster, provisioner, estimator, policy loop and engines).

Runs ``servegym.envs.geo.reports.bench.speed_bench`` over a set of scenarios and records the figures in
``benchmarks/results/geo_speed.json`` and ``geo_speed.md``. The must-have figure is the paper
preset (Table II, 512 Llama-3.1-8B TP1 engines in 16 DCs) at 4000 req/s: >= 10x real time on
this 2-core machine, aim 50x. Each scenario first runs a short warm-up (numba compiles the engine
kernels once per process); its wall time is reported as ``warmup_s`` in the first row.

    .venv/bin/python benchmarks/geo_speed.py [--sim-seconds 30] [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from servegym.envs.geo.reports.bench import speed_bench

# (label, preset, model, rate req/s or None for the preset's, policy, GeoConfig overrides)
SCENARIOS: list[tuple[str, str, str, float | None, str, dict]] = [
    ("paper llama high, RR", "paper", "Llama-3.1-8B", 4000.0, "rr", {}),
    ("paper llama high, LL", "paper", "Llama-3.1-8B", 4000.0, "ll", {}),
    ("paper llama high, RR, window decisions", "paper", "Llama-3.1-8B", 4000.0, "rr", {"decision_mode": "window"}),
    ("paper llama high, RR, async polls", "paper", "Llama-3.1-8B", 4000.0, "rr", {"poll_mode": "async"}),
    ("paper llama moderate, RR", "paper", "Llama-3.1-8B", 2400.0, "rr", {}),
    ("paper llama low, RR", "paper", "Llama-3.1-8B", 1200.0, "rr", {}),
    ("paper mixtral high, RR", "paper", "Mixtral-8x7B", 2000.0, "rr", {}),
    ("small llama high, RR", "small", "Llama-3.1-8B", None, "rr", {}),
    ("mini llama high, RR", "mini", "Llama-3.1-8B", None, "rr", {}),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim-seconds", type=float, default=30.0)
    ap.add_argument("--repeats", type=int, default=3, help="runs per scenario; the median speed is kept")
    ap.add_argument("--quick", action="store_true", help="only the must-have scenario")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = ap.parse_args()
    rows = []
    for label, preset_name, model, rate, policy, over in SCENARIOS[:1] if args.quick else SCENARIOS:
        runs = [speed_bench(preset_name, rate, args.sim_seconds, model=model, policy=policy, **over)
                for _ in range(args.repeats)]
        runs.sort(key=lambda r: r["speedup"])
        best = dict(runs[len(runs) // 2])
        best["label"] = label
        best["overrides"] = over
        best["speedup_all"] = [round(r["speedup"], 2) for r in runs]
        rows.append(best)
        print(f"{label:45s} {best['engines']:4d} engines {best['rate_rps']:7.1f} req/s  speedup {best['speedup']:6.1f}x "
              f"(cpu {best['speedup_cpu']:6.1f}x)  {best['requests_per_s']:9.0f} req/s  "
              f"{best['engine_iterations_per_s']:10.0f} engine steps/s", flush=True)
    meta = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared with other jobs), {platform.python_version()}",
        "sim_seconds": args.sim_seconds,
        "repeats": args.repeats,
        "note": "speedup = simulated s / wall s of the run (set-up and numba warm-up excluded); median of repeats",
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "geo_speed.json").write_text(json.dumps({"meta": meta, "results": rows}, indent=1) + "\n")
    lines = [
        "# Geo simulator speed",
        "",
        f"{meta['date_utc']}, {meta['machine']}. {args.sim_seconds:g} simulated seconds of arrivals per run, "
        f"median of {args.repeats} runs; `speedup` = simulated s per wall s (`cpu`: per CPU s of this process). "
        "Produced by `benchmarks/geo_speed.py`; the single-scenario CLI is "
        "`servegym bench speed geo --preset paper --rate 4000 --sim-seconds 30 --json`.",
        "",
        "| scenario | engines | rate (req/s) | speedup | speedup (cpu) | requests/s | engine steps/s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['label']} | {r['engines']} | {r['rate_rps']:g} | {r['speedup']:.1f}x | "
                     f"{r['speedup_cpu']:.1f}x | {r['requests_per_s']:,.0f} | {r['engine_iterations_per_s']:,.0f} |")
    (args.out / "geo_speed.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
