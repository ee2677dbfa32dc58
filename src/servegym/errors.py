"""User-facing error types.

Every bad input (a config field, an action, a trace file, a CLI argument) raises a
subclass of :class:`ServegymError` whose message names the offending field and the
allowed range. They subclass ``ValueError`` so generic callers can still catch them.
The CLI prints them as one line and exits non-zero instead of showing a traceback.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


class ServegymError(ValueError):
    """Base class of every error caused by user input rather than by a bug."""


class ConfigError(ServegymError):
    """An invalid configuration value: the message names the field and the allowed range."""


class ActionError(ServegymError):
    """An action outside the environment's action space or not allowed in this state."""


class TraceFormatError(ServegymError):
    """A malformed trace file: the message names the file, the line and the field."""

    def __init__(self, path: str, line: int | None, field: str | None, problem: str) -> None:
        where = str(path)
        if line is not None:
            where += f", line {line}"
        if field is not None:
            where += f", field {field!r}"
        super().__init__(f"{where}: {problem}")
        self.path = str(path)
        self.line = line
        self.field = field


def check_range(name: str, value: float, low: float | None = None, high: float | None = None,
                *, low_inclusive: bool = True, high_inclusive: bool = True) -> None:
    """Raise :class:`ConfigError` unless ``low <= value <= high`` (bounds optional, inclusivity per side)."""
    bad = value != value  # NaN never passes
    if low is not None:
        bad |= value < low if low_inclusive else value <= low
    if high is not None:
        bad |= value > high if high_inclusive else value >= high
    if bad:
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        lb = "[" if low_inclusive and low is not None else "("
        hb = "]" if high_inclusive and high is not None else ")"
        raise ConfigError(f"{name} = {value!r} is out of range; allowed: {lb}{lo}, {hi}{hb}")


def known_overrides(overrides: Mapping[str, Any] | None, config_cls: type, what: str = "config key") -> dict[str, Any]:
    """A mutable copy of ``overrides`` (None -> empty) after checking every key is a field of the dataclass
    ``config_cls``: the highway-env-style ``config={...}`` dicts of the envs are partial updates of their
    defaults, and a misspelt key must fail loudly rather than be ignored."""
    out = dict(overrides or {})
    names = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(out) - names)
    if unknown:
        raise ConfigError(f"unknown {what}(s) {unknown}; allowed: {sorted(names)}")
    return out
