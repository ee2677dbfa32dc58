"""The geo family's command line: ``servegym geo validate``, ``servegym geo compare`` and ``servegym bench speed
geo``. It only parses and checks arguments and calls the reports (:mod:`servegym.envs.geo.reports`); heavy
imports stay inside the handlers, so ``--help`` stays fast.

The ``geo`` group is built by :func:`add_commands` (which adds the ``bench`` group after it). To add a
subcommand, either

- write ``def _add_<name>(geo_sub)`` here and list it in :data:`GEO_SUBCOMMANDS`, or
- put ``add_geo_commands(geo_sub)`` in your own module and list that module in
  :data:`GEO_COMMAND_MODULES` (one line), keeping heavy imports inside the handler.

Either way use :func:`add_geo_subcommand` so every subcommand gets the same shape: a parser
whose ``func`` handler takes the parsed args and returns an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

from servegym.errors import MAX_EXPECTED_REQUESTS, MAX_REQUEST_CEILING, WEEK_S

Handler = Callable[[argparse.Namespace], int]


def add_geo_subcommand(geo_sub: argparse._SubParsersAction, name: str, help: str, handler: Handler,
                       description: str | None = None) -> argparse.ArgumentParser:
    """Add ``servegym geo <name>`` and return its parser for the caller's arguments."""
    p = geo_sub.add_parser(name, help=help, description=description or help)
    p.set_defaults(func=handler)
    return p


def _validate(args: argparse.Namespace) -> int:
    from servegym.envs.geo.reports.validate import RATES_RPS, format_report, validate

    from servegym.errors import ConfigError

    try:
        rates = RATES_RPS if args.rates is None else tuple(float(x) for x in args.rates.split(","))
    except ValueError:
        raise ConfigError(f"--rates = {args.rates!r} must be comma-separated numbers (req/s), e.g. 2,10,50") from None
    res = validate(args.profile, rates=rates, n_requests=args.requests, seed=args.seed, progress=True)
    if args.json:
        json.dump(res, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_report(res))
    return 0 if res["all_pass"] else 1


def _add_validate(geo_sub: argparse._SubParsersAction) -> None:
    from servegym.envs.geo import DEFAULT_VALIDATION_PROFILE as DEFAULT_PROFILE

    p = add_geo_subcommand(
        geo_sub, "validate", "replay the paper's §V-B engine validation and compare with its anchors",
        _validate,
        description="Three engines of a profile, round-robin, Poisson rates 2-50 req/s, CNN-DailyMail-like "
        "lengths; prints saturation throughput, TPOT and TTFT beside the paper (exit 1 if an anchor fails).",
    )
    p.add_argument("--profile", default=DEFAULT_PROFILE, help="profile name or .json path (default: %(default)s)")
    p.add_argument("--requests", type=int, default=2400, help="requests per rate (default: %(default)s)")
    p.add_argument("--rates", default=None, help="comma-separated req/s (default: the 19-rate grid 2..50)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the result as JSON")


# -- compare ---------------------------------------------------------------------------------------------
DEFAULT_PRESET = "paper"
DEFAULT_SIM_SECONDS = 30.0
DEFAULT_POLICIES = "rr,ll,greedy:0,greedy:0.5,greedy:0.9,ilp,iter-ilp,milp,green-llm,moer"
DEFAULT_OUT_DIR = "./servegym-results/geo-compare"
MAX_SEEDS = 1000  # seeds per policy: each is a whole simulation run

_DESCRIPTION = f"""\
Run carbon-aware and carbon-blind geo schedulers on one scenario and compare total carbon,
carbon saving vs round-robin (RR), SLO violation, TTFT p50/p90/p99 and scheduling overhead.

Default: the paper's topology and cluster (preset '{DEFAULT_PRESET}': 4 regions x 4 DCs, 512
Llama-3.1-8B TP1 engines) at moderate load (2400 req/s), {DEFAULT_SIM_SECONDS:g} simulated seconds of arrivals
(the paper runs 200 s), oracle OSLs, all ten policies, one seed: about 26 s of CPU on one process (measured
on the 2-core dev machine; 39 s wall while other jobs shared it, load 5-8; the first run also compiles the
engine kernels, a few seconds).
RR is always run as the reference for the savings (on the same seeds) and reported even if not listed.
Writes compare_runs.csv (every run), compare.csv / compare.md (per policy) and compare.png (the
paper's Fig. 4a scatter) into --out-dir. With --seeds K > 1 every metric is a mean over seeds 0..K-1
with a 95% confidence half-width.
"""


def _add_compare(geo_sub: argparse._SubParsersAction) -> None:
    p = add_geo_subcommand(geo_sub, "compare", "compare the geo scheduling policies on one scenario (Fig. 4a)",
                           _compare, description=_DESCRIPTION)
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--preset", default=DEFAULT_PRESET, help="paper | small | mini (default: %(default)s)")
    p.add_argument("--model", default="Llama-3.1-8B",
                   help="Llama-3.1-8B | Llama-3.1-8B-TP2 | Qwen2.5-7B | Mixtral-8x7B, any case (e.g. llama-3.1-8b) (default: %(default)s)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--rate", type=float, default=None, help="arrival rate, req/s for the whole system")
    g.add_argument("--load", default="moderate",
                   help="low | moderate | high: the paper's rate for the model, scaled to the preset (default: %(default)s)")
    p.add_argument("--policies", default=DEFAULT_POLICIES, help="comma-separated policy specs (default: all ten: %(default)s)")
    p.add_argument("--seeds", type=int, default=1, help="seeds 0..K-1 per policy (default: %(default)s)")
    p.add_argument("--osl", default="oracle", help="oracle | predicted | mean: OSL source of the estimator (default: %(default)s)")
    p.add_argument("--sim-seconds", type=float, default=DEFAULT_SIM_SECONDS,
                   help="simulated seconds of arrivals per run (default: %(default)s)")
    p.add_argument("--workers", type=int, default=1,
                   help="processes (default 1: on a shared 2-core machine a pool saves little)")
    p.add_argument("--max-requests", type=int, default=MAX_EXPECTED_REQUESTS,
                   help="ceiling on the expected requests of a run (default %(default)s: about 3 GB of per-request arrays)")
    p.add_argument("--out-dir", default=DEFAULT_OUT_DIR, help="where tables and the PNG go (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print only a JSON list (one object per policy) on stdout")
    p.add_argument("--force", action="store_true", help="replace a comparison already in --out-dir")


def _compare(args: argparse.Namespace) -> int:
    from servegym.envs.geo.reports.compare import comparison_report
    from servegym.envs.geo.sim.config import preset

    from servegym.errors import ConfigError, check_range, check_request_count

    check_range("--sim-seconds", args.sim_seconds, 0.0, WEEK_S, low_inclusive=False)
    check_range("--seeds", args.seeds, 1, MAX_SEEDS)
    check_range("--max-requests", args.max_requests, 1, MAX_REQUEST_CEILING)
    from servegym.envs.geo.sim.config import PAPER_MODELS

    args.model = PAPER_MODELS.resolve(args.model)  # shown in its canonical spelling from here on
    if args.rate is not None:
        check_range("--rate", args.rate, 0.0, None, low_inclusive=False)
    # The ceiling is checked here, naming the flags; the config then carries the same ceiling.
    # (the preset is built for 1 s first, so that the run's length is set only once the ceiling is checked)
    over: dict = {"duration_s": 1.0, "osl_mode": args.osl}
    rate_desc = f"--rate {args.rate:g}" if args.rate is not None else f"--load {args.load}"
    if args.rate is not None:
        check_request_count(args.rate * args.sim_seconds, args.max_requests,
                            f"{rate_desc} x --sim-seconds {args.sim_seconds:g}", "--max-requests")
        cfg = preset(args.preset, model=args.model, **over)
        # --rate replaces the preset's load-derived rate.
        cfg = cfg.replace(rate_rps=float(args.rate))
    else:
        cfg = preset(args.preset, model=args.model, load=args.load, **over)
    check_request_count(cfg.rate_rps * cfg.duration_s, args.max_requests,
                        f"{rate_desc} ({cfg.rate_rps:g} req/s) x --sim-seconds {args.sim_seconds:g}", "--max-requests")
    cfg = cfg.replace(duration_s=float(args.sim_seconds), max_expected_requests=args.max_requests)
    policies = [s for s in args.policies.split(",") if s.strip()]
    out_dir = Path(args.out_dir)
    from servegym.envs.geo.reports.compare import output_paths

    held = [q.name for q in output_paths(out_dir).values() if q.exists()]
    if held and not args.force:  # as train and evaluate: a previous run's results are replaced only on request
        from servegym.outputs import refuse_existing

        refuse_existing("--out-dir", out_dir, f"a comparison ({', '.join(held)})", resume=False)
    try:  # fail before the runs, not after them
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out-dir = {args.out_dir!r} cannot be created ({exc.strerror}); allowed: a writable folder") from None
    print(comparison_report(cfg, policies, args.seeds, workers=args.workers, out_dir=out_dir, preset_name=args.preset,
                            model=args.model, as_json=args.json))
    return 0


# -- bench -----------------------------------------------------------------------------------------------
def add_bench_commands(subparsers: argparse._SubParsersAction) -> None:
    """Add ``servegym bench speed geo`` (the ``bench`` group: speed benchmarks of the simulators)."""
    bench = subparsers.add_parser(
        "bench", help="how fast a simulator runs (simulated s per wall s); not a policy's score: see benchmark",
        description="Speed of the simulators: simulated seconds per wall second, requests and engine iterations "
                    "per second. To score an agent or a baseline under the benchmark protocol, use "
                    "servegym benchmark.")
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
    from servegym.envs.geo.reports.bench import speed_bench

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


#: In-module subcommand adders, in --help order.
GEO_SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (_add_validate, _add_compare)
#: Other modules defining ``add_geo_commands(geo_sub)``.
GEO_COMMAND_MODULES: tuple[str, ...] = ()


def add_commands(subparsers: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """Add the ``geo`` group, then the ``bench`` group; returns the geo subparsers object so callers can add more."""
    geo = subparsers.add_parser("geo", help="geo-distributed carbon/SLO serving simulator")
    geo_sub = geo.add_subparsers(dest="geo_command", metavar="GEO_COMMAND")

    def _help(_args: argparse.Namespace) -> int:
        geo.print_help()
        return 2

    geo.set_defaults(func=_help)
    for adder in GEO_SUBCOMMANDS:
        adder(geo_sub)
    for mod in GEO_COMMAND_MODULES:
        importlib.import_module(mod).add_geo_commands(geo_sub)
    add_bench_commands(subparsers)
    return geo_sub
