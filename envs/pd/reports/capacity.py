"""``servegym pd capacity`` and ``servegym pd pareto``: the analytical model's capacity and power of a
deployment, and the epsilon-Pareto front of capacity vs power with the minimum-power and maximum-capacity picks."""

from __future__ import annotations

import json
from typing import Any

from servegym.envs.pd.reports.common import serving_system


def _model(workload: str, kv_tokens: str | None, reserve: float | None, semantics: str) -> Any:
    from servegym.envs.pd.sim.model import PDModel
    from servegym.envs.pd.sim.workload_moments import parse_workload

    return PDModel(parse_workload(workload), serving_system(kv_tokens, reserve), semantics=semantics)


def capacity_report(workload: str, deployment: str, kv_tokens: str | None, reserve: float | None,
                    semantics: str, as_json: bool) -> int:
    """``servegym pd capacity``: capacity and power of one deployment (JSON or text on stdout)."""
    from servegym.envs.pd.sim.model import parse_deployment

    n_p, n_d = parse_deployment(deployment)
    model = _model(workload, kv_tokens, reserve, semantics)
    c = model.capacity(n_p, n_d)
    out = {"workload": model.workload.name, "deployment": c.label, "mu": c.mu, "mu_p": c.mu_p, "mu_d": c.mu_d,
           "batch": c.batch, "mu_d_max": c.mu_d_max, "power_w": c.power_w, "b_max": c.b_max, "rho_p": c.rho_p,
           "wait_s": c.wait_s, "kv_tokens": model.c_tok, "reserve_tokens": model.system.serving.reserve_tokens,
           "semantics": model.semantics}
    if as_json:
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


def pareto_report(workload: str, max_instances: int, eps: float, rate: float | None, rho_bar: float,
                  budget: float | None, kv_tokens: str | None, reserve: float | None, semantics: str,
                  as_json: bool, plot: str | None) -> int:
    """``servegym pd pareto``: the epsilon-Pareto front of capacity vs power, with optional picks and plot."""
    from servegym.envs.pd.sim.pareto import (
        eps_front,
        exact_front,
        max_capacity_under_power,
        min_power_deployment,
    )

    model = _model(workload, kv_tokens, reserve, semantics)
    grid = model.grid(max_instances)
    front = eps_front(grid.mu, grid.power_w, eps)
    exact = exact_front(grid.mu, grid.power_w)
    labels = grid.labels()

    def rows(idx: Any) -> list[dict[str, Any]]:
        return [{"deployment": labels[i], "n_p": int(grid.n_p[i]), "n_d": int(grid.n_d[i]),
                 "mu": float(grid.mu[i]), "power_w": float(grid.power_w[i])} for i in idx]

    picks: dict[str, Any] = {}
    if rate is not None:
        sel = min_power_deployment(grid, rate, rho_bar)
        picks["min_power"] = None if sel is None else sel.as_dict()
    if budget is not None:
        sel = max_capacity_under_power(grid, budget)
        picks["max_capacity"] = None if sel is None else sel.as_dict()
    if plot:
        from servegym.envs.pd.reports.plots import plot_front

        plot_front(grid, labels, front, exact, model.workload.name, plot)
    if as_json:
        print(json.dumps({"workload": model.workload.name, "eps": eps, "max_instances": max_instances,
                          "deployments": len(grid), "front": rows(front), "exact_front": rows(exact), **picks},
                         indent=2))
        return 0
    print(f"{model.workload.name}: {len(grid)} deployments (n_P + n_D <= {max_instances}); "
          f"eps-Pareto front (eps = {eps:g}), {len(front)} of {len(exact)} exact-front points:")
    print(f"  {'deployment':>10} {'capacity req/s':>15} {'power W':>9}")
    for r in rows(front):
        print(f"  {r['deployment']:>10} {r['mu']:15.3f} {r['power_w']:9.0f}")
    if "min_power" in picks:
        sel = picks["min_power"]
        need = rate / rho_bar
        print(f"minimum-power deployment with capacity >= {need:.3f} req/s: "
              + ("none within the instance limit" if sel is None
                 else f"{sel['deployment']} ({sel['mu']:.3f} req/s, {sel['power_w']:.0f} W)"))
    if "max_capacity" in picks:
        sel = picks["max_capacity"]
        print(f"largest capacity within {budget:g} W: "
              + ("none" if sel is None else f"{sel['deployment']} ({sel['mu']:.3f} req/s, {sel['power_w']:.0f} W)"))
    if plot:
        print(f"plot written to {plot}")
    return 0
