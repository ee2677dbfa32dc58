"""Issue 43, "nothing read outside, nothing overwritten or lost": output locks that survive garbage and pid
reuse, ``evaluate`` and the benchmark suite under a lock, sweep agents confined to the sweep file's folder,
sweep journals validated against the config, and ``servegym dataset`` cleaning up after SIGTERM and refusing a
symbolic link. Each case runs the real ``servegym`` command (its ``main`` in process, or a subprocess where
a signal is sent) on tiny budgets."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

import servegym  # noqa: F401  (registers the ids)
from servegym.cli import main
from servegym.outputs import OutputBusy, OutputLock, process_start

PD = "servegym/PDProvision-v0"
SHORT = {"config": {"scenario": {"horizon_steps": 24}}}


def _sweep_file(folder: Path, policies: list | None = None, seeds: list[int] | None = None) -> Path:
    doc = {"name": "t", "env": PD, "scenarios": [{"name": "day", "env_kwargs": SHORT}],
           "policies": policies or ["min-power"], "seeds": seeds or [7]}
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "sweep.yml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _one_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("servegym: error: "), err
    return err


# --------------------------------------------------------------------------- 19: locks
def _lock(path: Path, **owner: object) -> None:
    path.write_text(json.dumps({"host": socket.gethostname(), **owner}))


def test_lock_with_an_impossible_or_reused_pid_is_reclaimed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A lock naming pid 10^30 was an OverflowError; one naming a live process that is not its writer (the
    pid was reused: another start time, or a process younger than a lock without one) kept the output busy
    forever. Both are stale now; a lock whose writer is alive (same pid and start time) still refuses."""
    cfg, out = _sweep_file(tmp_path), tmp_path / "r.csv"
    lock = tmp_path / "r.csv.lock"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for owner in ({"pid": -5}, {"pid": True}, {"pid": "12"}):  # no valid pid: not a lock servegym wrote
            _lock(lock, **owner)
            with OutputLock(out):
                assert json.loads(lock.read_text())["pid"] == os.getpid()
        for owner in ({"pid": 10**30}, {"pid": sleeper.pid, "start": process_start(sleeper.pid) + 1}):
            _lock(lock, **owner)
            assert main(["sweep", str(cfg), "--workers", "1", "--out", str(out), "--force", "--json"]) == 0, owner
            assert not lock.exists()
        # a lock without a start time (written before it was recorded), older than the live process
        _lock(lock, pid=sleeper.pid)
        os.utime(lock, (time.time() - 3600, time.time() - 3600))
        assert main(["sweep", str(cfg), "--workers", "1", "--out", str(out), "--force", "--json"]) == 0
        capsys.readouterr()
        # the live writer: refused in one line, which says how to clear a lock whose run is gone
        _lock(lock, pid=sleeper.pid, start=process_start(sleeper.pid))
        assert main(["sweep", str(cfg), "--workers", "1", "--out", str(out), "--force"]) == 2
        err = _one_line(capsys.readouterr().err)
        assert f"is being written by another run (pid {sleeper.pid} on" in err and "delete" in err
        assert lock.exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_lock_records_its_writers_start_time(tmp_path: Path) -> None:
    with OutputLock(tmp_path / "r.csv") as held:
        doc = json.loads(held.lock_path.read_text())
        assert doc["pid"] == os.getpid() and doc["start"] == process_start(os.getpid()) is not None
        with pytest.raises(OutputBusy):
            OutputLock(tmp_path / "r.csv").acquire()
    assert not held.lock_path.exists()


# --------------------------------------------------------------------------- 17: evaluate under a lock
@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained PPO agent of a 24-step PDProvision-v0 day, saved as ``servegym train`` saves one."""
    pytest.importorskip("stable_baselines3", reason="the rl extra (stable-baselines3) is not installed")
    import gymnasium as gym
    import numpy as np
    from servegym.agents.model_io import save_obs_stats
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    d = tmp_path_factory.mktemp("model")
    venv = VecNormalize(DummyVecEnv([lambda: gym.make(PD, **SHORT)]))
    venv.reset()
    venv.step(np.array([venv.action_space.sample()]))
    PPO("MlpPolicy", venv, n_steps=16, batch_size=16, seed=0, device="cpu",
        policy_kwargs={"net_arch": [8]}).save(d / "model.zip")
    save_obs_stats(venv, d / "model_vecnormalize.npz")
    (d / "run.json").write_text(json.dumps({"env_id": PD, "algo": "ppo", "env_kwargs": SHORT,
                                            "normalize": {"norm_obs": True, "norm_reward": True}}))
    return d


def _hold_lock(path: Path) -> subprocess.Popen[str]:
    """Another process holding ``path``'s output lock (as a second ``evaluate`` into it would), until killed."""
    code = ("import sys, time; from servegym.outputs import OutputLock\n"
            "with OutputLock(sys.argv[1], '--out-dir'):\n    print('held', flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_evaluate_into_an_out_dir_another_run_writes_is_refused(model_dir: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Two evaluations into one --out-dir at once both exited 0, the files holding one run's numbers and the
    other run's report another's; the second is refused now, in one line, writing nothing."""
    out = tmp_path / "evals" / "e1"
    argv = ["evaluate", "--model", str(model_dir / "model.zip"), "--episodes", "1", "--baselines", "min-power",
            "--out-dir", str(out), "--json"]
    other = _hold_lock(out)
    try:
        assert main([*argv, "--force"]) == 2
        err = _one_line(capsys.readouterr().err)
        assert f"--out-dir = '{out}' is being written by another run (pid {other.pid}" in err
        assert not out.exists()
    finally:
        other.kill()
        other.wait()
    assert main(argv) == 0  # the other run is gone: its lock is stale
    assert (out / "episodes.csv").is_file() and not (tmp_path / "evals" / "e1.lock").exists()
    capsys.readouterr()
    assert main(argv) == 2  # and one evaluation is not replaced by the next without --force
    assert "already holds an evaluation" in _one_line(capsys.readouterr().err)
    # a run that fails once it holds the lock leaves no folder the lock needed behind
    assert main(["evaluate", "--model", str(tmp_path / "no-model.zip"), "--out-dir", str(tmp_path / "new" / "e")]) == 2
    assert not (tmp_path / "new").exists()


# --------------------------------------------------------------------------- 16: the suite's run folder
def test_suite_refuses_trained_models_in_its_run_dir_and_locks_it(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``benchmark --suite`` replaced the models already in --run-dir (force=True per training task), the
    lock covered only suite_runs/<budget>, and every budget defaulted to the same runs/suite. Now each budget
    has its own default folder, models already there are refused without --force, and the run folder is
    locked. Refusals train nothing and write nothing."""
    out = tmp_path / "results"
    base = ["benchmark", "--suite", "--budget", "smoke", "--envs", PD, "--workers", "1", "--json", "--out-dir", str(out)]
    mine = tmp_path / "runs" / "suite" / "smoke" / "PDProvision-v0_maskable-ppo_s1"  # cwd is tmp_path
    mine.mkdir(parents=True)
    (mine / "model.zip").write_bytes(b"a model trained earlier")
    assert main(base) == 2  # the default --run-dir is runs/suite/smoke
    err = _one_line(capsys.readouterr().err)
    assert ("--run-dir = 'runs/suite/smoke' already holds trained models (PDProvision-v0_maskable-ppo_s1) that "
            "this suite would replace; pass --force") in err
    assert (mine / "model.zip").read_bytes() == b"a model trained earlier"
    assert not out.exists() and not (tmp_path / "runs" / "suite" / "smoke.lock").exists()
    # another suite writing the run folder (here: with another --out-dir) keeps this one off it
    other = _hold_lock(tmp_path / "shared")
    try:
        assert main([*base, "--run-dir", str(tmp_path / "shared"), "--force"]) == 2
        assert "--run-dir = '" + str(tmp_path / "shared") + "' is being written by another run" in _one_line(
            capsys.readouterr().err)
    finally:
        other.kill()
        other.wait()
    assert not out.exists() and not (tmp_path / "shared").exists()


# --------------------------------------------------------------------------- 15: sweep agents stay in the folder
def test_sweep_agent_outside_the_sweep_folder_is_refused_before_any_lookup(
        model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``agent:`` naming an absolute path or ``../..`` loaded and ran (exit 0), and naming a key file elsewhere
    revealed whether it existed. Now it is refused on the text, before anything there is looked up (no stat of
    it), in one line; a link in the folder that leads out is refused too; a model in the folder still runs."""
    import shutil

    outside = tmp_path / "elsewhere"
    shutil.copytree(model_dir, outside / "m")  # a loadable model: only the rule stops it
    folder = tmp_path / "sweeps" / "deep"
    (folder / "m").mkdir(parents=True)
    for name in ("model.zip", "model_vecnormalize.npz", "run.json"):
        shutil.copy(model_dir / name, folder / "m" / name)
    (folder / "link").symlink_to(outside / "m")
    looked_up: list[str] = []
    real_stat, real_lstat = os.stat, os.lstat

    def record(real):  # type: ignore[no-untyped-def]
        def stat(path, *args, **kwargs):  # type: ignore[no-untyped-def]
            looked_up.append(os.fspath(path) if not isinstance(path, int) else "")
            return real(path, *args, **kwargs)
        return stat

    for agent in (str(outside / "m" / "model.zip"), "../../elsewhere/m/model.zip", "agent:../../elsewhere/m/model.zip"):
        policy = agent if agent.startswith("agent:") else {"agent": agent, "name": "mine"}
        cfg = _sweep_file(folder, policies=[policy])
        monkeypatch.setattr(os, "stat", record(real_stat))
        monkeypatch.setattr(os, "lstat", record(real_lstat))
        code = main(["sweep", str(cfg), "--workers", "1", "--out", str(tmp_path / "r.csv")])
        monkeypatch.setattr(os, "stat", real_stat)
        monkeypatch.setattr(os, "lstat", real_lstat)
        assert code == 2, agent
        err = _one_line(capsys.readouterr().err)
        assert "policies[0].agent = " in err and "is outside the sweep file's folder; allowed: a path inside" in err
        assert looked_up and not [p for p in looked_up if "elsewhere" in p], looked_up
    cfg = _sweep_file(folder, policies=[{"agent": "link/model.zip", "name": "mine"}])
    assert main(["sweep", str(cfg), "--workers", "1", "--out", str(tmp_path / "r.csv")]) == 2
    assert "leads outside the sweep file's folder through a symbolic link" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "r.csv").exists()
    cfg = _sweep_file(folder, policies=[{"agent": "m/model.zip", "name": "mine"}, "min-power"])
    assert main(["sweep", str(cfg), "--workers", "1", "--out", str(tmp_path / "r.csv"), "--json"]) == 0
    assert sorted(pd.read_csv(tmp_path / "r.csv")["policy"]) == ["min-power", "mine"]


# --------------------------------------------------------------------------- 18: sweep journals
def test_sweep_resume_skips_journal_lines_that_are_not_cells_of_the_config(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Journal lines that were valid JSON with garbage values reached the results (a row for a cell that never
    ran, a key of a cell the config lacks) or crashed with KeyError. Now each line is checked against the
    config's cells and the row schema; a bad one is skipped with one warning line and its cell runs again, so
    the results equal an uninterrupted run's."""
    from servegym.agents.sweep import config_fingerprint, load_sweep

    from servegym.outputs import Journal

    cfg = _sweep_file(tmp_path, seeds=[7, 8])
    assert main(["sweep", str(cfg), "--workers", "1", "--out", str(tmp_path / "ref.csv"), "--json"]) == 0
    ref = pd.read_csv(tmp_path / "ref.csv")
    rows = {int(r["seed"]): r for r in ref.to_dict("records")}
    good = {**rows[7], "wall_s": 123.0}  # a finished cell, told apart from a rerun by its wall time
    key7, key8 = (json.dumps(["t", "day", PD, "min-power", s]) for s in (7, 8))
    out = tmp_path / "r.csv"
    journal = Journal(tmp_path / "r.csv.partial.jsonl").open(config_fingerprint(load_sweep(cfg)))
    journal.add(key7, good)
    for key, value in [(json.dumps(["t", "day", PD, "min-power", 99]), {**rows[7], "seed": 99}),  # not in the config
                       (key8, {}),                                                 # was a KeyError
                       (key8, {**rows[8], "reward": "lots"}),                      # garbage value
                       (key8, {**rows[7]}),                                        # another cell's row
                       (key8, {**rows[8], "seed": True}),
                       (key8, {**rows[8], "injected": 1.0})]:                      # a column no cell has
        journal.add(key, value)
    journal.close()
    with journal.path.open("a") as fh:
        fh.write('{"key": 3}\n[1, 2]\nnot json\n')
    capsys.readouterr()
    assert main(["sweep", str(cfg), "--workers", "1", "--out", str(out), "--resume", "--json"]) == 0
    err = capsys.readouterr().err
    warning = [line for line in err.splitlines() if "warning" in line]
    assert len(warning) == 1 and "r.csv.partial.jsonl: skipped 9 line(s) that are not finished work of this run" in \
        warning[0] and "is not a cell of this sweep config" in warning[0] and "runs again" in warning[0]
    res = pd.read_csv(out).sort_values("seed").reset_index(drop=True)
    assert res["seed"].tolist() == [7, 8] and "injected" not in res.columns
    assert res.loc[0, "wall_s"] == 123.0 and res.loc[1, "wall_s"] != 123.0  # seed 7 kept, seed 8 rerun
    assert res.drop(columns="wall_s").equals(ref.sort_values("seed").reset_index(drop=True).drop(columns="wall_s"))
    assert not journal.path.exists()


def test_suite_journal_lines_are_checked_against_the_runs_tasks(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """The suite's journal gets the same check: a task of another run, or an output that is not the task's
    (which crashed the stored-run writer with KeyError), is skipped with one warning and the task runs again."""
    from servegym.agents import benchmark as bm

    from servegym.outputs import Journal

    tasks = bm.suite_tasks([e for e in bm.SUITE["smoke"] if e.env_id == PD], tmp_path / "runs", tb=False)
    train, base = tasks[0], tasks[-1]
    row = {"policy": "min-power", "seed": 0, "reward": -1.5, "length": 240, "train_seed": -1, "energy_kwh": 1.0}
    good = {"kind": "baseline", "env_id": PD, "rows": [row], "wall_s": 0.5, "env_steps": 240}
    j = Journal(tmp_path / ".partial.jsonl").open("h")
    j.add(bm.task_key(base), good)
    j.add(json.dumps(["baseline", PD, "min-power", 999]), good)  # not a task of this run
    j.add(bm.task_key(train), {"kind": "train"})                 # was a KeyError when stored
    j.add(bm.task_key(train), {**good, "kind": "train", "seed": train["seed"], "rows": [{**row, "reward": "x"}]})
    j.close()
    capsys.readouterr()
    assert j.read("h", check=bm.suite_journal_check(tasks)) == {bm.task_key(base): good}
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "skipped 3 line(s)" in err and "is not a task of this suite run" in err


# --------------------------------------------------------------------------- 21: servegym dataset
def _dataset_argv(out: Path, episodes: int = 2) -> list[str]:
    return ["dataset", "--env", PD, "--policy", "min-power", "--episodes", str(episodes), "--out", str(out),
            "--env-kwargs", json.dumps(SHORT)]


DS_ID = Path("servegym", "pdprovision-v0", "min-power-train-v0")


def _left_over(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if ".servegym-dataset-" in p.name
                  or ".old-" in p.name or p.name.endswith(".tmp"))


def test_dataset_sigterm_cleans_up_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """SIGTERM to ``servegym dataset`` exited 143 with no message and left its ``.servegym-dataset-*``
    folder. Now: one line, exit 143, no temporary folder, and no folder it made for the dataset. A SIGTERM
    while a --force run swaps the datasets waits for the swap: the new dataset whole, nothing left aside."""
    pytest.importorskip("minari", reason="the offline extra (minari) is not installed")
    pytest.importorskip("jax", reason="the offline extra (jax) is not installed")
    import signal

    from servegym.agents import dataset as ds

    real_step, seen = ds._StepCounter.step, []

    def step_then_sigterm(self, action):  # type: ignore[no-untyped-def]
        seen.append(sorted(p.name for p in (tmp_path / "ds").iterdir()))  # the temporary folder exists by now
        if self.steps == 30:  # mid-recording, in the second episode
            os.kill(os.getpid(), signal.SIGTERM)
        return real_step(self, action)

    monkeypatch.setattr(ds._StepCounter, "step", step_then_sigterm)
    assert main(_dataset_argv(tmp_path / "ds", episodes=3)) == 143
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("servegym: interrupted by SIGTERM: its temporary files are removed")
    assert seen[0][0].startswith(".servegym-dataset-")
    assert not (tmp_path / "ds").exists()  # the --out folder it made, empty again, is gone too
    monkeypatch.setattr(ds._StepCounter, "step", real_step)

    assert main(_dataset_argv(tmp_path / "ds")) == 0
    before = (tmp_path / "ds" / DS_ID / "data" / "metadata.json").read_text()
    real_rename = os.rename

    def rename_with_sigterm(src, dst):  # type: ignore[no-untyped-def]
        real_rename(src, dst)
        if ".old-" in os.fspath(dst):  # between moving the old dataset aside and the new one in
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(ds.os, "rename", rename_with_sigterm)
    assert main([*_dataset_argv(tmp_path / "ds", episodes=1), "--force"]) == 143
    monkeypatch.setattr(ds.os, "rename", real_rename)
    after = json.loads((tmp_path / "ds" / DS_ID / "data" / "metadata.json").read_text())
    assert after["total_episodes"] == 1 and json.loads(before)["total_episodes"] == 2  # replaced whole
    assert _left_over(tmp_path / "ds") == []


def test_dataset_force_over_a_symbolic_link_is_refused_up_front(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``--force`` over a dataset path that is a symbolic link installed, then failed (exit 2) removing the
    link as a folder and left ``.old-PID``. Now it is refused before any episode is played, in one line, with
    the link, its target and the folder untouched; a linked namespace folder is refused alike."""
    pytest.importorskip("minari", reason="the offline extra (minari) is not installed")
    pytest.importorskip("jax", reason="the offline extra (jax) is not installed")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "data").mkdir(parents=True)
    (elsewhere / "data" / "keep.txt").write_text("not servegym's")
    root = tmp_path / "ds"
    (root / DS_ID.parent).mkdir(parents=True)
    (root / DS_ID).symlink_to(elsewhere)
    for force in ([], ["--force"]):
        assert main([*_dataset_argv(root), *force]) == 2
        err = _one_line(capsys.readouterr().err)
        assert f"'{root / DS_ID}' is a symbolic link; allowed: a real folder" in err
    assert (root / DS_ID).is_symlink() and (elsewhere / "data" / "keep.txt").read_text() == "not servegym's"
    assert sorted(p.name for p in (root / DS_ID.parent).iterdir()) == [DS_ID.name]
    (root / DS_ID).unlink()
    (root / DS_ID.parent).rmdir()
    (root / DS_ID.parent).symlink_to(elsewhere)
    assert main([*_dataset_argv(root), "--force"]) == 2
    assert f"'{root / DS_ID.parent}' is a symbolic link" in _one_line(capsys.readouterr().err)
    assert sorted(p.name for p in elsewhere.rglob("*")) == ["data", "keep.txt"]


# --------------------------------------------------------------------------- 20: sweep --ray and SIGTERM
def test_ray_init_keeps_servegyms_signal_handlers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's init installs SIGTERM handlers of its own (``sys.exit(15)``, then one that exits 1 with a traceback
    and leaves its agents alive), so SIGTERM to ``sweep --ray`` bypassed servegym's cleanup. During init a
    signal is now recorded, Ray's handlers are not installed, and once init returns the signal unwinds
    through servegym's handler to ``ray.shutdown``. (The real command: the slow test below.)"""
    import signal
    import types

    from servegym.agents import sweep

    from servegym.outputs import Interrupted, interruptible

    calls: list[str] = []

    def init(**kwargs: object) -> None:
        fake._private.utils.set_sigterm_handler(lambda signum, frame: sys.exit(signum))  # as ray.init does
        os.kill(os.getpid(), signal.SIGTERM)
        calls.append("init")

    fake = types.SimpleNamespace(is_initialized=lambda: False, init=init, shutdown=lambda: calls.append("shutdown"),
                                 _private=types.SimpleNamespace(utils=types.SimpleNamespace(
                                     set_sigterm_handler=lambda h: signal.signal(signal.SIGTERM, h))))
    monkeypatch.setattr(sweep, "_import_ray", lambda: fake)
    with pytest.raises(Interrupted) as exc, interruptible():
        sweep.run_ray([{"cell": 0}], progress=False)
    assert exc.value.exit_code == 143 and calls == ["init", "shutdown"]


@pytest.mark.slow
def test_sweep_on_ray_sigterm_exits_143_and_leaves_no_process(tmp_path: Path) -> None:
    """SIGTERM mid-grid to ``sweep --ray``: exit 143, the last stderr line the interruption, no traceback, and
    nothing of the run's session alive (Ray's dashboard and runtime-env agents were left under pid 1)."""
    pytest.importorskip("ray", reason="Ray is not installed (optional extra: pip install 'servegym[ray]')")
    import signal

    from conftest import interrupt_when

    cfg = tmp_path / "s.yml"
    cfg.write_text(yaml.safe_dump({"name": "t", "env": PD, "policies": ["min-power", "static-peak"],
                                   "scenarios": [{"name": "a", "env_kwargs": {"config": {"scenario": {
                                       "horizon_steps": 720}}}}], "seeds": list(range(6))}))
    journal = tmp_path / "r.csv.partial.jsonl"
    cmd = [sys.executable, "-c", "import sys; from servegym.cli import main; sys.exit(main(sys.argv[1:]))",
           "sweep", str(cfg), "--ray", "--workers", "2", "--out", str(tmp_path / "r.csv")]
    code, err = interrupt_when(cmd, lambda: journal.exists() and journal.read_text().count("\n") >= 2, 240,
                               signal.SIGTERM)  # it also waits until no process of the run's session is left
    assert code == 143, err
    assert err.strip().splitlines()[-1].startswith("servegym: interrupted by SIGTERM") and "Traceback" not in err
    assert "StackTrace" not in err and not (tmp_path / "r.csv.lock").exists()
