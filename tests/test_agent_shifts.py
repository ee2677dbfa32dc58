"""benchmarks/agent_shifts.py: the per-split summary and its table on a tiny synthetic input (no env is played)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from servegym.agents import protocol
from servegym.agents.families import EpisodeResult

ENV = "servegym/PDProvisionFront-v0"


def _mod():
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "agent_shifts.py"
    spec = importlib.util.spec_from_file_location("agent_shifts_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ep(policy: str, seed: int, reward: float, energy: float, slo: float, train_seed: int | None = None):
    m = {"energy_kwh": energy, "slo_violation_pct": slo}
    if train_seed is not None:
        m["train_seed"] = float(train_seed)
    return EpisodeResult(policy, seed, reward, 1440, m)


def _board(agent_energy: list[list[float]], agent_slo: float) -> dict[str, list[EpisodeResult]]:
    """4 scenarios; naive -50, paper -44, strongest -42, oracle -40 (returns), the agent per training seed."""
    seeds = range(4)
    by = {
        "static-peak": [_ep("static-peak", s, -50.0 - s, 50.0 + s, 0.0) for s in seeds],
        "min-power+lookahead": [_ep("min-power+lookahead", s, -44.0 - s, 44.0 + s, 0.0) for s in seeds],
        "min-power+forecast:0.97": [_ep("min-power+forecast:0.97", s, -42.0 - s, 42.0 + s, 0.01) for s in seeds],
        "oracle": [_ep("oracle", s, -40.0 - s, 40.0 + s, 0.0) for s in seeds],
    }
    by["agent"] = [_ep("agent", s, -e - s, e + s, agent_slo, k) for k, row in enumerate(agent_energy)
                   for s, e in zip(seeds, row, strict=True)]
    return by


def test_summary_scores_verdict_and_table() -> None:
    mod = _mod()
    # two training seeds, each 1 kWh below the strongest on every scenario (± a little): beats, score 50
    by = _board([[41.0, 40.9, 41.1, 41.0], [41.0, 41.1, 40.9, 41.0]], agent_slo=0.01)
    s = mod.summarize(ENV, by, "min-power+forecast:0.97", "energy_kwh")
    pol = s["policies"]
    assert pol["static-peak"]["score_mean"] == 0.0 and pol["oracle"]["score_mean"] == 100.0
    assert abs(pol["min-power+forecast:0.97"]["score_mean"] - 80.0) < 1e-9
    assert abs(pol["agent"]["score_mean"] - 90.0) < 1e-9
    v = pol["agent"]["vs_strongest"]
    ref = protocol.paired_verdict(by["agent"], by["min-power+forecast:0.97"], "energy_kwh")
    assert v["kpi_diff"] == ref.kpi_diff and v["kpi_diff_ci"] == list(ref.kpi_ci) and v["beats"] is True
    assert abs(v["kpi_diff"] + 1.0) < 1e-9 and abs(v["slo_diff_pp"]) < 1e-12
    assert abs(pol["agent"]["gap_closed"] - 0.5) < 1e-9 and abs(s["headroom"] - 20.0) < 1e-9
    assert s["best_baseline"] == "min-power+forecast:0.97" and "agent_vs_best_baseline" not in s
    assert s["per_seed_kpi_diff"] == {"0": -1.0, "1": -1.0}
    text = mod.table({"ids": {"PDProvisionFront-v0": {
        "strongest": "min-power+forecast:0.97", "verify": {"reproduces": True},
        "test": {**s, "episodes": 4}, "shifts": {"shift-burst": {**s, "episodes": 4, "cpu_s": 3.0}}}}})
    rows = [ln for ln in text.splitlines() if ln.startswith("| PDProvisionFront-v0")]
    assert len(rows) == 2 and "**yes**" in rows[1] and "| shift-burst | 4 | -1.000" in rows[1] and "| 2/2 |" in rows[1]


def test_slo_above_tolerance_loses_and_unreproduced_ids_are_named() -> None:
    mod = _mod()
    by = _board([[41.0, 40.9, 41.1, 41.0]], agent_slo=0.07)  # +0.06 pp > 10 % of the strongest's 0.01 %
    s = mod.summarize(ENV, by, "min-power+forecast:0.97", "energy_kwh")
    v = s["policies"]["agent"]["vs_strongest"]
    assert v["kpi_diff_ci"][1] < 0 and v["beats"] is False and "SLO" in v["reason"]
    text = mod.table({"ids": {"PDProvision-v0": {"strongest": "x", "verify": {"reproduces": False},
                                                 "skipped": "checkpoints missing", "shifts": {}}}})
    assert "PDProvision-v0: not evaluated (checkpoints missing)" in text


def test_shift_names_and_model_relocation(tmp_path) -> None:
    mod = _mod()
    assert mod.family_splits("servegym/PDProvisionResidual-v0") == ["shift-code", "shift-mooncake", "shift-burst",
                                                                    "shift-forecast", "shift-weekend"]
    assert "shift-weekend" in mod.family_splits("servegym/NPUAutoscale-v0")
    outs = [{"kind": "train", "seed": 1, "chosen": "/old/X_s1/best_model.zip"}, {"kind": "baseline"}]
    assert mod.model_paths(outs, tmp_path) == {1: tmp_path / "X_s1" / "best_model.zip"}
    assert mod.model_paths(outs, None) == {1: Path("/old/X_s1/best_model.zip")}


def test_agreement_counts_steps_at_the_reference_action() -> None:
    from types import SimpleNamespace

    import numpy as np

    mod = _mod()
    env = SimpleNamespace(unwrapped=SimpleNamespace(reference_action=lambda: np.array([2, 2])))
    acts = iter([np.array([2, 2]), np.array([1, 2]), np.array([2, 3]), np.array([2, 2])])
    agree = mod.Agreement()
    play = agree.wrap(lambda obs, info, e: next(acts))
    assert [play(None, {}, env).tolist() for _ in range(4)] == [[2, 2], [1, 2], [2, 3], [2, 2]]
    s = agree.summary()
    assert s["steps"] == 4 and s["equal"] == 0.5 and s["mean_diff"] == [-0.25, 0.25]
    assert s["below"] == [0.25, 0.0] and s["above"] == [0.0, 0.25]
    assert mod.Agreement().summary() is None
