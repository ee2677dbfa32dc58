"""``servegym train`` never loses a run: SIGINT/SIGTERM save the model, its statistics and run.json
(status interrupted); ``--resume`` continues from them (weights, optimizer, VecNormalize statistics with
their counts, steps done, evaluation history); an existing run is not replaced without ``--force``.
The signal tests send real signals to real training processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import interrupt_when

pytest.importorskip("stable_baselines3", reason="needs the rl extra: pip install -e '.[rl]'")

from servegym.agents.train import TrainConfig, train

from servegym.cli import main

HP = "ppo:\n  n_envs: 1\n  n_steps: 64\n  batch_size: 64\n  n_epochs: 1\n  normalize: true\n  policy_kwargs: {net_arch: [8]}\n"


def _cfg(tmp_path: Path, timesteps: int, **kw) -> TrainConfig:
    hp = tmp_path / "hp.yml"
    hp.write_text(HP)
    return TrainConfig(env_id="CartPole-v1", algo="ppo", timesteps=timesteps, hyperparams=str(hp),
                       out=str(tmp_path / "run" / "model.zip"), tb=None, eval_freq=0, checkpoint_freq=0,
                       eval_episodes=1, baselines="none", progress=False, verbose=0, **kw)


def _weights(path: Path) -> dict[str, np.ndarray]:
    import zipfile

    import torch

    with zipfile.ZipFile(path) as z, z.open("policy.pth") as fh:
        import io

        state = torch.load(io.BytesIO(fh.read()), weights_only=True)
    return {k: v.numpy().copy() for k, v in state.items()}


def _stats(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def test_stop_saves_an_interrupted_run_and_resume_restores_it(tmp_path) -> None:
    stop = threading.Event()
    stop.set()  # as if SIGTERM came during the first rollout
    res = train(_cfg(tmp_path, 10_000), stop)
    assert not res.complete and res.timesteps_trained < 10_000
    run = json.loads(res.run_file.read_text())
    assert run["status"] == "interrupted" and run["timesteps_trained"] == res.timesteps_trained
    saved_w, saved_s = _weights(res.model_path), _stats(res.vecnormalize_path)
    assert {"count", "ret_mean", "ret_var", "ret_count"} <= set(saved_s)
    # resuming to the steps already done trains nothing: the saved model is the one that was loaded
    res2 = train(_cfg(tmp_path, res.timesteps_trained, resume=True))
    assert res2.complete and res2.timesteps_trained == res.timesteps_trained
    for k, v in _weights(res2.model_path).items():
        np.testing.assert_array_equal(v, saved_w[k])
    for k, v in _stats(res2.vecnormalize_path).items():
        np.testing.assert_array_equal(v, saved_s[k])
    run2 = json.loads(res2.run_file.read_text())
    assert run2["status"] == "complete" and run2["resumed_at"] == [res.timesteps_trained]
    # and on to more steps: SB3 counts on from the steps done
    res3 = train(_cfg(tmp_path, res.timesteps_trained + 128, resume=True))
    assert res3.timesteps_trained >= res.timesteps_trained + 128
    assert json.loads(res3.run_file.read_text())["resumed_at"] == [res.timesteps_trained] * 2


def test_start_line_and_interrupt_count_say_the_same_rounded_total(tmp_path, capsys) -> None:
    """The progress start line and TrainResult.timesteps (the interrupt line's "of N") both give the steps learn()
    runs: 100 asked of 64-step rollouts is 128; a resumed run counts its rollouts from where it stopped."""
    stop = threading.Event()
    stop.set()
    res = train(TrainConfig(**{**_cfg(tmp_path, 100).__dict__, "progress": True}), stop)
    assert not res.complete and res.timesteps == 128
    err = capsys.readouterr().err
    assert "; 128 steps;" in err
    assert "(100 steps asked; rounded up to whole rollouts of 64 steps x 1 env); 128 steps;" in err  # and says why
    done = res.timesteps_trained  # stopped mid-rollout
    res2 = train(TrainConfig(**{**_cfg(tmp_path, 200, resume=True).__dict__, "progress": True}))
    remaining = -(-(200 - done) // 64) * 64
    assert res2.complete and res2.timesteps == res2.timesteps_trained == done + remaining
    err = capsys.readouterr().err
    assert f"; {remaining:,} steps;" in err
    assert f"(200 steps asked, {done:,} done; rounded up to whole rollouts of 64 steps x 1 env)" in err


def test_existing_run_is_refused_unless_force_or_resume(tmp_path, capsys) -> None:
    train(_cfg(tmp_path, 64))
    hp, out = str(tmp_path / "hp.yml"), str(tmp_path / "run" / "model.zip")
    args = ["train", "--env", "CartPole-v1", "--algo", "ppo", "--timesteps", "64", "--hyperparams", hp, "--out", out,
            "--tb", "", "--eval-freq", "0", "--eval-episodes", "1", "--baselines", "none", "--no-progress"]
    before = (tmp_path / "run" / "model.zip").read_bytes()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already holds a trained model; pass --resume to continue it or --force" in err
    assert (tmp_path / "run" / "model.zip").read_bytes() == before
    assert main([*args, "--force", "--json"]) == 0
    with pytest.raises(SystemExit) as exc:  # one or the other, as a usage error
        main([*args, "--resume", "--force"])
    assert exc.value.code == 2
    with pytest.raises(Exception, match="holds no run to resume"):
        train(TrainConfig(**{**_cfg(tmp_path, 64, resume=True).__dict__, "out": str(tmp_path / "empty" / "m.zip")}))
    # another seed's run in the folder is not resumed as this one
    with pytest.raises(Exception, match=r"run\.json has another seed than this run \(1\)"):
        train(TrainConfig(**{**_cfg(tmp_path, 64, resume=True).__dict__, "seed": 1}))


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_saves_model_and_run_json_then_resume_finishes(tmp_path, sig) -> None:
    (tmp_path / "hp.yml").write_text(HP)
    run_dir = tmp_path / "run"
    args = ["train", "--env", "CartPole-v1", "--algo", "ppo", "--hyperparams", str(tmp_path / "hp.yml"),
            "--out", str(run_dir / "model.zip"), "--tb", "", "--eval-freq", "0", "--eval-episodes", "1",
            "--baselines", "none", "--no-progress", "--checkpoint-freq", "256"]
    code = "import sys; from servegym.cli import main; sys.exit(main(sys.argv[1:]))"
    # ready once a checkpoint is on disk: training is under way
    rc, err = interrupt_when([sys.executable, "-c", code, *args, "--timesteps", "1000000"],
                             lambda: any((run_dir / "checkpoints").glob("model_*_steps.zip")), 180, sig)
    assert rc == 128 + sig, err
    assert f"interrupted by {signal.Signals(sig).name} after" in err and "--resume" in err
    run = json.loads((run_dir / "run.json").read_text())
    assert run["status"] == "interrupted" and 256 <= run["timesteps_trained"] < 1_000_000
    assert (run_dir / "model.zip").is_file() and (run_dir / "model_vecnormalize.npz").is_file()
    assert not (run_dir / "model.zip.lock").exists()
    assert not [p for p in run_dir.rglob("*") if ".tmp" in p.name]  # no torn temporary files
    target = run["timesteps_trained"] + 500
    done = subprocess.run([sys.executable, "-c", code, *args, "--timesteps", str(target), "--resume", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    final = json.loads((run_dir / "run.json").read_text())
    assert final["status"] == "complete" and final["timesteps_trained"] >= target
    assert final["resumed_at"] == [run["timesteps_trained"]]


def test_closing_hint_commands_run_as_printed(tmp_path, capsys, monkeypatch) -> None:
    """The closing hint's tensorboard and evaluate commands name this environment's scripts in a form the shell
    finds (a path when the venv is not on PATH, as in the README), --logdir is the --tb folder and --out-dir is in
    --out's run folder."""
    from servegym.agents.cli import runnable

    (tmp_path / "hp.yml").write_text(HP)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/nonexistent")  # the venv not activated
    assert main(["train", "--env", "CartPole-v1", "--timesteps", "64", "--hyperparams", "hp.yml", "--out",
                 "exp/a/model.zip", "--tb", "exp/tb", "--eval-freq", "0", "--eval-episodes", "1", "--baselines",
                 "none", "--no-progress"]) == 0
    lines = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines() if ": " in line)
    tb, *rest = lines["watch"].split()
    assert Path(tb).is_file() and Path(tb).name == "tensorboard" and rest == ["--logdir", "exp/tb"]
    tool, *rest = lines["compare"].split()
    assert Path(tool).is_file() and rest == ["evaluate", "--model", "exp/a/model.zip", "--out-dir", "exp/a/eval"]
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))  # activated: the bare name works
    assert runnable("servegym") == "servegym"


def _shipped_sections() -> list[tuple[str, str, str]]:
    """(id, algo, file) for every algo section of every shipped hyperparameter file (quick budgets included)."""
    from importlib import resources

    from servegym.safe_yaml import load_yaml

    folder = resources.files("servegym.agents").joinpath("hyperparams")
    return [("servegym/" + f.name.split(".")[0], algo, str(f)) for f in sorted(folder.iterdir(), key=lambda f: f.name)
            if f.name.endswith(".yml") for algo in load_yaml(f)]


#: The smallest scenario of each family (the run is stopped at its first step anyway).
_SMALL = {"geo": {"preset": "mini", "geo": {"duration_s": 1.0}}, "pd": {"scenario": {"horizon_steps": 24}},
          "npu": {"hours": 0.5, "split": None, "rate_rpm": 120.0}}


@pytest.mark.slow
@pytest.mark.parametrize(("env_id", "algo", "path"), _shipped_sections(),
                         ids=[f"{Path(p).name}:{a}" for _, a, p in _shipped_sections()])
def test_every_shipped_hyperparameter_file_resumes_after_an_interrupt(env_id: str, algo: str, path: str,
                                                                       tmp_path: Path) -> None:
    """Ctrl-C (the stop event the CLI's SIGINT handler sets) then --resume, on each shipped section: whatever
    it normalizes (observations, rewards, both or neither) and whatever the algorithm keeps (rollouts or a
    replay buffer), the interrupted run saves and the resumed one loads and finishes."""
    from servegym.agents.benchmark import SUITE

    from servegym.env_cards import family_of
    from servegym.safe_yaml import load_yaml

    config = dict(_SMALL[family_of(env_id)])
    if ".quick." in path:  # a quick file goes with its suite entry's env (a residual mode its warm start needs)
        config = {**next(e for e in SUITE["quick"] if e.env_id == env_id).env_kwargs.get("config", {}), **config}
    section = dict(load_yaml(Path(path))[algo])
    # the warm start and the rollout improvement run before the first RL step whatever the stop event says (a
    # Ctrl-C there waits for them): their budgets shrunk to a few batches, their code paths kept
    if "warm_start" in section:
        section["warm_start"] = {**section["warm_start"], "steps": 64, "epochs": 1, "batch_size": 32}
    if "policy_improvement" in section:
        section["policy_improvement"] = {**section["policy_improvement"], "rounds": 1, "states": 4, "futures": 1,
                                         "horizon": 2}
    hp = tmp_path / "hp.yml"
    hp.write_text(json.dumps({algo: section}))  # YAML reads JSON
    cfg = dict(env_id=env_id, algo=algo, timesteps=1_000_000, n_envs=1, hyperparams=str(hp),
               env_kwargs={"config": config}, out=str(tmp_path / "run" / "model.zip"), tb=None,
               eval_freq=0, checkpoint_freq=0, eval_episodes=1, baselines="none", progress=False, verbose=0)
    stop = threading.Event()
    stop.set()
    first = train(TrainConfig(**cfg), stop)
    assert not first.complete
    assert json.loads(first.run_file.read_text())["status"] == "interrupted"
    resumed = train(TrainConfig(**{**cfg, "timesteps": first.timesteps_trained + 1, "resume": True}))
    assert resumed.complete and resumed.timesteps_trained > first.timesteps_trained
    assert json.loads(resumed.run_file.read_text())["resumed_at"] == [first.timesteps_trained]
