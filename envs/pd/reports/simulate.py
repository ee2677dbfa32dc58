"""``servegym pd simulate``: one deployment on the request-level simulator (Poisson, a fraction of mu, the
saturation throughput, or a trace replay) beside the analytical model's figures."""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
from servegym.envs.pd.reports.common import finite

from servegym.errors import MAX_REQUEST_CEILING


def _stats(x: np.ndarray, scale: float = 1.0) -> dict[str, float | None]:
    if x.size == 0:
        return {"p50": None, "p95": None, "max": None, "mean": None}
    return {"p50": float(np.median(x)) * scale, "p95": float(np.percentile(x, 95)) * scale,
            "max": float(np.max(x)) * scale, "mean": float(np.mean(x)) * scale}


def simulate_report(workload: str | None, deployment: str, rate: float | None, load: float | None,
                    saturation: bool, trace: str | None, time_scale: float, duration: float, warmup: float,
                    seed: int, kv_tokens: str | None, reserve: float | None, semantics: str, max_requests: int,
                    as_json: bool) -> int:
    """``servegym pd simulate``: one deployment request by request beside the analytical model."""
    from servegym.envs.pd.sim.catalog import kv_tokens_reading, paper_system
    from servegym.envs.pd.sim.model import PDModel, parse_deployment
    from servegym.envs.pd.sim.saturation import saturation_throughput
    from servegym.envs.pd.sim.simulator import PDSimulator, pd_length_sampler
    from servegym.envs.pd.sim.workload_moments import WorkloadMoments, parse_workload
    from servegym.envs.workload import Requests, poisson_arrivals

    from servegym.errors import ConfigError, check_range, check_request_count

    n_p, n_d = parse_deployment(deployment)
    check_range("--max-requests", max_requests, 1, MAX_REQUEST_CEILING)
    check_range("--duration", duration, 1.0, 30 * 86_400.0)
    check_range("--warmup", warmup, 0.0, 30 * 86_400.0)
    system = paper_system().with_serving(kv_tokens=kv_tokens_reading(kv_tokens), reserve_tokens=reserve)
    total = warmup + duration
    trace_reqs = None
    if trace:
        from servegym.envs.traces import load_trace

        full = load_trace(trace, time_scale=time_scale)
        keep = (full.input_tokens + full.output_tokens + system.serving.reserve_tokens) <= system.serving.kv_tokens
        trace_reqs = Requests(full.arrival_s[keep] - full.arrival_s[0], full.input_tokens[keep],
                              full.output_tokens[keep]).window(0.0, total)
        if len(trace_reqs) == 0:
            raise ConfigError(f"--trace {trace}: no request arrives within the first {total:g} s "
                              "(--warmup + --duration); allowed: a longer window or a smaller --time-scale")
    if trace_reqs is not None and workload is None:
        # The replayed requests define the analytical model's workload (its moments, mu_P, mu_D and the
        # simulator's power normalizers), so the figures printed beside the run describe this trace.
        moments = WorkloadMoments.from_samples(np.maximum(trace_reqs.input_tokens, 1),
                                               np.maximum(trace_reqs.output_tokens, 1),
                                               name=f"{trace} lengths ({len(trace_reqs)} requests replayed)")
    else:
        moments = parse_workload(workload or "fixed:4096:256")
    model = PDModel(moments, system, semantics=semantics)
    cap = model.capacity(n_p, n_d)
    out: dict[str, Any] = {"workload": model.workload.name, "deployment": cap.label, "mu_model": cap.mu,
                           "power_at_mu_model_w": cap.power_w}
    if saturation:
        sat = saturation_throughput(model, n_p, n_d, pd_length_sampler(workload or "fixed:4096:256"),
                                    seed=seed)
        out.update({"mode": "saturation", "offered_rps": sat.offered_rps, "throughput_rps": sat.throughput_rps,
                    "stderr_rps": sat.stderr_rps, "rel_error": sat.rel_error, "window_s": sat.window_s,
                    "warmup_s": sat.warmup_s, "mean_batch": sat.mean_batch, "batch_model": cap.batch,
                    "mean_power_w": sat.mean_power_w, "retractions": sat.retractions})
        if as_json:
            print(json.dumps(finite(out), indent=2))
            return 0
        print(f"{cap.label} on {model.workload.name}: simulated saturation throughput {sat.throughput_rps:.3f} "
              f"+- {sat.stderr_rps:.3f} req/s vs analytical mu {cap.mu:.3f} ({sat.rel_error:+.2%})")
        print(f"  decode batch {sat.mean_batch:.1f} (model {cap.batch:.1f}); power {sat.mean_power_w:.0f} W "
              f"(model {cap.power_w:.0f} W); window {sat.window_s:.0f} s after {sat.warmup_s:.0f} s warm-up")
        return 0
    rng = np.random.default_rng(seed)
    if trace_reqs is not None:
        reqs = trace_reqs
        rate = len(reqs) / total
        out["mode"] = f"trace {trace} (time scale {time_scale:g})"
    else:
        if rate is None and load is None:
            raise ConfigError("give one of --rate, --load, --saturation or --trace")
        rate = rate if rate is not None else load * cap.mu
        check_range("rate", rate, 0.0, 1e5, low_inclusive=False)
        check_request_count(rate * total, max_requests,
                            f"rate {rate:g} req/s x (--warmup {warmup:g} + --duration {duration:g}) s",
                            "--max-requests")
        arr = poisson_arrivals(rate, total, rng)
        isl, osl = pd_length_sampler(workload or "fixed:4096:256").sample(arr.size, rng)
        reqs = Requests(arr, isl, osl)
        out["mode"] = "poisson"
    sim = PDSimulator(model, n_p, n_d, seed=seed)
    sim.submit(reqs)
    sim.advance(warmup)
    sim.window_metrics()
    ttft, tpot = [], []
    steps = max(1, int(np.ceil(duration / 60.0)))
    bar = None
    if sys.stderr.isatty() and not as_json:
        from tqdm import tqdm

        bar = tqdm(total=steps, unit="sim-min", desc="simulating")
    energy = finished = tokens = 0.0
    w: dict[str, Any] = {}
    for i in range(1, steps + 1):
        sim.advance(warmup + duration * i / steps)
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
        "offered_rps": rate, "throughput_rps": finished / duration, "duration_s": duration,
        "warmup_s": warmup, "ttft_s": _stats(np.concatenate(ttft)), "tpot_ms": _stats(np.concatenate(tpot), 1e3),
        "mean_power_w": energy / duration, "decode_tokens_per_s": tokens / duration,
        "queue_at_end": w["queue_len"], "in_decode_at_end": w["in_decode"], "retractions": w["retractions"],
        "model": {"ttft_s": op.ttft_s, "tpot_ms": op.tpot_s * 1e3, "power_w": op.power_w, "batch": op.batch},
    })
    if as_json:
        print(json.dumps(finite(out), indent=2))
        return 0
    t, p = out["ttft_s"], out["tpot_ms"]
    print(f"{cap.label} on {model.workload.name}, {out['mode']} at {rate:.3f} req/s (analytical mu {cap.mu:.3f}); "
          f"{duration:g} s after {warmup:g} s warm-up")
    print(f"  throughput {out['throughput_rps']:.3f} req/s; queue at end {out['queue_at_end']}")

    def fmt(v: float | None, unit: str) -> str:
        return "-" if v is None else f"{v:.3f} {unit}"

    print(f"  TTFT p50 {fmt(t['p50'], 's')}, p95 {fmt(t['p95'], 's')}, max {fmt(t['max'], 's')} "
          f"(model mean {op.ttft_s:.3f} s)")
    print(f"  TPOT p50 {fmt(p['p50'], 'ms')}, p95 {fmt(p['p95'], 'ms')} (model {op.tpot_s * 1e3:.1f} ms)")
    print(f"  power {out['mean_power_w']:.0f} W (model at this rate {op.power_w:.0f} W)")
    return 0
