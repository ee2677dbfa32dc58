"""Reproduce the geo paper's §V-C studies (Figs. 4a, 5b, 6b) on our simulator and check its findings.

Studies (preset ``paper``: 4 regions x 4 DCs x 4 nodes x 8 A100-40GB; oracle OSLs; 1 seed; runs are
shorter than the paper's 200 s, see ``--fig4a-seconds`` etc.):

- fig4a: all ten policies at low, moderate and high load for Llama-3.1-8B (TP1, 512 engines) and
  Mixtral-8x7B (TP4, 128 engines); carbon saving vs RR and SLO violation (+ TTFT tails).
- fig5b: the facility MILP (and RR as its reference) with CI held at the 3 lowest- and 3 highest-CV
  hours of the ``geo-paper`` CI window and at its base hour, at the three loads, both models.
- fig6b: the facility MILP at moderate load with the provisioner period Δp in {0.5, 1, 2, 5, 10} s,
  synchronous and asynchronous polling, both models.

Every run's summary is written to ``benchmarks/results/geo_repro_<study>.csv`` as soon as its study
ends; ``--report-only`` rebuilds ``benchmarks/results/geo_reproduction.md`` and the PNGs from those
CSVs. Usage (heavy: run it in the background, niced)::

    nice .venv/bin/python benchmarks/geo_reproduction.py --workers 2
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from servegym.baselines.geo.registry import PAPER_POLICIES as PAPER_POLICIES_ORDER
from servegym.envs.geo.reports.compare import plot_tradeoff, run_one, summarize
from servegym.envs.geo.sim.config import preset

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = ("Llama-3.1-8B", "Mixtral-8x7B")
MODEL_LABEL = {"Llama-3.1-8B": "Llama-3.1-8B", "Mixtral-8x7B": "Mixtral-8x7B"}
LOADS = ("low", "moderate", "high")
POLLS_S = (0.5, 1.0, 2.0, 5.0, 10.0)
WINDOW_POLICIES = ("ilp", "iter-ilp", "milp")

Task = tuple[dict[str, Any], Any, str, int]  # (tags, config, policy spec, seed)


def _run(task: Task) -> dict[str, Any]:
    tags, cfg, spec, seed = task
    row = run_one(cfg, spec, seed)
    row.update(tags)
    return row


def run_tasks(tasks: list[Task], workers: int, desc: str) -> pd.DataFrame:
    """Run the tasks (window schedulers first, so the pool stays busy to the end); rows in task order."""
    from tqdm import tqdm

    order = sorted(range(len(tasks)), key=lambda i: tasks[i][2] not in WINDOW_POLICIES)
    rows: dict[int, dict[str, Any]] = {}
    with tqdm(total=len(tasks), desc=desc, unit="run", file=sys.stderr) as bar:
        if workers <= 1:
            for i in order:
                rows[i] = _run(tasks[i])
                bar.update(1)
        else:
            with ProcessPoolExecutor(max_workers=workers) as ex:
                futs = {ex.submit(_run, tasks[i]): i for i in order}
                from concurrent.futures import as_completed

                for f in as_completed(futs):
                    rows[futs[f]] = f.result()
                    bar.update(1)
    return pd.DataFrame([rows[i] for i in range(len(tasks))])


def add_saving(df: pd.DataFrame, group: Iterable[str]) -> pd.DataFrame:
    """``carbon_saving_pct`` of every run against RR in the same group (same scenario and seed)."""
    keys = [*group, "seed"]
    ref = df[df["policy"] == "rr"].set_index(keys)["carbon_g"]
    idx = pd.MultiIndex.from_frame(df[keys])
    df = df.copy()
    df["carbon_saving_pct"] = 100.0 * (1.0 - df["carbon_g"].to_numpy() / ref.reindex(idx).to_numpy())
    return df


# -- studies ---------------------------------------------------------------------------------
def fig4a(args: argparse.Namespace) -> pd.DataFrame:
    tasks: list[Task] = []
    for model in MODELS:
        for load in LOADS:
            cfg = preset("paper", model=model, load=load, duration_s=args.fig4a_seconds, osl_mode="oracle")
            for spec in PAPER_POLICIES_ORDER:
                for seed in range(args.seeds):
                    tasks.append(({"model": model, "load": load}, cfg, spec, seed))
    return add_saving(run_tasks(tasks, args.workers, "fig4a"), ["model", "load"])


def fig5b(args: argparse.Namespace) -> pd.DataFrame:
    from servegym.envs.grid import get_topology

    topo = get_topology("geo-paper")
    cv = topo.cv_by_hour()
    lo, hi = topo.extreme_cv_hours(3)
    hours = [("lowest", h) for h in lo] + [("base", pd.Timestamp(topo.base_hour))] + [("highest", h) for h in hi]
    tasks: list[Task] = []
    for model in MODELS:
        for load in LOADS:
            for kind, h in hours:
                cfg = preset("paper", model=model, load=load, duration_s=args.fig5b_seconds, osl_mode="oracle",
                             ci_start=h.isoformat())
                tags = {"model": model, "load": load, "hour_kind": kind, "hour": h.isoformat(), "cv": float(cv.loc[h])}
                for spec in ("rr", "milp"):
                    tasks.append((tags, cfg, spec, 0))
    return add_saving(run_tasks(tasks, args.workers, "fig5b"), ["model", "load", "hour"])


def fig6b(args: argparse.Namespace) -> pd.DataFrame:
    tasks: list[Task] = []
    for model in MODELS:
        for mode in ("sync", "async"):
            for dp in POLLS_S:
                cfg = preset("paper", model=model, load="moderate", duration_s=args.fig6b_seconds, osl_mode="oracle",
                             poll_interval_s=dp, poll_mode=mode)
                tags = {"model": model, "poll_mode": mode, "poll_s": dp}
                for spec in ("rr", "milp"):
                    tasks.append((tags, cfg, spec, 0))
    return add_saving(run_tasks(tasks, args.workers, "fig6b"), ["model", "poll_mode", "poll_s"])


STUDIES = {"fig4a": fig4a, "fig5b": fig5b, "fig6b": fig6b}


# -- paper numbers (§V-C text; the figures' other points are not given as numbers) -------------
PAPER_FIG4A = """\
| load | paper (§V-C text) |
|---|---|
| low | all carbon-aware policies except greedy α=0 and Green-LLM within 1.3% violation; facility MILP saves the most, 53.8–59.6% across models |
| moderate | greedy α=0 (= MOER) saves about as much as the ILPs/MILP but violates up to 6.9% (dense) and 44.8% (Mixtral); greedy α=0.9 saves ≤ 3% with negligible violation; ILPs, MILP and greedy α=0.5 save up to 54% within 1.9% violation (dense); Green-LLM comparable savings, up to 7.2% violation; Mixtral: MILP saves up to 8.6 pp more than those at 1.3% violation |
| high | best savings shrink to 32–38%; greedy α=0 saves 7.3 pp more than α=0.5 but +12.1 pp violations; greedy α=0.9 emits more than RR (dense); ILP/MILP save up to 32.8% (dense) / 35.0% (Mixtral) at ≤ 12.5% / ≤ 2.4% violation; Green-LLM ~5 pp more saving (dense) but up to 30.7% violation; Mixtral: Green-LLM 7.6 pp less than MILP at 25.6% violation |
| high, TTFT (Fig. 4b) | dense: greedy p50 ≈ 0.5 s, ILP/MILP p50 ≤ 1.2 s, iter-ILP 1.8 s, Green-LLM 0.9 s; p99 ≤ 3 s (greedy), ≤ 3.6 s (ILP, MILP, Green-LLM), 7.5 s (iter-ILP). Mixtral: greedy α=0 p50 3.3 s, ILP/MILP p50 ≤ 0.7 s; p99 up to 8.8 s (greedy α≤0.5, Green-LLM), ≤ 2.2 s (ILP/MILP) |
"""
#: Fig. 5b, facility MILP saving (%) at the lowest (CV 0.31) and highest (CV 0.94) CV hour of 2021–2024.
PAPER_FIG5B = {("Llama-3.1-8B", "low"): (49, 59), ("Llama-3.1-8B", "moderate"): (34, 56), ("Llama-3.1-8B", "high"): (13, 39),
               ("Mixtral-8x7B", "low"): (44, 55), ("Mixtral-8x7B", "moderate"): (39, 55), ("Mixtral-8x7B", "high"): (24, 45)}


#: Where and why our numbers differ (written against the committed run; one seed, short runs).
DIFFERENCES = """\
## Where we differ from the paper, and why

- **Run length and seeds.** 60 s (Fig. 4a, 6b) and 30 s (Fig. 5b) of arrivals instead of 200 s, one
  seed, on a shared 2-core machine (the paper: 64 cores). The first ~15 s are ramp-up and are inside our
  averages; queues that grow for the whole run (Green-LLM) are shorter than in a 200 s run.
- **Greedy (and MOER) count their own placements (since 2026-12-02), with the paper's feasibility
  test only.** Before, our greedy was snapshot-only: every request of a 1 s poll period saw the same
  snapshot and herded onto the greenest feasible DC, queueing on its batch cap (Llama moderate: α=0 55%
  and α=0.5 42% violations, nearly all TTFT misses; paper ≤ 6.9% and ≤ 1.9%). `baselines/geo/greedy.py`
  now projects the scheduler's own placements since each DC's poll (counted R times, as least-loaded
  and the window ILPs assume) onto B_d/Q_d with the iterative ILP's projection, and keeps a DC when the
  estimated TTFT (which includes the wait for a batch slot) and TPOT on that projected snapshot meet
  the SLO, as §IV-A states. (An intermediate version also required batch-slot headroom
  H_d(t) − R·n_d ≥ 1; it held every greedy violation ≤ 1.2% and was dropped as not in the paper.)
  Greedy α=0 now violates 5.7–6.8% in every cell but Llama low (0.16%), nearly all TTFT misses: it
  fills the greenest DC until the projected queue wait reaches the 3 s TTFT budget, so requests
  near that edge miss it when the estimate is short (estimator error, other schedulers' placements;
  not separated here). Llama moderate: α=0 saves 53.6% at 5.8% violation
  (paper: ≤ 6.9%), α=0.5 42.5% at 0.53% (paper ≤ 1.9%), α=0.9 6.0% at 0.01% (paper: ≤ 3% saving).
  Mixtral moderate α=0: 6.8% (paper: 44.8%), so our Mixtral greedy violates far less than the paper's.
  At high load α=0 saves 6.9 pp (Llama) and 20.2 pp (Mixtral) more than α=0.5 at +5.3 pp and
  +0.45 pp violations (paper, dense: +7.3 pp saving, +12.1 pp violations); α=0 high-load savings are
  21.3% (Llama) and 38.1% (Mixtral). Not tuned to the paper. The other policies' rows of this rerun
  equal the previous run's.
- **Facility MILP (fixed 2026-12-02).** Llama 67.2/53.2/20.2% (the ILP 67.1/53.6/20.8%), Mixtral
  56.3/52.6/35.1% at low/moderate/high (the ILP 57.9/53.8/37.6%; paper: 35.0% at high load, and up to
  8.6 pp *above* the other policies at moderate load, which we do not reproduce: ours is 1.2 pp below
  the ILP). Two accounting errors had made asleep, dirtier DCs look cheap on Mixtral (11-29% savings):
  an asleep DC's per-request cost lost its whole fixed decode-step share while f_d added back only the
  part above idle power, and the idle power was multiplied by TP a second time (1152 W instead of 288 W
  per TP4 engine, which made f_d = 0). Our f_d charges every idle engine of the DC for one request
  lifetime (the DC's round-robin soon runs them all), an upper bound of what a window that sends fewer
  requests than idle engines wakes; that keeps some green asleep DCs asleep and is why the MILP trails
  the ILP slightly on Mixtral (TP4: 8 engines per DC) and not on Llama (every DC awake).
- **Green-LLM**: on Llama it violates 19–21% at every load (paper: up to 7.2% moderate, 30.7% high);
  on Mixtral it meets the SLO but saves little at high load (3% vs the paper's MILP − 7.6 pp). Our port
  maps the hourly token budget to the engine batch limit; the budget's level decides the split.
- **High-load savings on Llama are lower**: the MILP saves 20.2% (paper 29.2–32.8%), the best policy
  21.3% (greedy α=0, at 5.7% violation; the ILPs 20.8%; paper 32–38%); greedy α=0.9 saves 0.8% where the paper finds it emits more than RR.
  Our green DCs saturate earlier (engine calibration and the 2022 CI at the base hour, not tuned).
- **CI window (Fig. 5b)**: our CI data for `geo-paper` covers 2022 only, so the CV spans 0.44–0.82
  (paper: 2021–2024, 0.31–0.94); the direction and magnitudes are close to the paper's: Llama low
  62→69%, moderate 46→60% (paper 49→59%, 34→56%), Mixtral low 54→60%, moderate 47→58% (paper 44→55%,
  39→55%); at high load Llama 20→26% (paper 13→39%), Mixtral 33→51% (paper 24→45%).
- **Staleness (Fig. 6b) hurts far less**: the MILP's violations rise from 0–1.6% (Δp ≤ 2 s) to 2.5–6.1%
  at 10 s, against the paper's 10.5–32% already at 5 s. Our headroom H_d credits the batch drain over
  the snapshot's age (`baselines/geo`), which partly compensates stale loads; instead the Llama
  savings fall at long periods (53% → 24% at 10 s) as the MILP stays conservative. Async polling is
  no better than sync, as in the paper.
- **Scheduling overhead** is modelled (a fitted cost per HiGHS solve, `baselines/geo/solve_time.json`),
  a few ms per request (iter-ILP ~13 ms at high load); the paper measures p99s of 0.5–6.5 s on its
  solver setup, which is why our iter-ILP p99 TTFT (3.0 s) is far below its 7.5 s.
"""

# -- report ----------------------------------------------------------------------------------
def _f(x: float, d: int = 1) -> str:
    return "n/a" if x is None or not math.isfinite(float(x)) else f"{float(x):.{d}f}"


def _spearman(x: Any, y: Any) -> float:
    from scipy import stats

    if len(x) < 3 or np.ptp(np.asarray(x, dtype=float)) == 0 or np.ptp(np.asarray(y, dtype=float)) == 0:
        return float("nan")
    return float(stats.spearmanr(x, y).statistic)


def report_fig4a(df: pd.DataFrame, lines: list[str], verdicts: list[tuple[str, str, str]]) -> None:
    dur = df["duration_s"].iloc[0] if "duration_s" in df else float("nan")
    lines += ["## Fig. 4a: carbon saving vs SLO violation, all policies", "",
              f"Preset `paper`, {dur:g} s of Poisson arrivals per run (the paper: 200 s), drain up to 120 s, oracle OSLs, "
              f"seed(s) {sorted(set(df['seed']))}. Saving vs RR at the same load and seed; violation = % of requests "
              "missing TTFT 3 s or TPOT (100 ms Llama, 200 ms Mixtral); sched. = mean modelled scheduling delay per "
              "request (ms).", ""]
    for model in MODELS:
        for load in LOADS:
            g = df[(df["model"] == model) & (df["load"] == load)]
            if g.empty:
                continue
            s = summarize(g)
            lines += [f"### {MODEL_LABEL[model]}, {load} load ({g['rate_rps'].iloc[0]:g} req/s)", "",
                      "| policy | carbon (g) | saving vs RR (%) | SLO viol. (%) | TTFT p50/p90/p99 (s) | sched. (ms) |",
                      "|---|---:|---:|---:|---:|---:|"]
            for _, r in s.iterrows():
                lines.append(f"| {r['policy']} | {_f(r['carbon_g'])} | {_f(r['carbon_saving_pct'])} | "
                             f"{_f(r['slo_violation_pct'], 2)} | {_f(r['ttft_p50_s'], 2)} / {_f(r['ttft_p90_s'], 2)} / "
                             f"{_f(r['ttft_p99_s'], 2)} | {_f(r['sched_overhead_ms'], 2)} |")
            lines.append("")
    lines += ["![Fig. 4a reproduction](geo_repro_fig4a.png)", "", "Paper, for comparison:", "", PAPER_FIG4A, ""]
    _plot_fig4a(df)

    def cell(model: str, load: str, pol: str, m: str) -> float:
        g = df[(df["model"] == model) & (df["load"] == load) & (df["policy"] == pol)]
        return float(g[m].mean()) if len(g) else float("nan")

    # 1. savings shrink as load grows (facility MILP and best carbon-aware policy).
    ok_milp, ok_best, parts = True, True, []
    for model in MODELS:
        milp = [cell(model, ld, "milp", "carbon_saving_pct") for ld in LOADS]
        best = [max(cell(model, ld, p, "carbon_saving_pct") for p in PAPER_POLICIES_ORDER if p not in ("rr", "ll"))
                for ld in LOADS]
        ok_milp &= milp[0] >= milp[1] >= milp[2]
        ok_best &= best[0] >= best[1] >= best[2]
        parts.append(f"{MODEL_LABEL[model]}: MILP {'/'.join(_f(v) for v in milp)}%, best policy "
                     f"{'/'.join(_f(v) for v in best)}% (low/moderate/high)")
    verdict = ("holds" if ok_milp and ok_best else "holds for the MILP, not for the best policy" if ok_milp
               else "holds for the best policy, not for the MILP" if ok_best else "does not hold")
    verdicts.append(("savings vs RR shrink as load grows", verdict, "; ".join(parts)))
    # 2. greedy alpha-monotonicity.
    n_sav = n_vio = n = 0
    bad = []
    for model in MODELS:
        for ld in LOADS:
            sav = [cell(model, ld, f"greedy:{a}", "carbon_saving_pct") for a in ("0", "0.5", "0.9")]
            vio = [cell(model, ld, f"greedy:{a}", "slo_violation_pct") for a in ("0", "0.5", "0.9")]
            n += 1
            s_ok = sav[0] >= sav[1] >= sav[2]
            v_ok = vio[0] >= vio[1] >= vio[2]
            n_sav += s_ok
            n_vio += v_ok
            if not (s_ok and v_ok):
                bad.append(f"{MODEL_LABEL[model]} {ld}: savings {'/'.join(_f(v) for v in sav)}%, violations "
                           f"{'/'.join(_f(v, 2) for v in vio)}% (α=0/0.5/0.9)")
    verdicts.append(("greedy savings rise and violations grow as α falls",
                     "holds" if n_sav == n_vio == n else ("holds in savings; violations partly" if n_sav == n else "does not hold"),
                     f"savings monotone in {n_sav}/{n} model×load cells, violations in {n_vio}/{n}" +
                     (("; exceptions: " + "; ".join(bad)) if bad else "")))
    # 3. MILP violations far below greedy alpha=0 at high load ("far": under half).
    parts, ok_all = [], True
    for model in MODELS:
        m, g0 = cell(model, "high", "milp", "slo_violation_pct"), cell(model, "high", "greedy:0", "slo_violation_pct")
        ok_all &= m < 0.5 * g0
        parts.append(f"{MODEL_LABEL[model]}: MILP {_f(m, 2)}% vs greedy α=0 {_f(g0, 2)}%")
    verdicts.append(("the MILP's violations are far below greedy α=0's at high load (< half)",
                     "holds" if ok_all else "does not hold", "; ".join(parts)))


def _plot_fig4a(df: pd.DataFrame) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(MODELS), len(LOADS), figsize=(15, 8.5), squeeze=False)
    for i, model in enumerate(MODELS):
        for j, load in enumerate(LOADS):
            g = df[(df["model"] == model) & (df["load"] == load)]
            if g.empty:
                axes[i][j].set_visible(False)
                continue
            plot_tradeoff(summarize(g), "", title=f"{MODEL_LABEL[model]}, {load} ({g['rate_rps'].iloc[0]:g} req/s)",
                          ax=axes[i][j])
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=10, fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(RESULTS / "geo_repro_fig4a.png", dpi=110)
    plt.close(fig)


def report_fig5b(df: pd.DataFrame, lines: list[str], verdicts: list[tuple[str, str, str]]) -> None:
    milp = df[df["policy"] == "milp"]
    dur = df["duration_s"].iloc[0] if "duration_s" in df else float("nan")
    lines += ["## Fig. 5b: facility MILP saving vs the CV of CI across DCs", "",
              f"CI held at each hour (the 3 lowest- and 3 highest-CV hours of the `geo-paper` CI window, 2022, and its "
              f"base hour); {dur:g} s runs, RR at the same hour as reference. The paper's window is 2021–2024 "
              "(CV 0.31 to 0.94); ours spans 2022 only, so its extremes are less extreme.", "",
              "| model | load | hour (UTC) | kind | CV | MILP saving (%) | MILP viol. (%) | RR viol. (%) | paper saving lowest → highest CV (%) |",
              "|---|---|---|---|---:|---:|---:|---:|---|"]
    rr = df[df["policy"] == "rr"].set_index(["model", "load", "hour"])["slo_violation_pct"]
    parts, ok_all = [], True
    for model in MODELS:
        for load in LOADS:
            g = milp[(milp["model"] == model) & (milp["load"] == load)].sort_values("cv")
            if g.empty:
                continue
            pl, ph = PAPER_FIG5B[(model, load)]
            for _, r in g.iterrows():
                lines.append(f"| {MODEL_LABEL[model]} | {load} | {r['hour'][:16]} | {r['hour_kind']} | {r['cv']:.3f} | "
                             f"{_f(r['carbon_saving_pct'])} | {_f(r['slo_violation_pct'], 2)} | "
                             f"{_f(rr.loc[(model, load, r['hour'])], 2)} | {pl} → {ph} |")
            rho = _spearman(g["cv"], g["carbon_saving_pct"])
            lo = g[g["hour_kind"] == "lowest"]["carbon_saving_pct"].mean()
            hi = g[g["hour_kind"] == "highest"]["carbon_saving_pct"].mean()
            ok = hi > lo and rho > 0
            ok_all &= ok
            parts.append(f"{MODEL_LABEL[model]} {load}: {_f(lo)}% → {_f(hi)}% (ρ = {_f(rho, 2)})")
    lines += ["", "![Fig. 5b reproduction](geo_repro_fig5b.png)", ""]
    verdicts.append(("savings grow with the CV of CI (highest-CV hours vs lowest, Spearman ρ over 7 hours)",
                     "holds" if ok_all else "does not hold", "; ".join(parts)))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(MODELS), figsize=(11, 4), squeeze=False)
    for j, model in enumerate(MODELS):
        ax = axes[0][j]
        for load in LOADS:
            g = milp[(milp["model"] == model) & (milp["load"] == load)].sort_values("cv")
            ax.plot(g["cv"], g["carbon_saving_pct"], "o-", label=f"{load} (ours)")
            pl, ph = PAPER_FIG5B[(model, load)]
            ax.plot([0.31, 0.94], [pl, ph], "x--", alpha=0.5, label=f"{load} (paper, extremes)")
        ax.set_xlabel("CV of CI across DCs")
        ax.set_ylabel("facility MILP saving vs RR (%)")
        ax.set_title(MODEL_LABEL[model])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(RESULTS / "geo_repro_fig5b.png", dpi=110)
    plt.close(fig)


def report_fig6b(df: pd.DataFrame, lines: list[str], verdicts: list[tuple[str, str, str]]) -> None:
    milp = df[df["policy"] == "milp"]
    dur = df["duration_s"].iloc[0] if "duration_s" in df else float("nan")
    lines += ["## Fig. 6b: SLO violation vs the polling period Δp (moderate load, facility MILP)", "",
              f"{dur:g} s runs; sync: every DC polled at k·Δp; async: DC d at k·Δp + d·Δp/16. Paper: violation ≤ 8.2% "
              "for Δp ≤ 2 s on both models, 10.5–32% at 5 s; async no consistent benefit.", "",
              "| model | Δp (s) | sync viol. (%) | async viol. (%) | sync saving (%) | async saving (%) |",
              "|---|---:|---:|---:|---:|---:|"]
    parts, ok_end, ok_rho = [], True, True
    for model in MODELS:
        g = milp[milp["model"] == model]
        for dp in POLLS_S:
            s = g[(g["poll_s"] == dp) & (g["poll_mode"] == "sync")]
            a = g[(g["poll_s"] == dp) & (g["poll_mode"] == "async")]
            lines.append(f"| {MODEL_LABEL[model]} | {dp:g} | {_f(s['slo_violation_pct'].mean(), 2)} | "
                         f"{_f(a['slo_violation_pct'].mean(), 2)} | {_f(s['carbon_saving_pct'].mean())} | "
                         f"{_f(a['carbon_saving_pct'].mean())} |")
        for mode in ("sync", "async"):
            h = g[g["poll_mode"] == mode].sort_values("poll_s")
            rho = _spearman(h["poll_s"], h["slo_violation_pct"])
            first, last = h["slo_violation_pct"].iloc[0], h["slo_violation_pct"].iloc[-1]
            ok_end &= bool(last > first)
            ok_rho &= bool(rho > 0)
            parts.append(f"{MODEL_LABEL[model]} {mode}: {_f(first, 2)}% at 0.5 s → {_f(last, 2)}% at 10 s (ρ = {_f(rho, 2)})")
    lines += ["", "![Fig. 6b reproduction](geo_repro_fig6b.png)", ""]
    verdict = ("holds" if ok_end and ok_rho else
               "holds end to end (10 s above 0.5 s in every series), not monotone in every series" if ok_end
               else "does not hold")
    verdicts.append(("staler snapshots raise violations (Spearman ρ over Δp)", verdict, "; ".join(parts)))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for model in MODELS:
        for mode, ls in (("sync", "o-"), ("async", "s--")):
            h = milp[(milp["model"] == model) & (milp["poll_mode"] == mode)].sort_values("poll_s")
            ax.plot(h["poll_s"], h["slo_violation_pct"], ls, label=f"{MODEL_LABEL[model]} {mode}")
    ax.set_xscale("log")
    ax.set_xlabel("polling period Δp (s)")
    ax.set_ylabel("SLO violation (%)")
    ax.set_title("facility MILP, moderate load")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "geo_repro_fig6b.png", dpi=110)
    plt.close(fig)


def write_report(meta: str = "") -> Path:
    lines = ["# Geo paper reproduction (§V-C: Figs. 4a, 5b, 6b)", "",
             "Produced by `benchmarks/geo_reproduction.py` (rerun the report alone with `--report-only`). "
             "Our simulator, calibrated engine profiles and baselines; no parameter was tuned to these numbers.", ""]
    if meta:
        lines += [meta, ""]
    cost = []
    for name in STUDIES:
        p = RESULTS / f"geo_repro_{name}.csv"
        if p.exists():
            d = pd.read_csv(p, usecols=["wall_s"])
            cost.append(f"{name} {len(d)} runs, {d['wall_s'].sum() / 60:.1f} min summed over runs")
    if cost:
        lines += ["Cost (niced, 2 worker processes, machine shared with other jobs): " + "; ".join(cost) + ".", ""]
    verdicts: list[tuple[str, str, str]] = []
    body: list[str] = []
    for name, fn in (("fig4a", report_fig4a), ("fig5b", report_fig5b), ("fig6b", report_fig6b)):
        p = RESULTS / f"geo_repro_{name}.csv"
        if p.exists():
            fn(pd.read_csv(p), body, verdicts)
        else:
            body += [f"## {name}: not run", ""]
    lines += ["## The paper's findings, in direction", "", "| finding | verdict | ours |", "|---|---|---|"]
    lines += [f"| {a} | **{b}** | {c} |" for a, b, c in verdicts]
    lines += ["", DIFFERENCES, *body]
    out = RESULTS / "geo_reproduction.md"
    out.write_text("\n".join(lines) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--studies", default="fig4a,fig5b,fig6b")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--fig4a-seconds", type=float, default=60.0)
    ap.add_argument("--fig5b-seconds", type=float, default=30.0)
    ap.add_argument("--fig6b-seconds", type=float, default=60.0)
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        for name in args.studies.split(","):
            t0 = time.perf_counter()
            df = STUDIES[name](args)
            secs = {"fig4a": args.fig4a_seconds, "fig5b": args.fig5b_seconds, "fig6b": args.fig6b_seconds}[name]
            df["duration_s"] = secs
            df.to_csv(RESULTS / f"geo_repro_{name}.csv", index=False)
            print(f"{name}: {len(df)} runs in {time.perf_counter() - t0:.0f} s wall", file=sys.stderr)
            write_report()
    meta = (f"Machine: {platform.machine()}, 2 shared CPUs, Python {platform.python_version()}; "
            f"generated {pd.Timestamp.now(tz='UTC').strftime('%Y-%m-%dT%H:%MZ')}.")
    print(write_report(meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
