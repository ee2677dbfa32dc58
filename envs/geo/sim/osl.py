"""Output-length (OSL) estimates for the geo schedulers: predicted (MLP), oracle and mean.

The geo paper (§IV, §V-C) estimates each request's output sequence length at scheduling time with
"a two-layer MLP (128 hidden units, about 27K parameters) that takes the log ISL, the serving model,
and the dataset (i.e., the application type)" and "jointly classifies each request into one of six
OSL buckets and estimates its OSL quantiles"; the schedulers use the median quantile. This module
holds the numpy inference side of our version; training lives in ``servegym.calibration.osl``
(``servegym calibrate osl``) and the shipped weights in ``calibration/profiles/osl/`` (their
``PROVENANCE.md`` records data, split, hyperparameters, seed and held-out accuracy).

Vocabulary (each shipped trace is one application served by one model):

==============  =============  ===================================================================
application     model          what is known about the model
==============  =============  ===================================================================
``azure-code``  ``azure-llm``  Azure LLM inference services, Nov 2023 (Splitwise, ISCA'24): a
``azure-conv``  ``azure-llm``  production GPT-class model the trace does not name; both Azure
                               traces get the same (unknown) model
``mooncake``    ``kimi``       Moonshot AI's Kimi chatbot (Mooncake, FAST'25 conversation trace)
``arxiv``       ``llama-2``    not a served model: arXiv articles and their reference summaries,
                               token counts from the Llama-2 tokenizer (Vidur's processed trace,
                               filtered to prompt + summary <= 4,096 tokens)
==============  =============  ===================================================================

Because model and application coincide in the data, the model input carries no information beyond
the application here; it is kept so the interface matches the paper's and so a retrain on data with
several models per application needs no code change. Only (model, application) pairs seen in
training are accepted.

Buckets (tokens): ``[1, 32), [32, 64), [64, 128), [128, 256), [256, 512), [512, inf)`` — five
doubling edges (:data:`BUCKET_EDGES`). The paper gives no edges; doubling edges put the medians of
all four traces (13, 129, 350, 167 tokens) in different buckets and make "adjacent" mean "within a
factor of about two to four" at every scale.

Every estimator has ``predict_bucket``, ``predict_quantiles`` and ``predict_osl`` with the same
arguments ``(isl, model, app)``: ``isl`` an array of prompt lengths (tokens, >= 1), ``model`` and
``app`` one name each or one per request. All are vectorized over requests.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from servegym.errors import ConfigError, choice_error

#: Bucket edges in output tokens: bucket k holds ``EDGES[k-1] <= osl < EDGES[k]`` (6 buckets).
BUCKET_EDGES: tuple[int, ...] = (32, 64, 128, 256, 512)
N_BUCKETS = len(BUCKET_EDGES) + 1
#: Quantile levels of :meth:`OSLPredictor.predict_quantiles` columns.
QUANTILES: tuple[float, ...] = (0.1, 0.5, 0.9)
#: Applications (= shipped trace names) and the model that served each (see the module docstring).
TRACE_MODEL: dict[str, str] = {
    "azure-code": "azure-llm",
    "azure-conv": "azure-llm",
    "mooncake": "kimi",
    "arxiv": "llama-2",
}
APPS: tuple[str, ...] = tuple(TRACE_MODEL)
MODELS: tuple[str, ...] = tuple(dict.fromkeys(TRACE_MODEL.values()))
OSL_MODES = ("predicted", "oracle", "mean")
#: Quantile estimates are clipped to [1, MAX_OSL_TOKENS] tokens (a monotone map, so the order holds).
MAX_OSL_TOKENS = 10_000_000

#: Workload length spec -> OSL predictor application used in ``predicted`` mode.
OSL_APP_PROXY: dict[str, str] = {"cnn-dailymail": "arxiv", "openorca": "azure-conv"}
_DEFAULT_APP = "azure-conv"

WEIGHTS_PACKAGE = "servegym.calibration"
WEIGHTS_DIR = "profiles/osl"
WEIGHTS_STEM = "osl_mlp"
FORMAT = "servegym-osl-mlp/1"


def bucket_of(osl: ArrayLike) -> NDArray[np.int64]:
    """Bucket index (0..5) of output lengths in tokens (see :data:`BUCKET_EDGES`)."""
    return np.searchsorted(np.asarray(BUCKET_EDGES, dtype=np.float64), np.asarray(osl, dtype=np.float64),
                           side="right").astype(np.int64)


def check_isl(isl: ArrayLike) -> NDArray[np.float64]:
    """Prompt lengths as a 1-D float array; :class:`ConfigError` unless every entry is finite and >= 1 token."""
    try:
        a = np.asarray(isl, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"isl must be numbers of prompt tokens (>= 1); got {type(isl).__name__}") from exc
    bad = ~np.isfinite(a) | (a < 1)
    if bad.any():
        i = int(np.argmax(bad))
        raise ConfigError(f"isl[{i}] = {float(a[i])!r} is out of range; allowed: prompt tokens in [1, inf)")
    return a


def _names(field: str, value: str | Sequence[str] | NDArray[Any], n: int, allowed: Sequence[str]
           ) -> NDArray[np.int64]:
    """Index of each request's name in ``allowed`` (one name broadcasts to every request)."""
    if isinstance(value, str):
        if value not in allowed:
            raise choice_error(field, value, allowed)
        return np.full(n, allowed.index(value), dtype=np.int64)
    arr = np.asarray(value, dtype=object).reshape(-1)
    if arr.size != n:
        raise ConfigError(f"{field} must be one name or one per request ({n}); got {arr.size}")
    uniq, inv = np.unique(arr.astype(str), return_inverse=True)
    for u in uniq:
        if u not in allowed:
            raise choice_error(field, u, allowed)
    lut = np.array([allowed.index(u) for u in uniq], dtype=np.int64)
    return lut[inv.reshape(-1)] if n else np.zeros(0, dtype=np.int64)


def _relu(x: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.maximum(x, 0.0)


def softplus(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """log(1 + e^x), computed without overflow."""
    return np.logaddexp(0.0, x)


@dataclass(frozen=True)
class OSLPredictor:
    """The paper's OSL predictor: an MLP from (log ISL, model, app) to 6 bucket logits and 3 quantiles.

    Inputs: ``z = (clip(log isl) - log_isl_mean) / log_isl_std`` (clipped to the training range of
    log ISL, so the ReLU net never extrapolates), a one-hot model and a one-hot application. Two
    hidden ReLU layers of ``hidden`` units. Outputs: 6 bucket logits and ``(a, b, c)``, from which
    the quantiles of log OSL are ``q50 = a``, ``q10 = a - softplus(b)``, ``q90 = a + softplus(c)``
    (in units of the training log-OSL standard deviation around its mean) — monotone by construction.

    Attributes:
        weights: ``(W1, b1, W2, b2, W3, b3)`` with ``W`` of shape (inputs, outputs).
        apps, models: the one-hot vocabularies, in input order.
        pairs: (model, app) combinations seen in training; others are rejected.
        log_isl_mean, log_isl_std, log_isl_min, log_isl_max: ISL normalization (natural log of tokens).
        log_osl_mean, log_osl_std: OSL normalization of the quantile head (natural log of tokens).
        meta: the rest of the metadata (training settings, held-out metrics), as written.
    """

    weights: tuple[NDArray[np.float64], ...]
    apps: tuple[str, ...]
    models: tuple[str, ...]
    pairs: frozenset[tuple[str, str]]
    log_isl_mean: float
    log_isl_std: float
    log_isl_min: float
    log_isl_max: float
    log_osl_mean: float
    log_osl_std: float
    meta: Mapping[str, Any]

    def __post_init__(self) -> None:
        w = self.weights
        n_in = 1 + len(self.models) + len(self.apps)
        if len(w) != 6 or w[0].shape[0] != n_in or w[4].shape[1] != N_BUCKETS + 3:
            raise ConfigError(f"OSL weights do not fit {n_in} inputs -> {N_BUCKETS} buckets + 3 quantiles; "
                              f"got shapes {[a.shape for a in w]}")
        for i in range(0, 6, 2):
            if w[i].shape[1] != w[i + 1].shape[0] or (i < 4 and w[i].shape[1] != w[i + 2].shape[0]):
                raise ConfigError(f"OSL weight shapes do not chain: {[a.shape for a in w]}")

    # ---- loading -------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path | None = None) -> OSLPredictor:
        """The shipped predictor, or the one whose ``<stem>.json`` (with ``<stem>.npz`` beside it) is at ``path``."""
        if path is None:
            root = resources.files(WEIGHTS_PACKAGE).joinpath(WEIGHTS_DIR)
            meta_text = root.joinpath(f"{WEIGHTS_STEM}.json").read_text()
            with root.joinpath(f"{WEIGHTS_STEM}.npz").open("rb") as fh:
                arrays = dict(np.load(fh))
        else:
            p = Path(path)
            if p.suffix != ".json" or not p.is_file() or not p.with_suffix(".npz").is_file():
                raise ConfigError(f"OSL predictor path = {str(path)!r} must be an existing .json file with its "
                                  ".npz weights beside it")
            meta_text = p.read_text()
            with p.with_suffix(".npz").open("rb") as fh:
                arrays = dict(np.load(fh))
        return cls.from_parts(json.loads(meta_text), arrays)

    @classmethod
    def from_parts(cls, meta: Mapping[str, Any], arrays: Mapping[str, NDArray[np.float64]]) -> OSLPredictor:
        """Build from the metadata dict and the weight arrays ``W1, b1, W2, b2, W3, b3``."""
        if meta.get("format") != FORMAT:
            raise ConfigError(f"OSL metadata format = {meta.get('format')!r}; allowed: {FORMAT!r}")
        if tuple(meta["bucket_edges_tokens"]) != BUCKET_EDGES or tuple(meta["quantiles"]) != QUANTILES:
            raise ConfigError(f"OSL weights were trained for bucket edges {meta['bucket_edges_tokens']} and "
                              f"quantiles {meta['quantiles']}; this code uses {list(BUCKET_EDGES)}, {list(QUANTILES)}")
        names = ("W1", "b1", "W2", "b2", "W3", "b3")
        missing = [k for k in names if k not in arrays]
        if missing:
            raise ConfigError(f"OSL weights lack arrays {missing}")
        norm = meta["normalization"]
        return cls(
            weights=tuple(np.asarray(arrays[k], dtype=np.float64) for k in names),
            apps=tuple(meta["apps"]), models=tuple(meta["models"]),
            pairs=frozenset((str(m), str(a)) for m, a in meta["pairs"]),
            log_isl_mean=float(norm["log_isl_mean"]), log_isl_std=float(norm["log_isl_std"]),
            log_isl_min=float(norm["log_isl_min"]), log_isl_max=float(norm["log_isl_max"]),
            log_osl_mean=float(norm["log_osl_mean"]), log_osl_std=float(norm["log_osl_std"]),
            meta=meta,
        )

    @property
    def n_parameters(self) -> int:
        return int(sum(a.size for a in self.weights))

    # ---- inference -----------------------------------------------------------------------
    def _encode(self, isl: ArrayLike, model: str | Sequence[str], app: str | Sequence[str]
                ) -> tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]]:
        """Validated (isl, model index, app index) per request."""
        a = check_isl(isl)
        n = a.size
        mi = _names("model", model, n, self.models)
        ai = _names("app", app, n, self.apps)
        if isinstance(model, str) and isinstance(app, str):
            if (model, app) not in self.pairs:
                raise ConfigError(f"(model, app) = ({model!r}, {app!r}) was not in the training data; allowed: "
                                  f"{sorted(self.pairs)}")
        elif n:
            for c in np.unique(mi * len(self.apps) + ai):
                m, ap = self.models[int(c) // len(self.apps)], self.apps[int(c) % len(self.apps)]
                if (m, ap) not in self.pairs:
                    raise ConfigError(f"(model, app) = ({m!r}, {ap!r}) was not in the training data; allowed: "
                                      f"{sorted(self.pairs)}")
        return a, mi, ai

    def _z(self, isl: NDArray[np.float64]) -> NDArray[np.float64]:
        return (np.clip(np.log(isl), self.log_isl_min, self.log_isl_max) - self.log_isl_mean) / self.log_isl_std

    def features(self, isl: ArrayLike, model: str | Sequence[str], app: str | Sequence[str]) -> NDArray[np.float64]:
        """The (n, 1 + #models + #apps) input matrix; validates every argument."""
        a, mi, ai = self._encode(isl, model, app)
        n = a.size
        x = np.zeros((n, 1 + len(self.models) + len(self.apps)), dtype=np.float64)
        x[:, 0] = self._z(a)
        rows = np.arange(n)
        x[rows, 1 + mi] = 1.0
        x[rows, 1 + len(self.models) + ai] = 1.0
        return x

    def forward(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        """Raw outputs (n, 6 + 3) for a feature matrix: bucket logits, then (a, b, c)."""
        w1, b1, w2, b2, w3, b3 = self.weights
        return _relu(_relu(x @ w1 + b1) @ w2 + b2) @ w3 + b3

    def raw(self, isl: ArrayLike, model: str | Sequence[str], app: str | Sequence[str]) -> NDArray[np.float64]:
        """``forward(features(...))``, computed fast: once per distinct (ISL, model, app), and with the
        one-hot first layer as a per-group bias instead of a matmul (equal up to float rounding)."""
        a, mi, ai = self._encode(isl, model, app)
        w1, b1, w2, b2, w3, b3 = self.weights
        out = np.empty((a.size, w3.shape[1]), dtype=np.float64)
        if a.size == 0:
            return out
        g = mi * len(self.apps) + ai
        groups = g[:1] if isinstance(model, str) and isinstance(app, str) else np.unique(g)
        for k in groups:
            sel = slice(None) if groups.size == 1 else np.flatnonzero(g == k)
            # Real request streams repeat prompt lengths a lot (a trace has a few thousand distinct
            # ISLs), so the net runs once per distinct value and the rows are gathered back.
            if a.size > 64:
                u, inv = np.unique(a[sel], return_inverse=True)
            else:
                u, inv = a[sel], None
            bias = w1[1 + k // len(self.apps)] + w1[1 + len(self.models) + k % len(self.apps)] + b1
            h1 = _relu(np.multiply.outer(self._z(u), w1[0]) + bias)
            res = _relu(h1 @ w2 + b2) @ w3 + b3
            out[sel] = res if inv is None else res[inv.reshape(-1)]
        return out

    def _log_quantiles(self, raw: NDArray[np.float64]) -> NDArray[np.float64]:
        a, b, c = raw[:, N_BUCKETS], raw[:, N_BUCKETS + 1], raw[:, N_BUCKETS + 2]
        z = np.stack([a - softplus(b), a, a + softplus(c)], axis=1)
        return self.log_osl_mean + self.log_osl_std * z

    def predict_proba(self, isl: ArrayLike, model: str | Sequence[str], app: str | Sequence[str]
                      ) -> NDArray[np.float64]:
        """Bucket probabilities, shape (n, 6)."""
        logits = self.raw(isl, model, app)[:, :N_BUCKETS]
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    def predict_bucket(self, isl: ArrayLike, model: str | Sequence[str], app: str | Sequence[str]
                       ) -> NDArray[np.int64]:
        """Most likely bucket (0..5) per request."""
        raw = self.raw(isl, model, app)
        return np.argmax(raw[:, :N_BUCKETS], axis=1).astype(np.int64)

    def predict_quantiles(self, isl: ArrayLike, model: str | Sequence[str], app: str | Sequence[str]
                          ) -> NDArray[np.float64]:
        """OSL quantiles (tokens, in [1, :data:`MAX_OSL_TOKENS`]), shape (n, 3): columns p10 <= p50 <= p90."""
        raw = self.raw(isl, model, app)
        return np.exp(np.clip(self._log_quantiles(raw), 0.0, np.log(MAX_OSL_TOKENS)))

    def predict_osl(self, isl: ArrayLike, model: str | Sequence[str], app: str | Sequence[str]
                    ) -> NDArray[np.float64]:
        """The median estimate (tokens, >= 1): what the paper's schedulers use as the OSL."""
        return self.predict_quantiles(isl, model, app)[:, 1]

    def bind(self, model: str, app: str) -> Callable[[NDArray[np.int64]], NDArray[np.float64]]:
        """``isl -> predicted OSL`` for one (model, app), e.g. ``GeoSimulation(osl_predictor=...)``."""
        self._encode(np.ones(1), model, app)  # validate now rather than inside a run
        return functools.partial(self.predict_osl, model=model, app=app)


@dataclass(frozen=True)
class OracleOSL:
    """The true output lengths (the paper's oracle mode), behind the predictor's interface.

    ``output_tokens`` is the stream's true OSL, aligned with the ``isl`` passed to each call;
    ``model`` and ``app`` are accepted for interface parity and not used (any workload works).
    """

    output_tokens: NDArray[np.int64]

    def __post_init__(self) -> None:
        o = np.asarray(self.output_tokens).reshape(-1)
        if o.size and (not np.all(np.isfinite(o)) or o.min() < 1):
            raise ConfigError("output_tokens must all be >= 1 token")
        object.__setattr__(self, "output_tokens", o.astype(np.int64))

    def _true(self, isl: ArrayLike) -> NDArray[np.int64]:
        a = check_isl(isl)
        if a.size != self.output_tokens.size:
            raise ConfigError(f"isl has {a.size} requests but the oracle holds {self.output_tokens.size} output lengths")
        return self.output_tokens

    def predict_bucket(self, isl: ArrayLike, model: Any = None, app: Any = None) -> NDArray[np.int64]:
        return bucket_of(self._true(isl))

    def predict_quantiles(self, isl: ArrayLike, model: Any = None, app: Any = None) -> NDArray[np.float64]:
        """Every quantile is the true OSL (tokens), shape (n, 3)."""
        return np.repeat(self._true(isl).astype(np.float64)[:, None], len(QUANTILES), axis=1)

    def predict_osl(self, isl: ArrayLike, model: Any = None, app: Any = None) -> NDArray[np.float64]:
        return self._true(isl).astype(np.float64)


@dataclass(frozen=True)
class MeanOSL:
    """Per-application constant estimates: the mean OSL, and empirical p10/p50/p90 (tokens).

    ``table`` maps an application to ``(mean, p10, p50, p90)``. :meth:`load` gives the shipped
    table (training split of the shipped traces); :meth:`from_lengths` builds one for any workload.
    ``predict_bucket`` is the bucket of the mean, consistent with ``predict_osl``. ``model`` is
    accepted for interface parity and not used.
    """

    table: Mapping[str, tuple[float, float, float, float]]

    def __post_init__(self) -> None:
        for app, row in self.table.items():
            if len(row) != 4 or not all(np.isfinite(v) and v >= 1 for v in row) or not row[1] <= row[2] <= row[3]:
                raise ConfigError(f"MeanOSL table[{app!r}] = {row!r}; allowed: (mean, p10, p50, p90) tokens >= 1, "
                                  "p10 <= p50 <= p90")

    @classmethod
    def from_lengths(cls, lengths: Mapping[str, ArrayLike]) -> MeanOSL:
        """Table from each application's observed output lengths (tokens)."""
        table = {}
        for app, osl in lengths.items():
            o = np.asarray(osl, dtype=np.float64).reshape(-1)
            if o.size == 0:
                raise ConfigError(f"output lengths of app {app!r} are empty")
            p10, p50, p90 = np.percentile(o, [100 * q for q in QUANTILES])
            table[app] = (float(o.mean()), float(p10), float(p50), float(p90))
        return cls(table)

    @classmethod
    def load(cls, path: str | Path | None = None) -> MeanOSL:
        """The table stored with the shipped (or ``path``'s) MLP: statistics of its training split."""
        meta = OSLPredictor.load(path).meta
        return cls({a: tuple(float(v) for v in row) for a, row in meta["mean_table"].items()})  # type: ignore[misc]

    def _rows(self, isl: ArrayLike, app: str | Sequence[str]) -> NDArray[np.float64]:
        n = check_isl(isl).size
        apps = tuple(self.table)
        idx = _names("app", app, n, apps)
        return np.asarray([self.table[a] for a in apps], dtype=np.float64).reshape(len(apps), 4)[idx]

    def predict_bucket(self, isl: ArrayLike, model: Any, app: str | Sequence[str]) -> NDArray[np.int64]:
        return bucket_of(self._rows(isl, app)[:, 0])

    def predict_quantiles(self, isl: ArrayLike, model: Any, app: str | Sequence[str]) -> NDArray[np.float64]:
        return self._rows(isl, app)[:, 1:4].copy()

    def predict_osl(self, isl: ArrayLike, model: Any, app: str | Sequence[str]) -> NDArray[np.float64]:
        """The application's mean OSL (tokens)."""
        return self._rows(isl, app)[:, 0].copy()


def make_osl_estimator(mode: str, *, output_tokens: ArrayLike | None = None,
                       predictor_path: str | Path | None = None) -> OSLPredictor | OracleOSL | MeanOSL:
    """The estimator for ``osl_mode`` ``"predicted"`` (shipped MLP), ``"oracle"`` (needs the true
    ``output_tokens``) or ``"mean"`` (shipped per-application table)."""
    if mode == "predicted":
        return OSLPredictor.load(predictor_path)
    if mode == "oracle":
        if output_tokens is None:
            raise ConfigError("osl_mode = 'oracle' needs output_tokens (the true output lengths)")
        return OracleOSL(np.asarray(output_tokens))
    if mode == "mean":
        return MeanOSL.load(predictor_path)
    raise choice_error("osl_mode", mode, OSL_MODES)


def osl_app(lengths: str) -> str:
    """The OSL predictor application standing in for a workload length spec."""
    return lengths if lengths in APPS else OSL_APP_PROXY.get(lengths, _DEFAULT_APP)


def osl_predictor_for(config: Any) -> Callable[[Any], Any] | None:
    """The ``isl -> OSL`` callable ``GeoSimulation`` needs in ``predicted`` mode (None otherwise);
    ``config`` a :class:`~servegym.envs.geo.sim.config.GeoConfig`."""
    if config.osl_mode != "predicted":
        return None
    app = osl_app(config.lengths)
    return OSLPredictor.load().bind(TRACE_MODEL[app], app)
