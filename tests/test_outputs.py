"""Results are never lost or silently replaced: atomic writes, output locks, journals, and sweeps that
refuse to overwrite, detect a concurrent writer, resume, and leave no process behind after SIGTERM or
SIGINT (real signals to real ``servegym sweep`` processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import interrupt_when, wait_for
from hypothesis import given, settings
from hypothesis import strategies as st

import servegym  # noqa: F401  (registers the ids)
from servegym.cli import main
from servegym.outputs import Journal, OutputBusy, OutputLock, atomic_path, write_bytes

PD = "servegym/PDProvision-v0"


# --------------------------------------------------------------------------- the helper
@settings(max_examples=25, deadline=None)
@given(old=st.binary(max_size=2000), new=st.binary(max_size=2000))
def test_atomic_write_replaces_whole_or_not_at_all(tmp_path_factory, old, new) -> None:
    d = tmp_path_factory.mktemp("atomic")
    p = d / "r.csv"
    p.write_bytes(old)
    with pytest.raises(RuntimeError), atomic_path(p) as tmp:
        tmp.write_bytes(new[: len(new) // 2])
        raise RuntimeError("killed mid-write")
    assert p.read_bytes() == old  # a failed writer leaves the old file
    write_bytes(p, new)
    assert p.read_bytes() == new
    assert sorted(x.name for x in d.iterdir()) == ["r.csv"]  # no temporary file left behind


def test_atomic_write_gives_a_normal_file_mode(tmp_path) -> None:
    umask = os.umask(0o022)
    os.umask(umask)
    p = write_bytes(tmp_path / "r.json", b"{}")
    assert p.stat().st_mode & 0o777 == 0o666 & ~umask


def test_output_lock_is_exclusive_and_reclaims_a_dead_owner(tmp_path) -> None:
    out = tmp_path / "r.csv"
    with OutputLock(out):
        with pytest.raises(OutputBusy, match=r"--out = .*r\.csv' is being written by another run \(pid "):
            OutputLock(out).acquire()
    assert not (tmp_path / "r.csv.lock").exists()
    # a lock left by a run that died (its pid is gone): the next run takes it over
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    import socket

    (tmp_path / "r.csv.lock").write_text(json.dumps({"pid": int(dead.stdout), "host": socket.gethostname()}))
    with OutputLock(out) as lock:
        assert json.loads(lock.lock_path.read_text())["pid"] == os.getpid()


@settings(max_examples=20, deadline=None)
@given(values=st.lists(st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=10), max_size=3),
                       max_size=6), torn=st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b))
def test_journal_keeps_finished_lines_and_skips_a_torn_one(tmp_path_factory, values, torn) -> None:
    j = Journal(tmp_path_factory.mktemp("j") / "r.csv.partial.jsonl")
    j.open("h1")
    for i, v in enumerate(values):
        j.add(str(i), v)
    j.close()
    with j.path.open("ab") as fh:  # a line the kill cut short
        fh.write(torn)
    assert j.read("h1") == {str(i): v for i, v in enumerate(values)}
    assert j.read("another config") is None


# --------------------------------------------------------------------------- sweeps
def _sweep_file(tmp_path: Path, horizon: int = 24, seeds: list[int] | None = None) -> Path:
    doc = {"name": "t", "env": PD, "scenarios": [{"name": "day", "env_kwargs": {
        "config": {"scenario": {"horizon_steps": horizon}}}}],
           "policies": ["static-peak", "min-power"], "seeds": seeds or [7, 8]}
    p = tmp_path / "sweep.yml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _cells(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=["wall_s"]).sort_values(["scenario", "policy", "seed"]).reset_index(drop=True)


def test_sweep_refuses_to_overwrite_then_force_and_resume(tmp_path, capsys) -> None:
    cfg, out = _sweep_file(tmp_path), tmp_path / "r.csv"
    assert main(["sweep", str(cfg), "--workers", "1", "--out", str(out), "--json"]) == 0
    full = pd.read_csv(out)
    capsys.readouterr()
    assert main(["sweep", str(cfg), "--workers", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already holds results; pass --resume to continue it or --force" in err
    assert pd.read_csv(out).equals(full)  # untouched
    # a results file missing two cells: --resume runs exactly those, and the rows equal a full run's
    full.iloc[[0, 3]].to_csv(out, index=False)
    assert main(["sweep", str(cfg), "--workers", "1", "--out", str(out), "--resume"]) == 0
    assert "2 kept from r.csv" in capsys.readouterr().out
    assert _cells(pd.read_csv(out)).equals(_cells(full))
    assert main(["sweep", str(cfg), "--workers", "1", "--out", str(out), "--force", "--json"]) == 0
    assert _cells(pd.read_csv(out)).equals(_cells(full))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv", "sweep.yml"]  # no lock, journal or temp left


def test_sweep_resume_refuses_a_journal_of_another_config(tmp_path, capsys) -> None:
    cfg, out = _sweep_file(tmp_path), tmp_path / "r.csv"
    Journal(tmp_path / "r.csv.partial.jsonl").open("another config's hash").close()
    assert main(["sweep", str(cfg), "--workers", "1", "--out", str(out)]) == 2
    assert "an interrupted run's cells" in capsys.readouterr().err
    assert main(["sweep", str(cfg), "--workers", "1", "--out", str(out), "--resume"]) == 2
    assert "is from another sweep config" in capsys.readouterr().err


def _servegym(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from servegym.cli import main; sys.exit(main(sys.argv[1:]))", *args]




@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_sweep_signal_stops_every_process_and_resume_finishes(tmp_path, sig) -> None:
    """A signal mid-sweep: exit 128+signum, nothing of the run's session alive afterwards (pool workers and
    the resource tracker included), the finished cells in the journal; --resume then completes the grid with
    exactly the rows of an uninterrupted run. SIGINT goes to the whole process group, as a terminal's Ctrl-C."""
    cfg, out = _sweep_file(tmp_path, horizon=720, seeds=[0, 1, 2]), tmp_path / "r.csv"
    journal = tmp_path / "r.csv.partial.jsonl"
    code, err = interrupt_when(_servegym("sweep", str(cfg), "--workers", "2", "--out", str(out), "--json"),
                               lambda: journal.exists() and journal.read_text().count("\n") >= 2,  # >= 1 cell done
                               240, sig)
    assert code == 128 + sig, err
    assert f"interrupted by {signal.Signals(sig).name}" in err and "--resume" in err
    assert not out.exists() and not (tmp_path / "r.csv.lock").exists()
    finished = Journal(journal).read(json.loads(journal.read_text().splitlines()[0])["header"])
    assert finished and len(finished) < 6
    assert main(["sweep", str(cfg), "--workers", "2", "--out", str(out), "--resume", "--json"]) == 0
    resumed = pd.read_csv(out)
    assert len(resumed) == 6 and not journal.exists()
    assert main(["sweep", str(cfg), "--workers", "1", "--out", str(tmp_path / "ref.csv"), "--json"]) == 0
    assert _cells(resumed).equals(_cells(pd.read_csv(tmp_path / "ref.csv")))


@pytest.mark.slow
def test_two_sweeps_on_one_output_the_second_is_refused(tmp_path) -> None:
    cfg, out = _sweep_file(tmp_path, horizon=1440, seeds=list(range(10))), tmp_path / "r.csv"  # ~20 s of cells
    first = subprocess.Popen(_servegym("sweep", str(cfg), "--workers", "1", "--out", str(out), "--json"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (tmp_path / "r.csv.lock").exists(), 120, first)
        second = subprocess.run(_servegym("sweep", str(cfg), "--workers", "1", "--out", str(out), "--force"),
                                capture_output=True, text=True, timeout=120)
        overlapped = first.poll() is None
        _, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 2
    assert second.stderr.count("\n") == 1 and "is being written by another run (pid" in second.stderr
    assert overlapped, "the first run ended before the second started: make its grid longer"
    assert first.returncode == 0, err
    assert len(pd.read_csv(out)) == 20  # the first run's rows, all of them
