"""Time to the strongest baseline (servegym.agents.time_to_strongest) on synthetic validation histories."""

from __future__ import annotations

import math

import pytest
from servegym.agents import time_to_strongest as tts

ROLES = {"naive": "rr", "paper": "milp", "strongest": "iter-ilp"}


def history(points: list[tuple[float, float]], cpu: list[float] | None = None) -> list[dict[str, float]]:
    """Evaluation rows (steps, validation score), with recorded CPU-s where given."""
    rows = [{"timesteps": s, "normalized_score": v, "mean_reward": v / 10.0} for s, v in points]
    for r, c in zip(rows, cpu or [], strict=False):
        r["cpu_s"] = c
    return rows


def run(seed: int, points: list[tuple[float, float]], cpu: list[float] | None = None,
        baselines: dict | None = None) -> dict:
    return {"kind": "train", "seed": seed, "validation": history(points, cpu),
            **({"validation_baselines": baselines} if baselines else {})}


def test_first_evaluation_at_or_above_the_strongest_with_its_recorded_cpu() -> None:
    h = history([(0, 90.0), (100, 99.9), (200, 101.0), (300, 99.0), (400, 105.0)], cpu=[1.0, 2.0, 3.5, 4.0, 5.0])
    r = tts.seed_reach(3, h, 100.0)
    assert (r.reached, r.steps, r.cpu_s, r.cpu_source, r.budget_steps) == (True, 200.0, 3.5, "recorded", 400.0)
    assert r.best_margin == pytest.approx(5.0)
    # the order of the rows does not matter; an equal score up to rounding counts as reaching it
    assert tts.seed_reach(3, list(reversed(h)), 100.0).steps == 200.0
    assert tts.seed_reach(0, history([(0, 100.0 - 1e-12)]), 100.0).reached
    assert not tts.seed_reach(0, history([(0, 100.0 - 1e-6)]), 100.0).reached


def test_evaluations_without_a_score_are_skipped() -> None:
    """A validation history whose scale was undefined on some evaluations (``normalized_score`` None, e.g. the
    paper's method below the naive baseline on those episodes) neither reaches nor crashes the leaderboard."""
    h = history([(0, 50.0), (100, 101.0)])
    h.insert(1, {"timesteps": 50, "normalized_score": None, "mean_reward": 1.0})
    r = tts.seed_reach(0, h, 100.0)
    assert r.reached and r.steps == 100.0
    assert not tts.seed_reach(0, [{"timesteps": 0, "normalized_score": None, "mean_reward": 0.0}], 100.0).reached


def test_never_within_the_budget() -> None:
    r = tts.seed_reach(0, history([(0, 50.0), (512, 80.0)]), 100.0)
    assert not r.reached and r.steps is None and r.cpu_s is None and r.budget_steps == 512.0
    assert r.best_margin == pytest.approx(-20.0)
    res = tts.time_to_strongest([run(0, [(0, 50.0)]), run(1, [(0, 60.0)])], ROLES, target=100.0)
    assert res is not None and res.text() == "never (0/2 seeds)" and math.isnan(res.steps_median)


def test_median_over_the_seeds_that_reached_it_and_estimated_cpu() -> None:
    model = tts.CpuModel((0.0, 100.0), (10.0, 30.0))  # 10 CPU-s at the first evaluation, 0.2 per step after
    assert model.at(50.0) == pytest.approx(20.0) and model.at(300.0) == pytest.approx(70.0)
    assert model.at(-5.0) == pytest.approx(10.0)
    outs = [run(2, [(0, 90.0), (100, 100.0)]), run(0, [(0, 101.0)]), run(1, [(0, 90.0), (100, 95.0), (200, 130.0)]),
            run(3, [(0, 10.0), (100, 20.0)])]
    res = tts.time_to_strongest(outs, ROLES, target=100.0, cpu_model=model)
    assert res is not None
    assert [s.seed for s in res.seeds] == [0, 1, 2, 3]
    assert [s.steps for s in res.seeds] == [0.0, 200.0, 100.0, None]
    assert res.steps_median == 100.0 and res.cpu_s_median == pytest.approx(30.0) and res.cpu_source == "estimated"
    assert res.text() == "100 steps, 30 CPU-s est. (3/4 seeds)"
    d = res.as_dict()
    assert (d["seeds_reached"], d["seeds"], d["strongest"], d["target_score"]) == (3, 4, "iter-ilp", 100.0)
    fields = tts.csv_fields(res)
    assert fields["tts_seeds_reached"] == 3 and fields["tts_cpu_source"] == "estimated"
    assert tts.csv_fields(None)["time_to_strongest"] == "" and math.isnan(tts.csv_fields(None)["tts_steps_median"])
    # without a CPU model or record the steps stand and the CPU-s are said to be unknown
    bare = tts.time_to_strongest(outs, ROLES, target=100.0)
    assert bare is not None and bare.text() == "100 steps, CPU-s n/a (3/4 seeds)"


def test_target_from_the_runs_own_validation_baselines_or_100_for_the_paper() -> None:
    rows = {"rr": [{"seed": 1000, "reward": -10.0}, {"seed": 1001, "reward": -12.0}],
            "milp": [{"seed": 1000, "reward": -5.0}, {"seed": 1001, "reward": -7.0}],
            "iter-ilp": [{"seed": 1000, "reward": -4.0}, {"seed": 1001, "reward": -6.0}]}
    # gap 5 (paper - naive), the strongest 6 above naive: 120 on the checkpoint scale
    outs = [run(0, [(0, 119.0), (10, 121.0)], baselines=rows)]
    assert tts.strongest_validation_score(outs, ROLES) == pytest.approx(120.0)
    res = tts.time_to_strongest(outs, ROLES, target=0.0)  # the run's own figure wins over a stored one
    assert res is not None and res.target_score == pytest.approx(120.0) and res.seeds[0].steps == 10.0
    assert tts.strongest_validation_score([run(0, [(0, 1.0)])], {**ROLES, "strongest": "milp"}) == 100.0
    assert tts.strongest_validation_score([run(0, [(0, 1.0)])], ROLES) is None
    assert tts.time_to_strongest([run(0, [(0, 1.0)])], ROLES) is None


def test_an_inverted_scale_is_ordered_as_the_runs_checkpoint_scale_is() -> None:
    """Where the paper's method returns less than the naive baseline on the validation episodes (GeoRoute-v0's
    stress-load track), the checkpoint scale puts the paper at 0 and the naive at 100
    (protocol.checkpoint_scale), and the strongest's target is read on that same scale."""
    from servegym.agents import protocol

    rows = {"rr": [{"seed": 1000, "reward": -5.0}, {"seed": 1001, "reward": -7.0}],
            "milp": [{"seed": 1000, "reward": -10.0}, {"seed": 1001, "reward": -12.0}],
            "ll": [{"seed": 1000, "reward": -4.0}, {"seed": 1001, "reward": -6.0}]}
    roles = {"naive": "rr", "paper": "milp", "strongest": "ll"}
    # milp at 0, rr at 100 (gap 5), ll 6 above milp: 120
    assert tts.strongest_validation_score([run(0, [(0, 1.0)], baselines=rows)], roles) == pytest.approx(120.0)
    # the paper as the strongest below the naive sits at 0 of the ordered scale, not at 100
    assert tts.strongest_validation_score([run(0, [(0, 1.0)], baselines=rows)],
                                          {**roles, "strongest": "milp"}) == pytest.approx(0.0)
    refs = {"naive": "rr", "best": "milp"}
    assert protocol.checkpoint_scale(refs, {"rr": [-5.0, -7.0], "milp": [-10.0, -12.0]}) == {"naive": "milp", "best": "rr"}
    assert protocol.checkpoint_scale(refs, {"rr": [-10.0], "milp": [-5.0]}) == refs  # ordered: unchanged


def test_the_evaluator_scores_on_the_ordered_scale() -> None:
    """SeededEvalCallback's validation scores exist on an inverted pair and are linear in the return: the
    paper's method (below the naive baseline) at 0, the naive at 100."""
    from servegym.agents.callbacks import SeededEvalCallback
    from servegym.agents.families import EpisodeResult

    def res(seed: int, reward: float) -> EpisodeResult:
        return EpisodeResult(policy="x", seed=seed, reward=reward, length=1, metrics={})

    cb = SeededEvalCallback(lambda: None, None, [1, 2], [], 1, None,  # type: ignore[arg-type]
                            references={"naive": "rr", "best": "milp"})
    cb.baseline_results = {"rr": [res(1, -5.0), res(2, -7.0)], "milp": [res(1, -10.0), res(2, -12.0)]}
    cb.scale = cb._ordered_references()
    assert cb.scale == {"naive": "milp", "best": "rr"}
    scores = cb._scores([res(1, -5.0), res(2, -12.0)])
    assert scores is not None and list(scores) == pytest.approx([100.0, 0.0])


def test_stored_references_only_for_the_same_entry(tmp_path) -> None:
    from servegym.agents.benchmark import SUITE

    e = SUITE["smoke"][0]
    path = tmp_path / tts.RESULT_FILE
    assert tts.stored_references(path, [e]) == {}
    import json

    path.write_text(json.dumps({"ids": {e.env_id: {"entry": e.__dict__, "target_score": 102.5,
                                                   "cpu_model": {"steps": [0, 10], "cpu_s": [1, 2]}}}}))
    got = tts.stored_references(path, [e])[e.env_id]
    assert got.target == 102.5 and got.cpu_model == tts.CpuModel((0, 10), (1, 2))
    other = {**e.__dict__, "timesteps": e.timesteps + 1}
    path.write_text(json.dumps({"ids": {e.env_id: {"entry": other, "target_score": 1.0}}}))
    assert tts.stored_references(path, [e]) == {}


def test_fill_adds_the_column_to_agent_rows_and_changes_nothing_else(tmp_path) -> None:
    """benchmarks/time_to_strongest.py --fill-leaderboard on synthetic leaderboard files and a stored run."""
    import importlib.util
    import json
    from pathlib import Path

    import pandas as pd

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "time_to_strongest.py"
    spec = importlib.util.spec_from_file_location("time_to_strongest_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    env, entry = "servegym/GeoRoute-v0", {"env_id": "servegym/GeoRoute-v0", "timesteps": 20}
    runs = tmp_path / "suite_runs" / "quick"
    runs.mkdir(parents=True)
    outs = [{**run(0, [(10, 101.0), (20, 104.0)]), "rows": [{}] * 2},
            {**run(1, [(10, 90.0), (20, 95.0)]), "rows": [{}] * 2}]
    (runs / "GeoRoute-v0.json").write_text(json.dumps({"entry": entry, "outputs": outs}))
    (tmp_path / tts.RESULT_FILE).write_text(json.dumps({"ids": {env: {
        "entry": entry, "target_score": 102.7, "cpu_model": {"steps": [10.0], "cpu_s": [9.5]}}}}))
    records = [{"env": env, "policy": "iter-ilp", "role": "strongest", "episodes": 2, "score_mean": 94.4},
               {"env": env, "policy": "agent:ppo", "role": "agent", "episodes": 4, "score_mean": 93.6}]
    (tmp_path / "leaderboard.json").write_text(json.dumps(records, indent=2) + "\n")
    pd.DataFrame(records).assign(note=["a, b", ""]).to_csv(tmp_path / "leaderboard.csv", index=False)
    md = ["# board", "", "Agents: each seed's checkpoint chosen on the validation split only. Generated by x.", "",
          f"## {env}", "", "| policy | role | score |", "|---|---|---|", "| iter-ilp | strongest | 94.4 |",
          "| agent:ppo | agent | 93.6 |", "", "![p](p.png)", ""]
    (tmp_path / "leaderboard.md").write_text("\n".join(md))
    before = {f: (tmp_path / f"leaderboard.{f}").read_text() for f in ("json", "csv", "md")}
    assert mod.fill_leaderboard(tmp_path, "quick") == [env]
    got = json.loads((tmp_path / "leaderboard.json").read_text())
    assert got[0] == records[0] and {k: v for k, v in got[1].items() if k != "time_to_strongest"} == records[1]
    assert got[1]["time_to_strongest"]["text"] == "20 steps, 10 CPU-s est. (1/2 seeds)"
    csv_lines = (tmp_path / "leaderboard.csv").read_text().splitlines()
    assert all(new.startswith(old + ",") for old, new in zip(before["csv"].splitlines(), csv_lines, strict=True))
    assert csv_lines[2].endswith(',"20 steps, 10 CPU-s est. (1/2 seeds)",20.0,9.5,estimated,1.0,2.0')
    assert csv_lines[1].endswith(",,,,,,")
    lines = (tmp_path / "leaderboard.md").read_text().split("\n")
    assert lines[6].endswith(f"| {tts.MD_HEADER} |") and lines[7] == "|---|---|---|---|"
    assert lines[8].endswith("| - |") and lines[9].endswith("| 20 steps, 10 CPU-s est. (1/2 seeds) |")
    assert tts.LEADERBOARD_NOTE in lines[2] and lines[11] == "![p](p.png)"
    with pytest.raises(SystemExit):  # a second fill is refused rather than adding the column twice
        mod.fill_leaderboard(tmp_path, "quick")
