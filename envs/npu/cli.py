"""``servegym npu dse``, ``catalog``, ``compare`` and ``validate``: the parsers; each handler passes
the parsed options to a report in :mod:`servegym.envs.npu.reports`, imported lazily."""

from __future__ import annotations

import argparse

from servegym.errors import MAX_EXPECTED_REQUESTS


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    npu = subparsers.add_parser("npu", help="heterogeneous NPU autoscaling: chip catalog and roofline DSE")
    sub = npu.add_subparsers(dest="npu_command", metavar="ACTION")
    p = sub.add_parser("dse", help="best-fit vPod per sequence-length bucket (roofline DSE, paper §3.3)")
    p.add_argument("--model", required=True,
                   help="Llama-3-8B | Llama-3-70B | Llama-3.1-405B | DeepSeek-V3-671B, any case (e.g. deepseek-v3-671b)")
    p.add_argument("--phase", default=None, help="prefill or decode (default: both)")
    p.add_argument("--objective", default="energy", help="energy (J/token, default) or cost (USD/token)")
    p.add_argument("--slo-factor", type=float, default=5.0,
                   help="SLO = factor x single-request latency on the faster of NPU-C/NPU-D (default 5)")
    p.add_argument("--fallbacks", action="store_true",
                   help="also list each chip version's best fit (fail-over candidates)")
    p.add_argument("--json", action="store_true", help="print a JSON list of best-fit entries")
    p.add_argument("--plot", metavar="PNG", default=None,
                   help="also draw the table: J/token (or USD/token) against length per chip version")
    p.set_defaults(func=_cmd_dse)
    c = sub.add_parser("catalog", help="NPU chip versions (Table 2 + prices) and model shapes")
    c.add_argument("--json", action="store_true", help="print JSON instead of tables")
    c.set_defaults(func=_cmd_catalog)
    _add_compare(sub)
    v = sub.add_parser("validate", help="the model against the paper's own validation points (Figures 16, 20, 25, "
                                        "28), each with the published value, ours, the rule and whether it holds")
    v.add_argument("--json", action="store_true", help="print a JSON list of points")
    v.add_argument("--quick", action="store_true",
                   help="fewer rates and shorter runs (a smoke run, about a CPU-minute; not the reported figures)")
    v.add_argument("--hours", type=float, default=None,
                   help="length of the focal scenario's runs, h (default 24, with --quick 1)")
    v.add_argument("--fidelity", default="request", choices=("request", "fluid"),
                   help="simulator of the focal scenario's runs (default %(default)s; the sweeps are request-level)")
    v.add_argument("--seed", type=int, default=0, help="workload and routing seed (default %(default)s)")
    v.set_defaults(func=_cmd_validate)
    npu.set_defaults(func=lambda args: (npu.print_help(), 2)[1])


def _cmd_dse(args: argparse.Namespace) -> int:
    from servegym.envs.npu.reports.dse import dse_report

    return dse_report(args.model, args.phase, args.objective, args.slo_factor, args.fallbacks, args.json, args.plot)


def _cmd_validate(args: argparse.Namespace) -> int:
    from servegym.envs.npu.reports.validate import validate_report

    return validate_report(quick=args.quick, hours=args.hours, seed=args.seed, fidelity=args.fidelity,
                           as_json=args.json)


def _cmd_catalog(args: argparse.Namespace) -> int:
    from servegym.envs.npu.reports.dse import catalog_report

    return catalog_report(args.json)


# ---------------------------------------------------------------------------------------- npu compare
# (cluster simulator + the paper's policies; owned with envs/npu/sim/cluster.py and baselines/npu.py)


def _add_compare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="replay a workload under Base, NeuScale and the Ideal oracle (§5); the "
                                       "defaults are the paper's focal scenario (Figure 18)")
    p.add_argument("--model", default="DeepSeek-V3-671B", help="Llama-3-8B | Llama-3-70B | Llama-3.1-405B | DeepSeek-V3-671B, any case (e.g. deepseek-v3-671b) (default: %(default)s)")
    p.add_argument("--trace", default="azure",
                   help="azure (default: the paper's 2024 Azure trace, one day), azure-2023 (the tiled 2023 hour, "
                        "bursty), lveval, openthoughts or bursty")
    p.add_argument("--day", type=int, default=None,
                   help="day of the 2024 Azure week (0-6 from its first midnight; default 3 = Mon 2024-05-13 for "
                        "coding); not with azure-2023 or bursty")
    p.add_argument("--hours", type=float, default=24.0,
                   help="replay length in hours (default 24, the paper's focal scenario with the default model and "
                        "trace: DeepSeek-V3-671B on a 2024 Azure weekday, 2.9 M requests, about 1 CPU-min)")
    p.add_argument("--policies", default="base,neuscale,ideal", help="comma list of base, neuscale, ideal")
    p.add_argument("--objective", default="energy", help="best-fit objective: energy (default) or cost")
    p.add_argument("--rate-rpm", type=float, default=None, help="mean request rate, req/min (default: Table 4)")
    p.add_argument("--osl-accuracy", type=float, default=0.6, help="output-length prediction accuracy (0.6)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print a JSON list of per-policy results")
    p.add_argument("--fidelity", default=None, choices=("request", "fluid"),
                   help="simulator: request (default, every request) or fluid (per-interval aggregates, 3-4x "
                        "less CPU; benchmarks/results/npu_fluid_crosscheck.md)")
    p.add_argument("--fit-at", default="best-batch", choices=("best-batch", "operating"),
                   help="best fits at the DSE's best batch (default) or at the operating point: each bucket's "
                        "configuration chosen at the batch it runs at the trace's peak demand, static power included")
    p.add_argument("--kv-form", default="latent", choices=("latent", "expanded"),
                   help="an MLA model's KV cache (DeepSeek-V3): its latent (default) or each head's K and V, 71x "
                        "the bytes (an ablation; benchmarks/results/npu_base_size.md)")
    p.add_argument("--fast", action="store_true", help="the fluid simulator (same as --fidelity fluid)")
    p.add_argument("--max-requests", type=int, default=MAX_EXPECTED_REQUESTS,
                   help="ceiling on the expected requests of a run (default %(default)s: about 3 GB of per-request arrays)")
    p.add_argument("--plot-dir", default=None, help="write vpods_over_time.png and energy_vs_slo.png here")
    p.set_defaults(func=_cmd_compare)


def _cmd_compare(args: argparse.Namespace) -> int:
    from servegym.envs.npu.reports.compare import compare_report

    return compare_report(args.model, args.trace, args.hours, args.policies, day=args.day, objective=args.objective,
                          rate_rpm=args.rate_rpm, osl_accuracy=args.osl_accuracy, seed=args.seed, as_json=args.json,
                          fidelity=args.fidelity, fast=args.fast, fit_at=args.fit_at,
                          max_requests=args.max_requests, plot_dir=args.plot_dir, kv_form=args.kv_form)
