"""Per-engine step-time and step-energy models of the geo paper (§III-B), as typed profiles.

A profile describes one inference setup (model, GPU, tensor-parallel degree) with the
paper's functional forms:

- prefill step time (s): ``t_pre = t_tok(N) + b0 + b1*B + b2*sum(n_i^2)`` where ``t_tok`` is
  piecewise linear in the step's total prefill tokens ``N`` with slope ``tok_slope_lo`` up to the
  saturation knee ``knee_tokens`` and ``tok_slope_hi`` beyond it;
- decode step time (s): ``t_dec = a0 + a1*B + a2*B^2`` with ``a_j = alpha_j + beta_j * K/B``
  (``K`` cached tokens over the batch, ``B`` requests);
- prefill step energy (J, all GPUs of the engine): ``E_pre = e0_pre + e_p*N + e_a*sum(n_i^2)``;
- decode step energy (J): ``E_dec = e0_dec + e_d*B + e_k*K``.

Profiles are JSON files under ``servegym/calibration/profiles/geo/`` written by
``servegym.calibration`` (see ``servegym calibrate geo``); every file records its sources and
its held-out fit error. All evaluation methods accept numpy arrays and broadcast.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from servegym.errors import ConfigError

PROFILE_PACKAGE = "servegym.calibration"
PROFILE_DIR = "profiles/geo"


@dataclass(frozen=True)
class PrefillTimeModel:
    """Prefill step time in seconds; token counts in tokens."""

    knee_tokens: float
    tok_slope_lo: float  # s/token below the knee
    tok_slope_hi: float  # s/token above the knee
    b0: float  # s, fixed per step
    b1: float  # s per request in the step
    b2: float  # s per token^2 (attention)

    def __call__(self, n_tokens: ArrayLike, n_requests: ArrayLike = 1, sum_sq: ArrayLike = 0.0) -> NDArray:
        n = np.asarray(n_tokens, dtype=float)
        t_tok = self.tok_slope_lo * np.minimum(n, self.knee_tokens) + self.tok_slope_hi * np.maximum(
            n - self.knee_tokens, 0.0
        )
        return t_tok + self.b0 + self.b1 * np.asarray(n_requests, dtype=float) + self.b2 * np.asarray(sum_sq, dtype=float)


@dataclass(frozen=True)
class DecodeTimeModel:
    """Decode step time in seconds: ``a0 + a1 B + a2 B^2`` with ``a_j = alpha_j + beta_j K/B``."""

    alpha: tuple[float, float, float]
    beta: tuple[float, float, float]

    def __call__(self, batch: ArrayLike, kv_tokens: ArrayLike) -> NDArray:
        b = np.asarray(batch, dtype=float)
        ell = np.asarray(kv_tokens, dtype=float) / np.maximum(b, 1.0)
        a0 = self.alpha[0] + self.beta[0] * ell
        a1 = self.alpha[1] + self.beta[1] * ell
        a2 = self.alpha[2] + self.beta[2] * ell
        return a0 + (a1 + a2 * b) * b


@dataclass(frozen=True)
class StepEnergyModel:
    """Step energy in joules over all GPUs of one engine (idle and host power are separate)."""

    e0_pre: float  # J per prefill step
    e_p: float  # J per prefill token
    e_a: float  # J per token^2
    e0_dec: float  # J per decode step
    e_d: float  # J per request in the decode batch
    e_k: float  # J per cached token read

    def prefill(self, n_tokens: ArrayLike, sum_sq: ArrayLike = 0.0) -> NDArray:
        return self.e0_pre + self.e_p * np.asarray(n_tokens, dtype=float) + self.e_a * np.asarray(sum_sq, dtype=float)

    def decode(self, batch: ArrayLike, kv_tokens: ArrayLike) -> NDArray:
        return self.e0_dec + self.e_d * np.asarray(batch, dtype=float) + self.e_k * np.asarray(kv_tokens, dtype=float)


@dataclass(frozen=True)
class EngineProfile:
    """One calibrated inference setup: limits, step models and where every number came from.

    Memory in bytes, power in W. ``kv_capacity_tokens`` is what fits in the memory left after
    the weights (and activation reserve) across the engine's ``tp`` GPUs.
    """

    name: str
    model: str
    gpu: str
    tp: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_bytes_per_token: int
    kv_capacity_tokens: int
    tdp_w: float
    idle_w_per_gpu: float
    prefill: PrefillTimeModel
    decode: DecodeTimeModel
    energy: StepEnergyModel
    sources: tuple[str, ...] = ()
    fit_mape: dict[str, float] = field(default_factory=dict)
    notes: str = ""

    def __post_init__(self) -> None:
        for name in ("tp", "max_num_seqs", "max_num_batched_tokens", "kv_bytes_per_token", "kv_capacity_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"profile {self.name!r}: {name} = {getattr(self, name)} must be >= 1")

    @property
    def idle_w(self) -> float:
        """Idle power of the whole engine (W): loaded, nothing in flight."""
        return self.idle_w_per_gpu * self.tp

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["sources"] = list(self.sources)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EngineProfile:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"unknown profile fields {sorted(unknown)}; allowed: {sorted(known)}")
        d = dict(d)
        try:
            d["prefill"] = PrefillTimeModel(**d["prefill"])
            dec = d["decode"]
            d["decode"] = DecodeTimeModel(alpha=tuple(dec["alpha"]), beta=tuple(dec["beta"]))
            d["energy"] = StepEnergyModel(**d["energy"])
            d["sources"] = tuple(d.get("sources", ()))
            return cls(**d)
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"profile {d.get('name', '?')!r} is malformed: {exc}") from exc

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> EngineProfile:
        return cls.from_dict(json.loads(Path(path).read_text()))


def available_profiles() -> list[str]:
    """Names of the shipped profiles (file stems under ``calibration/profiles/geo``)."""
    root = resources.files(PROFILE_PACKAGE).joinpath(PROFILE_DIR)
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


def load_profile(name_or_path: str | Path) -> EngineProfile:
    """Load a shipped profile by name (e.g. ``"llama3.1-8b_a100-40gb_tp1"``) or a JSON file by path."""
    p = Path(name_or_path)
    if p.suffix == ".json" and p.exists():
        return EngineProfile.load(p)
    res = resources.files(PROFILE_PACKAGE).joinpath(PROFILE_DIR, f"{name_or_path}.json")
    if not res.is_file():
        raise ConfigError(f"profile = {str(name_or_path)!r} is unknown; allowed: {available_profiles()} or a .json path")
    return EngineProfile.from_dict(json.loads(res.read_text()))
