"""Policy comparison on one geo scenario: policies x seeds -> tidy tables, CSV/markdown, Fig. 4a scatter.

:func:`run_comparison` runs every policy spec (``servegym.baselines.geo.registry``) on every seed
of one :class:`~servegym.envs.geo.sim.config.GeoConfig` and returns a tidy DataFrame, one row per
(policy, seed), with the run's summary (``servegym.envs.geo.sim.metrics``) and
``carbon_saving_pct``: ``100 * (1 - carbon_g / carbon_g of RR on the same seed)``. RR is always
run as the reference, even when not asked for (it is then dropped from the returned rows only if
``keep_reference=False``).

:func:`summarize` averages over seeds: one row per policy with the means of :data:`METRICS` and,
for more than one seed, a two-sided 95% Student-t half-width ``<metric>_ci95``.

Units: carbon gCO2, percentages in %, TTFT in s, scheduling overhead in ms (the mean modelled
scheduling delay charged per placed request; for per-request policies that is per decision, for
the window schedulers it is the solve time of the window a request was placed in).

OSL source (``config.osl_mode``): ``oracle`` (the true OSL), ``mean`` (the workload's mean) or
``predicted`` (the shipped MLP of :mod:`servegym.envs.geo.sim.osl`). The MLP knows four applications
(the traces it was trained on); a workload outside them is predicted as its nearest application by
task (:data:`~servegym.envs.geo.sim.osl.OSL_APP_PROXY`: CNN-DailyMail summarization -> ``arxiv`` summarization, OpenOrca
instructions -> ``azure-conv`` conversation), which the result tables name.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from servegym.envs.geo.reports.plots import plot_tradeoff
from servegym.envs.geo.sim.config import GeoConfig
from servegym.envs.geo.sim.osl import OSL_APP_PROXY, osl_app, osl_predictor_for  # noqa: F401 (re-exported)

from servegym import report
from servegym.errors import ConfigError

#: The reported metrics, in table order (means over seeds in :func:`summarize`).
METRICS: tuple[str, ...] = ("carbon_g", "carbon_saving_pct", "slo_violation_pct", "ttft_p50_s", "ttft_p90_s",
                            "ttft_p99_s", "sched_overhead_ms")
REFERENCE = "rr"

_RUN_COLUMNS: tuple[str, ...] = (
    "policy", "seed", "osl_mode", "decision_mode", "rate_rps", "carbon_g", "carbon_saving_pct", "energy_kwh",
    "slo_violation_pct", "ttft_violation_pct", "tpot_violation_pct", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s",
    "tpot_p50_s", "tpot_p90_s", "tpot_p99_s", "sched_overhead_ms", "arrived", "finished", "unfinished",
    "decisions", "decision_calls", "complete", "wall_s",
)


def check_policies(policies: Sequence[str]) -> list[str]:
    """Normalized, de-duplicated specs. Unknown specs raise one ConfigError naming every bad spec at once
    (with the registry's reason or a near-miss hint each) and listing the allowed specs."""
    from servegym.baselines.geo.registry import POLICY_SPECS, WINDOW_POLICIES, make_policy

    from servegym.errors import listing

    out: list[str] = []
    bad: list[str] = []
    for spec in policies:
        s = str(spec).strip().lower()
        if not s:
            continue
        try:
            make_policy(s)
        except ConfigError as exc:  # the registry's message: "policy spec 'x' is not allowed (why); allowed: ..."
            bad.append(str(exc).split("; allowed:", 1)[0].removeprefix("policy spec "))
            continue
        if s not in out:
            out.append(s)
    if len(bad) == 1:
        make_policy(str(bad[0]).split(" ", 1)[0].strip("'"))  # the registry's own one-line message
    if bad:
        raise ConfigError(f"policy specs not allowed: {'; '.join(bad)}; allowed: {listing(POLICY_SPECS)}, and "
                          f"'@measured' after {listing(WINDOW_POLICIES)}")
    if not out:
        raise ConfigError(f"policies is empty; allowed: a comma-separated list of {listing(POLICY_SPECS)}")
    return out


def run_one(config: GeoConfig, spec: str, seed: int) -> dict[str, Any]:
    """One run of policy ``spec`` on ``config`` with ``seed``: the summary dict plus ``wall_s``."""
    import time

    from servegym.baselines.geo.registry import make_policy, policy_config
    from servegym.envs.geo.sim.cluster import GeoSimulation

    policy = make_policy(spec)
    cfg = policy_config(config, policy)
    t0 = time.perf_counter()
    sim = GeoSimulation(cfg, seed=seed, osl_predictor=osl_predictor_for(cfg))
    res = sim.run(policy)
    out = dict(res.summary)
    out["policy"] = spec
    out["seed"] = int(seed)
    out["wall_s"] = time.perf_counter() - t0
    return out


def _run_task(task: tuple[GeoConfig, str, int]) -> dict[str, Any]:
    return run_one(*task)


def _seed_list(seeds: int | Sequence[int]) -> list[int]:
    if isinstance(seeds, int):
        if seeds < 1:
            raise ConfigError(f"seeds = {seeds} is out of range; allowed: an integer >= 1")
        return list(range(seeds))
    out = [int(s) for s in seeds]
    if not out or min(out) < 0:
        raise ConfigError(f"seeds = {list(seeds)!r} is not allowed; allowed: a non-empty list of integers >= 0")
    return out


def run_comparison(config: GeoConfig, policies: Sequence[str], seeds: int | Sequence[int] = 1, *,
                   workers: int = 1, progress: bool = False, keep_reference: bool = True) -> pd.DataFrame:
    """Run ``policies`` x ``seeds`` on ``config`` (RR added as the reference) and return the tidy runs.

    Args:
        config: the scenario; each policy gets it with its own ``decision_mode``.
        policies: registry specs (e.g. ``"greedy:0.5"``); unknown specs raise ConfigError first.
        seeds: a count K (seeds 0..K-1) or explicit seeds.
        workers: processes (1 runs in this process; the result does not depend on it).
        progress: a tqdm bar over runs on stderr.
        keep_reference: keep RR's rows when it was not asked for.

    Returns:
        One row per (policy, seed), in the order asked, columns ``_RUN_COLUMNS`` (``carbon_saving_pct``
        against RR on the same seed, so RR's is 0).
    """
    specs = check_policies(policies)
    run_specs = specs if REFERENCE in specs else [REFERENCE, *specs]
    seed_list = _seed_list(seeds)
    if not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers = {workers!r} is out of range; allowed: an integer >= 1")
    tasks = [(config, spec, seed) for spec in run_specs for seed in seed_list]
    bar = None
    if progress:
        from servegym.progress import Progress

        where = "in this process" if workers == 1 or len(tasks) == 1 else f"on {min(workers, len(tasks))} processes"
        from servegym.estimates import estimate

        est, basis = estimate("geo compare", run_specs, config.rate_rps * config.duration_s / 1000.0, len(seed_list),
                              workers=workers)
        bar = Progress(len(tasks), "geo compare", "run", what=f"{len(run_specs)} policies x {len(seed_list)} seed{'s' if len(seed_list) != 1 else ''} "
                       f"{where}", estimate_s=est, basis=basis)
    rows: list[dict[str, Any]] = []
    if workers == 1 or len(tasks) == 1:
        for task in tasks:
            rows.append(_run_task(task))
            if bar is not None:
                bar.update(1)
    else:
        # Longest first keeps the pool busy to the end (window schedulers dominate the wall time).
        order = sorted(range(len(tasks)), key=lambda i: tasks[i][1] not in ("ilp", "iter-ilp", "milp"))
        with ProcessPoolExecutor(max_workers=min(workers, len(tasks))) as ex:
            futs = {i: ex.submit(_run_task, tasks[i]) for i in order}
            done: dict[int, dict[str, Any]] = {}
            from concurrent.futures import as_completed

            inv = {f: i for i, f in futs.items()}
            for f in as_completed(inv):
                done[inv[f]] = f.result()
                if bar is not None:
                    bar.update(1)
            rows = [done[i] for i in range(len(tasks))]
    if bar is not None:
        bar.close()
    df = pd.DataFrame(rows)
    ref = df[df["policy"] == REFERENCE].set_index("seed")["carbon_g"]
    df["carbon_saving_pct"] = 100.0 * (1.0 - df["carbon_g"] / df["seed"].map(ref))
    if not keep_reference and REFERENCE not in specs:
        df = df[df["policy"] != REFERENCE]
    return df[[c for c in _RUN_COLUMNS if c in df.columns]].reset_index(drop=True)


def _t975(dof: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.975, dof))


def summarize(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per policy (first-appearance order): ``policy``, ``osl_mode``, ``seeds`` (count), the mean
    of every metric in :data:`METRICS`, and ``<metric>_ci95`` (95% t half-width) when there are >= 2 seeds."""
    order = list(dict.fromkeys(runs["policy"]))
    rows = []
    for pol in order:
        g = runs[runs["policy"] == pol]
        n = len(g)
        row: dict[str, Any] = {"policy": pol, "osl_mode": str(g["osl_mode"].iloc[0]), "seeds": n}
        for m in METRICS:
            x = g[m].to_numpy(dtype=np.float64)
            row[m] = float(np.mean(x))
            if n > 1:
                row[f"{m}_ci95"] = float(_t975(n - 1) * np.std(x, ddof=1) / math.sqrt(n))
        rows.append(row)
    return pd.DataFrame(rows)


def json_records(runs: pd.DataFrame) -> list[dict[str, Any]]:
    """The CLI's ``--json`` objects: one per policy with ``policy``, the :data:`METRICS` (means),
    ``osl_mode``, ``seeds`` (the list of seeds) and, for >= 2 seeds, ``<metric>_ci95``."""
    summ = summarize(runs)
    out = []
    for _, r in summ.iterrows():
        pol = str(r["policy"])
        rec: dict[str, Any] = {"policy": pol}
        for m in METRICS:
            rec[m] = _finite(r[m])
        rec["osl_mode"] = str(r["osl_mode"])
        rec["seeds"] = [int(s) for s in runs.loc[runs["policy"] == pol, "seed"]]
        if len(rec["seeds"]) > 1:
            for m in METRICS:
                rec[f"{m}_ci95"] = _finite(r[f"{m}_ci95"])
        out.append(rec)
    return out


def _finite(x: Any) -> float | None:
    v = float(x)
    return v if math.isfinite(v) else None


def _fmt(v: float, ci: float | None, digits: int) -> str:
    if not math.isfinite(v):
        return "n/a"
    s = report.format_column([v], decimals=digits)[0]
    return s if ci is None or not math.isfinite(ci) else f"{s} ± {ci:.{digits}f}"


_HEADERS = {"carbon_g": ("carbon (g)", 1), "carbon_saving_pct": ("saving vs RR (%)", 1),
            "slo_violation_pct": ("SLO viol. (%)", 2), "ttft_p50_s": ("TTFT p50 (s)", 2),
            "ttft_p90_s": ("TTFT p90 (s)", 2), "ttft_p99_s": ("TTFT p99 (s)", 2),
            "sched_overhead_ms": ("sched. (ms)", 2)}


def table_rows(summary: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Header and formatted cells of the per-policy table (mean ± 95% CI when there are several seeds)."""
    header = ["policy"] + [_HEADERS[m][0] for m in METRICS]
    rows = []
    for _, r in summary.iterrows():
        cells = [str(r["policy"])]
        for m in METRICS:
            ci = r.get(f"{m}_ci95") if f"{m}_ci95" in summary.columns else None
            cells.append(_fmt(float(r[m]), None if ci is None else float(ci), _HEADERS[m][1]))
        rows.append(cells)
    return header, rows


def markdown_table(summary: pd.DataFrame) -> str:
    header, rows = table_rows(summary)
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def text_table(summary: pd.DataFrame) -> str:
    return report.text_table(*table_rows(summary))


#: Policies within this many percentage points of the lowest SLO violation compete on carbon in the verdict.
VERDICT_SLO_TOLERANCE_PP = 1.0


def verdict_line(summary: pd.DataFrame) -> str:
    """The table's verdict: the lowest-carbon policy among those within
    :data:`VERDICT_SLO_TOLERANCE_PP` of the lowest SLO violation (SLO first, then carbon)."""
    viol = summary["slo_violation_pct"].astype(float)
    ok = summary[viol <= float(viol.min()) + VERDICT_SLO_TOLERANCE_PP]
    best = ok.loc[ok["carbon_g"].astype(float).idxmin()]
    return (f"verdict: best {best['policy']}: {float(best['carbon_saving_pct']):.1f}% carbon saving vs RR at "
            f"{float(best['slo_violation_pct']):.2f}% SLO violation (lowest carbon among policies within "
            f"{VERDICT_SLO_TOLERANCE_PP:g} pp of the lowest SLO violation)")


def explanations(summary: pd.DataFrame, width: int = report.WIDTH) -> list[str]:
    """Lines that follow the table: identical rows and why, the policy legend, and the verdict."""
    _, rows = table_rows(summary)
    cells = {r[0]: r[1:] for r in rows}
    out = [report.wrap(report.explain_identical("geo", g), width, "  ") for g in report.identical_groups(cells)]
    out += report.legend("geo", list(cells), width)
    out.append(report.wrap(verdict_line(summary), width, "  "))
    return out


def describe(config: GeoConfig, preset_name: str | None = None, model: str | None = None) -> str:
    """One line naming the scenario of a comparison (for tables and plot titles)."""
    bits = [f"preset {preset_name}" if preset_name else f"topology {config.topology}"]
    if model:
        bits.append(model)
    bits += [f"{config.rate_rps:g} req/s", f"{config.duration_s:g} s simulated", f"OSL {config.osl_mode}"]
    if config.extrapolated:
        bits.append(f"EXTRAPOLATED max_num_seqs = {config.max_num_seqs} (outside the profile's calibrated range)")
    if config.osl_mode == "predicted":
        bits[-1] += f" (as '{osl_app(config.lengths)}')"
    return ", ".join(bits)


def output_paths(out_dir: str | Path, stem: str = "compare") -> dict[str, Path]:
    """The files :func:`write_outputs` writes into ``out_dir``, by kind (the CLI checks them before a run)."""
    out = Path(out_dir)
    return {"runs_csv": out / f"{stem}_runs.csv", "csv": out / f"{stem}.csv", "md": out / f"{stem}.md",
            "png": out / f"{stem}.png"}


def write_outputs(runs: pd.DataFrame, out_dir: str | Path, title: str = "", stem: str = "compare") -> dict[str, Path]:
    """Write ``<stem>_runs.csv`` (every run), ``<stem>.csv`` (per policy), ``<stem>.md`` and the
    ``<stem>.png`` scatter into ``out_dir``; returns the paths by kind."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    summ = summarize(runs)
    paths = output_paths(out_dir, stem)
    runs.to_csv(paths["runs_csv"], index=False)
    summ.to_csv(paths["csv"], index=False)
    seeds = report.seeds_phrase(int(s) for s in runs["seed"])
    md = [f"# geo compare: {title}" if title else "# geo compare", "",
          f"{seeds[0].upper()}{seeds[1:]}; carbon saving vs RR on the same seeds; SLO violation = % of requests "
          "missing TTFT or TPOT (unfinished count as missed); sched. = mean modelled scheduling delay per request.", "",
          markdown_table(summ), "", *(f"{line}  " for line in explanations(summ, width=10_000)), ""]
    paths["md"].write_text("\n".join(md))
    plot_tradeoff(summ, paths["png"], title=title)
    return paths



def comparison_report(config: GeoConfig, policies: Sequence[str], seeds: int, *, workers: int = 1,
                      out_dir: str | Path, preset_name: str | None = None, model: str | None = None,
                      as_json: bool = False) -> str:
    """What ``servegym geo compare`` does once its arguments are checked: run the comparison
    (:func:`run_comparison`, seeds ``0..seeds-1``), write its files (:func:`write_outputs`) and return the text it
    prints: with ``as_json`` the :func:`json_records` list, else the table, its notes and the files written."""
    import json
    import time

    t0 = time.perf_counter()
    runs = run_comparison(config, policies, seeds, workers=workers, progress=True)
    wall = time.perf_counter() - t0
    title = describe(config, preset_name, model)
    paths = write_outputs(runs, out_dir, title=title)
    if as_json:
        return json.dumps(json_records(runs), indent=2)
    summary = summarize(runs)
    return "\n".join([
        report.wrap(f"geo compare: {title}; {report.seeds_phrase(range(seeds))}; {wall:.1f} s wall"),
        text_table(summary),
        report.wrap("saving vs RR on the same seeds; SLO viol.: % of requests missing TTFT or TPOT; "
                    "sched.: mean modelled scheduling delay per request"),
        "\n".join(explanations(summary)),
        report.wrap(f"wrote {paths['md']}, {paths['csv']}, {paths['runs_csv']}, {paths['png']}"),
    ])
