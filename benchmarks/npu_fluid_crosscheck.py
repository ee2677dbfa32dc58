"""Fluid vs request-level NPU simulator on the test split: energy, cost and SLO violation of Base and NeuScale.

For every model (the four of the catalog) and workload of the test split and its shifts (the Azure 2023
code and conversation timestamps with their lengths on the test segment of the trace hour; the LVEval and
OpenThoughts lengths on the same timestamps), one scenario drawn as the env draws it
(:func:`servegym.envs.npu.env.draw_scenario` for split ``test`` / ``shift-*``, seed ``--seed``, with its start
hour, rate, workload and simulator seeds; the model and Azure trace set), runs Base and NeuScale with both
fidelities (:func:`servegym.envs.npu.reports.fluid_check.crosscheck`) for ``--hours`` from the drawn start hour.
``--days 2024`` replays the env's own episodes instead: the 2024 trace's test day (within the day) for the
same drawn start hour, rate and seeds. Tolerances: energy and cost within 3 %, SLO violation within 1 pp. Beside
the two runs, each with its own decision loop, the table has the fluid under the request level's decisions
(``replay_decisions``: the same fleet, so the serving model's own error) and the first minute at which the two
loops decided differently; for every row outside, both fidelities are rerun at ``--spread`` other simulator seeds
(routing and boot-time draws only), the spread of the request level against itself. Run:
    nice -n 15 .venv/bin/python benchmarks/npu_fluid_crosscheck.py [--hours 6] [--seed 0] [--days 2023|2024]
        [--spread 2] [--write]
``--write`` writes ``benchmarks/results/npu_fluid_crosscheck.md`` (``--days 2024``: ``npu_fluid_crosscheck_2024.md``;
temp file + rename).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

from servegym.baselines.npu import make_policy, run_policy
from servegym.envs.npu.env import NPUEnvConfig, draw_scenario
from servegym.envs.npu.reports.fluid_check import ENERGY_COST_TOL, SLO_TOL_PP, crosscheck
from servegym.envs.npu.scenarios import SPLIT_DAY_SET, segment_scenario
from servegym.envs.npu.sim import azure2024
from servegym.envs.npu.sim.catalog import MODELS
from servegym.envs.npu.sim.cluster import ConfigCatalog
from servegym.envs.npu.sim.fluid import make_cluster
from servegym.envs.npu.sim.workloads import AZURE2024_TRACE, make_workload

from servegym.outputs import atomic_path

WORKLOADS = (("test", "azure-code"), ("test", "azure-conv"), ("shift-lveval", "azure-code"),
             ("shift-openthoughts", "azure-code"))
OUT = "benchmarks/results/npu_fluid_crosscheck.md"
OUT_2024 = "benchmarks/results/npu_fluid_crosscheck_2024.md"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--days", choices=("2023", "2024"), default="2023",
                    help="2023: the tiled 2023 hour's test segment (OUT); 2024: the env's test days (OUT_2024)")
    ap.add_argument("--spread", type=int, default=2, help="other simulator seeds rerun for each row outside")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    if args.spread < 0:
        ap.error(f"--spread = {args.spread} must be >= 0")
    rows = []
    t0 = time.process_time()
    for m in args.models.split(","):
        cc = NPUEnvConfig(split=None, model=m).cluster_config()
        cat = ConfigCatalog(cc)
        for split, azure in WORKLOADS:
            sc = draw_scenario(split, args.seed)
            if args.days == "2024":  # the env's own episodes: a test day of the trace, within the day
                tr24 = AZURE2024_TRACE[azure]
                days = azure2024.SPLIT_DAYS[tr24][SPLIT_DAY_SET.get(split, "test")]
                day = sc["day"] if sc["azure_trace"] == azure else int(days[0])
                wl = make_workload(sc["trace"], hours=args.hours, seed=sc["workload_seed"], rate_rpm=sc["rate_rpm"],
                                   azure_trace=azure, start_hour=sc["start_hour"], day=day, within_day=True)
            else:  # the tiled 2023 hour on the split's segment of the trace hour (the earlier scenarios)
                sc, wl = segment_scenario(split, azure, args.hours, args.seed)
            for r in crosscheck(cc, wl, seed=sc["simulation_seed"], catalog=cat, hours=args.hours):
                r.update(model=m, split=split, workload=sc["trace"] if sc["trace"] != "azure" else azure,
                         start_hour=sc["start_hour"], rate_rpm=sc["rate_rpm"], requests=len(wl.requests))
                if not r["within"]:  # the run-to-run spread of each fidelity at other routing and boot draws
                    for fid in ("request", "fluid"):
                        r[f"spread_{fid}"] = [
                            float(run_policy(make_cluster(cc, wl, seed=sc["simulation_seed"] + 1 + k, catalog=cat,
                                                          fidelity=fid), make_policy(r["policy"]),
                                             hours=args.hours)["slo_violation_pct"]) for k in range(args.spread)]
                rows.append(r)
                print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}), flush=True)
    total = time.process_time() - t0
    if args.write:
        with atomic_path(OUT if args.days == "2023" else OUT_2024) as tmp:
            tmp.write_text(render(rows, args, total))


def render(rows: list[dict], args: argparse.Namespace, total_cpu_s: float) -> str:
    n_in = sum(r["within"] for r in rows)
    cpu_req = sum(r["cpu_s_request"] for r in rows)
    cpu_fl = sum(r["cpu_s_fluid"] for r in rows)
    lines = [
        f"# Fluid vs request-level NPU simulator ({platform.processor() or platform.machine()}, shared 2-core machine)",
        "",
        f"Command: `nice -n 15 .venv/bin/python benchmarks/npu_fluid_crosscheck.py --hours {args.hours:g} "
        f"--seed {args.seed} --days {args.days} --write`",
        "",
        f"Per model and workload of the test split (and its length shifts), the scenario `draw_scenario(split, "
        f"{args.seed})` draws (start hour, rate, workload and simulator seeds; model and Azure trace set), "
        f"{args.hours:g} h from its start hour ("
        + ("the tiled 2023 Azure hour's test segment" if args.days == "2023" else
           "the 2024 trace's test day, the drawn one where the drawn trace matches, else the trace's first test "
           "day; within the day") + "); Base and NeuScale run their own 60-s decision loop "
        "(`run_policy`) on the request-level simulator (`NPUCluster`) and on the fluid one (`FluidCluster`). "
        f"Tolerances: energy and cost within {100 * ENERGY_COST_TOL:g} %, SLO violation within {SLO_TOL_PP:g} pp. "
        f"**{n_in} of {len(rows)} rows within all three.** The fluid under the request level's own decisions (same "
        f"targets at the same decision points, so the same vPods and boot times: the serving model's error alone): "
        f"**{sum(r['within_replay'] for r in rows)} of {len(rows)}**. CPU: request level {cpu_req:.1f} s, fluid "
        f"{cpu_fl:.1f} s ({cpu_req / max(cpu_fl, 1e-9):.1f}x) for the policy runs; {total_cpu_s:.0f} s in all "
        f"(catalogs and workloads included). Load average at the end: {os.getloadavg()[0]:.1f}.",
        "",
        "| model | workload | requests | policy | energy MJ req / fluid | Δ energy | cost USD req / fluid | Δ cost | "
        "SLO viol. % req / fluid | Δ SLO pp | TTFT / TPOT viol. % req | within | loops split at min | "
        "same decisions: Δ energy / Δ SLO pp | within |",
        "|---|---|---:|---|---|---:|---|---:|---|---:|---|---|---:|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['workload']} | {r['requests']:,} | {r['policy']} | "
            f"{r['energy_j_request'] / 1e6:,.1f} / {r['energy_j_fluid'] / 1e6:,.1f} | {100 * r['energy_rel']:+.2f} % | "
            f"{r['usd_request']:,.1f} / {r['usd_fluid']:,.1f} | {100 * r['usd_rel']:+.2f} % | "
            f"{r['slo_violation_pct_request']:.2f} / {r['slo_violation_pct_fluid']:.2f} | {r['slo_pp']:+.2f} | "
            f"{r['ttft_violation_pct_request']:.2f} / {r['tpot_violation_pct_request']:.2f} | "
            f"{'yes' if r['within'] else '**no**'} | "
            f"{'-' if r['split_min'] is None else format(r['split_min'], 'g')} | "
            f"{100 * r['energy_rel_replay']:+.2f} % / {r['slo_pp_replay']:+.2f} | "
            f"{'yes' if r['within_replay'] else '**no**'} |")
    worst = {k: max(rows, key=lambda r, k=k: abs(r[k])) for k in ("energy_rel", "usd_rel", "slo_pp")}
    lines += ["", "Largest differences: "
              f"energy {100 * worst['energy_rel']['energy_rel']:+.2f} % ({worst['energy_rel']['model']}, "
              f"{worst['energy_rel']['workload']}, {worst['energy_rel']['policy']}); "
              f"cost {100 * worst['usd_rel']['usd_rel']:+.2f} % ({worst['usd_rel']['model']}, "
              f"{worst['usd_rel']['workload']}, {worst['usd_rel']['policy']}); "
              f"SLO {worst['slo_pp']['slo_pp']:+.2f} pp ({worst['slo_pp']['model']}, {worst['slo_pp']['workload']}, "
              f"{worst['slo_pp']['policy']})."]
    out = [r for r in rows if not r["within"]]
    if out and "spread_request" in out[0]:
        lines += ["", f"Rows outside, rerun at {args.spread} other simulator seeds (seed + 1, + 2, ...: other routing "
                  "and boot-time draws, the same workload): SLO violation % of each fidelity, against the row's.", "",
                  "| model | workload | policy | request level: row / other seeds | fluid: row / other seeds |",
                  "|---|---|---|---|---|"]
        for r in out:
            lines.append(
                f"| {r['model']} | {r['workload']} | {r['policy']} | {r['slo_violation_pct_request']:.2f} / "
                + ", ".join(f"{v:.2f}" for v in r["spread_request"]) + f" | {r['slo_violation_pct_fluid']:.2f} / "
                + ", ".join(f"{v:.2f}" for v in r["spread_fluid"]) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
