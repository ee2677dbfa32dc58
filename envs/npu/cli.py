"""``servegym npu dse --model M [--phase prefill|decode] [--json]`` and ``servegym npu catalog [--json]``."""

from __future__ import annotations

import argparse
import json

from servegym import report
from servegym.errors import MAX_EXPECTED_REQUESTS, MAX_REQUEST_CEILING


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
    npu.set_defaults(func=lambda args: (npu.print_help(), 2)[1])


def _cmd_dse(args: argparse.Namespace) -> int:
    import sys

    from servegym.envs.npu.sim.dse import PHASES, run_dse

    phases = PHASES if args.phase is None else (args.phase,)
    table = run_dse(args.model, objective=args.objective, phases=phases, slo_factor=args.slo_factor,
                    progress=sys.stderr.isatty() and not args.json)
    entries = table.entries(fallbacks=args.fallbacks)
    if args.plot:
        from servegym.envs.npu.dse_plot import plot_best_fit

        plot_best_fit(table, args.plot)
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], indent=1))
        return 0
    print(f"{table.model.name}: best-fit vPods by {args.objective} per token, SLO = "
          f"{table.slo_factor:g}x single-request latency on NPU-C/NPU-D ({len(table.space)} allocations)")
    # the vPod label carries the chip count (version_shape_tp_pp[_ep]); --json has every field
    headers = ["phase", "seq len", "role", "vPod", "batch", "lat ms", "SLO ms", "ok", "mJ/tok", "µUSD/tok", "tok/s"]
    # one fixed-point format per numeric column (no 2.5e+04 beside 84.87), precise for its smallest entries
    num = [report.format_column(vals, decimals=min(report.decimals_for(vals, 3, 4, by="min"), 4))
           for vals in ([f(e) for e in entries] for f in (
        lambda e: e.latency_s * 1e3, lambda e: e.slo_s * 1e3, lambda e: e.energy_j_per_token * 1e3,
        lambda e: e.usd_per_token * 1e6, lambda e: e.tokens_per_s))]
    rows = [[e.phase, str(e.seq_len), e.role, e.label, str(e.batch), num[0][i], num[1][i],
             "yes" if e.meets_slo else "NO", num[2][i], num[3][i], num[4][i]] for i, e in enumerate(entries)]
    headers, rows, dropped = report.fit_width(headers, rows)
    print(report.text_table(headers, rows))
    if dropped:
        print(f"(not shown, to fit {report.WIDTH} characters: {', '.join(dropped)}; --json has every field)")
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0


def _print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _cmd_catalog(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from servegym.envs.npu.sim.catalog import CHIPS, MODELS

    chips = [asdict(c) for c in CHIPS.values()]
    models = [dict(asdict(m), total_params=m.total_params) for m in MODELS.values()]
    if args.json:
        print(json.dumps({"chips": chips, "models": models}, indent=1))
        return 0
    keys = ["name", "tpu", "tflops", "tflop_per_j", "hbm_gbps", "hbm_gb", "hbm_gb_per_j", "ici_gbps_per_link",
            "ici_links", "torus_dims", "max_chips_per_pod", "usd_per_chip_hour"]
    _print_table([k.upper() for k in keys], [[str(c[k]) for k in keys] for c in chips])
    print()
    mkeys = ["name", "hidden", "layers", "heads", "kv_heads", "ffn", "vocab", "experts", "active_experts"]
    _print_table([k.upper() for k in [*mkeys, "params_B"]],
                 [[str(m[k]) for k in mkeys] + [f"{m['total_params'] / 1e9:.1f}"] for m in models])
    return 0


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
    p.add_argument("--fast", action="store_true", help="the fluid simulator (same as --fidelity fluid)")
    p.add_argument("--max-requests", type=int, default=MAX_EXPECTED_REQUESTS,
                   help="ceiling on the expected requests of a run (default %(default)s: about 3 GB of per-request arrays)")
    p.add_argument("--plot-dir", default=None, help="write vpods_over_time.png and energy_vs_slo.png here")
    p.set_defaults(func=_cmd_compare)


def _cmd_compare(args: argparse.Namespace) -> int:

    from servegym.baselines.npu import compare, plot_compare
    from servegym.envs.npu.sim.catalog import MODELS

    args.model = MODELS.resolve(args.model)  # shown in its canonical spelling from here on
    from servegym.envs.npu.sim.workloads import BURSTY_BASE_RPM, TABLE4_RATE_RPM

    from servegym.errors import check_range, check_request_count

    check_range("--hours", args.hours, 5.0 / 60.0, 24.0 * 7)
    check_range("--max-requests", args.max_requests, 1, MAX_REQUEST_CEILING)
    if args.rate_rpm is not None:
        check_range("--rate-rpm", args.rate_rpm, 0.0, None, low_inclusive=False)
    rate = args.rate_rpm if args.rate_rpm is not None else TABLE4_RATE_RPM.get(args.trace, BURSTY_BASE_RPM)
    check_request_count(rate * 60.0 * args.hours, args.max_requests,
                        f"--rate-rpm {rate:g} x --hours {args.hours:g}", "--max-requests")
    pols = tuple(x.strip() for x in args.policies.split(",") if x.strip())
    fidelity = args.fidelity or ("fluid" if args.fast else "request")
    res = compare(args.model, args.trace, args.hours, pols, seed=args.seed, objective=args.objective,
                  rate_rpm=args.rate_rpm, osl_accuracy=args.osl_accuracy, progress=not args.json, day=args.day,
                  fidelity=fidelity, fit_at=args.fit_at)
    if args.plot_dir:
        plot_compare(res, args.plot_dir, f"{args.model} {args.trace} {args.hours:g} h")
    rows = [{**r.row(), "fidelity": fidelity, "fit_at": args.fit_at} for r in res]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{args.model} on {args.trace}, {args.hours:g} h, seed {args.seed}, {fidelity} simulator (ideal = oracle "
          "bound, uses true lengths)")
    headers = ["policy", "tokens/J", "tokens/USD", "SLO viol. (%)", "TTFT viol. (%)", "TPOT viol. (%)", "energy (MJ)",
               "cost (USD)"]
    cols = [report.format_column([float(r[k]) * scale for r in rows], decimals=d) for k, scale, d in (
        ("energy_efficiency", 1.0, None), ("cost_efficiency", 1.0, None), ("slo_violation_pct", 1.0, 2),
        ("ttft_violation_pct", 1.0, 2), ("tpot_violation_pct", 1.0, 2), ("energy_j", 1e-6, None), ("usd", 1.0, None))]
    cells = [[str(r["policy"]), *(c[i] for c in cols)] for i, r in enumerate(rows)]
    print(report.text_table(headers, cells))
    for line in compare_explanations(rows, cells, args.objective):
        print(line)
    return 0


def compare_explanations(rows: list[dict], cells: list[list[str]], objective: str) -> list[str]:
    """Identical rows and why, the policy legend, and the verdict: the policy with the highest tokens/J (energy
    objective) or tokens/USD (cost) among those within 1 pp of the lowest SLO violation; the oracle is a bound."""
    out = [report.wrap(report.explain_identical("npu", g), indent="  ")
           for g in report.identical_groups({c[0]: c[1:] for c in cells})]
    out += report.legend("npu", [c[0] for c in cells])
    key = "energy_efficiency" if objective == "energy" else "cost_efficiency"
    real = [r for r in rows if not r.get("oracle")]
    if real:
        low = min(float(r["slo_violation_pct"]) for r in real)
        best = max((r for r in real if float(r["slo_violation_pct"]) <= low + 1.0), key=lambda r: float(r[key]))
        unit = "tokens/J" if objective == "energy" else "tokens/USD"
        out.append(report.wrap(f"verdict: best {best['policy']}: {float(best[key]):.4g} {unit} at "
                               f"{float(best['slo_violation_pct']):.2f}% SLO violation (highest {unit} among policies "
                               "within 1 pp of the lowest SLO violation; the oracle is a bound, not ranked)", indent="  "))
    return out
