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
    "servegym/GeoRoute-v0": {"setup_cpu_s": 1.038, "measured": "2026-12-05",
        "cpu_s_per_unit": {"agent": 0.2107, "rr": 0.003183, "ll": 0.002126, "greedy:0": 0.04168, "greedy:0.5": 0.03573, "greedy:0.9": 0.037, "ilp": 0.03486, "iter-ilp": 0.07648, "milp": 0.07875, "green-llm": 0.01174, "moer": 0.03883, "oracle": 0.3522}},
    "servegym/GeoRouteWindow-v0": {"setup_cpu_s": 1.274, "measured": "2026-12-05",
        "cpu_s_per_unit": {"agent": 0.05108, "rr": 0.002243, "ll": 0.002386, "greedy:0": 0.0337, "greedy:0.5": 0.035, "greedy:0.9": 0.03287, "ilp": 0.03546, "iter-ilp": 0.06631, "milp": 0.05675, "green-llm": 0.01014, "moer": 0.03568, "oracle": 0.3313}},
    "servegym/PDProvision-v0": {"setup_cpu_s": 0.5873, "measured": "2026-12-05",
        "cpu_s_per_unit": {"agent": 0.0003841, "min-power": 0.0001208, "min-power+lookahead": 0.000116, "static-peak": 0.0001015, "threshold-hpa": 0.0001084, "min-power+forecast": 0.0001167, "oracle": 0.0002637}},
    "servegym/PDProvisionResidual-v0": {"setup_cpu_s": 0.5429, "measured": "2026-12-05",
        "cpu_s_per_unit": {"agent": 0.0003776, "min-power": 0.0001158, "min-power+lookahead": 0.0001131, "static-peak": 9.806e-05, "threshold-hpa": 0.0001009, "min-power+forecast": 0.0001083, "oracle": 0.0002574}},
    "servegym/PDProvisionFront-v0": {"setup_cpu_s": 0.5611, "measured": "2026-12-05",
        "cpu_s_per_unit": {"agent": 0.0002888, "min-power": 0.0001129, "min-power+lookahead": 0.0001121, "static-peak": 0.0001062, "threshold-hpa": 0.0001069, "min-power+forecast": 0.0001116, "oracle": 0.000243}},
    "servegym/NPUAutoscale-v0": {"setup_cpu_s": 13.45, "measured": "2026-12-05",
        "cpu_s_per_unit": {"agent": 0.003996, "base": 0.002473, "neuscale": 0.003307, "ideal": 0.0003724}},
    "servegym/NPUAutoscaleResidual-v0": {"setup_cpu_s": 11.22, "measured": "2026-12-05",
        "cpu_s_per_unit": {"agent": 0.00508, "base": 0.002367, "neuscale": 0.003337, "ideal": 0.0002829}},
    "geo compare": {"setup_cpu_s": 0.7105, "measured": "2026-12-05", "config": "preset paper, moderate load, 10 s",
        "cpu_s_per_unit": {"rr": 0.001188, "ll": 0.001298, "greedy:0": 0.04845, "greedy:0.5": 0.03745, "greedy:0.9": 0.02713, "ilp": 0.02406, "iter-ilp": 0.05714, "milp": 0.06808, "green-llm": 0.01006, "moer": 0.0501}},
    "pd compare": {"setup_cpu_s": 0.1572, "measured": "2026-12-05", "config": "default day",
        "cpu_s_per_unit": {"min-power": 9.803e-05, "min-power+lookahead": 9.748e-05, "static-peak": 8.382e-05, "threshold-hpa": 8.851e-05}},
    "npu compare": {"setup_cpu_s": 1.627, "measured": "2026-12-05", "config": "DeepSeek-V3-671B, azure, 2 h, request level",
        "cpu_s_per_unit": {"workload": 0.001416, "base": 0.004565, "neuscale": 0.003534, "ideal": 8.605e-05}},
    "npu compare fluid": {"setup_cpu_s": 1.62, "measured": "2026-12-05", "config": "DeepSeek-V3-671B, azure, 2 h, fluid level",
        "cpu_s_per_unit": {"workload": 0.001362, "base": 0.006844, "neuscale": 0.0005562, "ideal": 0.000125}},
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
