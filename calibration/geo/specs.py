"""Hardware and model-architecture constants used to compose and scale step tables.

GPU figures are vendor datasheet values (dense FP16/BF16 tensor TFLOPS, HBM bandwidth):
A100-SXM4-40GB 312 TFLOPS / 1,555 GB/s / 400 W; A100-SXM4-80GB 312 / 2,039 GB/s / 400 W;
H100-SXM5-80GB 989 / 3,350 GB/s / 700 W. Model shapes come from each model's Hugging Face
``config.json`` (Llama-3.1-8B: 32 layers, 32 q / 8 kv heads, hidden 4096, FFN 14336, vocab
128256; Qwen2.5-7B: 28 layers, 28 q / 4 kv heads, hidden 3584, FFN 18944, vocab 152064;
Mixtral-8x7B-v0.1: 32 layers, 32 q / 8 kv heads, hidden 4096, 8 experts of FFN 14336, top-2,
vocab 32000). Llama-3-8B (Vidur's profiled model) has exactly the Llama-3.1-8B layer shapes;
only RoPE scaling and the context length differ, neither of which changes kernel times.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3


@dataclass(frozen=True)
class GpuSpec:
    """Peak dense FP16 rate (FLOP/s), HBM bandwidth (B/s), memory (bytes) and TDP (W)."""

    name: str
    peak_flops: float
    hbm_bw: float
    memory_bytes: int
    tdp_w: float


GPUS: dict[str, GpuSpec] = {
    "a100-40gb": GpuSpec("a100-40gb", 312e12, 1555e9, 40 * GIB, 400.0),
    "a100-80gb": GpuSpec("a100-80gb", 312e12, 2039e9, 80 * GIB, 400.0),
    "h100-80gb": GpuSpec("h100-80gb", 989e12, 3350e9, 80 * GIB, 700.0),
}

KERNEL_FLOOR_S = 3e-6
"""Per-kernel launch/latency floor (s) added to roofline times so tiny ops scale by ~1, not by the peak ratio."""


def roofline_s(flops: float | object, nbytes: float | object, gpu: GpuSpec):
    """Roofline kernel time (s): ``floor + max(flops/peak, bytes/bandwidth)``; broadcasts over arrays."""
    import numpy as np

    return KERNEL_FLOOR_S + np.maximum(np.asarray(flops, float) / gpu.peak_flops, np.asarray(nbytes, float) / gpu.hbm_bw)


@dataclass(frozen=True)
class ModelArch:
    """Transformer shape (per model, before tensor parallelism) and parameter count."""

    name: str
    hf_id: str
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    params: float
    max_position: int  # config max_position_embeddings -> vLLM's default max_model_len
    experts: int = 1
    top_k: int = 1

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes per token, whole model: layers x kv heads x head dim x (K,V) x 2 B (fp16)."""
        return self.layers * self.kv_heads * self.head_dim * 2 * 2

    @property
    def weight_bytes(self) -> float:
        return self.params * 2.0

    def gemm_shapes(self, tp: int) -> dict[str, tuple[int, int]]:
        """Per-GPU (K, N) of the dense GEMMs of one layer (Vidur op names)."""
        hd = self.head_dim
        return {
            "attn_pre_proj": (self.hidden, (self.q_heads + 2 * self.kv_heads) * hd // tp),
            "attn_post_proj": (self.q_heads * hd // tp, self.hidden),
            "mlp_up_proj": (self.hidden, 2 * self.ffn // tp),
            "mlp_down_proj": (self.ffn // tp, self.hidden),
        }

    def elementwise_width(self, tp: int) -> dict[str, int]:
        """Elements per token touched by the element-wise ops of one layer (read + write counted x2)."""
        return {
            "input_layernorm": self.hidden,
            "post_attention_layernorm": self.hidden,
            "attn_rope": (self.q_heads + self.kv_heads) * self.head_dim // tp,
            "mlp_act": 3 * self.ffn // tp,
            "add": 2 * self.hidden,
        }


ARCHS: dict[str, ModelArch] = {
    "llama3.1-8b": ModelArch("llama3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", 32, 4096, 32, 8, 128, 14336, 128256,
                             8.03e9, 131072),
    "qwen2.5-7b": ModelArch("qwen2.5-7b", "Qwen/Qwen2.5-7B-Instruct", 28, 3584, 28, 4, 128, 18944, 152064,
                            7.62e9, 32768),
    "mixtral-8x7b": ModelArch("mixtral-8x7b", "mistralai/Mixtral-8x7B-Instruct-v0.1", 32, 4096, 32, 8, 128, 14336,
                              32000, 46.7e9, 32768, experts=8, top_k=2),
}


def gemm_flops_bytes(m, k: int, n: int):
    """FLOPs and HBM bytes (fp16) of an (m x k) @ (k x n) GEMM."""
    import numpy as np

    m = np.asarray(m, float)
    return 2.0 * m * k * n, 2.0 * (k * n + m * k + m * n)
