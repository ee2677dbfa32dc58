"""Moments of the joint input/output length distribution L that the PD capacity model needs.

The model (paper §3-4) uses E[l_in^k] for k = 1..4 (prefill capacity, reservations, the prefill
service-time CV), E[l_out], Var(l_out), Cov(l_in, l_out) and E[l_out - 1] (decode). Moments come from
samples (a trace or draws), from a weighted discrete joint distribution, or in closed form from a
(bivariate) lognormal. Lengths are in tokens.

Trace-derived workloads follow App. B.4: Mooncake keeps inputs <= 38,000 tokens, Azure <= 32,768.
The paper's Mooncake runs drew input and output lengths independently, so ``mooncake`` uses
independent moments (Cov = 0); Azure keeps the (l_in, l_out) pairs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from servegym.envs.pd import WORKLOAD_SPECS

from servegym.errors import ConfigError, choice_error

#: App. B.4 input-length filters (tokens) per trace workload.
TRACE_MAX_INPUT_TOKENS: dict[str, int] = {"azure-conv": 32_768, "azure-code": 32_768, "mooncake": 38_000}
#: Workloads whose input and output lengths are combined independently (App. B.4, Mooncake).
INDEPENDENT_TRACES = frozenset({"mooncake"})


@dataclass(frozen=True)
class WorkloadMoments:
    """Moments of (l_in, l_out) over requests; all lengths in tokens (l_in >= 1, l_out >= 1)."""

    in_m1: float  # E[l_in]
    in_m2: float  # E[l_in^2]
    in_m3: float  # E[l_in^3]
    in_m4: float  # E[l_in^4]
    out_mean: float  # E[l_out]
    out_var: float  # Var(l_out)
    cov_in_out: float  # Cov(l_in, l_out)
    name: str = "custom"

    def __post_init__(self) -> None:
        if not self.in_m1 >= 1.0:
            raise ConfigError(f"workload {self.name}: mean input length = {self.in_m1!r}; allowed: >= 1 token")
        if not self.out_mean > 1.0:
            raise ConfigError(
                f"workload {self.name}: mean output length = {self.out_mean!r}; allowed: > 1 token "
                "(decode needs at least one token after the first)")
        if self.in_m2 < self.in_m1**2 * (1 - 1e-12) or self.out_var < -1e-9 * self.out_mean**2:
            raise ConfigError(f"workload {self.name}: inconsistent moments (negative variance)")

    # --- derived quantities -------------------------------------------------------------------
    @property
    def decode_tokens(self) -> float:
        """E[l_out - 1]: tokens a request receives in decode (prefill produces the first)."""
        return self.out_mean - 1.0

    @property
    def in_var(self) -> float:
        return max(self.in_m2 - self.in_m1**2, 0.0)

    def mean_active_context(self) -> float:
        """Mean context over active request-iteration pairs, Lemma 4.1 / eq. (17), tokens.

        l_ctx = E[l_in] + E[l_out]/2 + (Var(l_out)/2 + Cov(l_in, l_out)) / E[l_out - 1].
        """
        return self.in_m1 + self.out_mean / 2.0 + (0.5 * self.out_var + self.cov_in_out) / self.decode_tokens

    # --- constructors ------------------------------------------------------------------------
    @classmethod
    def fixed(cls, input_tokens: float, output_tokens: float) -> WorkloadMoments:
        """Every request has the same lengths (the calibration workloads of App. B.3)."""
        i = float(input_tokens)
        return cls(i, i**2, i**3, i**4, float(output_tokens), 0.0, 0.0,
                   name=f"fixed:{input_tokens:g}:{output_tokens:g}")

    @classmethod
    def from_distribution(cls, input_tokens: ArrayLike, output_tokens: ArrayLike, weights: ArrayLike | None = None,
                          *, independent: bool = False, name: str = "custom") -> WorkloadMoments:
        """Moments of a discrete joint distribution with support pairs (l_in, l_out) and weights.

        ``independent=True`` treats l_in and l_out as independent (Cov = 0) with the same marginals.
        """
        x = np.asarray(input_tokens, dtype=float).ravel()
        y = np.asarray(output_tokens, dtype=float).ravel()
        if x.size == 0 or x.size != y.size:
            raise ConfigError(f"workload {name}: need equally long, non-empty input/output length arrays "
                              f"(got {x.size} and {y.size})")
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))) or x.min() < 1 or y.min() < 1:
            raise ConfigError(f"workload {name}: lengths must be finite and >= 1 token")
        w = np.ones_like(x) if weights is None else np.asarray(weights, dtype=float).ravel()
        if w.size != x.size or not np.all(np.isfinite(w)) or w.min() < 0 or w.sum() <= 0:
            raise ConfigError(f"workload {name}: weights must be finite, >= 0, not all zero, one per pair")
        w = w / w.sum()
        # Scale inputs before the 4th power so large traces stay well inside float range and precision.
        s = max(float(np.max(x)), 1.0)
        xs = x / s
        m = [float(np.dot(w, xs**k)) * s**k for k in (1, 2, 3, 4)]
        out_mean = float(np.dot(w, y))
        out_var = float(np.dot(w, (y - out_mean) ** 2))
        cov = 0.0 if independent else float(np.dot(w, (x - m[0]) * (y - out_mean)))
        return cls(m[0], m[1], m[2], m[3], out_mean, out_var, cov, name=name)

    @classmethod
    def from_samples(cls, input_tokens: ArrayLike, output_tokens: ArrayLike, *, independent: bool = False,
                     max_input_tokens: int | None = None, name: str = "samples") -> WorkloadMoments:
        """Sample moments of paired lengths, optionally dropping inputs above ``max_input_tokens`` first."""
        x = np.asarray(input_tokens, dtype=float).ravel()
        y = np.asarray(output_tokens, dtype=float).ravel()
        if x.size != y.size:
            raise ConfigError(f"workload {name}: {x.size} input lengths but {y.size} output lengths")
        if max_input_tokens is not None:
            keep = x <= max_input_tokens
            x, y = x[keep], y[keep]
        return cls.from_distribution(x, y, independent=independent, name=name)

    @classmethod
    def lognormal(cls, in_mean: float, in_cv: float, out_mean: float, out_cv: float, corr_log: float = 0.0,
                  *, name: str = "lognormal") -> WorkloadMoments:
        """Closed-form moments of a bivariate lognormal with the given means/CVs and log-space correlation.

        E[X^k] = exp(k mu + k^2 s^2 / 2); E[XY] = exp(mu_x + mu_y + (s_x^2 + s_y^2 + 2 r s_x s_y) / 2).
        Continuous lengths: a model of the distribution, not of integer token counts.
        """
        for field_name, v in (("in_mean", in_mean), ("out_mean", out_mean)):
            if not v > 1:
                raise ConfigError(f"lognormal {field_name} = {v!r}; allowed: > 1 token")
        for field_name, v in (("in_cv", in_cv), ("out_cv", out_cv)):
            if not v >= 0:
                raise ConfigError(f"lognormal {field_name} = {v!r}; allowed: >= 0")
        if not -1 <= corr_log <= 1:
            raise ConfigError(f"lognormal corr_log = {corr_log!r}; allowed: [-1, 1]")
        sx2, sy2 = np.log1p(in_cv**2), np.log1p(out_cv**2)
        mx, my = np.log(in_mean) - sx2 / 2, np.log(out_mean) - sy2 / 2
        m = [float(np.exp(k * mx + k * k * sx2 / 2)) for k in (1, 2, 3, 4)]
        exy = float(np.exp(mx + my + (sx2 + sy2 + 2 * corr_log * np.sqrt(sx2 * sy2)) / 2))
        return cls(m[0], m[1], m[2], m[3], float(out_mean), float((out_cv * out_mean) ** 2),
                   exy - in_mean * out_mean, name=name)


_FIXED = re.compile(r"^fixed:(\d+):(\d+)$")


def trace_lengths(name: str) -> tuple[np.ndarray, np.ndarray]:
    """(input, output) token arrays of a named trace, with the App. B.4 input filter applied.

    Read through ``servegym.envs.traces.load_trace`` (the project's trace layer).
    """
    if name not in TRACE_MAX_INPUT_TOKENS:
        raise choice_error("trace", name, TRACE_MAX_INPUT_TOKENS)
    limit = TRACE_MAX_INPUT_TOKENS[name]
    try:
        from servegym.envs.traces import load_trace
    except ImportError as exc:  # the trace layer is another module; say so plainly
        raise ConfigError(f"workload {name!r} needs servegym.envs.traces, which is not available ({exc})") from exc
    reqs = load_trace(name, max_input_tokens=limit)
    x = np.asarray(reqs.input_tokens, dtype=np.int64)
    y = np.asarray(reqs.output_tokens, dtype=np.int64)
    keep = x <= limit  # idempotent if the loader already filtered
    return x[keep], y[keep]


def parse_workload(spec: str) -> WorkloadMoments:
    """Moments for a workload spec: ``fixed:IN:OUT``, ``azure-conv``, ``azure-code`` or ``mooncake``."""
    spec = spec.strip()
    m = _FIXED.match(spec)
    if m:
        i, o = int(m.group(1)), int(m.group(2))
        if i < 1 or o < 2:
            raise ConfigError(f"workload {spec!r}: IN >= 1 and OUT >= 2 tokens required")
        return WorkloadMoments.fixed(i, o)
    if spec in TRACE_MAX_INPUT_TOKENS:
        x, y = trace_lengths(spec)
        return WorkloadMoments.from_samples(np.maximum(x, 1), np.maximum(y, 1),
                                            independent=spec in INDEPENDENT_TRACES, name=spec)
    raise ConfigError(f"workload {spec!r} is not recognised; allowed: {WORKLOAD_SPECS}")
