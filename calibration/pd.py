"""Calibration of the PD provisioning model from measurements (App. B.2 of the PD paper).

* :func:`fit_prefill`: MFU and c_a from the prefill service time 1/mu_P measured at several fixed input
  lengths: least squares of ``a_P l + b_P l^2`` (no intercept, eq. 4), then MFU = 2N / (pi a_P),
  c_a = pi MFU b_P / (L d).
* :func:`fit_decode`: MBU, t_iter and t_req from mean iteration times against batch at several context
  lengths: per setting j a (weighted) line ``t_D = a_j + b_j B``; the slopes regressed on the context
  ``b_j = c1 l_ctx,j + c0``; MBU = kappa / (beta c1), t_req = c0, t_iter = mean_j(a_j) - 2N / (beta MBU).
* :func:`fit_power_ramp`: the capped ramp ``min(p0 + gamma x, p_sat)`` by bounded nonlinear least squares
  (``scipy.optimize.least_squares``) from a deterministic grid of starts, p0 bounded below by the power of
  a GPU that holds the weights but serves nothing; the lowest-cost start wins (App. B.3).

Units: lengths in tokens, times in s, rates in req/s, power in W.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import least_squares
from servegym.envs.pd.sim.catalog import H200, QWEN3_32B, Hardware, ModelSpec, PowerRamp

from servegym.errors import ConfigError


def _vec(name: str, values: ArrayLike, min_len: int) -> NDArray[np.float64]:
    a = np.asarray(values, dtype=float).ravel()
    if a.size < min_len or not np.all(np.isfinite(a)):
        raise ConfigError(f"{name}: need at least {min_len} finite values (got {a.size})")
    return a


@dataclass(frozen=True)
class PrefillFit:
    mfu: float
    c_a: float
    a_p: float  # s/token
    b_p: float  # s/token^2
    rmse_s: float  # fit residual of 1/mu_P, s


def fit_prefill(input_tokens: ArrayLike, mu_p: ArrayLike, hardware: Hardware = H200,
                model: ModelSpec = QWEN3_32B) -> PrefillFit:
    """Fit MFU and c_a from prefill capacities ``mu_p`` (req/s) measured at fixed ``input_tokens``."""
    x = _vec("input_tokens", input_tokens, 2)
    mu = _vec("mu_p", mu_p, 2)
    if x.size != mu.size or x.min() <= 0 or mu.min() <= 0:
        raise ConfigError("input_tokens and mu_p must be equally long and > 0")
    t = 1.0 / mu
    design = np.stack([x, x * x], axis=1)
    # Scale columns so the 2x2 least-squares problem is well conditioned.
    scale = np.abs(design).max(axis=0)
    coef, *_ = np.linalg.lstsq(design / scale, t, rcond=None)
    a_p, b_p = coef / scale
    if a_p <= 0:
        raise ConfigError(f"prefill fit gave a_P = {a_p:g} s/token; allowed: > 0 (check the measurements)")
    mfu = 2.0 * model.n_params / (hardware.peak_flops * a_p)
    c_a = hardware.peak_flops * mfu * b_p / (model.n_layers * model.attention_width)
    rmse = float(np.sqrt(np.mean((design @ np.array([a_p, b_p]) - t) ** 2)))
    return PrefillFit(mfu=float(mfu), c_a=float(c_a), a_p=float(a_p), b_p=float(b_p), rmse_s=rmse)


@dataclass(frozen=True)
class DecodeFit:
    mbu: float
    t_iter_s: float
    t_req_s: float
    intercepts_s: tuple[float, ...]  # a_j per context setting, s
    slopes_s: tuple[float, ...]  # b_j per context setting, s per request
    c1: float  # s per request per context token
    c0: float  # s per request


def _weighted_line(x: NDArray[np.float64], y: NDArray[np.float64], w: NDArray[np.float64]) -> tuple[float, float]:
    """Weighted least-squares intercept and slope of y = a + b x."""
    sw = np.sqrt(w)
    design = np.stack([np.ones_like(x), x], axis=1) * sw[:, None]
    (a, b), *_ = np.linalg.lstsq(design, y * sw, rcond=None)
    return float(a), float(b)


def fit_decode(context_tokens: Sequence[float], batches: Sequence[ArrayLike], iteration_times_s: Sequence[ArrayLike],
               weights: Sequence[ArrayLike] | None = None, hardware: Hardware = H200,
               model: ModelSpec = QWEN3_32B) -> DecodeFit:
    """Fit MBU, t_iter and t_req from (batch, mean iteration time) measurements at each context length.

    ``context_tokens[j]`` is l_ctx of setting j (l_in + l_out/2 for fixed lengths); ``batches[j]`` and
    ``iteration_times_s[j]`` are that setting's measurements; ``weights[j]`` optional (the paper weights by
    generation rate to damp idle-contaminated points).
    """
    ctx = _vec("context_tokens", context_tokens, 2)
    if len(batches) != ctx.size or len(iteration_times_s) != ctx.size:
        raise ConfigError("need one batch array and one iteration-time array per context setting")
    a_j, b_j = [], []
    for j in range(ctx.size):
        b = _vec(f"batches[{j}]", batches[j], 2)
        t = _vec(f"iteration_times_s[{j}]", iteration_times_s[j], 2)
        w = np.ones_like(b) if weights is None else _vec(f"weights[{j}]", weights[j], 2)
        if not (b.size == t.size == w.size) or w.min() < 0 or np.ptp(b) == 0:
            raise ConfigError(f"setting {j}: batches, times and weights must align and batches must vary")
        a, s = _weighted_line(b, t, w)
        a_j.append(a)
        b_j.append(s)
    c0, c1 = _weighted_line(ctx, np.asarray(b_j), np.ones_like(ctx))
    if c1 <= 0:
        raise ConfigError(f"decode fit gave a slope per context token c1 = {c1:g}; allowed: > 0")
    mbu = model.kv_bytes_per_token / (hardware.mem_bandwidth * c1)
    t_iter = float(np.mean(a_j)) - model.weight_bytes / (hardware.mem_bandwidth * mbu)
    return DecodeFit(mbu=float(mbu), t_iter_s=float(t_iter), t_req_s=float(c0), intercepts_s=tuple(a_j),
                     slopes_s=tuple(b_j), c1=float(c1), c0=float(c0))


@dataclass(frozen=True)
class RampFit:
    ramp: PowerRamp
    rmse_w: float
    n_points: int

    @property
    def saturation_point(self) -> float:
        return self.ramp.saturation_point


def fit_power_ramp(normalized_throughput: ArrayLike, power_w: ArrayLike, *, p0_min_w: float = H200.loaded_idle_power_w,
                   n_starts: int = 5) -> RampFit:
    """Fit ``min(p0 + gamma x, p_sat)`` to per-GPU power samples by bounded least squares, multi-start.

    Bounds: p0 in [p0_min_w, max(P)], gamma in [0, 50 (max(P) - p0_min_w) / max(x)], p_sat in
    [p0_min_w, 1.5 max(P)]. Starts: an n_starts x n_starts grid over the saturation point and p0
    (p_sat starts at the upper-quantile power); some starts place every point on the cap and leave p0 and
    gamma unconstrained, so the lowest-cost fit is kept. Deterministic.
    """
    x = _vec("normalized_throughput", normalized_throughput, 3)
    p = _vec("power_w", power_w, 3)
    if x.size != p.size or x.min() < 0:
        raise ConfigError("normalized_throughput and power_w must align and throughput must be >= 0")
    if p.max() <= p0_min_w:
        raise ConfigError(f"all power samples are <= the p0 lower bound {p0_min_w:g} W")
    if n_starts < 1:
        raise ConfigError(f"n_starts = {n_starts}; allowed: >= 1")
    x_max = max(float(x.max()), 1e-9)
    p_hi = float(p.max())
    lo = np.array([p0_min_w, 0.0, p0_min_w])
    hi = np.array([p_hi, 50.0 * (p_hi - p0_min_w) / x_max, 1.5 * p_hi])

    def resid(theta: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.minimum(theta[0] + theta[1] * x, theta[2]) - p

    p_sat0 = float(np.quantile(p, 0.9))
    best = None
    for frac in np.linspace(0.15, 0.95, n_starts):  # start saturation point as a fraction of the x range
        for p0 in np.linspace(p0_min_w, max(p0_min_w, float(np.quantile(p, 0.1))), n_starts):
            gamma = max((p_sat0 - p0) / (frac * x_max), 0.0)
            start = np.clip([p0, gamma, p_sat0], lo, hi)
            start = np.minimum(np.maximum(start, lo + 1e-9 * (hi - lo)), hi - 1e-9 * (hi - lo))
            fit = least_squares(resid, start, bounds=(lo, hi), method="trf", x_scale="jac")
            if best is None or fit.cost < best.cost - 1e-12:
                best = fit
    assert best is not None
    p0, gamma, p_sat = (float(v) for v in best.x)
    p_sat = max(p_sat, p0)
    rmse = float(np.sqrt(np.mean(resid(best.x) ** 2)))
    return RampFit(ramp=PowerRamp(p0_w=p0, slope_w=gamma, p_sat_w=p_sat), rmse_w=rmse, n_points=int(x.size))
