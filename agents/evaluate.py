"""Agent vs baselines on the same seeds (``servegym evaluate``): tidy episodes, a mean ± 95% CI
table (CSV and markdown) and bar charts.

The CI is Student's t over episodes: mean ± t(0.975, n-1) · s / sqrt(n) (NaN half-width for n = 1).
Only :func:`evaluate_model` imports torch (to load the agent); the statistics and plots do not.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
from servegym.agents.families import (
    EpisodeResult,
    Family,
    family_for,
    resolve_baselines,
    run_baseline_episodes,
    saving_pct,
)
from servegym.agents.rollout import agent_act_fn, play_episode, seeds_from

from servegym import report
from servegym.outputs import OutputLock, refuse_existing, save_figure, write_frame, write_text

ID_COLUMNS = ("policy", "seed")
# Anything np.asarray accepts (a list, a pandas column, an array).
NDArrayLike = Any


def episodes_frame(results: Sequence[EpisodeResult], family: Family) -> pd.DataFrame:
    """One row per (policy, seed) with reward, length and domain scalars; adds
    ``saving_vs_<ref>_pct`` per seed when the family's reference baseline was run."""
    df = pd.DataFrame([r.row() for r in results])
    ref, metric = family.reference, family.saving_metric
    if ref and metric and not df.empty and metric in df and (df["policy"] == ref).any():
        base = df[df["policy"] == ref].set_index("seed")[metric]
        df[f"saving_vs_{ref}_pct"] = [saving_pct(v, float(base.get(s, math.nan)))
                                      for v, s in zip(df[metric], df["seed"], strict=True)]
    return df


def t_halfwidth(values: NDArrayLike, confidence: float = 0.95) -> float:
    """Half-width of the two-sided Student-t confidence interval of the mean."""
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    n = x.size
    if n < 2:
        return math.nan
    return float(stats.t.ppf(0.5 + confidence / 2.0, n - 1) * x.std(ddof=1) / math.sqrt(n))



def summary_frame(episodes: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per policy (in first-seen order): ``<m>_mean`` and ``<m>_ci`` (half-width) of every numeric column."""
    metrics = [c for c in episodes.columns if c not in ID_COLUMNS and c != "length"
               and pd.api.types.is_numeric_dtype(episodes[c])]
    rows = []
    for policy, grp in episodes.groupby("policy", sort=False):
        row: dict[str, Any] = {"policy": policy, "episodes": len(grp)}
        for m in metrics:
            row[f"{m}_mean"] = float(grp[m].mean())
            row[f"{m}_ci"] = t_halfwidth(grp[m].to_numpy(), confidence)
        rows.append(row)
    return pd.DataFrame(rows)


def table_cells(summary: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Header and ``mean ± ci`` cells, one column per metric, each column in one fixed-point format
    (:func:`servegym.report.format_column`: no ``7.17e-05`` beside ``0 ± 0``)."""
    metrics = [c[:-5] for c in summary.columns if c.endswith("_mean")]
    header = ["policy", "episodes", *metrics]
    cols = [report.format_column(summary[f"{m}_mean"].astype(float).tolist(), summary[f"{m}_ci"].astype(float).tolist())
            for m in metrics]
    rows = [[str(r["policy"]), str(int(r["episodes"])), *(c[i] for c in cols)]
            for i, (_, r) in enumerate(summary.iterrows())]
    return header, rows


def markdown_table(summary: pd.DataFrame) -> str:
    """The whole table (every metric) in markdown."""
    header, rows = table_cells(summary)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def explanations(summary: pd.DataFrame, family: Family, width: int = report.WIDTH) -> list[str]:
    """Lines after the table: identical rows and why, and the policy legend. The verdicts are the protocol's
    paired ones (:func:`_verdicts`, as ``servegym benchmark`` and the leaderboard give them), not a ranking by
    mean reward, which ignores noise."""
    _, rows = table_cells(summary)
    cells = {r[0]: r[1:] for r in rows}
    out = [report.wrap(ci_note(summary), width, "  ")]
    out += [report.wrap(report.explain_identical(family.name, g), width, "  ") for g in report.identical_groups(cells)]
    out += report.legend(family.name, list(cells), width)
    return out


def ci_note(summary: pd.DataFrame) -> str:
    """What a cell's ``±`` is (the half-width that :func:`summary_frame` computes), said under every table."""
    counts = sorted({int(n) for n in summary["episodes"]})
    n = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    one = "; no ± with a single episode" if counts[0] == 1 else ""
    return (f"cells: mean ± half-width of the 95 % confidence interval of the mean over {n} "
            f"episode{'s' if counts[-1] > 1 else ''} (Student's t, not a standard deviation{one})")


def text_report(summary: pd.DataFrame, family: Family, md_path: Path | None = None, width: int = report.WIDTH) -> str:
    """The CLI's text: the table's leading columns that fit in ``width`` characters (the markdown file has
    them all), then :func:`explanations`."""
    header, rows = table_cells(summary)
    h, r, dropped = report.fit_width(header, rows, width)
    lines = [report.text_table(h, r)]
    if dropped:
        where = f" in {md_path}" if md_path else " in summary.md (--out-dir)"
        lines.append(report.wrap(f"more columns{where}: {', '.join(dropped)}", width, "  "))
    lines += explanations(summary, family, width)
    return "\n".join(lines) + "\n"


def plot_summary(summary: pd.DataFrame, family: Family, path: Path, verdicts: Sequence[Any] = ()) -> Path:
    """A bar chart with 95% CI error bars per metric (one panel each); the agent's bar is highlighted. With
    ``verdicts`` (:class:`servegym.agents.protocol.Verdict`, one per baseline) a last panel draws what the verdict
    reads: the agent's paired KPI difference against each baseline with its paired 95% CI, green where the agent
    beats it. The per-policy bars are unpaired, so theirs can overlap where the paired CI excludes 0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = {m.key: m.label or m.key for m in family.metrics}
    labels["reward"] = "episode reward (return)"
    if family.reference and family.saving_metric:
        what = labels.get(family.saving_metric, family.saving_metric).split(" (")[0]
        labels[f"saving_vs_{family.reference}_pct"] = f"saving in {what} vs {family.reference} (%)"
    metrics = [c[:-5] for c in summary.columns if c.endswith("_mean")]
    verdicts = [v for v in verdicts if math.isfinite(v.kpi_diff)]
    n = len(metrics) + (1 if verdicts else 0)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    names = summary["policy"].tolist()
    nonneg = {k.key for k in family.metrics if not k.key.startswith("saving")} - {"reward"}
    colors = ["tab:red" if p == "agent" else "tab:blue" for p in names]
    for ax, m in zip(axes.ravel(), metrics, strict=False):
        means = summary[f"{m}_mean"].to_numpy(dtype=float)
        ci = np.nan_to_num(summary[f"{m}_ci"].to_numpy(dtype=float))
        # a quantity that cannot be negative (energy, a violation share) gets no CI bar below 0
        low = np.minimum(ci, np.maximum(means, 0.0)) if m in nonneg else ci
        ax.bar(range(len(names)), means, yerr=np.vstack([low, ci]), color=colors, capsize=3)
        ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
        ax.set_title(labels.get(m, m), fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    if verdicts:
        ax = axes.ravel()[len(metrics)]
        y = np.arange(len(verdicts))
        diff = np.array([v.kpi_diff for v in verdicts])
        lo = np.array([v.kpi_diff - v.kpi_ci[0] for v in verdicts])
        hi = np.array([v.kpi_ci[1] - v.kpi_diff for v in verdicts])
        for i, v in enumerate(verdicts):
            ax.errorbar(diff[i], y[i], xerr=[[np.nan_to_num(lo[i])], [np.nan_to_num(hi[i])]], fmt="o", capsize=3,
                        color="tab:green" if v.beats else "tab:gray")
        ax.axvline(0.0, color="black", lw=0.8)
        ax.set_yticks(y, [v.baseline for v in verdicts], fontsize=8)
        ax.set_ylim(-0.5, len(verdicts) - 0.5)
        kpi = labels.get(verdicts[0].kpi, verdicts[0].kpi)
        ax.set_title(f"agent - baseline, {kpi}\n(paired 95% CI; green: agent beats it)", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    for ax in axes.ravel()[n:]:
        ax.axis("off")
    fig.suptitle("agent (red) vs baselines: mean ± 95% CI over the same seeds"
                 + ("; last panel: the paired differences the verdicts read" if verdicts else ""), fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


@dataclass(frozen=True)
class EvalReport:
    episodes: pd.DataFrame
    summary: pd.DataFrame
    files: dict[str, Path]
    env_id: str | None = None
    #: the agent's paired verdict against each baseline (the protocol's "beats" rule), one line each
    verdicts: tuple[str, ...] = ()


def evaluate_model(env_id: str | None, model_path: str | Path, episodes: int = 5, baselines: str | None = "all",
                   seed: int | None = None, out_dir: str | Path | None = None, algo: str | None = None,
                   env_kwargs: dict[str, Any] | None = None, progress: bool = True, force: bool = False) -> EvalReport:
    """Play the saved agent and the family's baselines on seeds ``seed .. seed+episodes-1`` (default:
    the run's evaluation seeds' start); write ``episodes.csv``, ``summary.csv``, ``summary.md`` and
    ``summary.png`` to ``out_dir`` when given, each atomically; an ``out_dir`` that already holds an
    evaluation is refused before anything is played, unless ``force``. ``out_dir`` is locked for the whole
    run (``<out_dir>.lock``, as ``train`` locks its output): a second evaluation into it while this one runs
    is refused at once, rather than both writing and each reporting numbers the files may not hold."""
    with OutputLock(out_dir, "--out-dir") if out_dir is not None else contextlib.nullcontext():
        # checked under the lock: a run that finished a moment ago is seen, and none can start meanwhile
        if out_dir is not None and (Path(out_dir) / "episodes.csv").exists() and not force:
            refuse_existing("--out-dir", out_dir, "an evaluation (episodes.csv)", resume=False)
        return _evaluate_model(env_id, model_path, episodes, baselines, seed, out_dir, algo, env_kwargs, progress)


def _evaluate_model(env_id: str | None, model_path: str | Path, episodes: int, baselines: str | None,
                    seed: int | None, out_dir: str | Path | None, algo: str | None,
                    env_kwargs: dict[str, Any] | None, progress: bool) -> EvalReport:
    """:func:`evaluate_model` once ``out_dir`` is locked and checked."""
    from servegym.agents.train import EVAL_SEED, check_env_id, load_agent

    model, norm, run = load_agent(model_path, algo=algo, env_id=env_id, env_kwargs=env_kwargs)
    env_id = env_id or run.get("env_id")
    if env_id is None:
        from servegym.errors import ConfigError

        raise ConfigError(f"--env is required: no run.json beside {model_path} names the env")
    env_id = check_env_id(env_id)
    family = family_for(env_id)
    names = resolve_baselines(family, baselines)
    kwargs = {**run.get("env_kwargs", {}), **(env_kwargs or {})}
    start = seed if seed is not None else (run.get("eval_seeds") or [EVAL_SEED])[0]
    seeds = seeds_from(start, episodes)
    env = gym.make(env_id, **kwargs)
    from servegym.estimates import episode_units, estimate
    from servegym.progress import Progress

    est, basis = estimate(env_id, ["agent", *names], episode_units(env), len(seeds), default_config=not kwargs)
    bar = Progress(len(seeds) * (1 + len(names)), f"evaluate {env_id.split('/')[-1]}", "episode",
                   what=f"the agent and {len(names)} baselines on {len(seeds)} seeds each", estimate_s=est,
                   basis=basis, disable=not progress)
    try:
        act = agent_act_fn(model, norm)
        results = []
        for s in seeds:
            results.append(play_episode(env, act, s, "agent", family.metrics))
            bar.update(1)
        strict = baselines not in (None, "all")
        by_baseline = run_baseline_episodes(family, env, names, seeds, strict=strict, progress=bar)
        for res in by_baseline.values():
            results += res
        verdicts, paired = _verdicts(env, [r for r in results if r.policy == "agent"], by_baseline)
    finally:
        bar.close()
        env.close()
    eps = episodes_frame(results, family)
    summ = summary_frame(eps)
    files: dict[str, Path] = {}
    if out_dir is not None:
        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        files["episodes_csv"] = write_frame(eps, d / "episodes.csv")
        files["summary_csv"] = write_frame(summ, d / "summary.csv")
        files["summary_md"] = write_text(d / "summary.md",
                                         f"# {env_id}: agent vs baselines, {report.seeds_phrase(seeds)}\n\n"
                                         + markdown_table(summ) + "\n"
                                         + "".join(f"{line}  \n" for line in explanations(summ, family, 10_000))
                                         + "".join(f"{line}  \n" for line in verdicts))
        files["plot"] = plot_summary(summ, family, d / "summary.png", paired)
    return EvalReport(episodes=eps, summary=summ, files=files, env_id=env_id, verdicts=verdicts)


def _verdicts(env: gym.Env, agent: list[EpisodeResult], baselines: dict[str, list[EpisodeResult]]
              ) -> tuple[tuple[str, ...], list[Any]]:
    """The agent's paired verdict against every baseline (:func:`servegym.agents.protocol.paired_verdict`,
    the one rule the leaderboard uses) as lines, then the rule itself, and the verdicts themselves (for the
    plot); nothing for an env without a KPI."""
    from servegym.agents import protocol

    kpi = protocol.kpi_metric(env)
    if not agent or kpi not in agent[0].metrics:
        return (), []
    paired = [protocol.paired_verdict(agent, res, kpi, name) for name, res in baselines.items()]
    lines = [v.text("agent") for v in paired]
    return ((*lines, f"({protocol.BEATS_RULE})") if lines else ()), paired
