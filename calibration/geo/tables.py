"""Step-level measurement tables composed from operator-level measurements.

A step's time on the target GPU (A100-SXM4-40GB) is composed from measured kernels:

1. the per-layer dense ops (QKV/O GEMMs, gated-MLP GEMMs, norms, RoPE, activation, residual add)
   from Vidur's A100 profile of Llama-3-8B at the engine's TP degree, interpolated at the step's
   token count, then scaled per op by the roofline ratio
   ``roofline(target shape, A100-40GB) / roofline(Llama-3-8B shape, A100-80GB)`` (Vidur's A100
   is the 80 GB part: same 312 TFLOPS, 2,039 vs 1,555 GB/s, so memory-bound ops slow down by
   up to 1.31x, compute-bound ones not at all; for Qwen2.5-7B the same ratio also carries the
   shape change);
2. for Mixtral's MoE layer, the same measured A100 gated-MLP kernels at the expert shape, run
   once per active expert on its share of the routed tokens (top-2 of 8, balanced routing;
   ``active = 8 (1 - (6/8)^M)`` experts for M tokens), plus the router GEMM by roofline;
3. attention from a fit to Vidur's measured A100 FlashAttention profile
   (:func:`sources.vidur_attention`), rescaled to the model's per-GPU q heads (prefill FLOPs)
   and kv heads (decode KV bytes), decode bytes term scaled 80 GB -> 40 GB by bandwidth;
4. the LM head on the last token of each sequence (vLLM computes logits only there), as a
   roofline GEMM divided by the efficiency Vidur measured for the MLP up-projection at the
   same row count; the embedding lookup from Vidur's ``emb`` column;
5. two all-reduces per layer for TP > 1 from Vidur's DGX-A100 NCCL profile;
6. vLLM's CPU-side per-step overhead ``c0 + c1 B`` (:func:`sources.vidur_cpu_overhead`).

The tables also carry per-GPU FLOPs of the step (``gflops_per_gpu``) that the power model uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from servegym.calibration.geo import sources
from servegym.calibration.geo.specs import ARCHS, GPUS, ModelArch, gemm_flops_bytes, roofline_s

SRC_GPU = GPUS["a100-80gb"]
REF = ARCHS["llama3.1-8b"]  # the shape Vidur profiled (Llama-3-8B == Llama-3.1-8B layer shapes)


@dataclass
class StepComposer:
    """Composes prefill/decode step times (s) for one (model, TP) on A100-40GB from raw measurements."""

    arch: ModelArch
    tp: int
    data: Path
    gpu: str = "a100-40gb"
    extra_step_s: float = 0.0  # vLLM per-step overhead beyond kernels (s), see profiles.vllm_step_residual

    def __post_init__(self) -> None:
        self.dst = GPUS[self.gpu]
        self.ops = sources.vidur_mlp(self.data, self.tp)
        self.attn = sources.vidur_attention(self.data)
        self.cpu_c0, self.cpu_c1 = sources.vidur_cpu_overhead(self.data)
        self.allreduce = sources.vidur_allreduce(self.data, self.tp) if self.tp > 1 else None
        self.qh = self.arch.q_heads / self.tp
        self.kvh = self.arch.kv_heads / self.tp

    # ------------------------------------------------------------ dense layer ops
    def _op_ratio(self, op: str, m: NDArray, arch: ModelArch, expert_rows: bool = False) -> NDArray:
        """Roofline ratio (target shape on A100-40GB) / (Llama-3-8B shape on A100-80GB) at m rows."""
        src_g = REF.gemm_shapes(self.tp)
        dst_g = arch.gemm_shapes(self.tp)
        if op in src_g:
            fs, bs = gemm_flops_bytes(m, *src_g[op])
            fd, bd = gemm_flops_bytes(m, *dst_g[op])
        else:
            ws, wd = REF.elementwise_width(self.tp)[op], arch.elementwise_width(self.tp)[op]
            fs, bs = m * ws, 4.0 * m * ws
            fd, bd = m * wd, 4.0 * m * wd
        return roofline_s(fd, bd, self.dst) / roofline_s(fs, bs, SRC_GPU)

    def _dense_ops(self, m: NDArray, names: tuple[str, ...]) -> NDArray:
        raw = sources.interp_ops(self.ops[list(names)], m)
        return sum(raw[op] * self._op_ratio(op, m, self.arch) for op in names)

    def _mlp(self, m: NDArray) -> NDArray:
        mlp_ops = ("mlp_up_proj", "mlp_act", "mlp_down_proj")
        if self.arch.experts == 1:
            return self._dense_ops(m, mlp_ops)
        e, k = self.arch.experts, self.arch.top_k
        active = e * (1.0 - (1.0 - k / e) ** m)
        rows = np.maximum(k * m / active, 1.0)
        per_expert = self._dense_ops(rows, mlp_ops)
        fr, br = gemm_flops_bytes(m, self.arch.hidden, e)
        return active * per_expert + roofline_s(fr, br, self.dst)

    def _head(self, rows: NDArray, m: NDArray) -> NDArray:
        """Embedding lookup over m tokens + LM head over `rows` sequences (s)."""
        emb = sources.interp_ops(self.ops[["emb"]], m)["emb"] * (SRC_GPU.hbm_bw / self.dst.hbm_bw)
        f, b = gemm_flops_bytes(rows, self.arch.hidden, self.arch.vocab // self.tp)
        up = sources.interp_ops(self.ops[["mlp_up_proj"]], rows)["mlp_up_proj"]
        eff = np.minimum(roofline_s(*gemm_flops_bytes(rows, *REF.gemm_shapes(self.tp)["mlp_up_proj"]), SRC_GPU) / up, 1.0)
        return emb + roofline_s(f, b, self.dst) / eff

    def _comm(self, m: NDArray) -> NDArray:
        if self.allreduce is None:
            return np.zeros_like(m)
        return 2.0 * self.allreduce(m * self.arch.hidden * 2.0)

    def linear_time(self, m: NDArray) -> NDArray:
        """Per-step time (s) of everything but attention and CPU overhead, for m tokens (all layers)."""
        m = np.asarray(m, float)
        attn_side = ("input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
                     "post_attention_layernorm", "add")
        per_layer = self._dense_ops(m, attn_side) + self._mlp(m) + self._comm(m)
        return self.arch.layers * per_layer

    # ------------------------------------------------------------ steps
    def prefill_time(self, n_tokens: NDArray, n_requests: NDArray, causal_pairs: NDArray) -> NDArray:
        """Prefill step time (s): N tokens over B prompts; causal_pairs = Σ n_i (n_i + 1) / 2."""
        n_tokens = np.asarray(n_tokens, float)
        b = np.asarray(n_requests, float)
        attn = self.arch.layers * self.attn.prefill(np.asarray(causal_pairs, float), self.qh)
        return (self.linear_time(n_tokens) + attn + self._head(b, n_tokens)
                + self.cpu_c0 + self.extra_step_s + self.cpu_c1 * b)

    def decode_time(self, batch: NDArray, kv_tokens: NDArray) -> NDArray:
        """Decode step time (s) for B requests holding K cached tokens in total."""
        b = np.asarray(batch, float)
        bw = SRC_GPU.hbm_bw / self.dst.hbm_bw
        attn = self.arch.layers * self.attn.decode(b, np.asarray(kv_tokens, float), self.kvh, bw)
        return self.linear_time(b) + attn + self._head(b, b) + self.cpu_c0 + self.extra_step_s + self.cpu_c1 * b

    def flops_per_gpu(self, n_tokens: NDArray, causal_pairs: NDArray) -> NDArray:
        """Model FLOPs of a step per GPU: 2 x active params x tokens + attention (4 x d_head x heads x pairs)."""
        active = self.arch.params if self.arch.experts == 1 else self.arch.params * (
            0.25 + 0.75 * self.arch.top_k / self.arch.experts)
        attn = 4.0 * self.arch.head_dim * self.arch.q_heads * self.arch.layers * np.asarray(causal_pairs, float)
        return (2.0 * active * np.asarray(n_tokens, float) + attn) / self.tp


# ---------------------------------------------------------------- grids

def prefill_grid(max_tokens: int, max_seqs: int, seed: int = 7) -> pd.DataFrame:
    """Deterministic set of prefill steps: single prompts 32..max_tokens (log-spaced) and mixed batches.

    Columns: n_tokens, n_requests, sum_sq, causal_pairs. Mixed batches draw 2-8 prompt lengths from
    a log-uniform law (rng seeded) and keep those within the token budget.
    """
    rng = np.random.default_rng(seed)
    singles = np.unique(np.round(np.geomspace(32, max_tokens, 90)).astype(int))
    rows = [(n, 1, n * n, n * (n + 1) / 2) for n in singles]
    hi = max(64, min(max_tokens, 8192))
    for _ in range(240):
        b = int(rng.integers(2, min(8, max_seqs) + 1))
        lens = np.round(np.exp(rng.uniform(np.log(16), np.log(hi / 2), size=b))).astype(int)
        if lens.sum() > max_tokens:
            continue
        rows.append((int(lens.sum()), b, int((lens**2).sum()), float((lens * (lens + 1) / 2).sum())))
    return pd.DataFrame(rows, columns=["n_tokens", "n_requests", "sum_sq", "causal_pairs"])


def decode_grid(max_seqs: int, kv_capacity: int, max_context: int) -> pd.DataFrame:
    """Deterministic decode steps: batch 1..max_seqs x mean context 32..max_context, within KV capacity."""
    batches = np.unique(np.round(np.geomspace(1, max_seqs, 24)).astype(int))
    ctx = np.unique(np.round(np.geomspace(32, max_context, 14)).astype(int))
    bb, cc = np.meshgrid(batches, ctx, indexing="ij")
    k = (bb * cc).ravel()
    keep = k <= kv_capacity
    return pd.DataFrame({"batch": bb.ravel()[keep], "kv_tokens": k[keep]})
