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
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from servegym.errors import ConfigError, listing, near_miss

PROFILE_PACKAGE = "servegym.calibration"
PROFILE_DIR = "profiles/geo"
#: Keys of ``EngineProfile.calibrated_range``.
RANGE_KEYS = ("batch", "prefill_tokens", "context")


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
    # Calibrated ranges of the step models: "batch" (requests per decode step), "prefill_tokens" (tokens
    # per prefill step) and "context" (mean cached tokens per request in a decode step), each [low, high].
    # Empty: [1, max_num_seqs], [1, max_num_batched_tokens] and [1, kv_capacity_tokens].
    calibrated_range: dict[str, tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("tp", "max_num_seqs", "max_num_batched_tokens", "kv_bytes_per_token", "kv_capacity_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ConfigError(f"profile {self.name!r}: {name} = {v!r}; allowed: an integer >= 1")
        _finite(self.name, "tdp_w", self.tdp_w, 0.0, 5000.0, low_inclusive=False)
        _finite(self.name, "idle_w_per_gpu", self.idle_w_per_gpu, 0.0, float(self.tdp_w))
        pre = self.prefill
        for name in ("knee_tokens", "tok_slope_lo", "tok_slope_hi", "b0", "b1", "b2"):
            _finite(self.name, f"prefill.{name}", getattr(pre, name), 0.0, None)
        for name in ("alpha", "beta"):
            vals = getattr(self.decode, name)
            if len(vals) != 3:
                raise ConfigError(f"profile {self.name!r}: decode.{name} has {len(vals)} values; allowed: 3")
            for j, v in enumerate(vals):  # signs free: a fitted quadratic; positivity is checked on the range
                _finite(self.name, f"decode.{name}[{j}]", v, None, None)
        for name in ("e0_pre", "e_p", "e_a", "e0_dec", "e_d", "e_k"):
            _finite(self.name, f"energy.{name}", getattr(self.energy, name), 0.0, None)
        rng = dict(self.calibrated_range)
        unknown = set(rng) - set(RANGE_KEYS)
        if unknown:
            raise ConfigError(f"profile {self.name!r}: calibrated_range keys {sorted(unknown)}; allowed: {', '.join(map(str, RANGE_KEYS))}")
        for key, (lo, hi) in self.ranges.items():
            _finite(self.name, f"calibrated_range.{key}[0]", lo, 0.0, None, low_inclusive=False)
            _finite(self.name, f"calibrated_range.{key}[1]", hi, float(lo), None)
        self.check_step_models()

    @property
    def ranges(self) -> dict[str, tuple[float, float]]:
        """The calibrated ranges with defaults filled in (see ``calibrated_range``)."""
        out = {"batch": (1.0, float(self.max_num_seqs)), "prefill_tokens": (1.0, float(self.max_num_batched_tokens)),
               "context": (1.0, float(self.kv_capacity_tokens))}
        for key, (lo, hi) in self.calibrated_range.items():
            out[key] = (float(lo), float(hi))
        return out

    def check_step_models(self) -> None:
        """Raise :class:`ConfigError` if a step model gives a time <= 0, a negative energy or a power above
        TP x TDP anywhere inside the calibrated ranges (decode: every batch x 48 contexts, K within the KV
        pool; prefill: 200 token counts, single prompts)."""
        rng = self.ranges
        cap_w = self.tp * self.tdp_w * (1.0 + 1e-9)
        b_lo, b_hi = rng["batch"]
        b = np.unique(np.round(np.geomspace(b_lo, b_hi, 256))) if b_hi - b_lo > 256 else np.arange(
            np.ceil(b_lo), np.floor(b_hi) + 1)
        b = b[:, None].astype(float)
        ctx = np.geomspace(*rng["context"], 48)[None, :]
        k = np.minimum(b * ctx, float(self.kv_capacity_tokens))
        n = np.geomspace(*rng["prefill_tokens"], 200)
        for what, t, e, where in (
            ("decode", self.decode(b, k), self.energy.decode(b, k),
             lambda i: f"batch {b.ravel()[i[0]]:g}, context {ctx.ravel()[i[1]]:.0f} tokens"),
            ("prefill", self.prefill(n, 1, n * n), self.energy.prefill(n, n * n),
             lambda i: f"{n[i[0]]:.0f} prompt tokens"),
        ):
            t, e = np.broadcast_arrays(np.asarray(t, dtype=float), np.asarray(e, dtype=float))
            for bad, problem in ((~(t > 0), "step time <= 0 s"), (~(e >= 0), "step energy < 0 J"),
                                 (e > cap_w * t, f"step power above TP x TDP = {self.tp * self.tdp_w:g} W")):
                if bad.any():
                    i = np.unravel_index(int(np.argmax(bad)), bad.shape)
                    raise ConfigError(
                        f"profile {self.name!r}: the {what} model gives {problem} at {where(i)}, inside its "
                        f"calibrated range {rng}; allowed: time > 0, energy >= 0, power <= TP x TDP")

    def with_limits(self, *, max_num_seqs: int | None = None, kv_capacity_tokens: int | None = None,
                    extrapolate: bool = False) -> EngineProfile:
        """A copy with the batch cap and/or KV pool overridden.

        ``max_num_seqs`` outside the calibrated batch range is refused unless ``extrapolate=True``: the step
        models are then evaluated beyond their calibration, where a polynomial fit can turn negative or imply
        more than TP x TDP (those steps are floored and clamped, and counted by the engine), and every result
        must name the extrapolation.
        """
        changes: dict[str, Any] = {}
        if max_num_seqs is not None:
            lo, hi = self.ranges["batch"]
            if not extrapolate and not lo <= max_num_seqs <= hi:
                raise ConfigError(
                    f"max_num_seqs = {max_num_seqs} is outside profile {self.name!r}'s calibrated batch range "
                    f"[{lo:g}, {hi:g}]; allowed: [{lo:g}, {hi:g}], or extrapolate=True (named in every result)")
            changes["max_num_seqs"] = max_num_seqs
        if kv_capacity_tokens is not None:
            changes["kv_capacity_tokens"] = kv_capacity_tokens
        return replace(self, **changes) if changes else self

    @property
    def idle_w(self) -> float:
        """Idle power of the whole engine (W): loaded, nothing in flight."""
        return self.idle_w_per_gpu * self.tp

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["sources"] = list(self.sources)
        d["calibrated_range"] = {k: list(v) for k, v in self.calibrated_range.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EngineProfile:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"unknown profile fields {sorted(unknown)}; allowed: {', '.join(map(str, sorted(known)))}")
        d = dict(d)
        try:
            d["prefill"] = PrefillTimeModel(**d["prefill"])
            dec = d["decode"]
            d["decode"] = DecodeTimeModel(alpha=tuple(dec["alpha"]), beta=tuple(dec["beta"]))
            d["energy"] = StepEnergyModel(**d["energy"])
            d["sources"] = tuple(d.get("sources", ()))
            d["calibrated_range"] = {k: (v[0], v[1]) for k, v in dict(d.get("calibrated_range", {})).items()}
            return cls(**d)
        except (KeyError, TypeError, IndexError, ValueError) as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(f"profile {d.get('name', '?')!r} is malformed: {exc}") from exc

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> EngineProfile:
        """A profile from a JSON file (malformed JSON is a :class:`ConfigError` naming the file and line)."""
        p = Path(path)
        if p.stat().st_size > 16 * 2**20:
            raise ConfigError(f"profile {str(p)!r} is {p.stat().st_size:,} bytes; allowed: <= 16 MiB")
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"profile {str(p)!r} is not JSON: {exc.msg} at line {exc.lineno}") from None
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise ConfigError(f"profile {str(p)!r} is not JSON ({type(exc).__name__})") from None
        if not isinstance(d, dict):
            raise ConfigError(f"profile {str(p)!r}: expected a JSON object of profile fields")
        return cls.from_dict(d)


def _finite(profile: str, name: str, value: Any, low: float | None, high: float | None, *,
            low_inclusive: bool = True) -> None:
    """A profile field must be a finite real number within [low, high] (bounds optional)."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    if ok:
        v = float(value)
        ok = np.isfinite(v) and (low is None or (v > low if not low_inclusive else v >= low)) and (
            high is None or v <= high)
    if not ok:
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        raise ConfigError(f"profile {profile!r}: {name} = {value!r}; allowed: a finite number in "
                          f"{'[' if low_inclusive and low is not None else '('}{lo}, {hi}{']' if high is not None else ')'}")


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
        raise ConfigError(f"profile = {str(name_or_path)!r} is unknown{near_miss(name_or_path, available_profiles())}; "
                          f"allowed: {listing(available_profiles())} or a .json path")
    return EngineProfile.from_dict(json.loads(res.read_text()))
