"""``servegym geo compare``: the paper's policies side by side on one scenario (Fig. 4a).

Listed in ``servegym.envs.geo.cli.GEO_COMMAND_MODULES``; heavy imports stay in the handler.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from servegym.errors import MAX_EXPECTED_REQUESTS, MAX_REQUEST_CEILING, WEEK_S

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


def add_geo_commands(geo_sub: argparse._SubParsersAction) -> None:
    from servegym.envs.geo.cli import add_geo_subcommand

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


def _compare(args: argparse.Namespace) -> int:
    from servegym.envs.geo.compare import (
        describe,
        explanations,
        json_records,
        run_comparison,
        summarize,
        text_table,
        write_outputs,
    )
    from servegym.envs.geo.sim.config import preset

    from servegym.errors import ConfigError, check_range, check_request_count
    from servegym.report import seeds_phrase, wrap

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
    try:  # fail before the runs, not after them
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out-dir = {args.out_dir!r} cannot be created ({exc.strerror}); allowed: a writable folder") from None
    t0 = time.perf_counter()
    runs = run_comparison(cfg, policies, args.seeds, workers=args.workers, progress=True)
    wall = time.perf_counter() - t0
    title = describe(cfg, args.preset, args.model)
    paths = write_outputs(runs, out_dir, title=title)
    if args.json:
        json.dump(json_records(runs), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    summary = summarize(runs)
    print(wrap(f"geo compare: {title}; {seeds_phrase(range(args.seeds))}; {wall:.1f} s wall"))
    print(text_table(summary))
    print(wrap("saving vs RR on the same seeds; SLO viol.: % of requests missing TTFT or TPOT; "
               "sched.: mean modelled scheduling delay per request"))
    print("\n".join(explanations(summary)))
    print(wrap(f"wrote {paths['md']}, {paths['csv']}, {paths['runs_csv']}, {paths['png']}"))
    return 0
