"""Wall time of a 24-hour NPU cluster replay (288 epochs of 5 min, decision points every 60 s).

Target: ≤ 60 s wall on this machine. The workload build (2.4 M Azure requests at Table 4's
1667 req/min) and the configuration catalog (DSE + step tables) are timed separately from the replay.
Run:
    .venv/bin/python benchmarks/npu_replay_speed.py [--model Llama-3-70B] [--traces azure,lveval,openthoughts]
        [--policies neuscale,base] [--hours 24] [--out benchmarks/results/npu_replay_speed.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

# the catalog is timed as built, not read from the disk cache of the DSE tables (servegym.user_cache)
os.environ.setdefault("SERVEGYM_NO_CACHE", "1")

from servegym.baselines.npu import make_policy, run_policy
from servegym.envs.npu.sim.cluster import ClusterConfig, ConfigCatalog, NPUCluster
from servegym.envs.npu.sim.workloads import make_workload


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="Llama-3-70B")
    ap.add_argument("--traces", default="azure,lveval,openthoughts")
    ap.add_argument("--policies", default="neuscale,base")
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--out", default=None, help="write a markdown table here")
    args = ap.parse_args()
    cfg = ClusterConfig(model=args.model)
    t0 = time.perf_counter()
    cat = ConfigCatalog(cfg)
    t_cat = time.perf_counter() - t0
    rows = []
    for trace in args.traces.split(","):
        t0 = time.perf_counter()
        wl = make_workload(trace, hours=args.hours, seed=0)
        t_wl = time.perf_counter() - t0
        for pol in args.policies.split(","):
            sim = NPUCluster(cfg, wl, seed=0, catalog=cat)
            t0, c0 = time.perf_counter(), time.process_time()
            s = run_policy(sim, make_policy(pol))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            rows.append({"model": args.model, "trace": trace, "policy": pol, "hours": args.hours,
                         "requests": len(wl.requests), "epochs": len(sim.history) // 5, "replay_s": wall, "replay_cpu_s": cpu,
                         "workload_build_s": t_wl, "catalog_build_s": t_cat,
                         "sim_h_per_wall_s": args.hours / wall, "finished": s["requests_finished"]})
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        lines = [f"# NPU cluster replay speed ({platform.processor() or platform.machine()}, shared 2-core dev "
                 "machine, other jobs running)", "",
                 f"Command: `.venv/bin/python benchmarks/npu_replay_speed.py --model {args.model} --traces {args.traces} "
                 f"--policies {args.policies} --hours {args.hours:g} --out {args.out}`",
                 "", "Target: a 24-hour replay (288 epochs) in <= 60 s wall. `replay_s` is the decision loop "
                 "(observe / apply / advance every 60 s); the workload and the catalog (DSE + step tables) are "
                 "built once and reported separately. The machine is shared by several helpers, so the CPU time "
                 "of the process is given beside the wall time; the load average during the run is "
                 f"{os.getloadavg()[0]:.1f} on 2 cores.", "",
                 "| model | trace | policy | hours | requests | epochs | replay_s (wall) | replay CPU s | workload_build_s | "
                 "catalog_build_s |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['model']} | {r['trace']} | {r['policy']} | {r['hours']:g} | {r['requests']} | "
                         f"{r['epochs']} | {r['replay_s']:.1f} | {r['replay_cpu_s']:.1f} | {r['workload_build_s']:.1f} | {r['catalog_build_s']:.1f} |")
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
