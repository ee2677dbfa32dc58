"""Ablation on the NPU paper's focal scenario (DeepSeekV3-671B, Azure, 24 h; Figure 18): NeuScale over Base
after each model change, in the order applied.

Stages (each keeps the previous ones):

0. ``before``: the tiled 2023 Azure hour (``azure-2023``) and the hop collectives (``step_models=paper-hop``):
   the state before these changes.
1. ``trace``: the paper's own trace, a weekday of the 2024 Azure week (``azure``).
2. ``collectives``: ring collectives whose latency grows with the group (``step_models=paper``).
3. ``operating-point``: each bucket's configuration chosen at the batch its group will run at the trace's
   peak demand for that bucket, the pod's static power and the ring collectives included, fixed before the run
   like the paper's offline best-fit database (§5.1); Base by the same rule for the largest length
   (``ClusterConfig.fit_at="operating"``).

Each stage is replayed once per objective: the energy objective gives the energy-efficiency and SLO figures,
the cost objective the cost efficiency (the paper's cost results optimize for cost). Whole-pool figures
(idle and booting vPods included) and request-attributed ("busy") ones are both given. Results per stage are
written as JSON beside the table as they finish, so an interrupted run keeps what it measured.

Usage: ``nice .venv/bin/python benchmarks/npu_ablation.py [--hours 24] [--stages before,trace,...]
[--objectives energy,cost]`` (about 1 CPU-min per stage and objective at 24 h).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from servegym.baselines.npu import ideal_metrics, make_policy, run_policy
from servegym.envs.npu.sim.cluster import ClusterConfig, ConfigCatalog, NPUCluster
from servegym.envs.npu.sim.workloads import make_workload

MODEL = "DeepSeek-V3-671B"
STAGES: dict[str, dict] = {
    "before": {"trace": "azure-2023", "cluster": {"step_models": "paper-hop"}},
    "trace": {"trace": "azure", "cluster": {"step_models": "paper-hop"}},
    "collectives": {"trace": "azure", "cluster": {"step_models": "paper"}},
    "operating-point": {"trace": "azure", "cluster": {"step_models": "paper", "fit_at": "operating"}},
}
PAPER = {"energy": 1.37, "cost": 1.73, "slo_satisfaction": 1.31}
"""Figure 18's averages (DeepSeekV3-671B, Azure): NeuScale over Base."""


def run_stage(name: str, hours: float, objective: str, seed: int) -> dict:
    st = STAGES[name]
    base_kw = {"fit_at": "best-batch"} if "fit_at" in ClusterConfig.__dataclass_fields__ else {}
    cfg = ClusterConfig(model=MODEL, objective=objective, n_candidates=1, **{**base_kw, **st["cluster"]})
    t0 = time.process_time()
    cat = ConfigCatalog(cfg)
    wl = make_workload(st["trace"], hours=hours, seed=seed)
    out: dict = {"stage": name, "objective": objective, "hours": hours, "trace": wl.description,
                 "requests": len(wl.requests)}
    for pol in ("base", "neuscale"):
        sim = NPUCluster(cfg, wl, seed=seed, catalog=cat)
        out[pol] = run_policy(sim, make_policy(pol))
        dec = sim.decomposition()
        out[pol + "_groups"] = dec["groups"]
        out[pol + "_totals"] = dec["totals"]
        # the most vPods held at once per phase (prefill, decode): the storms a stage's policy sets off
        alive = [m.alive.sum(axis=1) for m in sim.history]
        out[pol + "_peak_vpods"] = [float(max(a[p] for a in alive)) for p in (0, 1)] if alive else [0.0, 0.0]
    out["ideal"] = ideal_metrics(NPUCluster(cfg, wl, seed=seed, catalog=cat))
    out["cpu_s"] = time.process_time() - t0
    return out


def _ratio(r: dict, key: str) -> float:
    return r["neuscale"][key] / r["base"][key]


def _peaks(r: dict, pol: str) -> str:
    pk = r.get(pol + "_peak_vpods")
    return f"{pk[0]:,.0f} / {pk[1]:,.0f}" if pk else "-"


def table(results: dict[tuple[str, str], dict]) -> list[str]:
    L = ["| stage | NS/Base energy eff. (pool) | (busy) | NS/Base cost eff. (pool) | (busy) | SLO viol. Base % | "
         "NeuScale % | NS/Ideal energy (busy) | peak vPods P/D Base | NeuScale | requests |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in STAGES:
        e, c = results.get((name, "energy")), results.get((name, "cost"))
        if e is None:
            continue
        ce = f"{_ratio(c, 'cost_efficiency'):.3f}" if c else "-"
        cb = f"{_ratio(c, 'cost_efficiency_busy'):.3f}" if c else "-"
        ideal = e["neuscale"]["energy_efficiency_busy"] / e["ideal"]["energy_efficiency"]
        L.append(f"| {name} | {_ratio(e, 'energy_efficiency'):.3f} | {_ratio(e, 'energy_efficiency_busy'):.3f} | "
                 f"{ce} | {cb} | {e['base']['slo_violation_pct']:.2f} | {e['neuscale']['slo_violation_pct']:.2f} | "
                 f"{ideal:.3f} | {_peaks(e, 'base')} | {_peaks(e, 'neuscale')} | {e['requests']:,} |")
    return L


def spread_section() -> list[str]:
    """§2.4's best/worst version spread (energy and cost, prefill and decode) under the hop and the ring
    collectives (the DSE's per-version best fits on the scoring model, 1K/4K/16K tokens, the four models)."""
    from servegym.calibration.npu import spread_verdict, version_spreads
    from servegym.envs.npu.sim.roofline import RooflineParams

    L = ["## §2.4 version spread (best over worst version's efficiency), hop against ring collectives", "",
         "| objective | phase | paper | hop | ring |", "|---|---|---|---|---|"]
    hop = {(v["objective"], v["phase"]): v for v in spread_verdict(version_spreads(params=RooflineParams.hop()))}
    ring = {(v["objective"], v["phase"]): v for v in spread_verdict(version_spreads(params=RooflineParams()))}
    for k, v in ring.items():
        h = hop[k]
        L.append(f"| {k[0]} | {k[1]} | {v['paper'][0]:g}-{v['paper'][1]:g}x | {h['ours'][0]:.1f}-{h['ours'][1]:.1f}x "
                 f"({h['verdict']}) | {v['ours'][0]:.1f}-{v['ours'][1]:.1f}x ({v['verdict']}) |")
    return [*L, ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--objectives", default="energy,cost")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--table-only", action="store_true", help="rebuild the table from the stored JSON")
    args = ap.parse_args()
    if args.table_only:
        args.stages = ""
    jdir = os.path.join(args.out, "npu_ablation")
    os.makedirs(jdir, exist_ok=True)
    for name in [x for x in args.stages.split(",") if x]:
        for obj in args.objectives.split(","):
            r = run_stage(name, args.hours, obj, args.seed)
            path = os.path.join(jdir, f"{name}_{obj}_{args.hours:g}h.json")
            with open(path + ".tmp", "w") as fh:
                json.dump(r, fh, indent=1, default=float)
            os.replace(path + ".tmp", path)
            print(f"{name} {obj}: NS/Base energy {_ratio(r, 'energy_efficiency'):.3f} busy "
                  f"{_ratio(r, 'energy_efficiency_busy'):.3f} cost {_ratio(r, 'cost_efficiency'):.3f} SLO "
                  f"{r['base']['slo_violation_pct']:.2f} -> {r['neuscale']['slo_violation_pct']:.2f} ({r['cpu_s']:.0f} CPU-s)",
                  flush=True)
    results = {}
    for f in sorted(os.listdir(jdir)):
        if f.endswith(f"_{args.hours:g}h.json"):
            r = json.load(open(os.path.join(jdir, f)))
            results[(r["stage"], r["objective"])] = r
    L = ["# Ablation on the focal scenario: DeepSeekV3-671B, Azure, NeuScale over Base", "",
         f"Command: `nice .venv/bin/python benchmarks/npu_ablation.py --hours {args.hours:g}` (stages in the order "
         "applied; each keeps the previous ones; see the script's docstring). Energy columns and SLO from the "
         "energy-objective replay, cost from the cost-objective replay. Paper, Figure 18 (averages): "
         f"{PAPER['energy']}x energy, {PAPER['cost']}x cost, {PAPER['slo_satisfaction']}x SLO satisfaction.", "",
         *table(results), ""]
    L += spread_section()
    md = os.path.join(args.out, "npu_ablation.md")
    notes = ""
    if os.path.exists(md):
        old = open(md).read()
        if "## What this shows" in old:
            notes = old[old.index("## What this shows"):]
    with open(md + ".tmp", "w") as fh:
        fh.write("\n".join(L) + ("\n" + notes if notes else ""))
    os.replace(md + ".tmp", md)
    print(md)


if __name__ == "__main__":
    main()
