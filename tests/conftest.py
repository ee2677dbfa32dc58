"""Shared pytest configuration for servegym's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The project's raw data folder (../shared/data); tests needing it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"raw data folder {SHARED_DATA} not present")
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
