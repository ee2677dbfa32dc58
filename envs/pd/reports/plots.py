"""Plots of the pd reports: the capacity-power plane with its fronts (``servegym pd pareto --plot``)."""

from __future__ import annotations

from typing import Any


def plot_front(grid: Any, labels: list[str], front: Any, exact: Any, title: str, path: str) -> None:
    """Every deployment, the exact front and the epsilon-Pareto front (labelled) on the capacity-power plane."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    ax.scatter(grid.mu, grid.power_w, s=12, color="0.7", label="deployments")
    ax.plot(grid.mu[exact], grid.power_w[exact], ":", color="0.4", label="exact front")
    ax.plot(grid.mu[front], grid.power_w[front], "o-", color="C3", label="ε-Pareto front")
    for i in front:
        ax.annotate(labels[i], (grid.mu[i], grid.power_w[i]), textcoords="offset points", xytext=(4, -10),
                    fontsize=8)
    ax.margins(x=0.09, y=0.06)  # room for the labels of the largest deployments inside the axes
    ax.set_xlabel("serving capacity (req/s)")
    ax.set_ylabel("power at capacity (W)")
    ax.set_title(f"PD deployments, {title}")
    ax.legend(loc="upper left")
    from servegym.report import save_png

    save_png(fig, path, dpi=120)  # creates the folder (the docs' examples write into servegym-results/)
