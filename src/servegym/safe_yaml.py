"""Bounded YAML reading for the files users hand to servegym (sweep configs, hyperparameter files).

``yaml.safe_load`` already refuses ``!!python`` tags, but on its own it reads a file of any size, expands
aliases without limit (a "billion laughs" file of a few hundred bytes grows to gigabytes) and composes
nested collections recursively (a few thousand ``[`` raise ``RecursionError``). :func:`load_yaml` first
checks the size and UTF-8 text, then walks the parser's event stream, which is iterative, counting
every node as it would be after alias expansion and the nesting depth, and composes the document only
when both stay within bounds. Every failure is a one-line :class:`~servegym.errors.ConfigError` naming
the file; nothing of the file is quoted beyond PyYAML's own position and a bounded reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from servegym.errors import ConfigError

#: Largest YAML file read, bytes (servegym's own sweep and hyperparameter files are a few kB).
MAX_YAML_BYTES = 1 * 2**20
#: Deepest nesting of mappings and sequences (the shipped files nest 4 levels; rl-zoo3's about 5).
MAX_YAML_DEPTH = 64
#: Most nodes of the document once every alias is expanded (each expansion counts the aliased node's size,
#: so a billion-laughs file fails at the first alias that would pass the budget, before anything is built).
MAX_YAML_NODES = 200_000


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:200] + "..."


def _check_events(text: str, where: str) -> None:
    """Depth and expanded node count of ``text`` within bounds, walking the event stream (no recursion)."""
    import yaml

    sizes: dict[str, int] = {}  # anchor -> expanded node count of the anchored node
    stack: list[tuple[str | None, int]] = []  # open collections: (anchor, node count before it opened)
    total = 0
    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(ev, yaml.AliasEvent):
            if ev.anchor not in sizes:
                return  # an undefined alias: composing reports it with PyYAML's message
            total += sizes[ev.anchor]
        elif isinstance(ev, (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            total += 1
            if isinstance(ev, yaml.ScalarEvent):
                if ev.anchor is not None:
                    sizes[ev.anchor] = 1
            else:
                stack.append((ev.anchor, total - 1))
                if len(stack) > MAX_YAML_DEPTH:
                    raise ConfigError(f"{where}: YAML nested more than {MAX_YAML_DEPTH} levels deep; "
                                      f"allowed: <= {MAX_YAML_DEPTH}")
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, before = stack.pop()
            if anchor is not None:
                sizes[anchor] = total - before
        if total > MAX_YAML_NODES:
            raise ConfigError(f"{where}: YAML of more than {MAX_YAML_NODES:,} nodes once its aliases are "
                              f"expanded (anchors and *aliases repeat whole subtrees); allowed: <= "
                              f"{MAX_YAML_NODES:,}")


def parse_yaml(text: str, where: str) -> Any:
    """The document of YAML ``text`` (see the module docstring); ``where`` names it in errors."""
    import yaml

    try:
        _check_events(text, where)
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML: {_reason(exc)}") from None
    except RecursionError:  # pragma: no cover - the depth bound comes first
        raise ConfigError(f"{where}: YAML nested too deeply; allowed: <= {MAX_YAML_DEPTH} levels") from None


def load_yaml(path: Path | Any, max_bytes: int = MAX_YAML_BYTES) -> Any:
    """The document of the YAML file ``path`` (a ``Path`` or an importlib Traversable), bounded as the
    module docstring says."""
    from servegym.bounded_io import read_user_text

    return parse_yaml(read_user_text(path, max_bytes, "a YAML text file"), str(path))
