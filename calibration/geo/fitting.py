"""Fitting the geo paper's step-model forms (§III-B) to step-level measurement tables.

Every fit works on a :class:`pandas.DataFrame` whose columns are documented in
:data:`TABLE_COLUMNS` (one row per measured step):

- ``prefill``: ``n_tokens`` (N, tokens in the step), ``n_requests`` (B), ``sum_sq`` (Σ n_i², tokens²),
  ``time_s`` (step time, s);
- ``decode``: ``batch`` (B, requests), ``kv_tokens`` (K, cached tokens over the batch), ``time_s``;
- ``energy-prefill``: ``n_tokens``, ``sum_sq``, ``energy_j`` (J, all GPUs of the engine);
- ``energy-decode``: ``batch``, ``kv_tokens``, ``energy_j``.

Energy tables may carry an optional ``max_energy_j`` column (J): the fit is then constrained so
that the predicted energy never exceeds it in any row (used to keep step power <= TDP x tp).

All fits minimise the *relative* squared error (rows weighted by 1/y), because the paper
reports MAPE and step times span three orders of magnitude. Non-negativity bounds come from
:func:`scipy.optimize.lsq_linear`. The prefill knee is found by a grid search over the
table's token counts followed by a bounded scalar refinement. Held-out error uses a
deterministic split (:func:`split_rows`): fit on the training rows, MAPE on the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy.optimize import lsq_linear, minimize, minimize_scalar
from servegym.envs.geo.sim.profile import DecodeTimeModel, PrefillTimeModel

from servegym.errors import ConfigError

TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "prefill": ("n_tokens", "n_requests", "sum_sq", "time_s"),
    "decode": ("batch", "kv_tokens", "time_s"),
    "energy-prefill": ("n_tokens", "sum_sq", "energy_j"),
    "energy-decode": ("batch", "kv_tokens", "energy_j"),
}
"""Required columns per table kind (units: tokens, requests, tokens², s, J)."""

HOLDOUT_FRACTION = 0.2
SPLIT_SEED = 20241102


def check_table(df: pd.DataFrame, kind: str, source: str = "table") -> pd.DataFrame:
    """Validate a measurement table: required columns present, numeric, finite, target > 0.

    Returns the table restricted to the required columns as float64.
    """
    if kind not in TABLE_COLUMNS:
        raise ConfigError(f"kind = {kind!r} is unknown; allowed: {', '.join(map(str, sorted(TABLE_COLUMNS)))}")
    need = TABLE_COLUMNS[kind]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ConfigError(
            f"{source}: {kind} table is missing column(s) {missing}; required columns: {list(need)} "
            f"(found: {list(df.columns)})"
        )
    keep = list(need) + (["max_energy_j"] if kind.startswith("energy") and "max_energy_j" in df.columns else [])
    out = df[keep].apply(pd.to_numeric, errors="coerce").astype(float)
    for c in keep:
        bad = ~np.isfinite(out[c].to_numpy())
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise ConfigError(f"{source}: column {c!r} row {row} is not a finite number ({df[c].iloc[row]!r})")
        if (out[c] < 0).any():
            raise ConfigError(f"{source}: column {c!r} has negative values; allowed: >= 0")
    target = need[-1]
    if (out[target] <= 0).any():
        raise ConfigError(f"{source}: column {target!r} must be > 0 in every row")
    min_rows = {"prefill": 8, "decode": 8, "energy-prefill": 4, "energy-decode": 4}[kind]
    if len(out) < min_rows:
        raise ConfigError(f"{source}: {kind} table has {len(out)} rows; at least {min_rows} are needed")
    return out.reset_index(drop=True)


def split_rows(n: int, holdout: float = HOLDOUT_FRACTION, seed: int = SPLIT_SEED) -> tuple[NDArray, NDArray]:
    """Deterministic train/held-out split of ``n`` rows (index arrays, sorted)."""
    perm = np.random.default_rng(seed).permutation(n)
    n_test = max(1, round(n * holdout)) if n >= 5 else 0
    test = np.sort(perm[:n_test])
    train = np.sort(perm[n_test:])
    return train, test


def mape(pred: NDArray, actual: NDArray) -> float:
    """Mean absolute percentage error in percent."""
    actual = np.asarray(actual, dtype=float)
    return float(np.mean(np.abs(np.asarray(pred, dtype=float) - actual) / actual) * 100.0)


def _weighted_lsq(x: NDArray, y: NDArray, lower: Sequence[float], upper: Sequence[float]) -> tuple[NDArray, float]:
    """Bounded least squares on relative error; columns are scaled for conditioning."""
    w = 1.0 / y
    a = x * w[:, None]
    scale = np.linalg.norm(a, axis=0)
    scale[scale == 0] = 1.0
    lo = np.asarray(lower, dtype=float) * scale
    hi = np.asarray(upper, dtype=float) * scale
    res = lsq_linear(a / scale, np.ones_like(y), bounds=(lo, hi), method="bvls", lsmr_tol="auto")
    coef = res.x / scale
    return coef, float(np.sum((x @ coef * w - 1.0) ** 2))


def _capped_lsq(x: NDArray, y: NDArray, cap: NDArray) -> NDArray:
    """Non-negative relative least squares with ``x @ c <= cap`` in every row (SLSQP)."""
    c0, _ = _weighted_lsq(x, y, [0.0] * x.shape[1], [np.inf] * x.shape[1])
    pred = x @ c0
    if np.all(pred <= cap * (1 + 1e-9)):
        return c0
    scale = np.linalg.norm(x / y[:, None], axis=0)
    scale[scale == 0] = 1.0
    xs = x / scale
    start = c0 * scale * min(1.0, float(np.min(cap / np.maximum(pred, 1e-300)))) * 0.999

    def obj(c: NDArray) -> float:
        r = xs @ c / y - 1.0
        return float(r @ r)

    def jac(c: NDArray) -> NDArray:
        return 2.0 * (xs / y[:, None]).T @ (xs @ c / y - 1.0)

    cap = cap * 0.995  # SLSQP satisfies constraints only to its tolerance: keep a margin
    cons = {"type": "ineq", "fun": lambda c: (cap - xs @ c) / cap, "jac": lambda c: -xs / cap[:, None]}
    res = minimize(obj, start, jac=jac, bounds=[(0.0, None)] * x.shape[1], constraints=[cons], method="SLSQP",
                   options={"maxiter": 500, "ftol": 1e-12})
    return np.maximum(res.x, 0.0) / scale


# ---------------------------------------------------------------- prefill

def _prefill_design(df: pd.DataFrame, knee: float) -> NDArray:
    n = df["n_tokens"].to_numpy()
    return np.column_stack(
        [np.minimum(n, knee), np.maximum(n - knee, 0.0), np.ones_like(n), df["n_requests"].to_numpy(), df["sum_sq"].to_numpy()]
    )


def _fit_prefill_at(df: pd.DataFrame, knee: float) -> tuple[NDArray, float]:
    y = df["time_s"].to_numpy()
    return _weighted_lsq(_prefill_design(df, knee), y, [0.0] * 5, [np.inf] * 5)


def fit_prefill_time(df: pd.DataFrame) -> PrefillTimeModel:
    """Fit ``t_pre = t_tok(N) + b0 + b1 B + b2 Σn²`` (all coefficients >= 0) with a knee search on N."""
    df = check_table(df, "prefill")
    n = np.unique(df["n_tokens"].to_numpy())
    lo, hi = float(n[0]), float(n[-1])
    grid = np.unique(np.quantile(n, np.linspace(0.02, 0.9, 60)))
    sse = np.array([_fit_prefill_at(df, k)[1] for k in grid])
    i = int(np.argmin(sse))
    a = float(grid[max(i - 1, 0)]) if i > 0 else lo
    b = float(grid[min(i + 1, len(grid) - 1)]) if i < len(grid) - 1 else hi
    best = float(grid[i])
    if b > a:
        r = minimize_scalar(lambda k: _fit_prefill_at(df, k)[1], bounds=(a, b), method="bounded",
                            options={"xatol": 0.5})
        if r.fun < sse[i]:
            best = float(r.x)
    coef, _ = _fit_prefill_at(df, best)
    return PrefillTimeModel(
        knee_tokens=round(best, 1), tok_slope_lo=float(coef[0]), tok_slope_hi=float(coef[1]),
        b0=float(coef[2]), b1=float(coef[3]), b2=float(coef[4]),
    )


def predict_prefill(model: PrefillTimeModel, df: pd.DataFrame) -> NDArray:
    return model(df["n_tokens"].to_numpy(), df["n_requests"].to_numpy(), df["sum_sq"].to_numpy())


# ---------------------------------------------------------------- decode

def _decode_design(df: pd.DataFrame) -> NDArray:
    b = df["batch"].to_numpy()
    ell = df["kv_tokens"].to_numpy() / np.maximum(b, 1.0)
    return np.column_stack([np.ones_like(b), b, b * b, ell, ell * b, ell * b * b])


def _linear_constrained_lsq(x: NDArray, y: NDArray, lower: Sequence[float], g: NDArray) -> NDArray:
    """Relative least squares with bounds ``c >= lower`` and linear constraints ``g @ c >= 0`` (SLSQP)."""
    c0, _ = _weighted_lsq(x, y, lower, [np.inf] * x.shape[1])
    if np.all(g @ c0 >= 0):
        return c0
    scale = np.linalg.norm(x / y[:, None], axis=0)
    scale[scale == 0] = 1.0
    xs, gs = x / scale, g / scale
    gs = gs / np.linalg.norm(gs, axis=1, keepdims=True)
    xw = xs / y[:, None]
    start = c0 * scale
    res = minimize(lambda c: float(np.sum((xw @ c - 1.0) ** 2)), start,
                   jac=lambda c: 2.0 * xw.T @ (xw @ c - 1.0),
                   bounds=[(lo * s if np.isfinite(lo) else None, None) for lo, s in zip(lower, scale, strict=True)],
                   constraints=[{"type": "ineq", "fun": lambda c: gs @ c, "jac": lambda c: gs}],
                   method="SLSQP", options={"maxiter": 1000, "ftol": 1e-14})
    return res.x / scale


def fit_decode_time(df: pd.DataFrame) -> DecodeTimeModel:
    """Fit ``t_dec = a0 + a1 B + a2 B²`` with ``a_j = α_j + β_j K/B``.

    Bounds: α0, α1, β0, β1 >= 0; α2 and β2 may be negative so the fit can bend sublinearly, but
    only as far as the step time stays non-decreasing in B and in K/B over the table's batch range
    (linear constraints at B = 1 and B = max batch, enforced with SLSQP).
    """
    df = check_table(df, "decode")
    y = df["time_s"].to_numpy()
    inf = np.inf
    bmax = float(df["batch"].max())
    # c = [α0, α1, α2, β0, β1, β2]
    g = np.array([
        [0, 1, 2.0, 0, 0, 0], [0, 1, 2.0 * bmax, 0, 0, 0],          # d t / dB >= 0 at ell = 0
        [0, 0, 0, 0, 1, 2.0], [0, 0, 0, 0, 1, 2.0 * bmax],          # ... and its ell slope
        [0, 0, 0, 1, 1, 1.0], [0, 0, 0, 1, bmax, bmax * bmax],      # d t / d ell >= 0
    ])
    coef = _linear_constrained_lsq(_decode_design(df), y, [0, 0, -inf, 0, 0, -inf], g)
    return DecodeTimeModel(alpha=(float(coef[0]), float(coef[1]), float(coef[2])),
                           beta=(float(coef[3]), float(coef[4]), float(coef[5])))


def predict_decode(model: DecodeTimeModel, df: pd.DataFrame) -> NDArray:
    return model(df["batch"].to_numpy(), df["kv_tokens"].to_numpy())


# ---------------------------------------------------------------- energy

@dataclass(frozen=True)
class PrefillEnergyFit:
    """``E_pre = e0 + e_p N + e_a Σn²`` (J)."""

    e0: float
    e_p: float
    e_a: float

    def __call__(self, n_tokens: NDArray, sum_sq: NDArray) -> NDArray:
        return self.e0 + self.e_p * np.asarray(n_tokens, float) + self.e_a * np.asarray(sum_sq, float)


@dataclass(frozen=True)
class DecodeEnergyFit:
    """``E_dec = e0 + e_d B + e_k K`` (J)."""

    e0: float
    e_d: float
    e_k: float

    def __call__(self, batch: NDArray, kv_tokens: NDArray) -> NDArray:
        return self.e0 + self.e_d * np.asarray(batch, float) + self.e_k * np.asarray(kv_tokens, float)


def _energy_fit(x: NDArray, df: pd.DataFrame) -> NDArray:
    y = df["energy_j"].to_numpy()
    if "max_energy_j" in df.columns:
        return _capped_lsq(x, y, df["max_energy_j"].to_numpy(float))
    return _weighted_lsq(x, y, [0, 0, 0], [np.inf] * 3)[0]


def fit_prefill_energy(df: pd.DataFrame) -> PrefillEnergyFit:
    """Non-negative fit of the prefill step energy form."""
    df = check_table(df, "energy-prefill")
    x = np.column_stack([np.ones(len(df)), df["n_tokens"], df["sum_sq"]])
    c = _energy_fit(x, df)
    return PrefillEnergyFit(float(c[0]), float(c[1]), float(c[2]))


def fit_decode_energy(df: pd.DataFrame) -> DecodeEnergyFit:
    """Non-negative fit of the decode step energy form."""
    df = check_table(df, "energy-decode")
    x = np.column_stack([np.ones(len(df)), df["batch"], df["kv_tokens"]])
    c = _energy_fit(x, df)
    return DecodeEnergyFit(float(c[0]), float(c[1]), float(c[2]))


# ---------------------------------------------------------------- generic entry point

@dataclass(frozen=True)
class FitResult:
    """A fitted model with its held-out and training MAPE (%)."""

    kind: str
    model: PrefillTimeModel | DecodeTimeModel | PrefillEnergyFit | DecodeEnergyFit
    mape_holdout: float
    mape_train: float
    n_train: int
    n_test: int

    def coefficients(self) -> dict[str, float | list[float]]:
        from dataclasses import asdict

        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self.model).items()}


_FITTERS = {
    "prefill": (fit_prefill_time, lambda m, d: predict_prefill(m, d), "time_s"),
    "decode": (fit_decode_time, lambda m, d: predict_decode(m, d), "time_s"),
    "energy-prefill": (fit_prefill_energy, lambda m, d: m(d["n_tokens"], d["sum_sq"]), "energy_j"),
    "energy-decode": (fit_decode_energy, lambda m, d: m(d["batch"], d["kv_tokens"]), "energy_j"),
}


def fit_table(df: pd.DataFrame, kind: str, source: str = "table") -> FitResult:
    """Fit ``kind`` on the training rows of a deterministic split; report held-out MAPE (%)."""
    df = check_table(df, kind, source)
    fitter, predict, target = _FITTERS[kind]
    train, test = split_rows(len(df))
    model = fitter(df.iloc[train])
    y = df[target].to_numpy()
    m_train = mape(predict(model, df.iloc[train]), y[train])
    m_test = mape(predict(model, df.iloc[test]), y[test]) if len(test) else m_train
    return FitResult(kind, model, round(m_test, 3), round(m_train, 3), len(train), len(test))
