"""Cross-check of the analytical PD capacity against the request-level simulator (issue 5, item 4).

For each workload and deployment the analytical capacity mu (Algorithm 1, ``PDModel.capacity``) is
compared with the simulated saturation throughput (``servegym.envs.pd.simulator.saturation_throughput``):
Poisson arrivals at 1.25 mu with lengths drawn as the model's moments assume (App. B.4 filters; Mooncake
input and output independent), a warm-up of max(600 s, 3,000 / mu), then completed requests per second over
a window of max(1,200 s, 12,000 / mu), with a batch-means standard error. Target: |mu - sim| / sim <= 5%.

Run:  .venv/bin/python benchmarks/pd_crosscheck.py [--seeds 2] [--out benchmarks/results/pd_crosscheck]
Writes ``<out>.md`` (table) and ``<out>.json`` (rows), and prints the table.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
from servegym.envs.pd.model import PDModel, deployment_label, parse_deployment
from servegym.envs.pd.simulator import pd_length_sampler, saturation_throughput
from servegym.envs.pd.workload_moments import parse_workload

DEPLOYMENTS = ("1p1d", "2p1d", "3p1d", "3p2d", "4p2d")
WORKLOADS = ("fixed:4096:256", "azure-conv", "azure-code", "mooncake")
TOLERANCE = 0.05


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    ap.add_argument("--deployments", nargs="*", default=list(DEPLOYMENTS))
    ap.add_argument("--seeds", type=int, default=2, help="independent runs averaged per cell (default 2)")
    ap.add_argument("--load-factor", type=float, default=1.25)
    ap.add_argument("--out", default="benchmarks/results/pd_crosscheck")
    ap.add_argument("--render-only", action="store_true", help="rewrite <out>.md from <out>.json without simulating")
    args = ap.parse_args()
    out = Path(args.out)
    if args.render_only:
        saved = json.loads(out.with_suffix(".json").read_text())
        print(render(saved["rows"], saved["meta"]))
        out.with_suffix(".md").write_text(render(saved["rows"], saved["meta"]))
        return
    rows = []
    t_all = time.perf_counter()
    for spec in args.workloads:
        model = PDModel(parse_workload(spec))
        lengths = pd_length_sampler(spec)
        for dep in args.deployments:
            n_p, n_d = parse_deployment(dep)
            t0 = time.perf_counter()
            runs = [saturation_throughput(model, n_p, n_d, lengths, load_factor=args.load_factor, seed=s)
                    for s in range(args.seeds)]
            sim = float(np.mean([r.throughput_rps for r in runs]))
            se = float(np.sqrt(np.sum([r.stderr_rps**2 for r in runs])) / len(runs))
            cap = model.capacity(n_p, n_d)
            no_wait = model.no_wait_capacity(n_p, n_d)
            row = {"workload": spec, "deployment": deployment_label(n_p, n_d), "mu_model": cap.mu,
                   "rho_p_model": cap.rho_p, "mu_no_wait": no_wait, "rel_error_no_wait": (no_wait - sim) / sim,
                   "sim_rps": sim, "sim_stderr_rps": se, "rel_error": (cap.mu - sim) / sim,
                   "batch_model": cap.batch, "batch_sim": float(np.mean([r.mean_batch for r in runs])),
                   "power_model_w": cap.power_w, "power_sim_w": float(np.mean([r.mean_power_w for r in runs])),
                   "retractions": int(sum(r.retractions for r in runs)), "window_s": runs[0].window_s,
                   "warmup_s": runs[0].warmup_s, "wall_s": time.perf_counter() - t0}
            rows.append(row)
            print(f"{spec:>15} {row['deployment']:>5} mu {cap.mu:6.3f} sim {sim:6.3f} +- {se:.3f} "
                  f"err {row['rel_error']:+6.2%} B {cap.batch:5.1f}/{row['batch_sim']:5.1f} "
                  f"P {cap.power_w:5.0f}/{row['power_sim_w']:5.0f} W ({row['wall_s']:.1f} s)", flush=True)
    wall = time.perf_counter() - t_all
    worst = max(abs(r["rel_error"]) for r in rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"seeds": args.seeds, "load_factor": args.load_factor, "tolerance": TOLERANCE, "worst_abs_rel_error": worst,
            "all_within": bool(worst <= TOLERANCE), "wall_s": wall, "python": platform.python_version(),
            "machine": platform.machine()}
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    text = render(rows, meta)
    out.with_suffix(".md").write_text(text)
    print(text)


NOTE = """
Semantics: model and simulator share the admission semantics stated in `servegym.envs.pd.model` (SGLang
0.5.9's decode pre-allocation queue): a request holds l_in + R from admission, through its prefill wait and
service; while the pool cannot fit the head request, arrivals wait in the pre-allocation queue without
memory. The paper's capacity charges the whole Kingman prefill wait to reservations, i.e. it assumes that
admission never waits; the simulator tracks the reserved and unreserved parts of the wait exactly. Where the
model falls more than 5% below the simulation (Mooncake 1p1d and 2p1d), the Kingman queue of reservations
is most of the pool (19 s at 1p1d: rho_P = 0.94 and the heavy-tailed Mooncake inputs give CV_s^2 = 1.15):
the model's mu is the rate at which the mean reserved queue fills the pool, while in the simulator the
overflow waits unreserved and the single prefill instance keeps running at mu_P = 0.861 req/s. This is
not only an overload effect: a Poisson load of 0.85 req/s (98.7% of mu_P, 5% above the model's mu) stays
stable in the simulator for 40,000 s: it completes 0.851 req/s, with 42 requests queued at the end and a
mean TTFT of 95 s (`servegym pd simulate --workload mooncake --deployment 1p1d --rate 0.85 --duration
40000`). The other side is bounded by the last columns: with no reserved waiting at all (t_W = 0,
`PDModel.no_wait_capacity`) the model overshoots by up to {worst_nw} ({worst_nw_cell}), because round-robin
prefill instances fed by memory-gated admission do idle when inputs are heavy-tailed; the simulated
saturation lies between the two bounds (within 3 standard errors) in {between} of {n} cells.
"""


def render(rows: list[dict], meta: dict) -> str:
    worst = meta["worst_abs_rel_error"]
    lines = [
        "# PD cross-check: analytical capacity vs simulated saturation throughput",
        "",
        "Generated by `benchmarks/pd_crosscheck.py`. Saturation throughput = completed req/s over a steady window "
        f"under Poisson load at {meta['load_factor']:g} x mu (warm-up max(600 s, 3000/mu), window max(1200 s, "
        f"12000/mu)), mean of {meta['seeds']} seeds, +- batch-means standard error. Error = (mu - sim) / sim; "
        f"target |error| <= {TOLERANCE:.0%}. model rho_P = prefill utilization at the model's operating point "
        "(the model's capacity is always the decode-side balance, rho_P < 1). B = operating decode batch (model / "
        "simulated time average); P = power at capacity (model) / simulated mean power (W).",
        "",
        "| workload | deployment | model rho_P | model mu (req/s) | simulated (req/s) | error | B model / sim "
        "| P model / sim (W) | retractions | no-wait bound (req/s) | its error |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['deployment']} | {r['rho_p_model']:.3f} | {r['mu_model']:.3f} | "
                     f"{r['sim_rps']:.3f} +- {r['sim_stderr_rps']:.3f} | {r['rel_error']:+.2%} | "
                     f"{r['batch_model']:.1f} / {r['batch_sim']:.1f} | {r['power_model_w']:.0f} / "
                     f"{r['power_sim_w']:.0f} | {r['retractions']} | {r['mu_no_wait']:.3f} | "
                     f"{r['rel_error_no_wait']:+.2%} |")
    n_ok = sum(abs(r["rel_error"]) <= TOLERANCE for r in rows)
    lines += ["", f"Within {TOLERANCE:.0%}: {n_ok} of {len(rows)}. Worst |error|: {worst:.2%}. Total wall time "
              f"{meta['wall_s']:.0f} s on {meta['machine']} (Python {meta['python']}, 2 shared cores).", ""]
    if not meta["all_within"]:
        nw = max(rows, key=lambda r: abs(r["rel_error_no_wait"]))
        # A cell counts as between the bounds within 3 batch-means standard errors of its simulation.
        between = sum(r["mu_model"] - 3 * r["sim_stderr_rps"] <= r["sim_rps"]
                      <= r["mu_no_wait"] + 3 * r["sim_stderr_rps"] for r in rows)
        lines += [NOTE.strip().replace("\n", " ").format(
            worst_nw=f"{nw['rel_error_no_wait']:+.1%}", worst_nw_cell=f"{nw['workload']} {nw['deployment']}",
            between=between, n=len(rows)), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
