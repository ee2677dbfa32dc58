"""Calibration of the npu scoring model's non-roofline terms from measurements outside NeuScale.

Two sources, neither of them NeuScale's results (nothing here is fitted to its 1.13 / 1.43 / 1.36 headline):

* **Pope et al. 2022**, "Efficiently Scaling Transformer Inference" (arXiv 2211.05102, MLSys 2023):
  PaLM 540B on 64 TPU v4 chips (NPU-A in Table 2 of the NeuScale paper), 2,048-token context. Its
  abstract gives "a low-batch-size latency of 29ms per token during generation (using int8 weight
  quantization) and a 76% MFU during large-batch-size processing of input tokens"; its Table 2 ("example
  configurations for PaLM 540B", all on 64 chips) gives the MFU of four settings: low-latency prefill
  (batch 1) 43 %, low-latency decode (batch 64, int8 weights) 14 %, high-throughput prefill (batch 512)
  76 %, high-throughput decode (batch 512, bf16) 33 %. With MFU = 2 N tokens / (time x chips x peak)
  (N = 540 B parameters, 275 TFLOP/s per chip) these are 0.29 s to prefill one 2,048-token prompt,
  28.1 ms per decode step at batch 64 (the abstract's "29 ms"), 95 ms per step at batch 512 and 85 s
  (76 % of peak) for a 512 x 2,048-token prefill. Its §5 adds the shape of the decode
  cost-latency curve: the minimum latency is about 3x lower than the latency at batch 512, and the
  lowest cost per token is only reached at batches of about 512 and above. (The table values were read
  from the paper through a secondary summary of it in the search index; the derived latencies agree with
  the paper's own 29 ms and 1.9 s chatbot figures.)
* **The shipped TPU v6e measurements** (``data/npu/llmservingsim_tpu_v6e/.../Llama-3.1-8B/tp1/attention.csv.gz``,
  one v6e chip, PyTorch/XLA + HF transformers, see its PROVENANCE): decode attention time fits
  ``t = 10.2 µs + 2.2 µs x batch + 3.5 x KV-read roofline`` (least squares over 6,741 decode rows, p50).

What is fitted, and to what:

* ``ici_step_latency_s`` -- the latency of one step of a ring collective (link latency and the step's
  synchronization; an all-reduce over n chips takes 2(n - 1) steps, so the term grows with the group) --
  is the one coefficient fitted: the scoring model's PaLM 540B decode step at batch 64 with int8 weights
  on a 4x4x4 NPU-A vPod (TP 64) must take Pope et al.'s 28.1 ms. Every other Pope figure is held out
  (:func:`pope_report`). The earlier hop model (``collectives = "hop"``) fits a per-collective launch cost
  ``collective_launch_s`` to the same point instead (:func:`fit_collective_launch`).
* ``layer_floor_s`` = 10.2 µs is the intercept of the v6e decode-attention fit: the smallest time one
  layer's attention kernel takes however little work it has; the scoring model never charges a layer
  less. Not fitted to Pope.
* ``kv_read_factor`` stays 1.0: the v6e slope (3.5x the KV-read roofline, 4-6.5x with the intercept)
  measures HF's eager attention on PyTorch/XLA, which materializes the GQA expansion of K and V
  (``repeat_kv``: 32 query heads over 8 KV heads) and the score matrix; a production kernel (Pallas
  ragged paged attention on TPU, or Pope et al.'s, whose batch-512 decode we match within the error
  reported below without it) reads the cache close to the roofline. It is a parameter for sensitivity runs.
* ``step_overhead_s`` stays 0: Pope et al.'s generate loop runs on the device, so the one decode point
  cannot separate a per-step host cost from the per-collective cost (both are fixed per step); it is
  absorbed in ``collective_launch_s`` and kept as a parameter.

Run ``python -m servegym.calibration.npu`` to refit and print the held-out table.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from servegym.envs.npu.sim.catalog import CHIPS, MODELS, VERSIONS, ModelSpec, VPod
from servegym.envs.npu.sim.dse import run_dse
from servegym.envs.npu.sim.roofline import RooflineParams, evaluate, space_for

PALM_540B = ModelSpec(
    name="PaLM-540B", hidden=18432, layers=118, heads=64, kv_heads=1, head_dim=192, ffn=73728, vocab=256000,
    source="Chowdhery et al. 2022 (PaLM) Table 1: d_model 18432, 118 layers, 48 heads x 256, multi-query, "
           "SwiGLU d_ff 4 d_model, vocab 256k, parallel attention+FFN block; modelled as 64 heads x 192 (the same "
           "12,288-wide projections) so a TP-64 vPod shards whole heads; its K/V head is then 192 wide, not 256 "
           "(KV reads at 2,048 tokens change by < 0.1 ms per step)",
    parallel_block=True,
)
POPE_VPOD = VPod("NPU-A", (4, 4, 4), tp=64, pp=1)
"""Pope et al.'s 64 TPU v4 chips: a 4x4x4 slice, all chips in one model-parallel group (no pipeline)."""
PALM_PARAMS = 540e9
"""N in Pope et al.'s MFU (2 N FLOPs per token)."""


@dataclass(frozen=True)
class PopeAnchor:
    """One published PaLM 540B / TPU v4 operating point (64 chips, 2,048-token context)."""

    name: str
    phase: str
    batch: int
    mfu: float
    weight_bytes: float
    fitted: bool
    source: str

    @property
    def tokens(self) -> float:
        return float(self.batch) * (2048.0 if self.phase == "prefill" else 1.0)

    @property
    def step_s(self) -> float:
        """The step time the MFU implies: 2 N tokens / (MFU x 64 x 275 TFLOP/s)."""
        peak = POPE_VPOD.chips * CHIPS["NPU-A"].tflops * 1e12
        return 2.0 * PALM_PARAMS * self.tokens / (self.mfu * peak)


POPE_ANCHORS: tuple[PopeAnchor, ...] = (
    PopeAnchor("decode, low latency", "decode", 64, 0.14, 1.0, True,
               "Table 2 (14 % MFU, int8 weights); abstract: 29 ms/token"),
    PopeAnchor("prefill, low latency", "prefill", 1, 0.43, 2.0, False, "Table 2 (43 % MFU)"),
    PopeAnchor("decode, high throughput", "decode", 512, 0.33, 2.0, False, "Table 2 (33 % MFU, bf16)"),
    PopeAnchor("prefill, high throughput", "prefill", 512, 0.76, 2.0, False,
               "Table 2 (76 % MFU); abstract: 76 % MFU"),
)


def pope_step(params: RooflineParams, anchor: PopeAnchor) -> float:
    """The model's step time (s) at an anchor: prefill latency of the batch, or decode time per step."""
    p = replace(params, weight_bytes=anchor.weight_bytes)
    sm = evaluate(space_for(PALM_540B, [POPE_VPOD], p), anchor.phase, 2048, [anchor.batch])
    return float(sm.latency_s[0, 0])


def fit_collective_launch(params: RooflineParams | None = None, lo: float = 0.0, hi: float = 1e-3) -> float:
    """``collective_launch_s`` that makes the fitted anchor's step time equal Pope et al.'s (bisection;
    the step time rises monotonically with the launch cost)."""
    return _fit_to_anchor(params or RooflineParams(), "collective_launch_s", lo, hi)


def _fit_to_anchor(params: RooflineParams, field: str, lo: float, hi: float) -> float:
    """The value of ``field`` (bisection; the step time rises with it) at which the fitted Pope anchor is matched."""
    target = next(a for a in POPE_ANCHORS if a.fitted)
    f = lambda x: pope_step(replace(params, **{field: x}), target) - target.step_s  # noqa: E731
    if f(lo) > 0:
        raise ValueError(f"the model with {field} = {lo} is already slower than the anchor; nothing to fit")
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)


def fit_ring_step_latency(params: RooflineParams | None = None, lo: float = 0.0, hi: float = 1e-4) -> float:
    """``ici_step_latency_s`` of the ring collective model (no launch cost; every ring step pays it) that makes
    the fitted anchor's step time equal Pope et al.'s (bisection; the step time rises with the per-step latency)."""
    params = replace(params or RooflineParams(), collectives="ring", collective_launch_s=0.0)
    return _fit_to_anchor(params, "ici_step_latency_s", lo, hi)


def decode_cost_curve(params: RooflineParams | None = None,
                      batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)) -> list[dict]:
    """PaLM 540B decode on the 64-chip vPod, bf16: step time, chip-seconds per token and feasibility per batch."""
    params = params or RooflineParams()
    sm = evaluate(space_for(PALM_540B, [POPE_VPOD], params), "decode", 2048, list(batches))
    return [{"batch": b, "step_s": float(sm.latency_s[0, i]), "chip_s_per_token": POPE_VPOD.chips *
             float(sm.period_s[0, i]) / b, "feasible": bool(sm.feasible[0, i])} for i, b in enumerate(batches)]


def pope_report(params: RooflineParams | None = None) -> list[dict]:
    """Each anchor: published step time, the scoring model's, the selection model's, and their errors."""
    params = params or RooflineParams()
    sel = RooflineParams.selection()
    out = []
    for a in POPE_ANCHORS:
        t = pope_step(params, a)
        ts = pope_step(sel, a)
        out.append({"anchor": a.name, "fitted": a.fitted, "batch": a.batch, "published_s": a.step_s,
                    "mfu": a.mfu, "scoring_s": t, "scoring_err": t / a.step_s - 1.0,
                    "scoring_mfu": a.mfu * a.step_s / t, "selection_s": ts, "selection_err": ts / a.step_s - 1.0,
                    "source": a.source})
    return out


V6E_ATTENTION = Path("npu/llmservingsim_tpu_v6e/profiler/v0/perf_models/TPU-v6e-1/meta-llama/Llama-3.1-8B/tp1/"
                     "attention.csv.gz")


def v6e_decode_attention_fit(shared_data: Path) -> dict[str, float]:
    """Least-squares fit of the v6e decode-attention p50 time: intercept (s), per request (s) and the multiple
    of the KV-read roofline (K and V of 8 KV heads x 128, bf16, at 1,640 GB/s); also the median measured /
    roofline ratio where the roofline exceeds 20 µs."""
    import pandas as pd

    d = pd.read_csv(shared_data / V6E_ATTENTION)
    d = d[d.is_prefill == 0]
    roof = d.batch_size * (d.kv_cache_size + 1) * (2 * 8 * 128 * 2) / (CHIPS["NPU-D"].hbm_gbps * 1e9)
    x = np.c_[np.ones(len(d)), d.batch_size, roof]
    coef, *_ = np.linalg.lstsq(x, d.p50_ns.to_numpy() * 1e-9, rcond=None)
    big = roof > 20e-6
    return {"intercept_s": float(coef[0]), "per_request_s": float(coef[1]), "roofline_multiple": float(coef[2]),
            "median_ratio": float((d.p50_ns[big] * 1e-9 / roof[big]).median()), "rows": len(d)}


def write_md(path: str, shared_data: Path | None) -> None:
    """The calibration report: the fit, the held-out Pope et al. anchors, the decode cost curve, the v6e fit."""
    fit = fit_ring_step_latency()
    p = replace(RooflineParams(), ici_step_latency_s=fit)
    hop_fit = fit_collective_launch(RooflineParams.hop())
    L = ["# npu scoring model: calibration of its non-roofline terms", "",
         "Command: `.venv/bin/python -m servegym.calibration.npu --out benchmarks/results/npu_calibration.md`", "",
         "Sources (see `calibration/npu.py`): Pope et al. 2022, *Efficiently Scaling Transformer Inference* "
         "(arXiv 2211.05102), PaLM 540B on 64 TPU v4 chips, 2,048-token context -- Table 2's MFU of its four example "
         "configurations and the abstract's 29 ms/token; and the shipped TPU v6e decode-attention measurements. "
         "Nothing is fitted to NeuScale's results.", "",
         f"Fitted: the ring collectives' per-step latency `ici_step_latency_s` = {fit * 1e6:.3f} µs (shipped "
         f"{RooflineParams().ici_step_latency_s * 1e6:.3f} µs; no launch cost; an all-reduce over n chips takes 2(n-1) "
         "steps) so that the low-latency decode point is matched; everything else below is held out. The earlier "
         f"hop model (`collectives='hop'`: a launch cost plus 1 µs per torus hop) fits `collective_launch_s` = "
         f"{hop_fit * 1e6:.2f} µs to the same point (shipped {RooflineParams.hop().collective_launch_s * 1e6:.2f} µs).", "",
         "| Pope et al. point | batch | MFU | published step | scoring model | error | selection model | error |",
         "|---|---|---|---|---|---|---|---|"]
    for r in pope_report(p):
        L.append(f"| {r['anchor']}{' (fitted)' if r['fitted'] else ''} | {r['batch']} | {r['mfu']:.0%} | "
                 f"{r['published_s'] * 1e3:.1f} ms | {r['scoring_s'] * 1e3:.1f} ms | {r['scoring_err']:+.1%} | "
                 f"{r['selection_s'] * 1e3:.1f} ms | {r['selection_err']:+.1%} |")
    L += ["", "The selection model (FLOPs and HBM bytes only) is 27 % fast on the fitted decode point: the time it "
          "leaves out is what the scoring model charges for collectives. On batch-512 decode the selection model is "
          "*slower* (+41 %): it shards the multi-query KV by heads, replicating it on all 64 chips, while the "
          "scoring model shards it by batch (Pope et al. §3.3), and at batch ≥ 64 the replicated cache no longer "
          "fits in HBM (below).", "",
          "## Decode cost vs latency (PaLM 540B, 64 chips, bf16; Pope et al. §5: minimum latency about 3x below "
          "batch 512's, lowest cost at batch ≥ 512)", "",
          "| batch | scoring step | chip-s/token | fits | selection step | selection fits |", "|---|---|---|---|---|---|"]
    sel = {r["batch"]: r for r in decode_cost_curve(RooflineParams.selection())}
    curve = decode_cost_curve(p)
    for r in curve:
        q = sel[r["batch"]]
        L.append(f"| {r['batch']} | {r['step_s'] * 1e3:.1f} ms | {r['chip_s_per_token']:.4f} | {r['feasible']} | "
                 f"{q['step_s'] * 1e3:.1f} ms | {q['feasible']} |")
    c = {r["batch"]: r for r in curve}
    L += ["", f"Batch-512 step / minimum step = {c[512]['step_s'] / min(r['step_s'] for r in curve):.2f} (Pope: about 3); "
          "chip-seconds per token fall monotonically through batch 1,024.", ""]
    if shared_data is not None and (shared_data / V6E_ATTENTION).exists():
        f = v6e_decode_attention_fit(shared_data)
        L += ["## TPU v6e decode attention (one chip, PyTorch/XLA + HF eager attention)", "",
              f"p50 time = {f['intercept_s'] * 1e6:.1f} µs + {f['per_request_s'] * 1e6:.2f} µs x batch + "
              f"{f['roofline_multiple']:.2f} x KV-read roofline ({f['rows']} decode rows); median measured / roofline "
              f"where the roofline exceeds 20 µs: {f['median_ratio']:.2f}. The intercept is `layer_floor_s`; the "
              "slope is not applied (`kv_read_factor` = 1): it reflects eager attention materializing the GQA "
              "expansion of K/V and the scores, not a production kernel.", ""]
    with open(path, "w") as fh:
        fh.write("\n".join(L) + "\n")


# ---- held-out check of §2.4 (the rest are in benchmarks/npu_validation.py) ---------------------------------
PAPER_SPREADS = {("energy", "prefill"): (3.5, 7.9), ("energy", "decode"): (3.8, 339.7),
                 ("cost", "prefill"): (3.3, 34.2), ("cost", "decode"): (5.5, 2602.0)}
SPREAD_LENGTHS = (1024, 4096, 16384)


def version_spreads(models: tuple[str, ...] = tuple(MODELS), lengths: tuple[int, ...] = SPREAD_LENGTHS,
                    params: RooflineParams | None = None) -> list[dict]:
    """Best/worst version efficiency ratio per (objective, model, phase, length) from the DSE's per-version best fits."""
    out = []
    for obj in ("energy", "cost"):
        for m in models:
            t = run_dse(m, objective=obj, seq_lens=list(lengths), params=params)
            for ph in ("prefill", "decode"):
                for L in lengths:
                    ents = [t.lookup(ph, L, v) for v in VERSIONS]
                    eff = {e.version: 1.0 / (e.energy_j_per_token if obj == "energy" else e.usd_per_token)
                           for e in ents if e is not None}
                    best, worst = max(eff, key=eff.get), min(eff, key=eff.get)
                    out.append({"objective": obj, "model": m, "phase": ph, "seq_len": L, "best": best, "worst": worst,
                                "spread": eff[best] / eff[worst], "versions": len(eff)})
    return out


def spread_verdict(rows: list[dict]) -> list[dict]:
    res = []
    for (obj, ph), (lo, hi) in PAPER_SPREADS.items():
        v = np.array([r["spread"] for r in rows if r["objective"] == obj and r["phase"] == ph])
        if v.size == 0:
            continue
        ours = (float(v.min()), float(v.max()))
        overlap = ours[0] <= hi and ours[1] >= lo
        res.append({"objective": obj, "phase": ph, "paper": (lo, hi), "ours": ours,
                    "verdict": ("overlaps" if overlap else "misses") + (
                        "; wider" if ours[1] > hi and ours[0] < lo else "")})
    return res



def main() -> None:
    ap = argparse.ArgumentParser(description="Refit the npu scoring model's collective launch cost to Pope et al.")
    ap.add_argument("--out", default=None, help="write the calibration report (markdown) here")
    ap.add_argument("--shared-data", default=None, help="the raw data folder (for the v6e attention fit)")
    args = ap.parse_args()
    fit = fit_ring_step_latency()
    print(f"ring ici_step_latency_s fitted: {fit * 1e6:.3f} µs (shipped default {RooflineParams().ici_step_latency_s * 1e6:.3f} µs)")
    hop = fit_collective_launch(RooflineParams.hop())
    print(f"hop collective_launch_s fitted: {hop * 1e6:.2f} µs (shipped {RooflineParams.hop().collective_launch_s * 1e6:.2f} µs)")
    for r in pope_report(replace(RooflineParams(), ici_step_latency_s=fit)):
        print(f"{r['anchor']:26s} {'fit' if r['fitted'] else 'held out':8s} published {r['published_s'] * 1e3:9.2f} ms  "
              f"scoring {r['scoring_s'] * 1e3:9.2f} ms ({r['scoring_err']:+.1%})  "
              f"selection {r['selection_s'] * 1e3:9.2f} ms ({r['selection_err']:+.1%})")
    if args.out:
        write_md(args.out, Path(args.shared_data) if args.shared_data else None)


if __name__ == "__main__":
    main()
