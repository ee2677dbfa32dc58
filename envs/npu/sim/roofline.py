"""Analytical step model of an LLM on a vPod, vectorized over allocations x batches: the paper's two models.

Two models, as in the paper
---------------------------
NeuScale *chooses* vPods with a roofline on XLA's HLO cost analysis, which counts FLOPs and HBM traffic
only (§3.3; it claims rank accuracy, Fig. 9, and shows false positives, Fig. 10), and *scores* every
policy on a production simulator of the systolic arrays, vector units, SRAM, HBM and ICI (§4). Both are
:class:`RooflineParams` settings of the one function here:

* the **selection model** (:meth:`RooflineParams.selection`): per-chip FLOPs and HBM bytes through the
  roofline, with 1D weight-stationary sharding and KV sharded by heads -- no ICI time or energy, no launch
  costs, floors or host overhead;
* the **scoring model** (the defaults): the same roofline plus what the chips really pay -- ICI
  collectives with a per-collective launch cost and a per-hop latency, a per-layer time floor, a per-step
  host overhead, the pipeline's fill and bubbles, and the cheapest of the layouts of Pope et al. 2022
  ("Efficiently Scaling Transformer Inference", arXiv 2211.05102, §3): 1D or 2D weight-stationary
  feed-forward/attention projections, KV sharded by heads or by batch, and weight-gathered layers for prefill.

``ClusterConfig.step_models`` (:mod:`servegym.envs.npu.sim.config`) picks who uses which: ``scoring`` (default)
chooses with the scoring model too (the reading under which the paper's picks are "near-ideal", Figure 11;
:data:`~servegym.envs.npu.sim.config.STEP_MODELS` says why), ``paper`` chooses with the selection model and charges
the scoring model (the ablation), ``legacy`` is the single model servegym used before (:meth:`RooflineParams.legacy`).

``kv_form``: an MLA model's KV cache as its latent (default) or each head's K and V (an ablation; ``catalog.KV_FORMS``).

Where this differs from NeuScale: FLOPs and bytes are counted analytically from each model's layer
shapes (:mod:`servegym.envs.npu.sim.catalog`) instead of from compiled graphs, and the scoring model is this
analytical model with calibrated non-roofline terms, not an RTL-level simulator.

Per step, per chip (one micro-batch through one pipeline stage), four operator groups each get their
own roofline max(FLOPs / (peak x eta_c), bytes / (HBM BW x eta_m)):

* linear: attention projections, dense FFN / shared expert, router. Weights are read once per
  prefill chunk (``prefill_chunk_tokens``) or per decode step; activations are read and written
  once per GEMM. FLOPs are inflated by systolic-array padding of the tensor-sharded output width to
  a multiple of the array width (Table 2), which penalizes very high TP, most on NPU-D (256 wide).
* experts (MoE only): with EP = TP whole experts live on chips and the chip with the hottest expert
  gets ``hot_expert_factor`` (7x, paper §4) times the average expert load; with EP = 1 each expert is
  tensor-sharded and the load is balanced. Weight bytes count the expected number of distinct
  experts a step touches, E(1 - (1 - k/E)^T).
* attention core: scores and AV; decode reads every request's KV cache; prefill writes it and
  re-reads K/V once per query tile that fits half the SRAM (flash-attention style), causal.
  Sharded by heads, GQA KV heads are replicated when TP exceeds them and the MLA latent is replicated on
  every TP chip; sharded by batch (scoring model, decode, where faster), each chip holds and reads the
  whole KV of ceil(b / TP) requests and two all-to-alls per layer move queries and outputs.
* LM head: logits for the last token of each prefill request and for every decode token.

The scoring model never charges a layer less than ``layer_floor_s``.

Communication (scoring model only): per layer the TP group runs the cheapest of 1D weight-stationary (two
ring all-reduces of the hidden state; one for a parallel attention+FFN block), 2D weight-stationary
(Pope et al.'s 8BLE/sqrt(n) against 1D's 2BLE bytes, i.e. 4/sqrt(n) of 1D's wire bytes, at twice the
collectives over half the hops; TP ≥ 4) and, for prefill, weight-gathered (each layer's weights
all-gathered, independent of the tokens). MoE layers with EP > 1 add a dispatch and a combine all-to-all.
A collective moving w bytes per chip takes w / (usable links x link BW x eta_ici) + its ring steps x
``ici_step_latency_s`` (``collectives = "hop"``: + a launch cost + hops x the per-hop latency); the TP group is laid out as the most balanced power-of-two sub-torus of
the pod shape and a used axis contributes its two links. Pipeline stages pass activations over one link
(one more collective). Collectives are not overlapped with compute. ``step_overhead_s`` is added per
micro-batch.

Pipeline (chunked prefill as in vLLM, fixed-size chunks; both models): prefill splits the batch's b x L
prompt tokens into micro-batches of S = min(prefill_chunk_tokens, ceil(b / min(b, pp)) x L) tokens plus a
remainder; with identical stages this is a proportionate flow shop, so the batch's TTFT is
sum(t_i) + (pp - 1) max(t_i) and the stages are busy sum(t_i) (``period_s``, the spacing of
back-to-back batches). Decode splits the b requests into min(b, pp) micro-batches and emits one
token per request every pp stage times (TPOT = period), so with b < pp the idle stages are bubbles.

Energy per step = idle floor x chips x period + FLOPs x (1 - ``static_power_frac``) / (TFLOP/J) + HBM bytes /
(GB/J) + ICI bytes x ``ici_pj_per_bit``. Chip power is counted once: Table 2's TFLOPS / (TFLOP/J) is a chip's
*whole* power at peak compute (e.g. 918 / 3.50 = 262 W for NPU-D), of which the idle floor (``static_power_frac``
x that power) is drawn whenever the chip is held and the rest, (1 - f) / (TFLOP/J) per FLOP, by the compute, so
a chip computing at peak draws exactly Table 2's power (power = idle + (peak - idle) x utilization). Table 2's
HBM GB/J (e.g. 1200 / 11.06 = 108 W for NPU-A at full bandwidth, below the chip's 90 W floor plus compute) and
the ICI energy are the memory's and links' own energies, added. Cost per step = chips x USD/chip-hour x period.

Memory feasibility per chip: weights of one stage / TP + KV cache of all b requests for the stage's
layers (as sharded) + one chunk's activations ≤ ``hbm_usable_frac`` x HBM.

Coefficients (``RooflineParams`` defaults) and where they come from (PROVENANCE):

* ``eta_compute = 0.756``: median achieved/peak TFLOP/s of the q/o/gate/up/down/lm_head GEMMs with
  ≥1024 tokens in ``data/npu/llmservingsim_tpu_v6e/.../Llama-3.1-8B/tp1/layers.csv.gz`` (one TPU v6e
  chip), against 918 TFLOPS; applied to every version (no profile exists for the others).
* ``eta_memory = 0.915``: median achieved/peak GB/s of gate/down/lm_head with ≤64 tokens in the
  same file (bytes = weights + activations) against 1640 GB/s. ``tests/test_npu_roofline.py``
  recomputes both from the file.
* ``hbm_usable_frac = 0.9``: vLLM's default ``gpu_memory_utilization``.
* ``static_power_frac = 0.35``: the idle floor, TPU v4's measured minimum power 90 W (Google Cloud's TPU v4
  page, "measured min/mean/max power 90/170/192 W"; ``data/npu/tpu_prices.md`` §2) over its whole power at peak
  compute 275 / 1.07 = 257 W (Table 2). No other version's floor is published (v5e, v5p and v6e list no power):
  the same fraction is ASSUMED for NPU-B/C/D. A chip in no vPod draws nothing; a held chip draws at least the
  floor, whether its vPod is booting, loading weights, idle or serving (the chips are powered and reserved).
* ``ici_step_latency_s`` (ring collectives, the default ``collectives = "ring"``): FITTED -- the one coefficient
  fitted to a measurement: PaLM 540B decode on 64 TPU v4 chips (NPU-A 4x4x4, TP 64), batch 64, int8 weights,
  2,048-token context, takes 28.1 ms per step (Pope et al. 2022, Table 2: 14 % MFU; the abstract's "29ms per
  token"). A ring all-reduce over n chips takes 2(n - 1) steps (reduce-scatter, then all-gather), a ring
  all-gather or reduce-scatter n - 1, an all-to-all (routed over the torus one dimension at a time) the sum
  over its sub-torus axes of (length - 1), each step paying this latency (link latency plus the
  synchronization of the step) besides its share of the bandwidth term; 2D weight-stationary layouts run
  theirs over axes of about sqrt(n) chips. There is no separate launch cost (``collective_launch_s`` = 0),
  so a collective's latency grows with the group it spans -- the reason large vPods are ICI-bound for small
  requests (§2.4). Held out: the other Pope et al. points and the cost-latency curve's shape
  (``calibration/npu.py``, ``npu_calibration.md``).
* ``collectives = "hop"`` (:meth:`RooflineParams.hop`, the earlier scoring model): ``collective_launch_s =
  37.4 µs`` per collective plus ``ici_step_latency_s`` = 1 µs per torus hop, fitted to the same point; its
  batch-1 decode time falls monotonically with the pod size.
* ``layer_floor_s = 10.2 µs``: the intercept of a least-squares fit of the measured TPU v6e decode-attention
  times (``attention.csv.gz`` beside the layer profile; 6,741 decode rows, p50): the smallest time a layer's
  attention kernel takes. Caveat: PyTorch/XLA + HF eager attention, one chip.
* ``step_overhead_s = 0``: Pope et al.'s generate loop runs on the device, and its one decode point cannot
  separate a per-step host cost from the per-collective cost (both fixed per step): absorbed in
  ``collective_launch_s``; kept as a parameter for sensitivity runs.
* ``kv_read_factor = 1``: the v6e decode-attention slope is 3.5x the KV-read roofline, but that measures HF's
  eager attention materializing the GQA expansion of K/V and the scores; production kernels (and Pope et
  al.'s batch-512 decode, which the model matches within 17 % without it) read the cache near the roofline.
* ``eta_ici = 0.8``, ``ici_pj_per_bit = 5.0`` and ``prefill_chunk_tokens = 8192`` are assumptions (typical
  ring-collective efficiency, electrical SerDes energy, vLLM-style chunked prefill), not paper numbers;
  eta_ici enters the fit of the per-step latency.
* ``weight_bytes = 2``: bf16 weights (paper §5.1); 1 reproduces Pope et al.'s int8 point.

The serving layer above the kernels: ``serving_prefill`` / ``serving_decode`` (default 1, the kernel roofline alone)
are the share of the kernels' speed a serving engine achieves end to end; a step's latency and period are the
kernels' divided by it, its FLOP, HBM and ICI energy stay, and the chips draw their idle floor over the longer period.
The cluster simulator sets them from ``ClusterConfig.serving_efficiency``, fitted to the paper's prototype (Figure 16;
:data:`servegym.envs.npu.sim.config.SERVING_EFFICIENCY`); the kernel checks above run at 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from servegym.envs.npu.sim.catalog import (
    BYTES_PER_PARAM,
    CHIPS,
    KV_FORMS,
    MAX_CHIPS_PER_VPOD,
    MAX_POD_DIM,
    VERSIONS,
    ModelSpec,
    VPod,
    chip,
)

from servegym.errors import ConfigError, check_choice, check_range

PHASES: tuple[str, ...] = ("prefill", "decode")
COLLECTIVE_MODELS: tuple[str, ...] = ("ring", "hop")
"""``ring``: a collective over n chips runs its ring algorithm's steps (all-reduce 2(n-1), all-gather,
reduce-scatter and all-to-all n-1), each paying ``ici_step_latency_s``; ``hop``: a fixed launch cost plus
``ici_step_latency_s`` per torus hop (the earlier scoring model)."""
RING_STEP_LATENCY_S = 3.17e-6
"""Per-step latency of a ring collective (s), FITTED to Pope et al.'s PaLM 540B decode point
(``calibration/npu.py``; refit with ``python -m servegym.calibration.npu``)."""
HOP_LAUNCH_S = 3.74e-5
"""The hop model's per-collective launch cost (s), fitted to the same point."""


@dataclass(frozen=True)
class RooflineParams:
    """Efficiency factors and non-roofline terms of the step model (see the module docstring).

    The defaults are the **scoring model** (what the cluster simulator charges); :meth:`selection` is the
    paper's selection model (§3.3: FLOPs and HBM bytes through the roofline, nothing else). Times in s,
    energies in pJ/bit, ``weight_bytes`` bytes per weight element.
    """

    eta_compute: float = 0.756
    eta_memory: float = 0.915
    eta_ici: float = 0.8
    hbm_usable_frac: float = 0.9
    static_power_frac: float = 0.35
    ici_pj_per_bit: float = 5.0
    ici_step_latency_s: float = RING_STEP_LATENCY_S
    prefill_chunk_tokens: int = 8192
    ici: bool = True
    collective_launch_s: float = 0.0
    layer_floor_s: float = 1.02e-5
    step_overhead_s: float = 0.0
    layouts: bool = True
    kv_read_factor: float = 1.0
    weight_bytes: float = 2.0
    collectives: str = "ring"
    kv_layouts: bool = False
    serving_prefill: float = 1.0
    serving_decode: float = 1.0
    kv_form: str = "latent"

    def __post_init__(self) -> None:
        check_choice("collectives", self.collectives, COLLECTIVE_MODELS)
        check_choice("kv_form", self.kv_form, KV_FORMS)
        for name in ("eta_compute", "eta_memory", "eta_ici", "hbm_usable_frac"):
            check_range(name, getattr(self, name), 0.0, 1.0, low_inclusive=False)
        check_range("static_power_frac", self.static_power_frac, 0.0, 1.0)
        check_range("ici_pj_per_bit", self.ici_pj_per_bit, 0.0, None)
        check_range("ici_step_latency_s", self.ici_step_latency_s, 0.0, None)
        check_range("prefill_chunk_tokens", self.prefill_chunk_tokens, 1, None)
        check_range("collective_launch_s", self.collective_launch_s, 0.0, 1.0)
        check_range("layer_floor_s", self.layer_floor_s, 0.0, 1.0)
        check_range("step_overhead_s", self.step_overhead_s, 0.0, 10.0)
        check_range("kv_read_factor", self.kv_read_factor, 1.0, 100.0)
        check_range("weight_bytes", self.weight_bytes, 0.5, 4.0)
        for name in ("serving_prefill", "serving_decode"):
            check_range(name, getattr(self, name), 0.0, 1.0, low_inclusive=False)

    @classmethod
    def selection(cls, **overrides: object) -> RooflineParams:
        """The paper's selection model (§3.3, XLA HLO cost analysis): per-chip FLOPs and HBM bytes through
        the roofline only -- no ICI time or energy, no launch costs, floors or host overhead, and the
        plain layout (1D weight-stationary, KV sharded by heads, replicated when TP exceeds the KV heads)."""
        base = dict(ici=False, collective_launch_s=0.0, ici_step_latency_s=0.0, layer_floor_s=0.0,
                    step_overhead_s=0.0, layouts=False, ici_pj_per_bit=0.0, kv_read_factor=1.0)
        base.update(overrides)
        return cls(**base)  # type: ignore[arg-type]

    @classmethod
    def selection_op(cls, **overrides: object) -> RooflineParams:
        """The selection model the operating-point choice uses (:mod:`servegym.envs.npu.sim.selection`): the roofline
        plus ring collectives and their ICI energy (XLA's cost analysis lists the collectives and their bytes) and
        the KV cache sharded by batch where cheaper, so an MLA latent is not replicated on every TP chip; still
        no layer floor, 2D or weight-gathered layouts."""
        base = dict(ici=True, collective_launch_s=0.0, layer_floor_s=0.0, step_overhead_s=0.0, layouts=False,
                    kv_layouts=True)
        base.update(overrides)
        return cls(**base)  # type: ignore[arg-type]

    @classmethod
    def legacy(cls) -> RooflineParams:
        """The single model servegym used for both choosing and scoring before the two-model split: the roofline plus
        1D tensor-parallel all-reduces at ICI bandwidth with 1 µs per hop, and nothing else."""
        return cls(collective_launch_s=0.0, layer_floor_s=0.0, step_overhead_s=0.0, layouts=False,
                   collectives="hop", ici_step_latency_s=1e-6)

    @classmethod
    def hop(cls, **overrides: object) -> RooflineParams:
        """The earlier scoring model: a collective costs a fixed launch (37.4 µs, fitted to Pope et al.'s decode
        point) plus 1 µs per torus hop of its sub-torus, so its latency barely grows with the pod size."""
        base = dict(collectives="hop", collective_launch_s=HOP_LAUNCH_S, ici_step_latency_s=1e-6)
        base.update(overrides)
        return cls(**base)  # type: ignore[arg-type]

    @property
    def is_selection(self) -> bool:
        """True for a model without any of the scoring model's non-roofline terms."""
        return (not self.ici and not self.layouts and self.collective_launch_s == 0 and self.layer_floor_s == 0
                and self.step_overhead_s == 0)


def check_phase(phase: str) -> str:
    if phase not in PHASES:
        raise ConfigError(f"phase = {phase!r} is unknown; allowed: {', '.join(PHASES)}")
    return phase


def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def pod_shapes(version: str, max_chips: int = MAX_CHIPS_PER_VPOD) -> list[tuple[int, ...]]:
    """All power-of-two torus slices of ``version`` (axes sorted ascending, each ≤ 16) up to ``max_chips``."""
    spec = chip(version)
    limit = min(max_chips, spec.max_chips_per_pod, MAX_CHIPS_PER_VPOD)
    dims = _pow2_upto(MAX_POD_DIM)
    shapes: list[tuple[int, ...]] = [()]
    for _ in range(spec.torus_dims):
        shapes = [(*s, d) for s in shapes for d in dims if not s or d >= s[-1]]
    return sorted((s for s in shapes if int(np.prod(s)) <= limit), key=lambda s: (int(np.prod(s)), s[::-1]))


def tp_subshape(shape: tuple[int, ...], tp: int) -> tuple[int, ...]:
    """The most balanced power-of-two sub-torus of ``shape`` holding ``tp`` chips (grown one doubling at a time)."""
    sub = [1] * len(shape)
    while int(np.prod(sub)) < tp:
        grow = [i for i in range(len(shape)) if sub[i] < shape[i]]
        if not grow:
            raise ConfigError(f"tp = {tp} does not fit in shape {shape}")
        i = min(grow, key=lambda j: (sub[j], j))
        sub[i] *= 2
    return tuple(sub)


@dataclass(frozen=True)
class AllocationSpace:
    """All candidate vPod allocations of one model as parallel arrays (length A).

    ``vpods[i]`` is the :class:`VPod` of row i (its ``max_batch`` is 1; the batch is swept separately).
    Allocations that differ only in pod shape but lay TP out on the same sub-torus have identical
    roofline metrics, so only the first (most compact) shape of each is kept.
    """

    model: ModelSpec
    params: RooflineParams
    vpods: tuple[VPod, ...]
    arrays: dict[str, np.ndarray] = field(repr=False)

    def __len__(self) -> int:
        return len(self.vpods)

    def __getitem__(self, key: str) -> np.ndarray:
        return self.arrays[key]


def enumerate_allocations(model: ModelSpec, versions: tuple[str, ...] | list[str] = VERSIONS,
                          max_chips: int = MAX_CHIPS_PER_VPOD,
                          params: RooflineParams | None = None) -> AllocationSpace:
    """Enumerate (version, pod shape, TP, PP, EP) allocations for ``model`` (§3.3's first two passes).

    TP is a power of two ≤ the attention heads; PP ≤ the layer count; EP ∈ {1, TP} for MoE models.
    """
    params = params or RooflineParams()
    versions = tuple(versions)
    if not versions:
        raise ConfigError("versions is empty; allowed: a non-empty subset of " + ", ".join(VERSIONS))
    for v in versions:
        chip(v)
    check_range("max_chips", max_chips, 1, MAX_CHIPS_PER_VPOD)
    vpods: list[VPod] = []
    geo: list[tuple[int, int, float]] = []
    seen: set[tuple] = set()
    for v in versions:
        for shape in pod_shapes(v, max_chips):
            n = int(np.prod(shape))
            for tp in _pow2_upto(n):
                pp = n // tp
                if tp > model.heads or pp > model.layers:
                    continue
                sub = tp_subshape(shape, tp)
                for ep in ((1, tp) if model.is_moe and tp > 1 else (1,)):
                    key = (v, n, tp, pp, ep, tuple(sorted(sub)))
                    if key in seen:
                        continue
                    seen.add(key)
                    vpods.append(VPod(v, shape, tp, pp, ep))
                    links = min(2 * sum(1 for d in sub if d > 1), CHIPS[v].ici_links)
                    geo.append((links, sum(d - 1 for d in sub), max(1.0, sum(sub) / 4.0)))
    return _build_space(model, params, tuple(vpods), geo)


def space_for(model: ModelSpec, vpods: list[VPod] | tuple[VPod, ...],
              params: RooflineParams | None = None) -> AllocationSpace:
    """An :class:`AllocationSpace` of the given vPods (e.g. one vPod, for the cluster simulator)."""
    params = params or RooflineParams()
    geo = []
    for vp in vpods:
        _check_vpod(model, vp)
        sub = tp_subshape(vp.shape, vp.tp)
        links = min(2 * sum(1 for d in sub if d > 1), CHIPS[vp.version].ici_links)
        geo.append((links, sum(d - 1 for d in sub), max(1.0, sum(sub) / 4.0)))
    return _build_space(model, params, tuple(vpods), geo)


def _check_vpod(model: ModelSpec, vp: VPod) -> None:
    if vp.tp > model.heads:
        raise ConfigError(f"tp = {vp.tp} is out of range for {model.name}; allowed: [1, {model.heads}]")
    if vp.pp > model.layers:
        raise ConfigError(f"pp = {vp.pp} is out of range for {model.name}; allowed: [1, {model.layers}]")
    if vp.ep > 1 and not model.is_moe:
        raise ConfigError(f"ep = {vp.ep} needs an MoE model; {model.name} is dense, so allowed: 1")


def _pad(width: np.ndarray, sa: np.ndarray) -> np.ndarray:
    """Systolic padding factor of a GEMM output width: ceil(n / W) W / n."""
    return np.ceil(width / sa) * sa / width


def _build_space(model: ModelSpec, params: RooflineParams, vpods: tuple[VPod, ...],
                 geo: list[tuple[int, int, float]]) -> AllocationSpace:
    m = model
    a: dict[str, np.ndarray] = {}
    specs = [CHIPS[vp.version] for vp in vpods]
    f = lambda attr: np.array([getattr(s, attr) for s in specs], dtype=float)  # noqa: E731
    a["version_idx"] = np.array([VERSIONS.index(vp.version) for vp in vpods], dtype=np.int64)
    a["chips"] = np.array([vp.chips for vp in vpods], dtype=float)
    tp = a["tp"] = np.array([vp.tp for vp in vpods], dtype=float)
    pp = a["pp"] = np.array([vp.pp for vp in vpods], dtype=float)
    ep = a["ep"] = np.array([vp.ep for vp in vpods], dtype=float)
    g = np.array(geo, dtype=float).reshape(-1, 3)
    a["tp_links"], a["tp_hops"], a["a2a_hops"] = g[:, 0], g[:, 1], g[:, 2]
    a["flops_peak"] = f("tflops") * 1e12 * params.eta_compute
    a["bw"] = f("hbm_gbps") * 1e9 * params.eta_memory
    # the compute's energy above the idle floor: the floor is charged per held chip-second (static_w), so a chip at
    # peak compute draws exactly Table 2's TFLOPS / (TFLOP/J), never the floor twice
    a["j_per_flop"] = (1.0 - params.static_power_frac) / (f("tflop_per_j") * 1e12)
    a["j_per_byte"] = 1.0 / (f("hbm_gb_per_j") * 1e9)
    a["link_bw"] = f("ici_gbps_per_link") * 1e9 * params.eta_ici
    a["hbm_cap"] = f("hbm_gb") * 1e9 * params.hbm_usable_frac
    a["static_w"] = params.static_power_frac * f("tflops") / f("tflop_per_j")
    a["usd_per_s"] = f("usd_per_chip_hour") / 3600.0
    sa = f("systolic_width")
    sram = f("sram_mb") * 1e6
    B = BYTES_PER_PARAM
    Bw = float(params.weight_bytes)  # weights (int8 in one of Pope et al.'s calibration points)
    h = float(m.hidden)
    layers = float(m.layers)
    lps = np.ceil(layers / pp)  # layers on the largest stage
    a["layers_per_stage"] = lps
    moe_frac = m.moe_layers / layers
    dense_frac = 1.0 - moe_frac
    heads_chip = m.heads / tp

    # ---- linear group: per-token FLOPs/params per chip per (average) layer, with padding ----------
    if m.is_mla:
        qk = m.nope_head_dim + m.rope_head_dim
        rep = h * m.q_lora_rank + h * (m.kv_lora_rank + m.rope_head_dim)  # down-projections, replicated
        sharded_attn = (m.q_lora_rank * m.heads * qk + m.kv_lora_rank * m.heads * (m.nope_head_dim + m.v_head_dim)
                        + m.heads * m.v_head_dim * h)
        attn_p = rep + sharded_attn / tp
        attn_pad = (rep + sharded_attn / tp * _pad(m.heads * qk / tp, sa)) / attn_p
        q_width = m.heads * m.v_head_dim
        if params.kv_form == "expanded":  # each head's K (nope + rope) and V, sharded by heads (replicated past them)
            kv_width_chip = np.maximum(heads_chip, 1.0) * (qk + m.v_head_dim)
            kv_tok_layer_chip, q_bytes_tok = kv_width_chip * B, heads_chip * qk * B
            attn_core_flops = 2.0 * heads_chip * (qk + m.v_head_dim)  # q.k over qk wide, p.v over v wide
        else:
            kv_width_chip = float(m.kv_lora_rank + m.rope_head_dim) * np.ones_like(tp)
            kv_tok_layer_chip = np.full_like(tp, m.kv_bytes_per_token_layer, dtype=float)
            attn_core_flops = 2.0 * heads_chip * (2 * m.kv_lora_rank + m.rope_head_dim)  # per token per ctx token
            q_bytes_tok = heads_chip * (m.kv_lora_rank + m.rope_head_dim) * B
    else:
        q = m.heads * m.head_dim
        kv_heads_chip = np.maximum(m.kv_heads / tp, 1.0)
        kvw = kv_heads_chip * m.head_dim
        attn_p = h * (q / tp + 2 * kvw) + q / tp * h
        attn_pad = (h * (q / tp * _pad(q / tp, sa) + 2 * kvw * _pad(kvw, sa)) + q / tp * h * _pad(h, sa)) / attn_p
        q_width = q
        kv_width_chip = 2 * kvw
        kv_tok_layer_chip = 2 * kvw * B
        attn_core_flops = 4.0 * heads_chip * m.head_dim
        q_bytes_tok = heads_chip * m.head_dim * B
    ffn_dense_p = 3 * h * m.ffn / tp
    ffn_pad = _pad(m.ffn / tp, sa)
    if m.is_moe:
        shared_p = m.shared_experts * m.expert_params / tp
        router_p = h * m.experts
        ffn_act = dense_frac * m.ffn + moe_frac * (m.shared_experts + m.active_experts) * m.expert_ffn
    else:
        shared_p = router_p = 0.0
        ffn_act = float(m.ffn)
    lin_p = attn_p + dense_frac * ffn_dense_p + moe_frac * (shared_p + router_p)
    shared_pad = _pad(m.expert_ffn / tp, sa) if m.is_moe else 1.0
    lin_flops_tok = 2.0 * (attn_p * attn_pad + dense_frac * ffn_dense_p * ffn_pad
                           + moe_frac * (shared_p * shared_pad + router_p))
    a["lin_flops_tok"] = lin_flops_tok
    a["lin_w_bytes"] = lin_p * Bw
    a["q_width"] = np.full_like(tp, float(q_width))
    a["kv_full_layer"] = np.full_like(tp, float(m.kv_bytes_per_token_layer_as(params.kv_form)))  # one token's KV
    # activations read+written per token per layer per chip (hidden replicated, sharded widths / tp)
    a["act_bytes_tok"] = (4 * h + (3 * q_width + kv_width_chip * tp + 3 * ffn_act) / tp) * B
    a["act_ws_tok"] = (2 * h + 2 * max(m.ffn, ffn_act) / tp) * B  # one layer's live activations
    a["kv_tok_layer"] = kv_tok_layer_chip
    a["attn_core_flops"] = attn_core_flops  # x context length, per token per layer
    a["q_tile"] = np.maximum(np.floor(0.5 * sram / (2 * q_bytes_tok)), 1.0)

    # ---- experts ---------------------------------------------------------------------------------
    if m.is_moe:
        E, k = float(m.experts), float(m.active_experts)
        local = np.where(ep > 1, E / ep, E)
        # routed-expert token-loads per chip relative to T*k/E
        hot = np.where(ep > 1, m.hot_expert_factor + local - 1.0, E / tp)
        avg = np.where(ep > 1, local, E / tp)
        shard = np.where(ep > 1, 1.0, 1.0 / tp)
        expert_pad = np.where(ep > 1, _pad(np.full_like(tp, m.expert_ffn), sa), _pad(m.expert_ffn / tp, sa))
        a["exp_flops_hot"] = moe_frac * 2.0 * m.expert_params * (k / E) * hot * expert_pad
        a["exp_flops_avg"] = moe_frac * 2.0 * m.expert_params * (k / E) * avg * expert_pad
        a["exp_local"] = local
        a["exp_w_bytes"] = moe_frac * m.expert_params * shard * Bw  # per activated local expert
        a["a2a_layers"] = np.where(ep > 1, moe_frac, 0.0)
    else:
        z = np.zeros_like(tp)
        a["exp_flops_hot"] = a["exp_flops_avg"] = a["exp_local"] = a["exp_w_bytes"] = a["a2a_layers"] = z
    # tensor-parallel all-reduces per layer: one after attention and one after the FFN (a parallel
    # attention+FFN block, as in PaLM, needs one); an MoE layer with EP > 1 replaces the FFN's by an all-to-all
    a["ar_per_layer"] = (1.0 if m.parallel_block else 2.0) - a["a2a_layers"]
    # ---- capacity: weights of the largest stage per chip -------------------------------------------
    layer_w = (m.total_params - 2 * m.embed_params) / layers  # average layer (incl. all experts)
    emb = np.where(pp > 1, 1.0, 2.0) * m.embed_params
    a["w_cap_bytes"] = (layer_w * lps + emb) / tp * Bw
    a["head_flops_tok"] = 2.0 * h * m.vocab / tp * _pad(m.vocab / tp, sa)
    a["head_w_bytes"] = h * m.vocab / tp * Bw
    return AllocationSpace(model=model, params=params, vpods=vpods, arrays=a)


@dataclass(frozen=True)
class StepMetrics:
    """Roofline of one serving step, arrays of shape (allocations, batches).

    ``latency_s``: prefill time-to-first-token of the batch, or decode time per output token.
    ``period_s``: steady-state time between steps (the vPod's busy time per step).
    ``tokens``: tokens per step (prefill: b x seq_len prompt tokens; decode: b output tokens).
    ``energy_j``/``usd``: per step. ``mem_bytes``: HBM per chip needed. ``feasible``: fits in HBM.
    """

    latency_s: np.ndarray
    period_s: np.ndarray
    tokens: np.ndarray
    energy_j: np.ndarray
    usd: np.ndarray
    mem_bytes: np.ndarray
    feasible: np.ndarray

    @cached_property
    def energy_j_per_token(self) -> np.ndarray:
        return self.energy_j / self.tokens

    @cached_property
    def usd_per_token(self) -> np.ndarray:
        return self.usd / self.tokens

    @cached_property
    def tokens_per_s(self) -> np.ndarray:
        return self.tokens / self.period_s


def _roof(flops: np.ndarray, nbytes: np.ndarray, peak: np.ndarray, bw: np.ndarray) -> np.ndarray:
    return np.maximum(flops / peak, nbytes / bw)


def _collective(wire: np.ndarray, link: np.ndarray, n_coll: float | np.ndarray, hops: np.ndarray,
                p: RooflineParams, steps: np.ndarray | float | None = None) -> np.ndarray:
    """Time (s) of ``n_coll`` collectives moving ``wire`` bytes per chip in all: bandwidth term plus, per
    collective, a launch cost and a latency term -- ``steps`` ring steps (``collectives = "ring"``) or
    ``hops`` torus hops (``"hop"``), each ``ici_step_latency_s``."""
    lat = hops if p.collectives == "hop" or steps is None else steps
    return wire / link + n_coll * (p.collective_launch_s + lat * p.ici_step_latency_s)


def _micro_batch(space: AllocationSpace, a: dict[str, np.ndarray], phase: str, L: float,
                 T: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stage time (s), dynamic energy (J, all chips) and per-chip KV bytes per resident token and layer of
    one micro-batch of ``T`` tokens (requests, for decode).

    Prefill tokens attend to an average causal context of L/2; decode tokens to L. Each micro-batch
    reads its stage's weights once (a prefill micro-batch is at most one chunk). With ``params.layouts``
    the cheapest of the layouts below is used per allocation and batch (the scoring model); without, 1D
    weight-stationary with KV sharded by heads (the selection model).
    """
    m_, p = space.model, space.params
    tp, pp, lps = a["tp"], a["pp"], a["layers_per_stage"]
    h = float(m_.hidden)
    B = BYTES_PER_PARAM
    T = np.broadcast_to(T, np.broadcast_shapes(np.shape(T), tp.shape)).astype(float)
    kv_chip = np.broadcast_to(a["kv_tok_layer"], T.shape)  # KV sharded by heads (replicated past the KV heads)
    if phase == "prefill":
        ctx = L / 2.0
        kv_passes = np.maximum(1.0, L / (2.0 * np.minimum(a["q_tile"], p.prefill_chunk_tokens)))
        attn_b = T * a["kv_tok_layer"] * (1.0 + kv_passes)  # write K/V, re-read per query tile
        head_tok = T / L  # logits only for each request's last prompt token
    else:
        ctx = L
        attn_b = T * (L + 1.0) * a["kv_tok_layer"] * p.kv_read_factor  # read every request's context, append one
        head_tok = T
    lin_f = T * a["lin_flops_tok"]
    lin_b = a["lin_w_bytes"] + T * a["act_bytes_tok"]
    if m_.is_moe:
        E, k = float(m_.experts), float(m_.active_experts)
        touched = a["exp_local"] * (1.0 - (1.0 - k / E) ** T)  # expected distinct local experts
        exp_f_hot, exp_f_avg = T * a["exp_flops_hot"], T * a["exp_flops_avg"]
        exp_b = touched * a["exp_w_bytes"]
    else:
        exp_f_hot = exp_f_avg = exp_b = np.zeros_like(T)
    attn_f = T * ctx * a["attn_core_flops"]
    peak, bw = a["flops_peak"], a["bw"]
    link = a["link_bw"] * np.maximum(a["tp_links"], 1.0)
    zero = np.zeros_like(T)
    t_attn = _roof(attn_f, attn_b, peak, bw)
    t_kv_comm = zero
    if phase == "decode" and (p.layouts or p.kv_layouts):
        # KV sharded by batch (Pope et al. §3.3, multiquery): each chip holds and reads the whole KV of
        # ceil(T / tp) requests instead of a (replicated past the KV heads) head shard of all T; queries and
        # attention outputs move by two all-to-alls per layer. Used where it is faster.
        per_req = np.ceil(T / tp)
        attn_b_batch = per_req * (L + 1.0) * a["kv_full_layer"] * p.kv_read_factor
        t_batch = _roof(per_req * ctx * a["attn_core_flops"] * tp, attn_b_batch, peak, bw)
        a2a = 2.0 * T * a["q_width"] * B * (tp - 1.0) / tp / tp
        t_move = _collective(a2a, link, 2.0, a["a2a_hops"], p, a["tp_hops"]) if p.ici else zero
        use = (t_batch + t_move < t_attn) & (tp > 1)
        t_attn = np.where(use, t_batch, t_attn)
        t_kv_comm = np.where(use, t_move, 0.0)
        attn_b = np.where(use, attn_b_batch, attn_b)
        kv_chip = np.where(use, a["kv_full_layer"] * per_req / np.maximum(T, 1.0), kv_chip)
    # a layer's kernels never take less than the measured floor (launch / vector-unit time)
    t_layer = np.maximum(_roof(lin_f, lin_b, peak, bw) + _roof(exp_f_hot, exp_b, peak, bw) + t_attn,
                         p.layer_floor_s) + t_kv_comm
    # ---- tensor-parallel communication per layer
    ar_wire = np.where(tp > 1, 2.0 * (tp - 1.0) / tp * T * h * B, 0.0)  # one ring all-reduce, bytes per chip
    wire_1d = a["ar_per_layer"] * ar_wire
    ep = a["ep"]
    a2a_wire = np.where(ep > 1, 2.0 * T / ep * m_.active_experts * h * B * (ep - 1.0) / ep, 0.0)
    if p.ici:
        # ring all-reduce over the TP group: 2(n - 1) steps (reduce-scatter then all-gather)
        t_1d = np.where(tp > 1, _collective(wire_1d, link, a["ar_per_layer"], 2.0 * a["tp_hops"], p,
                                            2.0 * (tp - 1.0)), 0.0)
        t_comm, wire = t_1d, wire_1d
        if p.layouts:
            # 2D weight-stationary (Pope et al. §3.2.2): weights split over two axes; the activations an
            # all-gather/reduce-scatter pair moves per chip shrink as 1/sqrt(n) -- Pope's 8BLE/sqrt(n) against
            # 1D's 2BLE, i.e. 4/sqrt(n) of 1D's bytes -- at twice the collectives, each over half the hops
            wire_2d = wire_1d * np.minimum(4.0 / np.sqrt(np.maximum(tp, 1.0)), 1e9)
            # (each of the pair runs over one of two axes of about sqrt(n) chips: 2(sqrt(n) - 1) ring steps)
            steps_2d = 2.0 * (np.sqrt(np.maximum(tp, 1.0)) - 1.0)
            t_2d = np.where(tp >= 4, _collective(wire_2d, link, 2.0 * a["ar_per_layer"], a["tp_hops"], p, steps_2d),
                            np.inf)
            use2 = t_2d < t_comm
            t_comm, wire = np.where(use2, t_2d, t_comm), np.where(use2, wire_2d, wire)
            if phase == "prefill":
                # weight-gathered (Pope et al. §3.2.3): tokens stay on their chip and each layer's weights are
                # all-gathered instead, independent of the tokens -- the layout of large prefill batches
                wire_wg = a["lin_w_bytes"] * (tp - 1.0)
                t_wg = np.where(tp > 1, _collective(wire_wg, link, 2.0, a["tp_hops"], p, tp - 1.0), np.inf)
                use3 = t_wg < t_comm
                t_comm, wire = np.where(use3, t_wg, t_comm), np.where(use3, wire_wg, wire)
        # MoE dispatch and combine: two all-to-alls over the EP group
        # all-to-all on the torus: routed one dimension at a time, sum over the axes of (length - 1) steps
        t_a2a = np.where(ep > 1, _collective(a2a_wire * a["a2a_hops"], link, 2.0, a["tp_hops"], p, a["tp_hops"]),
                         0.0)
        t_p2p = np.where(pp > 1, _collective(T * h * B, a["link_bw"], 1.0, np.ones_like(tp), p, 1.0), 0.0)
    else:
        t_comm = t_a2a = t_p2p = zero
        wire = zero
    head_f = head_tok * a["head_flops_tok"]
    head_b = a["head_w_bytes"] + head_tok * h * B
    t_stage = (lps * (t_layer + t_comm + a["a2a_layers"] * t_a2a) + _roof(head_f, head_b, peak, bw) + t_p2p
               + p.step_overhead_s)
    # every layer lives on one stage of tp chips; the LM head on the last stage
    nl = float(m_.layers)
    flops_all = tp * (nl * (lin_f + exp_f_avg + attn_f) + head_f)
    bytes_all = tp * (nl * (lin_b + exp_b + attn_b) + head_b)
    if p.ici:
        ici_all = tp * nl * (wire + a["a2a_layers"] * a2a_wire * a["a2a_hops"]) + (pp - 1.0) * T * h * B
    else:
        ici_all = zero
    dyn = flops_all * a["j_per_flop"] + bytes_all * a["j_per_byte"] + ici_all * p.ici_pj_per_bit * 8e-12
    return t_stage, dyn, kv_chip


def evaluate(space: AllocationSpace, phase: str, seq_len: float, batches: np.ndarray | list[int]) -> StepMetrics:
    """Step latency, energy, cost and feasibility for every allocation x batch (shape (A, B)).

    ``seq_len`` (tokens) is the prompt length for prefill and the context length for decode.
    Micro-batches: prefill splits the b x L prompt tokens into k full micro-batches of S tokens and a
    remainder R, with S = min(chunk, ceil(b / min(b, pp)) x L); decode uses min(b, pp) micro-batches
    of ceil(b / min(b, pp)) requests. With identical stages the pipeline is a proportionate flow
    shop: the batch finishes after sum(t_i) + (pp - 1) max(t_i) and the stages are busy sum(t_i).
    """
    check_phase(phase)
    check_range("seq_len", float(seq_len), 1, None)
    b = np.asarray(batches, dtype=float).reshape(1, -1)
    if b.size == 0 or np.any(b < 1) or np.any(b != np.floor(b)):
        raise ConfigError(f"batches = {np.asarray(batches).tolist()!r}: each batch must be an integer ≥ 1")
    p = space.params
    a = {k: v[:, None] for k, v in space.arrays.items()}
    L = float(seq_len)
    pp, chips, lps = a["pp"], a["chips"], a["layers_per_stage"]
    groups = np.minimum(b, pp)
    if phase == "prefill":
        total = b * L
        S = np.minimum(float(p.prefill_chunk_tokens), np.ceil(b / groups) * L)
        n_full = np.floor(total / S)
        R = total - n_full * S
        t_s, e_s, kv_chip = _micro_batch(space, a, phase, L, S)
        has_r = R > 0
        t_r, e_r, _ = _micro_batch(space, a, phase, L, np.where(has_r, R, 1.0))
        t_r, e_r = np.where(has_r, t_r, 0.0), np.where(has_r, e_r, 0.0)
        period = n_full * t_s + t_r
        latency = period + (pp - 1.0) * np.maximum(t_s, t_r)
        dyn = n_full * e_s + e_r
        tokens = total
        live_tokens, kv_resident = S, b * L
    else:
        S = np.ceil(b / groups)
        t_s, e_s, kv_chip = _micro_batch(space, a, phase, L, S)
        latency = period = pp * t_s  # each micro-batch's token needs a full trip through the stages
        dyn = groups * e_s
        tokens = b * np.ones_like(latency)
        live_tokens, kv_resident = S, b * (L + 1.0)
    # the serving layer above the kernels: the engine runs a step in 1 / eta of the kernels' time (its host work,
    # padding and scheduling); the chips sit at their idle floor for the difference, the work's energy is the same
    eta = p.serving_prefill if phase == "prefill" else p.serving_decode
    if eta != 1.0:
        latency, period = latency / eta, period / eta
    energy = dyn + a["static_w"] * chips * period
    usd = a["usd_per_s"] * chips * period
    mem = a["w_cap_bytes"] + kv_resident * lps * kv_chip + live_tokens * a["act_ws_tok"]
    return StepMetrics(latency_s=latency, period_s=period, tokens=tokens, energy_j=energy, usd=usd,
                       mem_bytes=mem, feasible=mem <= a["hbm_cap"])


@dataclass(frozen=True)
class StepCost:
    """Scalar roofline of one step of a vPod (for the cluster simulator)."""

    latency_s: float
    period_s: float
    tokens: float
    energy_j: float
    usd: float
    mem_bytes: float
    feasible: bool

    @property
    def energy_j_per_token(self) -> float:
        return self.energy_j / self.tokens

    @property
    def usd_per_token(self) -> float:
        return self.usd / self.tokens


def step_cost(model: ModelSpec, vpod: VPod, phase: str, seq_len: float, batch: int,
              params: RooflineParams | None = None) -> StepCost:
    """Latency (s), period (s), tokens, energy (J) and cost (USD) of one step of ``vpod`` at ``batch``."""
    check_range("batch", batch, 1, None)
    sm = evaluate(space_for(model, [vpod], params), phase, seq_len, [int(batch)])
    return StepCost(latency_s=float(sm.latency_s[0, 0]), period_s=float(sm.period_s[0, 0]),
                    tokens=float(sm.tokens[0, 0]), energy_j=float(sm.energy_j[0, 0]), usd=float(sm.usd[0, 0]),
                    mem_bytes=float(sm.mem_bytes[0, 0]), feasible=bool(sm.feasible[0, 0]))


def weight_bytes_per_chip(model: ModelSpec, vpod: VPod) -> float:
    """Bytes of bf16 weights each chip of ``vpod`` holds (largest pipeline stage), for the weight
    download (DCN) and load (24 GB/s per chip) overheads of Table 3."""
    return float(space_for(model, [vpod])["w_cap_bytes"][0])
