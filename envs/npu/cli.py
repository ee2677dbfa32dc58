"""``servegym npu dse --model M [--phase prefill|decode] [--json]`` and ``servegym npu catalog [--json]``."""

from __future__ import annotations

import argparse
import json


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    npu = subparsers.add_parser("npu", help="heterogeneous NPU autoscaling: chip catalog and roofline DSE")
    sub = npu.add_subparsers(dest="npu_command", metavar="ACTION")
    p = sub.add_parser("dse", help="best-fit vPod per sequence-length bucket (roofline DSE, paper §3.3)")
    p.add_argument("--model", required=True,
                   help="Llama3-8B, Llama3-70B, Llama3.1-405B or DeepSeekV3-671B")
    p.add_argument("--phase", default=None, help="prefill or decode (default: both)")
    p.add_argument("--objective", default="energy", help="energy (J/token, default) or cost (USD/token)")
    p.add_argument("--slo-factor", type=float, default=5.0,
                   help="SLO = factor x single-request latency on the faster of NPU-C/NPU-D (default 5)")
    p.add_argument("--fallbacks", action="store_true",
                   help="also list each chip version's best fit (fail-over candidates)")
    p.add_argument("--json", action="store_true", help="print a JSON list of best-fit entries")
    p.set_defaults(func=_cmd_dse)
    c = sub.add_parser("catalog", help="NPU chip versions (Table 2 + prices) and model shapes")
    c.add_argument("--json", action="store_true", help="print JSON instead of tables")
    c.set_defaults(func=_cmd_catalog)
    npu.set_defaults(func=lambda args: (npu.print_help(), 2)[1])


def _cmd_dse(args: argparse.Namespace) -> int:
    import sys

    from servegym.envs.npu.dse import PHASES, run_dse

    phases = PHASES if args.phase is None else (args.phase,)
    table = run_dse(args.model, objective=args.objective, phases=phases, slo_factor=args.slo_factor,
                    progress=sys.stderr.isatty() and not args.json)
    entries = table.entries(fallbacks=args.fallbacks)
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], indent=1))
        return 0
    print(f"{table.model.name}: best-fit vPods by {args.objective} per token, SLO = "
          f"{table.slo_factor:g}x single-request latency on NPU-C/NPU-D ({len(table.space)} allocations)")
    headers = ["PHASE", "SEQ_LEN", "ROLE", "VPOD", "CHIPS", "BATCH", "LAT_ms", "SLO_ms", "OK",
               "mJ/TOKEN", "uUSD/TOKEN", "TOKENS/s"]
    rows = [[e.phase, str(e.seq_len), e.role, e.label, str(e.chips), str(e.batch),
             f"{e.latency_s * 1e3:.4g}", f"{e.slo_s * 1e3:.4g}", "yes" if e.meets_slo else "NO",
             f"{e.energy_j_per_token * 1e3:.4g}", f"{e.usd_per_token * 1e6:.4g}", f"{e.tokens_per_s:.4g}"]
            for e in entries]
    _print_table(headers, rows)
    return 0


def _print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


def _cmd_catalog(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from servegym.envs.npu.catalog import CHIPS, MODELS

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
