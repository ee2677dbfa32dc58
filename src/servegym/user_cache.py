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
* **Never trusted.** An entry is opened only when it is a regular file (``lstat`` first, then ``O_NOFOLLOW |
  O_NONBLOCK`` and ``fstat`` on what was opened): a symbolic link (which could lead out of the cache folder), a
  hard link (a file that also has a name elsewhere), a FIFO (which would block the reader forever), a device or a
  folder at an entry's name is a miss, never opened and never touched. Entries are JSON or ``.npz`` read with ``allow_pickle=False`` within :data:`MAX_ENTRY_BYTES`;
  an ``.npz`` is read by :func:`checked_npz`, which checks every member's declared size (and array header)
  before inflating anything, so a small file cannot expand to gigabytes. The reader validates every field before
  use; an entry that fails is a miss: rebuilt and replaced atomically (the rename replaces a link or a FIFO
  itself, not what it points to).
* **Best effort.** A folder that cannot be created or written only costs the rebuild (no error); the folder
  keeps at most :data:`MAX_ENTRIES` entries per kind, the least recently used removed first.

Standard library only at import time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sys
from collections.abc import Iterable, Mapping
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


class BadEntry(ValueError):
    """An entry that is present but must not be used (the message says why in a few words); the caller treats
    it as a miss: rebuilds it and replaces it."""


def read_entry(path: Path) -> bytes | None:
    """The bytes of an entry, or None when it is absent; :class:`BadEntry` when something else than a readable
    regular file of at most :data:`MAX_ENTRY_BYTES` is at its name. Marks a read entry used (its modification
    time, set through the open descriptor), so pruning keeps it.

    Why so careful: the cache folder is shared by every process of the user and its entries are found by name,
    not named by the user. A symbolic link could make servegym read, and touch, a file outside the cache folder;
    a FIFO would block ``reset()`` forever on ``open``. So the name is ``lstat``-ed first and only a regular
    file is opened, with ``O_NOFOLLOW`` (a link swapped in after the ``lstat`` fails to open) and ``O_NONBLOCK``
    (a FIFO swapped in opens without waiting for a writer), and the opened descriptor is ``fstat``-ed again. A
    hard link (a file with more than one name: the other may be outside the cache folder) is refused too, and so
    is a file larger than :data:`MAX_ENTRY_BYTES` by its size, before a byte is read."""
    if _is_link(path.parent):
        raise BadEntry("its folder is a symbolic link; allowed: a real folder inside the cache folder")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BadEntry(f"cannot be examined ({exc.strerror or type(exc).__name__})") from None
    _check_stat(st)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None  # removed by another process's prune since the lstat
    except OSError as exc:
        raise BadEntry(f"cannot be opened ({exc.strerror or type(exc).__name__})") from None
    with os.fdopen(fd, "rb") as fh:
        _check_stat(os.fstat(fd))  # swapped for something else between lstat and open
        try:
            data = fh.read(MAX_ENTRY_BYTES + 1)
        except OSError as exc:
            raise BadEntry(f"cannot be read ({exc.strerror or type(exc).__name__})") from None
        if len(data) > MAX_ENTRY_BYTES:
            raise BadEntry(f"more than {MAX_ENTRY_BYTES:,} bytes; allowed: <= {MAX_ENTRY_BYTES:,}")
        if os.utime in os.supports_fd:
            with contextlib.suppress(OSError):
                os.utime(fd)  # the file opened, never what a name might point to by now
    return data


def _check_stat(st: os.stat_result) -> None:
    """:class:`BadEntry` unless ``st`` is a regular file of its own (one name: a hard link shares its file with a
    name elsewhere, maybe outside the cache folder, which reading would touch) of at most :data:`MAX_ENTRY_BYTES`
    (said from its size, before a byte is read)."""
    import stat

    if not stat.S_ISREG(st.st_mode):
        raise BadEntry("not a regular file (a link, FIFO, device or folder); allowed: a regular file")
    if st.st_nlink > 1:
        raise BadEntry(f"a hard link ({st.st_nlink} names share its file, maybe outside the cache folder); allowed: a "
                       "file of its own")
    if st.st_size > MAX_ENTRY_BYTES:
        raise BadEntry(f"{st.st_size:,} bytes; allowed: <= {MAX_ENTRY_BYTES:,}")


MAX_NPZ_MEMBERS = 64
"""The most members an ``.npz`` entry may hold (servegym's hold under 20)."""


def checked_npz(data: bytes, caps: Mapping[str, int], total_cap: int = MAX_ENTRY_BYTES) -> dict[str, Any]:
    """The arrays of the ``.npz`` bytes ``data`` by name (numpy arrays, ``allow_pickle=False``), after checking,
    without inflating anything, that

    * every member is one of ``caps`` (``name`` for the member ``name.npy``), once; missing names are allowed
      (the caller's field checks say which is missing),
    * every member's declared uncompressed size is at most ``caps[name]`` bytes and all of them together at most
      ``total_cap``: ``zipfile`` stops inflating a member at its declared size, so these bound what is inflated,
    * every array header declares a plain dtype (no objects) and a shape whose data fits the member's size:
      numpy allocates the declared shape before reading the data.

    :class:`BadEntry` naming the member otherwise, or when the zip or an array cannot be read. Why: a 1 MB entry
    with a deflated 1-2 GiB member took 2-4 GB of memory to read with ``np.load``."""
    import io
    import zipfile

    import numpy as np

    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise BadEntry(f"not a zip file ({type(exc).__name__})") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_NPZ_MEMBERS:
            raise BadEntry(f"{len(infos):,} members; allowed: <= {MAX_NPZ_MEMBERS}")
        seen: set[str] = set()
        total = 0
        for info in infos:
            name = info.filename[:-4] if info.filename.endswith(".npy") else None
            if name is None or name not in caps or name in seen:
                raise BadEntry(f"member {info.filename[:40]!r} is not one this entry holds (or repeats)")
            seen.add(name)
            if info.file_size > caps[name]:
                raise BadEntry(f"member {info.filename!r} expands to {info.file_size:,} bytes; allowed: "
                               f"<= {caps[name]:,}")
            total += info.file_size
        if total > total_cap:
            raise BadEntry(f"members expand to {total:,} bytes together; allowed: <= {total_cap:,}")
        out: dict[str, Any] = {}
        for info in infos:
            name = info.filename[:-4]
            try:
                with zf.open(info) as fh:
                    version = np.lib.format.read_magic(fh)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
                    elif version == (2, 0):
                        shape, _, dtype = np.lib.format.read_array_header_2_0(fh)
                    else:
                        raise BadEntry(f"member {info.filename!r} has npy format {version}; allowed: 1.0, 2.0")
                    if dtype.hasobject:
                        raise BadEntry(f"member {info.filename!r} holds Python objects; allowed: plain arrays")
                    if math.prod(shape) * dtype.itemsize > info.file_size:
                        raise BadEntry(f"member {info.filename!r} declares a shape larger than its data")
                with zf.open(info) as fh:
                    out[name] = np.lib.format.read_array(fh, allow_pickle=False)
            except BadEntry:
                raise
            except Exception as exc:  # a truncated member, a bad CRC, a malformed header: any error of zip or npy
                raise BadEntry(f"member {info.filename!r} is unreadable ({type(exc).__name__})") from None
    return out


def _is_link(folder: Path) -> bool:
    """Whether ``folder`` (an entry's kind folder) is a symbolic link: one could lead out of the cache folder,
    where reading, touching, writing or pruning entries would act on files servegym does not own."""
    import stat

    try:
        return stat.S_ISLNK(os.lstat(folder).st_mode)
    except OSError:
        return False


def write_entry(path: Path, data: bytes) -> bool:
    """Write an entry atomically and prune its folder; False (and nothing raised) when it cannot be written, or
    when its folder is a symbolic link (nothing is written or pruned through it)."""
    from servegym.outputs import atomic_path

    if _is_link(path.parent):
        return False
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
            mtime = p.lstat().st_mtime  # a link's own time: its target (maybe outside the folder) is not looked at
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


__all__ = ["ENV_DIR", "ENV_OFF", "MAX_ENTRIES", "MAX_ENTRY_BYTES", "MAX_NPZ_MEMBERS", "BadEntry", "cache_root",
           "checked_npz", "content_key", "entry_path", "prune", "read_entry", "source_digest", "write_entry"]
