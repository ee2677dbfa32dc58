"""A model folder is untrusted input (issue 43, items 1, 2, 10-14 and 22; issue 44's resume without
observation statistics): each crafted folder below goes through the real ``servegym`` command (``main``,
in process) and must give one line on stderr naming the file or field and what is allowed, exit status 2,
nothing written, and nothing inflated beyond the stated caps before it is refused.

One PDProvision-v0 run is trained once (module fixture, 32 steps, VecNormalize on); each test copies it
and breaks one thing.
"""

from __future__ import annotations

import io
import json
import shutil
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

import servegym  # noqa: F401  (registers the ids)
from servegym.cli import main

pytest.importorskip("stable_baselines3", reason="the rl extra (stable-baselines3) is not installed")

PD = "servegym/PDProvision-v0"
KWARGS = {"config": {"scenario": {"horizon_steps": 24}}}
HP = "ppo:\n  n_envs: 1\n  n_steps: 32\n  batch_size: 32\n  n_epochs: 1\n  normalize: true\n" \
     "  policy_kwargs: {net_arch: [8]}\n"
SECRET = "sk-live-0123456789abcdef"


def _config(root: Path, env_id: str = PD, **kw):
    from servegym.agents.train import TrainConfig

    (root / "hp.yml").write_text(HP)
    base = dict(env_id=env_id, algo="ppo", timesteps=32, hyperparams=str(root / "hp.yml"), env_kwargs=KWARGS,
                out=str(root / "run" / "model.zip"), tb=None, eval_freq=0, checkpoint_freq=0, eval_episodes=1,
                baselines="none", progress=False, verbose=0)
    return TrainConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    from servegym.agents.train import train

    root = tmp_path_factory.mktemp("pd")
    train(_config(root))
    return root / "run"


def _copy(run: Path, tmp_path: Path) -> Path:
    d = tmp_path / "m"
    shutil.copytree(run, d)
    return d


def _refused(argv: list[str], capsys) -> str:
    """The one stderr line of a refused command (exit status 2, nothing on stdout)."""
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert out == ""
    return err.strip()


def _evaluate(d: Path, tmp_path: Path) -> list[str]:
    return ["evaluate", "--model", str(d / "model.zip"), "--episodes", "1", "--baselines", "none",
            "--out-dir", str(tmp_path / "eval")]


def _refused_evaluation(d: Path, tmp_path: Path, capsys) -> str:
    line = _refused(_evaluate(d, tmp_path), capsys)
    assert not (tmp_path / "eval").exists()  # nothing written
    assert len(line.replace(str(tmp_path), "T")) < 200, line  # short: a path and a reason, never a quoted array
    return line


def test_the_untouched_folder_evaluates(trained: Path, tmp_path: Path, capsys) -> None:
    """The baseline of every refusal below: the folder as train wrote it loads and plays."""
    assert main(_evaluate(_copy(trained, tmp_path), tmp_path)) == 0
    assert (tmp_path / "eval" / "episodes.csv").is_file()


# --------------------------------------------------------------------------- item 1: statistics that expand


def _rewrite_npz(path: Path, extra: dict[str, bytes] | None = None, zeros: dict[str, int] | None = None) -> None:
    """``path`` with ``extra`` members added and the members named in ``zeros`` replaced by that many zero
    bytes, written compressed in 1 MiB pieces (a 70 MiB member is a 70 kB file, never 70 MiB in memory)."""
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    members.update(extra or {})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, raw in members.items():
            if name in (zeros or {}):
                with z.open(name, "w", force_zip64=True) as fh:
                    for _ in range(zeros[name] // 2**20):
                        fh.write(bytes(2**20))
            else:
                z.writestr(name, raw)


def test_statistics_member_that_expands_beyond_the_cap_is_refused_unread(trained: Path, tmp_path: Path,
                                                                         capsys) -> None:
    from servegym.agents.model_io import MAX_STATS_BYTES

    d = _copy(trained, tmp_path)
    npz = d / "model_vecnormalize.npz"
    _rewrite_npz(npz, zeros={"ret_var.npy": MAX_STATS_BYTES + 2**20})
    assert npz.stat().st_size < 2**20  # small on disk, over the cap inflated
    line = _refused_evaluation(d, tmp_path, capsys)
    assert "member 'ret_var.npy' expands to 68,157,440 bytes; allowed: <= 67,108,864" in line


def test_statistics_with_an_extra_member_are_refused(trained: Path, tmp_path: Path, capsys) -> None:
    d = _copy(trained, tmp_path)
    buf = io.BytesIO()
    np.save(buf, np.zeros(10))
    _rewrite_npz(d / "model_vecnormalize.npz", extra={"junk.npy": buf.getvalue()})
    line = _refused_evaluation(d, tmp_path, capsys)
    assert "member 'junk.npy' is not one a statistics file holds" in line


def test_npy_header_declaring_more_than_its_bytes_is_refused(trained: Path, tmp_path: Path, capsys) -> None:
    """numpy allocates the shape a header declares before it reads: a 2^40-element header over 8 bytes."""
    d = _copy(trained, tmp_path)
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (2**40,)})
    _rewrite_npz(d / "model_vecnormalize.npz", extra={"mean.npy": buf.getvalue() + bytes(8)})
    line = _refused_evaluation(d, tmp_path, capsys)
    assert "member 'mean.npy' declares a shape its bytes do not hold" in line


# --------------------------------------------------------------------------- item 2: a model zip that expands


def _rewrite_model(path: Path, edit) -> None:
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    members = edit(members)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, raw in members.items():
            z.writestr(name, raw)


def test_policy_file_holding_an_extra_tensor_beyond_the_cap_is_refused(trained: Path, tmp_path: Path, capsys,
                                                                       monkeypatch) -> None:
    """The cap lowered in process to 256 kB stands for the real 64 MiB: a 400 kB extra tensor in policy.pth
    is refused before torch reads it (the 1 GiB case is measured in benchmarks/input_fuzz.py)."""
    import torch
    from servegym.agents import model_io

    d = _copy(trained, tmp_path)

    def edit(members: dict[str, bytes]) -> dict[str, bytes]:
        state = torch.load(io.BytesIO(members["policy.pth"]), weights_only=True)
        buf = io.BytesIO()
        torch.save({**state, "extra": torch.zeros(100_000)}, buf)
        return {**members, "policy.pth": buf.getvalue()}

    _rewrite_model(d / "model.zip", edit)
    monkeypatch.setattr(model_io, "MAX_TENSOR_BYTES", 256 * 2**10)
    loaded = []
    monkeypatch.setattr(torch, "load", lambda *a, **k: loaded.append(1))
    line = _refused_evaluation(d, tmp_path, capsys)
    assert "member 'policy.pth' expands to" in line and "allowed: <= 262,144" in line
    assert not loaded  # refused before torch read anything


def test_model_zip_with_a_member_sb3_does_not_write_is_refused(trained: Path, tmp_path: Path, capsys) -> None:
    d = _copy(trained, tmp_path)
    _rewrite_model(d / "model.zip", lambda m: {**m, "extra.pth": m["policy.pth"]})
    line = _refused_evaluation(d, tmp_path, capsys)
    assert "member 'extra.pth' is not one a stable-baselines3 model holds" in line


def test_model_data_with_a_net_arch_beyond_the_ranges_is_refused(trained: Path, tmp_path: Path, capsys) -> None:
    """SB3 builds the network before it loads a weight: [1e6, 1e6] would allocate terabytes."""
    d = _copy(trained, tmp_path)

    def edit(members: dict[str, bytes]) -> dict[str, bytes]:
        data = json.loads(members["data"])
        data["policy_kwargs"] = {**data["policy_kwargs"], "net_arch": [1_000_000, 1_000_000]}
        return {**members, "data": json.dumps(data).encode()}

    _rewrite_model(d / "model.zip", edit)
    assert "net_arch = [1000000, 1000000]; allowed: a list of at most 8" in _refused(_evaluate(d, tmp_path), capsys)


# --------------------------------------------------------------------------- item 4: hyperparameter ranges


@pytest.mark.parametrize(("section", "expected"), [
    ("n_steps: 1e9", "n_steps = 1000000000.0; allowed: an integer in [1, 65536]"),  # YAML 1.1: a string
    ("n_steps: 1.0e+9", "n_steps = 1000000000.0; allowed: an integer in [1, 65536]"),
    ("n_steps: -5", "n_steps = -5; allowed: an integer in [1, 65536]"),
    ("policy_kwargs: {net_arch: [1e6, 1e6]}", "net_arch = ['1e6', '1e6']; allowed: a list of at most 8"),
    ("policy_kwargs: {net_arch: [1000000, 1000000]}", "net_arch = [1000000, 1000000]; allowed"),
    ("gamma: 1.5", "gamma = 1.5; allowed: a number in [0, 1]"),
    ("learning_rate: lin_-1", "learning_rate (lin_<start>) = -1.0; allowed: a number in [1e-09, 1]"),
    ("n_step: 64", "'n_step' is not a hyperparameter servegym train passes on (did you mean 'n_steps'?)"),
    ("n_envs: 256\n  n_steps: 65536", "n_steps x n_envs = 65536 x 256 = 16,777,216 observations a rollout"),
], ids=["1e9-string", "1e9-float", "negative", "net-arch-strings", "net-arch-ints", "gamma", "lin", "unknown",
        "rollout"])
def test_hyperparameters_out_of_range_are_one_line(tmp_path: Path, capsys, section: str, expected: str) -> None:
    (tmp_path / "hp.yml").write_text(f"ppo:\n  {section}\n")
    line = _refused(["train", "--env", PD, "--timesteps", "64", "--hyperparams", str(tmp_path / "hp.yml"),
                     "--no-progress"], capsys)
    assert expected in line and line.startswith("servegym: error: ")
    assert not (tmp_path / "runs").exists()


def test_shipped_hyperparameters_are_within_the_ranges() -> None:
    from importlib import resources

    from servegym.agents.algos import ALGOS
    from servegym.agents.hparams import load_hyperparams

    from servegym.safe_yaml import load_yaml

    folder = resources.files("servegym.agents").joinpath("hyperparams")
    n = 0
    for f in folder.iterdir():
        if f.name.endswith(".yml"):
            for algo in load_yaml(f):
                assert algo in ALGOS
                load_hyperparams("servegym/" + f.name.split(".")[0], algo, Path(str(f)))
                n += 1
    assert n >= 13


# --------------------------------------------------------------------------- items 10-12: silent wrong results


def test_missing_statistics_of_a_normalized_run_are_refused(trained: Path, tmp_path: Path, capsys) -> None:
    d = _copy(trained, tmp_path)
    (d / "model_vecnormalize.npz").unlink()
    line = _refused_evaluation(d, tmp_path, capsys)
    assert "model_vecnormalize.npz' is missing, but run.json says the model was trained with VecNormalize" in line


def test_statistics_beside_a_run_without_normalization_are_refused(trained: Path, tmp_path: Path, capsys) -> None:
    d = _copy(trained, tmp_path)
    run = json.loads((d / "run.json").read_text())
    run["hyperparams"]["normalize"] = None
    (d / "run.json").write_text(json.dumps(run))
    assert "is present, but run.json says the model was trained without" in _refused_evaluation(d, tmp_path, capsys)


def test_model_of_another_env_beside_the_run_is_refused(trained: Path, tmp_path: Path, capsys) -> None:
    """PDProvisionFront-v0's Discrete(22) has as many logits as PDProvision-v0's MultiDiscrete([13 9]): its
    weights load, so only the recorded spaces tell."""
    import gymnasium as gym
    from stable_baselines3 import PPO

    d = _copy(trained, tmp_path)
    env = gym.make("servegym/PDProvisionFront-v0", **KWARGS)
    PPO("MlpPolicy", env, n_steps=16, batch_size=16, device="cpu", policy_kwargs={"net_arch": [8]}).save(d / "model.zip")
    env.close()
    line = _refused_evaluation(d, tmp_path, capsys)
    assert "was saved for a Discrete as its action space; the env's is MultiDiscrete([13  9])" in line


@pytest.mark.parametrize(("mean", "var", "epsilon", "expected"), [
    (np.zeros(5), np.ones(5), 1e-8, "statistics have shape (5,); allowed: the env's observation shape (37,)"),
    (np.zeros((37, 37)), np.ones((37, 37)), 1e-8, "statistics have shape (37, 37)"),
    (np.zeros(37), np.zeros(37), 0.0, "with var >= 0 and var + epsilon > 0"),
], ids=["short", "square", "zero-divisor"])
def test_statistics_that_do_not_fit_the_env_are_one_short_line(trained: Path, tmp_path: Path, capsys, mean, var,
                                                                epsilon, expected) -> None:
    d = _copy(trained, tmp_path)
    f = d / "model_vecnormalize.npz"
    with np.load(f) as z:
        arrays = {k: z[k] for k in z.files}
    np.savez(f, **{**arrays, "mean": mean, "var": var, "epsilon": np.asarray(epsilon)})
    assert expected in _refused_evaluation(d, tmp_path, capsys)


# --------------------------------------------------------------------------- item 13: resume with other kwargs


def _train_argv(root: Path, kwargs: dict, *extra: str) -> list[str]:
    return ["train", "--env", PD, "--algo", "ppo", "--timesteps", "64", "--hyperparams", str(root / "hp.yml"),
            "--out", str(root / "run" / "model.zip"), "--tb", "", "--eval-freq", "0", "--checkpoint-freq", "0",
            "--eval-episodes", "1", "--baselines", "none", "--no-progress", "--env-kwargs", json.dumps(kwargs),
            "--json", *extra]


def test_resume_with_other_env_kwargs_is_refused(trained: Path, tmp_path: Path, capsys) -> None:
    shutil.copytree(trained.parent, tmp_path / "t")
    root = tmp_path / "t"
    before = (root / "run" / "run.json").read_bytes()
    other = {"config": {"scenario": {"horizon_steps": 48}, "objective": "carbon"}}
    line = _refused(_train_argv(root, other, "--resume"), capsys)
    assert "--resume: run.json has other env kwargs than this run (at config.objective, " \
           "config.scenario.horizon_steps)" in line
    assert (root / "run" / "run.json").read_bytes() == before
    assert main(_train_argv(root, KWARGS, "--resume")) == 0  # the same kwargs continue the run
    assert json.loads((root / "run" / "run.json").read_text())["resumed_at"] == [32]


def test_resume_never_follows_a_linked_run_json_nor_quotes_it(trained: Path, tmp_path: Path, capsys) -> None:
    shutil.copytree(trained.parent, tmp_path / "t")
    root = tmp_path / "t"
    secret = tmp_path / "credentials.json"
    secret.write_text(json.dumps({"env_id": SECRET}))
    (root / "run" / "run.json").unlink()
    (root / "run" / "run.json").symlink_to(secret)
    line = _refused(_train_argv(root, KWARGS, "--resume"), capsys)
    assert "run.json: a symbolic link to a file outside its folder" in line and SECRET not in line
    (root / "run" / "run.json").unlink()
    (root / "run" / "run.json").write_text(json.dumps({"env_id": SECRET, "algo": "ppo", "seed": 0}))
    line = _refused(_train_argv(root, KWARGS, "--resume"), capsys)
    assert "run.json has another env_id than this run ('servegym/PDProvision-v0')" in line and SECRET not in line


# --------------------------------------------------------------------------- item 14: links and quoting


def test_run_json_linking_outside_the_folder_is_refused_unread(trained: Path, tmp_path: Path, capsys) -> None:
    d = _copy(trained, tmp_path)
    secret = tmp_path / "credentials.json"
    secret.write_text(json.dumps({"env_id": SECRET, "algo": SECRET}))
    (d / "run.json").unlink()
    (d / "run.json").symlink_to(secret)
    line = _refused_evaluation(d, tmp_path, capsys)
    assert "run.json: a symbolic link to a file outside" in line and SECRET not in line
    # a link inside the folder is the folder's own file
    (d / "run.json").unlink()
    shutil.copy(trained / "run.json", d / "kept.json")
    (d / "run.json").symlink_to("kept.json")
    assert main(_evaluate(d, tmp_path)) == 0


@pytest.mark.parametrize("doc", [
    {"env_id": SECRET, "algo": "ppo"},
    {"env_id": PD, "algo": SECRET},
    {"env_id": PD, "algo": "ppo", "env_kwargs": {"geo": {"trace": f"/{SECRET}.csv"}}},
    {"env_id": PD, "algo": "ppo", "eval_split": [SECRET]},
    {"env_id": "pwnmod:" + SECRET, "algo": "ppo"},
], ids=["env_id", "algo", "file", "type", "module"])
def test_run_json_errors_never_quote_a_value(tmp_path: Path, capsys, doc: dict) -> None:
    d = tmp_path / "m"
    d.mkdir()
    (d / "model.zip").write_bytes(b"not read: run.json fails first")
    (d / "run.json").write_text(json.dumps(doc))
    line = _refused(_evaluate(d, tmp_path), capsys)
    assert "run.json: " in line and SECRET not in line
    assert not (tmp_path / "eval").exists()


# --------------------------------------------------------------------------- item 22: no folder left behind


def test_failed_train_leaves_no_folder(tmp_path: Path, capsys) -> None:
    line = _refused(["train", "--env", "servegym/GeoRoutte-v0", "--algo", "maskable-ppo", "--timesteps", "8"],
                    capsys)
    assert "is not a registered env id" in line
    assert not (tmp_path / "runs").exists()
    # a failure after the run folder exists (the algorithm refuses an argument of another algorithm)
    (tmp_path / "hp.yml").write_text("a2c:\n  n_epochs: 2\n")
    line = _refused(["train", "--env", PD, "--algo", "a2c", "--timesteps", "8", "--hyperparams",
                     str(tmp_path / "hp.yml"), "--out", str(tmp_path / "a" / "b" / "model.zip"), "--tb", "",
                     "--no-progress", "--env-kwargs", json.dumps(KWARGS)], capsys)
    assert "bad hyperparameter for a2c" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hp.yml"]


# --------------------------------------------------------------------------- issue 44: resume, no obs statistics


def test_interrupted_run_without_observation_normalization_resumes(tmp_path: Path) -> None:
    """GeoRoute-v0's shipped hyperparameters normalize rewards only (norm_obs: false): SB3's VecNormalize then
    has no obs_rms, which resuming read unconditionally (AttributeError)."""
    from servegym.agents.hparams import load_hyperparams
    from servegym.agents.train import TrainConfig, train

    assert load_hyperparams("servegym/GeoRoute-v0", "maskable-ppo").normalize == {"norm_obs": False,
                                                                                   "norm_reward": True}
    cfg = dict(env_id="servegym/GeoRoute-v0", algo="maskable-ppo", timesteps=100_000, n_envs=1,
               env_kwargs={"config": {"preset": "mini", "geo": {"duration_s": 1}}}, out=str(tmp_path / "run" / "model.zip"),
               tb=None, eval_freq=0, checkpoint_freq=0, eval_episodes=1, baselines="none", progress=False, verbose=0)
    stop = threading.Event()
    stop.set()  # as Ctrl-C does in the CLI: training stops at the next step and saves
    first = train(TrainConfig(**cfg), stop)
    assert not first.complete
    resumed = train(TrainConfig(**{**cfg, "timesteps": first.timesteps_trained + 1, "resume": True}))
    assert resumed.complete and resumed.timesteps_trained > first.timesteps_trained
    run = json.loads(resumed.run_file.read_text())
    assert run["status"] == "complete" and run["resumed_at"] == [first.timesteps_trained]
