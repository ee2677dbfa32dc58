"""One naming scheme for models and hardware across the families (geo, pd, npu).

Every model and accelerator has one canonical spelling, the vendor's own (``Llama-3.1-8B``,
``DeepSeek-V3-671B``, ``A100-40GB``, ``NPU-D``), which every table, help text and error shows.
Input is matched ignoring case, spaces, ``-`` and ``_`` (``llama-3.1-8b``, ``llama3.1-8b``,
``LLAMA_3.1_8B`` and ``Llama 3.1 8B`` are all ``Llama-3.1-8B``) and through the common aliases listed here (``deepseek-v3``, ``meta-llama-3-70b``, ``tpu-v6e`` for ``NPU-D``, ...).

Each family keeps its own objects (a geo engine profile, an npu model shape, a pd GPU) in a
:class:`NameTable`, which is a read-only mapping keyed by canonical names that also resolves
aliases on lookup; :func:`resolve` gives the canonical name and raises the one error format::

    model = 'gpt-5' is unknown; allowed: Llama-3-8B, Llama-3-70B (case and '-', '_', ' ' are ignored)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Generic, TypeVar

from servegym.errors import ConfigError

#: canonical model name -> aliases beyond case and separators (Hugging Face repo names, short forms)
MODEL_ALIASES: dict[str, tuple[str, ...]] = {
    "Llama-3-8B": ("Meta-Llama-3-8B", "Llama3-8B"),
    "Llama-3-70B": ("Meta-Llama-3-70B", "Llama3-70B"),
    "Llama-3.1-8B": ("Meta-Llama-3.1-8B", "Llama3.1-8B", "Llama-3.1-8B-Instruct"),
    "Llama-3.1-8B-TP2": ("Llama3.1-8B-TP2",),
    "Llama-3.1-405B": ("Meta-Llama-3.1-405B", "Llama3.1-405B"),
    "DeepSeek-V3-671B": ("DeepSeek-V3", "DeepSeekV3", "DeepSeekV3-671B"),
    "Qwen2.5-7B": ("Qwen2.5-7B-Instruct",),
    "Mixtral-8x7B": ("Mixtral-8x7B-Instruct", "Mixtral-8x7B-Instruct-v0.1"),
    "Qwen3-32B": (),
}
#: canonical accelerator name -> aliases (the npu paper's NPU-A..D are TPU v4 / v5e / v5p / v6e, its Table 2)
HARDWARE_ALIASES: dict[str, tuple[str, ...]] = {
    "A100-40GB": ("A100", "A100-SXM4-40GB"),
    "H200": ("H200-SXM", "H200-141GB"),
    "NPU-A": ("TPU-v4", "TPUv4"),
    "NPU-B": ("TPU-v5e", "TPUv5e"),
    "NPU-C": ("TPU-v5p", "TPUv5p"),
    "NPU-D": ("TPU-v6e", "TPUv6e"),
}

_SEPARATORS = re.compile(r"[\s_\-]+")


def name_key(name: str) -> str:
    """The matching key of a name: lower case, with spaces, ``-`` and ``_`` removed (dots kept, so
    ``Llama-3.1-8B`` and ``Llama-3-18B`` stay apart)."""
    return _SEPARATORS.sub("", str(name)).lower()


def _alias_index(aliases: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    index: dict[str, str] = {}
    for canonical, extra in aliases.items():
        for n in (canonical, *extra):
            k = name_key(n)
            if index.setdefault(k, canonical) != canonical:
                raise AssertionError(f"alias {n!r} names both {index[k]!r} and {canonical!r}")
    return index


_INDEX = {"model": _alias_index(MODEL_ALIASES), "hardware": _alias_index(HARDWARE_ALIASES)}


def resolve(name: object, allowed: Iterable[str], field: str = "model") -> str:
    """The canonical spelling of ``name`` among ``allowed`` (canonical names).

    Matches case-insensitively, ignoring spaces, ``-`` and ``_``, and through :data:`MODEL_ALIASES` /
    :data:`HARDWARE_ALIASES`. Raises :class:`ConfigError` naming ``field`` and the allowed names.
    """
    allowed = tuple(allowed)
    if isinstance(name, str):
        k = name_key(name)
        by_key = {name_key(a): a for a in allowed}
        if k in by_key:
            return by_key[k]
        for index in _INDEX.values():
            if index.get(k) in allowed:
                return index[k]
    from servegym.errors import near_miss

    raise ConfigError(f"{field} = {name!r} is unknown{near_miss(name, allowed)}; allowed: {', '.join(allowed)} "
                      "(case and '-', '_', ' ' are ignored)")


V = TypeVar("V")


class NameTable(Mapping[str, V], Generic[V]):
    """A read-only mapping keyed by canonical names whose lookups accept any spelling :func:`resolve`
    accepts; ``field`` names the input in errors (``model``, ``version``, ...). Missing names raise
    :class:`ConfigError` (a ``KeyError`` would not say what is allowed)."""

    def __init__(self, items: Mapping[str, V], field: str = "model") -> None:
        self._items = dict(items)
        self.field = field

    def resolve(self, name: object) -> str:
        """The canonical key of ``name``; :class:`ConfigError` with the allowed names otherwise."""
        if isinstance(name, str) and name in self._items:
            return name
        return resolve(name, self._items, self.field)

    def __getitem__(self, name: str) -> V:
        return self._items[self.resolve(name)]

    def get(self, name: str, default: V | None = None) -> V | None:  # type: ignore[override]
        return self[name] if name in self else default

    def __contains__(self, name: object) -> bool:
        try:
            self.resolve(name)
        except ConfigError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"NameTable({list(self._items)!r})"


__all__ = ["HARDWARE_ALIASES", "MODEL_ALIASES", "NameTable", "name_key", "resolve"]
