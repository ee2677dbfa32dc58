"""Batch-1 decode TPOT against vPod size per model: ring collectives (latency grows with the group) against the
earlier hop model (a fixed launch cost plus 1 µs per torus hop).

For each model, chip count n and collective model, the fastest feasible allocation of n chips (any version,
TP, PP, EP) at batch 1 and a 2,048-token context, on the scoring model. The paper's §2.4 reading: big vPods
are ICI-bound for small requests, so the curve should turn upward past some size.

Usage: ``.venv/bin/python benchmarks/npu_collectives.py [--out benchmarks/results]`` (about 30 s CPU).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from servegym.envs.npu.sim.catalog import MODELS, model
from servegym.envs.npu.sim.roofline import RooflineParams, enumerate_allocations, evaluate

CONTEXT = 2048
MODELS_RUN = tuple(MODELS)


def tpot_by_size(name: str, params: RooflineParams, versions: tuple[str, ...] | None = None) -> dict[int, tuple[float, str]]:
    """Chip count -> (fastest batch-1 decode TPOT in s, that allocation's label)."""
    kw = {} if versions is None else {"versions": versions}
    space = enumerate_allocations(model(name), params=params, **kw)
    sm = evaluate(space, "decode", CONTEXT, [1])
    lat = np.where(sm.feasible[:, 0], sm.latency_s[:, 0], np.inf)
    out: dict[int, tuple[float, str]] = {}
    for n in sorted(set(space["chips"].astype(int).tolist())):
        sel = np.flatnonzero(space["chips"] == n)
        i = sel[np.argmin(lat[sel])]
        if np.isfinite(lat[i]):
            out[n] = (float(lat[i]), space.vpods[i].label)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    t0 = time.process_time()
    models = {"ring": RooflineParams(), "hop": RooflineParams.hop()}
    res = {(m, k): tpot_by_size(m, p) for m in MODELS_RUN for k, p in models.items()}
    cpu = time.process_time() - t0
    L = ["# Batch-1 decode TPOT against vPod size (scoring model, 2,048-token context)", "",
         "Command: `.venv/bin/python benchmarks/npu_collectives.py` "
         f"({cpu:.0f} CPU-s). Per chip count: the fastest feasible allocation (any version, TP, PP, EP).", "",
         f"Ring collectives: no launch cost, {RooflineParams().ici_step_latency_s * 1e6:.2f} µs per ring step "
         "(an all-reduce over n chips 2(n-1) steps; fitted to Pope et al.'s PaLM 540B decode point). Hop: "
         f"{RooflineParams.hop().collective_launch_s * 1e6:.1f} µs per collective + 1 µs per torus hop (the earlier "
         "model, fitted to the same point).", ""]
    for m in MODELS_RUN:
        ring, hop = res[(m, "ring")], res[(m, "hop")]
        ns = sorted(set(ring) | set(hop))
        best_n = min(ring, key=lambda n: ring[n][0])
        L += [f"## {m}", "", f"Ring: fastest at {best_n} chips ({ring[best_n][0] * 1e3:.2f} ms, {ring[best_n][1]}); "
              f"at the largest size {max(ring)} chips {ring[max(ring)][0] * 1e3:.2f} ms "
              f"({ring[max(ring)][0] / ring[best_n][0]:.2f}x the minimum).", "",
              "| chips | ring TPOT (ms) | ring allocation | hop TPOT (ms) | hop allocation |", "|---|---|---|---|---|"]
        for n in ns:
            r = ring.get(n, (float("nan"), "-"))
            h = hop.get(n, (float("nan"), "-"))
            L.append(f"| {n} | {r[0] * 1e3:.2f} | {r[1]} | {h[0] * 1e3:.2f} | {h[1]} |")
        L.append("")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "npu_collectives.md")
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        fh.write("\n".join(L))
    os.replace(tmp, path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(MODELS_RUN), figsize=(4 * len(MODELS_RUN), 3.4))
    for ax, m in zip(axes, MODELS_RUN, strict=True):
        for k, style in (("ring", "o-"), ("hop", "s--")):
            d = res[(m, k)]
            ns = sorted(d)
            ax.plot(ns, [d[n][0] * 1e3 for n in ns], style, label=k, ms=3)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(m, fontsize=9)
        ax.set_xlabel("chips per vPod")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("batch-1 decode TPOT (ms)")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    png = os.path.join(args.out, "npu_collectives.png")
    fig.savefig(png + ".tmp.png", dpi=110)
    os.replace(png + ".tmp.png", png)
    print(path, png, f"{cpu:.0f} CPU-s")


if __name__ == "__main__":
    main()
