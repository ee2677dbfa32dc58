"""The paired "beats" verdict (servegym.agents.verdict) on synthetic runs whose answer is known: a true win,
a seed-fluke win, an SLO-bought win, a return-spending win, a tie, and the tolerance's parts."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from servegym.agents import protocol, verdict
from servegym.agents.families import EpisodeResult

EPISODES, SEEDS = 30, 5


def _baseline(slo: float = 0.5, requests: float | None = 1000.0) -> list[EpisodeResult]:
    extra = {} if requests is None else {"slo_requests": requests}
    return [EpisodeResult("base", e, -10.0 - e, 1, {"carbon_g": 10.0 + e, "slo_violation_pct": slo, **extra})
            for e in range(EPISODES)]


def _agent(diff: Callable[[int, int, np.random.Generator], tuple[float, float, float]], slo: float = 0.5,
           seeds: int = SEEDS, rng_seed: int = 0) -> list[EpisodeResult]:
    """Runs of an agent whose (KPI, SLO pp, return) differences to the baseline on episode e, training
    seed u are ``diff(u, e, rng)``."""
    rng = np.random.default_rng(rng_seed)
    out = []
    for u in range(seeds):
        for e in range(EPISODES):
            dk, ds, dr = diff(u, e, rng)
            out.append(EpisodeResult("agent", e, -10.0 - e + dr, 1,
                                     {"carbon_g": 10.0 + e + dk, "slo_violation_pct": slo + ds}, train_seed=u))
    return out


def test_a_true_win_beats_on_every_seed() -> None:
    runs = _agent(lambda u, e, rng: (-1.0 + 0.2 * rng.standard_normal(), 0.0, 1.0))
    v = protocol.paired_verdict(runs, _baseline(), "carbon_g", "base")
    assert v.outcome == "beats" and v.beats and v.kpi_ci[1] < 0.0
    assert (v.seeds, v.seeds_beating, v.episodes) == (SEEDS, SEEDS, EPISODES)
    assert v.kpi_diff_pct == pytest.approx(100.0 * v.kpi_diff / np.mean([10.0 + e for e in range(EPISODES)]))
    assert v.text("agent").startswith("agent beats base (lower carbon_g beyond noise")
    assert "5 of 5 seeds beat" in v.text("agent")


def test_a_seed_fluke_is_a_tie_once_seeds_are_resampled() -> None:
    """One seed of five far better, four clones of the baseline (a little worse): averaging the seeds first
    and resampling episodes only would call it a win (its per-episode means are all about -1); resampling
    the seeds too leaves the lucky one out of a third of the resamples, so the CI reaches 0."""
    def fluke(u: int, e: int, rng: np.random.Generator) -> tuple[float, float, float]:
        return ((-5.0 if u == 0 else 0.02) + 0.05 * rng.standard_normal(), 0.0, 1.0 if u == 0 else 0.0)

    runs = _agent(fluke)
    v = protocol.paired_verdict(runs, _baseline(), "carbon_g", "base")
    assert v.outcome == "tie" and not v.beats and v.within_noise
    assert v.kpi_diff < -0.9 and v.kpi_ci[1] >= 0.0 and v.seeds_beating == 1
    assert "ties with base" in v.text("agent")
    # the episode-only view of the same runs (seed means, one unit) shows the fluke as a clear win
    pooled = [EpisodeResult("agent", e, float(np.mean([r.reward for r in runs if r.seed == e])), 1,
                            {"carbon_g": float(np.mean([r.metrics["carbon_g"] for r in runs if r.seed == e])),
                             "slo_violation_pct": 0.5}, train_seed=0) for e in range(EPISODES)]
    assert protocol.paired_verdict(pooled, _baseline(), "carbon_g").beats


def test_an_slo_bought_win_does_not_beat() -> None:
    """Lower KPI with 0.3 pp more violation against a 0.5 % baseline: the tolerance is max(10 % = 0.05 pp, one
    request of 1,000 = 0.1 pp)."""
    runs = _agent(lambda u, e, rng: (-1.0 + 0.2 * rng.standard_normal(), 0.3, 0.5))
    v = protocol.paired_verdict(runs, _baseline(), "carbon_g", "base")
    assert v.outcome == "slo" and not v.beats and v.kpi_ci[1] < 0.0
    assert v.slo_tolerance_pp == pytest.approx(0.1)  # one request of 1,000 (0.1 pp) > 10 % of 0.5 %


def test_the_slo_condition_is_on_the_ci_not_the_mean() -> None:
    """A mean SLO difference inside the tolerance whose CI reaches beyond it does not beat (non-inferiority)."""
    base = _baseline(slo=5.0, requests=None)  # tolerance 0.5 pp, no request count
    runs = _agent(lambda u, e, rng: (-1.0 + 0.1 * rng.standard_normal(), 0.3 + 1.5 * rng.standard_normal(), 1.0),
                  slo=5.0)
    v = protocol.paired_verdict(runs, base, "carbon_g")
    assert v.slo_tolerance_pp == pytest.approx(0.5) and v.slo_diff_pp < v.slo_tolerance_pp < v.slo_ci[1]
    assert v.outcome == "slo"


def test_a_win_that_spends_the_return_does_not_beat() -> None:
    runs = _agent(lambda u, e, rng: (-1.0 + 0.2 * rng.standard_normal(), 0.0, -0.5))
    v = protocol.paired_verdict(runs, _baseline(), "carbon_g")
    assert v.outcome == "return" and not v.beats and v.return_diff == pytest.approx(-0.5)


def test_no_difference_is_a_tie_and_worse_is_worse() -> None:
    tie = protocol.paired_verdict(_agent(lambda u, e, rng: (0.3 * rng.standard_normal(), 0.0, 0.0)), _baseline(),
                                  "carbon_g")
    assert tie.outcome == "tie" and tie.kpi_ci[0] <= 0.0 <= tie.kpi_ci[1]
    worse = protocol.paired_verdict(_agent(lambda u, e, rng: (1.0 + 0.1 * rng.standard_normal(), 0.0, -1.0)),
                                    _baseline(), "carbon_g")
    assert worse.outcome == "worse" and worse.reason() == "higher carbon_g beyond noise"
    one = protocol.paired_verdict(_agent(lambda u, e, rng: (-1.0, 0.0, 1.0))[:1], _baseline()[:1], "carbon_g")
    assert one.outcome == "no-ci" and not one.beats


def test_the_tolerance_is_relative_with_a_resolution_floor() -> None:
    """No fixed 0.05 pp: a 0.0007 % baseline over 100,000 requests allows max(0.00007, 0.001) pp."""
    assert verdict.slo_resolution_pp(100_000) == pytest.approx(0.001)
    assert verdict.slo_tolerance_pp(0.0007, verdict.slo_resolution_pp(100_000)) == pytest.approx(0.001)
    assert verdict.slo_tolerance_pp(50.0, 0.001) == pytest.approx(5.0)
    assert verdict.slo_tolerance_pp(0.0) == 0.0 and verdict.slo_resolution_pp(float("nan")) == 0.0
    # an agent at 0.185 % against 0.005 % fails however much energy it saves
    base = _baseline(slo=0.005, requests=100_000.0)
    runs = _agent(lambda u, e, rng: (-2.0 + 0.1 * rng.standard_normal(), 0.18, 5.0), slo=0.005)
    assert protocol.paired_verdict(runs, base, "carbon_g").outcome == "slo"


def test_units_fall_back_to_run_order_without_training_seeds() -> None:
    """Runs without a recorded training seed: the k-th run of an episode is unit k (models play in turn)."""
    runs = [EpisodeResult(r.policy, r.seed, r.reward, r.length, r.metrics)
            for r in _agent(lambda u, e, rng: (-1.0 + 0.1 * rng.standard_normal(), 0.0, 1.0), seeds=3)]
    table = verdict.value_table(runs, "carbon_g")
    assert sorted(table) == [0, 1, 2] and all(len(t) == EPISODES for t in table.values())
    assert protocol.paired_verdict(runs, _baseline(), "carbon_g").seeds == 3


def test_crossed_ci_widens_with_seed_spread_and_is_exact_without_spread() -> None:
    rng = np.random.default_rng(1)
    eps = rng.standard_normal(EPISODES)
    flat = np.tile(eps, (SEEDS, 1))
    spread = flat + np.array([3.0, -3.0, 0.0, 1.0, -1.0])[:, None]
    lo1, hi1 = verdict.crossed_ci(flat)
    lo2, hi2 = verdict.crossed_ci(spread)
    assert hi2 - lo2 > 2 * (hi1 - lo1)
    assert verdict.crossed_ci(np.full((3, 4), 2.5)) == (2.5, 2.5)
    lo, hi = verdict.crossed_iqm_ci(spread)
    assert lo <= float(np.mean(np.sort(spread.ravel())[37:113])) <= hi


def test_the_strongest_is_chosen_by_the_verdict_not_the_score() -> None:
    """Three rules: 'cheap' has the lowest KPI but buys it with SLO violations (so it beats no one, and no one
    beats it on the KPI); 'lean' beats 'steady' and no one beats lean: lean is the strongest, though cheap's
    mean KPI is the lowest; cheap ranks above steady, which lean beats."""
    rng = np.random.default_rng(3)

    def rule(name: str, dk: float, slo: float, dr: float) -> list[EpisodeResult]:
        return [EpisodeResult(name, e, -10.0 - e + dr, 1, {"carbon_g": 10.0 + e + dk + 0.05 * rng.standard_normal(),
                                                          "slo_violation_pct": slo, "slo_requests": 1000.0})
                for e in range(EPISODES)]

    runs = {"steady": rule("steady", 0.0, 0.5, 0.0), "cheap": rule("cheap", -2.0, 3.0, -1.0),
            "lean": rule("lean", -1.0, 0.5, 1.0)}
    ranked = verdict.verdict_ranking(runs, "carbon_g")
    assert [r.policy for r in ranked] == ["lean", "cheap", "steady"]
    top = ranked[0]
    assert top.policy == "lean" and top.beaten_by == () and "steady" in top.beats
    assert min(r.kpi for r in ranked) == next(r.kpi for r in ranked if r.policy == "cheap")
    assert all(top.policy not in r.beats for r in ranked)


def test_every_family_states_its_model_error_from_a_shipped_cross_check() -> None:
    """Effect sizes are read beside the scoring model's own error: each family names one, measured in a
    results file that exists."""
    from pathlib import Path

    from servegym.agents.families import families

    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    for name in ("geo", "pd", "npu"):
        me = protocol.MODEL_ERRORS[name]
        assert (results / me.source).is_file() and me.source in me.text()
        assert (me.mape_pct is None) == (me.worst_pct is None)
        assert me.mape_pct is None or 0.0 < me.mape_pct <= me.worst_pct
    for fam in families().values():
        for env_id in fam.env_ids:
            assert protocol.model_error(env_id) is protocol.MODEL_ERRORS.get(fam.name)
