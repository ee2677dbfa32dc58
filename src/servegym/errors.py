"""User-facing error types.

Every bad input (a config field, an action, a trace file, a CLI argument) raises a
subclass of :class:`ServegymError` whose message names the offending field and the
allowed range. They subclass ``ValueError`` so generic callers can still catch them.
The CLI prints them as one line and exits non-zero instead of showing a traceback.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import math
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any


class ServegymError(ValueError):
    """Base class of every error caused by user input rather than by a bug."""


class ConfigError(ServegymError):
    """An invalid configuration value: the message names the field and the allowed range."""


class UnexpectedKeywordError(ConfigError, TypeError):
    """An unknown keyword argument to an env constructor. It is also a ``TypeError`` whose message starts with
    Python's own wording (``Env.__init__() got an unexpected keyword argument 'frameskip'``): RL clients probe
    optional arguments that way and fall back only on that error (SB3's ``make_vec_env`` passes
    ``render_mode``, TorchRL's ``GymEnv`` passes ``frameskip``)."""


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
        if len(problem) > 500:  # an error quotes the file, never all of it
            problem = problem[:500] + f"... ({len(problem):,} characters)"
        super().__init__(f"{where}: {problem}")
        self.path = str(path)
        self.line = line
        self.field = field


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters: how an error quotes a value taken from a user's file
    (escaped by ``repr``, never the whole of a large value)."""
    r = repr(value)
    return r if len(r) <= limit else r[:limit - 3] + "..."


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


def check_keywords(owner: str, keywords: Mapping[str, Any], config_cls: type,
                   named: tuple[str, ...] = ("config", "render_mode")) -> None:
    """Raise :class:`UnexpectedKeywordError` if a keyword argument given to ``owner``'s constructor is neither
    one of its ``named`` parameters nor a field of ``config_cls`` (the envs take config keys as keywords)."""
    fields = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(keywords) - fields)
    if unknown:
        allowed = [*named, *sorted(fields - set(named))]
        also = f" (and {', '.join(repr(k) for k in unknown[1:])})" if len(unknown) > 1 else ""
        # the hint follows Python's own wording, which clients match on (UnexpectedKeywordError)
        raise UnexpectedKeywordError(f"{owner}.__init__() got an unexpected keyword argument {unknown[0]!r}"
                                     f"{near_miss(unknown[0], allowed)}{also}; allowed: {', '.join(allowed)}")


def listing(values: Any) -> str:
    """The one format of an "allowed" list in every error: ``a, b, c`` (strings unquoted)."""
    return ", ".join(str(v) for v in values)


def near_miss(given: Any, choices: Any) -> str:
    """A hint for a near miss: `` (did you mean 'x'?)`` for the closest of ``choices``, a ``name:<arg>``
    choice when ``given`` is its bare name, else the empty string."""
    import difflib

    text = str(given).strip().lower()
    names = [str(c) for c in choices]
    for c in names:  # 'greedy' for 'greedy:<alpha>'
        if ":" in c and c.split(":", 1)[0].lower() == text:
            return f" (did you mean {c!r}, e.g. '{text}:0.5'?)" if c.endswith("<alpha>") else f" (did you mean {c!r}?)"
    close = difflib.get_close_matches(text, [n.lower() for n in names], n=1, cutoff=0.6)
    if not close:
        return ""
    match = next(n for n in names if n.lower() == close[0])
    return f" (did you mean {match!r}?)"


def choice_error(name: str, value: Any, allowed: Any, verb: str = "is unknown") -> ConfigError:
    """The one error for a value outside a fixed set: ``name = 'x' is unknown (did you mean 'y'?); allowed: a, b``
    (the hint only for a near miss, :func:`near_miss`)."""
    allowed = tuple(allowed)
    return ConfigError(f"{name} = {shown(value)} {verb}{near_miss(value, allowed)}; allowed: {listing(allowed)}")


def check_choice(name: str, value: Any, allowed: Any, verb: str = "is unknown") -> None:
    """Raise :func:`choice_error` unless ``value`` is one of ``allowed``."""
    allowed = tuple(allowed)
    try:
        ok = value in allowed
    except TypeError:  # an unhashable value against a set-like ``allowed``
        ok = False
    if not ok:
        raise choice_error(name, value, allowed, verb)


def known_overrides(overrides: Mapping[str, Any] | None, config_cls: type, what: str = "config key") -> dict[str, Any]:
    """A mutable copy of ``overrides`` (None -> empty) after checking every key is a field of the dataclass
    ``config_cls``: the highway-env-style ``config={...}`` dicts of the envs are partial updates of their
    defaults, and a misspelt key must fail loudly rather than be ignored."""
    out = dict(overrides or {})
    names = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(out) - names)
    if unknown:
        hint = near_miss(unknown[0], names) if len(unknown) == 1 else ""
        raise ConfigError(f"unknown {what}(s) {', '.join(map(repr, unknown))}{hint}; allowed: {listing(sorted(names))}")
    return out


# --------------------------------------------------------------------------- field types

#: The default ceiling on the expected number of requests one run generates. The simulators allocate
#: per-request arrays up front (the geo simulator ~150 bytes per request before it starts, measured at 1M
#: requests), so 20M requests is about 3 GB before the first step; a week of NPUAutoscale-v0's Azure trace at Table 4's
#: rate is 16.8M). Each config raises it explicitly
#: with its ``max_expected_requests`` field (the CLIs with ``--max-requests``).
MAX_EXPECTED_REQUESTS = 20_000_000
#: The highest a config's ``max_expected_requests`` may be raised: 10x the default, ~30 GB of the geo
#: simulator's per-request arrays (and more than a week of NPUAutoscale-v0's Azure trace at 10x Table 4's rate).
MAX_REQUEST_CEILING = 200_000_000

# Upper bounds of simulated time shared by the families, s. Each is far beyond what the papers simulate
# (geo: 200-s runs; pd: one day; npu: one day), so real use never meets them, and they keep a mistyped
# exponent from making reset() allocate or loop for hours.
WEEK_S = 7 * 86_400.0
MONTH_S = 31 * 86_400.0


def check_request_count(expected: float, ceiling: int, what: str, override: str = "max_expected_requests") -> None:
    """Raise :class:`ConfigError` unless ``expected`` (the expected number of requests of a run, from the
    fields named in ``what``) is finite and at most ``ceiling``."""
    if not math.isfinite(expected) or expected > ceiling:
        shown = f"{expected:.3g}" if math.isfinite(expected) else str(expected)
        raise ConfigError(f"{what} gives {shown} expected requests; allowed: <= {ceiling:,} "
                          f"(raise the ceiling explicitly with {override})")


def _describe(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(tp))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "None"
    if tp is float:
        return "a finite number"
    if tp is int:
        return "an integer"
    if tp is bool:
        return "true/false"
    if tp is str:
        return "a string"
    if origin in (tuple, list, collections.abc.Sequence):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        inner = f" of {_describe(args[0])}" if len(set(args)) == 1 else ""
        return f"a list{inner}"
    if origin in (dict, collections.abc.Mapping) or tp in (dict, collections.abc.Mapping):
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _conforms(value: Any, tp: Any) -> bool:
    """Whether ``value`` has the annotated type ``tp`` (numbers finite; inner types of tuples/lists checked)."""
    if tp is Any:
        return True
    import numpy as np  # here, not at module level: the CLI's --help imports this module but never numpy

    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, a) for a in typing.get_args(tp))
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, (bool, np.bool_))
    if tp is int:
        return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if tp is float:
        return (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
                and math.isfinite(value))
    if tp is str:
        return isinstance(value, str)
    if origin in (tuple, list, collections.abc.Sequence):
        if not isinstance(value, (tuple, list)):
            return False
        args = typing.get_args(tp)
        if not args:
            return True
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_conforms(v, args[0]) for v in value)
        if origin is tuple:
            return len(value) == len(args) and all(_conforms(v, a) for v, a in zip(value, args, strict=True))
        return all(_conforms(v, args[0]) for v in value)
    if origin in (dict, collections.abc.Mapping) or tp in (dict, collections.abc.Mapping):
        return isinstance(value, collections.abc.Mapping)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True  # an annotation this check does not understand: left to the config's own checks


def _choices_text(spec: Any, nullable: bool) -> str:
    """The "allowed" part for a field of ``FIELD_CHOICES`` (:func:`check_field_types`)."""
    if isinstance(spec, str):
        return f"None or {spec}" if nullable else spec
    values = list(spec() if callable(spec) else spec)
    return listing([None, *values] if nullable else values)


def check_field_types(obj: Any, prefix: str = "") -> None:
    """Raise :class:`ConfigError` naming the first field of the dataclass instance ``obj`` whose value does not
    have its annotated type (a string, None, a list or NaN in a numeric field, ...). Numbers must be finite
    (a field that allows infinity says so in its own checks, not here). Call it first in ``__post_init__``, so
    that range checks never meet a value they cannot compare. Fields added later are covered automatically.

    A string field's annotation says only "a string"; the class names what it takes in a class attribute
    ``FIELD_CHOICES`` (field -> its allowed values, a zero-argument callable giving them, or for a free-form
    string a description of the form), so the error lists the values as the field's own check would."""
    cls = type(obj)
    choices: Mapping[str, Any] = getattr(cls, "FIELD_CHOICES", {})
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an annotation naming a type-checking-only import: check field by field
        hints = {}
        module = sys.modules.get(cls.__module__)
        for f in dataclasses.fields(cls):
            try:
                hints[f.name] = eval(f.type, vars(module)) if isinstance(f.type, str) else f.type
            except Exception:
                continue
    for f in dataclasses.fields(cls):
        if f.name not in hints:
            continue
        value = getattr(obj, f.name)
        if not _conforms(value, hints[f.name]):
            shown = repr(value)
            if len(shown) > 80:
                shown = shown[:77] + "..."
            allowed = (_choices_text(choices[f.name], _conforms(None, hints[f.name])) if f.name in choices
                       else _describe(hints[f.name]))
            raise ConfigError(f"{prefix}{f.name} = {shown} ({type(value).__name__}) is not allowed; "
                              f"allowed: {allowed}")


def resolve_config(config: Any, overrides: Mapping[str, Any], config_cls: type, from_dict: Any = None) -> Any:
    """An env's config from ``gym.make(id, config=..., **overrides)``: ``config`` is None, a dict of
    overrides or a ``config_cls`` instance, updated by the keyword ``overrides`` (the same keys), then built
    by ``from_dict`` (default ``config_cls.from_dict``), which rejects unknown keys by name."""
    build = from_dict or config_cls.from_dict
    if isinstance(config, config_cls):
        if not overrides:
            return config
        base = {f.name: getattr(config, f.name) for f in dataclasses.fields(config_cls)}
    elif config is None or isinstance(config, Mapping):
        base = dict(config or {})
    else:
        raise ConfigError(f"config = {config!r:.80} is not allowed; allowed: None, a dict or a {config_cls.__name__}")
    base.update(overrides)
    return build(base)
