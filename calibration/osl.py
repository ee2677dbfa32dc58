"""Train the geo paper's OSL predictor (``servegym.envs.geo.sim.osl``) in pure numpy and ship it.

    servegym calibrate osl [--seed S] [--epochs N] [--max-rows-per-app N] [--out DIR | --overwrite-shipped | --no-save]
        [--json]

Data: every request of the shipped traces ``azure-code``, ``azure-conv``, ``mooncake`` (all
12,031 rows, no input filter) and ``arxiv`` (``servegym.envs.traces.load_lengths``), each one
application served by one model (``servegym.envs.geo.sim.osl.TRACE_MODEL``). Split: per application, a
permutation from ``numpy.random.default_rng([seed, app_index])`` puts the first
``ceil(test_fraction * n)`` rows in the held-out set. Network: inputs (standardized log ISL, one-hot
model, one-hot app) -> 128 ReLU -> 128 ReLU -> 6 bucket logits + 3 quantile parameters. Loss:
softmax cross-entropy on the bucket + ``quantile_weight`` x pinball loss of the p10/p50/p90 of
standardized log OSL. Optimizer: Adam on shuffled minibatches, cosine-decayed learning rate, float64
throughout; every random draw comes from the seed, so a rerun in the same environment gives the same
weights bit for bit.

Output (``./servegym-results/calibration/osl/`` by default; the shipped copy in ``calibration/profiles/osl/``
is replaced only with ``--overwrite-shipped``): ``osl_mlp.npz`` (weights, written with fixed zip timestamps
so a rerun is byte-identical), ``osl_mlp.json`` (vocabulary, normalization, settings, held-out
metrics, the per-application mean table of :class:`~servegym.envs.geo.sim.osl.MeanOSL`, the sha256 of the
npz) and ``PROVENANCE.md`` (generated, with the accuracy table).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import itertools
import json
import math
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from servegym.envs.geo.sim.osl import (
    APPS,
    BUCKET_EDGES,
    FORMAT,
    N_BUCKETS,
    QUANTILES,
    TRACE_MODEL,
    WEIGHTS_STEM,
    OSLPredictor,
    bucket_of,
    softplus,
)

from servegym.errors import ConfigError, check_range

#: The paper's held-out bucket accuracy (geo-carbon-slo-serving.md §V-C): exact / exact-or-adjacent.
PAPER_ACCURACY = {
    "Llama-3.1-8B on CNN-DailyMail": {"exact": 0.51, "adjacent": 0.99},
    "Mixtral-8x7B on OpenOrca (MLPerf mix)": {"exact": 0.37, "adjacent": 0.70},
}


@dataclass(frozen=True)
class TrainConfig:
    """Training settings.

    Fields:
        seed: seeds the split, the initialization and the minibatch order.
        test_fraction: held-out share of each application's requests, in (0, 1).
        hidden: units of each of the two hidden layers.
        epochs: passes over the training split.
        batch_size: requests per Adam step.
        lr: peak Adam learning rate (cosine-decayed to 0 over the run).
        quantile_weight: weight of the pinball loss (standardized log OSL) against the cross-entropy (nats).
        max_rows_per_app: use only this many requests per application (a seeded subset; ``None`` = all).
    """

    seed: int = 0
    test_fraction: float = 0.2
    hidden: int = 128
    epochs: int = 30
    batch_size: int = 256
    lr: float = 2e-3
    quantile_weight: float = 1.0
    max_rows_per_app: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed = {self.seed!r} is out of range; allowed: an integer >= 0")
        check_range("test_fraction", self.test_fraction, 0.0, 1.0, low_inclusive=False, high_inclusive=False)
        for name, lo in (("hidden", 1), ("epochs", 1), ("batch_size", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or v < lo:
                raise ConfigError(f"{name} = {v!r} is out of range; allowed: an integer >= {lo}")
        check_range("lr", self.lr, 0.0, 1.0, low_inclusive=False)
        check_range("quantile_weight", self.quantile_weight, 0.0, 100.0)
        if self.max_rows_per_app is not None and (not isinstance(self.max_rows_per_app, int)
                                                  or self.max_rows_per_app < 10):
            raise ConfigError(f"max_rows_per_app = {self.max_rows_per_app!r} is out of range; allowed: an integer "
                              ">= 10 or None")


@dataclass(frozen=True)
class Dataset:
    """Requests of every application: prompt and output tokens, app and model names per row."""

    isl: NDArray[np.int64]
    osl: NDArray[np.int64]
    app: NDArray[np.str_]
    model: NDArray[np.str_]
    test: NDArray[np.bool_]

    def part(self, test: bool) -> Dataset:
        m = self.test if test else ~self.test
        return Dataset(self.isl[m], self.osl[m], self.app[m], self.model[m], self.test[m])


def load_dataset(cfg: TrainConfig) -> Dataset:
    """The traces' requests with the seeded per-application train/test split (see the module docstring)."""
    from servegym.envs.traces import load_lengths

    isl, osl, app, test = [], [], [], []
    for k, name in enumerate(APPS):
        i, o = load_lengths(name)
        rng = np.random.default_rng([cfg.seed, k])
        if cfg.max_rows_per_app is not None and i.size > cfg.max_rows_per_app:
            keep = np.sort(rng.permutation(i.size)[: cfg.max_rows_per_app])
            i, o = i[keep], o[keep]
        n = i.size
        t = np.zeros(n, dtype=bool)
        t[rng.permutation(n)[: math.ceil(cfg.test_fraction * n)]] = True
        isl.append(np.asarray(i, dtype=np.int64))
        osl.append(np.asarray(o, dtype=np.int64))
        app.append(np.full(n, name))
        test.append(t)
    apps = np.concatenate(app)
    models = np.array([TRACE_MODEL[a] for a in APPS])[np.concatenate(
        [np.full(len(a), k) for k, a in enumerate(app)])]
    return Dataset(np.concatenate(isl), np.concatenate(osl), apps, models, np.concatenate(test))


def _metadata(train: Dataset, cfg: TrainConfig) -> dict[str, Any]:
    """Vocabulary and normalization from the training split only."""
    from servegym.envs.geo.sim.osl import MODELS

    li, lo = np.log(train.isl.astype(np.float64)), np.log(train.osl.astype(np.float64))
    pairs = sorted({(str(m), str(a)) for m, a in zip(train.model, train.app, strict=True)})
    mean_table = {}
    for a in APPS:
        o = train.osl[train.app == a].astype(np.float64)
        p10, p50, p90 = np.percentile(o, [100 * q for q in QUANTILES])
        mean_table[a] = [float(o.mean()), float(p10), float(p50), float(p90)]
    return {
        "format": FORMAT,
        "apps": list(APPS), "models": list(MODELS), "pairs": [list(p) for p in pairs],
        "trace_model": dict(TRACE_MODEL),
        "bucket_edges_tokens": list(BUCKET_EDGES), "quantiles": list(QUANTILES),
        "normalization": {
            "log_isl_mean": float(li.mean()), "log_isl_std": float(li.std()),
            "log_isl_min": float(li.min()), "log_isl_max": float(li.max()),
            "log_osl_mean": float(lo.mean()), "log_osl_std": float(lo.std()),
        },
        "training": asdict(cfg),
        "mean_table": mean_table,
    }


def _init(n_in: int, hidden: int, rng: np.random.Generator) -> list[NDArray[np.float64]]:
    # He-normal for the ReLU layers; the head starts small so the first quantiles sit near the mean.
    w1 = rng.standard_normal((n_in, hidden)) * math.sqrt(2.0 / n_in)
    w2 = rng.standard_normal((hidden, hidden)) * math.sqrt(2.0 / hidden)
    w3 = rng.standard_normal((hidden, N_BUCKETS + 3)) * math.sqrt(1.0 / hidden) * 0.1
    return [w1, np.zeros(hidden), w2, np.zeros(hidden), w3, np.zeros(N_BUCKETS + 3)]


def _loss_and_grads(params: list[NDArray[np.float64]], x: NDArray[np.float64], yb: NDArray[np.int64],
                    yq: NDArray[np.float64], qw: float) -> tuple[float, list[NDArray[np.float64]]]:
    """Mean cross-entropy + qw * mean pinball loss (summed over the 3 quantiles), and its gradients."""
    w1, b1, w2, b2, w3, b3 = params
    n = x.shape[0]
    h1p = x @ w1 + b1
    h1 = np.maximum(h1p, 0.0)
    h2p = h1 @ w2 + b2
    h2 = np.maximum(h2p, 0.0)
    out = h2 @ w3 + b3
    logits = out[:, :N_BUCKETS]
    logits = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(logits)
    p = e / e.sum(axis=1, keepdims=True)
    rows = np.arange(n)
    ce = -float(np.mean(np.log(p[rows, yb] + 1e-300)))
    a, b, c = out[:, N_BUCKETS], out[:, N_BUCKETS + 1], out[:, N_BUCKETS + 2]
    q = np.stack([a - softplus(b), a, a + softplus(c)], axis=1)
    tau = np.asarray(QUANTILES)
    r = yq[:, None] - q
    pin = float(np.mean(np.sum(np.maximum(tau * r, (tau - 1.0) * r), axis=1)))
    dq = np.where(r > 0, -tau, 1.0 - tau) * (qw / n)
    dout = np.empty_like(out)
    dout[:, :N_BUCKETS] = p
    dout[rows, yb] -= 1.0
    dout[:, :N_BUCKETS] /= n
    dout[:, N_BUCKETS] = dq.sum(axis=1)
    dout[:, N_BUCKETS + 1] = -dq[:, 0] / (1.0 + np.exp(-b))  # d softplus(b)/db = sigmoid(b)
    dout[:, N_BUCKETS + 2] = dq[:, 2] / (1.0 + np.exp(-c))
    gw3, gb3 = h2.T @ dout, dout.sum(axis=0)
    dh2 = (dout @ w3.T) * (h2p > 0)
    gw2, gb2 = h1.T @ dh2, dh2.sum(axis=0)
    dh1 = (dh2 @ w2.T) * (h1p > 0)
    gw1, gb1 = x.T @ dh1, dh1.sum(axis=0)
    return ce + qw * pin, [gw1, gb1, gw2, gb2, gw3, gb3]


def train(data: Dataset, cfg: TrainConfig, progress: Callable[[int, float], None] | None = None) -> OSLPredictor:
    """Fit the MLP on ``data``'s training split; ``progress(epoch, mean_loss)`` after each epoch."""
    tr = data.part(test=False)
    meta = _metadata(tr, cfg)
    shell = OSLPredictor.from_parts(meta, dict(zip(("W1", "b1", "W2", "b2", "W3", "b3"),
                                                   _init(1 + len(meta["models"]) + len(APPS), cfg.hidden,
                                                         np.random.default_rng(0)), strict=True)))
    x = shell.features(tr.isl, tr.model, tr.app)
    yb = bucket_of(tr.osl)
    norm = meta["normalization"]
    yq = (np.log(tr.osl.astype(np.float64)) - norm["log_osl_mean"]) / norm["log_osl_std"]
    rng = np.random.default_rng([cfg.seed, 1_000_003])  # a stream apart from the split's
    params = _init(x.shape[1], cfg.hidden, rng)
    m1 = [np.zeros_like(p) for p in params]
    m2 = [np.zeros_like(p) for p in params]
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    n = x.shape[0]
    steps_per_epoch = math.ceil(n / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    t = 0
    for epoch in range(cfg.epochs):
        order = rng.permutation(n)
        losses = []
        for s in range(steps_per_epoch):
            idx = order[s * cfg.batch_size:(s + 1) * cfg.batch_size]
            loss, grads = _loss_and_grads(params, x[idx], yb[idx], yq[idx], cfg.quantile_weight)
            losses.append(loss)
            t += 1
            lr = cfg.lr * 0.5 * (1.0 + math.cos(math.pi * (t - 1) / total))
            for p, g, a1, a2 in zip(params, grads, m1, m2, strict=True):
                a1 *= beta1
                a1 += (1.0 - beta1) * g
                a2 *= beta2
                a2 += (1.0 - beta2) * g * g
                p -= lr * (a1 / (1.0 - beta1 ** t)) / (np.sqrt(a2 / (1.0 - beta2 ** t)) + eps)
        if progress is not None:
            progress(epoch, float(np.mean(losses)))
    return OSLPredictor.from_parts(meta, dict(zip(("W1", "b1", "W2", "b2", "W3", "b3"), params, strict=True)))


def _scores(pred_bucket: NDArray[np.int64], true_bucket: NDArray[np.int64]) -> dict[str, float]:
    d = np.abs(pred_bucket - true_bucket)
    return {"exact": float(np.mean(d == 0)), "adjacent": float(np.mean(d <= 1))}


def evaluate(pred: OSLPredictor, data: Dataset) -> dict[str, dict[str, Any]]:
    """Held-out metrics per application and over all held-out requests (pooled).

    Per group: ``n``; ``exact`` / ``adjacent`` bucket accuracy (fractions); ``coverage_p10_p90``
    (share with p10 <= OSL <= p90; 0.8 if calibrated); ``below_p50`` (share with OSL < p50; 0.5 if
    calibrated); ``p50_median_abs_log2`` (median |log2(p50 / OSL)|, in doublings); baselines on the
    same rows: ``majority`` (each app's most frequent training bucket) and ``mean`` (the bucket of
    each app's training mean OSL).
    """
    te = data.part(test=True)
    tr = data.part(test=False)
    tb = bucket_of(te.osl)
    pb = pred.predict_bucket(te.isl, te.model, te.app)
    q = pred.predict_quantiles(te.isl, te.model, te.app)
    maj = np.zeros_like(tb)
    mean_b = np.zeros_like(tb)
    for a in APPS:
        sel = te.app == a
        maj[sel] = np.bincount(bucket_of(tr.osl[tr.app == a]), minlength=N_BUCKETS).argmax()
        mean_b[sel] = bucket_of(tr.osl[tr.app == a].mean())
    out: dict[str, dict[str, Any]] = {}
    for name in (*APPS, "overall"):
        sel = np.ones(te.isl.size, dtype=bool) if name == "overall" else te.app == name
        o = te.osl[sel].astype(np.float64)
        out[name] = {
            "n": int(sel.sum()),
            **_scores(pb[sel], tb[sel]),
            "coverage_p10_p90": float(np.mean((q[sel, 0] <= o) & (o <= q[sel, 2]))),
            "below_p50": float(np.mean(o < q[sel, 1])),
            "p50_median_abs_log2": float(np.median(np.abs(np.log2(q[sel, 1] / o)))),
            "majority": _scores(maj[sel], tb[sel]),
            "mean": _scores(mean_b[sel], tb[sel]),
        }
    return out


def _npz_bytes(pred: OSLPredictor) -> bytes:
    """The weights as an .npz whose bytes depend only on the arrays (fixed zip timestamps)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, arr in zip(("W1", "b1", "W2", "b2", "W3", "b3"), pred.weights, strict=True):
            a = io.BytesIO()
            np.lib.format.write_array(a, np.ascontiguousarray(arr, dtype=np.float64), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, a.getvalue())
    return buf.getvalue()


def _round(obj: Any, nd: int = 4) -> Any:
    if isinstance(obj, float):
        return round(obj, nd)
    if isinstance(obj, dict):
        return {k: _round(v, nd) for k, v in obj.items()}
    return obj


def default_out_dir() -> Path:
    return Path(__file__).resolve().parent / "profiles" / "osl"


def calibrate(cfg: TrainConfig, out: Path | None = None,
              progress: Callable[[int, float], None] | None = None) -> dict[str, Any]:
    """Load, split, train, evaluate; write the three files to ``out`` unless it is ``None``. Returns the report."""
    data = load_dataset(cfg)
    pred = train(data, cfg, progress)
    metrics = _round(evaluate(pred, data))
    report: dict[str, Any] = {
        "n_parameters": pred.n_parameters,
        "n_train": int((~data.test).sum()), "n_test": int(data.test.sum()),
        "metrics_test": metrics, "paper": PAPER_ACCURACY, "training": asdict(cfg),
    }
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        blob = _npz_bytes(pred)
        meta = dict(pred.meta)
        meta.update(n_parameters=pred.n_parameters, n_train=report["n_train"], n_test=report["n_test"],
                    metrics_test=metrics, weights_file=f"{WEIGHTS_STEM}.npz",
                    weights_sha256=hashlib.sha256(blob).hexdigest())
        (out / f"{WEIGHTS_STEM}.npz").write_bytes(blob)
        (out / f"{WEIGHTS_STEM}.json").write_text(json.dumps(meta, indent=1) + "\n")
        (out / "PROVENANCE.md").write_text(provenance_markdown(meta))
        report["files"] = [str(out / f) for f in (f"{WEIGHTS_STEM}.npz", f"{WEIGHTS_STEM}.json", "PROVENANCE.md")]
    return report


def accuracy_table(metrics: dict[str, dict[str, Any]]) -> str:
    """Markdown table of held-out accuracy per application (percent)."""
    lines = ["| application (model) | held-out n | exact | exact-or-adjacent | majority-bucket exact / adj. "
             "| p10-p90 coverage | median abs log2(p50/OSL) |",
             "|---|---|---|---|---|---|---|"]
    for name, m in metrics.items():
        label = f"{name} ({TRACE_MODEL[name]})" if name in TRACE_MODEL else "**all (pooled)**"
        lines.append(f"| {label} | {m['n']} | {100 * m['exact']:.1f}% | {100 * m['adjacent']:.1f}% | "
                     f"{100 * m['majority']['exact']:.1f}% / {100 * m['majority']['adjacent']:.1f}% | "
                     f"{100 * m['coverage_p10_p90']:.1f}% | {m['p50_median_abs_log2']:.2f} |")
    return "\n".join(lines)


def provenance_markdown(meta: dict[str, Any]) -> str:
    tr = meta["training"]
    norm = meta["normalization"]
    edges = meta["bucket_edges_tokens"]
    buckets = ", ".join([f"[1, {edges[0]})", *(f"[{a}, {b})" for a, b in itertools.pairwise(edges)),
                         f"[{edges[-1]}, inf)"])
    return f"""# OSL predictor weights (`osl_mlp.npz`, `osl_mlp.json`)

Generated by `servegym calibrate osl` (`calibration/osl.py`; the module docstring documents every
step). Do not edit by hand: rerun it. The npz holds `W1, b1, W2, b2, W3, b3` (float64, `W` of shape
inputs x outputs; sha256 `{meta['weights_sha256']}`);
the JSON holds vocabulary, normalization, settings and the held-out metrics below.

## What it is

The geo paper's OSL predictor (geo-carbon-slo-serving.md §IV and §V-C: "a two-layer MLP (128 hidden
units, about 27K parameters) that takes the log ISL, the serving model, and the dataset ... jointly
classifies each request into one of six OSL buckets and estimates its OSL quantiles", the scheduler
using the median). Ours: standardized log ISL + one-hot model ({len(meta['models'])}) + one-hot application
({len(meta['apps'])}) -> 128 ReLU -> 128 ReLU -> 6 bucket logits + 3 quantile parameters
(p50 = a, p10 = a - softplus(b), p90 = a + softplus(c) of standardized log OSL, monotone by
construction): {meta['n_parameters']:,} parameters. The paper's ~27K suggests a wider input (it does
not list its features or datasets); with our 8 inputs two 128-unit layers give ~19K.

Buckets (output tokens): {buckets}.
The paper gives no edges; doubling edges separate the four traces' medians (13, 129, 350, 167 tokens) and make "adjacent" mean within a factor of ~2-4.

## Training data

Shipped traces (`servegym/envs/data/traces/PROVENANCE.md` has sources, licences, hashes), all rows,
through `servegym.envs.traces.load_lengths`; one application each, served by one model:

| application | model | what is known |
|---|---|---|
| azure-code | azure-llm | Azure LLM inference (Splitwise, ISCA'24), Nov 2023 coding service; model not named (GPT-class) |
| azure-conv | azure-llm | Azure conversation service, same trace release; model not named, assumed the same |
| mooncake | kimi | Moonshot AI Kimi, Mooncake FAST'25 conversation trace (all 12,031 rows, no input filter) |
| arxiv | llama-2 | arXiv articles and reference summaries counted with the Llama-2 tokenizer (Vidur); not a served model's outputs |

Model and application coincide in this data, so the model input adds nothing beyond the application;
unseen (model, application) pairs are rejected at inference.

Split: per application, `numpy.random.default_rng([seed, app_index]).permutation(n)`; the first
ceil({tr['test_fraction']} n) rows are held out ({meta['n_test']:,} test / {meta['n_train']:,} train requests). Normalization
from the training split only: log ISL mean {norm['log_isl_mean']:.4f}, std {norm['log_isl_std']:.4f}
(inputs clipped to the training range [{norm['log_isl_min']:.3f}, {norm['log_isl_max']:.3f}]); log OSL mean
{norm['log_osl_mean']:.4f}, std {norm['log_osl_std']:.4f}.

Hyperparameters: seed {tr['seed']}, hidden {tr['hidden']}, epochs {tr['epochs']}, batch {tr['batch_size']}, Adam
(0.9, 0.999, 1e-8) with peak learning rate {tr['lr']} cosine-decayed to 0, loss = cross-entropy +
{tr['quantile_weight']} x pinball(p10, p50, p90), float64, He-normal init (head scaled by 0.1).
Subset: {tr['max_rows_per_app'] or 'none (all rows)'}.

## Held-out accuracy

Bucket accuracy of the classifier (argmax) on the held-out split; "majority" is the baseline that
always answers the application's most frequent training bucket. Coverage should be ~80% and is the
share of held-out OSLs within [p10, p90].

{accuracy_table(meta['metrics_test'])}

The paper reports 51% exact / 99% exact-or-adjacent for Llama-3.1-8B (CNN-DailyMail) and 37% / 70%
for Mixtral-8x7B (its OpenOrca-based MLPerf workload); random guessing gives 17%. Those datasets'
per-request lengths are not available here (`../shared/data/request_lengths/PROVENANCE.md`,
"Not found"), so the rows above are different workloads and compare only in kind: accuracy is bounded
by how much of the OSL spread the prompt length explains, which differs per trace.
"""


# ---- CLI ---------------------------------------------------------------------------------------------
def run_cli(args: argparse.Namespace) -> int:
    """Handler of ``servegym calibrate osl`` (the parser is in ``servegym.calibration.cli``)."""
    from servegym.calibration.cli import output_dir
    from tqdm import tqdm

    if args.no_save and (args.out is not None or args.overwrite_shipped):
        raise ConfigError("--no-save excludes --out and --overwrite-shipped")
    if args.max_rows_per_app is not None and args.overwrite_shipped:
        raise ConfigError("--max-rows-per-app cannot --overwrite-shipped (the shipped weights use every row)")
    epochs = {} if args.epochs is None else {"epochs": args.epochs}
    cfg = TrainConfig(seed=args.seed, max_rows_per_app=args.max_rows_per_app, **epochs)
    out = None if args.no_save else output_dir(args, "osl", default_out_dir())
    with tqdm(total=cfg.epochs, desc="training OSL MLP", disable=args.json, leave=False) as bar:
        def progress(epoch: int, loss: float) -> None:
            bar.set_postfix(loss=f"{loss:.4f}")
            bar.update(1)

        report = calibrate(cfg, out, progress)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"OSL MLP: {report['n_parameters']:,} parameters, {report['n_train']:,} train / "
          f"{report['n_test']:,} held-out requests (seed {cfg.seed}, {cfg.epochs} epochs)")
    print(accuracy_table(report["metrics_test"]))
    print("paper: " + "; ".join(f"{k}: {100 * v['exact']:.0f}% exact, {100 * v['adjacent']:.0f}% exact-or-adjacent"
                                 for k, v in PAPER_ACCURACY.items()))
    for f in report.get("files", []):
        print(f"wrote {f}")
    return 0
