"""Short training runs per family write TensorBoard events with the domain scalars and the baselines'
reference lines and a model that loads; evaluate runs on it; a 2x2 sweep with the saved agent runs
on the process pool (and on Ray when installed). Each family trains once (module fixture) on a tiny
scenario: a few hundred steps, but torch start-up and spawned workers make the file take a minute or
more on a shared 2-core machine, hence ``slow``. The fast sweep checks are in test_agents_sweep.py."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pandas as pd
import pytest

import servegym  # noqa: F401  (registers the ids)
from servegym.cli import main

pytestmark = pytest.mark.slow

pytest.importorskip("stable_baselines3", reason="the rl extra (stable-baselines3) is not installed")
pytest.importorskip("sb3_contrib", reason="the rl extra (sb3-contrib) is not installed")

# Per family: the env id, tiny gym.make kwargs, the algorithm, two cheap baselines, and hyperparameters
# small enough that a run is a few hundred steps. npu: one hour (12 epochs) of Llama-3-8B with one
# Pareto candidate per group, ~50 ms per step.
CASES = {
    "pd": ("servegym/PDProvision-v0", {"config": {"scenario": {"horizon_steps": 24}}}, "maskable-ppo",
           ["static-peak", "min-power"]),
    "geo": ("servegym/GeoRoute-v0", {"config": {"preset": "mini", "geo": {"duration_s": 1}}}, "maskable-ppo",
            ["rr", "greedy:0.5"]),
    # the learnable mode: changes around NeuScale, reward relative to Base
    "npu": ("servegym/NPUAutoscaleResidual-v0", {"config": {"model": "Llama-3-8B", "hours": 1.0, "n_candidates": 1,
                                                             "split": None}},
            "maskable-ppo", ["base", "neuscale", "ideal"]),
}
# The domain scalars each family's TensorBoard must carry (episode, eval and baseline lines).
DOMAIN_KEYS = {"pd": ("carbon_g", "slo_violation_pct", "energy_kwh", "power_w", "cost_usd"),
               "geo": ("carbon_g", "slo_violation_pct", "energy_kwh", "power_w"),
               "npu": ("energy_j", "cost_usd", "slo_violation_pct", "power_w")}
TINY_HP = "{algo}:\n  n_envs: 2\n  n_steps: 64\n  batch_size: 64\n  n_epochs: 2\n  normalize: true\n" \
          "  policy_kwargs: {{net_arch: [16]}}\n"


def _case(family: str) -> tuple[str, dict, str, list[str]]:
    case = CASES[family]
    if case[0] not in gym.registry:
        pytest.skip(f"{case[0]} is not registered yet")
    return case


@pytest.fixture(scope="module", params=sorted(CASES))
def trained(request, tmp_path_factory) -> dict:
    family = request.param
    env_id, kwargs, algo, baselines = _case(family)
    d = tmp_path_factory.mktemp(f"train_{family}")
    hp = d / "hp.yml"
    hp.write_text(TINY_HP.format(algo=algo))
    argv = ["train", "--env", env_id, "--algo", algo, "--timesteps", "256", "--hyperparams", str(hp),
            "--tb", str(d / "tb"), "--out", str(d / "run" / "model.zip"), "--env-kwargs", json.dumps(kwargs),
            "--eval-freq", "128", "--eval-episodes", "2", "--baselines", ",".join(baselines),
            "--no-progress", "--json"]
    assert main(argv) == 0
    return {"family": family, "env_id": env_id, "kwargs": kwargs, "dir": d, "baselines": baselines,
            "model": d / "run" / "model.zip"}


def test_tensorboard_run_is_named_after_the_out_folder(trained: dict) -> None:
    """``--out DIR/run/model.zip`` gives TensorBoard's run the folder's name (SB3 adds ``_1``), not the env id's."""
    assert sorted(p.name for p in (trained["dir"] / "tb").iterdir() if p.is_dir()) == ["run_1"]


def _scalars(tb_dir: Path) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (run,) = [p for p in tb_dir.iterdir() if p.is_dir()]
    ea = EventAccumulator(str(run))
    ea.Reload()
    return {tag: [e.value for e in ea.Scalars(tag)] for tag in ea.Tags()["scalars"]}


def test_tensorboard_has_domain_scalars_and_baseline_lines(trained: dict) -> None:
    from servegym.agents.families import family_for

    fam = family_for(trained["env_id"])
    tags = _scalars(trained["dir"] / "tb")
    for key in DOMAIN_KEYS[trained["family"]]:
        assert key in fam.metric_keys()
        assert tags.get(f"episode/{key}"), f"episode/{key} missing"
        assert len(tags[f"eval/{key}"]) >= 2  # periodic + final evaluation
        for b in trained["baselines"]:
            line = tags[f"baseline/{b}/{key}"]
            assert len(line) == len(tags[f"eval/{key}"])  # one point per evaluation
            assert len(set(line)) == 1  # same seeds every time: a flat reference line
    assert "rollout/ep_rew_mean" in tags
    if fam.reference:
        assert tags[f"baseline/{fam.reference}/saving_vs_{fam.reference}_pct"][0] == pytest.approx(0.0)
        assert f"eval/saving_vs_{fam.reference}_pct" in tags


def test_saved_model_loads_and_run_files(trained: dict) -> None:
    from servegym.agents.train import load_agent

    run_dir = trained["model"].parent
    run = json.loads((run_dir / "run.json").read_text())
    # training adds the protocol's naive/best references (for the validation normalized score) to the baselines
    from servegym.agents.protocol import checkpoint_references

    ck = checkpoint_references(trained["env_id"]) or {}
    refs = [b for b in dict.fromkeys(ck.values()) if b not in trained["baselines"]]
    assert run["env_id"] == trained["env_id"] and run["baselines"] == [*trained["baselines"], *refs]
    assert (run_dir / "model_vecnormalize.npz").is_file() and (run_dir / "best_model.zip").is_file()
    assert list((run_dir / "checkpoints").glob("model_*_steps.zip"))
    model, norm, info = load_agent(trained["model"])
    assert norm is not None and info["algo"] == "maskable-ppo"
    env = gym.make(trained["env_id"], **trained["kwargs"])
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(norm(obs), deterministic=True, action_masks=env.unwrapped.action_masks())
    assert env.action_space.contains(action.astype(env.action_space.dtype) if action.ndim else int(action))


def test_evaluate_writes_table_and_plot(trained: dict, capsys) -> None:
    out = trained["dir"] / "eval"
    argv = ["evaluate", "--model", str(trained["model"]), "--episodes", "2",
            "--baselines", ",".join(trained["baselines"]), "--out-dir", str(out), "--json"]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in summary] == ["agent", *trained["baselines"]]
    key = DOMAIN_KEYS[trained["family"]][0]
    assert all(r["episodes"] == 2 and f"{key}_ci" in r for r in summary)
    eps = pd.read_csv(out / "episodes.csv")
    # Agent and baselines met the same seeds.
    assert eps.groupby("policy")["seed"].apply(sorted).map(tuple).nunique() == 1
    assert (out / "summary.md").read_text().count("\n|") >= 3
    assert (out / "summary.png").stat().st_size > 5000
    # the agent's paired verdict against each baseline, by the protocol's one rule
    from servegym.agents.protocol import BEATS_RULE

    md = (out / "summary.md").read_text()
    assert BEATS_RULE in md
    assert all(f"agent beats {b} (" in md or f"agent does not beat {b} (" in md for b in trained["baselines"])


def _sweep_config(trained: dict, path: Path) -> Path:
    import yaml

    env_id, kwargs = trained["env_id"], trained["kwargs"]
    doc = {"name": "t", "env": env_id,
           "scenarios": [{"name": "a", "env_kwargs": kwargs}, {"name": "b", "env_kwargs": kwargs}],
           "policies": [trained["baselines"][0], {"agent": str(trained["model"]), "name": "agent"}],
           "seeds": [5]}
    path.write_text(yaml.safe_dump(doc))
    return path


def test_sweep_2x2_on_process_pool(trained: dict, capsys) -> None:
    cfg = _sweep_config(trained, trained["dir"] / "sweep.yml")
    out = trained["dir"] / "sweep.csv"
    assert main(["sweep", str(cfg), "--workers", "2", "--out", str(out), "--json"]) == 0
    df = pd.read_csv(out)
    assert len(df) == 4 and set(df["policy"]) == {trained["baselines"][0], "agent"}
    key = DOMAIN_KEYS[trained["family"]][0]
    assert set(df["scenario"]) == {"a", "b"} and df[key].notna().all()
    # Same scenario, policy and seed in both scenarios (identical kwargs): identical results.
    a, b = (df[df.scenario == s].set_index("policy")[key] for s in ("a", "b"))
    pd.testing.assert_series_equal(a, b)
    assert json.loads(capsys.readouterr().out)


def test_train_shows_progress_in_logs_and_says_how_it_rounded(tmp_path, capsys) -> None:
    """stderr is not a terminal under pytest, as in a log file: the progress lines still show; 100 asked steps train
    as one whole rollout of 2 envs x 64 steps, and the output says so."""
    env_id, kwargs, algo, _ = _case("pd")
    hp = tmp_path / "hp.yml"
    hp.write_text(TINY_HP.format(algo=algo))
    assert main(["train", "--env", env_id, "--algo", algo, "--timesteps", "100", "--hyperparams", str(hp),
                 "--out", str(tmp_path / "m.zip"), "--env-kwargs", json.dumps(kwargs), "--eval-freq", "0",
                 "--baselines", "none"]) == 0
    out, err = capsys.readouterr()
    assert "train: 128/128 steps done" in err
    start = next(ln for ln in err.splitlines() if "train: " in ln)
    # the start line estimates the training steps and the evaluations, before any evaluation runs
    assert "estimated" in start and "plus the evaluations" in start and "episode_costs.md" in start
    assert "trained 128 steps (asked 100: rounded up to whole rollouts)" in out
