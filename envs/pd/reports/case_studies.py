"""The provisioning case studies of the PD paper (§5.3 and App. D), replayed on the request-level simulator.

All three use the fixed-length workload (4096 input, 256 output tokens) and start at 3p2d:

* ``rate-drop`` (§5.3.1, Fig. 5 left): Poisson load at 60% of the 3p2d capacity, then 3.1 req/s, then a
  decode instance is removed (3p1d).
* ``decode-removal`` (§5.3.2, Fig. 5 right): 5.3 req/s throughout; one decode instance is removed for
  10 min, then restored; the queue grows while 3p1d is below the rate and drains after the restore.
* ``scale-down`` (App. D, Fig. 6): 3.6 req/s; 3p2d -> 3p1d -> 2p1d -> 1p1d; at 1p1d (capacity 2.3 req/s)
  the queue and TTFT grow without bound until the end of the run, about 14 min later.

The paper's figures do not give the phase lengths except where the text states them (10-min removal,
~14 min at 1p1d); the others are 10 min here (long enough that Poisson noise in the offered rate stays
near 2% per phase). The restored or added instances of these runs start
serving at once (``startup_delay_s = 0``): in the paper the GPUs of removed instances stay loaded and
idle (App. B.3), so no model load is needed; pass another delay to see its effect.

Each run samples the simulator every ``sample_s`` (default 2 s) and reports per-phase figures (median
TTFT and TPOT of the requests that arrived in the phase after a 60 s settling time, mean power) next to
the numbers the paper reports (:attr:`CaseStudy.paper`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from servegym.envs.pd.sim.model import PDModel, check_deployment, deployment_label
from servegym.envs.pd.sim.simulator import PDSimulator
from servegym.envs.pd.sim.workload_moments import WorkloadMoments
from servegym.envs.workload import FixedLengths, Requests

from servegym.errors import ConfigError, check_range, choice_error

SETTLE_S = 60.0  # s excluded at the start of each phase from its steady-state figures


@dataclass(frozen=True)
class Phase:
    """From ``start_s`` on: Poisson load ``rate_rps`` (req/s) and the target deployment (n_p, n_d)."""

    start_s: float
    rate_rps: float
    n_p: int
    n_d: int

    def __post_init__(self) -> None:
        check_range("phase.start_s", self.start_s, 0.0)
        check_range("phase.rate_rps", self.rate_rps, 0.0, 1e4)
        check_deployment(self.n_p, self.n_d)

    @property
    def label(self) -> str:
        return deployment_label(self.n_p, self.n_d)


@dataclass
class ScenarioResult:
    """Time series (one sample per ``sample_s``) and per-request records of one scenario run."""

    phases: tuple[Phase, ...]
    duration_s: float
    t_s: NDArray[np.float64]  # end of each sample window, s
    offered_rps: NDArray[np.float64]  # arrivals / window, req/s
    served_rps: NDArray[np.float64]  # completions / window, req/s
    n_p: NDArray[np.int64]
    n_d: NDArray[np.int64]
    queue_len: NDArray[np.int64]  # requests arrived and not yet prefilled (waiting for KV or prefill)
    ttft_med_s: NDArray[np.float64]  # median TTFT of first tokens in the window (NaN if none), s
    ttft_max_s: NDArray[np.float64]
    tpot_med_s: NDArray[np.float64]  # median TPOT of requests finished in the window, s
    power_w: NDArray[np.float64]  # mean deployment power in the window, W
    requests: dict[str, NDArray[Any]] = field(repr=False)  # PDSimulator.request_table()

    def phase_summary(self, i: int) -> dict[str, float | str]:
        """Steady figures of phase ``i`` (requests arriving after SETTLE_S in the phase; power likewise)."""
        ph = self.phases[i]
        end = self.phases[i + 1].start_s if i + 1 < len(self.phases) else self.duration_s
        t0 = min(ph.start_s + SETTLE_S, (ph.start_s + end) / 2)
        req = self.requests
        arr = req["arrival_s"]
        sel = (arr >= t0) & (arr < end) & np.isfinite(req["first_token_s"])
        ttft = req["first_token_s"][sel] - arr[sel]
        done = sel & np.isfinite(req["finish_s"]) & (req["output_tokens"] > 1)
        tpot = (req["finish_s"][done] - req["first_token_s"][done]) / (req["output_tokens"][done] - 1)
        win = (self.t_s > t0) & (self.t_s <= end)
        in_phase = (arr >= ph.start_s) & (arr < end)
        ttft_all = req["first_token_s"][in_phase & np.isfinite(req["first_token_s"])] - arr[
            in_phase & np.isfinite(req["first_token_s"])]
        return {
            "deployment": ph.label, "rate_rps": ph.rate_rps, "start_s": ph.start_s, "end_s": end,
            "ttft_median_s": float(np.median(ttft)) if ttft.size else float("nan"),
            "ttft_max_s": float(ttft_all.max()) if ttft_all.size else float("nan"),
            "tpot_median_ms": float(np.median(tpot)) * 1e3 if tpot.size else float("nan"),
            "power_w": float(self.power_w[win].mean()) if win.any() else float("nan"),
            "served_rps": float(self.served_rps[win].mean()) if win.any() else float("nan"),
            "queue_end": int(self.queue_len[win][-1]) if win.any() else 0,
        }

    def ttft_max_by_end_s(self) -> float:
        """Largest TTFT among requests that received their first token by the end of the run, s."""
        ft = self.requests["first_token_s"]
        ok = np.isfinite(ft)
        return float(np.max(ft[ok] - self.requests["arrival_s"][ok])) if ok.any() else float("nan")

    def drain_time_s(self, restore_phase: int, reference_phase: int) -> float:
        """Time from the start of ``restore_phase`` until the queue first falls back to the 95th percentile
        of its level in the steady part of ``reference_phase`` (s; inf if it never does)."""
        ref = self.phases[reference_phase]
        ref_end = self.phases[reference_phase + 1].start_s
        q_ref = float(np.percentile(self.queue_len[(self.t_s > ref.start_s + SETTLE_S) & (self.t_s <= ref_end)], 95))
        t_r = self.phases[restore_phase].start_s
        after = (self.t_s > t_r) & (self.queue_len <= q_ref)
        return float(self.t_s[after][0] - t_r) if after.any() else float("inf")


def run_scenario(model: PDModel, phases: tuple[Phase, ...] | list[Phase], duration_s: float, *,
                 seed: int = 0, sample_s: float = 2.0, startup_delay_s: float = 0.0,
                 isl: int = 4096, osl: int = 256, progress: bool = False) -> ScenarioResult:
    """Run a piecewise-constant Poisson load with deployment changes at the phase starts (s, req/s)."""
    phases = tuple(phases)
    if not phases or phases[0].start_s != 0:
        raise ConfigError("phases must start with a phase at start_s = 0")
    if any(b.start_s <= a.start_s for a, b in itertools.pairwise(phases)):
        raise ConfigError("phase start_s must be strictly increasing")
    check_range("duration_s", duration_s, phases[-1].start_s, 7 * 86_400.0, low_inclusive=False)
    check_range("sample_s", sample_s, 0.01, 3_600.0)
    rng = np.random.default_rng(seed)
    ends = [*(p.start_s for p in phases[1:]), duration_s]
    chunks = []
    for ph, end in zip(phases, ends, strict=True):
        n = int(rng.poisson(ph.rate_rps * (end - ph.start_s)))
        chunks.append(np.sort(rng.uniform(ph.start_s, end, n)))
    arrivals = np.concatenate(chunks)
    lin, lout = FixedLengths(isl, osl).sample(arrivals.size, rng)
    sim = PDSimulator(model, phases[0].n_p, phases[0].n_d, seed=seed, startup_delay_s=startup_delay_s)
    sim.submit(Requests(arrivals, lin, lout))
    grid = np.arange(sample_s, duration_s + 1e-9, sample_s)
    changes = {float(p.start_s): p for p in phases[1:]}
    cols: dict[str, list[float]] = {k: [] for k in ("offered", "served", "n_p", "n_d", "queue", "ttft_med",
                                                     "ttft_max", "tpot_med", "power")}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(grid), unit="sample", desc="simulating")
    t_prev = 0.0
    for t in grid:
        for ts in sorted(changes):
            if t_prev <= ts < t:  # apply a change exactly at its time (it closes a partial window)
                sim.advance(ts)
                sim.set_deployment(changes[ts].n_p, changes[ts].n_d)
        sim.advance(float(t))
        w = sim.window_metrics()
        span = float(t) - t_prev
        cols["offered"].append(w["arrived"] / span)
        cols["served"].append(w["finished"] / span)
        cols["n_p"].append(w["n_p"])
        cols["n_d"].append(w["n_d"])
        cols["queue"].append(w["queue_len"])
        cols["ttft_med"].append(float(np.median(w["ttft_s"])) if w["ttft_s"].size else np.nan)
        cols["ttft_max"].append(float(np.max(w["ttft_s"])) if w["ttft_s"].size else np.nan)
        cols["tpot_med"].append(float(np.median(w["tpot_s"])) if w["tpot_s"].size else np.nan)
        cols["power"].append(w["mean_power_w"])
        t_prev = float(t)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    # A change inside a window splits it; the energy of both parts is summed into the window above.
    return ScenarioResult(
        phases=phases, duration_s=float(duration_s), t_s=grid,
        offered_rps=np.asarray(cols["offered"]), served_rps=np.asarray(cols["served"]),
        n_p=np.asarray(cols["n_p"], dtype=np.int64), n_d=np.asarray(cols["n_d"], dtype=np.int64),
        queue_len=np.asarray(cols["queue"], dtype=np.int64), ttft_med_s=np.asarray(cols["ttft_med"]),
        ttft_max_s=np.asarray(cols["ttft_max"]), tpot_med_s=np.asarray(cols["tpot_med"]),
        power_w=np.asarray(cols["power"]), requests=sim.request_table())


@dataclass(frozen=True)
class CaseStudy:
    """A named scenario and the figures the paper reports for it."""

    name: str
    title: str
    source: str
    duration_s: float
    paper: dict[str, float]  # key figure -> paper value (units in the key)

    def phases(self, model: PDModel) -> tuple[Phase, ...]:
        if self.name == "rate-drop":
            r0 = 0.6 * model.capacity(3, 2).mu  # "60% of the serving capacity of 3p2d"
            return (Phase(0, r0, 3, 2), Phase(600, 3.1, 3, 2), Phase(1200, 3.1, 3, 1))
        if self.name == "decode-removal":
            return (Phase(0, 5.3, 3, 2), Phase(600, 5.3, 3, 1), Phase(1200, 5.3, 3, 2))
        return (Phase(0, 3.6, 3, 2), Phase(600, 3.6, 3, 1), Phase(1200, 3.6, 2, 1), Phase(1800, 3.6, 1, 1))

    def model_figures(self, model: PDModel) -> dict[str, float]:
        """The analytical model's values of the key figures it predicts (balanced-load power, operating-point
        TPOT and mean TTFT, capacities); figures it cannot give (medians of a transient, drain) are absent."""
        ph = self.phases(model)
        op = [model.operating_point(p.n_p, p.n_d, p.rate_rps) for p in ph]
        pw = [o.power_w for o in op]
        if self.name == "rate-drop":
            return {"power_delta_rate_drop_w": pw[1] - pw[0], "power_delta_decode_removal_w": pw[2] - pw[1],
                    "ttft_median_3p1d_s": op[2].ttft_s, "tpot_median_3p2d_ms": op[1].tpot_s * 1e3,
                    "tpot_median_3p1d_ms": op[2].tpot_s * 1e3}
        if self.name == "decode-removal":
            return {"power_delta_removal_w": pw[1] - pw[0], "capacity_3p1d_rps": model.capacity(3, 1).mu,
                    "ttft_median_before_s": op[0].ttft_s, "tpot_median_before_ms": op[0].tpot_s * 1e3,
                    "tpot_median_during_ms": op[1].tpot_s * 1e3, "power_after_minus_before_w": 0.0}
        return {"power_delta_decode_removal_w": pw[1] - pw[0], "power_delta_prefill_removal_w": pw[2] - pw[1],
                "power_delta_to_1p1d_w": pw[3] - pw[2], "tpot_median_3p2d_ms": op[0].tpot_s * 1e3,
                "tpot_median_3p1d_ms": op[1].tpot_s * 1e3, "ttft_median_3p1d_s": op[1].ttft_s,
                "ttft_median_2p1d_s": op[2].ttft_s, "capacity_1p1d_rps": model.capacity(1, 1).mu}

    def key_figures(self, res: ScenarioResult, model: PDModel) -> dict[str, float]:
        """Simulated key figures (W, s, ms, req/s as in the keys); ``model`` gives the analytical capacities."""
        s = [res.phase_summary(i) for i in range(len(res.phases))]
        f = {k: float(v) for k, v in _flat(s).items()}
        if self.name == "rate-drop":
            return {"power_delta_rate_drop_w": s[1]["power_w"] - s[0]["power_w"],
                    "power_delta_decode_removal_w": s[2]["power_w"] - s[1]["power_w"],
                    "ttft_median_3p1d_s": s[2]["ttft_median_s"],
                    "tpot_median_3p2d_ms": s[1]["tpot_median_ms"], "tpot_median_3p1d_ms": s[2]["tpot_median_ms"],
                    **f}
        if self.name == "decode-removal":
            return {"power_delta_removal_w": s[1]["power_w"] - s[0]["power_w"],
                    "capacity_3p1d_rps": s[1]["served_rps"],  # completions while overloaded
                    "ttft_median_before_s": s[0]["ttft_median_s"], "ttft_median_during_s": _median_ttft(res, 1),
                    "tpot_median_before_ms": s[0]["tpot_median_ms"], "tpot_median_during_ms": s[1]["tpot_median_ms"],
                    "drain_min": res.drain_time_s(2, 0) / 60.0, "power_after_minus_before_w": s[2]["power_w"] - s[0]["power_w"],
                    **f}
        return {"power_delta_decode_removal_w": s[1]["power_w"] - s[0]["power_w"],
                "power_delta_prefill_removal_w": s[2]["power_w"] - s[1]["power_w"],
                "power_delta_to_1p1d_w": s[3]["power_w"] - s[2]["power_w"],
                "tpot_median_3p2d_ms": s[0]["tpot_median_ms"], "tpot_median_3p1d_ms": s[1]["tpot_median_ms"],
                "ttft_median_3p1d_s": s[1]["ttft_median_s"], "ttft_median_2p1d_s": s[2]["ttft_median_s"],
                "ttft_max_2p1d_s": s[2]["ttft_max_s"], "capacity_1p1d_rps": s[3]["served_rps"],  # completions while overloaded
                "ttft_max_at_end_s": res.ttft_max_by_end_s(), **f}


def _flat(summaries: list[dict[str, float | str]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for i, s in enumerate(summaries):
        for k, v in s.items():
            if not isinstance(v, str):
                out[f"phase{i}_{k}"] = float(v)
    return out


def _median_ttft(res: ScenarioResult, i: int) -> float:
    """Median TTFT of every request that arrived in phase ``i`` (no settling: the queue builds throughout)."""
    ph = res.phases[i]
    end = res.phases[i + 1].start_s if i + 1 < len(res.phases) else res.duration_s
    req = res.requests
    sel = (req["arrival_s"] >= ph.start_s) & (req["arrival_s"] < end) & np.isfinite(req["first_token_s"])
    return float(np.median(req["first_token_s"][sel] - req["arrival_s"][sel]))


CASE_STUDIES: dict[str, CaseStudy] = {
    "rate-drop": CaseStudy(
        "rate-drop", "3p2d -> 3p1d after a rate drop (60% of 3p2d capacity -> 3.1 req/s)", "§5.3.1, Fig. 5 (left)",
        1800.0, {"power_delta_rate_drop_w": -270.0, "power_delta_decode_removal_w": -560.0,
                "ttft_median_3p1d_s": 0.55, "tpot_median_3p2d_ms": 23.0, "tpot_median_3p1d_ms": 28.0}),
    "decode-removal": CaseStudy(
        "decode-removal", "10-min decode removal at 5.3 req/s (3p2d -> 3p1d -> 3p2d)", "§5.3.2, Fig. 5 (right)",
        1800.0, {"power_delta_removal_w": -620.0, "capacity_3p1d_rps": 5.2, "ttft_median_before_s": 0.7,
                 "ttft_median_during_s": 8.5, "tpot_median_before_ms": 27.0, "tpot_median_during_ms": 39.0,
                 "drain_min": 1.3, "power_after_minus_before_w": 0.0}),
    "scale-down": CaseStudy(
        "scale-down", "3p2d -> 3p1d -> 2p1d -> 1p1d at 3.6 req/s", "App. D, Fig. 6",
        2640.0, {"power_delta_decode_removal_w": -520.0, "power_delta_prefill_removal_w": -180.0,
                 "power_delta_to_1p1d_w": -470.0, "tpot_median_3p2d_ms": 24.0, "tpot_median_3p1d_ms": 29.0,
                 "ttft_median_3p1d_s": 0.5, "ttft_median_2p1d_s": 0.9, "ttft_max_2p1d_s": 6.0,
                 "capacity_1p1d_rps": 2.3, "ttft_max_at_end_s": 320.0}),
}


def get_case_study(name: str) -> CaseStudy:
    if name not in CASE_STUDIES:
        raise choice_error("case study", name, CASE_STUDIES)
    return CASE_STUDIES[name]


def run_case_study(name: str, *, seed: int = 0, sample_s: float = 2.0, startup_delay_s: float = 0.0,
                   model: PDModel | None = None, progress: bool = False
                   ) -> tuple[CaseStudy, ScenarioResult, PDModel]:
    """Run a named case study (fixed 4096/256 workload); returns the study, its result and the model."""
    cs = get_case_study(name)
    model = PDModel(WorkloadMoments.fixed(4096, 256)) if model is None else model
    res = run_scenario(model, cs.phases(model), cs.duration_s, seed=seed, sample_s=sample_s,
                       startup_delay_s=startup_delay_s, progress=progress)
    return cs, res, model


def comparison_rows(cs: CaseStudy, res: ScenarioResult, model: PDModel) -> list[dict[str, float | str]]:
    """Key figures beside the paper's (simulated, paper, difference)."""
    figs = cs.key_figures(res, model)
    mod = cs.model_figures(model)
    return [{"figure": k, "simulated": figs[k], "model": mod.get(k, float("nan")), "paper": v,
             "difference": figs[k] - v} for k, v in cs.paper.items()]


def plot_case_study(cs: CaseStudy, res: ScenarioResult, path: str) -> None:
    """Rate, deployment, queue, TTFT, TPOT and power over time (matplotlib Agg, PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = res.t_s / 60.0
    fig, axes = plt.subplots(6, 1, figsize=(8, 12), sharex=True)
    ax = axes[0]
    smooth = max(1, round(30.0 / (res.t_s[1] - res.t_s[0]))) if res.t_s.size > 1 else 1

    def mean30(x: NDArray[np.float64]) -> NDArray[np.float64]:
        """Centred 30 s moving average (shorter at the ends, never padded with zeros)."""
        k = np.ones(smooth)
        return np.convolve(x, k, mode="same") / np.convolve(np.ones_like(x), k, mode="same")

    ax.plot(t, mean30(res.offered_rps), label="offered (30 s mean)")
    ax.plot(t, mean30(res.served_rps), label="completed (30 s mean)")
    ax.step([p.start_s / 60 for p in res.phases] + [res.duration_s / 60],
            [p.rate_rps for p in res.phases] + [res.phases[-1].rate_rps], where="post", color="k", lw=1,
            label="Poisson rate")
    ax.set_ylabel("req/s")
    ax.legend(fontsize=7, loc="lower left")
    ax = axes[1]
    ax.step(t, res.n_p, where="post", label="prefill $n_P$")
    ax.step(t, res.n_d, where="post", label="decode $n_D$")
    ax.set_ylabel("instances")
    ax.set_ylim(0, max(res.n_p.max(), res.n_d.max()) + 1)
    ax.legend(fontsize=7, loc="lower left")
    axes[2].plot(t, res.queue_len, color="C3")
    axes[2].set_ylabel("queue (req)")
    ax = axes[3]
    ax.semilogy(t, res.ttft_med_s, label="median")
    ax.semilogy(t, res.ttft_max_s, alpha=0.6, label="max")
    ax.set_ylabel("TTFT (s)")
    ax.legend(fontsize=7, loc="upper left")
    axes[4].plot(t, res.tpot_med_s * 1e3, color="C2")
    axes[4].set_ylabel("TPOT median (ms)")
    axes[5].plot(t, res.power_w, color="C1", lw=0.5, alpha=0.35, label=f"{res.t_s[0]:g} s mean")
    axes[5].plot(t, mean30(res.power_w), color="C1", lw=1.2, label="30 s mean")
    axes[5].legend(fontsize=7, loc="lower left")
    axes[5].set_ylabel("power (W)")
    axes[5].set_xlabel("time (min)")
    for ax in axes:
        for p in res.phases[1:]:
            ax.axvline(p.start_s / 60, color="0.6", ls=":", lw=0.8)
    fig.suptitle(f"{cs.title}\n(request-level simulator; paper {cs.source})", fontsize=10)
    from servegym.report import save_png

    save_png(fig, path)


def case_study_report(name: str, plot: str | None, seed: int, sample: float, startup_delay: float,
                      as_json: bool) -> int:
    """``servegym pd case-study``: replay a named case study; the phases and key figures vs the paper."""
    import json
    import sys

    from servegym.envs.pd.reports.common import finite

    get_case_study(name)  # validates the name before any work
    check_range("--sample", sample, 0.1, 600.0)
    check_range("--startup-delay", startup_delay, 0.0, 3_600.0)
    cs, res, model = run_case_study(name, seed=seed, sample_s=sample,
                                    startup_delay_s=startup_delay,
                                    progress=sys.stderr.isatty() and not as_json)
    rows = comparison_rows(cs, res, model)
    phases = [res.phase_summary(i) for i in range(len(res.phases))]
    if plot:
        plot_case_study(cs, res, plot)
    if as_json:
        print(json.dumps(finite({"case_study": cs.name, "title": cs.title, "source": cs.source, "seed": seed,
                                  "phases": phases, "figures": rows, "plot": plot}), indent=2, allow_nan=False))
        return 0
    print(f"{cs.title} -- paper {cs.source}")
    print(f"  {'phase':>5} {'deployment':>10} {'from (min)':>10} {'rate':>6} {'served':>7} {'TTFT p50 s':>10} "
          f"{'TTFT max s':>10} {'TPOT p50 ms':>11} {'power W':>8} {'queue':>6}")
    for i, s in enumerate(phases):
        print(f"  {i:>5} {s['deployment']:>10} {float(s['start_s']) / 60:>10.1f} {float(s['rate_rps']):>6.2f} "
              f"{float(s['served_rps']):>7.2f} {float(s['ttft_median_s']):>10.2f} {float(s['ttft_max_s']):>10.1f} "
              f"{float(s['tpot_median_ms']):>11.1f} {float(s['power_w']):>8.0f} {int(s['queue_end']):>6}")
    print(f"  {'key figure':<32} {'simulated':>10} {'model':>8} {'paper':>8}")
    for r in rows:
        print(f"  {r['figure']:<32} {float(r['simulated']):>10.2f} {float(r['model']):>8.2f} {float(r['paper']):>8.2f}")
    if plot:
        print(f"plot written to {plot}")
    return 0
