"""Shared pytest configuration for servegym's tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

#: Folders of the working tree a test session may write to: caches of the tools themselves.
_TREE_SKIP = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis"}
#: Generated outputs: a test must not rewrite these either (a changed file here is a test's doing).
_OUTPUT_DIRS = ("benchmarks/results",)


def _tree() -> dict[str, float]:
    """Every file of the working tree (tool caches and the venv excluded) -> its mtime."""
    out: dict[str, float] = {}
    for root, dirs, files in os.walk(REPO_ROOT):
        dirs[:] = [d for d in dirs if d not in _TREE_SKIP and not d.endswith(".egg-info")]
        for f in files:
            path = os.path.join(root, f)
            try:
                out[os.path.relpath(path, REPO_ROOT)] = os.stat(path).st_mtime
            except OSError:
                continue
    return out


#: Marks the disk cache folder this test run made (inherited by pytest-xdist workers and by the subprocesses
#: tests start), so the tests never read or write the user's cache folder (servegym.user_cache).
_TEST_CACHE_VAR = "_SERVEGYM_TEST_CACHE_DIR"


def _numba_locks(folder: str) -> Path:
    """The session's folder of per-kernel numba compile locks (tests/_numba_warmup.py)."""
    return Path(folder) / "numba-locks"


def pytest_configure(config: pytest.Config) -> None:
    """Point servegym's disk cache at a temporary folder shared by the whole run (workers included), so tests
    write only to tmp folders and the parallel workers exercise the cache's concurrent writers; start the numba
    warm-up (tests/_numba_warmup.py) and make the processes that run tests share its compiles."""
    from _numba_warmup import install_compile_locks

    worker = os.environ.get(_TEST_CACHE_VAR)
    if worker:  # a pytest-xdist worker: the controller's folder
        install_compile_locks(_numba_locks(worker))
        return
    import subprocess
    import sys
    import tempfile

    folder = tempfile.mkdtemp(prefix="servegym-test-cache-")
    config._servegym_cache_before = {k: os.environ.get(k) for k in ("SERVEGYM_CACHE_DIR", "SERVEGYM_NO_CACHE",
                                                                     "SB3_LOGDIR")}  # type: ignore[attr-defined]
    os.environ[_TEST_CACHE_VAR] = os.environ["SERVEGYM_CACHE_DIR"] = folder
    os.environ.pop("SERVEGYM_NO_CACHE", None)
    # stable-baselines3 makes a folder for its stdout logger at every learn() without a log folder, under the
    # system's temp folder unless SB3_LOGDIR names one: inside this run's folder, removed with it
    os.environ["SB3_LOGDIR"] = str(Path(folder) / "sb3-logs")
    config._servegym_cache_dir = folder  # type: ignore[attr-defined]
    locks = _numba_locks(folder)
    locks.mkdir()
    if not getattr(config.option, "numprocesses", None):  # no workers: this process runs the tests itself
        install_compile_locks(locks)
    # Compiles the kernels beside the first tests (the workers wait for a kernel it is compiling rather than
    # compile it too); on a warm cache it only loads them (about 2 CPU-s). Its own folder: it writes nothing else.
    config._servegym_warmup = subprocess.Popen(  # type: ignore[attr-defined]
        [sys.executable, str(Path(__file__).with_name("_numba_warmup.py")), str(locks)], cwd=folder,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = getattr(config, "_servegym_cache_dir", None)
    if folder is not None:
        import shutil

        warmup = config._servegym_warmup  # type: ignore[attr-defined]
        if warmup.poll() is None:  # a short run (a few tests) ends first: its compiles are only a cache
            warmup.kill()
        warmup.wait()
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(_TEST_CACHE_VAR, None)
        for k, v in config._servegym_cache_before.items():  # type: ignore[attr-defined]
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # the controlling process only (pytest-xdist workers skip)
        session.config._servegym_tree = _tree()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session if a test wrote into the working tree: a new file anywhere, or a changed file under
    benchmarks/results (tests write only to tmp folders; each test runs in its own, see _run_in_tmp)."""
    before = getattr(session.config, "_servegym_tree", None)
    if before is None:
        return
    after = _tree()
    bad = sorted(set(after) - set(before))
    bad += sorted(p for p in set(after) & set(before)
                  if after[p] != before[p] and p.startswith(_OUTPUT_DIRS))
    if bad:
        shown = ", ".join(bad[:10]) + (f" and {len(bad) - 10} more" if len(bad) > 10 else "")
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        msg = (f"tests wrote into the working tree (they must write only to tmp folders): {shown} "
               "(a file you or a git pull created during the run shows here too)")
        if reporter is not None:
            reporter.write_line(f"ERROR: {msg}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def _run_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs in its own temporary folder, so relative default paths (``runs/tb``, ``runs/suite``,
    ``servegym-results``) land there and never in the working tree."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The project's raw data folder (../shared/data); tests needing it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"needs {SHARED_DATA} (the raw datasets, only for rebuilding or re-checking the shipped data "
                    "files); not needed to use servegym")
    return SHARED_DATA


def wait_for(cond, timeout: float, proc=None) -> None:
    """Poll ``cond()`` every 0.2 s until it holds; fail on ``timeout`` s or when the subprocess ``proc``
    ends first (with the tail of its stderr)."""
    import time

    t0 = time.monotonic()
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the run ended first (exit {proc.returncode}): {proc.stderr.read()[-2000:]}")
        if time.monotonic() - t0 > timeout:
            raise AssertionError("timed out")
        time.sleep(0.2)


def interrupt_when(cmd: list[str], ready, timeout: float, sig: int) -> tuple[int, str]:
    """Start ``cmd`` in a session of its own, wait until ``ready()`` holds (see :func:`wait_for`), send ``sig``
    (SIGINT to the whole process group, as a terminal's Ctrl-C does; any other signal to the process alone),
    and return its exit status and stderr. Whatever happens, nothing of the run is left alive."""
    import os
    import signal
    import subprocess

    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(ready, timeout, proc)
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    wait_for(lambda: not session_pids(proc.pid), 10)
    return proc.returncode, err


def session_pids(sid: int) -> list[int]:
    """Processes of the session ``sid`` still alive (zombies excluded), from /proc."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(d.name))
    return out
