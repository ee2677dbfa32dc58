"""Readers for the raw measurement sources under ``../shared/data`` (each returns plain arrays/frames).

Paths are relative to the data root (``--data DIR``); every reader names the file it read so
the profile's ``sources`` list is exact. Units are converted to seconds (s) here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from servegym.errors import ConfigError

VIDUR_MLP = "vidur_profiling/data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv"
VIDUR_ATTN = "vidur_profiling/legacy_prerelease/a100/attention.csv"
VIDUR_CPU = "vidur_profiling/legacy_prerelease/a100/cpu_overheads.csv"
VIDUR_ALLREDUCE = "vidur_profiling/data/profiling/network/a100_dgx/all_reduce.csv"
LSS_ROOT = "gpu_perf/llmservingsim/profiler/v0/perf_models/H100"
LSS_MIXTRAL_LAYERS = f"{LSS_ROOT}/mistralai/Mixtral-8x7B-v0.1/tp4/layers.csv.gz"
LSS_MIXTRAL_ATTN = f"{LSS_ROOT}/mistralai/Mixtral-8x7B-v0.1/tp4/attention.csv.gz"
LSS_LLAMA_LAYERS = f"{LSS_ROOT}/meta-llama/Llama-3.1-8B/tp1/layers.csv.gz"
DISTSERVE_VLLM = "gpu_perf/distserve/profiler-a100-80g.vllm.json"
QWEN_SPEED = "gpu_perf/qwen_speed_benchmark/qwen2.5_speed_benchmark_a100.csv"
SPLITWISE = "gpu_perf/splitwise_sim/perf_model.csv"
MLENERGY_V2 = "ml_energy/v2_2024/llm_runs_flat.csv"

VIDUR_OPS = (
    "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
    "mlp_up_proj", "mlp_act", "mlp_down_proj", "add",
)


def default_data_dir() -> Path:
    """``../shared/data`` next to the repository checkout (the project's raw-data folder)."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


def require(data: Path, rel: str) -> Path:
    p = Path(data) / rel
    if not p.is_file():
        raise ConfigError(
            f"raw data file {p} is missing; pass --data DIR pointing at the shared data folder "
            f"(it must contain {rel})"
        )
    return p


def vidur_mlp(data: Path, tp: int) -> pd.DataFrame:
    """Vidur A100 Llama-3-8B per-layer op medians (s), one row per num_tokens (duplicates averaged)."""
    df = pd.read_csv(require(data, VIDUR_MLP))
    df = df[df["num_tensor_parallel_workers"] == tp]
    if df.empty:
        raise ConfigError(f"{VIDUR_MLP} has no rows for TP = {tp}; allowed: 1, 2, 4, 8")
    cols = {f"time_stats.{op}.median": op for op in (*VIDUR_OPS, "emb")}
    out = df.groupby("num_tokens")[list(cols)].mean().rename(columns=cols) / 1e3
    return out.sort_index()


def interp_ops(table: pd.DataFrame, m: NDArray) -> dict[str, NDArray]:
    """Linear interpolation of each op column at token counts ``m``; linear extrapolation past the end."""
    x = table.index.to_numpy(float)
    out = {}
    for c in table.columns:
        y = table[c].to_numpy(float)
        v = np.interp(m, x, y)
        hi = m > x[-1]
        if hi.any():
            # beyond the profiled range kernels are compute-bound: extend the slope of the top quarter
            j = int(np.searchsorted(x, 0.75 * x[-1]))
            slope = (y[-1] - y[j]) / (x[-1] - x[j])
            v[hi] = y[-1] + slope * (m[hi] - x[-1])
        out[c] = v
    return out


@dataclass(frozen=True)
class AttentionFit:
    """Attention kernel model fitted to Vidur's A100 FlashAttention profile (s).

    decode: ``c0 + c1 B + c2 (K x kv_heads_per_gpu)``  (KV bytes read scale with K x kv heads)
    prefill: ``d0 + d1 (q_heads_per_gpu x Σ chunk (kv + chunk/2))`` (causal attention FLOPs)
    """

    c0: float
    c1: float
    c2: float
    d0: float
    d1: float
    decode_mape: float
    prefill_mape: float

    def decode(self, batch: NDArray, kv_tokens: NDArray, kv_heads_per_gpu: float, bw_scale: float) -> NDArray:
        return self.c0 + (self.c1 * batch + self.c2 * kv_tokens * kv_heads_per_gpu) * bw_scale

    def prefill(self, causal_pairs: NDArray, q_heads_per_gpu: float) -> NDArray:
        return self.d0 + self.d1 * causal_pairs * q_heads_per_gpu


def vidur_attention(data: Path) -> AttentionFit:
    """Fit :class:`AttentionFit` on the legacy A100 table (per GPU 32 q heads, 4 kv heads, FlashAttention)."""
    a = pd.read_csv(require(data, VIDUR_ATTN))
    qh = a["n_q_head"].iloc[0] / a["num_tensor_parallel_workers"].iloc[0]
    kvh = a["n_kv_head"].iloc[0] / a["num_tensor_parallel_workers"].iloc[0]
    d = a[~a["is_prefill"].astype(bool)]
    y = d["time_stats.attn_decode.median"].to_numpy() / 1e3
    b = d["batch_size"].to_numpy(float)
    k = (d["batch_size"] * d["kv_cache_size"]).to_numpy(float) * kvh
    x = np.column_stack([np.ones_like(b), b, k])
    c = np.linalg.lstsq(x / y[:, None], np.ones_like(y), rcond=None)[0]
    dm = float(np.mean(np.abs(x @ c - y) / y) * 100)
    p = a[a["is_prefill"].astype(bool)]
    yp = p["time_stats.attn_prefill.median"].to_numpy() / 1e3
    ch = p["prefill_chunk_size"].to_numpy(float)
    pairs = ch * (p["kv_cache_size"].to_numpy(float) + ch / 2.0) * qh
    xp = np.column_stack([np.ones_like(pairs), pairs])
    dcoef = np.linalg.lstsq(xp / yp[:, None], np.ones_like(yp), rcond=None)[0]
    pm = float(np.mean(np.abs(xp @ dcoef - yp) / yp) * 100)
    return AttentionFit(float(c[0]), float(c[1]), float(c[2]), float(dcoef[0]), float(dcoef[1]), dm, pm)


def vidur_cpu_overhead(data: Path) -> tuple[float, float]:
    """Per-step CPU-side overhead (s) ``c0 + c1 B`` from Vidur's A100 Llama-2-7B (TP1) rows.

    Sum of the medians of schedule, prepare_inputs_e2e and sampler_e2e; process_model_outputs is
    left out because vLLM >= 0.6.0 overlaps output processing with the next step (async output
    processing). The Ray communication time is a sarathi/Ray artefact and is also left out.
    """
    c = pd.read_csv(require(data, VIDUR_CPU))
    c = c[c["model_name"] == "meta-llama/Llama-2-7b-hf"]
    y = (c["schedule_median"] + c["prepare_inputs_e2e_median"] + c["sampler_e2e_median"]).to_numpy() / 1e3
    b = c["batch_size"].to_numpy(float)
    slope, icpt = np.polyfit(b, y, 1)
    return float(icpt), float(slope)


def vidur_allreduce(data: Path, tp: int):
    """All-reduce time (s) vs message bytes inside one DGX-A100 (NVSwitch): ``t0 + bytes / bw``.

    Single-node rows only (``devices_per_node == num_workers``). Small messages are noisy
    (launch jitter of tens of microseconds), so a latency + bandwidth line is fitted on all
    sizes instead of interpolating point to point.
    """
    a = pd.read_csv(require(data, VIDUR_ALLREDUCE))
    a = a[(a["num_workers"] == tp) & (a["devices_per_node"] == tp)]
    if a.empty:
        raise ConfigError(f"{VIDUR_ALLREDUCE} has no single-node rows for num_workers = {tp}")
    g = a.groupby("size")["time_stats.all_reduce.median"].median()
    inv_bw, t0 = np.polyfit(g.index.to_numpy(float), g.to_numpy(float) / 1e3, 1)
    t0 = max(float(t0), 0.0)

    def f(nbytes: NDArray) -> NDArray:
        return t0 + inv_bw * np.asarray(nbytes, float)

    return f


def lss_layers(data: Path, rel: str) -> pd.DataFrame:
    """LLMServingSim H100 per-layer medians (s): index = input tokens, columns = layer names."""
    df = pd.read_csv(require(data, rel))
    return df.pivot_table(index="input", columns="layer_name", values="latency(ns)", aggfunc="median") / 1e9


def lss_attention(data: Path, rel: str) -> pd.DataFrame:
    return pd.read_csv(require(data, rel))


def distserve_vllm(data: Path) -> dict:
    """DistServe's fitted A100-80GB vLLM step coefficients (ms): model -> tp -> {prefill, decoding_*}."""
    return json.loads(require(data, DISTSERVE_VLLM).read_text())


def qwen_speed(data: Path) -> pd.DataFrame:
    """Qwen2.5-7B-Instruct BF16 vLLM 0.6.3 rows, 1 GPU (A100-80GB), batch 1, 2048 generated tokens."""
    q = pd.read_csv(require(data, QWEN_SPEED))
    q = q[(q["engine"] == "vllm") & (q["model"] == "Qwen2.5-7B-Instruct") & (q["quantization"] == "BF16")
          & (q["gpu_num"] == 1)]
    return q[["input_length", "speed_tokens_per_s"]].sort_values("input_length").reset_index(drop=True)


def splitwise_a100(data: Path) -> pd.DataFrame:
    """Splitwise-sim A100-80GB Llama2-70B rows with power (fractions of TDP); zero power = missing."""
    s = pd.read_csv(require(data, SPLITWISE))
    s = s[(s["hardware"] == "a100-80gb") & (s["model"] == "llama2-70b") & (s["average_power"] > 0)]
    return s.groupby(["tensor_parallel", "prompt_size", "batch_size", "token_size"], as_index=False)[
        ["peak_power", "average_power", "prompt_time", "token_time"]].mean()


def mlenergy_a100(data: Path, model_substr: str) -> pd.DataFrame:
    """ML.ENERGY v2 (vLLM 0.5.4, A100-SXM4-40GB at 400 W) chat runs of one model, by max_num_seqs."""
    m = pd.read_csv(require(data, MLENERGY_V2))
    m = m[m["gpu_dir"].str.contains("A100") & m["model"].str.contains(model_substr, regex=False)
          & (m["task"] == "chat")]
    if m.empty:
        raise ConfigError(f"{MLENERGY_V2} has no A100 chat rows for {model_substr!r}")
    return m.sort_values("avg_bs_reqs").reset_index(drop=True)
