"""The fail-over study of the NPU paper's Figure 28: Llama3-8B on a small TPU cluster (32 TPU v4, 64 v5e, 64 v6e,
as its §4 prototype; NPU-A, NPU-B and NPU-D here, no NPU-C), request rate swept from 60 req/min to 16x.

NeuScale fails over to another version's best fit when the quota of its best fit's version runs out (§3.4);
Base has one configuration and stops at its version's quota. The paper (§5.7): NeuScale keeps the SLO
satisfaction near 100 % and improves decode cost efficiency by up to 11.2 %; at 16x its decode cost is above
Base's because requests run on the less efficient v5e/v4 fail-over vPods.

Setup here: the cost objective (Figure 28 plots cost efficiency), the 2024 Azure coding trace's lengths and
minute shape rescaled so the week's mean is the swept rate, 2 h from 12:00 of the default weekday (the rate at
that hour is about 1.9x the week's mean), seed 0. Findings (``npu_failover.md``,
``npu_failover_operating.md``, rerun on the current model): at the default fit the NPU-B quota binds only for NeuScale at 480 req/min and nothing
fails over (equal SLO); at the operating-point fit NeuScale spills onto 32 NPU-A chips at 960 req/min, at 0.38x
Base's tokens/USD. The figure's premise does not hold here: NPU-B (v5e) is the cost best fit for Llama3-8B decode
over NPU-D (v6e) at the shipped prices, where the paper finds v6e best for both phases.
Usage: ``nice .venv/bin/python benchmarks/npu_failover.py`` (about 1 CPU-min).
"""

from __future__ import annotations

import argparse
import os
import time

from servegym.envs.npu.reports.validate import failover_sweep

from servegym.outputs import save_figure, write_text

RATES = (60.0, 120.0, 240.0, 480.0, 960.0)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def start_report(out: str, name: str, lines: list[str]):
    """Write ``out/name.md`` atomically and open the two-panel figure of the study."""
    md = write_text(os.path.join(out, f"{name}.md"), "\n".join(lines) + "\n")
    fig, ax = _pyplot().subplots(1, 2, figsize=(8, 3.2))
    return md, fig, ax


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--fit-at", default="best-batch", choices=("best-batch", "operating"),
                    help="ClusterConfig.fit_at; 'operating' writes %(prog)s's files with an _operating suffix")
    args = ap.parse_args()
    name = "npu_failover" + ("" if args.fit_at == "best-batch" else "_operating")
    t0 = time.process_time()
    # the sweep is servegym npu validate's (Figure 28's points read the same rows)
    rows = failover_sweep(RATES, hours=args.hours, fit_at=args.fit_at)
    for r in rows:
        r["rate"] = r["rate_rpm"]
        print(r["rate"], r["policy"], round(r["cost_efficiency"]), round(r["slo_violation_pct"], 2), r["held"],
              flush=True)
    cpu = time.process_time() - t0
    L = ["# Fail-over under scarcity (Figure 28): Llama3-8B, 32 NPU-A + 64 NPU-B + 64 NPU-D chips", "",
         f"Command: `nice .venv/bin/python benchmarks/npu_failover.py --fit-at {args.fit_at}` ({cpu:.0f} CPU-s). "
         "Cost objective; the 2024 "
         f"Azure coding day rescaled to each week-mean rate, {args.hours:g} h from 12:00. Peak chips held per version "
         "in the last column (the quota binds where it reaches 32 / 64 / 64).", "",
         "| req/min (week mean) | requests | policy | tokens/USD | decode tokens/USD | prefill tokens/USD | "
         "SLO viol. % | TTFT % | TPOT % | peak chips A/B/D |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        h = r["held"]
        L.append(f"| {r['rate']:g} | {r['requests']:,} | {r['policy']} | {r['cost_efficiency']:,.0f} | "
                 f"{r['cost_efficiency_decode']:,.0f} | {r['cost_efficiency_prefill']:,.0f} | "
                 f"{r['slo_violation_pct']:.2f} | {r['ttft_violation_pct']:.2f} | {r['tpot_violation_pct']:.2f} | "
                 f"{h['NPU-A']}/{h['NPU-B']}/{h['NPU-D']} |")
    md, fig, ax = start_report(args.out, name, L)
    for pol, style in (("base", "s--"), ("neuscale", "o-")):
        rr = [r for r in rows if r["policy"] == pol]
        ax[0].plot([r["rate"] for r in rr], [r["cost_efficiency_decode"] for r in rr], style, label=pol)
        ax[1].plot([r["rate"] for r in rr], [100.0 - r["slo_violation_pct"] for r in rr], style, label=pol)
    for a, t in zip(ax, ("decode tokens/USD", "SLO satisfaction (%)"), strict=True):
        a.set_xscale("log", base=2)
        a.set_xlabel("request rate, req/min (week mean)")
        a.set_ylabel(t)
        a.grid(alpha=0.3)
    ax[0].legend()
    fig.suptitle("Llama3-8B, 32 A + 64 B + 64 D chips (Figure 28 setting)", fontsize=9)
    fig.tight_layout()
    png = save_figure(fig, os.path.join(args.out, name + ".png"), dpi=110)
    print(md, png)


if __name__ == "__main__":
    main()
