"""Every subcommand answers bad arguments with one line on stderr and exit status 2, never a traceback, and
before any work starts (issue #15, defect 5; ``--plot DIR``: defect 9)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

import servegym  # noqa: F401  (registers the ids)
from servegym.cli import build_parser, main

# Arguments that make each subcommand valid and quick, so that the bad argument under test is what fails.
VALID: dict[str, list[str]] = {
    "data show": ["azure-conv"],
    "geo compare": ["--preset", "mini", "--policies", "rr", "--sim-seconds", "1"],
    "bench speed geo": ["--preset", "mini", "--sim-seconds", "0.1"],
    "calibrate osl": ["--no-save"],
    "pd capacity": ["--workload", "fixed:4096:256", "--deployment", "1p1d"],
    "pd pareto": ["--workload", "fixed:4096:256"],
    "pd simulate": ["--deployment", "1p1d", "--rate", "1", "--duration", "1", "--warmup", "0"],
    "pd case-study": ["rate-drop"],
    "npu dse": ["--model", "Llama3-8B"],
    "npu compare": ["--model", "Llama3-8B", "--hours", "0.25"],
    "train": ["--env", "servegym/PDProvision-v0", "--timesteps", "8"],
    "evaluate": ["--model", "no-such-model.zip"],
    "sweep": ["no-such-sweep.yml"],
    "dataset": ["--env", "servegym/PDProvision-v0", "--policy", "naive", "--episodes", "1"],
}


def _leaves() -> list[tuple[str, argparse.ArgumentParser]]:
    out: list[tuple[str, argparse.ArgumentParser]] = []

    def walk(p: argparse.ArgumentParser, prefix: list[str]) -> None:
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            out.append((" ".join(prefix), p))
        for s in subs:
            for name, sp in s.choices.items():
                walk(sp, [*prefix, name])

    walk(build_parser(), [])
    return out


LEAVES = _leaves()
NAMES = [n for n, _ in LEAVES]


def _dests(parser: argparse.ArgumentParser) -> set[str]:
    return {a.dest for a in parser._actions if a.option_strings}


def _run(argv: list[str], capsys) -> tuple[int, str]:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse
        rc = exc.code
    err = capsys.readouterr().err.strip()
    return rc, err


def _one_line_error(rc: int, err: str) -> None:
    assert rc == 2, err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err


def test_every_subcommand_is_covered() -> None:
    assert len(LEAVES) >= 15
    assert {"train", "evaluate", "sweep", "pd simulate", "npu compare", "geo validate"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_unknown_option_is_one_line(name: str, capsys) -> None:
    rc, err = _run([*name.split(), *VALID.get(name, []), "--no-such-option"], capsys)
    _one_line_error(rc, err)
    assert "--no-such-option" in err


@pytest.mark.parametrize("name", NAMES)
def test_bad_numbers_are_one_line(name: str, capsys) -> None:
    parser = dict(LEAVES)[name]
    numeric = [a for a in parser._actions if a.option_strings and a.type in (int, float)]
    for action in numeric:
        rc, err = _run([*name.split(), *VALID.get(name, []), action.option_strings[0], "abc"], capsys)
        _one_line_error(rc, err)
        assert action.option_strings[0] in err


@pytest.mark.parametrize("name", [n for n, p in LEAVES if "seed" in _dests(p)])
@pytest.mark.parametrize("seed", ["-1", str(2**40)])
def test_seed_out_of_range_is_refused_before_work(name: str, seed: str, capsys) -> None:
    rc, err = _run([*name.split(), *VALID.get(name, []), "--seed", seed], capsys)
    _one_line_error(rc, err)
    assert "--seed" in err


OUTPUTS = [(n, a.option_strings[0]) for n, p in LEAVES for a in p._actions
           if a.dest in ("out", "out_dir", "plot", "plot_dir", "tb")]


@pytest.mark.parametrize(("name", "flag"), OUTPUTS, ids=[f"{n} {f}" for n, f in OUTPUTS])
def test_output_under_an_existing_file_is_refused_before_work(name: str, flag: str, tmp_path: Path,
                                                              capsys) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    target = blocker / ("sub.png" if flag == "--plot" else "sub")
    rc, err = _run([*name.split(), *VALID.get(name, []), flag, str(target)], capsys)
    _one_line_error(rc, err)
    assert flag in err and "existing file" in err


@pytest.mark.parametrize(("name", "flag"), [(n, f) for n, f in OUTPUTS if f == "--plot"])
def test_plot_needs_an_image_file_name(name: str, flag: str, tmp_path: Path, capsys) -> None:
    for target in (tmp_path, tmp_path / "figure"):  # a folder, or a name matplotlib would turn into figure.png
        rc, err = _run([*name.split(), *VALID.get(name, []), flag, str(target)], capsys)
        _one_line_error(rc, err)
        assert "--plot" in err
    assert not (tmp_path / "figure.png").exists()


def test_malformed_profile_json_is_one_line(tmp_path: Path, capsys) -> None:
    for text in ("{not json", "[1, 2]", '{"name": ' + "[" * 100_000):
        bad = tmp_path / "p.json"
        bad.write_text(text)
        rc, err = _run(["geo", "validate", "--profile", str(bad)], capsys)
        _one_line_error(rc, err)
        assert "p.json" in err


@pytest.mark.parametrize("device", ["nonsense", "cuda:99", "tpu"])
def test_unknown_or_absent_device_is_one_line(device: str, capsys) -> None:
    pytest.importorskip("torch", reason="needs the rl extra: pip install -e '.[rl]'")
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        pytest.skip("checks the error for a missing CUDA device, and this machine has one (nothing wrong)")
    rc, err = _run(["train", "--env", "servegym/PDProvision-v0", "--timesteps", "8", "--device", device], capsys)
    _one_line_error(rc, err)
    assert "--device" in err


@pytest.mark.parametrize("seeds", ["[-1, 2]", "-3", "{start: -5, count: 2}", "{start: 0, count: 0}", "[true]"])
def test_sweep_file_seeds_are_checked(seeds: str, tmp_path: Path, capsys) -> None:
    pytest.importorskip("yaml")
    cfg = tmp_path / "s.yml"
    cfg.write_text("env: servegym/PDProvision-v0\nscenarios:\n  - {name: a}\npolicies: [static-peak]\n"
                   f"seeds: {seeds}\n")
    rc, err = _run(["sweep", str(cfg), "--out", str(tmp_path / "r.csv")], capsys)
    _one_line_error(rc, err)
    assert "seeds" in err


def test_evaluate_model_given_a_run_folder_points_at_its_model(tmp_path: Path, capsys) -> None:
    """--model runs/X (the run folder train printed) says which file to pass, in one line, instead of a bare
    "no such file"; a folder without model.zip lists what it holds."""
    run = tmp_path / "run"
    run.mkdir()
    assert main(["evaluate", "--model", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a folder (it holds no model .zip)" in err
    (run / "best_model.zip").write_bytes(b"")
    assert main(["evaluate", "--model", str(run)]) == 2
    assert "is a folder (it holds best_model.zip)" in capsys.readouterr().err
    (run / "model.zip").write_bytes(b"")
    assert main(["evaluate", "--model", str(run)]) == 2
    assert f"is a folder (did you mean {str(run / 'model.zip')!r}?)" in capsys.readouterr().err
    assert main(["evaluate", "--model", str(tmp_path / "none.zip")]) == 2
    assert "none.zip': no such file" in capsys.readouterr().err
