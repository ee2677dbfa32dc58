"""Citations: CITATION.cff names the three source papers the README cites, and no user-facing text
(README, docstrings, strings the code prints) speaks of internal issues instead of the papers."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("src", "envs", "baselines", "agents", "calibration", "benchmarks")
PAPERS = {  # abbreviation -> (title, arXiv id or None)
    "geo": ("Dissecting the Carbon–SLO Tension in Geo-Distributed LLM Serving", "2610.14571"),
    "pd": ("Analytical Power-Aware Provisioning for Prefill–Decode Disaggregated AI Inference", "2609.24639"),
    "npu": ("Auto-Scaling Heterogeneous Neural Processing Units for Energy and Cost-Efficient LLM Serving", None),
}


def test_citation_cff_lists_the_three_papers_and_the_readme_cites_them() -> None:
    yaml = pytest.importorskip("yaml")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and cff["authors"]
    refs = {r["abbreviation"]: r for r in cff["references"]}
    assert set(refs) == set(PAPERS)
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    for abbr, (title, arxiv) in PAPERS.items():
        ref = refs[abbr]
        assert ref["title"] == title and ref["authors"]
        assert title in readme and f"[{abbr}]" in readme
        if arxiv:
            assert ref["identifiers"][0]["value"] == f"arXiv:{arxiv}" and f"arXiv:{arxiv}" in readme
            # authors as the paper lists them, surname first in the README's order
            for a in ref["authors"]:
                assert f"{a['given-names']} {a['family-names']}" in readme


INTERNAL = re.compile(r"\bissues?\b|\bissue's\b", re.IGNORECASE)


def _user_facing_strings(path: Path) -> list[tuple[int, str]]:
    """Docstrings and every other string constant (what the code can print) of a source file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(n.lineno, n.value) for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_no_internal_issue_wording_in_readme_docstrings_or_output() -> None:
    hits = [f"README.md:{i}" for i, line in enumerate((ROOT / "README.md").read_text().splitlines(), 1)
            if INTERNAL.search(line)]
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            hits += [f"{path.relative_to(ROOT)}:{line}" for line, s in _user_facing_strings(path) if INTERNAL.search(s)]
    assert not hits, f"internal wording ('issue') in user-facing text: {hits}"
