"""The geo reports' plots: :func:`plot_tradeoff`, the geo paper's Fig. 4a scatter of a comparison's summary
(:func:`servegym.envs.geo.reports.compare.summarize`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from servegym import report


def plot_tradeoff(summary: pd.DataFrame, path: str | Path, title: str = "", ax: Any = None) -> Path | None:
    """The paper's Fig. 4a: carbon saving vs RR (%) against SLO violation (%), one point per policy (95% CI
    bars with several seeds), named in a legend beside the axes. Points that coincide are drawn as nested
    hollow markers, larger first, so each stays visible, with one small label naming the group; the better corner
    (more saving, fewer violations: top left) is marked. Writes a PNG at ``path`` unless drawing into ``ax``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import ScalarFormatter

    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(8.4, 4.8))
    markers = {"rr": "o", "ll": "s", "ilp": "^", "iter-ilp": "v", "milp": "*", "green-llm": "P", "moer": "X"}
    cmap = plt.get_cmap("tab10")
    xs = summary["slo_violation_pct"].astype(float).to_numpy()
    ys = summary["carbon_saving_pct"].astype(float).to_numpy()
    xspan = max(float(np.nanmax(xs)) - float(np.nanmin(xs)), 1e-9) if len(xs) else 1.0
    yspan = max(float(np.nanmax(ys)) - float(np.nanmin(ys)), 1e-9) if len(ys) else 1.0
    # rank of each point among the earlier points it sits on (within 2% of both axes): its ring in the nest
    depth = [sum(abs(xs[j] - xs[i]) <= 0.02 * xspan and abs(ys[j] - ys[i]) <= 0.02 * yspan for j in range(i))
             for i in range(len(xs))]
    handles = []
    for i, (_, r) in enumerate(summary.iterrows()):
        pol = str(r["policy"])
        xe = r.get("slo_violation_pct_ci95") if "slo_violation_pct_ci95" in summary.columns else None
        ye = r.get("carbon_saving_pct_ci95") if "carbon_saving_pct_ci95" in summary.columns else None
        color, marker = cmap(i % 10), markers.get(pol, "D")
        ax.errorbar(xs[i], ys[i], xerr=xe, yerr=ye, fmt=marker, color=color, mfc="none", mew=1.6,
                    ms=max(18.0 - 2.4 * depth[i], 4.0), capsize=3, zorder=3 + depth[i])
        # legend entries at one size (the nested sizes only keep coinciding points apart)
        handles.append(Line2D([], [], marker=marker, color=color, mfc="none", mew=1.6, ms=8, ls="none", label=pol))
    # name the nests: one small label per group of coinciding points ("rr = ll"), offset from the markers
    # (near the right edge the label ends below its own point, not beside the next policy's marker)
    names = [str(p) for p in summary["policy"]]
    for i in range(len(xs)):
        group = [j for j in range(len(xs)) if abs(xs[j] - xs[i]) <= 0.02 * xspan and abs(ys[j] - ys[i]) <= 0.02 * yspan]
        if len(group) > 1 and group[0] == i:
            right = xs[i] > float(np.nanmin(xs)) + 0.7 * xspan  # near the right edge: the label ends under the point
            ax.annotate(" / ".join(names[j] for j in group), (xs[i], ys[i]), xytext=(8, -24) if right else (12, -16),
                        textcoords="offset points", fontsize=7, color="0.2", zorder=10,
                        ha="right" if right else "left")
    ax.set_xlabel("SLO violation (%)")
    ax.set_ylabel("carbon saving vs RR (%)")
    if float(np.nanmax(xs, initial=0.0)) > 10.0:
        ax.set_xscale("symlog", linthresh=1.0)  # a few policies far out would squash the rest
    fmt = ScalarFormatter()
    fmt.set_scientific(False)
    ax.xaxis.set_major_formatter(fmt)
    ax.margins(x=0.08, y=0.08)
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi + 0.14 * (hi - lo))  # an empty band on top for the "better" mark
    ax.grid(True, alpha=0.3)
    ax.text(0.01, 0.985, "\u2196 better: more saving, fewer violations", transform=ax.transAxes, fontsize=8,
            color="0.25", ha="left", va="top")
    if title:
        ax.set_title(title, fontsize=9)
    if not own:
        for h in handles:  # a caller drawing several panels builds one figure legend from these
            ax.add_line(h)
        return None
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
              title="policy\n(nested rings: same point)", title_fontsize=8)
    return report.save_png(fig, path, dpi=120)
