"""The agents layer without training: metric aggregation, CIs, hyperparameter files, sweep configs,
algorithm/action-space checks and one-line CLI errors."""

from __future__ import annotations

import math
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.agents.algos import check_algo, get_algo
from servegym.agents.evaluate import episodes_frame, markdown_table, summary_frame, t_halfwidth, text_report
from servegym.agents.families import (
    EpisodeAccumulator,
    EpisodeResult,
    MetricSpec,
    family_for,
    resolve_baselines,
    saving_pct,
)
from servegym.agents.hparams import load_hyperparams, parse_section
from servegym.agents.sweep import parse_sweep

import servegym
from servegym.cli import main
from servegym.errors import ConfigError

PD = "servegym/PDProvision-v0"
GEO = "servegym/GeoRoute-v0"
GEO_WIN = "servegym/GeoRouteWindow-v0"


def registered(env_id: str) -> bool:
    return env_id in gym.registry


def test_accumulator_aggregations() -> None:
    specs = (MetricSpec("a", ("a",), agg="sum"), MetricSpec("b", ("b",), agg="mean"),
             MetricSpec("c", ("c",), agg="wmean", weight_key="w", scale=100.0), MetricSpec("d", ("d", "d2")),
             MetricSpec("missing", ("nope",)))
    acc = EpisodeAccumulator(specs)
    acc.add({"a": 1.0, "b": 2.0, "c": 0.5, "w": 1.0, "d2": 7.0})
    acc.add({"a": 2.0, "b": 4.0, "c": 0.0, "w": 3.0, "d": 9.0, "episode_metrics": {"d": 11.0}})
    out = acc.result()
    assert out == pytest.approx({"a": 3.0, "b": 3.0, "c": 100.0 * 0.5 / 4.0, "d": 11.0})
    assert "missing" not in out  # absent keys are left out, not zero


@settings(max_examples=15, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=40))
def test_t_halfwidth_matches_scipy(xs: list[float]) -> None:
    from scipy import stats

    x = np.asarray(xs)
    hw = t_halfwidth(x)
    if x.std() == 0:
        assert hw == 0.0
    else:
        lo, hi = stats.t.interval(0.95, x.size - 1, loc=x.mean(), scale=stats.sem(x))
        assert hw == pytest.approx((hi - lo) / 2.0, rel=1e-9, abs=1e-9)


def test_summary_and_saving_vs_reference() -> None:
    fam = family_for(GEO)
    res = [EpisodeResult("agent", s, -1.0 * s, 10, {"carbon_g": 50.0 + s}) for s in (0, 1, 2)]
    res += [EpisodeResult("rr", s, -2.0, 10, {"carbon_g": 100.0}) for s in (0, 1, 2)]
    eps = episodes_frame(res, fam)
    assert eps.loc[eps.policy == "agent", "saving_vs_rr_pct"].tolist() == pytest.approx([50.0, 49.0, 48.0])
    summ = summary_frame(eps)
    assert summ["policy"].tolist() == ["agent", "rr"]
    agent = summ.iloc[0]
    assert agent["carbon_g_mean"] == pytest.approx(51.0)
    assert agent["carbon_g_ci"] > 0 and summ.iloc[1]["carbon_g_ci"] == 0.0
    md = markdown_table(summ)
    assert md.splitlines()[0].startswith("| policy | episodes | reward")
    assert "| 51.0 ± 2.5 | 49.00 ± 2.48 |" in md and "| 100.0 ± 0.0 | 0.00 ± 0.00 |" in md  # one format per column
    text = text_report(summ, fam)
    assert "verdict" not in text and "ranks" not in text  # the paired verdicts come from the protocol only
    assert "round-robin" in text and all(len(line) <= 120 for line in text.splitlines())
    assert math.isnan(saving_pct(1.0, 0.0))


def test_baseline_resolution() -> None:
    fam = family_for(GEO)
    assert resolve_baselines(fam, "all") == list(fam.baselines)
    assert resolve_baselines(fam, "none") == []
    assert resolve_baselines(fam, "rr,greedy:0.3") == ["rr", "greedy:0.3"]
    with pytest.raises(ConfigError, match="unknown for family 'geo'"):
        resolve_baselines(fam, "rr,bogus")
    generic = family_for("CartPole-v1")
    assert generic.name == "generic" and resolve_baselines(generic, "all") == []
    with pytest.raises(ConfigError, match="has no baselines"):
        resolve_baselines(generic, "rr")


def test_algo_action_space_checks() -> None:
    box = gym.spaces.Box(-1, 1, (3,))
    disc = gym.spaces.Discrete(4)
    assert check_algo("sac", box, "x", has_masks=False).name == "sac"
    assert check_algo("maskable-ppo", disc, "x", has_masks=True).needs_masks
    with pytest.raises(ConfigError, match=r"'dqn' cannot act in x's Box action space.*allowed for this env: ppo, a2c, sac, td3"):
        check_algo("dqn", box, "x", has_masks=False)
    with pytest.raises(ConfigError, match="needs an env with action_masks"):
        check_algo("maskable-ppo", disc, "x", has_masks=False)
    with pytest.raises(ConfigError, match="unknown"):
        get_algo("trpo")


def test_hyperparameter_files(tmp_path) -> None:
    for env_id in (GEO, GEO_WIN, PD, "servegym/NPUAutoscale-v0"):
        hp = load_hyperparams(env_id, "ppo")
        assert hp.source.endswith(env_id.split("/")[1] + ".yml")
        assert hp.n_envs and hp.n_timesteps and "n_steps" in hp.algo_kwargs
    assert load_hyperparams("CartPole-v1", "ppo").source == "defaults"
    zoo = tmp_path / "zoo.yml"  # rl-zoo3 layout: env id at the top
    zoo.write_text("servegym/PDProvision-v0:\n  n_timesteps: !!float 1e4\n  normalize: \"{'norm_obs': True, "
                   "'norm_reward': False}\"\n  learning_rate: lin_1e-3\n  n_steps: 32\n")
    hp = load_hyperparams(PD, "ppo", zoo)
    assert hp.n_timesteps == 10_000 and hp.normalize == {"norm_obs": True, "norm_reward": False}
    assert hp.algo_kwargs == {"learning_rate": "lin_1e-3", "n_steps": 32}
    with pytest.raises(ConfigError, match="n_envs = 0"):
        parse_section({"n_envs": 0}, "f.yml")
    with pytest.raises(ConfigError, match="no such file"):
        load_hyperparams(PD, "ppo", tmp_path / "absent.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("ppo: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_hyperparams(PD, "ppo", bad)


@pytest.mark.skipif(not registered(PD), reason="servegym/PDProvision-v0 is not registered yet")
def test_sweep_config_validation(tmp_path) -> None:
    doc = {"env": PD, "scenarios": [{"name": "a"}, {"name": "b", "env_kwargs": {"config": {"objective": "carbon"}}}],
           "policies": ["static-peak", "min-power"], "seeds": {"start": 3, "count": 2}}
    cfg = parse_sweep(doc)
    tasks = cfg.tasks()
    assert len(tasks) == 8 and {t["seed"] for t in tasks} == {3, 4}
    with pytest.raises(ConfigError, match="policy 'rr' is not a baseline of servegym/PDProvision-v0"):
        parse_sweep({**doc, "policies": ["rr"]})
    with pytest.raises(ConfigError, match="no such file"):
        parse_sweep({**doc, "policies": [{"agent": str(tmp_path / "nope.zip")}]})
    with pytest.raises(ConfigError, match="unknown key"):
        parse_sweep({**doc, "polices": []})
    with pytest.raises(ConfigError, match="seeds"):
        parse_sweep({**doc, "seeds": "x"})


@pytest.mark.parametrize(("argv", "message"), [
    (["train", "--env", "servegym/Nope-v0", "--timesteps", "10"], "is not a registered env id"),
    (["train", "--env", "CartPole-v1", "--algo", "sac", "--timesteps", "10"], "cannot act in CartPole-v1's Discrete"),
    (["train", "--env", "CartPole-v1", "--timesteps", "10", "--env-kwargs", "{bad"], "is not JSON"),
    (["evaluate", "--model", "/nonexistent/model.zip"], "no such file"),
    (["sweep", "/nonexistent/sweep.yml"], "no such file"),
])
def test_cli_errors_are_one_line(argv: list[str], message: str, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_import_servegym_and_help_do_not_load_torch() -> None:
    code = ("import sys, servegym, servegym.cli as c; c.build_parser(); import servegym.agents.families, "
            "servegym.agents.sweep, servegym.agents.evaluate; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert servegym is not None and pd is not None


@pytest.mark.skipif(not registered("servegym/NPUAutoscale-v0"), reason="NPUAutoscale-v0 is not registered yet")
def test_npu_episode_metrics_aggregate_the_epochs() -> None:
    from servegym.agents.rollout import play_episode

    fam = family_for("servegym/NPUAutoscale-v0")
    env = gym.make("servegym/NPUAutoscale-v0", config={"hours": 0.5})
    act = np.ones(env.action_space.shape, dtype=np.int64)
    res = play_episode(env, lambda obs, info, e: act, 3, "const", fam.metrics)
    env.reset(seed=3)
    infos = [env.step(act)[4] for _ in range(res.length)]
    assert res.length == 6
    assert res.metrics["energy_j"] == pytest.approx(sum(i["energy_j"] for i in infos))
    assert res.metrics["slo_misses"] == pytest.approx(sum(i["slo_misses"] for i in infos))
    fin = sum(i["finished"] for i in infos)
    assert res.metrics["slo_violation_pct"] == pytest.approx(
        sum(i["slo_violation_pct"] * i["finished"] for i in infos) / fin)
    assert res.metrics["power_w"] == pytest.approx(sum(i["power_w"] for i in infos) / len(infos))
    assert infos[0]["power_w"] == pytest.approx(infos[0]["energy_j"] / env.unwrapped.cluster_config.epoch_s)
