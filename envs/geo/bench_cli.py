"""``servegym bench speed geo``: the geo simulator's speed benchmark on the command line."""

from __future__ import annotations

import argparse
import json

from servegym.errors import MAX_EXPECTED_REQUESTS, MAX_REQUEST_CEILING, WEEK_S


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="speed benchmarks of the simulators")
    kinds = bench.add_subparsers(dest="bench_kind", metavar="KIND", required=True)
    speed = kinds.add_parser("speed", help="simulated seconds per wall second")
    fams = speed.add_subparsers(dest="family", metavar="FAMILY", required=True)
    geo = fams.add_parser("geo", help="geo simulator at a preset and arrival rate")
    geo.add_argument("--preset", default="paper", help="paper | small | mini (default paper)")
    geo.add_argument("--model", default="Llama-3.1-8B", help="Llama-3.1-8B | Llama-3.1-8B-TP2 | Qwen2.5-7B | Mixtral-8x7B, any case (e.g. llama-3.1-8b)")
    geo.add_argument("--rate", type=float, default=4000.0, help="arrival rate in req/s (default 4000)")
    geo.add_argument("--sim-seconds", type=float, default=10.0, help="simulated seconds of arrivals (default 10)")
    geo.add_argument("--policy", default="rr", help="rr | ll (default rr)")
    geo.add_argument("--seed", type=int, default=0)
    geo.add_argument("--max-requests", type=int, default=MAX_EXPECTED_REQUESTS,
                     help="ceiling on the expected requests of a run (default %(default)s: about 3 GB of per-request arrays)")
    geo.add_argument("--json", action="store_true", help="print one JSON object")
    geo.set_defaults(func=_bench_geo)


def _bench_geo(args: argparse.Namespace) -> int:
    from servegym.envs.geo.bench import speed_bench

    from servegym.errors import check_range, check_request_count

    check_range("--sim-seconds", args.sim_seconds, 0.0, WEEK_S, low_inclusive=False)
    check_range("--rate", args.rate, 0.0, None, low_inclusive=False)
    check_range("--max-requests", args.max_requests, 1, MAX_REQUEST_CEILING)
    check_request_count(args.rate * args.sim_seconds, args.max_requests,
                        f"--rate {args.rate:g} x --sim-seconds {args.sim_seconds:g}", "--max-requests")
    out = speed_bench(args.preset, args.rate, args.sim_seconds, model=args.model, policy=args.policy, seed=args.seed,
                      max_expected_requests=args.max_requests)
    if args.json:
        print(json.dumps(out))
    else:
        print(f"geo {out['preset']} ({out['engines']} engines, {out['dcs']} DCs) at {out['rate_rps']:g} req/s, "
              f"{out['sim_seconds']:g} simulated s in {out['wall_s']:.2f} wall s (+{out['setup_s']:.2f} s set-up)")
        print(f"  speedup {out['speedup']:.1f}x real time, {out['requests_per_s']:.0f} requests/s, "
              f"{out['engine_iterations_per_s']:.0f} engine iterations/s")
    return 0
