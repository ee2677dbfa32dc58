"""servegym's on-disk cache of derived data it can always rebuild (the npu DSE tables, :mod:`~servegym.envs.npu.sim.table_cache`).

Where: ``$SERVEGYM_CACHE_DIR`` when set; else the platform's user cache folder, as ``platformdirs`` would
choose it (without depending on it): ``$XDG_CACHE_HOME/servegym`` or ``~/.cache/servegym`` on Linux and other
Unix systems, ``~/Library/Caches/servegym`` on macOS, ``%LOCALAPPDATA%\\servegym\\Cache`` on Windows.
``SERVEGYM_NO_CACHE=1`` turns the disk cache off (everything is then rebuilt in every process).

Rules every entry follows:

* **Content-keyed.** An entry's file name is the SHA-256 of every input it was built from, the source of the
  code that builds it and its format version included (:func:`content_key`, :func:`source_digest`), so a changed
  input or a changed formula gives a new name and an old entry is never read for new inputs.
* **Atomic.** An entry is written to a temporary file in the same folder and renamed over its name
  (:func:`servegym.outputs.atomic_path`): a reader, or another process writing the same entry at the same time
  (``pytest -n auto``, vector envs in subprocesses), sees a whole file or none. Writers of one key write the
  same content, so the last rename winning loses nothing.
* **Never trusted.** Entries are JSON or ``.npz`` read with ``allow_pickle=False`` within :data:`MAX_ENTRY_BYTES`,
  and the reader validates every field before use; an entry that fails is rebuilt and rewritten.
* **Best effort.** A folder that cannot be created or written only costs the rebuild (no error); the folder
  keeps at most :data:`MAX_ENTRIES` entries per kind, the least recently used removed first.

Standard library only at import time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ENV_DIR = "SERVEGYM_CACHE_DIR"
"""Environment variable: the cache folder (overrides the platform's user cache folder)."""
ENV_OFF = "SERVEGYM_NO_CACHE"
"""Environment variable: ``1`` (or ``true``/``yes``) turns the disk cache off."""
MAX_ENTRY_BYTES = 64 * 2**20
"""The largest entry read back (the npu tables are 0.1-1 MB); a bigger file is treated as invalid."""
MAX_ENTRIES = 32
"""Entries kept per kind (per sub-folder); a write removes the least recently used beyond this."""


def cache_root() -> Path | None:
    """The cache folder (not created here), or None when ``SERVEGYM_NO_CACHE`` turns the cache off."""
    if os.environ.get(ENV_OFF, "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    given = os.environ.get(ENV_DIR, "").strip()
    if given:
        return Path(given).expanduser()
    home = Path.home()
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA", "").strip()
        return (Path(base) if base else home / "AppData" / "Local") / "servegym" / "Cache"
    if sys.platform == "darwin":
        return home / "Library" / "Caches" / "servegym"
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    # the XDG spec ignores a relative XDG_CACHE_HOME
    return (Path(xdg) if xdg and os.path.isabs(xdg) else home / ".cache") / "servegym"


def content_key(inputs: Any) -> str:
    """SHA-256 (hex) of ``inputs`` as canonical JSON (sorted keys, no whitespace): the same inputs give the same
    key in every process and on every machine. ``inputs`` must be JSON-serializable (finite numbers)."""
    text = json.dumps(inputs, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def source_digest(modules: Iterable[Any]) -> str | None:
    """SHA-256 of the source files of ``modules`` (module objects), or None when a source cannot be read
    (then nothing is cached: a key must cover the code that computes the entry)."""
    h = hashlib.sha256()
    for mod in modules:
        path = getattr(mod, "__file__", None)
        try:
            data = Path(path).read_bytes() if path else None
        except OSError:
            data = None
        if data is None:
            return None
        h.update(mod.__name__.encode() + b"\0" + data + b"\0")
    return h.hexdigest()


def entry_path(kind: str, key: str, suffix: str) -> Path | None:
    """The file of the entry ``key`` of ``kind`` (a sub-folder), or None when the cache is off."""
    root = cache_root()
    return None if root is None else root / kind / f"{key}{suffix}"


def read_entry(path: Path) -> bytes | None:
    """The bytes of an entry, or None when it is absent, unreadable or over :data:`MAX_ENTRY_BYTES`. Marks it
    used (its modification time), so pruning keeps it."""
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_ENTRY_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_ENTRY_BYTES:
        return None
    with contextlib.suppress(OSError):
        os.utime(path)
    return data


def write_entry(path: Path, data: bytes) -> bool:
    """Write an entry atomically and prune its folder; False (and nothing raised) when it cannot be written."""
    from servegym.outputs import atomic_path

    try:
        with atomic_path(path) as tmp:
            tmp.write_bytes(data)
    except OSError:
        return False
    prune(path.parent, keep=MAX_ENTRIES, suffix=path.suffix)
    return True


def prune(folder: Path, keep: int, suffix: str) -> None:
    """Remove all but the ``keep`` most recently used entries (``*suffix``) of ``folder``, and temporary files
    of writers killed mid-write (older than an hour). Safe when several processes prune at once (a file already
    gone is skipped)."""
    import time

    entries: list[tuple[float, Path]] = []
    try:
        names = list(folder.iterdir())
    except OSError:
        return
    for p in names:
        try:
            mtime = p.stat().st_mtime
        except OSError:
            continue
        if p.name.startswith("."):  # a temporary file of atomic_path
            if mtime < time.time() - 3600:
                with contextlib.suppress(OSError):
                    p.unlink()
        elif p.name.endswith(suffix):
            entries.append((mtime, p))
    entries.sort(reverse=True)
    for _, p in entries[keep:]:
        with contextlib.suppress(OSError):
            p.unlink()


__all__ = ["ENV_DIR", "ENV_OFF", "MAX_ENTRIES", "MAX_ENTRY_BYTES", "cache_root", "content_key", "entry_path",
           "prune", "read_entry", "source_digest", "write_entry"]
