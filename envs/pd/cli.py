"""``servegym pd ...``: the pd family's commands. This module only parses the command line; every handler
calls a report of :mod:`servegym.envs.pd.reports` (imported when the command runs, so ``--help`` stays light):

* ``capacity``, ``pareto``: :mod:`~servegym.envs.pd.reports.capacity` (the analytical model, the fronts);
* ``validate``: :mod:`~servegym.envs.pd.reports.validate` (the model vs the paper's anchors);
* ``simulate``: :mod:`~servegym.envs.pd.reports.simulate` (the request-level simulator);
* ``case-study``: :mod:`~servegym.envs.pd.reports.case_studies` (§5.3 / App. D replays);
* ``compare``: :mod:`~servegym.envs.pd.reports.compare` (the baselines on the PDProvision-v0 day).
"""

from __future__ import annotations

import argparse
from typing import Any

from servegym.envs.pd import WORKLOAD_SPECS

from servegym.errors import MAX_EXPECTED_REQUESTS


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


def add_sim_commands(sub: Any) -> None:
    """Add ``simulate`` and ``case-study`` to the ``servegym pd`` sub-parsers."""
    sim = sub.add_parser("simulate", help="request-level simulation of one deployment",
                         description="Simulate a PD deployment request by request (Poisson or trace arrivals) "
                                     "and compare with the analytical model.")
    sim.add_argument("--workload", default=None,
                     help=f"length distribution (and model workload): {WORKLOAD_SPECS} (default fixed:4096:256; "
                          "with --trace, the analytical model uses the replayed requests' own length moments "
                          "unless --workload is given)")
    sim.add_argument("--deployment", required=True, help="<n_P>p<n_D>d, e.g. 3p2d")
    load = sim.add_mutually_exclusive_group()
    load.add_argument("--rate", type=float, help="Poisson arrival rate, req/s")
    load.add_argument("--load", type=float, help="Poisson rate as a fraction of the analytical capacity mu")
    load.add_argument("--saturation", action="store_true",
                      help="measure the saturation throughput (Poisson load 1.25 mu, steady window) vs mu")
    load.add_argument("--trace", help="replay a trace's arrivals and lengths: azure-conv, azure-code, mooncake "
                                      "or a trace file")
    sim.add_argument("--time-scale", type=float, default=1.0, help="trace time scale (<1 compresses; default 1)")
    sim.add_argument("--duration", type=float, default=600.0, help="measured window, s (default 600)")
    sim.add_argument("--warmup", type=float, default=120.0, help="discarded warm-up, s (default 120)")
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--kv-tokens", default=None, metavar="TOKENS|NAME",
                     help="C_tok per decode instance: a number, or fitted (default), sglang-recipe, sglang-profiled")
    sim.add_argument("--reserve", type=float, default=None, help="R, reserved output slots per request")
    sim.add_argument("--semantics", choices=("paper", "sglang"), default="paper",
                     help="capacity semantics of the analytical figures printed beside the run (default paper; "
                          "the simulator itself always follows SGLang's admission)")
    sim.add_argument("--max-requests", type=int, default=MAX_EXPECTED_REQUESTS,
                     help="ceiling on the expected requests of a run (default %(default)s: about 3 GB of per-request arrays)")
    sim.add_argument("--json", action="store_true", help="print JSON")
    sim.set_defaults(func=_simulate)

    cs = sub.add_parser("case-study", help="replay a §5.3 / App. D provisioning case study",
                        description="Case studies of the PD paper on the request-level simulator: rate-drop "
                                    "(§5.3.1), decode-removal (§5.3.2), scale-down (App. D).")
    cs.add_argument("name", help="rate-drop, decode-removal or scale-down")
    cs.add_argument("--plot", metavar="PNG", help="write the time-series figure")
    cs.add_argument("--seed", type=int, default=0)
    cs.add_argument("--sample", type=float, default=2.0, help="sampling interval of the time series, s (default 2)")
    cs.add_argument("--startup-delay", type=float, default=0.0,
                    help="start-up delay of restored instances, s (default 0: the paper keeps them loaded)")
    cs.add_argument("--json", action="store_true", help="print JSON")
    cs.set_defaults(func=_case_study)


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


def serving_system(args: argparse.Namespace) -> Any:
    """The paper's system with ``--kv-tokens`` (a number or a named reading) and ``--reserve`` applied."""
    from servegym.envs.pd.reports.common import serving_system as system

    return system(args.kv_tokens, args.reserve)


# ------------------------------------------------------------------------ handlers: arguments -> a report
def _capacity(args: argparse.Namespace) -> int:
    from servegym.envs.pd.reports.capacity import capacity_report

    return capacity_report(args.workload, args.deployment, args.kv_tokens, args.reserve, args.semantics, args.json)


def _pareto(args: argparse.Namespace) -> int:
    from servegym.envs.pd.reports.capacity import pareto_report

    return pareto_report(args.workload, args.max_instances, args.eps, args.rate, args.rho_bar, args.budget,
                         args.kv_tokens, args.reserve, args.semantics, args.json, args.plot)


def _validate(args: argparse.Namespace) -> int:
    from servegym.envs.pd.reports.validate import validate_report

    return validate_report(args.kv_tokens, args.reserve, args.json)


def _simulate(args: argparse.Namespace) -> int:
    from servegym.envs.pd.reports.simulate import simulate_report

    return simulate_report(args.workload, args.deployment, args.rate, args.load, args.saturation, args.trace,
                           args.time_scale, args.duration, args.warmup, args.seed, args.kv_tokens, args.reserve,
                           args.semantics, args.max_requests, args.json)


def _case_study(args: argparse.Namespace) -> int:
    from servegym.envs.pd.reports.case_studies import case_study_report

    return case_study_report(args.name, args.plot, args.seed, args.sample, args.startup_delay, args.json)


def _compare(args: argparse.Namespace) -> int:
    from servegym.envs.pd.reports.compare import compare_report

    return compare_report(args.seed, args.steps, args.mode, args.json, args.plot)
