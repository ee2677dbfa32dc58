"""ruff stays clean over the whole repository (rules in pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT


def _ruff() -> list[str]:
    exe = Path(sys.executable).with_name("ruff")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: install the dev extra (pip install -e '.[dev]')")
    return [found]


def test_ruff_is_clean() -> None:
    res = subprocess.run([*_ruff(), "check", "--no-cache", "."], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
