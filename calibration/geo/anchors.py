"""Back-of-envelope checks of a profile against the geo paper's §V-B anchors.

The paper's validation (3 Llama-3.1-8B TP1 vLLM engines on A100-40GB, CNN-DailyMail with ISL
mean 841 and OSL mean 71) reports: saturation 27.58 req/s, TPOT 15.5 ms at 2 req/s and 54 ms
at 50 req/s, TTFT about 71 ms at 2 req/s. :func:`anchor_report` evaluates the step models at
those operating points; :func:`saturation_estimate` is a fluid (mean-value) estimate of the
throughput of ``n_engines`` saturated engines. The engine simulator gives the real figures.
"""

from __future__ import annotations

import math

import numpy as np
from servegym.envs.geo.sim.profile import EngineProfile

PAPER = {"saturation_req_s": 27.58, "tpot_ms_lowest_rate": 15.5, "tpot_ms_highest_rate": 54.0,
         "ttft_ms_lowest_rate": 71.0}
CNN_ISL, CNN_OSL = 841, 71


def prefill_request_s(p: EngineProfile, isl: float) -> float:
    """Prefill time (s) of one prompt alone, split into chunks of max_num_batched_tokens."""
    budget = p.max_num_batched_tokens
    full, rest = divmod(round(float(isl)), budget)
    chunks = [budget] * full + ([rest] if rest else [])
    return float(sum(p.prefill(c, 1, c * c) for c in chunks))


def saturation_estimate(p: EngineProfile, isl: float = CNN_ISL, osl: float = CNN_OSL, n_engines: int = 3) -> dict:
    """Fluid estimate of saturated throughput (req/s) for ``n_engines`` engines.

    Per engine the batch sits at ``B* = min(max_num_seqs, KV capacity / (isl + osl))``; each request
    costs its prefill steps (stalling decode) plus ``(osl - 1)/B*`` shares of a decode step at mean
    context ``isl + osl/2`` (the prefill emits the first token). Returns the throughput and the
    TPOT at saturation (decode step plus the prefill stalls spread over decode steps).
    """
    b = float(min(p.max_num_seqs, math.floor(p.kv_capacity_tokens / (isl + osl))))
    t_pre = prefill_request_s(p, isl)
    t_dec = float(p.decode(b, b * (isl + osl / 2.0)))
    per_req = t_pre + (osl - 1.0) * t_dec / b
    x = 1.0 / per_req
    steps_per_s = x * (osl - 1.0) / b
    tpot = 1.0 / steps_per_s
    return {"batch": b, "prefill_ms": t_pre * 1e3, "decode_step_ms": t_dec * 1e3,
            "per_engine_req_s": x, "saturation_req_s": x * n_engines, "tpot_ms_saturated": tpot * 1e3}


def anchor_report(p: EngineProfile, isl: float = CNN_ISL, osl: float = CNN_OSL) -> dict[str, float]:
    """Step-model figures at the paper's operating points (ms, W, req/s)."""
    sat = saturation_estimate(p, isl, osl)
    b_big = float(p.max_num_seqs)
    k_big = b_big * (isl + osl / 2.0)
    t_dec_big = float(p.decode(b_big, k_big))
    e_dec_big = float(p.energy.decode(b_big, k_big))
    n_sat = 8192.0
    t_pre_sat = float(p.prefill(n_sat, 1, n_sat * n_sat))
    e_pre_sat = float(p.energy.prefill(n_sat, n_sat * n_sat))
    return {
        "tdec_b1_k900_ms": float(p.decode(1, 900)) * 1e3,
        "prefill_841_one_step_ms": float(p.prefill(isl, 1, isl * isl)) * 1e3,
        "ttft_841_chunked_ms": prefill_request_s(p, isl) * 1e3,
        "saturation_req_s_3_engines": sat["saturation_req_s"],
        "tpot_ms_saturated": sat["tpot_ms_saturated"],
        "decode_power_w_per_gpu_max_batch": e_dec_big / t_dec_big / p.tp,
        "prefill_power_w_per_gpu_8192_tokens": e_pre_sat / t_pre_sat / p.tp,
        "tdp_w": p.tdp_w,
    }


def relative_error(value: float, target: float) -> float:
    return float(np.abs(value - target) / target)


def distserve_crosscheck(p: EngineProfile, data) -> dict[str, float]:
    """Compare a profile with DistServe's fitted vLLM A100-80GB coefficients for OPT-13B at the same TP.

    DistServe fits prefill_ms = a + b·N + c·N² and small-batch decode_ms = a + b·K + c·B. Scaled to
    this model: the per-token prefill slope by the parameter ratio (compute-bound, same 312 TFLOPS),
    the decode intercept by the weight bytes read at batch 1 (active parameters) and by the 80 GB -> 40 GB bandwidth ratio (memory-bound).
    Returns our value / DistServe-scaled value for both (1.0 = agreement; DistServe's vLLM predates
    0.6.x's CUDA-graph and scheduler speed-ups, so ratios below 1 are expected).
    """
    from servegym.calibration.geo import sources
    from servegym.calibration.geo.specs import ARCHS, GPUS

    ds = sources.distserve_vllm(data)["facebook/opt-13b"].get(str(p.tp))
    if ds is None:
        return {}
    arch = next(a for a in ARCHS.values() if a.hf_id == p.model)
    opt13b_params = 12.85e9
    active = arch.params if arch.experts == 1 else arch.params * (0.25 + 0.75 * arch.top_k / arch.experts)
    slope_ref = ds["prefill"][1] * 1e-3 * active / opt13b_params
    dec_ref = ds["decoding_smallbs"][0] * 1e-3 * (active / opt13b_params) * (
        GPUS["a100-80gb"].hbm_bw / GPUS["a100-40gb"].hbm_bw)
    return {"prefill_slope_ratio": p.prefill.tok_slope_hi / slope_ref,
            "decode_intercept_ratio": float(p.decode(1, 0)) / dec_ref}
