"""Catalog of NPU chip versions, their prices, the served LLMs and the vPod allocation unit.

Every number cites where it came from:

* Chips: Table 2 of ``papers/heterogeneous-npu-autoscaling.md`` (NeuScale). NPU-A/B/C/D are
  derived from TPU v4/v5e/v5p/v6e; the paper marks values it inferred rather than took from the
  vendor with ``*`` (kept as ``inferred`` notes below).
* Prices: ``data/npu/tpu_prices.md`` section 1, on-demand USD per chip-hour, cheapest region
  (dstackai/gpuhunt ``tpu_pricing.json`` at commit b707e743, filled from cloud.google.com/tpu/pricing).
* Models: the ``config.json`` of each model's Hugging Face repository (meta-llama/Meta-Llama-3-8B,
  meta-llama/Meta-Llama-3-70B, meta-llama/Llama-3.1-405B, deepseek-ai/DeepSeek-V3). All weights are
  bf16 (2 bytes), as in §5.1 of the paper.
* The hottest-expert load factor (7x the average) is §4 of the paper ("the most loaded expert receives
  7x as many tokens as an average expert").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from servegym.errors import ConfigError
from servegym.names import NameTable

BYTES_PER_PARAM = 2
"""bf16 weights, activations and KV cache (paper §5.1: "All models use BF16 weights")."""

MAX_CHIPS_PER_VPOD = 1024
"""§3.3: "we limit the number of chips per pod to 1024 (sufficient for a single LLM model replica)"."""

KV_FORMS: tuple[str, ...] = ("latent", "expanded")
"""How an MLA model's KV cache is held (:meth:`ModelSpec.kv_bytes_per_token_layer_as`): ``latent`` (default; DeepSeek's
own MLA inference caches the compressed latent and absorbs the up-projections) or ``expanded`` (the per-head keys and
values, as an engine without MLA-specific kernels caches them; MaxText's ``mla_naive_kvcache`` defaults to it,
AI-Hypercomputer/maxtext ``src/MaxText/configs/types.py`` at 1007fc2). The NeuScale paper does not say which form
its simulator holds."""

MAX_POD_DIM = 16
"""Largest power-of-two extent of one torus axis: Fig. 7 (NPU-D 16x16, NPU-C up to 16x16x24)."""


@dataclass(frozen=True)
class ChipSpec:
    """One NPU chip version (Table 2) with its price.

    Units: ``tflops`` TFLOP/s (bf16 peak), ``tflop_per_j`` TFLOP/J (max, bf16), ``sram_mb`` MB,
    ``hbm_gbps`` GB/s, ``hbm_gb`` GB, ``hbm_gb_per_j`` GB/J (max), ``ici_gbps_per_link`` GB/s per
    link, ``dcn_gbps`` Gbit/s per chip, ``usd_per_chip_hour`` USD.
    """

    name: str
    tpu: str
    release_year: int
    tflops: float
    tflop_per_j: float
    systolic_width: int
    sram_mb: float
    hbm_gbps: float
    hbm_gb: float
    hbm_gb_per_j: float
    ici_gbps_per_link: float
    ici_links: int
    torus_dims: int
    dcn_gbps: float
    max_chips_per_pod: int
    usd_per_chip_hour: float
    inferred: tuple[str, ...] = field(default=())

    @property
    def peak_compute_power_w(self) -> float:
        """Power (W) at peak compute: TFLOPS / (TFLOP/J)."""
        return self.tflops / self.tflop_per_j

    @property
    def usd_per_chip_second(self) -> float:
        return self.usd_per_chip_hour / 3600.0


# Table 2 columns; prices from tpu_prices.md §1 (v4 3.22, v5e 1.20, v5p 4.20, v6e 2.70 USD/chip-hour).
CHIPS: NameTable[ChipSpec] = NameTable({
    "NPU-A": ChipSpec(
        name="NPU-A", tpu="TPU v4", release_year=2021, tflops=275.0, tflop_per_j=1.07, systolic_width=128,
        sram_mb=128.0, hbm_gbps=1200.0, hbm_gb=32.0, hbm_gb_per_j=11.06, ici_gbps_per_link=50.0,
        ici_links=6, torus_dims=3, dcn_gbps=5.0, max_chips_per_pod=4096, usd_per_chip_hour=3.22,
        inferred=("tflop_per_j", "hbm_gb_per_j"),
    ),
    "NPU-B": ChipSpec(
        name="NPU-B", tpu="TPU v5e", release_year=2023, tflops=197.0, tflop_per_j=0.72, systolic_width=128,
        sram_mb=64.0, hbm_gbps=819.0, hbm_gb=16.0, hbm_gb_per_j=6.94, ici_gbps_per_link=50.0,
        ici_links=4, torus_dims=2, dcn_gbps=50.0, max_chips_per_pod=256, usd_per_chip_hour=1.20,
        inferred=("tflop_per_j", "sram_mb", "hbm_gb_per_j"),
    ),
    "NPU-C": ChipSpec(
        name="NPU-C", tpu="TPU v5p", release_year=2023, tflops=459.0, tflop_per_j=1.16, systolic_width=128,
        sram_mb=128.0, hbm_gbps=2765.0, hbm_gb=95.0, hbm_gb_per_j=18.51, ici_gbps_per_link=100.0,
        ici_links=6, torus_dims=3, dcn_gbps=50.0, max_chips_per_pod=6144, usd_per_chip_hour=4.20,
        inferred=("tflop_per_j", "sram_mb", "hbm_gb_per_j"),
    ),
    "NPU-D": ChipSpec(
        name="NPU-D", tpu="TPU v6e", release_year=2024, tflops=918.0, tflop_per_j=3.50, systolic_width=256,
        sram_mb=128.0, hbm_gbps=1640.0, hbm_gb=32.0, hbm_gb_per_j=13.52, ici_gbps_per_link=112.0,
        ici_links=4, torus_dims=2, dcn_gbps=100.0, max_chips_per_pod=256, usd_per_chip_hour=2.70,
        inferred=("tflop_per_j", "sram_mb", "hbm_gb_per_j"),
    ),
}, field="version")
VERSIONS: tuple[str, ...] = tuple(CHIPS)


def chip(name: str) -> ChipSpec:
    """The chip spec for ``name`` (NPU-A..D, any spelling :mod:`servegym.names` accepts, e.g. ``npu-d`` or
    ``tpu-v6e``); :class:`ConfigError` naming the allowed versions otherwise."""
    return CHIPS[name]


@dataclass(frozen=True)
class ModelSpec:
    """Layer shapes of one decoder-only LLM (from its Hugging Face ``config.json``).

    Dense models leave the MoE and MLA fields at 0. For an MoE model, ``ffn`` is the FFN width of
    the ``dense_layers`` leading dense layers and ``expert_ffn`` the width of each routed/shared
    expert. For MLA attention (DeepSeek-V3) ``kv_lora_rank``/``q_lora_rank``/``rope_head_dim``/
    ``nope_head_dim``/``v_head_dim`` describe the compressed projections and the KV cache holds
    ``kv_lora_rank + rope_head_dim`` values per token and layer. ``parallel_block``: attention and FFN
    read the same input and are summed (PaLM), so tensor parallelism needs one all-reduce per layer, not two
    (used by the PaLM 540B calibration model, ``servegym.calibration.npu``).
    """

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    source: str
    experts: int = 0
    active_experts: int = 0
    shared_experts: int = 0
    expert_ffn: int = 0
    dense_layers: int = 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    rope_head_dim: int = 0
    nope_head_dim: int = 0
    v_head_dim: int = 0
    hot_expert_factor: float = 7.0
    parallel_block: bool = False

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        return self.layers - self.dense_layers if self.is_moe else 0

    # ---- parameter counts (elements) ------------------------------------------------------------
    @property
    def attn_params(self) -> int:
        """Attention projection parameters of one layer."""
        h = self.hidden
        if self.is_mla:
            qk = self.nope_head_dim + self.rope_head_dim
            return (h * self.q_lora_rank + self.q_lora_rank * self.heads * qk
                    + h * (self.kv_lora_rank + self.rope_head_dim)
                    + self.kv_lora_rank * self.heads * (self.nope_head_dim + self.v_head_dim)
                    + self.heads * self.v_head_dim * h)
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        return h * (q + 2 * kv) + q * h

    @property
    def dense_ffn_params(self) -> int:
        """SwiGLU FFN parameters of one dense layer (gate, up, down)."""
        return 3 * self.hidden * self.ffn

    @property
    def expert_params(self) -> int:
        """Parameters of one routed or shared expert (SwiGLU)."""
        return 3 * self.hidden * self.expert_ffn

    @property
    def embed_params(self) -> int:
        """Input embedding table (untied from the LM head for all four models)."""
        return self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        dense = self.layers - self.moe_layers
        moe = self.moe_layers * ((self.experts + self.shared_experts) * self.expert_params
                                 + self.experts * self.hidden)  # + router
        return (self.layers * self.attn_params + dense * self.dense_ffn_params + moe
                + 2 * self.embed_params)

    @property
    def kv_bytes_per_token_layer(self) -> int:
        """KV-cache bytes per token per layer, unsharded (MLA: one latent; GQA: K and V per KV head)."""
        if self.is_mla:
            return (self.kv_lora_rank + self.rope_head_dim) * BYTES_PER_PARAM
        return 2 * self.kv_heads * self.head_dim * BYTES_PER_PARAM

    def kv_bytes_per_token_layer_as(self, kv_form: str = "latent") -> int:
        """KV-cache bytes per token per layer, unsharded, with the cache held in ``kv_form``: ``latent`` (the MLA
        latent, :attr:`kv_bytes_per_token_layer`) or ``expanded`` (an MLA model's per-head keys, nope + rope wide,
        and values, as a cache of the up-projected K and V holds them: DeepSeek-V3 128 x (192 + 128) x 2 B =
        81,920 B against the latent's 1,152). A model without MLA has one form (its K and V per KV head)."""
        if kv_form not in KV_FORMS:
            raise ConfigError(f"kv_form = {kv_form!r} is unknown; allowed: {', '.join(KV_FORMS)}")
        if self.is_mla and kv_form == "expanded":
            return self.heads * (self.nope_head_dim + self.rope_head_dim + self.v_head_dim) * BYTES_PER_PARAM
        return self.kv_bytes_per_token_layer

    @property
    def weight_bytes(self) -> float:
        return float(self.total_params * BYTES_PER_PARAM)


MODELS: NameTable[ModelSpec] = NameTable({
    "Llama-3-8B": ModelSpec(
        name="Llama-3-8B", hidden=4096, layers=32, heads=32, kv_heads=8, head_dim=128, ffn=14336,
        vocab=128256, source="huggingface.co/meta-llama/Meta-Llama-3-8B config.json",
    ),
    "Llama-3-70B": ModelSpec(
        name="Llama-3-70B", hidden=8192, layers=80, heads=64, kv_heads=8, head_dim=128, ffn=28672,
        vocab=128256, source="huggingface.co/meta-llama/Meta-Llama-3-70B config.json",
    ),
    "Llama-3.1-405B": ModelSpec(
        name="Llama-3.1-405B", hidden=16384, layers=126, heads=128, kv_heads=8, head_dim=128, ffn=53248,
        vocab=128256, source="huggingface.co/meta-llama/Llama-3.1-405B config.json",
    ),
    "DeepSeek-V3-671B": ModelSpec(
        name="DeepSeek-V3-671B", hidden=7168, layers=61, heads=128, kv_heads=128, head_dim=128, ffn=18432,
        vocab=129280, source="huggingface.co/deepseek-ai/DeepSeek-V3 config.json (MTP module excluded)",
        experts=256, active_experts=8, shared_experts=1, expert_ffn=2048, dense_layers=3,
        q_lora_rank=1536, kv_lora_rank=512, rope_head_dim=64, nope_head_dim=128, v_head_dim=128,
    ),
}, field="model")


def model(name: str) -> ModelSpec:
    """The model spec for ``name`` (any spelling :mod:`servegym.names` accepts, e.g. ``llama-3-70b`` or
    ``deepseek-v3``); :class:`ConfigError` naming the allowed models otherwise."""
    return MODELS[name]


def _is_pow2(n: int) -> bool:
    return n >= 1 and (n & (n - 1)) == 0


@dataclass(frozen=True)
class VPod:
    """A virtual NPU pod (§3.2): chips of one version in a power-of-two torus slice.

    ``shape`` has one extent per torus axis of the version (2 for NPU-B/D, 3 for NPU-A/C), each a
    power of two ≤ 16. ``tp * pp`` must equal the chip count; ``ep`` (MoE only) is 1 (experts
    tensor-sharded) or ``tp`` (whole experts spread over the tensor-parallel group). ``max_batch`` is
    the most requests the vPod batches at once.
    """

    version: str
    shape: tuple[int, ...]
    tp: int
    pp: int
    ep: int = 1
    max_batch: int = 1

    def __post_init__(self) -> None:
        spec = chip(self.version)
        if len(self.shape) != spec.torus_dims:
            raise ConfigError(f"shape = {self.shape!r} has {len(self.shape)} axes; {self.version} "
                              f"has a {spec.torus_dims}D torus, so allowed: {spec.torus_dims} axes")
        for d in self.shape:
            if not _is_pow2(int(d)) or d > MAX_POD_DIM:
                raise ConfigError(f"shape = {self.shape!r}: each axis must be a power of two in [1, {MAX_POD_DIM}]")
        n = self.chips
        limit = min(spec.max_chips_per_pod, MAX_CHIPS_PER_VPOD)
        if n > limit:
            raise ConfigError(f"chips = {n} is out of range for {self.version}; allowed: [1, {limit}]")
        for fname in ("tp", "pp", "ep", "max_batch"):
            v = getattr(self, fname)
            if int(v) < 1:
                raise ConfigError(f"{fname} = {v!r} is out of range; allowed: [1, inf]")
        if self.tp * self.pp != n:
            raise ConfigError(f"tp * pp = {self.tp * self.pp} must equal the chip count {n} of shape {self.shape}")
        if self.ep not in (1, self.tp):
            raise ConfigError(f"ep = {self.ep} is not allowed; allowed: 1 or tp ({self.tp})")

    @property
    def chips(self) -> int:
        return int(prod(self.shape))

    @property
    def label(self) -> str:
        """Paper-style label, e.g. ``NPU-C_2x2x4_tp16_pp1``."""
        s = f"{self.version}_{'x'.join(map(str, self.shape))}_tp{self.tp}_pp{self.pp}"
        return s + (f"_ep{self.ep}" if self.ep > 1 else "")
