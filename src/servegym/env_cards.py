"""Env cards: one markdown page section per registered id, generated from the code so that it cannot drift.

A card is what a user needs to drive an id without reading its source: the spaces of the default config, the
observation layout (every entry's name, which carries its scaling), what an action does, the reward and the
return-KPI identity, the ``info`` keys, when an episode ends, every config field with its default and the values
its own validation allows, and the benchmark splits. Each part is read from the code: the spaces and names from
an env ``gym.make`` builds, the ``info`` keys from a seeded reset, one masked step and the last step of a short
episode, the prose from the sections of the env modules' docstrings (the same text ``help()`` shows), and a
field's allowed values from the error its config class raises for a value outside them (so the card states
exactly what validation enforces).

``python -m servegym.env_cards [--out docs/cards] [--check]`` writes (or checks) ``<Name>.md`` per id; the docs'
family pages include them, and ``tests/test_env_cards.py`` fails when a committed card and the env disagree.
The output is deterministic: fixed seeds, registry order, no timings, dates or memory addresses.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import re
import sys
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: Where the cards go, relative to the repository root (the docs' family pages include them from there).
DEFAULT_OUT = Path("docs") / "cards"


@dataclass(frozen=True)
class Section:
    """A docstring section: the paragraph of ``module``'s docstring whose text starts with ``start`` (a regular
    expression), up to the next paragraph that starts a section (a bold heading or one of ``stops``)."""

    module: str
    start: str
    stops: tuple[str, ...] = ()
    optional: bool = False  # one id of the family has it, another not (geo's residual window action)


#: Paragraph starts of geo's shared docstring (it has no bold headings).
_GEO_STOPS = (r"Configuration \(", r"Reward \(", r"Splits \(", r"Bound \(", r"Episodes end", r"Both environments")
_GEO_COMMON = "servegym.envs.geo.env_common"
_PD = "servegym.envs.pd.env"
_NPU = "servegym.envs.npu.env"

#: Per family, the docstring sections each card quotes (key -> sections in order). Modules named by id's class
#: (``{env}``) resolve to the id's own entry-point module.
FAMILY_SECTIONS: dict[str, dict[str, tuple[Section, ...]]] = {
    "geo": {
        "summary": (Section("{env}", r"``servegym/"),),
        "action": (Section("{env}", r"\*\*Action\*\*"), Section("{env}", r"\*\*Residual action\*\*", optional=True)),
        "observation": (Section("{env}", r"\*\*Observation\*\*"),),
        "reward": (Section(_GEO_COMMON, r"Reward \(", _GEO_STOPS), Section(_GEO_COMMON, r"Bound \(", _GEO_STOPS)),
        "info": (Section("{env}", r"\*\*Info\*\*"),),
        "end": (Section(_GEO_COMMON, r"Episodes end", _GEO_STOPS),),
        "splits": (Section(_GEO_COMMON, r"Splits \(", _GEO_STOPS),),
    },
    "pd": {
        "summary": (Section(_PD, r"``servegym/"),),
        "action": (Section(_PD, r"\*\*Action modes\*\*"), Section(_PD, r"\*\*Absolute action\*\*")),
        "observation": (Section(_PD, r"\*\*Observation\*\*"),),
        "reward": (Section(_PD, r"\*\*Reward\*\*"),),
        "info": (Section(_PD, r"\*\*Info\*\*"),),
        "end": (Section(_PD, r"One step is one", (r"\*\*",)),),
        "splits": (Section(_PD, r"\*\*Splits\*\*"),),
    },
    "npu": {
        "summary": (Section(_NPU, r"``servegym/"),),
        "action": (Section(_NPU, r"\*\*Action modes\*\*"), Section(_NPU, r"\*\*Absolute action\*\*"),
                   Section(_NPU, r"\*\*Residual action\*\*"), Section(_NPU, r"\*\*Masks\*\*")),
        "observation": (Section(_NPU, r"\*\*Observation\*\*"),),
        "reward": (Section(_NPU, r"\*\*Reward\*\*"), Section(_NPU, r"\*\*Bounds\.\*\*")),
        "info": (Section(_NPU, r"\*\*Info\*\*", (r"Configuration:",)),),
        "end": (Section(_NPU, r"One step is one", (r"\*\*",)),),
        "splits": (Section(_NPU, r"\*\*Splits\*\*"),),
    },
}


#: Per family, the config of the short episode a card runs to its end for the keys ``info`` has only there
#: (geo's ``episode_metrics``): the default config but a few seconds, steps or epochs long.
END_PROBE: dict[str, dict[str, Any]] = {
    "geo": {"preset": "mini", "geo": {"duration_s": 2.0}},
    "pd": {"scenario": {"horizon_steps": 24}},
    "npu": {"hours": 0.5},
}


def family_of(env_id: str) -> str:
    """``geo``, ``pd`` or ``npu`` from an id's name."""
    name = env_id.split("/")[-1].lower()
    return next(f for f in ("geo", "pd", "npu") if name.startswith(f))


# ------------------------------------------------------------------------------------------------ docstrings
_ROLE = re.compile(r":(?:class|mod|meth|func|data|attr|obj|exc):`~?([^`]+)`")


def rst_to_md(text: str) -> str:
    """Docstring markup as Markdown: ``code`` -> `code`, :role:`~a.b.C` -> `C` (`a.b.C` without the tilde)."""
    text = _ROLE.sub(lambda m: f"`{m.group(0).split('`')[1].lstrip('~').split('.')[-1]}`"
                     if "~" in m.group(0) else f"`{m.group(1)}`", text)
    text = text.replace("``", "`")
    # a list right after a paragraph line needs a blank line in Python-Markdown
    return re.sub(r"(?m)^([^\n*\-\s][^\n]*)\n([*-] )", r"\1\n\n\2", text)


def _paragraphs(module: str) -> list[str]:
    doc = inspect.cleandoc(importlib.import_module(module).__doc__ or "")
    return [p for p in re.split(r"\n\s*\n", doc) if p.strip()]


def section_text(sec: Section, env_module: str) -> str:
    """The section's paragraphs, verbatim (Markdown-converted); a missing section is an error, so a docstring
    edit that drops one fails the card test instead of emptying the card."""
    module = env_module if sec.module == "{env}" else sec.module
    paras = _paragraphs(module)
    starts = [i for i, p in enumerate(paras) if re.match(sec.start, p.lstrip())]
    if not starts and sec.optional:
        return ""
    if not starts:
        raise LookupError(f"{module}'s docstring has no paragraph starting with {sec.start!r}")
    i = starts[0]
    out = [paras[i]]
    stops = (r"\*\*", *sec.stops)
    for p in paras[i + 1:]:
        if any(re.match(s, p.lstrip()) for s in stops) and not p.startswith(" "):
            break
        out.append(p)
    return rst_to_md("\n\n".join(out))


# ------------------------------------------------------------------------------------------------ config fields
def _field_comments(cls: type) -> dict[str, str]:
    """Each field's trailing ``# comment`` in the class source, else its entry in an ``Args:`` docstring list."""
    out: dict[str, str] = {}
    try:
        src = inspect.getsource(cls)
    except (OSError, TypeError):
        return out
    for m in re.finditer(r"(?m)^    (\w+): [^=\n]+=[^#\n]*#\s*(.+)$", src):
        out[m.group(1)] = m.group(2).strip()
    doc = inspect.cleandoc(cls.__doc__ or "")
    for m in re.finditer(r"(?m)^    (\w+): (.+(?:\n        .+)*)", doc):
        out.setdefault(m.group(1), " ".join(line.strip() for line in m.group(2).splitlines()))
    return out


def _shown_default(f: dataclasses.Field[Any]) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "(required)"
    if dataclasses.is_dataclass(value):
        return f"{type(value).__name__}(...)"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _allowed_from_error(make: Callable[[dict[str, Any]], Any], base: dict[str, Any], name: str,
                        probes: Sequence[Any]) -> str | None:
    """The ``allowed:`` part of the first error the config class raises for a probe value (None: all accepted)."""
    from servegym.errors import ConfigError

    found = None
    for value in probes:
        try:
            make({**base, name: value})
        except ConfigError as exc:
            msg = str(exc)
            part = msg.split("allowed: ", 1)[1] if "allowed: " in msg else msg
            if "out of range" in msg or found is None:
                found = part
            if "out of range" in msg:
                break
        except Exception:  # an error that is not a validation message says nothing about the range
            continue
    return found


def config_rows(cls: type, base: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(field, type, default, allowed, what it does) per config field, in declaration order. Allowed values are
    what validation enforces, read from the error a value outside them raises: an object of no accepted type
    (the type or the choices) and numbers far outside any range (the range)."""
    comments = _field_comments(cls)
    hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    rows = []
    def make(kw: dict[str, Any]) -> Any:
        return cls(**kw)
    try:
        make(base)
    except Exception:
        base = {k: v for k, v in base.items() if k != "split"}
    for f in dataclasses.fields(cls):
        hint = hints.get(f.name, f.type)
        tname = re.sub(r"\b(typing|collections\.abc)\.", "", getattr(hint, "__name__", None) or str(hint))
        if getattr(hint, "__args__", None) or "|" in tname:
            tname = str(hint).replace("typing.", "").replace("collections.abc.", "")
        kw = {k: v for k, v in base.items() if k != f.name}
        probes: list[Any] = [object()]
        numeric = any(t in tname for t in ("int", "float")) and "tuple" not in tname and "Mapping" not in tname
        if numeric:
            probes = [-10**15, 10**15, -1e30, 1e30, object()]
        allowed = _allowed_from_error(make, kw, f.name, probes) or "any value of the type"
        if tname == "bool":
            allowed = "True, False"
        rows.append((f.name, tname, _shown_default(f), allowed, comments.get(f.name, "")))
    return rows


# ------------------------------------------------------------------------------------------------ the env itself
def observation_names(env: Any) -> list[str]:
    """The names of the observation's entries, in order, as the env defines them."""
    u = env.unwrapped
    names = getattr(u, "observation_names", None) or getattr(u, "obs_fields", None)
    if names is None:
        from servegym.envs.pd.observations import OBS_FIELDS

        names = OBS_FIELDS
    return list(names() if callable(names) else names)


#: Modules whose observation-name constants carry a ``# comment`` per name (its meaning and scaling).
OBS_NAME_SOURCES = ("servegym.envs.geo.observations", "servegym.envs.geo.env_route", "servegym.envs.geo.env_window",
                    "servegym.envs.pd.observations", "servegym.envs.npu.observations")
_NAMED_LINE = re.compile(r'^\s*((?:"[^"]+",\s*)+)#\s*(.+)$')


_TEMPLATE_LINE = re.compile(r'^\s*\*\[f"([^"]+)" for .*#\s*(.+)$')


def observation_comments() -> dict[str, str]:
    """Name -> the comment on its line in :data:`OBS_NAME_SOURCES` (a line of several names shares its comment;
    an f-string template such as ``alive_{v}/max_level`` is stored as a regular expression over the names)."""
    out: dict[str, str] = {}
    for module in OBS_NAME_SOURCES:
        for line in inspect.getsource(importlib.import_module(module)).splitlines():
            if m := _NAMED_LINE.match(line):
                for name in re.findall(r'"([^"]+)"', m.group(1)):
                    out.setdefault(name, m.group(2).strip())
            elif m := _TEMPLATE_LINE.match(line):
                parts = re.split(r"\{[^}]*\}", m.group(1))
                out.setdefault("re:" + "[^/]+".join(map(re.escape, parts)), m.group(2).strip())
    return out


def comment_for(name: str, notes: dict[str, str]) -> str:
    """The comment of an observation name (``<group>.`` and ``[i]`` stripped), exact or by template."""
    base = re.sub(r"^<group>\.|\[i\]$", "", name)
    if base in notes:
        return notes[base]
    return next((v for k, v in notes.items() if k.startswith("re:") and re.fullmatch(k[3:], base)), "")


def layout_rows(names: Sequence[str]) -> list[tuple[str, str, int]]:
    """Consecutive entries of one feature merged: (index range, name pattern, count). Per-DC ``x[3]`` becomes
    ``x[d]``; npu's per-group ``prefill[640].x`` becomes ``<group>.x`` (groups are listed in ``env.groups``)."""
    def pattern(n: str) -> str:
        n = re.sub(r"^(prefill|decode)\[\d+\]", "<group>", n)
        return re.sub(r"\[\d+\]", "[i]", n)
    rows: list[tuple[str, str, int]] = []
    start = 0
    for i in range(1, len(names) + 1):
        if i == len(names) or pattern(names[i]) != pattern(names[start]):
            p = pattern(names[start]) if i - start > 1 else names[start]
            rows.append((str(start) if i - start == 1 else f"{start}-{i - 1}", p, i - start))
            start = i
    return rows


def _value_kind(v: Any) -> str:
    if isinstance(v, bool | np.bool_):
        return "bool"
    if isinstance(v, int | np.integer):
        return "int"
    if isinstance(v, float | np.floating):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, np.ndarray):
        return f"array {v.dtype} ({len(v)},)" if v.ndim == 1 else f"array {v.dtype} {v.shape}"
    if isinstance(v, dict):
        keys = ", ".join(sorted(map(str, v)))
        return f"dict ({keys})" if len(keys) <= 160 else f"dict ({len(v)} keys)"
    if v is None:
        return "None"
    return type(v).__name__


def info_rows(env: Any) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(key, kind) of ``info`` after ``reset(seed=0)`` and after one allowed step (seeded)."""
    from servegym.masks import sample_masked_action

    _, info0 = env.reset(seed=0)
    env.action_space.seed(0)
    _, _, _, _, info1 = env.step(sample_masked_action(env))
    return ([(k, _value_kind(info0[k])) for k in sorted(info0)], [(k, _value_kind(info1[k])) for k in sorted(info1)])


def end_info(env_id: str) -> dict[str, Any]:
    """``info`` of the step that ends a short episode of ``env_id`` (its family's :data:`END_PROBE` config,
    ``reset(seed=0)``, allowed actions seeded with 0)."""
    import gymnasium as gym

    from servegym.masks import sample_masked_action

    env = gym.make(env_id, config=END_PROBE[family_of(env_id)])
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        while True:
            _, _, terminated, truncated, info = env.step(sample_masked_action(env))
            if terminated or truncated:
                return dict(info)
    finally:
        env.close()


def info_key_names(text: str) -> set[str]:
    """The ``info`` keys a card's prose names: its code spans that are plain lowercase identifiers (a pattern
    such as `base_*` or a formula is not a key)."""
    return set(re.findall(r"`([a-z][a-z0-9_]*)`", text))


# ------------------------------------------------------------------------------------------------ rendering
def _cell(text: str) -> str:
    """A table cell: pipes escaped, one line, and ``<``/``>`` outside code spans as entities (``<alpha>`` is no
    HTML tag)."""
    parts = text.replace("|", "\\|").replace("\n", " ").split("`")
    return "`".join(p.replace("<", "&lt;").replace(">", "&gt;") if i % 2 == 0 else p for i, p in enumerate(parts))


def _table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *["| " + " | ".join(_cell(str(c)) for c in r) + " |" for r in rows]]


def card(env_id: str) -> str:
    """The markdown card of ``env_id`` (a registered servegym id)."""
    import gymnasium as gym

    import servegym
    from servegym.registration import ENV_SPECS
    from servegym.splits import splits_of

    spec = next(s for s in ENV_SPECS if s.id == env_id)
    family = family_of(env_id)
    env = gym.make(env_id)
    try:
        u = env.unwrapped
        module = type(u).__module__
        secs = FAMILY_SECTIONS[family]

        def quote(key: str) -> list[str]:
            return [t for t in (section_text(s, module) for s in secs.get(key, ())) if t]

        name = env_id.split("/")[-1]
        kw = f", registered with `{spec.kwargs}`" if spec.kwargs else ""
        masks = hasattr(u, "action_masks")
        given = hasattr(u, "action_masks_given")
        lines = [f"## `{env_id}` {{#{name.lower()}}}", "",
                 "*Generated by `python -m servegym.env_cards` from the code: do not edit by hand.*", "",
                 f"Class `{spec.entry_point}`{kw}. `gym.make` adds `TimeLimit(max_episode_steps="
                 f"{spec.max_episode_steps})`.", "", *quote("summary")[:1], "",
                 "### Spaces (default config)", "",
                 f"- observation: `{env.observation_space}`",
                 f"- action: `{env.action_space}`",
                 f"- `action_masks()`: {'yes' if masks else 'no (continuous action)'}"
                 + ("; `action_masks_given(chosen)` (exact joint mask, used by `servegym.sample_masked_action`)"
                    if given else ""), "",
                 "### Action", "", *[t + "\n" for t in quote("action")]]
        action_type = getattr(u, "action_type", None)
        if action_type is not None and type(action_type).__doc__:
            first = inspect.cleandoc(type(action_type).__doc__).split("\n\n")[0]
            lines += [f"This id's action class, `{type(action_type).__name__}`: {rst_to_md(first)}", ""]
        names = observation_names(env)
        notes = observation_comments()
        lines += ["### Observation", "", *[t + "\n" for t in quote("observation")],
                  f"Layout of the default config ({len(names)} entries; a name states the entry's scaling):", "",
                  *_table(("index", "name", "size", "meaning (from the code's comments)"),
                          [(i, f"`{n}`", k, rst_to_md(comment_for(n, notes)))
                           for i, n, k in layout_rows(names)]), ""]
        lines += ["### Reward and the return-KPI identity", "", *[t + "\n" for t in quote("reward")]]
        reset_keys, step_keys = info_rows(env)
        last = end_info(env_id)
        end_keys = [(k, _value_kind(last[k])) for k in sorted(last)]
        probe = ", ".join(f"{k}={v!r}" for k, v in END_PROBE[family].items())
        keys = set(dict(reset_keys)) | set(dict(step_keys)) | set(last)
        lines += ["### `info`", "", *[t + "\n" for t in quote("info")],
                  f"Keys after `reset(seed=0)` ({len(reset_keys)}), after one allowed step ({len(step_keys)}) and "
                  f"at the step that ends a short episode ({len(end_keys)}; config `{probe}`), with the kind of "
                  "value:", "",
                  *_table(("key", "after reset", "after a step", "at the episode end"),
                          [(f"`{k}`", dict(reset_keys).get(k, "-"), dict(step_keys).get(k, "-"),
                            dict(end_keys).get(k, "-")) for k in sorted(keys)]), ""]
        lines += ["### Episode end", "", *[t + "\n" for t in quote("end")],
                  f"The registered `TimeLimit` is {spec.max_episode_steps:,} steps; it never cuts an episode of "
                  "the default config.", ""]
        cfg_cls = type(u.config)
        base = {k: v for k, v in spec.kwargs.items() if k in {f.name for f in dataclasses.fields(cfg_cls)}}
        lines += ["### Config", "",
                  f"`gym.make(\"{env_id}\", config={{...}}, **keys)` sets fields of `{cfg_cls.__name__}`; "
                  "*allowed* is what its validation accepts (from the error a value outside it raises).", "",
                  *_table(("field", "type", "default", "allowed", "what it does"),
                          [(f"`{r[0]}`", f"`{r[1]}`", f"`{r[2]}`", r[3], rst_to_md(r[4])) for r in config_rows(cfg_cls, base)]),
                  ""]
        lines += ["### Splits", "", f"Named splits: {', '.join(f'`{s}`' for s in splits_of(family))}.", "",
                  *[t + "\n" for t in quote("splits")]]
        del servegym
    finally:
        env.close()
    text = "\n".join(lines)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"


def card_path(out: Path, env_id: str) -> Path:
    return out / f"{env_id.split('/')[-1]}.md"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m servegym.env_cards", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"folder of the cards (default {DEFAULT_OUT})")
    ap.add_argument("--check", action="store_true", help="compare with the files in --out; write nothing")
    ap.add_argument("ids", nargs="*", help="env ids (default: every registered servegym id)")
    args = ap.parse_args(argv)
    from servegym.env_ids import servegym_ids

    stale = []
    for env_id in args.ids or servegym_ids():
        text, path = card(env_id), card_path(args.out, env_id)
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print(f"out of date: {', '.join(stale)}; run python -m servegym.env_cards", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
