"""A picture of the DSE's best-fit table (``servegym npu dse --plot PNG``): per phase, the energy (J/token)
or cost (USD/token) of each chip version's best fit against the sequence-length bucket, with the overall
best fit marked, so the version that wins each length range (and where it changes) reads at a glance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from servegym.envs.npu.sim.catalog import VERSIONS
from servegym.envs.npu.sim.dse import BestFitTable

from servegym import report


def plot_best_fit(table: BestFitTable, path: str | Path) -> Path:
    """Write the PNG at ``path``: one panel per explored phase; x = sequence-length bucket (tokens, log2),
    y = the objective per token (log); a line per chip version (its fail-over best fit; hollow where it
    misses the SLO), and black rings on the overall best fit of each bucket. Returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    energy = table.objective == "energy"
    scale, unit = (1e3, "mJ/token") if energy else (1e6, "µUSD/token")

    def value(e: object) -> float:
        return scale * (e.energy_j_per_token if energy else e.usd_per_token)  # type: ignore[attr-defined]

    fig, axes = plt.subplots(1, len(table.phases), figsize=(6.2 * len(table.phases), 4.4), squeeze=False)
    for ax, phase in zip(axes[0], table.phases, strict=True):
        for k, v in enumerate(VERSIONS):
            pts = [(int(s), table.per_version.get((phase, int(s), v))) for s in table.buckets]
            pts = [(s, e) for s, e in pts if e is not None]
            if not pts:
                continue
            x = np.array([s for s, _ in pts], dtype=float)
            y = np.array([value(e) for _, e in pts])
            ok = np.array([e.meets_slo for _, e in pts])
            ax.plot(x, y, "-", color=f"C{k}", lw=1.2, label=v)
            ax.plot(x[ok], y[ok], "o", color=f"C{k}", ms=3.5)
            ax.plot(x[~ok], y[~ok], "o", color=f"C{k}", mfc="none", ms=4.5)
        best = [table.best.get((phase, int(s))) for s in table.buckets]
        bx = [int(s) for s, e in zip(table.buckets, best, strict=True) if e is not None]
        by = [value(e) for e in best if e is not None]
        ax.plot(bx, by, "o", mfc="none", mec="black", ms=8, mew=1.2, ls="none", label="best fit")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length bucket (tokens)")
        ax.set_ylabel(f"{table.objective} per token ({unit})")
        ax.set_title(f"{phase}", fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                       title="chip version\n(hollow: misses SLO)", title_fontsize=7)
    fig.suptitle(f"{table.model.name}: best-fit vPod per length, by {table.objective} per token "
                 f"(SLO {table.slo_factor:g}x single-request latency)", fontsize=10)
    return report.save_png(fig, path)
