"""benchmarks/results/ holds what the docs cite: at most 100 files, each linked from a docs page (older readings
live in the git history). Links from the docs to repository files are ordinary relative paths; this test reads
them as the docs hook does (docs/hooks/repo_files.py)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import REPO_ROOT

RESULTS = REPO_ROOT / "benchmarks" / "results"
MAX_FILES = 100
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s#]+)(?:#[^)\s]*)?\)")


def linked_repo_files(docs: Path = REPO_ROOT / "docs") -> set[Path]:
    """Every existing file a docs page links to by a relative path."""
    out = set()
    for page in docs.rglob("*.md"):
        for target in _LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            path = (page.parent / target).resolve()
            if path.is_file():
                out.add(path)
    return out


def results_files() -> list[Path]:
    return sorted(p for p in RESULTS.rglob("*") if p.is_file())


def test_results_hold_at_most_100_files() -> None:
    files = results_files()
    assert len(files) <= MAX_FILES, f"{len(files)} files under benchmarks/results (at most {MAX_FILES})"


def test_every_results_file_is_linked_from_the_docs() -> None:
    linked = linked_repo_files()
    missing = [str(p.relative_to(REPO_ROOT)) for p in results_files() if p.resolve() not in linked]
    assert not missing, f"not linked from any docs page (docs/results.md lists them): {missing}"


def test_the_link_reader_sees_a_missing_link(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "a.md").write_text("x")
    (tmp_path / "docs" / "p.md").write_text("[a](../a.md) [b](../b.md) [web](https://example.org/a.md)")
    assert linked_repo_files(tmp_path / "docs") == {(tmp_path / "a.md").resolve()}
