"""Reading a text file a user hands to servegym within a size bound, as one-line errors."""

from __future__ import annotations

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
