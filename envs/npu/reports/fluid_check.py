"""Cross-check of the fluid NPU simulator against the request-level one on the same episodes.

:func:`crosscheck` runs Base and NeuScale (:func:`~servegym.baselines.npu.run_policy`, their own 60-s
decision loop) on one workload with both fidelities and returns, per policy, energy, cost and SLO
violation of each and their differences; and the fluid once more under the request level's own decisions
(:func:`replay_decisions`: the same targets at the same decision points, so the same vPods with the same boot
times), which separates the fluid model's serving error from the decision loop's divergence (two runs of a
feedback loop part once one decision flips on a queue a job apart, and differ from then on).
``benchmarks/npu_fluid_crosscheck.py`` tabulates it over the test split's models and workloads; a slow test checks
a subset. Tolerances: energy and cost within
:data:`ENERGY_COST_TOL` (relative), SLO violation within :data:`SLO_TOL_PP` percentage points.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from servegym.baselines.npu import make_policy, run_policy
from servegym.envs.npu.sim.cluster import ClusterConfig, ConfigCatalog, NPUCluster, ScalingDecision
from servegym.envs.npu.sim.fluid import FluidCluster
from servegym.envs.npu.sim.workloads import NPUWorkload

ENERGY_COST_TOL = 0.03
"""Largest relative difference of energy and cost (fluid vs request level) the cross-check accepts."""
SLO_TOL_PP = 1.0
"""Largest difference of SLO violation (percentage points) the cross-check accepts."""
POLICIES: tuple[str, ...] = ("base", "neuscale")


@dataclass
class DecisionLog:
    """What :func:`record_decisions` saw, per decision point (index = time / ``check_s``): the decisions applied, in
    order, as (at t = 0 before the replay, the decision), and the targets they left (group -> {configuration: count},
    the simulator's ``targets``, positive counts only), the fleet the loop asked for."""

    decisions: dict[int, list[tuple[bool, ScalingDecision]]] = field(default_factory=dict)
    targets: dict[int, dict[int, dict[int, int]]] = field(default_factory=dict)


def record_decisions(sim: NPUCluster) -> DecisionLog:
    """Log every decision applied to ``sim`` from now on (its :meth:`~NPUCluster.apply`, which
    :meth:`~NPUCluster.provision` calls, wrapped on the instance); the log fills as the run goes."""
    log = DecisionLog()
    inner = sim.apply

    def apply(decision: ScalingDecision) -> None:
        i = round(sim.now / sim.config.check_s)
        log.decisions.setdefault(i, []).append((bool(getattr(sim, "_instant", False)), decision))
        inner(decision)
        log.targets[i] = {g: dict(t) for g, t in sim.targets.items() if t}

    sim.apply = apply  # type: ignore[method-assign]
    return log


def replay_decisions(sim: NPUCluster, log: DecisionLog, hours: float | None = None) -> dict[str, float]:
    """Drive ``sim`` with the decisions of ``log`` at their decision points (observing where the logged run did,
    skipping the observation elsewhere, as :func:`~servegym.baselines.npu.run_policy` does) for ``hours`` (default:
    the workload's horizon); returns the summary."""
    c = sim.config
    horizon = sim.workload.duration_s if hours is None else hours * 3600.0
    points = int(horizon // c.epoch_s) * round(c.epoch_s / c.check_s)
    for i in range(points):
        todo = log.decisions.get(i)
        if todo is None:
            sim.skip_observation()
        else:
            sim.observe()
            for instant, decision in todo:
                (sim.provision if instant else sim.apply)(decision)
        sim.advance(c.check_s)
    return sim.summary()


def first_split_min(a: DecisionLog, b: DecisionLog, check_s: float) -> float | None:
    """Minutes into the run of the first decision point after which two logged runs asked for different fleets
    (targets), None if they never did; a point only one of them acted on compares with the other's last targets."""
    last_a: dict[int, dict[int, int]] = {}
    last_b: dict[int, dict[int, int]] = {}
    for i in sorted(set(a.targets) | set(b.targets)):
        last_a = a.targets.get(i, last_a)
        last_b = b.targets.get(i, last_b)
        if last_a != last_b:
            return i * check_s / 60.0
    return None


def crosscheck(config: ClusterConfig, workload: NPUWorkload, seed: int = 0, hours: float | None = None,
               policies: tuple[str, ...] = POLICIES, catalog: ConfigCatalog | None = None) -> list[dict[str, Any]]:
    """One row per policy: ``energy_j``, ``usd``, ``slo_violation_pct`` of the request-level (``*_request``)
    and fluid (``*_fluid``) runs, ``energy_rel`` / ``usd_rel`` (fluid / request - 1), ``slo_pp`` (fluid -
    request), ``within`` (all three within tolerance) and the CPU seconds of each run; ``split_min``, the first
    decision point (minutes) after which the two runs asked for different fleets (None: never); and the same figures for the
    fluid under the request level's decisions (``*_replay``, ``energy_rel_replay``, ``usd_rel_replay``,
    ``slo_pp_replay``, ``within_replay``)."""
    cat = catalog if catalog is not None else ConfigCatalog(config)
    rows = []
    for name in policies:
        row: dict[str, Any] = {"policy": name}
        logs = {}
        for label, cls in (("request", NPUCluster), ("fluid", FluidCluster), ("replay", FluidCluster)):
            c0 = time.process_time()
            sim = cls(config, workload, seed=seed, catalog=cat)
            if label == "replay":
                s = replay_decisions(sim, logs["request"], hours=hours)
            else:
                logs[label] = record_decisions(sim)
                s = run_policy(sim, make_policy(name), hours=hours)
            row[f"cpu_s_{label}"] = time.process_time() - c0
            for k in ("energy_j", "usd", "slo_violation_pct", "ttft_violation_pct", "tpot_violation_pct", "tokens"):
                row[f"{k}_{label}"] = float(s[k])
        row["split_min"] = first_split_min(logs["request"], logs["fluid"], config.check_s)
        for tag in ("fluid", "replay"):
            sfx = "" if tag == "fluid" else "_replay"
            for k in ("energy_j", "usd"):
                ref = row[f"{k}_request"]
                row[f"{k.split('_')[0]}_rel{sfx}"] = row[f"{k}_{tag}"] / ref - 1.0 if ref > 0 else 0.0
            row[f"slo_pp{sfx}"] = row[f"slo_violation_pct_{tag}"] - row["slo_violation_pct_request"]
            row[f"within{sfx}"] = bool(abs(row[f"energy_rel{sfx}"]) <= ENERGY_COST_TOL
                                       and abs(row[f"usd_rel{sfx}"]) <= ENERGY_COST_TOL
                                       and abs(row[f"slo_pp{sfx}"]) <= SLO_TOL_PP)
        rows.append(row)
    return rows
