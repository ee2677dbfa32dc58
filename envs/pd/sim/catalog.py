"""Hardware, model, calibration and serving constants of the PD provisioning paper, as frozen dataclasses.

Source of every number: ``shared/papers/pd-power-aware-provisioning.md`` ("Analytical Power-Aware
Provisioning for Prefill-Decode Disaggregated AI Inference", Yan et al., arXiv:2609.24639), cited by
section/table on each constant. Table 3's columns are scrambled in the text extraction; the values used
here are the prefill/decode assignment confirmed against App. B.3 (prefill: MFU 0.67, c_a 2.17,
ramp 133/566/692 W saturating near 0.99; decode: MBU 0.77, t_iter 1.00 ms, t_req 0.062 ms, ramp
448/458/678 W saturating near 0.50), which is the only assignment consistent with App. B.3's saturation
points (692-133)/566 = 0.99 and (678-448)/458 = 0.50.

``C_tok`` (KV token slots of a decode instance) is not published. It is *calibrated*:
:func:`fitted_serving` loads C_tok = 244,190 tokens, fitted by ``servegym.calibration.pd_kv`` (brentq) to the
paper's one decode-bound capacity measurement, 3p1d = 5.2 req/s at fixed 4096/256 (§5.3.2); every other anchor
is held out. ``R`` = 512 is SGLang 0.5.9's ``num_reserved_decode_tokens``. Two documented SGLang readings of the
pool are kept as provenance and as named ``--kv-tokens`` alternatives (:data:`KV_TOKEN_READINGS`):
:func:`sglang_serving` (SGLang's default memory fraction of "141 GB", 237,606) and
:func:`sglang_profiled_kv_tokens` (SGLang's own memory profiling of the H200's 143,771 MiB, 269,499).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from importlib import resources

import numpy as np
from numpy.typing import ArrayLike, NDArray

from servegym.errors import ConfigError, check_range
from servegym.names import NameTable


@dataclass(frozen=True)
class Hardware:
    """One accelerator (one GPU per instance, as in the paper's §5.1)."""

    name: str
    peak_flops: float  # FLOP/s (dense bf16), pi
    mem_bandwidth: float  # bytes/s, beta
    memory_bytes: float  # bytes of device memory
    loaded_idle_power_w: float  # W, a GPU holding weights but serving nothing (the ramp's p0 lower bound)
    driver_memory_mib: float  # MiB the CUDA driver reports (what SGLang's memory heuristic reads)

    def __post_init__(self) -> None:
        check_range("hardware.peak_flops", self.peak_flops, 0.0, None, low_inclusive=False)
        check_range("hardware.mem_bandwidth", self.mem_bandwidth, 0.0, None, low_inclusive=False)
        check_range("hardware.memory_bytes", self.memory_bytes, 0.0, None, low_inclusive=False)


@dataclass(frozen=True)
class ModelSpec:
    """A dense transformer served in bf16."""

    name: str
    n_params: float  # N, parameters
    n_layers: int  # L
    n_q_heads: int  # h_q
    n_kv_heads: int  # h_kv
    d_head: int  # d_head
    bytes_per_value: int = 2  # bf16

    @property
    def attention_width(self) -> int:
        """d = h_q * d_head (App. B.1)."""
        return self.n_q_heads * self.d_head

    @property
    def kv_bytes_per_token(self) -> int:
        """kappa = 2 (K and V) * bytes * L * h_kv * d_head, i.e. 4 L h_kv d_head in bf16 (App. B.1), bytes/token."""
        return 2 * self.bytes_per_value * self.n_layers * self.n_kv_heads * self.d_head

    @property
    def weight_bytes(self) -> float:
        """2N bytes of bf16 weights read once per decode iteration (§3.1.2), bytes."""
        return self.bytes_per_value * self.n_params


@dataclass(frozen=True)
class PowerRamp:
    """Capped ramp p(x) = min(p0 + gamma x, p_sat) of eq. (13); x is normalized throughput, p in W."""

    p0_w: float
    slope_w: float
    p_sat_w: float

    def __post_init__(self) -> None:
        check_range("ramp.p0_w", self.p0_w, 0.0, None)
        check_range("ramp.slope_w", self.slope_w, 0.0, None)
        check_range("ramp.p_sat_w", self.p_sat_w, self.p0_w, None)

    def __call__(self, x: ArrayLike) -> NDArray[np.float64]:
        return np.minimum(self.p0_w + self.slope_w * np.asarray(x, dtype=float), self.p_sat_w)

    @property
    def saturation_point(self) -> float:
        """Normalized throughput at which the ramp reaches its cap (inf for a flat ramp)."""
        return (self.p_sat_w - self.p0_w) / self.slope_w if self.slope_w > 0 else float("inf")


@dataclass(frozen=True)
class Calibration:
    """Calibrated parameters of Table 3 (fitted as in App. B.2)."""

    mfu: float  # prefill model-FLOPs utilization
    c_a: float  # prefill attention coefficient
    mbu: float  # decode memory-bandwidth utilization
    t_iter_s: float  # s, per-decode-iteration overhead added to a_D (eq. 30)
    t_req_s: float  # s, per-active-request overhead added to b_D (eq. 30)
    prefill_ramp: PowerRamp
    decode_ramp: PowerRamp

    def __post_init__(self) -> None:
        check_range("calibration.mfu", self.mfu, 0.0, 1.0, low_inclusive=False)
        check_range("calibration.mbu", self.mbu, 0.0, 1.0, low_inclusive=False)
        check_range("calibration.c_a", self.c_a, 0.0, None)
        check_range("calibration.t_iter_s", self.t_iter_s, 0.0, None)
        check_range("calibration.t_req_s", self.t_req_s, 0.0, None)


@dataclass(frozen=True)
class ServingConfig:
    """Decode-side KV pool of one instance: C_tok token slots, R reserved output slots per request."""

    kv_tokens: float  # C_tok, tokens
    reserve_tokens: float  # R, tokens
    derivation: str = ""  # how the numbers were obtained (provenance)

    def __post_init__(self) -> None:
        check_range("kv_tokens", self.kv_tokens, 0.0, None, low_inclusive=False)
        check_range("reserve_tokens", self.reserve_tokens, 0.0, None)


# App. B.1: "The H200 GPU [39] has a peak compute throughput of pi = 989 TFLOP/s and a memory bandwidth of
# beta = 4.8 TB/s"; 141 GB HBM3e from the same NVIDIA product page [39]; 115 W loaded-idle from App. B.3
# ("the power of a GPU that holds the model weights but serves no requests, 115 W on this hardware");
# 143,771 MiB is the total nvidia-smi / torch.cuda.mem_get_info report for an H200 SXM (so NVIDIA's "141 GB"
# is about 141 GiB; memory_bytes keeps the 141e9 B reading of sglang_serving, see sglang_serving).
H200 = Hardware(name="H200", peak_flops=989e12, mem_bandwidth=4.8e12, memory_bytes=141e9,
                loaded_idle_power_w=115.0, driver_memory_mib=143_771.0)

# App. B.1: "Qwen3-32B [46] has N = 32.8B parameters and L = 64 layers, with h_q = 64 query heads and
# h_kv = 8 KV heads of width d_head = 128".
QWEN3_32B = ModelSpec(name="Qwen3-32B", n_params=32.8e9, n_layers=64, n_q_heads=64, n_kv_heads=8, d_head=128)

#: The paper's one model and one GPU, under the suite's naming scheme (servegym.names: any case, aliases).
MODELS: NameTable[ModelSpec] = NameTable({QWEN3_32B.name: QWEN3_32B}, field="model")
HARDWARE: NameTable[Hardware] = NameTable({H200.name: H200}, field="hardware")

# Table 3 (prefill/decode columns as confirmed in the module docstring); App. B.3 gives the fits.
TABLE3 = Calibration(
    mfu=0.67,
    c_a=2.17,
    mbu=0.77,
    t_iter_s=1.00e-3,
    t_req_s=0.062e-3,
    prefill_ramp=PowerRamp(p0_w=133.0, slope_w=566.0, p_sat_w=692.0),
    decode_ramp=PowerRamp(p0_w=448.0, slope_w=458.0, p_sat_w=678.0),
)

# SGLang 0.5.9 defaults used by the derivation below (python/sglang/srt/server_args.py,
# ServerArgs._handle_gpu_memory_settings and the dataclass defaults).
SGLANG_NUM_RESERVED_DECODE_TOKENS = 512  # ServerArgs.num_reserved_decode_tokens
SGLANG_CHUNKED_PREFILL_H200 = 8192  # bucket 90 GiB <= gpu_mem < 160 GiB ("H20, H200")
SGLANG_CUDA_GRAPH_MAX_BS_H200_TP1 = 256  # same bucket, tp_size < 4


def sglang_mem_fraction_static(gpu_mem_mib: float, *, tp_size: int = 1,
                               chunked_prefill_size: int = SGLANG_CHUNKED_PREFILL_H200,
                               cuda_graph_max_bs: int = SGLANG_CUDA_GRAPH_MAX_BS_H200_TP1) -> float:
    """SGLang's default ``mem_fraction_static`` (no DP attention, no speculative decoding, no piecewise graphs).

    reserved (MiB) = 512 + 1.5 max(chunked_prefill_size, 2048) + 2 cuda_graph_max_bs + 1024 tp/8,
    at least 10 GiB on a GPU above 60 GiB; fraction = round((gpu_mem - reserved) / gpu_mem, 3).
    """
    check_range("gpu_mem_mib", gpu_mem_mib, 0.0, None, low_inclusive=False)
    reserved = 512 + 1.5 * max(chunked_prefill_size, 2048) + 2 * cuda_graph_max_bs + tp_size / 8 * 1024
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)


def sglang_serving(hardware: Hardware = H200, model: ModelSpec = QWEN3_32B, *,
                   mem_fraction_static: float | None = None,
                   reserve_tokens: float = SGLANG_NUM_RESERVED_DECODE_TOKENS) -> ServingConfig:
    """C_tok and R of a decode instance from SGLang 0.5.9's defaults (the "SGLang recipe" reading).

    Neither number is published in the paper; this reading is kept as provenance and as the
    ``--kv-tokens sglang-recipe`` alternative to the fitted default (:func:`fitted_serving`). It takes SGLang
    0.5.9's default decode reservation, its default memory fraction on a 141 GB GPU, weights of 2N bytes and
    kappa = 4 L h_kv d_head.

    * R: SGLang's PD decode scheduler (``disaggregation/decode.py``, ``DecodePreallocQueue``) admits a
      request only if ``len(origin_input_ids) + num_reserved_decode_tokens`` slots are allocatable, and
      keeps ``num_reserved_decode_tokens`` per running, transferring and waiting request in reserve; the
      default is 512 (``ServerArgs.num_reserved_decode_tokens``), so R = 512 tokens (the paper's
      "l_in + R" reservation, §3.1.3).
    * Memory fraction: with no ``--mem-fraction-static`` SGLang sets
      ``f = round((gpu_mem - reserved) / gpu_mem, 3)``; in the 90-160 GiB bucket ("H20, H200") at TP1 it
      uses chunked prefill 8192 and CUDA-graph max batch 256, so reserved = 512 + 1.5*8192 + 2*256 + 128 =
      13,440 MiB, and with the 143,771 MiB the driver reports for an H200, f = 0.907. (The CUDA graphs and
      activations live in the 1 - f share; they do not come out of the KV pool.)
    * KV pool: f * 141e9 B minus 2N = 65.6e9 B of weights, over kappa = 262,144 B/token:
      C_tok = floor((0.907 * 141e9 - 65.6e9) / 262,144) = 237,606 tokens (page size 1: no rounding).

    **This is not what SGLang itself computes.** "141 GB" is NVIDIA's rounded figure for 143,771 MiB
    (140.4 GiB, 150.8e9 B), and SGLang's ``profile_max_num_token`` keeps
    ``free_after_weights - free_before_weights * (1 - f)`` for the KV cache, i.e. f times the *driver's*
    memory (less the CUDA context) minus the weights; :func:`sglang_profiled_kv_tokens` does that
    arithmetic and gives about 269,500 tokens (Qwen3-32B's exact 32.76e9 parameters change either figure by
    only ~290 tokens). The two readings bracket the paper's measurements from opposite sides; the fitted pool
    lies between them (fixed 4096/256, Table 3, paper semantics; ``servegym pd validate --kv-tokens NAME``):

    ============================  ==========  ================  ======================  ======================
    figure                        paper       fitted 244,190    C_tok = 237,606         C_tok = 269,499
    ============================  ==========  ================  ======================  ======================
    3p1d capacity (decode-bound)  5.2 req/s   5.20 (fitted)     5.13 (-1.4%)            5.46 (+5.1%, fails)
    saving at 3.1 req/s           560 W       482 W (-14.0%)    486 W (-13.3%)          469 W (-16.2%, fails)
    saving at 5.3 req/s           620 W       694 W (+11.9%)    718 W (+15.8%, fails)   648 W (+4.4%)
    ============================  ==========  ================  ======================  ======================

    The three anchors hold together only for C_tok between about 239,000 (5.3 req/s saving) and 255,000
    (3.1 req/s saving) tokens. The fitted 244,190 is an effective memory fraction near 0.86 rather than
    SGLang's 0.907; the paper does not publish ``--mem-fraction-static`` or the logged
    ``max_total_num_tokens``, and no documented SGLang 0.5.9 default (piecewise CUDA graphs cost at most
    another 464 MiB, about -1,800 tokens) accounts for the gap.
    """
    if mem_fraction_static is None:
        mem_fraction_static = sglang_mem_fraction_static(hardware.driver_memory_mib)
    check_range("mem_fraction_static", mem_fraction_static, 0.0, 1.0, low_inclusive=False)
    free = mem_fraction_static * hardware.memory_bytes - model.weight_bytes
    if free <= 0:
        raise ConfigError(
            f"mem_fraction_static = {mem_fraction_static} leaves no KV memory for {model.name} on {hardware.name}; "
            f"allowed: > {model.weight_bytes / hardware.memory_bytes:.3f}")
    kv_tokens = float(np.floor(free / model.kv_bytes_per_token))
    how = (f"SGLang 0.5.9 defaults: mem_fraction_static={mem_fraction_static:.3f} of "
           f"{hardware.memory_bytes / 1e9:g} GB, minus {model.weight_bytes / 1e9:g} GB weights, "
           f"/ {model.kv_bytes_per_token} B/token; R = num_reserved_decode_tokens = {reserve_tokens:g}")
    return ServingConfig(kv_tokens=kv_tokens, reserve_tokens=float(reserve_tokens), derivation=how)


#: Device memory held before SGLang loads the weights (CUDA context, cuBLAS/NCCL handles at TP1), MiB. An
#: assumption (SGLang logs it as "Init torch distributed ends. mem usage=..."); each 512 MiB lowers the
#: profiled pool by only f * 2,048 ~ 1,860 tokens for Qwen3-32B.
SGLANG_PRELOAD_OVERHEAD_MIB = 512.0


def sglang_profiled_kv_tokens(hardware: Hardware = H200, model: ModelSpec = QWEN3_32B, *,
                              mem_fraction_static: float | None = None,
                              preload_overhead_mib: float = SGLANG_PRELOAD_OVERHEAD_MIB) -> float:
    """KV token slots as SGLang's ``ModelRunner.profile_max_num_token`` computes them, tokens.

    SGLang measures the free memory before loading the weights (``pre_model_load_memory``: the driver's
    total less the CUDA context) and after, and keeps
    ``rest = free_after - free_before * (1 - mem_fraction_static)`` GiB for the KV cache, so
    ``C_tok = floor((f * free_before - weights) * 2**30 / kappa)`` with free_before from
    ``hardware.driver_memory_mib`` (143,771 MiB on an H200). For Qwen3-32B with f = 0.907 this is
    269,499 tokens (see :func:`sglang_serving` for why the default pool is not this figure).
    """
    if mem_fraction_static is None:
        mem_fraction_static = sglang_mem_fraction_static(hardware.driver_memory_mib)
    check_range("mem_fraction_static", mem_fraction_static, 0.0, 1.0, low_inclusive=False)
    check_range("preload_overhead_mib", preload_overhead_mib, 0.0, hardware.driver_memory_mib,
                high_inclusive=False)
    free_before = (hardware.driver_memory_mib - preload_overhead_mib) * 2.0**20  # bytes
    rest = mem_fraction_static * free_before - model.weight_bytes
    if rest <= 0:
        raise ConfigError(f"mem_fraction_static = {mem_fraction_static} leaves no KV memory for {model.name} "
                          f"on {hardware.name}")
    return float(np.floor(rest / model.kv_bytes_per_token))


#: Where the fitted pool is recorded (``servegym.calibration`` package data, written by
#: ``servegym calibrate pd-kv --write-package``).
KV_POOL_RECORD = "profiles/pd/kv_pool.json"


def fitted_serving() -> ServingConfig:
    """C_tok fitted to the paper's 3p1d = 5.2 req/s (fixed 4096/256, §5.3.2) and R = 512, from the shipped record.

    The fit (``servegym.calibration.pd_kv``: brentq on the model's 3p1d capacity, floored to whole slots) gives
    244,190 tokens, between SGLang's two documented readings (237,606 by its default memory fraction of
    "141 GB", 269,499 by its own profiling of the driver's 143,771 MiB): an effective memory fraction near 0.86.
    """
    rec = json.loads(resources.files("servegym.calibration").joinpath(KV_POOL_RECORD).read_text())
    how = (f"fitted to {rec['source']} ({rec['method']}); R = SGLang's num_reserved_decode_tokens; "
           f"held out: {', '.join(rec['held_out'])}")
    return ServingConfig(kv_tokens=float(rec["kv_tokens"]), reserve_tokens=float(rec["reserve_tokens"]), derivation=how)


#: Named readings of C_tok accepted by ``--kv-tokens`` (tokens): the fitted default and SGLang's two readings.
KV_TOKEN_READINGS = ("fitted", "sglang-recipe", "sglang-profiled")


def kv_tokens_reading(value: str | float | None) -> float | None:
    """``--kv-tokens`` value: None (keep the default), a named reading of :data:`KV_TOKEN_READINGS`, or a number."""
    if value is None:
        return None
    if isinstance(value, str):
        key = value.strip().lower()
        if key == "fitted":
            return fitted_serving().kv_tokens
        if key == "sglang-recipe":
            return sglang_serving().kv_tokens
        if key == "sglang-profiled":
            return sglang_profiled_kv_tokens()
        try:
            value = float(key)
        except ValueError:
            raise ConfigError(f"--kv-tokens = {value!r}; allowed: a number of tokens > 0 or one of "
                              f"{list(KV_TOKEN_READINGS)}") from None
    return float(value)


@dataclass(frozen=True)
class PDSystem:
    """Everything the analytical model needs besides the workload: hardware, model, calibration, KV pool."""

    hardware: Hardware = H200
    model: ModelSpec = QWEN3_32B
    calibration: Calibration = TABLE3
    serving: ServingConfig = field(default_factory=fitted_serving)

    def with_serving(self, *, kv_tokens: float | None = None, reserve_tokens: float | None = None) -> PDSystem:
        """A copy with C_tok and/or R overridden (None keeps the current value)."""
        serving = self.serving
        if kv_tokens is not None or reserve_tokens is not None:
            serving = ServingConfig(
                kv_tokens=self.serving.kv_tokens if kv_tokens is None else float(kv_tokens),
                reserve_tokens=self.serving.reserve_tokens if reserve_tokens is None else float(reserve_tokens),
                derivation="overridden",
            )
        return replace(self, serving=serving)


def paper_system() -> PDSystem:
    """The paper's setup (§5.1): Qwen3-32B on one H200 per instance, SGLang 0.5.9, Table 3 parameters, fitted C_tok."""
    return PDSystem()
