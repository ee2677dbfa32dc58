"""The output-length accuracy sweep of the NPU paper's Figure 27 on its focal scenario (DeepSeekV3-671B, Azure):
NeuScale with the output-length prediction right 20-100 % of the time (§5.1: a wrong prediction routes the
request to a random group whose length is no shorter than its current one; §3.4: re-estimates and migrations),
against Base (one group: the prediction does not matter to it). The paper (§5.6): the benefits hold across
accuracies; mis-predictions and migrations cost little. NeuScale runs twice: as published (coalescing on) and
with coalescing off (§5.3: "The user can disable vPod group coalescing"), which keeps the decode pool's
several length groups, so a mis-predicted request can land in a group other than its own.

Usage: ``nice .venv/bin/python benchmarks/npu_osl_accuracy.py [--hours 24]`` (about 2 CPU-min at 24 h).
"""

from __future__ import annotations

import argparse
import os
import time

from npu_failover import start_report  # the sibling script (benchmarks/ is on sys.path when run as a script)
from servegym.baselines.npu import NeuScalePolicy, make_policy, run_policy
from servegym.envs.npu.sim.cluster import ClusterConfig, ConfigCatalog, NPUCluster
from servegym.envs.npu.sim.workloads import make_workload

from servegym.outputs import save_figure

MODEL = "DeepSeek-V3-671B"
ACCURACIES = (0.2, 0.4, 0.6, 0.8, 1.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--fit-at", default="best-batch", choices=("best-batch", "operating"),
                    help="ClusterConfig.fit_at; 'operating' writes %(prog)s's files with an _operating suffix")
    args = ap.parse_args()
    name = "npu_osl_accuracy" + ("" if args.fit_at == "best-batch" else "_operating")
    t0 = time.process_time()
    wl = make_workload("azure", hours=args.hours, seed=0)
    cat = None
    rows = []
    base = None
    for coalescing in (True, False):
        for acc in ACCURACIES:
            cfg = ClusterConfig(model=MODEL, n_candidates=1, osl_accuracy=acc, fit_at=args.fit_at)
            cat = cat or ConfigCatalog(cfg)
            if base is None:
                base = run_policy(NPUCluster(cfg, wl, seed=0, catalog=cat), make_policy("base"))
            sim = NPUCluster(cfg, wl, seed=0, catalog=cat)
            s = run_policy(sim, NeuScalePolicy(coalescing=coalescing))
            dec = sim.decomposition()["totals"]["decode"]
            rows.append({"acc": acc, "coalescing": coalescing, **s, "migrations": sim.n_migrations,
                         "decode_groups_mean": dec["groups_mean"], "decode_vpods_mean": dec["vpods_mean"]})
            print(coalescing, acc, round(s["energy_efficiency"] / base["energy_efficiency"], 3),
                  round(s["slo_violation_pct"], 2), sim.n_migrations, flush=True)
    cpu = time.process_time() - t0
    L = ["# Output-length prediction accuracy (Figure 27): DeepSeekV3-671B, Azure 2024 weekday", "",
         f"Command: `nice .venv/bin/python benchmarks/npu_osl_accuracy.py --hours {args.hours:g} --fit-at {args.fit_at}` "
         f"({cpu:.0f} CPU-s). "
         "Energy objective; ratios over Base (one group, which the prediction does not affect): Base "
         f"{base['energy_efficiency']:.3f} tokens/J whole pool, {base['energy_efficiency_busy']:.3f} busy, "
         f"SLO violation {base['slo_violation_pct']:.2f} %.", "",
         "| NeuScale | accuracy | NS/Base energy efficiency (pool) | (busy) | NS/Base decode energy efficiency (pool) | NS/Base cost efficiency (pool) | "
         "NS SLO viol. % | TPOT % | migrations | decode groups (mean) | decode vPods (mean) |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {'coalescing' if r['coalescing'] else 'no coalescing'} | {r['acc']:.0%} | "
                 f"{r['energy_efficiency'] / base['energy_efficiency']:.3f} | "
                 f"{r['energy_efficiency_busy'] / base['energy_efficiency_busy']:.3f} | "
                 f"{r['energy_efficiency_decode'] / base['energy_efficiency_decode']:.3f} | "
                 f"{r['cost_efficiency'] / base['cost_efficiency']:.3f} | {r['slo_violation_pct']:.2f} | "
                 f"{r['tpot_violation_pct']:.2f} | {r['migrations']:,} | {r['decode_groups_mean']:.2f} | "
                 f"{r['decode_vpods_mean']:.2f} |")
    md, fig, ax = start_report(args.out, name, L)
    for coalescing, mk in ((True, "o-"), (False, "s--")):
        rs = [r for r in rows if r["coalescing"] == coalescing]
        x = [100 * r["acc"] for r in rs]
        tag = "coalescing" if coalescing else "no coalescing"
        ax[0].plot(x, [r["energy_efficiency"] / base["energy_efficiency"] for r in rs], mk, label=f"{tag}: pool")
        ax[0].plot(x, [r["energy_efficiency_busy"] / base["energy_efficiency_busy"] for r in rs], mk,
                   alpha=0.5, label=f"{tag}: busy")
        ax[1].plot(x, [r["slo_violation_pct"] for r in rs], mk, label=f"NeuScale, {tag}")
    ax[0].axhline(1.0, color="gray", lw=0.8)
    ax[0].set_ylabel("NeuScale / Base energy efficiency")
    ax[0].legend(fontsize=7)
    ax[1].axhline(base["slo_violation_pct"], color="C3", ls=":", label="Base")
    ax[1].set_ylabel("SLO violation (%)")
    ax[1].legend(fontsize=8)
    for a in ax:
        a.set_xlabel("output-length prediction accuracy (%)")
        a.grid(alpha=0.3)
    fig.suptitle(f"DeepSeekV3-671B, Azure 2024 weekday, {args.hours:g} h (Figure 27 setting)", fontsize=9)
    fig.tight_layout()
    png = save_figure(fig, os.path.join(args.out, name + ".png"), dpi=110)
    print(md, png)


if __name__ == "__main__":
    main()
