"""``servegym npu validate``: the npu model against the load regime of the NeuScale paper's own validation.

Each point names the figure and text it reads, the published value, ours, the tolerance (or the trend) and
whether it holds. Paper: "NeuScale: Heterogeneous NPU Autoscaling for Energy- and Cost-Efficient LLM Serving"
(``shared/papers/heterogeneous-npu-autoscaling.md``); sections and figures below are that paper's.

* **Figure 16** (§4, "Simulator validation"): NeuScale at steady state on the prototype's small TPU cluster,
  "32 TPUv4, 64 TPUv5e, and 64 TPUv6e chips" (§4, "Real system prototype"; here quotas of 32 NPU-A, 64 NPU-B and
  64 NPU-D chips, the DSE exploring those versions only), serving Llama3-70B with "synthetic workloads sampled from
  the Azure trace (Microsoft Azure, 2023)" (here: Poisson arrivals at a constant rate with the real 2023 Azure
  coding trace's (input, output) pairs), "sweeping request rates". Published: "(1) the prefill throughput saturates
  at 8 requests/second, and the prefill TTFT increases drastically with a higher request rate; (2) the decode
  throughput drops at 16 requests/second due to prefill bottlenecks, but the TPOT is not affected since decode
  instances are not yet saturated". Read as: the saturation rate is the prefill throughput (requests whose first
  token came in the second half of each run, per second) at the first swept rate it falls behind
  (:func:`prefill_saturation`), within 25 % of 8 req/s;
  the TTFT knee: the median TTFT (unserved requests count as infinite) at the first swept rate above saturation is
  at least 10x its value at the lowest rate; the decode drop: at 16 req/s the decode throughput (requests finished
  per second, second half) is below 90 % of the offered rate; TPOT flat: the median TPOT of requests finished in
  the second half at 16 req/s is within 25 % of its value at the lowest rate.
* **Figure 20** (§5.2): on the focal scenario (DeepSeekV3-671B, Azure, 24 h) "the groups D1 and D2 are larger than
  others" -- decode groups hold several vPods. Read as: the two decode groups with the most tokens each reach at
  least 2 vPods at some epoch.
* **Figure 25** (§5.4): NeuScale with NPU-C/NPU-D quotas and no fail-over to NPU-A/B (here ``versions = (NPU-C,
  NPU-D)``), "C:256/D:512" named as an example; "both prefill and decode suffer from low SLO satisfaction rate
  (as low as 14%/11%)" and "prefill phase suffers from up to 1.34x worse efficiency compared to unlimited
  resources". The paper names only one setting; the sweep here halves it twice from C:1024/D:2048. Read as: the
  quota binds (peak chips held reach it) at the tightest setting, SLO satisfaction does not rise as the quota
  shrinks, and at the tightest setting the prefill or decode satisfaction is at most 50 % (a collapse towards the
  paper's 14 % / 11 %); the prefill efficiency ratio is reported beside the paper's 1.34x, without a verdict.
* **Figure 28** (§5.7): Llama3-8B on the same prototype cluster, cost objective, "sweeping request rates (from 60
  requests/min to 16x) until TPUv6e capacity becomes insufficient"; "NeuScale maintains near-100% SLO satisfaction
  across all request rates by first using TPUv6e and then automatically failing over to TPUv5e and TPUv4";
  "NeuScale improves cost efficiency by up to 11.2% over Base" (decode). Read as: at 16x the NPU-D quota binds
  (64 chips held) and not at 1x, NeuScale holds NPU-A or NPU-B chips at 16x, and its SLO satisfaction is at least
  95 % at every rate; the largest decode cost-efficiency gain over the sweep is reported beside 11.2 % (trend:
  positive somewhere).

The prefill saturation rate is the one point fitted to (``ClusterConfig.serving_efficiency``,
:mod:`servegym.calibration.npu_serving`) and is marked ``fitted``; every other point is held out.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from servegym.errors import check_range

if TYPE_CHECKING:
    from servegym.envs.npu.sim.cluster import NPUCluster

PROTOTYPE_QUOTA: dict[str, int] = {"NPU-A": 32, "NPU-B": 64, "NPU-D": 64}
"""§4's prototype cluster: 32 TPUv4 (NPU-A), 64 TPUv5e (NPU-B) and 64 TPUv6e (NPU-D) chips."""
PROTOTYPE_VERSIONS: tuple[str, ...] = ("NPU-A", "NPU-B", "NPU-D")
"""The prototype holds no v5p, so the DSE explores these versions only (its SLO is then set on NPU-D, §2.4)."""
FIG16_RATES_RPS: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0)
"""Figure 16's sweep (req/s); the paper's axis is not recoverable, these bracket its 8 and 16 req/s."""
FIG16_SATURATION_RPS = 8.0
FIG16_TOL = 0.25
FIG28_RATES_RPM: tuple[float, ...] = (60.0, 120.0, 240.0, 480.0, 960.0)
"""Figure 28: 60 req/min to 16x."""
FIG25_QUOTAS: tuple[dict[str, int] | None, ...] = (None, {"NPU-C": 1024, "NPU-D": 2048},
                                                   {"NPU-C": 512, "NPU-D": 1024}, {"NPU-C": 256, "NPU-D": 512})
"""Figure 25's settings here: unlimited, then C:1024/D:2048 halved twice to the paper's named C:256/D:512."""


@dataclass(frozen=True)
class Point:
    """One validation point: ``ours`` against ``paper`` under ``rule``; ``holds`` is the verdict."""

    figure: str
    name: str
    unit: str
    paper: str
    ours: float
    rule: str
    holds: bool | None
    reading: str
    fitted: bool = False
    detail: dict = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------- runs


def _quantile_inf(x: np.ndarray, q: float) -> float:
    """Quantile of ``x`` with NaN read as +inf (a request not served yet has waited longer than any served one)."""
    if x.size == 0:
        return float("nan")
    return float(np.quantile(np.where(np.isnan(x), np.inf, x), q, method="lower"))


def prototype_sweep(rates_rps: Sequence[float] = FIG16_RATES_RPS, hours: float = 1.0, seed: int = 0,
                    tick: Callable[[], None] | None = None, **config: object) -> list[dict]:
    """Figure 16's rate sweep on the request-level simulator: per rate (req/s), NeuScale on the prototype cluster
    serving Llama-3-70B with Poisson arrivals and the 2023 Azure coding trace's lengths for ``hours``. Steady-state
    figures over the second half: prefill and decode throughput (req/s), median TTFT and TPOT (s), the chips held
    per version at the peak, SLO violation (%)."""
    from servegym.baselines.npu import make_policy, run_policy
    from servegym.envs.npu.sim.cluster import ClusterConfig, ConfigCatalog, NPUCluster
    from servegym.envs.npu.sim.workloads import NPUWorkload
    from servegym.envs.workload import EmpiricalLengths, make_requests

    check_range("hours", hours, 0.25, 24.0)
    cfg = ClusterConfig(**{"model": "Llama-3-70B", "objective": "energy", "quota_chips": PROTOTYPE_QUOTA,
                           "versions": PROTOTYPE_VERSIONS, "n_candidates": 1, **config})  # type: ignore[arg-type]
    cat = ConfigCatalog(cfg)
    lengths = EmpiricalLengths.from_trace("azure-code")
    T = hours * 3600.0
    half = T / 2.0
    rows = []
    for rps in rates_rps:
        rng = np.random.default_rng(seed)
        arr = np.sort(rng.uniform(0.0, T, rng.poisson(rps * T)))
        req = make_requests(arr, lengths, rng)
        wl = NPUWorkload("fig16", req, T, int(lengths.input_tokens.max()),
                         int((lengths.input_tokens + lengths.output_tokens).max()),
                         f"Poisson {rps:g} req/s, 2023 Azure coding lengths")
        sim = NPUCluster(cfg, wl, seed=seed, catalog=cat)
        s = run_policy(sim, make_policy("neuscale"))
        first = sim.arr + sim.ttft  # NaN where no first token yet
        late = sim.arr >= half
        # done_s is the last finished job's time; a request is finished once both its jobs are (jobs_left == 0)
        fin = np.isfinite(sim.done_s) & (sim.jobs_left == 0) & (sim.done_s >= half) & (sim.done_s < T)
        rows.append({
            "rate_rps": float(rps), "requests": int(sim.n_req),
            "prefill_rps": float(np.count_nonzero(np.isfinite(first) & (first >= half) & (first < T)) / (T - half)),
            "decode_rps": float(np.count_nonzero(fin) / (T - half)),
            "ttft_p50_s": _quantile_inf(sim.ttft[late], 0.5),
            "tpot_p50_s": (float(np.median(sim.dec_time[fin] / sim.osl[fin])) if fin.any() else float("nan")),
            "held": {v: int(sim.max_held[v]) for v in PROTOTYPE_VERSIONS},
            "slo_violation_pct": s["slo_violation_pct"], "ttft_violation_pct": s["ttft_violation_pct"],
            "tpot_violation_pct": s["tpot_violation_pct"]})
        if tick is not None:
            tick()
    return rows


def decode_groups(sim: NPUCluster) -> list[dict]:
    """The decode groups of a finished run (an ``NPUCluster`` after :func:`~servegym.baselines.npu.run_policy`), most
    tokens first: bucket edge, tokens, the most vPods alive at a decision point, the configurations held."""
    d = sim.decomposition()
    alive = np.array([h.alive for h in sim.history])  # decision intervals x 2 phases x 48 groups
    dec = [r for r in d["groups"] if r["phase"] == "decode"]
    dec.sort(key=lambda r: -r["tokens"])
    edges = [int(e) for e in sim.edges]
    return [{"edge": r["edge"], "tokens": r["tokens"], "vpods_max": int(alive[:, 1, edges.index(r["edge"])].max()),
             "configs": r["configs"]} for r in dec]


def focal_runs(hours: float = 24.0, seed: int = 0, fidelity: str = "request",
               quotas: Sequence[dict[str, int] | None] = FIG25_QUOTAS,
               tick: Callable[[], None] | None = None, **cluster: Any) -> dict:
    """The focal scenario (DeepSeek-V3-671B, the 2024 Azure weekday) under NeuScale: the default cluster (Figure
    20's vPods per group) and each of ``quotas`` with NPU-C/NPU-D only (Figure 25); ``cluster``: other
    :class:`ClusterConfig` fields for every run (e.g. ``kv_form``, ``fit_at``; none for the validation itself)."""
    from servegym.baselines.npu import make_policy, run_policy
    from servegym.envs.npu.sim.cluster import ClusterConfig, ConfigCatalog
    from servegym.envs.npu.sim.fluid import make_cluster
    from servegym.envs.npu.sim.workloads import make_workload

    check_range("hours", hours, 0.5, 24.0)
    wl = make_workload("azure", hours=hours, seed=seed)
    cfg = ClusterConfig(model="DeepSeek-V3-671B", n_candidates=1, **cluster)
    sim = make_cluster(cfg, wl, seed=seed, catalog=ConfigCatalog(cfg), fidelity=fidelity)
    run_policy(sim, make_policy("neuscale"))
    groups = decode_groups(sim)
    if tick is not None:
        tick()
    quota_rows = []
    for q in quotas:
        qc = ClusterConfig(model="DeepSeek-V3-671B", n_candidates=1, versions=("NPU-C", "NPU-D"), quota_chips=q,
                           **cluster)
        qs = make_cluster(qc, wl, seed=seed, catalog=ConfigCatalog(qc), fidelity=fidelity)
        s = run_policy(qs, make_policy("neuscale"))
        quota_rows.append({"quota": q, "held": {v: int(qs.max_held[v]) for v in ("NPU-C", "NPU-D")},
                           "satisfaction_prefill": 1.0 - s["ttft_violation_pct"] / 100.0,
                           "satisfaction_decode": 1.0 - s["tpot_violation_pct"] / 100.0,
                           "energy_efficiency_prefill": s["energy_efficiency_prefill"],
                           "energy_efficiency_decode": s["energy_efficiency_decode"]})
        if tick is not None:
            tick()
    return {"decode_groups": groups, "quotas": quota_rows}


def failover_sweep(rates_rpm: Sequence[float] = FIG28_RATES_RPM, hours: float = 2.0, seed: int = 0,
                   fit_at: str = "best-batch", tick: Callable[[], None] | None = None) -> list[dict]:
    """Figure 28's sweep: Llama-3-8B on the prototype cluster, cost objective, the 2024 Azure coding day rescaled
    to each week-mean rate (req/min), ``hours`` from 12:00, Base and NeuScale. Per (rate, policy): cost
    efficiencies (tokens/USD), SLO violation (%), peak chips held per version."""
    from servegym.baselines.npu import make_policy, run_policy
    from servegym.envs.npu.sim.cluster import ClusterConfig, ConfigCatalog, NPUCluster
    from servegym.envs.npu.sim.workloads import make_workload

    cfg = ClusterConfig(model="Llama-3-8B", objective="cost", n_candidates=1, quota_chips=PROTOTYPE_QUOTA,
                        versions=PROTOTYPE_VERSIONS, fit_at=fit_at)
    cat = ConfigCatalog(cfg)
    rows = []
    for rate in rates_rpm:
        wl = make_workload("azure", hours=hours, seed=seed, rate_rpm=rate, start_hour=12.0)
        for pol in ("base", "neuscale"):
            sim = NPUCluster(cfg, wl, seed=seed, catalog=cat)
            s = run_policy(sim, make_policy(pol))
            # the paper's premise: "TPUv6e is the most cost-efficient chip for both prefill and decode"; here the
            # share of each phase's tokens whose bucket's cost best fit is NPU-D
            on_d = {}
            for ph, bk, tok in (("prefill", sim.bk_p, sim.isl), ("decode", sim.bk_d, sim.osl)):
                is_d = np.array([cat.best_fit[(ph, int(e))].version == "NPU-D" if (ph, int(e)) in cat.best_fit
                                 else False for e in sim.edges])
                on_d[ph] = float(tok[is_d[bk]].sum() / tok.sum()) if tok.size else float("nan")
            rows.append({"rate_rpm": float(rate), "policy": pol, "requests": len(wl.requests), "best_fit_on_d": on_d,
                         **{k: s[k] for k in ("cost_efficiency", "cost_efficiency_prefill", "cost_efficiency_decode",
                                              "cost_efficiency_busy", "slo_violation_pct", "ttft_violation_pct",
                                              "tpot_violation_pct")},
                         "held": {v: int(sim.max_held[v]) for v in PROTOTYPE_VERSIONS}})
            if tick is not None:
                tick()
    return rows


# ---------------------------------------------------------------------------------------------- points


KEEP_UP = 0.95
"""A rate is kept up with while prefill serves at least this share of it (second half of the run)."""


def prefill_saturation(rows: Sequence[dict]) -> tuple[float, bool]:
    """The prefill saturation rate (req/s) of a Figure 16 sweep and whether it was reached: the prefill throughput at
    the first swept rate it falls behind (serves < :data:`KEEP_UP` of it), i.e. the capacity where the curve bends;
    (the highest throughput, False) when it keeps up everywhere. Later rates are not read: past saturation fail-over
    vPods (other versions) can add capacity again, which is not the knee Figure 16 shows."""
    for r in sorted(rows, key=lambda r: r["rate_rps"]):
        if r["prefill_rps"] < KEEP_UP * r["rate_rps"]:
            return float(r["prefill_rps"]), True
    return max(float(r["prefill_rps"]) for r in rows), False


def fig16_points(rows: list[dict]) -> list[Point]:
    """Figure 16's four points from :func:`prototype_sweep`'s rows (see the module docstring for the readings)."""
    reading = ("§4, Figure 16: NeuScale at steady state on 32 NPU-A + 64 NPU-B + 64 NPU-D chips, Llama-3-70B, "
               "Poisson arrivals with the 2023 Azure coding lengths; second half of each run")
    by_rate = {r["rate_rps"]: r for r in rows}
    sat, reached = prefill_saturation(rows)
    lo = rows[0]
    pts = [Point("Figure 16", "prefill saturation rate", "req/s", "8 (saturates)", sat,
                 f"within {FIG16_TOL:.0%} of 8", bool(reached and abs(sat / FIG16_SATURATION_RPS - 1.0) <= FIG16_TOL),
                 reading + f"; the prefill throughput at the first swept rate it falls below {KEEP_UP:.0%} of"
                 + ("" if reached else " (never within the sweep: the highest throughput)"),
                 fitted=True, detail={"sweep": rows})]
    above = [r for r in rows if r["rate_rps"] > sat]
    if above:
        knee = above[0]
        ratio = knee["ttft_p50_s"] / lo["ttft_p50_s"] if lo["ttft_p50_s"] > 0 else float("inf")
        pts.append(Point("Figure 16", "TTFT increase above saturation", "x", "drastic rise",
                         ratio, ">= 10x the lowest rate's median TTFT", bool(ratio >= 10.0),
                         f"median TTFT at {knee['rate_rps']:g} req/s (first swept rate above saturation) over "
                         f"{lo['rate_rps']:g} req/s's; unserved requests count as infinite"))
    else:
        pts.append(Point("Figure 16", "TTFT increase above saturation", "x", "drastic rise",
                         float("nan"), ">= 10x the lowest rate's median TTFT", False,
                         "no swept rate lies above the saturation rate"))
    r16 = by_rate.get(16.0)
    if r16 is not None:
        share = r16["decode_rps"] / r16["rate_rps"]
        bound = r16["prefill_rps"] > 0 and abs(r16["decode_rps"] / r16["prefill_rps"] - 1.0) <= 0.10
        pts.append(Point("Figure 16", "decode throughput at 16 req/s", "share of offered",
                         "drops (prefill-bound)", share, "< 0.90 and within 10% of the prefill throughput",
                         bool(share < 0.90 and bound),
                         "requests finished per second in the second half over 16 req/s; the drop must come from "
                         "prefill (decode throughput within 10% of prefill's), not from decode itself"))
        tp = r16["tpot_p50_s"] / lo["tpot_p50_s"] if lo["tpot_p50_s"] > 0 else float("nan")
        pts.append(Point("Figure 16", "TPOT at 16 req/s over the lowest rate's", "x", "1 (not affected)",
                         tp, f"within {FIG16_TOL:.0%} of 1", bool(abs(tp - 1.0) <= FIG16_TOL) if tp == tp else False,
                         "median TPOT of the requests finished in the second half"))
    return pts


def fig20_points(focal: dict) -> list[Point]:
    """Figure 20: several vPods in the busiest decode groups."""
    top = focal["decode_groups"][:2]
    low = min((g["vpods_max"] for g in top), default=0)
    return [Point("Figure 20", "peak vPods of the two busiest decode groups (the lower)", "vPods",
                  "several (D1, D2)", float(low), ">= 2", bool(low >= 2),
                  "§5.2, Figure 20: focal scenario (DeepSeek-V3-671B, Azure 2024 weekday) under NeuScale; "
                  "the two decode groups with the most tokens", detail={"decode_groups": focal["decode_groups"][:6]})]


def fig25_points(focal: dict) -> list[Point]:
    """Figure 25: SLO satisfaction collapses as the NPU-C/D quota shrinks (no fail-over to NPU-A/B)."""
    rows = focal["quotas"]
    tight = rows[-1]
    q = tight["quota"] or {}
    binds = bool(q) and all(tight["held"][v] >= q[v] for v in q if q[v] is not None)
    sat = [min(r["satisfaction_prefill"], r["satisfaction_decode"]) for r in rows]
    monotone = all(b <= a + 0.01 for a, b in itertools.pairwise(sat))
    low = min(tight["satisfaction_prefill"], tight["satisfaction_decode"])
    unl = rows[0]
    eff = (unl["energy_efficiency_prefill"] / tight["energy_efficiency_prefill"]
           if tight["energy_efficiency_prefill"] > 0 else float("inf"))
    reading = ("§5.4, Figure 25: focal scenario, NeuScale on NPU-C/NPU-D only, quotas unlimited, C:1024/D:2048, "
               "C:512/D:1024, C:256/D:512")
    label = "/".join(f"{k[-1]}:{v}" for k, v in q.items())
    return [
        Point("Figure 25", f"quota binds at {label}", "chips held", "binds",
              float(sum(tight["held"].values())), "peak chips held reach the quota", binds, reading,
              detail={"quotas": rows}),
        Point("Figure 25", f"lower of prefill/decode SLO satisfaction at {label}", "share", "0.14 / 0.11",
              low, "<= 0.50 and not rising as the quota shrinks", bool(low <= 0.5 and monotone), reading),
        Point("Figure 25", f"prefill energy efficiency, unlimited over {label}", "x", "up to 1.34", eff,
              "reported", None, reading),
    ]


def fig28_points(rows: list[dict]) -> list[Point]:
    """Figure 28: fail-over when the v6e (NPU-D) quota runs out, NeuScale's SLO near 100 %, decode cost gain."""
    ns = [r for r in rows if r["policy"] == "neuscale"]
    base = {r["rate_rpm"]: r for r in rows if r["policy"] == "base"}
    top, first = ns[-1], ns[0]
    reading = ("§5.7, Figure 28: Llama-3-8B on 32 NPU-A + 64 NPU-B + 64 NPU-D chips, cost objective, the 2024 Azure "
               "coding day from 12:00 rescaled to 60-960 req/min (week mean)")
    binds = top["held"]["NPU-D"] >= PROTOTYPE_QUOTA["NPU-D"] and first["held"]["NPU-D"] < PROTOTYPE_QUOTA["NPU-D"]
    fo = top["held"]["NPU-A"] + top["held"]["NPU-B"]
    fo_1x = first["held"]["NPU-A"] + first["held"]["NPU-B"]
    worst = min(1.0 - r["slo_violation_pct"] / 100.0 for r in ns)
    gains = [r["cost_efficiency_decode"] / base[r["rate_rpm"]]["cost_efficiency_decode"] - 1.0
             for r in ns if base[r["rate_rpm"]]["cost_efficiency_decode"] > 0]
    gain = max(gains) if gains else float("nan")
    on_d = first["best_fit_on_d"]
    return [
        Point("Figure 28", "share of tokens whose cost best fit is NPU-D (the lower phase)", "share",
              "1 (v6e best for both)", min(on_d.values()), ">= 0.9", bool(min(on_d.values()) >= 0.9),
              reading + "; the premise of the sweep: \"TPUv6e is the most cost-efficient chip for both prefill and "
              "decode\"", detail={"best_fit_on_d": on_d}),
        Point("Figure 28", "NPU-D quota exhausted at 16x, not at 1x", "chips held at 16x",
              "64 at 16x", float(top["held"]["NPU-D"]), "64 at 16x, < 64 at 1x", bool(binds), reading,
              detail={"sweep": rows}),
        Point("Figure 28", "NeuScale's NPU-A + NPU-B chips at 16x (at 1x)", "chips", "> 0 (0): fails over",
              float(fo), "0 at 1x, > 0 at 16x", bool(fo > 0 and fo_1x == 0), reading + f"; at 1x: {fo_1x}"),
        Point("Figure 28", "NeuScale's lowest SLO satisfaction over the sweep", "share", "near 1",
              worst, ">= 0.95", bool(worst >= 0.95), reading),
        Point("Figure 28", "largest decode cost-efficiency gain of NeuScale over Base", "share", "0.112 (up to)",
              gain, "> 0", bool(gain > 0), reading),
    ]


# ---------------------------------------------------------------------------------------------- report


def validate(*, quick: bool = False, hours: float | None = None, seed: int = 0, fidelity: str = "request",
             progress: bool = True) -> list[Point]:
    """Every point of the module docstring. ``quick``: fewer rates and shorter runs (a smoke run; its figures are
    not the reported ones); ``hours``: the focal scenario's length (default 24, quick 1); ``fidelity``: the focal
    runs' simulator (the Figure 16 and 28 sweeps are request-level)."""
    rates16 = (2.0, 8.0, 16.0, 32.0) if quick else FIG16_RATES_RPS
    rates28 = (60.0, 960.0) if quick else FIG28_RATES_RPM
    quotas = (None, FIG25_QUOTAS[-1]) if quick else FIG25_QUOTAS
    focal_h = hours if hours is not None else (1.0 if quick else 24.0)
    n = len(rates16) + 1 + len(quotas) + 2 * len(rates28)
    bar = None
    if progress:
        from servegym.progress import Progress

        bar = Progress(n, "npu validate", "run", what=f"Figures 16, 20, 25, 28 ({n} simulator runs"
                       f"{', quick' if quick else ''})")
    tick = (lambda: bar.update(1)) if bar is not None else None
    sweep16 = prototype_sweep(rates16, hours=0.5 if quick else 1.0, seed=seed, tick=tick)
    focal = focal_runs(focal_h, seed=seed, fidelity=fidelity, quotas=quotas, tick=tick)
    sweep28 = failover_sweep(rates28, hours=0.5 if quick else 2.0, seed=seed, tick=tick)
    if bar is not None:
        bar.close()
    return fig16_points(sweep16) + fig20_points(focal) + fig25_points(focal) + fig28_points(sweep28)


def _fmt(x: float) -> str:
    if x != x:
        return "nan"
    if math.isinf(x):
        return "inf"
    return f"{x:.3g}"


def validate_report(*, quick: bool, hours: float | None, seed: int, fidelity: str, as_json: bool) -> int:
    """``servegym npu validate``: print the points as JSON or a table; exit 1 when a point with a verdict fails
    (a miss is reported, not tuned away), else 0."""
    from servegym import report

    if hours is not None:
        check_range("--hours", hours, 0.5, 24.0)
    pts = validate(quick=quick, hours=hours, seed=seed, fidelity=fidelity, progress=True)
    failed = [p for p in pts if p.holds is False]
    if as_json:
        print(json.dumps([asdict(p) for p in pts], indent=1, default=float))
    else:
        headers = ["figure", "point", "unit", "paper", "ours", "rule", "holds"]
        cells = [[p.figure.replace("Figure ", "Fig. "), p.name, p.unit, p.paper, _fmt(p.ours), p.rule,
                  ("-" if p.holds is None else ("yes" if p.holds else "NO")) + (" (fitted)" if p.fitted else "")]
                 for p in pts]
        print(report.text_table(headers, cells))
        print("Every point is held out (nothing was fitted to it) unless marked fitted; --json adds how each is "
              "read and the runs behind it (servegym.envs.npu.reports.validate).")
        print(f"{len(pts) - len(failed)} of {len(pts)} points hold or are reported; {len(failed)} miss"
              + (" (quick run: shorter runs, fewer rates)" if quick else ""))
    return 1 if failed else 0
