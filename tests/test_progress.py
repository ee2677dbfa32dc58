"""First-hour output: progress lines of the long commands (start line, measured estimate, timestamped lines in
a log) and the one format of "allowed" lists with near-miss hints."""

from __future__ import annotations

import re

import pytest

from servegym import progress


def test_progress_in_a_log_prints_start_estimate_and_done(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    clock = iter([0.0, 0.5, 6.0, 17.0, 17.5, 30.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    with progress.Progress(4, "sweep", "cell", what="grid x: 2 policies", estimate_s=120.0, basis="measured") as bar:
        for _ in bar.iterate(range(4)):
            pass
    lines = capsys.readouterr().err.splitlines()
    assert all(re.match(r"\[\d\d:\d\d:\d\d\] sweep: ", ln) for ln in lines), lines
    assert "grid x: 2 policies; 4 cells; estimated 2.0 min (measured)" in lines[0]
    assert "2/4 cells in 6 s: about 6 s left" in lines[1]
    assert "3/4 cells, 17 s elapsed, about 6 s left" in lines[2]
    assert lines[-1].endswith("4/4 cells done in 30 s")


def test_train_estimate_and_durations() -> None:
    est, basis = progress.train_estimate("servegym/PDProvision-v0", 51_600)
    assert est == pytest.approx(100.0) and "quick leaderboard suite" in basis
    assert progress.train_estimate("CartPole-v1", 100)[0] is None
    assert [progress.duration(s) for s in (45, 190, 7200, float("nan"))] == ["45 s", "3.2 min", "2.0 h", "unknown"]


def test_allowed_lists_and_near_miss_hints() -> None:
    from servegym.envs.geo.reports.compare import check_policies

    from servegym.errors import ConfigError, listing, near_miss

    assert listing(["a", "b", 3]) == "a, b, 3"
    assert near_miss("greedy", ["rr", "greedy:<alpha>"]) == " (did you mean 'greedy:<alpha>', e.g. 'greedy:0.5'?)"
    assert near_miss("mlip", ["milp", "ilp"]) == " (did you mean 'milp'?)"
    assert near_miss("zzz", ["milp"]) == ""
    with pytest.raises(ConfigError) as exc:
        check_policies(["greedy", "rr", "rrr"])  # every bad spec named at once, on one line
    msg = str(exc.value)
    assert "'greedy' is not allowed (did you mean 'greedy:<alpha>'" in msg and "'rrr' is not allowed (did you " \
        "mean 'rr'?)" in msg and "allowed: rr, ll, greedy:<alpha>" in msg and "['" not in msg


def test_near_miss_hints_for_env_ids_and_policies() -> None:
    from servegym.agents import protocol

    from servegym.env_ids import check_env_id
    from servegym.errors import ConfigError

    with pytest.raises(ConfigError, match=r"\(did you mean 'servegym/PDProvision-v0'\?\); allowed: servegym/"):
        check_env_id("PDProvison-v0")
    with pytest.raises(ConfigError, match=r"\(did you mean 'naive'\?\); allowed: naive, paper"):
        protocol.resolve_policy("servegym/PDProvision-v0", "nauve")


@pytest.mark.parametrize(("env_id", "config", "field", "hint"), [
    ("servegym/PDProvision-v0", {"objective": "enrgy"}, "objective", "energy"),
    ("servegym/PDProvision-v0", {"mode": "fluidd"}, "mode", "fluid"),
    ("servegym/PDProvision-v0", {"action_mode": "residul"}, "action_mode", "residual"),
    ("servegym/NPUAutoscale-v0", {"fidelity": "requests"}, "fidelity", "request"),
    ("servegym/NPUAutoscale-v0", {"reward_mode": "zzz"}, "reward_mode", None),
    ("servegym/NPUAutoscale-v0", {"split": None, "model": "llama-3-7b"}, "model", "Llama-3-70B"),
    ("servegym/NPUAutoscale-v0", {"split": None, "trace": "lvevl"}, "trace", "lveval"),
    ("servegym/GeoRoute-v0", {"preset": "mni"}, "preset", "mini"),
])
def test_config_values_get_one_line_with_a_near_miss_hint(env_id: str, config: dict, field: str,
                                                          hint: str | None) -> None:
    """pd, npu and geo config values: one line naming the field, the hint for a near miss, ``allowed: a, b``."""
    import gymnasium as gym

    from servegym.errors import ConfigError

    with pytest.raises(ConfigError) as exc:
        gym.make(env_id, config=config)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"{field} = {config[field]!r} is ") and "; allowed: " in msg
    assert "['" not in msg.split("; allowed: ", 1)[1]  # a comma list, never a Python list
    if hint is None:
        assert "did you mean" not in msg
    else:
        assert f"(did you mean {hint!r}" in msg


@pytest.mark.parametrize(("env_id", "policy", "config", "line"), [
    ("servegym/NPUAutoscale-v0", "base", '{"fidelity": "fluidd"}',
     "fidelity = 'fluidd' is unknown (did you mean 'fluid'?); allowed: fluid, request"),
    ("servegym/PDProvision-v0", "naive", '{"objective": "enrgy"}',
     "objective = 'enrgy' is unknown (did you mean 'energy'?); allowed: energy, "),
])
def test_a_mistyped_value_on_the_command_line_exits_2(env_id: str, policy: str, config: str, line: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from servegym.cli import main

    rc = main(["dataset", "--env", env_id, "--policy", policy, "--episodes", "1",
               "--env-kwargs", f'{{"config": {config}}}'])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and line in err[0], err


def test_estimates_table_matches_the_measurements(repo_root) -> None:
    """servegym.estimates.COSTS holds exactly what benchmarks/episode_costs.py measured."""
    import json

    from servegym.estimates import COSTS

    measured = json.loads((repo_root / "benchmarks/results/episode_costs.json").read_text())
    assert set(COSTS) == set(measured)
    for ctx, row in measured.items():
        assert COSTS[ctx]["setup_cpu_s"] == pytest.approx(row["setup_cpu_s"], rel=1e-3)
        assert COSTS[ctx]["cpu_s_per_unit"] == pytest.approx(row["cpu_s_per_unit"], rel=1e-3)


def test_estimate_rests_on_the_measured_costs() -> None:
    from servegym.estimates import COSTS, estimate

    row = COSTS["pd compare"]
    s, basis = estimate("pd compare", ["min-power", "static-peak"], 100)
    want = (row["cpu_s_per_unit"]["min-power"] + row["cpu_s_per_unit"]["static-peak"]) * 100 + row["setup_cpu_s"]
    assert s == pytest.approx(want) and "episode_costs.md" in basis and "not measured" not in basis
    # a parameterised spec takes its measured sibling; an unknown policy the costliest, and says so
    g = COSTS["geo compare"]["cpu_s_per_unit"]
    assert estimate("geo compare", ["greedy:0.3"], 1, setup=False)[0] == pytest.approx(
        max(v for k, v in g.items() if k.startswith("greedy:")))
    s2, basis2 = estimate("pd compare", ["mystery"], 10, setup=False)
    assert s2 == pytest.approx(max(row["cpu_s_per_unit"].values()) * 10) and "mystery not measured" in basis2
    assert estimate("pd compare", ["min-power"], 10, runs=4, workers=2, setup=False)[0] == pytest.approx(
        row["cpu_s_per_unit"]["min-power"] * 20)
    assert estimate("CartPole-v1", ["agent"], 10) == (None, "")


def test_compare_and_dataset_start_with_an_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    from servegym.cli import main

    assert main(["pd", "compare", "--steps", "5"]) == 0
    assert main(["dataset", "--env", "servegym/PDProvision-v0", "--policy", "naive", "--episodes", "1",
                 "--out", "ds"]) == 0
    err = capsys.readouterr().err.splitlines()
    compare_start = next(ln for ln in err if "pd compare:" in ln)
    dataset_start = next(ln for ln in err if "dataset " in ln and "recording" in ln)  # 'naive' is static-peak
    for line, ctx in ((compare_start, "pd compare"), (dataset_start, "servegym/PDProvision-v0")):
        assert "estimated " in line and f"measured for each policy on {ctx}" in line and "episode_costs.md" in line


def test_train_estimate_of_the_readme_config_uses_its_own_rate(repo_root) -> None:
    import json

    line = next(ln for ln in (repo_root / "README.md").read_text().splitlines()
                if ln.startswith(".venv/bin/servegym train --env servegym/GeoRoute-v0"))
    readme = json.loads(line.split("--env-kwargs ", 1)[1].strip().strip("'"))  # the rate is for this config
    s, basis = progress.train_estimate("servegym/GeoRoute-v0", 20_480, readme)
    assert s == pytest.approx(20_480 / 235.0) and "this id and config" in basis
    assert progress.train_estimate("servegym/GeoRoute-v0", 20_480, {"config": {"preset": "small"}})[0] == \
        pytest.approx(20_480 / progress.TRAIN_STEPS_PER_S["servegym/GeoRoute-v0"])
