"""``servegym pd simulate`` and ``servegym pd case-study``: the request-level simulator from the command line.

Registered by :func:`add_sim_commands`, which ``servegym.envs.pd.cli.add_commands`` calls with its
``pd`` sub-parser collection.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from servegym.envs.pd import WORKLOAD_SPECS

if TYPE_CHECKING:
    import numpy as np

from servegym.errors import MAX_EXPECTED_REQUESTS, MAX_REQUEST_CEILING


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


def _finite(obj: Any) -> Any:
    """JSON-safe copy: non-finite floats (an unbounded model wait, a phase with no requests) become null."""
    import numpy as np  # the handlers' helpers import numpy, the parser does not (--help stays light)

    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def _stats(x: np.ndarray, scale: float = 1.0) -> dict[str, float | None]:
    import numpy as np

    if x.size == 0:
        return {"p50": None, "p95": None, "max": None, "mean": None}
    return {"p50": float(np.median(x)) * scale, "p95": float(np.percentile(x, 95)) * scale,
            "max": float(np.max(x)) * scale, "mean": float(np.mean(x)) * scale}


def _simulate(args: argparse.Namespace) -> int:
    import numpy as np
    from servegym.envs.pd.sim.catalog import kv_tokens_reading, paper_system
    from servegym.envs.pd.sim.model import PDModel, parse_deployment
    from servegym.envs.pd.sim.simulator import PDSimulator, pd_length_sampler, saturation_throughput
    from servegym.envs.pd.sim.workload_moments import WorkloadMoments, parse_workload
    from servegym.envs.workload import Requests, poisson_arrivals

    from servegym.errors import ConfigError, check_range, check_request_count

    n_p, n_d = parse_deployment(args.deployment)
    check_range("--max-requests", args.max_requests, 1, MAX_REQUEST_CEILING)
    check_range("--duration", args.duration, 1.0, 30 * 86_400.0)
    check_range("--warmup", args.warmup, 0.0, 30 * 86_400.0)
    system = paper_system().with_serving(kv_tokens=kv_tokens_reading(args.kv_tokens), reserve_tokens=args.reserve)
    total = args.warmup + args.duration
    trace_reqs = None
    if args.trace:
        from servegym.envs.traces import load_trace

        full = load_trace(args.trace, time_scale=args.time_scale)
        keep = (full.input_tokens + full.output_tokens + system.serving.reserve_tokens) <= system.serving.kv_tokens
        trace_reqs = Requests(full.arrival_s[keep] - full.arrival_s[0], full.input_tokens[keep],
                              full.output_tokens[keep]).window(0.0, total)
        if len(trace_reqs) == 0:
            raise ConfigError(f"--trace {args.trace}: no request arrives within the first {total:g} s "
                              "(--warmup + --duration); allowed: a longer window or a smaller --time-scale")
    if trace_reqs is not None and args.workload is None:
        # The replayed requests define the analytical model's workload (its moments, mu_P, mu_D and the
        # simulator's power normalizers), so the figures printed beside the run describe this trace.
        workload = WorkloadMoments.from_samples(np.maximum(trace_reqs.input_tokens, 1),
                                                np.maximum(trace_reqs.output_tokens, 1),
                                                name=f"{args.trace} lengths ({len(trace_reqs)} requests replayed)")
    else:
        workload = parse_workload(args.workload or "fixed:4096:256")
    model = PDModel(workload, system, semantics=args.semantics)
    cap = model.capacity(n_p, n_d)
    out: dict[str, Any] = {"workload": model.workload.name, "deployment": cap.label, "mu_model": cap.mu,
                           "power_at_mu_model_w": cap.power_w}
    if args.saturation:
        sat = saturation_throughput(model, n_p, n_d, pd_length_sampler(args.workload or "fixed:4096:256"),
                                    seed=args.seed)
        out.update({"mode": "saturation", "offered_rps": sat.offered_rps, "throughput_rps": sat.throughput_rps,
                    "stderr_rps": sat.stderr_rps, "rel_error": sat.rel_error, "window_s": sat.window_s,
                    "warmup_s": sat.warmup_s, "mean_batch": sat.mean_batch, "batch_model": cap.batch,
                    "mean_power_w": sat.mean_power_w, "retractions": sat.retractions})
        if args.json:
            print(json.dumps(_finite(out), indent=2))
            return 0
        print(f"{cap.label} on {model.workload.name}: simulated saturation throughput {sat.throughput_rps:.3f} "
              f"+- {sat.stderr_rps:.3f} req/s vs analytical mu {cap.mu:.3f} ({sat.rel_error:+.2%})")
        print(f"  decode batch {sat.mean_batch:.1f} (model {cap.batch:.1f}); power {sat.mean_power_w:.0f} W "
              f"(model {cap.power_w:.0f} W); window {sat.window_s:.0f} s after {sat.warmup_s:.0f} s warm-up")
        return 0
    rng = np.random.default_rng(args.seed)
    if trace_reqs is not None:
        reqs = trace_reqs
        rate = len(reqs) / total
        out["mode"] = f"trace {args.trace} (time scale {args.time_scale:g})"
    else:
        if args.rate is None and args.load is None:
            raise ConfigError("give one of --rate, --load, --saturation or --trace")
        rate = args.rate if args.rate is not None else args.load * cap.mu
        check_range("rate", rate, 0.0, 1e5, low_inclusive=False)
        check_request_count(rate * total, args.max_requests,
                            f"rate {rate:g} req/s x (--warmup {args.warmup:g} + --duration {args.duration:g}) s",
                            "--max-requests")
        arr = poisson_arrivals(rate, total, rng)
        isl, osl = pd_length_sampler(args.workload or "fixed:4096:256").sample(arr.size, rng)
        reqs = Requests(arr, isl, osl)
        out["mode"] = "poisson"
    sim = PDSimulator(model, n_p, n_d, seed=args.seed)
    sim.submit(reqs)
    sim.advance(args.warmup)
    sim.window_metrics()
    ttft, tpot = [], []
    steps = max(1, int(np.ceil(args.duration / 60.0)))
    bar = None
    if sys.stderr.isatty() and not args.json:
        from tqdm import tqdm

        bar = tqdm(total=steps, unit="sim-min", desc="simulating")
    energy = finished = tokens = 0.0
    w: dict[str, Any] = {}
    for i in range(1, steps + 1):
        sim.advance(args.warmup + args.duration * i / steps)
        w = sim.window_metrics()
        ttft.append(w["ttft_s"])
        tpot.append(w["tpot_s"])
        energy += w["energy_j"]
        finished += w["finished"]
        tokens += w["decode_tokens"]
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    op = model.operating_point(n_p, n_d, min(rate, 1e9), mu=cap.mu)
    out.update({
        "offered_rps": rate, "throughput_rps": finished / args.duration, "duration_s": args.duration,
        "warmup_s": args.warmup, "ttft_s": _stats(np.concatenate(ttft)), "tpot_ms": _stats(np.concatenate(tpot), 1e3),
        "mean_power_w": energy / args.duration, "decode_tokens_per_s": tokens / args.duration,
        "queue_at_end": w["queue_len"], "in_decode_at_end": w["in_decode"], "retractions": w["retractions"],
        "model": {"ttft_s": op.ttft_s, "tpot_ms": op.tpot_s * 1e3, "power_w": op.power_w, "batch": op.batch},
    })
    if args.json:
        print(json.dumps(_finite(out), indent=2))
        return 0
    t, p = out["ttft_s"], out["tpot_ms"]
    print(f"{cap.label} on {model.workload.name}, {out['mode']} at {rate:.3f} req/s (analytical mu {cap.mu:.3f}); "
          f"{args.duration:g} s after {args.warmup:g} s warm-up")
    print(f"  throughput {out['throughput_rps']:.3f} req/s; queue at end {out['queue_at_end']}")

    def fmt(v: float | None, unit: str) -> str:
        return "-" if v is None else f"{v:.3f} {unit}"

    print(f"  TTFT p50 {fmt(t['p50'], 's')}, p95 {fmt(t['p95'], 's')}, max {fmt(t['max'], 's')} "
          f"(model mean {op.ttft_s:.3f} s)")
    print(f"  TPOT p50 {fmt(p['p50'], 'ms')}, p95 {fmt(p['p95'], 'ms')} (model {op.tpot_s * 1e3:.1f} ms)")
    print(f"  power {out['mean_power_w']:.0f} W (model at this rate {op.power_w:.0f} W)")
    return 0


def _case_study(args: argparse.Namespace) -> int:
    from servegym.envs.pd.case_studies import comparison_rows, get_case_study, plot_case_study, run_case_study

    from servegym.errors import check_range

    get_case_study(args.name)  # validates the name before any work
    check_range("--sample", args.sample, 0.1, 600.0)
    check_range("--startup-delay", args.startup_delay, 0.0, 3_600.0)
    cs, res, model = run_case_study(args.name, seed=args.seed, sample_s=args.sample,
                                    startup_delay_s=args.startup_delay,
                                    progress=sys.stderr.isatty() and not args.json)
    rows = comparison_rows(cs, res, model)
    phases = [res.phase_summary(i) for i in range(len(res.phases))]
    if args.plot:
        plot_case_study(cs, res, args.plot)
    if args.json:
        print(json.dumps(_finite({"case_study": cs.name, "title": cs.title, "source": cs.source, "seed": args.seed,
                                  "phases": phases, "figures": rows, "plot": args.plot}), indent=2, allow_nan=False))
        return 0
    print(f"{cs.title} -- paper {cs.source}")
    print(f"  {'phase':>5} {'deployment':>10} {'from (min)':>10} {'rate':>6} {'served':>7} {'TTFT p50 s':>10} "
          f"{'TTFT max s':>10} {'TPOT p50 ms':>11} {'power W':>8} {'queue':>6}")
    for i, s in enumerate(phases):
        print(f"  {i:>5} {s['deployment']:>10} {float(s['start_s']) / 60:>10.1f} {float(s['rate_rps']):>6.2f} "
              f"{float(s['served_rps']):>7.2f} {float(s['ttft_median_s']):>10.2f} {float(s['ttft_max_s']):>10.1f} "
              f"{float(s['tpot_median_ms']):>11.1f} {float(s['power_w']):>8.0f} {int(s['queue_end']):>6}")
    print(f"  {'key figure':<32} {'simulated':>10} {'model':>8} {'paper':>8}")
    for r in rows:
        print(f"  {r['figure']:<32} {float(r['simulated']):>10.2f} {float(r['model']):>8.2f} {float(r['paper']):>8.2f}")
    if args.plot:
        print(f"plot written to {args.plot}")
    return 0
