"""Reading a text file a user hands to servegym within a size bound, and refusing links that lead out of a
folder servegym searches by itself, as one-line errors."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from servegym.errors import ConfigError


def read_user_text(path: Path | Any, max_bytes: int, allowed: str) -> str:
    """The UTF-8 text of ``path`` (a ``Path`` or an importlib Traversable), at most ``max_bytes`` bytes read;
    a one-line :class:`ConfigError` naming the file (and ``allowed``, what the file should be) otherwise.
    Nothing of the file's content is quoted."""
    where = str(path)
    try:
        with path.open("rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if len(raw) > max_bytes:
        raise ConfigError(f"{where}: more than {max_bytes:,} bytes; allowed: {allowed} of <= {max_bytes:,} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: not UTF-8 text (byte {exc.start}); allowed: {allowed}") from None


def refuse_link_out(path: Path, folder: Path, what: str) -> None:
    """A one-line :class:`ConfigError` when ``path`` (a file servegym finds by itself in ``folder``, such as a
    model folder's ``run.json``, not one the user named) is a symbolic link to a file outside ``folder``:
    such a link would make servegym read (and maybe quote) a file the user never named. The target is not
    shown."""
    if not path.is_symlink():
        return
    target = Path(os.path.realpath(path))
    if not target.is_relative_to(Path(os.path.realpath(folder))):
        raise ConfigError(f"{path}: a symbolic link to a file outside its folder; allowed: {what}, as a file in "
                          "that folder")
