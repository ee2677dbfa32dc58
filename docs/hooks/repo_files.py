"""MkDocs hook: links from the docs to repository files outside ``docs/`` work on the site as they do on GitHub.

The pages link to code and to ``benchmarks/results/`` with ordinary relative paths (``../benchmarks/results/x.md``),
which a repository browser follows. MkDocs only knows files under ``docs_dir``, so under ``--strict`` every such
link would be a warning, and on the built site a dead link. This hook adds each linked repository file to the
site as a plain copy (a ``.md`` result is copied as text, not rendered: its own links point into the repository)
at its repository path, and rewrites the page's link to that copy. A link to a file that does not exist is left
alone, so ``mkdocs build --strict`` still fails on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

#: Markdown links and images with a relative target: ``[text](target)`` / ``![alt](target)``.
_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s#]+)(#[^)\s]*)?(\))")


class RepoFile(File):
    """A repository file copied into the site verbatim (never rendered as a page)."""

    def is_documentation_page(self) -> bool:
        return False


def _repo_target(config: Any, page_src_uri: str, target: str) -> str | None:
    """``target`` (relative to the page) as a path relative to the repository root, when it is a file of the
    repository outside ``docs_dir``; else None."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
        return None
    docs = Path(config["docs_dir"]).resolve()
    repo = docs.parent
    path = (docs / posixpath.dirname(page_src_uri) / target).resolve()
    if not path.is_file() or docs in path.parents or repo not in path.parents:
        return None
    return path.relative_to(repo).as_posix()


def on_files(files: Files, config: Any) -> Files:
    repo = Path(config["docs_dir"]).resolve().parent
    added: set[str] = set()
    for page in list(files.documentation_pages()):
        text = Path(page.abs_src_path).read_text(encoding="utf-8")
        for m in _LINK.finditer(text):
            rel = _repo_target(config, page.src_uri, m.group(2))
            if rel and rel not in added and files.get_file_from_path(rel) is None:
                files.append(RepoFile(rel, str(repo), config["site_dir"], config["use_directory_urls"]))
                added.add(rel)
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    def sub(m: re.Match[str]) -> str:
        rel = _repo_target(config, page.file.src_uri, m.group(2))
        if rel is None:
            return m.group(0)
        new = posixpath.relpath(rel, posixpath.dirname(page.file.src_uri) or ".")
        return f"{m.group(1)}{new}{m.group(3) or ''}{m.group(4)}"

    return _LINK.sub(sub, markdown)
