"""Scenarios of the npu env: what ``reset(seed=...)`` draws from a named split, the workloads and catalogs
it builds (cached per process), and the env's fixed length groups (see :class:`~servegym.envs.npu.env.NPUAutoscaleEnv`, "Splits" and "Groups")."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray
from servegym.envs.npu.sim import azure2024
from servegym.envs.npu.sim.catalog import MODELS
from servegym.envs.npu.sim.cluster import (
    NB,
    ClusterConfig,
    ConfigCatalog,
)
from servegym.envs.npu.sim.workloads import (
    AZURE2024_TRACE,
    TABLE4_RATE_RPM,
    NPUWorkload,
    make_workload,
)

from servegym.splits import scenario_rng, segment

if TYPE_CHECKING:
    from servegym.envs.npu.env_config import NPUEnvConfig

SPLIT_MODELS: tuple[str, ...] = tuple(MODELS)
"""Models the named splits draw from by default (all four of the catalog)."""
SPLIT_AZURE_TRACES: tuple[str, ...] = ("azure-code", "azure-conv")
"""2024 Azure traces the base splits draw (coding or conversation: the day's per-minute rate shape and the
trace's token CDFs, :mod:`servegym.envs.npu.sim.azure2024`)."""
SPLIT_SHIFT_TRACE: dict[str, str] = {"shift-lveval": "lveval", "shift-openthoughts": "openthoughts"}
"""Held-out length sets of the shifts (Table 4 presets on a test day's azure-code timestamps)."""
SPLIT_DAY_SET: dict[str, str] = {"train": "train", "validation": "validation", "test": "test",
                                 "shift-weekend": "weekend"}
"""Which days of :data:`~servegym.envs.npu.sim.azure2024.SPLIT_DAYS` each split replays (the length shifts:
the test days)."""
SPLIT_RATE_SCALE: tuple[float, float] = (0.7, 1.3)
"""Multipliers of Table 4's mean rate the named splits draw from (uniform)."""
SPLIT_FIELDS: tuple[str, ...] = ("model", "trace", "rate_rpm", "start_hour", "workload_seed")
"""Config fields a named split draws itself (setting them with a split is a ConfigError)."""


def draw_scenario(split: str, seed: int, models: tuple[str, ...] = SPLIT_MODELS) -> dict[str, Any]:
    """The scenario of one episode of ``split`` for reset seed ``seed`` (env module docstring, "Splits"):
    ``model``, ``trace`` (workload name), ``azure_trace`` (2024 trace: timestamps, and lengths for ``azure``),
    ``day`` of the 2024 week (from :data:`~servegym.envs.npu.sim.azure2024.SPLIT_DAYS`) and its ``day_label``,
    ``start_hour``, ``rate_scale``, ``rate_rpm``, ``workload_seed`` and ``simulation_seed``."""
    rng = scenario_rng(split, seed)
    model = models[int(rng.integers(len(models)))]
    azure_trace = SPLIT_AZURE_TRACES[int(rng.integers(len(SPLIT_AZURE_TRACES)))]
    start_hour = int(rng.integers(24))
    scale = float(rng.uniform(*SPLIT_RATE_SCALE))
    trace = SPLIT_SHIFT_TRACE.get(split, "azure")
    if trace != "azure":
        azure_trace = "azure-code"  # the shifts change the lengths only
    tr24 = AZURE2024_TRACE[azure_trace]
    days = azure2024.SPLIT_DAYS[tr24][SPLIT_DAY_SET.get(split, "test")]
    day = int(days[int(rng.integers(len(days)))])
    return {"split": split, "seed": int(seed), "model": model, "trace": trace, "azure_trace": azure_trace,
            "day": day, "day_label": azure2024.day_label(tr24, day), "start_hour": float(start_hour),
            "rate_scale": scale, "rate_rpm": round(TABLE4_RATE_RPM[trace] * scale, 6),
            "workload_seed": int(rng.integers(2**31 - 1)), "simulation_seed": int(rng.integers(2**31 - 1))}


class _LRU(OrderedDict):
    """A least-recently-used cache of at most ``cap`` entries; the oldest is dropped *before* a new one is
    built, so the process never holds ``cap + 1`` of them."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap

    def get_or_make(self, key: Any, make: Callable[[], Any]) -> Any:
        if key in self:
            self.move_to_end(key)
            return self[key]
        while self and len(self) >= self.cap:
            self.popitem(last=False)
        self[key] = value = make()
        return value


#: Per-process caches shared by every env instance. Measured on NPUAutoscale-v0's default train split
#: (benchmarks/results/npu_memory.md): a model's configuration catalog takes 2-9 s to build, a 24-h workload
#: ~70 MB (arrival, input and output arrays of ~2.6 M requests) and ~1-3 s. Catalogs: one per model of the
#: default split (4), so resets never rebuild one (each keeps its Pareto fronts, not the step metrics behind
#: them: servegym.envs.npu.sim.dse.METRICS_CACHE_MAX). Workloads: the current episode's and one more (every reset
#: of a named split draws a new one, so a longer cache only held memory). With 4 workloads and every step
#: metric kept, resident memory rose from 461 to 1,270 MB over 20 episodes; with these bounds it stays
#: within 505-594 MB over the last 10.
CATALOG_CACHE_MAX = 4
WORKLOAD_CACHE_MAX = 2
_CATALOGS: _LRU = _LRU(CATALOG_CACHE_MAX)
_WORKLOADS: _LRU = _LRU(WORKLOAD_CACHE_MAX)


def segment_scenario(split: str, azure_trace: str, hours: float, seed: int = 0) -> tuple[dict[str, Any], NPUWorkload]:
    """The fluid cross-check's scenario of ``split`` on the tiled 2023 Azure hour (``benchmarks/npu_fluid_crosscheck.py``
    and its tests): :func:`draw_scenario` (reset ``seed``: start hour, rate, workload and simulator seeds) with the
    arrival timestamps of ``azure_trace`` (azure-code or azure-conv) on the split's segment of the trace hour,
    ``hours`` (h) long. Returns the drawn scenario and its workload (not cached)."""
    sc = draw_scenario(split, seed)
    wl = make_workload(sc["trace"], hours=hours, seed=sc["workload_seed"], rate_rpm=sc["rate_rpm"],
                       azure_trace=azure_trace, start_hour=sc["start_hour"], segment=segment(split))
    return sc, wl


def _catalog(cc: ClusterConfig) -> ConfigCatalog:
    return _CATALOGS.get_or_make(ConfigCatalog.key_of(cc), lambda: ConfigCatalog(cc))


def _workload(cfg: NPUEnvConfig, seed: int) -> NPUWorkload:
    key = (cfg.trace, float(cfg.hours), int(seed), cfg.rate_rpm, float(cfg.start_hour))
    return _WORKLOADS.get_or_make(key, lambda: make_workload(cfg.trace, hours=cfg.hours, seed=int(seed),
                                                             rate_rpm=cfg.rate_rpm, start_hour=cfg.start_hour))


def _split_workload(sc: dict[str, Any], hours: float) -> NPUWorkload:
    key = ("split", sc["trace"], sc["azure_trace"], sc["day"], float(hours), sc["workload_seed"], sc["rate_rpm"],
           sc["start_hour"])
    # the episode stays within its day (wrapping past midnight to the same day's start), so the splits' days
    # never share arrivals
    return _WORKLOADS.get_or_make(key, lambda: make_workload(
        sc["trace"], hours=hours, seed=sc["workload_seed"], rate_rpm=sc["rate_rpm"], azure_trace=sc["azure_trace"],
        start_hour=sc["start_hour"], day=sc["day"], within_day=True))


def split_groups(edges: NDArray[np.int64], per_phase: int, hours: float) -> list[list[int]]:
    """The groups every named split shares (so the spaces never change between episodes or splits): the
    length quantiles of the train traces (azure-code and azure-conv pooled, each on its first train day) and, as
    the top group of each phase, the longest request any split's trace can have (the 2024 traces' declared
    maxima, and the shifts' long-context sets)."""
    pooled = [make_workload("azure", hours=hours, seed=0, azure_trace=a, within_day=True,
                            day=azure2024.SPLIT_DAYS[AZURE2024_TRACE[a]]["train"][0]) for a in SPLIT_AZURE_TRACES]
    from servegym.envs.workload import Requests

    arr = np.concatenate([w.requests.arrival_s for w in pooled])
    order = np.argsort(arr, kind="stable")
    reqs = Requests(arr[order], np.concatenate([w.requests.input_tokens for w in pooled])[order],
                    np.concatenate([w.requests.output_tokens for w in pooled])[order])
    ref = NPUWorkload("split-reference", reqs, pooled[0].duration_s, 0, 0, "pooled train traces")
    picks = choose_groups(ref, edges, per_phase)
    longest = [make_workload(t, hours=hours, seed=0) for t in SPLIT_SHIFT_TRACE.values()]
    for p, lengths in enumerate((lambda r: r.input_tokens, lambda r: r.input_tokens + r.output_tokens)):
        most = [int(lengths(w.requests).max()) for w in [ref, *longest] if len(w.requests)]
        most += [azure2024.max_lengths(AZURE2024_TRACE[a])[p] for a in SPLIT_AZURE_TRACES]
        top = max(int(np.searchsorted(edges, min(m, int(edges[-1])), side="left")) for m in most)
        picks[p] = sorted({*picks[p], top})
    return picks


def choose_groups(workload: NPUWorkload, edges: NDArray[np.int64], per_phase: int) -> list[list[int]]:
    """Bucket indices of the env's groups per phase: the quantiles i/P of the requests' length buckets
    (prefill: input; decode: input + output), the last the longest request's bucket (see module doc)."""
    r = workload.requests
    out: list[list[int]] = []
    q = np.arange(1, per_phase + 1) / per_phase
    for lengths in (r.input_tokens, r.input_tokens + r.output_tokens):
        if lengths.size == 0:
            out.append([NB - 1])
            continue
        bk = np.searchsorted(edges, np.minimum(lengths, edges[-1]), side="left")
        picks = np.quantile(bk, q, method="inverted_cdf").astype(np.int64).tolist()
        picks.append(int(bk.max()))
        out.append(sorted(set(picks)))
    return out
