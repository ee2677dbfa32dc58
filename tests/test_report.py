"""Results tables that explain themselves (servegym.report) and the CLI tables built on it."""

from __future__ import annotations

import pytest

from servegym import report


def test_seeds_phrase() -> None:
    assert report.seeds_phrase([0]) == "seed 0"
    assert report.seeds_phrase(range(5)) == "seeds 0-4 (5)"
    assert report.seeds_phrase([7, 3]) == "seeds 3, 7"


def test_format_column_uses_one_fixed_point_format() -> None:
    assert report.format_column([7.17e-05, 0.0], [1e-6, 0.0]) == ["0.000072 ± 0.000001", "0.000000 ± 0.000000"]
    assert report.format_column([14.57, -0.001]) == ["14.57", "0.00"]  # no "-0.00"
    assert report.format_column([52475.2, 135.7]) == ["52,475", "136"]
    assert report.format_column([8651.0, 10585.0]) == ["8,651", "10,585"]  # separators for all or none
    assert report.format_column([float("nan"), 1.0], [float("nan"), float("nan")]) == ["n/a", "1.000"]


def test_fit_width_drops_trailing_columns_only() -> None:
    header = ["policy", *(f"metric_{i:02d}_long_name" for i in range(10))]
    rows = [["agent", *("123.456 ± 7.890" for _ in range(10))]]
    h, r, dropped = report.fit_width(header, rows, 120)
    assert h == header[: len(h)] and dropped == header[len(h):] and dropped
    assert max(len(line) for line in report.text_table(h, r).splitlines()) <= 120


def test_legend_and_identical_rows_explain_the_geo_table() -> None:
    lines = report.legend("geo", ["rr", "greedy:0", "greedy:0.5", "moer", "milp@measured", "unknown"])
    assert lines[0] == "policies:" and any("greedy:0, greedy:0.5" in line for line in lines)
    assert all(len(line) <= report.WIDTH for text in lines for line in text.splitlines())
    groups = report.identical_groups({"rr": ["1"], "greedy:0": ["2"], "moer": ["2"], "ll": ["1"]})
    assert groups == [["rr", "ll"], ["greedy:0", "moer"]]
    assert "no marginal-emissions (MOER) signal" in report.explain_identical("geo", ["greedy:0", "moer"])
    assert "free batch slots" in report.explain_identical("geo", ["rr", "ll"])
    assert "precision shown" in report.explain_identical("npu", ["base", "neuscale"])


@pytest.mark.parametrize(("scores", "higher", "expected"), [
    ({"agent": -14.57, "greedy:0.5": -14.33, "rr": -20.0}, True,
     "verdict (reward): agent -14.57 vs best baseline greedy:0.5 -14.33: 1.7% worse; agent ranks 2 of 3"),
    ({"agent": 9.0, "rr": 10.0}, False, "verdict (reward): agent 9 vs best baseline rr 10: 10.0% better; agent ranks 1 of 2"),
    ({"rr": 1.0, "ll": 2.0}, True, "verdict: best reward: ll 2"),
])
def test_verdict(scores: dict, higher: bool, expected: str) -> None:
    assert report.verdict(scores, higher_is_better=higher, what="reward") == expected


def test_geo_verdict_is_slo_first_then_carbon() -> None:
    import pandas as pd
    from servegym.envs.geo.reports.compare import explanations, verdict_line

    summ = pd.DataFrame({"policy": ["rr", "a", "b", "c"], "carbon_g": [10.0, 5.0, 6.0, 1.0],
                         "carbon_saving_pct": [0.0, 50.0, 40.0, 90.0], "slo_violation_pct": [0.0, 0.9, 0.5, 3.0],
                         "ttft_p50_s": [0.1] * 4, "ttft_p90_s": [0.1] * 4, "ttft_p99_s": [0.1] * 4,
                         "sched_overhead_ms": [0.0] * 4})
    assert verdict_line(summ).startswith("verdict: best a: 50.0% carbon saving vs RR at 0.90% SLO violation")
    assert all(len(line) <= report.WIDTH for text in explanations(summ) for line in text.splitlines())


def test_pd_compare_text_explains_itself(capsys) -> None:
    from servegym.cli import main

    assert main(["pd", "compare", "--steps", "20"]) == 0
    out = capsys.readouterr().out
    assert "seed 0, first 20 periods" in out and "policies:" in out and "\nverdict: best " in out
    assert "e-0" not in out and all(len(line) <= report.WIDTH for line in out.splitlines())


def test_every_baseline_a_table_can_show_has_a_legend_entry() -> None:
    """evaluate's legend explains every row it can print: each family's default baselines (oracle and
    hindsight included), the protocol's references and the agent."""
    from servegym.agents import families
    from servegym.agents.protocol import checkpoint_references

    from servegym.registration import ENV_SPECS

    for entry in ENV_SPECS:
        fam = families.family_for(entry.id)
        names = [*fam.baselines, *(checkpoint_references(entry.id) or {}).values(), "agent"]
        missing = [n for n in names if report.describe_policy(fam.name, n) is None]
        assert not missing, (entry.id, missing)
    assert report.describe_policy("pd", "min-power+forecast:0.97") == report.describe_policy("pd", "min-power+forecast")


@pytest.mark.parametrize("episodes", [1, 3])
def test_evaluate_table_says_what_its_plus_minus_is(episodes: int) -> None:
    """The text and markdown reports label the ± (a 95 % CI half-width over the episodes, Student's t) and the
    legend names the oracle row."""
    import pandas as pd
    from servegym.agents.evaluate import explanations, summary_frame, text_report
    from servegym.agents.families import family_for

    rows = [{"policy": p, "seed": s, "reward": float(i + s)} for i, p in enumerate(["agent", "rr", "oracle"])
            for s in range(episodes)]
    summ = summary_frame(pd.DataFrame(rows))
    family = family_for("servegym/GeoRoute-v0")
    text = text_report(summ, family)
    assert (" ± " in text.splitlines()[2]) is (episodes > 1)  # a cell of the table
    note = f"cells: mean ± half-width of the 95 % confidence interval of the mean over {episodes} episode"
    assert note in " ".join(text.split())
    assert ("no ± with a single episode" in " ".join(text.split())) is (episodes == 1)
    legend = text.split("policies:", 1)[1]
    assert "oracle" in legend and "hindsight oracle" in legend
    assert explanations(summ, family, 10_000)[0].startswith("cells: mean ± half-width")
