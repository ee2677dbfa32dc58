"""Speed of the PD analytical model: capacity and power of every deployment with n_P + n_D <= 64.

Target: <= 100 ms for the whole grid (2,016 deployments). Run:
    .venv/bin/python benchmarks/pd_speed.py [--max-instances 64] [--repeat 20]
Reports the median wall time of building the model and evaluating the grid, per workload, and the
scalar brentq path for comparison.
"""

from __future__ import annotations

import argparse
import statistics
import time

from servegym.envs.pd.sim.model import PDModel, all_deployments
from servegym.envs.pd.sim.workload_moments import parse_workload


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-instances", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--workloads", nargs="*", default=["fixed:4096:256", "azure-conv", "mooncake"])
    args = ap.parse_args()
    n_p, n_d = all_deployments(args.max_instances)
    for spec in args.workloads:
        w = parse_workload(spec)  # trace moments are computed once per workload, outside the timing
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            grid = PDModel(w).grid(args.max_instances)
            times.append(time.perf_counter() - t0)
        model = PDModel(w)
        t0 = time.perf_counter()
        for p, d in zip(n_p[:200], n_d[:200], strict=True):
            model.capacity(int(p), int(d))
        scalar = (time.perf_counter() - t0) / 200
        print(f"{spec:>16}: {len(grid)} deployments, vectorized grid median {statistics.median(times) * 1e3:.1f} ms "
              f"(min {min(times) * 1e3:.1f}); scalar brentq {scalar * 1e3:.2f} ms per deployment")


if __name__ == "__main__":
    main()
