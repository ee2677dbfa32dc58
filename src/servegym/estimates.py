"""Up-front time estimates of evaluate, dataset and the compare commands, from measured CPU-s per unit of work.

A command knows the size of its work before it starts (episodes x policies x the episode's length from the
config: simulated requests in geo, periods in pd, epochs in npu); :data:`COSTS` holds the CPU-s per unit of each
policy measured by ``benchmarks/episode_costs.py`` (``benchmarks/results/episode_costs.md``; a test checks the two
agree), so the start line gives an estimate and says what it rests on. The measured estimate from the first
units follows as before (:class:`servegym.progress.Progress`).

Standard library only (the CLI's ``--help`` path imports :mod:`servegym.progress`, not this module, but the
commands import it before any heavy work).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The unit of work of each context (what :data:`COSTS` is per).
UNITS: dict[str, str] = {"geo": "1,000 simulated requests", "pd": "provisioning period", "npu": "5-min epoch",
                         "npu compare": "1,000 requests", "npu compare fluid": "1,000 requests"}

#: CPU-s per unit by context and policy, and each context's one-time setup (CPU-s), measured by
#: ``benchmarks/episode_costs.py`` on the shared 2-core dev machine (one process, one thread) at each context's
#: default config; ``agent`` is an episode with sampled valid actions plus a default MlpPolicy's forward pass.
COSTS: dict[str, dict[str, Any]] = {
    "servegym/GeoRoute-v0": {"setup_cpu_s": 1.289, "measured": "2026-12-05",
        "cpu_s_per_unit": {"agent": 0.2995, "rr": 0.005265, "ll": 0.002051, "greedy:0": 0.03294, "greedy:0.5": 0.03296, "greedy:0.9": 0.03171, "ilp": 0.03227, "iter-ilp": 0.05647, "milp": 0.04927, "green-llm": 0.008311, "moer": 0.03152, "oracle": 0.2899}},
    "servegym/GeoRouteWindow-v0": {"setup_cpu_s": 0.5587, "measured": "2026-12-05",
        "cpu_s_per_unit": {"agent": 0.03683, "rr": 0.00188, "ll": 0.001948, "greedy:0": 0.03016, "greedy:0.5": 0.03175, "greedy:0.9": 0.03011, "ilp": 0.03058, "iter-ilp": 0.05524, "milp": 0.04715, "green-llm": 0.008218, "moer": 0.03022, "oracle": 0.2937}},
    "servegym/PDProvision-v0": {"setup_cpu_s": 0.5231, "measured": "2026-12-05",
        "cpu_s_per_unit": {"agent": 0.0003271, "min-power": 0.0001068, "min-power+lookahead": 0.0001031, "static-peak": 8.954e-05, "threshold-hpa": 9.305e-05, "min-power+forecast": 0.000104, "oracle": 0.0002159}},
    "servegym/PDProvisionResidual-v0": {"setup_cpu_s": 0.5084, "measured": "2026-12-05",
        "cpu_s_per_unit": {"agent": 0.0003432, "min-power": 0.0001074, "min-power+lookahead": 0.0001031, "static-peak": 8.829e-05, "threshold-hpa": 9.297e-05, "min-power+forecast": 0.000103, "oracle": 0.0002409}},
    "servegym/PDProvisionFront-v0": {"setup_cpu_s": 0.551, "measured": "2026-12-05",
        "cpu_s_per_unit": {"agent": 0.0002889, "min-power": 0.0001098, "min-power+lookahead": 0.000107, "static-peak": 9.187e-05, "threshold-hpa": 9.271e-05, "min-power+forecast": 0.0001055, "oracle": 0.0002412}},
    "servegym/NPUAutoscale-v0": {"setup_cpu_s": 12.07, "measured": "2026-12-05",
        "cpu_s_per_unit": {"agent": 0.01316, "base": 0.001053, "neuscale": 0.001583, "ideal": 0.0003741, "hindsight": 0.09161}},
    "servegym/NPUAutoscaleResidual-v0": {"setup_cpu_s": 11.61, "measured": "2026-12-05",
        "cpu_s_per_unit": {"agent": 0.003198, "base": 0.0009648, "neuscale": 0.001533, "ideal": 0.0002884, "hindsight": 0.09041}},
    "geo compare": {"setup_cpu_s": 0.6403, "measured": "2026-12-05", "config": "preset paper, moderate load, 10 s",
        "cpu_s_per_unit": {"rr": 0.001027, "ll": 0.001222, "greedy:0": 0.04044, "greedy:0.5": 0.0324, "greedy:0.9": 0.02473, "ilp": 0.0225, "iter-ilp": 0.0477, "milp": 0.06098, "green-llm": 0.007413, "moer": 0.04078}},
    "pd compare": {"setup_cpu_s": 0.1409, "measured": "2026-12-05", "config": "default day",
        "cpu_s_per_unit": {"min-power": 8.331e-05, "min-power+lookahead": 8.227e-05, "static-peak": 7.039e-05, "threshold-hpa": 7.374e-05}},
    "npu compare": {"setup_cpu_s": 1.426, "measured": "2026-12-05", "config": "DeepSeek-V3-671B, azure, 2 h, request level",
        "cpu_s_per_unit": {"workload": 0.001126, "base": 0.003608, "neuscale": 0.002757, "ideal": 2.046e-05}},
    "npu compare fluid": {"setup_cpu_s": 1.381, "measured": "2026-12-05", "config": "DeepSeek-V3-671B, azure, 2 h, fluid level",
        "cpu_s_per_unit": {"workload": 0.001211, "base": 0.005165, "neuscale": 0.0002283, "ideal": 1.093e-05}},
}


def _unit_of(context: str) -> str:
    if context in UNITS:
        return UNITS[context]
    low = context.lower()
    return UNITS["geo"] if "geo" in low else UNITS["pd"] if low.startswith(("pd", "servegym/pd")) else UNITS["npu"]


def episode_units(env: Any) -> float | None:
    """An env episode's size in its family's unit, from the config (before any step): geo ``rate_rps x
    duration_s / 1000`` requests, pd ``scenario.horizon_steps`` periods, npu ``horizon`` epochs; None otherwise."""
    u = getattr(env, "unwrapped", env)
    geo = getattr(u, "geo_config", None)
    if geo is not None:
        return float(geo.rate_rps) * float(geo.duration_s) / 1000.0
    if isinstance(getattr(u, "horizon", None), int):
        return float(u.horizon)
    sc = getattr(getattr(u, "config", None), "scenario", None)
    if sc is not None and hasattr(sc, "horizon_steps"):
        return float(sc.horizon_steps)
    return None


def _per_unit(row: dict[str, Any], policy: str) -> tuple[float, bool]:
    """(CPU-s per unit of ``policy``, whether it was measured); a spec with a parameter (``greedy:0.3``) takes
    its measured sibling (``greedy:0.5``); an unmeasured policy the costliest measured one."""
    per: dict[str, float] = {k: v for k, v in row["cpu_s_per_unit"].items() if k != "workload"}
    if policy in per:
        return per[policy], True
    stem = policy.split(":", 1)[0].split("@", 1)[0]
    same = [v for k, v in per.items() if k.split(":", 1)[0] == stem]
    if same:
        return max(same), True
    return max(per.values()), False


def estimate(context: str, policies: Sequence[str], units: float | None, runs: int = 1, *,
             setup: bool = True, default_config: bool = True, workers: int = 1,
             once: Sequence[str] = ()) -> tuple[float | None, str]:
    """Estimated seconds of ``runs`` runs (episodes, seeds) of each of ``policies`` on ``context`` (an env id or
    ``geo compare``/``pd compare``/``npu compare``), each ``units`` units long, and what it rests on. ``once``:
    rows of the context's table paid once per command in proportion to ``units`` (npu compare's ``workload``)."""
    row = COSTS.get(context)
    if row is None or units is None or not policies:
        return None, ""
    costs = [_per_unit(row, p) for p in policies]
    total = sum(c for c, _ in costs) * float(units) * max(int(runs), 1)
    total += sum(float(row["cpu_s_per_unit"].get(k, 0.0)) for k in once) * float(units)
    if setup:
        total += float(row["setup_cpu_s"])
    total /= max(1, min(int(workers), len(policies) * max(int(runs), 1)))
    unit = _unit_of(context)
    scale, noun = (1000.0, unit.split(" ", 1)[1]) if unit.startswith("1,000 ") else (1.0, unit + "s")
    parts = [f"{units * scale:,.0f} {noun} x {len(policies)} polic{'y' if len(policies) == 1 else 'ies'}"
             f"{f' x {runs} runs' if runs > 1 else ''}, at the CPU-s per {unit} measured for each policy on "
             f"{context} ({row['config'] + ', ' if row.get('config') else ''}{row.get('measured', 'date unknown')}, "
             "benchmarks/results/episode_costs.md)"]
    unmeasured = [p for p, (_, ok) in zip(policies, costs, strict=True) if not ok]
    if unmeasured:
        parts.append(f"{', '.join(unmeasured)} not measured, taken as the costliest")
    if not default_config:
        parts.append("measured at the default config, so rough for this one")
    if workers > 1:
        parts.append(f"divided over {workers} workers")
    return total, "; ".join(parts) + "; a busy machine stretches the wall time"


__all__ = ["COSTS", "UNITS", "episode_units", "estimate"]
