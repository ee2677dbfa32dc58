"""Cross-check of the fluid NPU simulator against the request-level one on the same episodes.

:func:`crosscheck` runs Base and NeuScale (:func:`~servegym.baselines.npu.run_policy`, their own 60-s
decision loop) on one workload with both fidelities and returns, per policy, energy, cost and SLO
violation of each and their differences. ``benchmarks/npu_fluid_crosscheck.py`` tabulates it over the
test split's models and workloads; a slow test checks a subset. Tolerances: energy and cost within
:data:`ENERGY_COST_TOL` (relative), SLO violation within :data:`SLO_TOL_PP` percentage points.
"""

from __future__ import annotations

import time
from typing import Any

from servegym.baselines.npu import make_policy, run_policy
from servegym.envs.npu.sim.cluster import ClusterConfig, ConfigCatalog, NPUCluster
from servegym.envs.npu.sim.fluid import FluidCluster
from servegym.envs.npu.sim.workloads import NPUWorkload

ENERGY_COST_TOL = 0.03
"""Largest relative difference of energy and cost (fluid vs request level) the cross-check accepts."""
SLO_TOL_PP = 1.0
"""Largest difference of SLO violation (percentage points) the cross-check accepts."""
POLICIES: tuple[str, ...] = ("base", "neuscale")


def crosscheck(config: ClusterConfig, workload: NPUWorkload, seed: int = 0, hours: float | None = None,
               policies: tuple[str, ...] = POLICIES, catalog: ConfigCatalog | None = None) -> list[dict[str, Any]]:
    """One row per policy: ``energy_j``, ``usd``, ``slo_violation_pct`` of the request-level (``*_request``)
    and fluid (``*_fluid``) runs, ``energy_rel`` / ``usd_rel`` (fluid / request - 1), ``slo_pp`` (fluid -
    request), ``within`` (all three within tolerance) and the CPU seconds of each run."""
    cat = catalog if catalog is not None else ConfigCatalog(config)
    rows = []
    for name in policies:
        row: dict[str, Any] = {"policy": name}
        for label, cls in (("request", NPUCluster), ("fluid", FluidCluster)):
            c0 = time.process_time()
            s = run_policy(cls(config, workload, seed=seed, catalog=cat), make_policy(name), hours=hours)
            row[f"cpu_s_{label}"] = time.process_time() - c0
            for k in ("energy_j", "usd", "slo_violation_pct", "ttft_violation_pct", "tpot_violation_pct", "tokens"):
                row[f"{k}_{label}"] = float(s[k])
        for k in ("energy_j", "usd"):
            ref = row[f"{k}_request"]
            row[f"{k.split('_')[0]}_rel"] = row[f"{k}_fluid"] / ref - 1.0 if ref > 0 else 0.0
        row["slo_pp"] = row["slo_violation_pct_fluid"] - row["slo_violation_pct_request"]
        row["within"] = bool(abs(row["energy_rel"]) <= ENERGY_COST_TOL and abs(row["usd_rel"]) <= ENERGY_COST_TOL
                             and abs(row["slo_pp"]) <= SLO_TOL_PP)
        rows.append(row)
    return rows
