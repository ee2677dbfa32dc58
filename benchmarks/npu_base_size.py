"""Base's size for DeepSeek-V3, Base per §5.1 and Figure 20 on the focal scenario: what each reading changes.

The focal scenario (DeepSeek-V3-671B, the 2024 Azure weekday, request level, seed 0; Figure 18) replayed under Base
and NeuScale in each variant below, energy and cost objectives. Per variant it records NeuScale / Base (whole
service, per phase, pool and busy), SLO violations, Base's configuration per phase (version, chips, tp/pp/ep, max
batch, KV per sequence at the trace's largest length), the peak vPods of each phase, and Figure 20's point
(the lower of the peak vPods of the two decode groups with the most tokens under NeuScale, as
``servegym npu validate`` reads it).

Variants (``ClusterConfig`` fields and ``BasePolicy(count=...)``; the first is the default model):

* ``default``: the MLA latent KV cache, the DSE's best fits at their best batch, Base's window count rule;
* ``kv-expanded``: ``kv_form="expanded"`` (each head's key and value cached: 71x the bytes per token);
* ``fit-operating``: ``fit_at="operating"`` (each bucket's fit chosen at the batch its group runs at the trace's
  peak demand; Base: the largest length's fit at the trace's peak);
* ``kv-expanded+operating``: both;
* ``base-trace-peak``: Base holds the vPods of the trace's peak rate all day (``count="trace-peak"``, a bound);
  NeuScale as in ``default`` (not rerun).

Usage: ``nice .venv/bin/python benchmarks/npu_base_size.py [--hours 24] [--variants a,b] [--out-md PATH]
[--out-json PATH]`` (about 20 request-level replays; the markdown goes to benchmarks/results/npu_base_size.md).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
import servegym.baselines.npu  # noqa: F401  (npu_compare's import cycle resolves from here)
from servegym.baselines.npu import BasePolicy, NeuScalePolicy, run_policy
from servegym.baselines.npu_compare import CompareResult
from servegym.envs.npu.reports.validate import decode_groups, fig20_points
from servegym.envs.npu.sim.cluster import ClusterConfig, ConfigCatalog
from servegym.envs.npu.sim.config import NB
from servegym.envs.npu.sim.fluid import make_cluster
from servegym.envs.npu.sim.workloads import make_workload

from servegym.outputs import write_json, write_text

MODEL = "DeepSeek-V3-671B"
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "kv-expanded": {"kv_form": "expanded"},
    "fit-operating": {"fit_at": "operating"},
    "kv-expanded+operating": {"kv_form": "expanded", "fit_at": "operating"},
    "base-trace-peak": {"base_count": "trace-peak"},
}
PAPER = {"energy": 1.37, "cost": 1.73, "slo_satisfaction": 1.31}
"""Figure 18's averages (DeepSeekV3-671B, Azure): NeuScale over Base."""


def base_configs(sim: Any, pol: BasePolicy) -> list[dict]:
    """Base's configuration per phase: allocation, max batch, and the KV one sequence of the largest length holds."""
    out = []
    for (ph, edge), cid in pol.cfg.items():
        e = sim.configs[cid].entry  # the allocation (its latency/energy fields are the bucket that added it first)
        kv = sim.model.kv_bytes_per_token_layer_as(sim.config.kv_form) * sim.model.layers * edge
        b = int(np.searchsorted(sim.edges, edge))
        j = int(sim.jmax[cid, b])  # the largest batch level that fits at this length
        out.append({"phase": ph, "edge": edge, "label": e.label, "version": e.version, "chips": e.chips, "tp": e.tp,
                    "pp": e.pp, "ep": e.ep, "max_batch": e.batch, "kv_gb_per_seq": kv / 1e9,
                    "j_per_token": float(sim.pow[cid, b, j] / sim.tps[cid, b, j]),
                    "latency_s": float(sim.lat[cid, b, 0]), "slo_s": float((sim.slo_p if ph == "prefill" else
                                                                           sim.slo_d)[b])})
    return out


def run_variant(name: str, kw: dict[str, Any], objective: str, hours: float, wl: Any,
                neuscale_row: dict | None) -> dict:
    """Base (and NeuScale unless ``neuscale_row`` is given) on the focal workload ``wl`` in one variant."""
    kw = dict(kw)
    count = kw.pop("base_count", "window")
    cfg = ClusterConfig(model=MODEL, objective=objective, n_candidates=1, **kw)
    cat = ConfigCatalog(cfg)
    res: dict[str, Any] = {"variant": name, "objective": objective}
    for pname in ("base", "neuscale"):
        if pname == "neuscale" and neuscale_row is not None:
            res["neuscale"] = neuscale_row
            continue
        sim = make_cluster(cfg, wl, seed=0, catalog=cat, fidelity="request")
        pol: BasePolicy | NeuScalePolicy = BasePolicy(count=count) if pname == "base" else NeuScalePolicy()
        s = run_policy(sim, pol)
        row: dict[str, Any] = dict(CompareResult(pname, s, np.zeros((0, 2, NB)), np.zeros(0), np.zeros(0)).row())
        alive = np.array([h.alive for h in sim.history])
        row["peak_vpods"] = {"prefill": int(alive[:, 0].sum(axis=1).max()), "decode": int(alive[:, 1].sum(axis=1).max())}
        row["peak_chips"] = {v: int(c) for v, c in sim.max_held.items() if c}
        if pname == "base":
            row["configs"] = base_configs(sim, pol)  # type: ignore[arg-type]
        else:
            groups = decode_groups(sim)
            tot = sum(g["tokens"] for g in groups) or 1.0
            row["decode_groups"] = [{**g, "share": g["tokens"] / tot} for g in groups[:6]]
            row["fig20"] = asdict_point(fig20_points({"decode_groups": groups})[0])
        res[pname] = row
    return res


def asdict_point(p: Any) -> dict:
    return {"ours": p.ours, "holds": p.holds, "rule": p.rule}


def table(results: dict[str, dict[str, dict]], hours: float, cpu_s: float) -> str:
    """The markdown of the results (``results[variant][objective]``)."""
    def ratio(v: str, obj: str, k: str) -> float:
        b, n = results[v][obj]["base"][k], results[v][obj]["neuscale"][k]
        return n / b if b else float("nan")

    L = ["# Base's size for DeepSeek-V3, Base per §5.1, and Figure 20: the focal scenario under each reading", "",
         f"DeepSeek-V3-671B, the 2024 Azure weekday (Monday), {hours:g} h, request level, seed 0; "
         f"`benchmarks/npu_base_size.py --hours {hours:g}` ({cpu_s:.0f} CPU-s). Energy and SLO columns from the "
         "energy-objective replay, cost from the cost objective's. Paper (Figure 18, averages): "
         f"{PAPER['energy']}x energy, {PAPER['cost']}x cost, {PAPER['slo_satisfaction']}x SLO satisfaction. "
         "The variants are in the script's docstring; `default` is the shipped model.", "",
         "## NeuScale / Base", "",
         "| variant | energy (pool) | (busy) | prefill | decode | cost (pool) | (busy) | prefill | decode | "
         "SLO viol. Base % | NeuScale % | Fig. 20 point (vPods) |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for v in results:
        e, c = "energy", "cost"
        cells = [ratio(v, e, "energy_efficiency"), ratio(v, e, "energy_efficiency_busy"),
                 ratio(v, e, "energy_efficiency_prefill"), ratio(v, e, "energy_efficiency_decode"),
                 ratio(v, c, "cost_efficiency"), ratio(v, c, "cost_efficiency_busy"),
                 ratio(v, c, "cost_efficiency_prefill"), ratio(v, c, "cost_efficiency_decode")]
        f20 = results[v][e]["neuscale"].get("fig20", {})
        L.append(f"| {v} | " + " | ".join(f"{x:.3f}" for x in cells)
                 + f" | {results[v][e]['base']['slo_violation_pct']:.2f} | "
                   f"{results[v][e]['neuscale']['slo_violation_pct']:.2f} | "
                   f"{f20.get('ours', float('nan')):.0f} ({'holds' if f20.get('holds') else 'misses'}) |")
    L += ["", "Ratios are NeuScale's tokens/J (tokens/USD) over Base's; *pool* counts every second a vPod holds its "
          "chips, *busy* only the serving steps. Figure 20's point: the lower of the peak vPods of the two decode "
          "groups with the most tokens (holds at >= 2).", "",
          "## Base's configuration (energy objective)", "",
          "| variant | phase | largest length (bucket) | configuration | chips | max batch | KV per sequence at that "
          "length (GB) | J/token there at full batch | latency at batch 1 / SLO (s) | peak vPods | Base's peak chips |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for v in results:
        b = results[v]["energy"]["base"]
        for c in b["configs"]:
            L.append(f"| {v} | {c['phase']} | {c['edge']:,} | `{c['label']}` | {c['chips']} | {c['max_batch']} | "
                     f"{c['kv_gb_per_seq']:.2f} | {c['j_per_token']:.3f} | {c['latency_s']:.3f} / {c['slo_s']:.3f} | "
                     f"{b['peak_vpods'][c['phase']]} | "
                     + ", ".join(f"{k} {x}" for k, x in b["peak_chips"].items()) + " |")
    L += ["", "## NeuScale's busiest decode groups (energy objective)", "",
          "| variant | group (total tokens) | share of decode tokens | peak vPods | configurations |",
          "|---|---|---|---|---|"]
    for v in results:
        for g in results[v]["energy"]["neuscale"]["decode_groups"][:3]:
            L.append(f"| {v} | {g['edge']:,} | {g['share']:.3f} | {g['vpods_max']} | "
                     + ", ".join(f"`{x}`" for x in g["configs"]) + " |")
    return "\n".join(L) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma list of " + ", ".join(VARIANTS))
    ap.add_argument("--out-md", default="benchmarks/results/npu_base_size.md")
    ap.add_argument("--out-json", default=None, help="every row as JSON (optional)")
    args = ap.parse_args()
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in names:
        if v not in VARIANTS:
            raise SystemExit(f"variant {v!r} is unknown; allowed: {', '.join(VARIANTS)}")
    if "base-trace-peak" in names and "default" not in names:
        raise SystemExit("base-trace-peak reuses the default variant's NeuScale rows; add default to --variants")
    wl = make_workload("azure", hours=args.hours, seed=0)
    t0 = time.process_time()
    results: dict[str, dict[str, dict]] = {}
    for v in names:
        results[v] = {}
        for obj in ("energy", "cost"):
            reuse = results["default"][obj]["neuscale"] if v == "base-trace-peak" else None
            results[v][obj] = run_variant(v, VARIANTS[v], obj, args.hours, wl, reuse)
            r = results[v][obj]
            print(v, obj, f"energy {r['neuscale']['energy_efficiency'] / r['base']['energy_efficiency']:.3f}",
                  f"cost {r['neuscale']['cost_efficiency'] / r['base']['cost_efficiency']:.3f}",
                  f"{time.process_time() - t0:.0f} CPU-s", flush=True)
            if args.out_json:
                write_json(args.out_json, results)
    md = table(results, args.hours, time.process_time() - t0)
    write_text(args.out_md, md)
    print(md)
    if args.out_json:
        print(json.dumps({"json": args.out_json}))


if __name__ == "__main__":
    main()
