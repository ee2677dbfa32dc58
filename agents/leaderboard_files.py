"""The leaderboard's files from a suite result: ``leaderboard.md``, ``leaderboard.csv``, ``leaderboard.json`` and
the performance-profile plot."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from servegym.agents import protocol
from servegym.agents import time_to_strongest as tts
from servegym.agents.families import family_for
from servegym.agents.leaderboard_scores import env_board
from servegym.agents.suite_entries import SuiteEntry, budget_cost, section_of
from servegym.agents.suite_runs import SuiteResult

from servegym.outputs import save_figure, write_frame, write_text


def write_leaderboard(res: SuiteResult, entries: Sequence[SuiteEntry], outs: Sequence[dict[str, Any]],
                      budget: str, out_dir: Path) -> dict[str, Path]:
    """leaderboard.md/.csv/.json and the plots (performance profiles, score IQMs) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"leaderboard_{budget}" if budget == "smoke" else "leaderboard"
    files = {"csv": out_dir / f"{stem}.csv", "json": out_dir / f"{stem}.json", "md": out_dir / f"{stem}.md"}
    write_frame(res.leaderboard, files["csv"])
    write_text(files["json"], json.dumps(res.records, indent=2) + "\n")
    scores_by_env: dict[str, dict[str, np.ndarray]] = {}
    for e in entries:
        mine = [o for o in outs if section_of(o) == e.section]
        board = env_board(e.env_id, pd.DataFrame([r for o in mine for r in o["rows"]]), e.env_kwargs)
        scores_by_env[e.section] = {p: board.scores(p) for p in board.by_policy}
    files["profiles"] = _plot_profiles(scores_by_env, out_dir / f"{stem}_profiles.png")
    write_text(files["md"], _markdown(res, entries, outs, budget, files))
    return files


def _plot_profiles(scores_by_env: dict[str, dict[str, np.ndarray]], path: Path) -> Path:
    """One performance-profile panel per section (an env id, or ``<id>@<track>``; rliable's plot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rliable import plot_utils

    taus = np.linspace(-50.0, 150.0, 81)
    n = len(scores_by_env)
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    # each panel's legend goes below it, in two columns, off the curves (rows taller by the legend's room)
    most = max((len(s) for s in scores_by_env.values()), default=1)
    legend_in = 0.16 * math.ceil(most / 2)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, (3.6 + legend_in) * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, (env_id, scores) in zip(axes.flat[:n], scores_by_env.items(), strict=True):
        profiles, cis = {}, {}
        for p, s in scores.items():
            profiles[p], cis[p] = protocol.performance_profile(s, taus)
        plot_utils.plot_performance_profiles(profiles, taus, performance_profile_cis=cis, ax=ax,
                                             xlabel=r"normalized score $\tau$", ylabel=r"fraction of episodes $> \tau$")
        ax.set_title(env_id.split("/")[-1], fontsize=10)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.34), ncol=2, fontsize=7, frameon=False)
    fig.suptitle("test split: 0 = naive, 100 = oracle (or the paper's method where an id has no oracle; "
                 "leaderboard.md names each panel's scale)", fontsize=10)
    # tight_layout leaves no room for the suptitle: keep ~0.45 in at the top (it overlapped the first row's titles)
    fig.tight_layout(rect=(0.0, 0.0, 1.0, 1.0 - 0.45 / fig.get_figheight()))
    save_figure(fig, path, dpi=100)
    plt.close(fig)
    return path


def _above_strongest(sub: pd.DataFrame) -> str:
    """A sentence naming the shipped baselines that score above the strongest on this board's episodes (the
    strongest is one per id, chosen on the validation split, so on the test split another can lead)."""
    strong = sub[sub.headroom.notna()] if "headroom" in sub else sub.iloc[0:0]
    if not len(strong):
        return ""
    above = sub[~sub.role.isin(["agent", "follow", "causal", "oracle"]) & (sub.score_mean > strong.score_mean.iloc[0])]
    if not len(above):
        return ""
    names = ", ".join(f"`{p}` {_f(v)}" for p, v in zip(above.policy, above.score_mean, strict=True))
    return (f" Above the strongest on these test episodes (it is one per id, chosen on the validation split): "
            f"{names}.")


def _kpi_headroom(sub: pd.DataFrame) -> str:
    """The headroom of one id in its KPI's units: the oracle's and the causal reference's mean difference to
    the strongest (negative = less KPI), in % of the strongest's, with the SLO difference."""
    cols = [c for c in ("oracle_minus_strongest", "causal_minus_strongest") if c in sub]
    row = sub[sub[cols].notna().any(axis=1)] if cols else sub.iloc[0:0]  # the strongest's row carries them
    if not len(row):
        return ""
    r, kpi, parts = row.iloc[0], row.iloc[0]["kpi"], []
    # pd's causal reference is a perfect forecast on the base splits and the day's expected rates on its stress
    # tracks; the geo tracks' feeds a rule what a causal controller computes
    on_track = isinstance(r.get("track"), str) and bool(r.get("track"))
    if family_for(r["env"]).name == "pd":
        causal = ("causal reference (the rule sized for the day's expected rates)" if on_track
                  else "causal reference (a perfect forecast of the next periods)")
    else:
        causal = "causal reference (a rule fed what a causal controller computes)"
    for role, what in (("oracle", "oracle"), ("causal", causal)):
        v = r.get(f"{role}_minus_strongest", math.nan)
        if isinstance(v, float) and math.isfinite(v):
            parts.append(f"{what} - strongest {v:+.4g} {kpi} ({r[f'{role}_minus_strongest_pct']:+.2f} %), SLO "
                         f"{r[f'{role}_minus_strongest_slo_pp']:+.3g} pp")
    return (" In KPI units: " + "; ".join(parts) + ".") if parts else ""


def _markdown(res: SuiteResult, entries: Sequence[SuiteEntry], outs: Sequence[dict[str, Any]], budget: str,
              files: dict[str, Path]) -> str:
    b = res.leaderboard
    lines = [f"# servegym leaderboard ({budget} budget, test split)", "",
             "Score per episode: 0 = naive, 100 = the hindsight oracle on the same scenario, 100 (R - R_naive) / "
             "(R_oracle - R_naive); an id without an oracle in its runs falls back to 100 = the paper's method "
             "(pooled gap) and its section says so (`servegym.agents.protocol`). IQM and mean with 95 % "
             "bootstrap CIs over episodes (agents: training seeds and test episodes both resampled). Headroom: 100 - the strongest "
             "baseline's score (chosen on the validation split), with its CI. Gap closed: an agent's share of the "
             "strongest-to-oracle gap, (S - S_strongest) / (100 - S_strongest). vs strongest: the paired KPI "
             "difference [95 % CI] on the same episodes, in % of the strongest's KPI, the SLO difference with its CI "
             "and tolerance, the return difference; beats strongest: yes, or the outcome (tie, worse, slo, return) "
             f"and for agents how many training seeds beat on their own. {protocol.BEATS_RULE}. "
             "Agents: each seed's checkpoint chosen on the validation split only. " + tts.LEADERBOARD_NOTE + " Generated by "
             f"`servegym benchmark --suite --budget {budget}` (one `--envs` run per section; each section states its "
             "wall time). A section is an env id, or an id on a stress track (`--envs ID@track`, `servegym.splits."
             "FAMILY_TRACKS`), whose yardsticks are the track's own.", ""]
    if budget == "full":
        lines += [budget_cost("full") + ".", ""]
    for e in entries:
        sub = b[(b.env == e.env_id) & (b.track == (e.track or ""))]
        y = protocol.yardsticks(e.env_id, e.env_kwargs)
        roles = ", ".join(f"{k} = `{v}`" for k, v in y.roles().items())
        scale = sub["scale"].iloc[0] if len(sub) else protocol.scale_name(e.env_id)
        notes = sub["notes"].iloc[0] if len(sub) and sub["notes"].iloc[0] else ""
        strong = sub[sub.headroom.notna()] if "headroom" in sub else sub.iloc[0:0]
        head = (f"Headroom (oracle - strongest): {_f(strong.headroom.iloc[0])} "
                f"[{_f(strong.headroom_lo.iloc[0])}, {_f(strong.headroom_hi.iloc[0])}]." if len(strong)
                else "Headroom: undefined (no oracle in these runs).")
        head += _kpi_headroom(sub)
        title = e.env_id if e.track is None else f"{e.env_id}, stress track {e.track}"
        lines += [f"## {title}", "",
                  f"{e.note}; `gym.make` kwargs `{json.dumps(e.env_kwargs)}`; agent {e.algo}, {e.timesteps:,} steps x "
                  f"{e.seeds} seeds, checkpoint on {e.val_episodes} validation episodes x {e.evals} evaluations; "
                  f"{e.episodes} test episodes; {roles}. {_run_text(res.entry_runs.get(e.section))}", "",
                  f"Scale: {scale}." + (f" Missing: {notes}." if notes else "") + f" {head}{_above_strongest(sub)}", "",
                  *([f"Effect sizes (the KPI differences in %) beside the {me.text()}.", ""]
                    if (me := protocol.model_error(e.env_id)) else [])]
        kpi = sub["kpi"].iloc[0] if len(sub) else "kpi"
        lines += [f"| policy | role | score mean [95% CI] | score IQM [95% CI] | {kpi} | SLO viol. % "
                  f"| vs strongest: {kpi} diff [95% CI] (%), SLO diff [CI] (tolerance), return diff | beats strongest | gap closed [95% CI] | wall s | env steps "
                  f"| {tts.MD_HEADER} |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for _, r in sub.iterrows():
            diff = ("-" if not math.isfinite(r.kpi_diff_vs_strongest) else
                    f"{r.kpi_diff_vs_strongest:+.4g} [{r.kpi_diff_lo:+.4g}, {r.kpi_diff_hi:+.4g}] "
                    f"({r.kpi_diff_pct:+.2g} %), SLO {r.slo_diff_vs_strongest_pp:+.3g} pp "
                    f"[{r.slo_diff_lo:+.3g}, {r.slo_diff_hi:+.3g}] (tol. {r.slo_tolerance_pp:.2g}), "
                    f"return {r.return_diff:+.4g}")
            verdict = ("-" if not r.outcome_vs_strongest else
                       f"{'**yes**' if r.beats_strongest else r.outcome_vs_strongest}"
                       + (f" ({r.seeds_beating} of {r.seeds} seeds)" if r.role == "agent" else "")
                       + (", inside the model's error" if r.get("inside_model_error", False) else ""))
            closed = ("-" if not math.isfinite(r.gap_closed) else
                      f"{r.gap_closed:.2f} [{r.gap_closed_lo:.2f}, {r.gap_closed_hi:.2f}]")
            lines.append(f"| {r.policy} | {r.role} | {_f(r.score_mean)} [{_f(r.score_mean_lo)}, {_f(r.score_mean_hi)}] | "
                         f"{_f(r.score_iqm)} [{_f(r.score_iqm_lo)}, {_f(r.score_iqm_hi)}] | "
                         f"{r.get(kpi, math.nan):.4g} | {r.get(protocol.SLO_METRIC, math.nan):.3f} | {diff} | "
                         f"{verdict} | {closed} | {r.wall_s:,.0f} | {r.env_steps:,} | "
                         f"{r.get('time_to_strongest') or '-'} |")
        lines.append("")
    lines += [f"![performance profiles]({files['profiles'].name})", "",
              f"Files: `{files['csv'].name}` (every column), `{files['json'].name}` (one object per section x "
              "policy: env, track (null without one), policy, split, episodes, score_mean, score_iqm, score_ci, kpis, role, scale, "
              "slo_violation_pct, vs_strongest (the paired verdict), gap_closed; the strongest baseline's "
              "also headroom).", ""]
    return "\n".join(lines)


def _run_text(run: dict[str, Any] | None) -> str:
    """The wall time of the run that made an id's rows, saying what it covered."""
    if not run:
        return "Wall time: not recorded."
    ids, workers = run.get("env_ids") or [], run.get("workers")
    where = f"{workers} processes" if workers else "Ray or unrecorded processes"
    if len(ids) > 1:
        return (f"Wall time of the run that trained {len(ids)} env ids together ({where}; all their seeds and "
                f"baselines): {run['wall_s'] / 60:.1f} min.")
    return f"Suite wall time (all seeds and baselines, {where}): {run['wall_s'] / 60:.1f} min."


def _f(v: float) -> str:
    return "nan" if not math.isfinite(v) else f"{v:.1f}"
