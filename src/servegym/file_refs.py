"""Which files a user's config file may make servegym read.

Env kwargs can name files (a geo ``trace`` or ``profile`` path). When those kwargs come from a file the
user did not write (a model folder's ``run.json``, a sweep config from elsewhere), a path in them would make
servegym read, and quote in its errors, a file the user never named: ``{"geo": {"trace": "/etc/shadow"}}``.
:func:`check_file_refs` walks such kwargs and refuses every string that names a file unless it is shipped
data (a trace or profile by name, or a path inside the installed package), the user typed the same string
on the command line, or it lies under a folder the user named (a sweep config's own folder).
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from servegym.errors import ConfigError, shown

#: Suffixes that make a string a file name even without a folder in it.
DATA_SUFFIXES = frozenset({".csv", ".gz", ".json", ".jsonl", ".npz", ".npy", ".txt", ".parquet", ".yml", ".yaml",
                           ".pkl", ".pickle", ".zip", ".pt", ".pth", ".tsv", ".log", ".db"})
#: Config keys whose bare-name values are looked up as files when no shipped data has that name.
PATH_KEYS = frozenset({"trace", "profile", "path", "file", "dir", "predictor", "osl_predictor"})
#: Deepest nesting walked (env kwargs nest 2-3 levels; deeper is refused rather than walked).
MAX_DEPTH = 32


@lru_cache(maxsize=1)
def shipped_names() -> frozenset[str]:
    """Names of shipped data that configs may use by name: traces and length sets, geo engine profiles."""
    from servegym.envs.data.catalog import TRACES
    from servegym.envs.geo.sim.profile import available_profiles

    return frozenset(TRACES) | frozenset(available_profiles())


def _shipped_roots() -> list[Path]:
    """The folders of the installed data packages (shipped traces, grid series, profiles)."""
    from importlib import resources

    return [Path(str(resources.files(pkg))) for pkg in ("servegym.envs.data", "servegym.calibration")]


def _is_under(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError, RuntimeError):
        return False
    return True


def _path_key(key: str | None) -> bool:
    """Whether a config key takes a file (``trace``, ``profile``, ``*_path``, ...); None: any key."""
    if key is None:
        return True
    k = key.lower()
    return k in PATH_KEYS or k.endswith(("_path", "_file", "_dir", "_trace", "_profile"))


def names_a_file(text: str, key: str | None = None) -> bool:
    """Whether ``text``, the value of config key ``key``, would be read as a file path: it has a folder or
    a data suffix in it, or (for a key that takes files) it names a file in the working folder."""
    if text in shipped_names():
        return False
    if "/" in text or "\\" in text or os.sep in text or text.startswith(("~", ".")) or "\0" in text:
        return True
    if Path(text).suffix.lower() in DATA_SUFFIXES:
        return True
    if not _path_key(key):  # e.g. objective: "energy" beside a file called energy: not a file reference
        return False
    try:
        return os.path.lexists(text)  # a bare name of a file in the working folder
    except (OSError, ValueError):
        return True



def _example(keys: list[str]) -> str:
    doc: Any = "PATH"
    for k in reversed(keys[1:]):  # keys[0] is the env_kwargs name itself
        doc = {k: doc}
    return json.dumps(doc)


def _strings(value: Any) -> set[str]:
    """Every string in a JSON-like value (keys too), iteratively."""
    out: set[str] = set()
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            out.add(v)
        elif isinstance(v, Mapping):
            out.update(k for k in v if isinstance(k, str))
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return out


def check_file_refs(kwargs: Any, where: str, origin: str, *, user_values: Any = None,
                    roots: Collection[Path] = (), fix: str | None = None, quote: bool = True) -> None:
    """Raise a one-line :class:`ConfigError` at the first string in ``kwargs`` (found at ``where``, e.g.
    ``"run.json: env_kwargs"``) that names a file the user did not name: allowed are shipped data, any
    string also found in ``user_values`` (what the user typed, e.g. ``--env-kwargs``), and paths under
    ``roots``. ``origin`` says where the kwargs came from (``"a model folder's run.json"``), ``fix`` how to
    use a file of one's own (default: name it with ``--env-kwargs``); ``quote=False``: the error names the
    key but shows nothing of its value (kwargs from a file the user did not name)."""
    typed = _strings(user_values)
    allowed_roots = [*_shipped_roots(), *roots]
    stack: list[tuple[Any, list[str]]] = [(kwargs, [where])]
    while stack:
        v, keys = stack.pop()
        if len(keys) > MAX_DEPTH:
            raise ConfigError(f"{'.'.join(keys[:3])}...: nested more than {MAX_DEPTH} levels; allowed: <= {MAX_DEPTH}")
        if isinstance(v, Mapping):
            stack.extend((val, [*keys, str(k)]) for k, val in v.items())
        elif isinstance(v, (list, tuple)):
            stack.extend((val, [*keys, f"[{i}]"]) for i, val in enumerate(v))
        elif isinstance(v, str) and v not in typed and names_a_file(v, keys[-1]):
            try:
                under = any(_is_under(Path(v).expanduser(), r) for r in allowed_roots)
            except (ValueError, OSError, RuntimeError):
                under = False
            if not under:
                name = ".".join(keys).replace(".[", "[")
                how = fix or f"name it on the command line: --env-kwargs '{_example(keys)}'"
                named = f"{name} = {shown(v)}" if quote else name
                raise ConfigError(f"{named} names a file, and {origin} may name only shipped data "
                                  f"(traces and profiles by name); to read a file of your own, {how}")


def path_in_folder(text: Any, root: Path, where: str, what: str = "the sweep file's folder") -> Path:
    """The file a config names by ``text``, relative to ``root`` (the config file's own folder), which it may
    not leave: a relative path without ``..`` climbing out, or an absolute one inside ``root``. Decided on
    the text first, before anything is looked up on disk, so a path elsewhere is refused without revealing
    whether a file exists there; then with links resolved, so a link inside ``root`` cannot lead out of it.
    ``where`` names the field in the one-line :class:`ConfigError`; whether the file exists is the caller's
    to check."""
    allowed = f"allowed: a path inside {what} ({str(root)!r}), e.g. runs/model.zip"
    if not isinstance(text, str) or not text or "\0" in text:
        raise ConfigError(f"{where} = {shown(text)}; {allowed}")
    base = Path(os.path.abspath(root))
    path = Path(os.path.normpath(base / text))  # base / an absolute path is that path; ".." folded lexically
    if path == base or base not in path.parents:
        raise ConfigError(f"{where} = {shown(text)} is outside {what}; {allowed}")
    if not _is_under(path, base):  # a link in the folder that points out of it
        raise ConfigError(f"{where} = {shown(text)} leads outside {what} through a symbolic link; {allowed}")
    return path
