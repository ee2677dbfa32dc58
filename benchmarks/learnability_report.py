"""Learnability figures from the benchmark suite's stored runs: per-seed tables and validation curves.

``servegym benchmark --suite --budget quick`` stores every id's raw outputs in
``benchmarks/results/suite_runs/<budget>/<id>.json`` (training seeds' validation histories and test
episodes, the baselines' test episodes). This script turns them into the learnability record:

- ``learnability/<id>_seeds.md``: per training seed, the test-split KPIs of its selected checkpoint
  against the ``best`` reference on the same 10 test scenarios (KPI ratio, SLO violation, normalized score
  mean), and whether the seed beats ``best`` under the protocol's rule;
- ``learnability/<id>_curves.png``: each seed's validation normalized score (the checkpoint-selection
  signal) against training steps, with the test-split score of each seed's selected checkpoint and the
  strongest baseline's validation score on the same episodes (from the runs, or from
  ``time_to_strongest.json`` for runs made before they carried it; :mod:`servegym.agents.time_to_strongest`).

Usage::

    python benchmarks/learnability_report.py [--budget quick]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

RESULTS = Path(__file__).resolve().parent / "results"


def _results(rows: pd.DataFrame) -> list[Any]:
    from servegym.agents.leaderboard_scores import _result

    return [_result(r) for r in rows.to_dict("records")]


def report(path: Path, out: Path) -> dict[str, Any]:
    from servegym.agents import protocol
    from servegym.agents.benchmark import SuiteEntry
    from servegym.agents.leaderboard_scores import _entry_kpi
    from servegym.agents.suite_runs import _tuple

    data = json.loads(path.read_text())
    e = SuiteEntry(**{**data["entry"], "baselines": _tuple(data["entry"].get("baselines"))})
    refs = protocol.references(e.env_id)
    kpi = _entry_kpi(e)
    eps = pd.DataFrame([r for o in data["outputs"] for r in o["rows"]])
    naive = _results(eps[eps.policy == refs["naive"]])
    best = _results(eps[eps.policy == refs["best"]])
    b_kpi, b_slo = protocol.mean_metric(best, kpi), protocol.mean_metric(best, protocol.SLO_METRIC)
    name = e.env_id.split("/")[-1]
    seeds, curves = [], []
    for o in sorted((o for o in data["outputs"] if o["kind"] == "train"), key=lambda o: o["seed"]):
        res = _results(pd.DataFrame(o["rows"]))
        sc = protocol.episode_scores(res, naive, best)
        a_kpi, a_slo = protocol.mean_metric(res, kpi), protocol.mean_metric(res, protocol.SLO_METRIC)
        seeds.append({"seed": o["seed"], "kpi": a_kpi, "kpi_vs_best_pct": 100 * (a_kpi / b_kpi - 1),
                      "slo": a_slo, "score_mean": float(np.nanmean(sc)), "beats_best": protocol.beats(res, best, kpi),
                      "train_s": o["train_s"], "chosen": Path(o["chosen"]).name})
        for h in o["validation"]:
            curves.append({"seed": o["seed"], "timesteps": h["timesteps"],
                           "val_score": h.get("normalized_score", math.nan)})
    seeds_df, cur = pd.DataFrame(seeds), pd.DataFrame(curves)
    from servegym.agents import time_to_strongest as tts

    roles = protocol.yardsticks(e.env_id).roles()
    trains = [o for o in data["outputs"] if o["kind"] == "train"]
    ref = tts.stored_references(RESULTS / tts.RESULT_FILE, [e]).get(e.env_id, tts.Reference())
    strong = tts.strongest_validation_score(trains, roles)
    strong = (roles["strongest"], strong if strong is not None else ref.target)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# {e.env_id}: per training seed on the test split", "",
             f"{e.note}. {e.algo}, {e.timesteps:,} steps per seed; checkpoint chosen on {e.val_episodes} validation "
             f"episodes x {e.evals} evaluations; {e.episodes} test episodes. best = `{refs['best']}`: "
             f"{kpi} {b_kpi:.4g}, SLO violation {b_slo:.3f} %. Score: 0 = naive, 100 = the paper's method (pooled; "
             f"this per-seed view keeps the checkpoint-selection scale). {protocol.BEATS_RULE}. Source: `{path.relative_to(RESULTS.parent.parent)}`.", "",
             f"| seed | {kpi} | vs best | SLO viol. % | score mean | beats best | train s | checkpoint |",
             "|---|---|---|---|---|---|---|---|"]
    for r in seeds_df.itertuples():
        lines.append(f"| {r.seed} | {r.kpi:.4g} | {r.kpi_vs_best_pct:+.2f} % | {r.slo:.3f} | {r.score_mean:.1f} | "
                     f"{'yes' if r.beats_best else 'no'} | {r.train_s:.0f} | {r.chosen} |")
    (out / f"{name}_seeds.md").write_text("\n".join(lines) + "\n")
    _plot(cur, seeds_df, e.env_id, out / f"{name}_curves.png", strong)
    return {"env": e.env_id, "seeds": seeds}


def _plot(cur: pd.DataFrame, seeds: pd.DataFrame, env_id: str, path: Path,
          strongest: tuple[str, float | None] = ("", None)) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.9))
    for i, (seed, g) in enumerate(cur.groupby("seed")):
        c = plt.cm.tab10(i % 10)
        ax.plot(g["timesteps"], g["val_score"], marker="o", ms=3, color=c, label=f"seed {seed} (validation)")
        t = seeds.loc[seeds.seed == seed, "score_mean"]
        if len(t):
            ax.scatter([g["timesteps"].max() * 1.04], [t.iloc[0]], marker="*", s=70, color=c, zorder=3)
    ax.axhline(0.0, color="0.4", lw=0.8, ls=":")
    ax.axhline(100.0, color="0.2", lw=0.9, ls="--")
    ax.text(ax.get_xlim()[0], 100.0, " best", va="bottom", fontsize=7)
    ax.text(ax.get_xlim()[0], 0.0, " naive", va="bottom", fontsize=7)
    name, target = strongest
    if target is not None and math.isfinite(target) and name:
        ax.axhline(target, color="tab:red", lw=1.0, ls="-.")
        ax.text(ax.get_xlim()[1], target, f"strongest: {name} (validation) ", va="top", ha="right", fontsize=7,
                color="tab:red")
    extra = [target] if target is not None and math.isfinite(target) else []
    vals = np.concatenate([cur["val_score"].to_numpy(float), seeds["score_mean"].to_numpy(float), extra]) if len(cur) \
        else np.array([0.0])
    lo, hi = float(np.nanmin(vals)), float(np.nanmax(vals))
    ylabel = "normalized score (mean over episodes)"
    if lo < -300.0:
        # Early checkpoints can score in the thousands below naive; a linear axis down there would flatten
        # the 0-100 band that matters, so the axis is logarithmic beyond +-150 and every point stays shown.
        ax.set_yscale("symlog", linthresh=150.0)
        ylabel += ", symlog"
    ax.set_ylim(min(lo * 1.15, -20.0), max(150.0, hi + 20.0))
    ax.set_xlabel("training steps")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{env_id.split('/')[-1]}: validation score while training (100 = the paper's method);\n"
                 "stars: test score of each seed's selected checkpoint", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=2, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", default="quick")
    ap.add_argument("--out", type=Path, default=RESULTS / "learnability")
    args = ap.parse_args()
    files = sorted((RESULTS / "suite_runs" / args.budget).glob("*.json"))
    if not files:
        raise SystemExit(f"no stored suite runs in {RESULTS / 'suite_runs' / args.budget}; run "
                         f"`servegym benchmark --suite --budget {args.budget}` first")
    for f in files:
        rec = report(f, args.out)
        print(rec["env"], [(s["seed"], round(s["kpi_vs_best_pct"], 2), round(s["slo"], 3)) for s in rec["seeds"]])


if __name__ == "__main__":
    main()
