"""``servegym pd ...``: capacity, Pareto front and paper validation of the PD provisioning model."""

from __future__ import annotations

import argparse
import json
from typing import Any

from servegym.envs.pd import WORKLOAD_SPECS


def add_commands(subparsers: Any) -> None:
    pd = subparsers.add_parser("pd", help="prefill-decode provisioning model (capacity, power, Pareto)",
                               description="Analytical capacity/power model of PD-disaggregated serving.")
    sub = pd.add_subparsers(dest="pd_command", metavar="SUBCOMMAND")
    pd.set_defaults(func=lambda args: (pd.print_help(), 2)[1])

    cap = sub.add_parser("capacity", help="capacity and power of one deployment")
    cap.add_argument("--workload", required=True, help=f"one of: {WORKLOAD_SPECS}")
    cap.add_argument("--deployment", required=True, help="<n_P>p<n_D>d, e.g. 3p2d")
    _serving_args(cap)
    _semantics_arg(cap)
    cap.add_argument("--json", action="store_true", help="print JSON")
    cap.set_defaults(func=_capacity)

    par = sub.add_parser("pareto", help="epsilon-Pareto front of capacity vs power")
    par.add_argument("--workload", required=True, help=f"one of: {WORKLOAD_SPECS}")
    par.add_argument("--max-instances", type=int, default=8, help="n_P + n_D <= this (default 8)")
    par.add_argument("--eps", type=float, default=0.03, help="epsilon on both axes (default 0.03)")
    par.add_argument("--rate", type=float, default=None,
                     help="also pick the minimum-power deployment with capacity >= RATE / rho_bar (req/s)")
    par.add_argument("--rho-bar", type=float, default=0.85, help="maximum serving utilization (default 0.85)")
    par.add_argument("--budget", type=float, default=None,
                     help="also pick the largest-capacity deployment with power at capacity <= BUDGET (W)")
    _serving_args(par)
    _semantics_arg(par)
    par.add_argument("--json", action="store_true", help="print JSON")
    par.add_argument("--plot", metavar="PNG", help="write a capacity-power plot")
    par.set_defaults(func=_pareto)

    val = sub.add_parser("validate", help="model vs the paper's anchors, with pass/fail")
    _serving_args(val)
    val.add_argument("--json", action="store_true", help="print JSON")
    val.set_defaults(func=_validate)

    # Request-level simulator commands (simulate, case-study) live in sim_cli.py.
    from servegym.envs.pd.sim_cli import add_sim_commands

    add_sim_commands(sub)

    add_compare_command(sub)


def _serving_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kv-tokens", default=None, metavar="TOKENS|NAME",
                   help="C_tok, KV token slots per decode instance: a number, or fitted (default, 244,190: fitted to "
                        "3p1d = 5.2 req/s), sglang-recipe (237,606) or sglang-profiled (269,499)")
    p.add_argument("--reserve", type=float, default=None, help="R, reserved output slots per request")


def _semantics_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--semantics", choices=("paper", "sglang"), default="paper",
                   help="capacity semantics: paper (default; KV reserved through the whole prefill wait) or sglang "
                        "(KV held only once admitted; admissions paced by memory release at saturation)")


def serving_system(args: argparse.Namespace) -> Any:
    """The paper's system with ``--kv-tokens`` (a number or a named reading) and ``--reserve`` applied."""
    from servegym.envs.pd.sim.catalog import kv_tokens_reading, paper_system

    return paper_system().with_serving(kv_tokens=kv_tokens_reading(args.kv_tokens), reserve_tokens=args.reserve)


def _model(args: argparse.Namespace) -> Any:
    from servegym.envs.pd.sim.model import PDModel
    from servegym.envs.pd.sim.workload_moments import parse_workload

    system = serving_system(args)
    return PDModel(parse_workload(args.workload), system, semantics=getattr(args, "semantics", "paper"))


def _capacity(args: argparse.Namespace) -> int:
    from servegym.envs.pd.sim.model import parse_deployment

    n_p, n_d = parse_deployment(args.deployment)
    model = _model(args)
    c = model.capacity(n_p, n_d)
    out = {"workload": model.workload.name, "deployment": c.label, "mu": c.mu, "mu_p": c.mu_p, "mu_d": c.mu_d,
           "batch": c.batch, "mu_d_max": c.mu_d_max, "power_w": c.power_w, "b_max": c.b_max, "rho_p": c.rho_p,
           "wait_s": c.wait_s, "kv_tokens": model.c_tok, "reserve_tokens": model.system.serving.reserve_tokens,
           "semantics": model.semantics}
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{c.label} on {model.workload.name} ({model.semantics} semantics): capacity {c.mu:.3f} req/s "
          f"({'prefill' if c.rho_p > 0.999 else 'decode-side'} balance rho_P={c.rho_p:.3f})")
    print(f"  prefill  mu_P = {c.mu_p:.3f} req/s per instance (x{n_p} = {n_p * c.mu_p:.3f})")
    print(f"  decode   mu_D = {c.mu_d:.3f} req/s per instance at batch B = {c.batch:.1f} "
          f"(full pool: B_max = {c.b_max:.1f}, mu_D^max = {c.mu_d_max:.3f})")
    print(f"  prefill wait {c.wait_s:.3f} s; power at capacity {c.power_w:.0f} W; "
          f"C_tok = {model.c_tok:.0f}, R = {model.system.serving.reserve_tokens:.0f}")
    return 0


def _pareto(args: argparse.Namespace) -> int:
    from servegym.envs.pd.sim.pareto import (
        eps_front,
        exact_front,
        max_capacity_under_power,
        min_power_deployment,
    )

    model = _model(args)
    grid = model.grid(args.max_instances)
    front = eps_front(grid.mu, grid.power_w, args.eps)
    exact = exact_front(grid.mu, grid.power_w)
    labels = grid.labels()

    def rows(idx: Any) -> list[dict[str, Any]]:
        return [{"deployment": labels[i], "n_p": int(grid.n_p[i]), "n_d": int(grid.n_d[i]),
                 "mu": float(grid.mu[i]), "power_w": float(grid.power_w[i])} for i in idx]

    picks: dict[str, Any] = {}
    if args.rate is not None:
        sel = min_power_deployment(grid, args.rate, args.rho_bar)
        picks["min_power"] = None if sel is None else sel.as_dict()
    if args.budget is not None:
        sel = max_capacity_under_power(grid, args.budget)
        picks["max_capacity"] = None if sel is None else sel.as_dict()
    if args.plot:
        _plot(grid, labels, front, exact, model.workload.name, args.plot)
    if args.json:
        print(json.dumps({"workload": model.workload.name, "eps": args.eps, "max_instances": args.max_instances,
                          "deployments": len(grid), "front": rows(front), "exact_front": rows(exact), **picks},
                         indent=2))
        return 0
    print(f"{model.workload.name}: {len(grid)} deployments (n_P + n_D <= {args.max_instances}); "
          f"eps-Pareto front (eps = {args.eps:g}), {len(front)} of {len(exact)} exact-front points:")
    print(f"  {'deployment':>10} {'capacity req/s':>15} {'power W':>9}")
    for r in rows(front):
        print(f"  {r['deployment']:>10} {r['mu']:15.3f} {r['power_w']:9.0f}")
    if "min_power" in picks:
        sel = picks["min_power"]
        need = args.rate / args.rho_bar
        print(f"minimum-power deployment with capacity >= {need:.3f} req/s: "
              + ("none within the instance limit" if sel is None
                 else f"{sel['deployment']} ({sel['mu']:.3f} req/s, {sel['power_w']:.0f} W)"))
    if "max_capacity" in picks:
        sel = picks["max_capacity"]
        print(f"largest capacity within {args.budget:g} W: "
              + ("none" if sel is None else f"{sel['deployment']} ({sel['mu']:.3f} req/s, {sel['power_w']:.0f} W)"))
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0


def _plot(grid: Any, labels: list[str], front: Any, exact: Any, title: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    ax.scatter(grid.mu, grid.power_w, s=12, color="0.7", label="deployments")
    ax.plot(grid.mu[exact], grid.power_w[exact], ":", color="0.4", label="exact front")
    ax.plot(grid.mu[front], grid.power_w[front], "o-", color="C3", label="ε-Pareto front")
    for i in front:
        ax.annotate(labels[i], (grid.mu[i], grid.power_w[i]), textcoords="offset points", xytext=(4, -10),
                    fontsize=8)
    ax.margins(x=0.09, y=0.06)  # room for the labels of the largest deployments inside the axes
    ax.set_xlabel("serving capacity (req/s)")
    ax.set_ylabel("power at capacity (W)")
    ax.set_title(f"PD deployments, {title}")
    ax.legend(loc="upper left")
    from servegym.report import save_png

    save_png(fig, path, dpi=120)  # creates the folder (README examples write into servegym-results/)


def _validate(args: argparse.Namespace) -> int:
    import textwrap

    from servegym.envs.pd.validate import LEGEND, all_required_pass, run_checks

    system = serving_system(args)
    checks = run_checks(system)
    ok = all_required_pass(checks)
    if args.json:
        print(json.dumps({"passed": ok, "legend": LEGEND, "kv_tokens": system.serving.kv_tokens,
                          "reserve_tokens": system.serving.reserve_tokens,
                          "checks": [c.as_dict() for c in checks]}, indent=2))
        return 0 if ok else 1
    how = "fitted to 3p1d = 5.2 req/s, §5.3.2" if system.serving.derivation.startswith("fitted") else (
        system.serving.derivation or "given")
    print(f"C_tok = {system.serving.kv_tokens:,.0f} tokens ({how}), R = {system.serving.reserve_tokens:.0f} tokens")
    def num(v: float) -> str:
        return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.1f}" if abs(v) >= 100 else f"{v:.3f}"

    print(f"{'check':<58} {'model':>9} {'paper':>9} {'error':>7}  {'result':<13}  source")
    for c in checks:
        res = "-" if c.passed is None else ("PASS" if c.passed else "FAIL")
        if not c.required and c.passed is not None:
            res = res.lower()
        if c.required:
            res = f"{res} {c.role}"
        print(f"{c.name[:58]:<58} {num(c.model):>9} {num(c.paper):>9} {c.rel_error:+7.1%}  {res:<13}  {c.source}")
    n_req = sum(c.required for c in checks)
    n_fail = sum(c.required and c.passed is False for c in checks)
    print(f"required anchors: {n_req - n_fail} of {n_req} pass" + ("" if ok else f", {n_fail} FAIL"))
    print(textwrap.fill(LEGEND, width=118))
    return 0 if ok else 1


# --------------------------------------------------------------------- pd compare (baselines on the env)


def add_compare_command(sub: Any) -> None:
    """``servegym pd compare``: run the provisioning baselines on the PDProvision-v0 day scenario."""
    cmp_ = sub.add_parser("compare", help="provisioning baselines on the PDProvision-v0 day scenario",
                          description="Runs min-power (forecast-free and one-step lookahead), static peak and an "
                                      "HPA-like autoscaler on servegym/PDProvision-v0 with the same seed.")
    cmp_.add_argument("--seed", type=int, default=0, help="episode seed (default 0)")
    cmp_.add_argument("--steps", type=int, default=None, help="periods to run (default: the whole day)")
    cmp_.add_argument("--mode", choices=("fluid", "request"), default="fluid",
                      help="env dynamics (default fluid; request is much slower)")
    cmp_.add_argument("--json", action="store_true", help="print a JSON list, one object per policy")
    cmp_.add_argument("--plot", metavar="PNG", help="write the deployment over time of every policy")
    cmp_.set_defaults(func=_compare)


def _compare(args: argparse.Namespace) -> int:
    from servegym.baselines.pd import compare_policies, plot_deployments

    from servegym.errors import ConfigError

    if args.steps is not None and args.steps < 1:
        raise ConfigError(f"--steps = {args.steps}; allowed: >= 1")
    results = compare_policies({"mode": args.mode}, seed=args.seed, max_steps=args.steps,
                               progress=not args.json)
    rows = [r.summary() for r in results]
    if args.plot:
        plot_deployments(results, args.plot)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from servegym import report

    print(f"PDProvision-v0 day scenario ({args.mode} dynamics), seed {args.seed}"
          + (f", first {args.steps} periods" if args.steps else ""))
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
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0
