"""``servegym pd compare``: the provisioning baselines (:mod:`servegym.baselines.pd`) on one PDProvision-v0 day,
side by side, with the verdict."""

from __future__ import annotations

import json


def compare_report(seed: int, steps: int | None, mode: str, as_json: bool, plot: str | None) -> int:
    """``servegym pd compare``: the provisioning baselines on one PDProvision-v0 day (JSON or a table)."""
    from servegym.baselines.pd import compare_policies, plot_deployments

    from servegym.errors import ConfigError

    if steps is not None and steps < 1:
        raise ConfigError(f"--steps = {steps}; allowed: >= 1")
    results = compare_policies({"mode": mode}, seed=seed, max_steps=steps,
                               progress=not as_json)
    rows = [r.summary() for r in results]
    if plot:
        plot_deployments(results, plot)
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    from servegym import report

    print(f"PDProvision-v0 day scenario ({mode} dynamics), seed {seed}"
          + (f", first {steps} periods" if steps else ""))
    keys = ("energy_kwh", "carbon_g", "cost_usd", "slo_violation_pct", "cap_excess_kwh")
    cols = [report.format_column([float(r[k]) for r in rows], decimals=2 if k == "slo_violation_pct" else None)
            for k in keys]
    cells = [[str(r["policy"]), *(c[i] for c in cols)] for i, r in enumerate(rows)]
    print(report.text_table(["policy", "energy (kWh)", "carbon (g)", "cost (USD)", "SLO viol. (%)", "cap excess (kWh)"],
                            cells))
    for g in report.identical_groups({c[0]: c[1:] for c in cells}):
        print(report.wrap(report.explain_identical("pd", g), indent="  "))
    print("\n".join(report.legend("pd", [c[0] for c in cells])))
    low = min(float(r["slo_violation_pct"]) for r in rows)
    best = min((r for r in rows if float(r["slo_violation_pct"]) <= low + 1.0), key=lambda r: float(r["energy_kwh"]))
    print(report.wrap(f"verdict: best {best['policy']}: {float(best['energy_kwh']):.2f} kWh at "
                      f"{float(best['slo_violation_pct']):.2f}% SLO violation (least energy among policies within 1 pp "
                      "of the lowest SLO violation)", indent="  "))
    if plot:
        print(f"plot written to {plot}")
    return 0
