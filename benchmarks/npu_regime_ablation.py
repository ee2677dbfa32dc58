"""Ablation of the load-regime model changes on the NPU paper's focal scenario (DeepSeek-V3-671B, a 2024 Azure weekday,
24 h, request level; Figure 18): NeuScale over Base after each change, in the order applied, whole service and
per phase, pool and busy accounting.

Stages (each keeps the previous ones):

0. ``before``: the model before these changes (commit 4229e5a): the kernel roofline's throughput, the idle floor
   counted on top of Table 2's whole-chip power, picks by the FLOP/HBM roofline.
1. ``power``: chip power counted once (commit 2f406f0): a FLOP costs (1 - f) / (TFLOP/J) above the idle floor.
2. ``decode``: the decode pool charged its idle floor for its whole ready time and its batch from the time-averaged
   jobs in service (Little's law) -- the current code at ``step_models="paper"``, ``serving_efficiency=1``.
3. ``selection``: picks on the scoring model (``step_models="scoring"``), ``serving_efficiency=1``.
4. ``calibration``: the serving efficiency fitted to Figure 16 (the defaults).

Stages 0 and 1 are code changes, so they come from ``servegym npu compare --json --policies base,neuscale
--objective OBJ`` run at those commits (a worktree each), passed here as files; stages 2-4 are replayed here.
Each stage runs once per objective: energy gives the energy and SLO figures, cost the cost figures.

Usage: ``nice .venv/bin/python benchmarks/npu_regime_ablation.py --before-energy F --before-cost F --power-energy F
--power-cost F [--out benchmarks/results]`` (about 1 CPU-min per stage and objective here).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import servegym.baselines.npu  # noqa: F401  (npu_compare's import cycle resolves from here)
from servegym.baselines.npu_compare import compare

from servegym.outputs import write_json, write_text

STAGES: dict[str, dict] = {
    "decode": {"step_models": "paper", "serving_efficiency": 1.0},
    "selection": {"step_models": "scoring", "serving_efficiency": 1.0},
    "calibration": {},
}
PAPER = {"energy": 1.37, "cost": 1.73, "slo_satisfaction": 1.31}
"""Figure 18's averages (DeepSeekV3-671B, Azure): NeuScale over Base."""
KEYS = ("energy_efficiency", "energy_efficiency_busy", "energy_efficiency_prefill", "energy_efficiency_decode",
        "energy_efficiency_busy_prefill", "energy_efficiency_busy_decode", "cost_efficiency", "cost_efficiency_busy",
        "cost_efficiency_prefill", "cost_efficiency_decode", "slo_violation_pct", "ttft_violation_pct",
        "tpot_violation_pct")


def _rows(path: str) -> dict[str, dict]:
    with open(path) as f:
        return {r["policy"]: r for r in json.load(f)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for st in ("before", "power"):
        for obj in ("energy", "cost"):
            ap.add_argument(f"--{st}-{obj}", required=True, help=f"compare --json of stage {st}, objective {obj}")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--hours", type=float, default=24.0)
    args = ap.parse_args()
    res: dict[str, dict[str, dict]] = {}
    for st in ("before", "power"):
        res[st] = {obj: _rows(getattr(args, f"{st}_{obj}")) for obj in ("energy", "cost")}
    t0 = time.process_time()
    for st, kw in STAGES.items():
        res[st] = {}
        for obj in ("energy", "cost"):
            rows = compare("DeepSeek-V3-671B", "azure", args.hours, ("base", "neuscale"), objective=obj, **kw)
            res[st][obj] = {r.policy: r.row() for r in rows}
            print(st, obj, flush=True)
    cpu = time.process_time() - t0
    write_json(os.path.join(args.out, "npu_regime_ablation.json"), res)

    def ratio(st: str, obj: str, k: str) -> float:
        b, n = res[st][obj]["base"][k], res[st][obj]["neuscale"][k]
        return n / b if b else float("nan")

    lines = ["# The load-regime changes on the focal scenario: NeuScale / Base after each, in the order applied", "",
             f"DeepSeek-V3-671B, the 2024 Azure weekday (Monday), {args.hours:g} h, request level, seed 0. Stages 0-1 "
             "from `servegym npu compare --json` at their commits; 2-4 by `benchmarks/npu_regime_ablation.py` "
             f"({cpu:.0f} CPU-s). Energy and SLO columns from the energy-objective replay, cost from the cost "
             f"objective's. Paper (Figure 18, averages): {PAPER['energy']}x energy, {PAPER['cost']}x cost, "
             f"{PAPER['slo_satisfaction']}x SLO satisfaction.", "",
             "| stage | energy (pool) | (busy) | prefill | decode | cost (pool) | (busy) | prefill | decode | "
             "SLO viol. Base % | NeuScale % |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for st in ("before", "power", *STAGES):
        e, c = "energy", "cost"
        cells = [ratio(st, e, "energy_efficiency"), ratio(st, e, "energy_efficiency_busy"),
                 ratio(st, e, "energy_efficiency_prefill"), ratio(st, e, "energy_efficiency_decode"),
                 ratio(st, c, "cost_efficiency"), ratio(st, c, "cost_efficiency_busy"),
                 ratio(st, c, "cost_efficiency_prefill"), ratio(st, c, "cost_efficiency_decode")]
        lines.append(f"| {st} | " + " | ".join(f"{x:.3f}" for x in cells)
                     + f" | {res[st][e]['base']['slo_violation_pct']:.2f} | "
                       f"{res[st][e]['neuscale']['slo_violation_pct']:.2f} |")
    lines += ["", "Ratios are NeuScale's tokens/J (tokens/USD) over Base's; *pool* counts every second a vPod holds "
              "its chips, *busy* only the serving steps. The script writes every row to npu_regime_ablation.json "
              "beside this file; the repository does not keep it (its results folder holds 100 files)."]
    md = write_text(os.path.join(args.out, "npu_regime_ablation.md"), "\n".join(lines) + "\n")
    print(md)


if __name__ == "__main__":
    main()
