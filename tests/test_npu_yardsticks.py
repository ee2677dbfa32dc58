"""The npu yardsticks: the paper's Ideal (NeuScale §5.1) is the oracle of both npu ids, above naive (Base)
and the paper's method on the same episode of every split, naive 0 and oracle 100 on its scale, and
``follow`` on the residual id replays NeuScale."""

from __future__ import annotations

import numpy as np
import pytest
from servegym.agents import benchmark as bm
from servegym.agents import protocol, protocol_stats

import servegym  # noqa: F401  (registers the ids)
from servegym.splits import splits_of

ENV = "servegym/NPUAutoscale-v0"
RESIDUAL = "servegym/NPUAutoscaleResidual-v0"
#: Half an hour (6 epochs): the cheapest horizon where Base and NeuScale both scale past their warm start.
SHORT = {"config": {"hours": 0.5}}


def _runs(env_id: str, split: str, names: list[str], seeds: list[int], kwargs: dict) -> dict:
    env = bm.make_split_env(env_id, split, kwargs)
    try:
        return bm.run_policy_episodes(env_id, env, names, seeds)
    finally:
        env.close()


def test_ideal_is_the_registered_relaxation_of_both_ids() -> None:
    for env_id in (ENV, RESIDUAL):
        y = protocol.yardsticks(env_id)
        assert (y.naive, y.paper, y.oracle, y.oracle_kind) == ("base", "neuscale", "ideal", "relaxation")
        assert "true input and output length" in y.oracle_knows
        assert protocol.scale_name(env_id).endswith("(ideal, relaxation) per episode")
    assert protocol.yardsticks(RESIDUAL).follow and not protocol.yardsticks(ENV).follow


# One short episode of every split of both ids: tests/test_yardsticks.py (the Ideal above Base by a margin,
# at least the paper's return, no SLO misses, less energy than Base; naive 0 and oracle 100).


def test_follow_is_neuscale_in_the_residual_id() -> None:
    """NPUAutoscaleResidual-v0's follow (the all-zero action, stepped through the env) returns NeuScale's
    episode, so an agent that only copies the paper's method scores what NeuScale scores."""
    runs = _runs(RESIDUAL, "test", ["follow", "neuscale"], [0], SHORT)
    f, p = runs["follow"][0], runs["neuscale"][0]
    assert f.reward == pytest.approx(p.reward, rel=1e-9, abs=1e-9)
    assert f.metrics["energy_j"] == pytest.approx(p.metrics["energy_j"], rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("split", splits_of("npu"))
def test_every_npu_split_is_well_posed_on_the_suite_horizon(split: str) -> None:
    """Three episodes of each split at the quick suite's 2-h horizon: the oracle - naive return margin's
    bootstrap CI excludes 0."""
    seeds = [0, 1, 2]
    runs = _runs(ENV, split, ["base", "ideal"], seeds, {"config": {"hours": 2.0}})
    margins = np.array([o.reward - n.reward for o, n in zip(runs["ideal"], runs["base"], strict=True)])
    lo, _ = protocol_stats._paired_ci([margins], protocol_stats._mean_along)
    assert lo > 0


@pytest.mark.slow
def test_registered_strongest_is_strongest_on_validation() -> None:
    """The registry's strongest npu baseline ranks first among the shipped non-oracle baselines on the
    validation episodes it was chosen on (10, seeds 1000-1009, its note) at the quick suite's horizon (never the
    test split). Three episodes were read before; since the fluid's TTFT tail became the one given a sub-step's
    work, NeuScale ranks first on the first three while Base stays ahead on the ten (NeuScale -147.1 [-331.4, -0.1])."""
    y = protocol.yardsticks(ENV)
    ranked = bm.select_strongest(ENV, ["base", "neuscale"], episodes=10, env_kwargs={"config": {"hours": 2.0}})
    assert ranked[0].policy == (y.strongest or y.paper)


def test_osl_accuracy_moves_neuscale_not_base() -> None:
    """The output-length prediction accuracy is not an inert knob in the env's default (fluid) mode: it
    routes NeuScale's decode requests among its length groups, so a test episode where NeuScale holds
    several decode groups (seed 1, half an hour) changes its energy between 20 % and 100 % accuracy, while
    Base (one group, nothing to predict) is unchanged. The size is small: benchmarks/npu_yardsticks.py measures it."""
    energy = {}
    for acc in (0.2, 1.0):
        runs = _runs(ENV, "test", ["base", "neuscale"], [1], {"config": {"hours": 0.5, "osl_accuracy": acc}})
        energy[acc] = {k: v[0].metrics["energy_j"] for k, v in runs.items()}
    assert energy[0.2]["base"] == energy[1.0]["base"]
    assert energy[0.2]["neuscale"] != energy[1.0]["neuscale"]
