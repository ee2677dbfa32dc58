"""The docs site builds with warnings as errors (``mkdocs build --strict``): a broken link, a missing page in the
nav, a card include that points nowhere or a bad anchor fails here, as it would in CI. Skips only when the docs
extra (mkdocs, mkdocs-material) is not installed; the dev extra installs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT


def test_docs_build_strict(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
    pytest.importorskip("material", reason="mkdocs-material is not installed (pip install -e '.[docs]')")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "NO_MKDOCS_2_WARNING": "1"}
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(REPO_ROOT / "mkdocs.yml"),
                          "-d", str(tmp_path / "site")], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    site = tmp_path / "site"
    for page in ("index.html", "quickstart/index.html", "pd/index.html", "results/index.html"):
        assert (site / page).is_file(), page
    # the cards are included, not left as include lines; results files are copied beside the pages
    pd = (site / "pd" / "index.html").read_text(encoding="utf-8")
    assert 'id="pdprovision-v0"' in pd and "--8&lt;--" not in pd and "--8<--" not in pd
    assert (site / "benchmarks" / "results" / "leaderboard.md").is_file()
