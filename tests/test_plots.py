"""Every plot the CLI writes renders: a PNG file, not empty, not a blank canvas.

(The pd case-study figure is rendered by tests/test_pd_simulator.py::test_cli_case_study_plot, the geo compare
figure end to end by tests/test_geo_compare.py, and evaluate's summary.png by tests/test_agents_train.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest


def assert_renders(path: Path) -> None:
    import matplotlib.image as mpimg

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 300
    assert float(np.std(img[..., :3])) > 0.02  # something was drawn


def _geo_summary(n_seeds: int = 1) -> pd.DataFrame:
    pols = ["rr", "ll", "greedy:0", "greedy:0.5", "ilp", "iter-ilp", "milp", "green-llm", "moer"]
    rows = []
    for i, p in enumerate(pols):
        row = {"policy": p, "carbon_g": 22.4 - (0 if p in ("rr", "ll") else 9.3), "slo_violation_pct": 0.03 * (p == "green-llm"),
               "carbon_saving_pct": 0.0 if p in ("rr", "ll") else 41.5 + 0.1 * (i % 3)}
        if n_seeds > 1:
            row |= {"carbon_saving_pct_ci95": 1.0, "slo_violation_pct_ci95": 0.01}
        rows.append(row)
    return pd.DataFrame(rows)


@pytest.mark.parametrize("n_seeds", [1, 3])
def test_geo_compare_tradeoff_plot(tmp_path: Path, n_seeds: int) -> None:
    from servegym.envs.geo.reports.compare import plot_tradeoff

    assert_renders(plot_tradeoff(_geo_summary(n_seeds), tmp_path / "compare.png", title="test"))


def test_geo_tradeoff_into_a_caller_axes_gives_legend_handles() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from servegym.envs.geo.reports.compare import plot_tradeoff

    fig, ax = plt.subplots()
    assert plot_tradeoff(_geo_summary(), "", ax=ax) is None
    assert ax.get_legend_handles_labels()[1][:3] == ["rr", "ll", "greedy:0"]
    plt.close(fig)


def test_evaluate_summary_plot_keeps_ci_above_zero(tmp_path: Path) -> None:
    from servegym.agents.evaluate import episodes_frame, plot_summary, summary_frame
    from servegym.agents.families import EpisodeResult, family_for

    fam = family_for("servegym/GeoRoute-v0")
    res = [EpisodeResult(p, s, -c - s, 100, {"carbon_g": c + s, "slo_violation_pct": [0.0, 0.0, 2.0][s]})
           for s in range(3) for p, c in (("agent", 12.0), ("rr", 22.4))]
    assert_renders(plot_summary(summary_frame(episodes_frame(res, fam)), fam, tmp_path / "summary.png"))


def test_evaluate_summary_plot_draws_the_paired_verdicts(tmp_path: Path) -> None:
    """Unpaired bars can overlap where the paired CI excludes 0: the last panel draws the paired difference the
    verdict reads, per baseline (green where the agent beats it)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from servegym.agents import protocol
    from servegym.agents.evaluate import episodes_frame, plot_summary, summary_frame
    from servegym.agents.families import EpisodeResult, family_for

    fam = family_for("servegym/GeoRoute-v0")
    # scenario-to-scenario spread (10 g) far above the agent's steady 0.5-g saving: unpaired CIs overlap
    res = [EpisodeResult(p, s, 0.0, 100, {"carbon_g": 10.0 * s + c, "slo_violation_pct": 0.0})
           for s in range(5) for p, c in (("agent", 12.0), ("rr", 12.5), ("ll", 12.0))]
    by = {p: [r for r in res if r.policy == p] for p in ("rr", "ll")}
    agent = [r for r in res if r.policy == "agent"]
    paired = [protocol.paired_verdict(agent, by[p], "carbon_g", p) for p in ("rr", "ll")]
    assert paired[0].beats and not paired[1].beats
    drawn: list = []
    real = plt.Axes.errorbar

    def spy(self, x, y, *a, **k):  # type: ignore[no-untyped-def]
        if np.isscalar(x):  # the verdict panel's points (the bars' error bars come as arrays)
            drawn.append((self.get_title(), float(x), k.get("color")))
        return real(self, x, y, *a, **k)

    plt.Axes.errorbar = spy  # type: ignore[method-assign]
    try:
        png = plot_summary(summary_frame(episodes_frame(res, fam)), fam, tmp_path / "summary.png", paired)
    finally:
        plt.Axes.errorbar = real  # type: ignore[method-assign]
    assert_renders(png)
    assert [(x, c) for _, x, c in drawn] == [(-0.5, "tab:green"), (0.0, "tab:gray")]


def test_pd_compare_deployment_plot(tmp_path: Path) -> None:
    from servegym.cli import main

    png = tmp_path / "deployment.png"
    assert main(["pd", "compare", "--steps", "90", "--plot", str(png)]) == 0
    assert_renders(png)


def test_pd_pareto_front_plot(tmp_path: Path) -> None:
    from servegym.cli import main

    png = tmp_path / "front.png"
    assert main(["pd", "pareto", "--workload", "azure-conv", "--plot", str(png)]) == 0
    assert_renders(png)


def test_npu_dse_best_fit_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from servegym.cli import main

    png = tmp_path / "dse.png"
    assert main(["npu", "dse", "--model", "llama-3-8b", "--plot", str(png)]) == 0
    assert f"plot written to {png}" in capsys.readouterr().out
    assert_renders(png)


def test_npu_compare_plots(tmp_path: Path) -> None:
    from servegym.baselines.npu import compare, plot_compare

    res = compare("Llama-3-70B", "azure", 0.25, ("base", "neuscale", "ideal"), seed=0, rate_rpm=300)
    for p in plot_compare(res, str(tmp_path), "test"):
        assert_renders(Path(p))
