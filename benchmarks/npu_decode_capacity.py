"""Why the focal scenario's decode groups hold one vPod (the NPU paper's Figure 20 shows several per group).

For DeepSeekV3-671B on the 2024 Azure weekday (the focal scenario, 24 h), per decode length bucket with traffic:
the share of requests, the mean decode demand (output tokens/s over the day), and the bucket's best fit --
its max batch (the DSE's: KV reserved per request at the bucket's maximum length, and the largest batch whose
TPOT meets the bucket's SLO), TPOT at batch 1 and at that batch against the SLO, tokens/s one vPod serves
there, and its static and busy power. One vPod's capacity over the bucket's demand says how many vPods a
group would need (N_pod = ceil(R_peak / T_pod), §3.4) before any coalescing. Then a load sweep: one hour from
10:00 of the same day at Table 4's rate x 1, 8, 32 and 128, Base and NeuScale (as published), to see whether
more demand per group moves NeuScale/Base toward the paper's direction.

    nice -n 15 python benchmarks/npu_decode_capacity.py [--hours 24]

Writes ``benchmarks/results/npu_decode_capacity.{md,json}`` (atomically).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from servegym.baselines.npu import make_policy, run_policy
from servegym.envs.npu.sim.cluster import LEVELS, NB, ClusterConfig, ConfigCatalog, NPUCluster
from servegym.envs.npu.sim.workloads import make_workload

from servegym.outputs import write_json, write_text

MODEL = "DeepSeek-V3-671B"
RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0)
    a = ap.parse_args(argv)
    t0 = time.process_time()
    cfg = ClusterConfig(model=MODEL, n_candidates=1)
    wl = make_workload("azure", hours=a.hours, seed=0)
    cat = ConfigCatalog(cfg)
    sim = NPUCluster(cfg, wl, seed=0, catalog=cat)
    r = wl.requests
    bk = np.searchsorted(sim.edges, np.minimum(r.input_tokens + r.output_tokens, sim.edges[-1]))
    demand = np.bincount(bk, weights=r.output_tokens, minlength=NB) / wl.duration_s
    count = np.bincount(bk, minlength=NB)
    rows = []
    for b in np.flatnonzero(count).tolist():
        edge = int(sim.edges[b])
        cid = sim.cand[("decode", edge)][0]
        cf = sim.configs[cid]
        j = int(sim.jmax[cid, b])
        rows.append({"edge": edge, "share": float(count[b] / count.sum()), "demand_tok_s": float(demand[b]),
                     "config": cf.label, "chips": int(cf.chips), "max_batch": int(cf.max_batch),
                     "level": int(LEVELS[j]), "tpot_b1_ms": float(sim.lat[cid, b, 0] * 1e3),
                     "tpot_max_ms": float(sim.lat[cid, b, j] * 1e3), "slo_ms": float(sim.slo_d[b] * 1e3),
                     "vpod_tok_s": float(sim.tps[cid, b, j]), "static_w": float(sim.cfg_static_w[cid]),
                     "busy_w": float(sim.pow[cid, b, j])})
    top = sorted(rows, key=lambda x: -x["share"])
    cover = min(x["vpod_tok_s"] / max(x["demand_tok_s"], 1e-12) for x in rows if x["share"] >= 0.01)
    out = {"model": MODEL, "hours": a.hours, "workload": wl.description, "decode_demand_tok_s": float(demand.sum()),
           "rows": rows, "min_capacity_over_demand_buckets_ge_1pct": cover,
           "cpu_s": round(time.process_time() - t0, 1)}
    L = [f"# Decode capacity against demand: {MODEL}, {wl.description}", "",
         f"Command: `nice -n 15 python benchmarks/npu_decode_capacity.py --hours {a.hours:g}` ({out['cpu_s']:.0f} "
         f"CPU-s). Decode demand over the day: {demand.sum():.0f} output tokens/s in all. Buckets holding >= 1 % of "
         "the requests, by share; max batch = the DSE's (KV reserved per request at the bucket's max length, TPOT "
         "within the SLO), level = the step table's batch level it runs at.", "",
         "| edge (total tokens) | share | demand tok/s | best fit | chips | max batch | TPOT b=1 ms | TPOT at max ms |"
         " SLO ms | tok/s per vPod | vPod / demand | static W | busy W |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in top:
        if x["share"] < 0.01:
            continue
        L.append(f"| {x['edge']:,} | {x['share']:.3f} | {x['demand_tok_s']:.1f} | {x['config']} | {x['chips']} | "
                 f"{x['max_batch']} | {x['tpot_b1_ms']:.1f} | {x['tpot_max_ms']:.1f} | {x['slo_ms']:.1f} | "
                 f"{x['vpod_tok_s']:,.0f} | {x['vpod_tok_s'] / max(x['demand_tok_s'], 1e-12):.0f}x | "
                 f"{x['static_w']:,.0f} | {x['busy_w']:,.0f} |")
    L += ["", f"One vPod of a bucket's best fit serves at least {cover:.0f}x that bucket's mean decode demand "
          "(buckets with >= 1 % of requests), so N_pod = 1 for every decode group and the static power of each "
          "extra group's vPod is nearly all of its energy.", ""]
    L += ["## Load sweep", "",
          "One hour from 10:00 of the same day, rate = Table 4's 1,667 req/min x the scale (the day's shape), seed 0, "
          "energy objective; whole-pool ratios NeuScale / Base; decode groups and vPods are NeuScale's means.", "",
          "| rate x | requests | NS/Base energy | cost | decode energy | SLO viol. Base % | NS % | NS decode groups | "
          "NS decode vPods | NS decode static share | Base decode vPods |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    out["load_sweep"] = []
    for scale in (1, 8, 32, 128):
        w = make_workload("azure", hours=1.0, seed=0, rate_rpm=1667.0 * scale, start_hour=10.0)
        res = {}
        for p in ("base", "neuscale"):
            s_ = NPUCluster(cfg, w, seed=0, catalog=cat)
            summ = run_policy(s_, make_policy(p))
            res[p] = {**{k: float(summ[k]) for k in ("energy_efficiency", "cost_efficiency", "energy_efficiency_decode",
                                                      "slo_violation_pct")},
                      **{k: float(v) for k, v in s_.decomposition()["totals"]["decode"].items()
                         if k in ("groups_mean", "vpods_mean", "static_share")}}
        b, n = res["base"], res["neuscale"]
        out["load_sweep"].append({"scale": scale, "requests": len(w.requests), **{f"{p}_{k}": v for p in res
                                                                                 for k, v in res[p].items()}})
        L.append(f"| {scale} | {len(w.requests):,} | {n['energy_efficiency'] / b['energy_efficiency']:.3f} | "
                 f"{n['cost_efficiency'] / b['cost_efficiency']:.3f} | "
                 f"{n['energy_efficiency_decode'] / b['energy_efficiency_decode']:.3f} | {b['slo_violation_pct']:.2f} | "
                 f"{n['slo_violation_pct']:.2f} | {n['groups_mean']:.2f} | {n['vpods_mean']:.2f} | "
                 f"{n['static_share']:.2f} | {b['vpods_mean']:.2f} |")
    L.append("")
    out["cpu_s"] = round(time.process_time() - t0, 1)
    RESULTS.mkdir(exist_ok=True)
    write_json(RESULTS / "npu_decode_capacity.json", out)
    write_text(RESULTS / "npu_decode_capacity.md", "\n".join(L))
    print("\n".join(L))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
