"""Typed scenario configuration of the geo simulator and its presets.

A :class:`GeoConfig` fully determines a run (with its ``seed``): the topology (sites, regions,
RTT, CI, PUE), the cluster inside each DC (nodes, GPUs, engines of one calibrated profile), the
workload (Poisson arrivals of a length spec, or a trace), the SLO budgets, the provisioner
(poll period and mode), the scheduling mode (per request or per window) and the OSL source
the shared estimator uses.

Presets (:func:`preset`):

- ``paper``: the paper's Table II. Topology ``geo-paper`` (4 regions x 4 DCs), 4 nodes of
  8 A100-40GB per DC, the model's TP (Llama-3.1-8B / Qwen2.5-7B TP1 -> 512 engines,
  Mixtral-8x7B TP4 -> 128 engines), Poisson rates 1200/2400/4000 req/s for low/moderate/high
  load (Mixtral 800/1200/2000), TTFT 3 s, TPOT 100 ms (Mixtral 200 ms), poll period 1 s
  (synchronous), uniform PUE 1.1, CI held at the topology's documented base hour, 200 s runs.
- ``small``: topology ``geo-small``, 2 nodes of 8 GPUs per DC, the paper's per-engine arrival
  rate at each load (so the load regime matches the paper's), 60 s runs.
- ``mini``: topology ``geo-mini``, 1 node of 8 GPUs per DC, same per-engine rate, 30 s runs;
  sized for RL training.

Every field is validated on construction: an invalid value raises :class:`ConfigError`
naming the field and its allowed range or values.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from functools import lru_cache
from typing import Any, ClassVar

from servegym.errors import (
    MAX_EXPECTED_REQUESTS,
    MAX_REQUEST_CEILING,
    WEEK_S,
    ConfigError,
    check_choice,
    check_field_types,
    check_range,
    check_request_count,
)
from servegym.names import NameTable

POLL_MODES = ("sync", "async")
DECISION_MODES = ("request", "window")
OSL_MODES = ("mean", "oracle", "predicted")
CI_MODES = ("fixed", "hourly")
CI_SIGNALS = ("realized", "day-ahead")
LOADS = ("low", "moderate", "high")

#: Model (canonical name, servegym.names; any accepted spelling looks up) -> (profile name, TPOT budget s,
#: length spec, rates req/s at low/moderate/high) (Table II).
PAPER_MODELS: NameTable[tuple[str, float, str, tuple[float, float, float]]] = NameTable({
    "Llama-3.1-8B": ("llama3.1-8b_a100-40gb_tp1", 0.100, "cnn-dailymail", (1200.0, 2400.0, 4000.0)),
    "Llama-3.1-8B-TP2": ("llama3.1-8b_a100-40gb_tp2", 0.100, "cnn-dailymail", (1200.0, 2400.0, 4000.0)),
    "Qwen2.5-7B": ("qwen2.5-7b_a100-40gb_tp1", 0.100, "cnn-dailymail", (1200.0, 2400.0, 4000.0)),
    "Mixtral-8x7B": ("mixtral-8x7b_a100-40gb_tp4", 0.200, "openorca", (800.0, 1200.0, 2000.0)),
}, field="model")
#: Engines of the paper preset per model (4 x 4 DCs x 4 nodes x 8 GPUs / TP), used to turn the
#: paper's rates into a per-engine rate for the smaller presets.
_PAPER_GPUS = 4 * 4 * 4 * 8


def _lazy(module: str, name: str) -> Any:
    """``module.name``, imported when an error needs it (the grid and workload modules load data tables)."""
    import importlib

    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class GeoConfig:
    """One geo scenario. Units: seconds (``_s``), req/s (``_rps``), watts (``_w``), tokens.

    Fields:
        topology: grid topology name (``servegym.envs.grid.available_topologies()``).
        nodes_per_dc, gpus_per_node: identical nodes per DC; engines per node = gpus_per_node / tp.
        profile: calibrated engine profile name or JSON path (``servegym.envs.geo.sim.profile``).
        kv_capacity_tokens, max_num_seqs: optional overrides of the profile's KV pool and batch cap.
            ``max_num_seqs`` must lie in the profile's calibrated batch range unless ``extrapolate``.
        extrapolate: allow ``max_num_seqs`` outside the calibrated batch range (the step models are then
            evaluated beyond their calibration; steps whose time is floored or whose power is clamped to
            TP x TDP are counted). Named in every result (``extrapolated``, ``power_clamps``, ``time_floors``).
        rate_rps: Poisson arrival rate of the load generator (whole system).
        duration_s: arrivals are generated in ``[0, duration_s)``.
        drain_s: after the last arrival the simulation runs until every request finished or
            ``drain_s`` more seconds passed; unfinished requests count as SLO violations. Energy and
            carbon results cover ``[0, duration_s]`` only (see ``cluster``).
        lengths: ISL/OSL length spec for ``servegym.envs.workload.length_sampler``.
        trace: optional trace name/path for ``servegym.envs.traces.load_trace`` (replaces the
            Poisson arrivals and ``lengths``; ``trace_time_scale`` multiplies its arrival times:
            0.5 replays it twice as fast). Requests go round-robin to the schedulers.
        max_input_tokens: drop requests with a longer prompt (``None``: keep all; must fit the KV pool).
        ttft_slo_s, tpot_slo_s: per-request SLO budgets.
        poll_interval_s: provisioner period Δp.
        poll_mode: ``sync`` (every DC at k·Δp) or ``async`` (DC d at k·Δp + d·Δp/#DCs).
        decision_mode: ``request`` (one decision per arrival) or ``window`` (per scheduler windows
            of ``window_s`` or ``window_max_requests`` requests, whichever closes first).
        osl_mode: ``mean`` (the estimator uses the workload's mean OSL), ``oracle`` (the true OSL;
            named in every result) or ``predicted`` (a per-request predictor passed to
            ``GeoSimulation(osl_predictor=...)``).
        pue: uniform PUE for every DC, ``"reported"`` for the per-site PUEs the paper quotes
            (``servegym.envs.grid.reported_pue``; other sites 1.1), or ``None`` for the topology's.
        host_power_w: constant host power per node.
        ci_mode: ``fixed`` (CI held at ``ci_start`` for the whole run) or ``hourly`` (CI steps
            every simulated hour from ``ci_start``).
        ci_start: UTC timestamp string; ``None`` uses the topology's documented base hour.
        ci_signal: the CI the provisioner's snapshots report to the schedulers: ``realized`` (the hour in
            force) or ``day-ahead`` (a persistence day-ahead forecast: the same hour of the previous day of the
            series; ``ci_mode = "hourly"`` only). Carbon is always charged at the realized CI.
        seed: seed of every random draw of the run.
        max_expected_requests: ceiling on ``rate_rps * duration_s`` (Poisson arrivals; the simulator
            allocates per-request arrays up front): set it higher explicitly for a larger run.
    """

    #: the values of each string field, which a value of another type is told (errors.check_field_types)
    FIELD_CHOICES: ClassVar[dict[str, Any]] = {
        "topology": lambda: _lazy("servegym.envs.grid", "available_topologies")(),
        "profile": lambda: [*_lazy("servegym.envs.geo.sim.profile", "available_profiles")(), "or a JSON path"],
        "lengths": lambda: _lazy("servegym.envs.workload", "length_specs")(),
        "trace": lambda: [*_lazy("servegym.envs.traces", "available_traces")(), "or a trace file path"],
        "poll_mode": POLL_MODES, "decision_mode": DECISION_MODES, "osl_mode": OSL_MODES, "ci_mode": CI_MODES,
        "ci_start": "a UTC timestamp such as '2023-06-01T12:00Z'", "ci_signal": CI_SIGNALS}

    topology: str = "geo-paper"
    nodes_per_dc: int = 4
    gpus_per_node: int = 8
    profile: str = "llama3.1-8b_a100-40gb_tp1"
    kv_capacity_tokens: int | None = None
    max_num_seqs: int | None = None
    extrapolate: bool = False
    rate_rps: float = 4000.0
    duration_s: float = 200.0
    drain_s: float = 120.0
    lengths: str = "cnn-dailymail"
    trace: str | None = None
    trace_time_scale: float = 1.0
    max_input_tokens: int | None = None
    ttft_slo_s: float = 3.0
    tpot_slo_s: float = 0.100
    poll_interval_s: float = 1.0
    poll_mode: str = "sync"
    decision_mode: str = "request"
    window_s: float = 0.100
    window_max_requests: int = 300
    osl_mode: str = "mean"
    pue: float | str | None = 1.1
    host_power_w: float = 300.0
    ci_mode: str = "fixed"
    ci_start: str | None = None
    ci_signal: str = "realized"
    seed: int = 0
    max_expected_requests: int = MAX_EXPECTED_REQUESTS

    def __post_init__(self) -> None:
        check_field_types(self)
        for name in ("nodes_per_dc", "gpus_per_node", "window_max_requests"):
            _check_int(name, getattr(self, name), 1)
        for name in ("kv_capacity_tokens", "max_num_seqs", "max_input_tokens"):
            if getattr(self, name) is not None:
                _check_int(name, getattr(self, name), 1)
        # Fleet size: every engine holds max_num_seqs slots up front (paper scale: 4 nodes x 8 GPUs per DC, 256
        # sequences); these caps keep the largest fleet's per-engine state around half a GB.
        check_range("nodes_per_dc", self.nodes_per_dc, 1, 256)
        check_range("gpus_per_node", self.gpus_per_node, 1, 64)
        if self.max_num_seqs is not None:
            check_range("max_num_seqs", self.max_num_seqs, 1, 4096)
        check_range("rate_rps", self.rate_rps, 0.0, None, low_inclusive=False)
        # Simulated time: a week of arrivals and a day of drain (the paper's runs are 200 s; a request
        # finishes in seconds to minutes), so a mistyped exponent fails here instead of in reset().
        check_range("duration_s", self.duration_s, 0.0, WEEK_S, low_inclusive=False)
        check_range("drain_s", self.drain_s, 0.0, 86_400.0)
        check_range("max_expected_requests", self.max_expected_requests, 1, MAX_REQUEST_CEILING)
        check_range("window_max_requests", self.window_max_requests, 1, 1_000_000)
        if self.kv_capacity_tokens is not None:  # the largest calibrated pool holds ~1M tokens
            check_range("kv_capacity_tokens", self.kv_capacity_tokens, 1, 1_000_000_000)
        if self.trace is None:
            check_request_count(self.rate_rps * self.duration_s, self.max_expected_requests,
                                f"rate_rps = {self.rate_rps:g} x duration_s = {self.duration_s:g}")
        # at most a 1-h trace replayed over ~6 weeks
        check_range("trace_time_scale", self.trace_time_scale, 0.0, 1000.0, low_inclusive=False)
        # SLO budgets: an hour to the first token and a minute per output token are far past any SLO
        check_range("ttft_slo_s", self.ttft_slo_s, 0.0, 3600.0, low_inclusive=False)
        check_range("tpot_slo_s", self.tpot_slo_s, 0.0, 60.0, low_inclusive=False)
        check_range("poll_interval_s", self.poll_interval_s, 1e-3, 3600.0)
        check_range("window_s", self.window_s, 1e-4, 60.0)
        check_range("host_power_w", self.host_power_w, 0.0, 1e5)
        if isinstance(self.pue, str):
            _check_choice("pue", self.pue, ("reported",))
        elif self.pue is not None:
            check_range("pue", self.pue, 1.0, 3.0)
        _check_choice("poll_mode", self.poll_mode, POLL_MODES)
        _check_choice("decision_mode", self.decision_mode, DECISION_MODES)
        _check_choice("osl_mode", self.osl_mode, OSL_MODES)
        _check_choice("ci_mode", self.ci_mode, CI_MODES)
        _check_choice("ci_signal", self.ci_signal, CI_SIGNALS)
        if self.ci_signal == "day-ahead" and self.ci_mode != "hourly":
            raise ConfigError(f"ci_signal = 'day-ahead' needs ci_mode = 'hourly' (got {self.ci_mode!r}); "
                              "allowed: ci_signal = 'realized' with a fixed CI")
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed = {self.seed!r} is out of range; allowed: an integer >= 0")
        if self.ci_start is not None:
            import pandas as pd

            try:
                pd.Timestamp(self.ci_start)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"ci_start = {self.ci_start!r} is not a timestamp; allowed: e.g. '2023-06-01T12:00Z'") from exc
        from servegym.envs.grid import available_topologies

        _check_choice("topology", self.topology, tuple(available_topologies()))
        prof = self.engine_profile()
        if self.gpus_per_node % prof.tp:
            raise ConfigError(
                f"gpus_per_node = {self.gpus_per_node} is not divisible by the profile's tp = {prof.tp}; "
                f"allowed: a multiple of {prof.tp}"
            )
        if self.max_input_tokens is not None and self.max_input_tokens >= prof.kv_capacity_tokens:
            raise ConfigError(
                f"max_input_tokens = {self.max_input_tokens} does not fit the KV pool of "
                f"{prof.kv_capacity_tokens} tokens; allowed: [1, {prof.kv_capacity_tokens - 1}]"
            )

    # -- derived quantities -------------------------------------------------------------------
    def engine_profile(self):  # -> EngineProfile (imported lazily: keeps config import light)
        """The engine profile with this config's overrides applied."""
        if not isinstance(self.extrapolate, bool):
            raise ConfigError(f"extrapolate = {self.extrapolate!r}; allowed: True or False")
        return _load_profile(self.profile).with_limits(
            max_num_seqs=self.max_num_seqs, kv_capacity_tokens=self.kv_capacity_tokens, extrapolate=self.extrapolate)

    @property
    def extrapolated(self) -> bool:
        """True when ``max_num_seqs`` lies outside the profile's calibrated batch range (needs ``extrapolate``)."""
        if self.max_num_seqs is None:
            return False
        lo, hi = _load_profile(self.profile).ranges["batch"]
        return not lo <= self.max_num_seqs <= hi

    @property
    def engines_per_node(self) -> int:
        return self.gpus_per_node // self.engine_profile().tp

    @property
    def engines_per_dc(self) -> int:
        return self.nodes_per_dc * self.engines_per_node

    def replace(self, **changes: Any) -> GeoConfig:
        """A copy with ``changes`` applied (validated again); unknown names raise ConfigError."""
        known = {f.name for f in fields(self)}
        unknown = set(changes) - known
        if unknown:
            raise ConfigError(f"unknown GeoConfig fields {sorted(unknown)}; allowed: {', '.join(map(str, sorted(known)))}")
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@lru_cache(maxsize=32)
def _load_profile(name: str):
    from servegym.envs.geo.sim.profile import load_profile

    return load_profile(name)


def _check_int(name: str, value: Any, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"{name} = {value!r} is out of range; allowed: an integer >= {low}")


def _check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    check_choice(name, value, allowed, verb="is not allowed")


def _model_entry(model: str) -> tuple[str, float, str, tuple[float, float, float]]:
    return PAPER_MODELS[model]  # ConfigError naming the allowed models when unknown


def _load_rate(model: str, load: str) -> float:
    _check_choice("load", load, LOADS)
    return _model_entry(model)[3][LOADS.index(load)]


def _n_sites(topology: str) -> int:
    from servegym.envs.grid import get_topology

    return len(get_topology(topology).sites)


PRESETS = ("paper", "small", "mini")


def preset(name: str = "paper", *, model: str = "Llama-3.1-8B", load: str = "high", **overrides: Any) -> GeoConfig:
    """A named scenario (see the module docstring) for ``model`` at ``load``, then ``overrides``.

    ``load`` picks the paper's rate for the model (low/moderate/high); the smaller presets keep
    the paper's per-GPU arrival rate so their load regime matches. ``overrides`` are GeoConfig
    fields (e.g. ``rate_rps=3000``, ``decision_mode="window"``).
    """
    _check_choice("preset", name, PRESETS)
    profile, tpot, lengths, _ = _model_entry(model)
    rate = _load_rate(model, load)
    kw: dict[str, Any] = {"profile": profile, "tpot_slo_s": tpot, "lengths": lengths, "rate_rps": rate}
    if name == "small":
        gpus = _n_sites("geo-small") * 2 * 8
        kw.update(topology="geo-small", nodes_per_dc=2, duration_s=60.0, rate_rps=round(rate * gpus / _PAPER_GPUS, 3))
    elif name == "mini":
        gpus = _n_sites("geo-mini") * 1 * 8
        kw.update(topology="geo-mini", nodes_per_dc=1, duration_s=30.0, rate_rps=round(rate * gpus / _PAPER_GPUS, 3))
    known = {f.name for f in fields(GeoConfig)}
    unknown = set(overrides) - known
    if unknown:
        raise ConfigError(f"unknown GeoConfig fields {sorted(unknown)}; allowed: {', '.join(map(str, sorted(known)))}")
    kw.update(overrides)
    return GeoConfig(**kw)
