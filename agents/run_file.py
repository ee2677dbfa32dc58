"""Reading a model folder's ``run.json`` as untrusted input.

``servegym train`` writes ``run.json`` beside the model (env id, env kwargs, algorithm, seeds, ...), and
``evaluate``, ``benchmark --model`` and sweeps read it back. A model folder can come from anyone, so the
file is read within a size bound, parsed as JSON only, and checked field by field: every field a loader
uses has its type (and range) checked, the env id against the registry (no ``module:`` prefix is ever
imported, :mod:`servegym.env_ids`), and no string in its env kwargs may name a file the user did not name
(:mod:`servegym.file_refs`). Every failure is one line naming the file and the field, never quoting the
field's value: a file that fails these checks is not known to be servegym's (a link or a planted file may
hold anyone's text), so nothing of it is shown. A ``run.json`` that is a symbolic link to a file outside
its folder is refused unread. Fields not listed in :data:`FIELDS` are dropped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from servegym.errors import ConfigError

RUN_FILE = "run.json"
#: Largest run.json read (a quick run's is ~20 kB: its evaluation history and baseline rows).
MAX_RUN_BYTES = 16 * 2**20
MAX_SEED = 2**32 - 1
MAX_EVAL_SEEDS = 10_000


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _opt(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _str(v: Any) -> bool:
    return isinstance(v, str) and len(v) <= 4096


def _count(v: Any) -> bool:
    return _int(v) and 0 <= v <= 10**12


def _seeds(v: Any) -> bool:
    return (isinstance(v, list) and len(v) <= MAX_EVAL_SEEDS
            and all(_int(s) and 0 <= s <= MAX_SEED for s in v))


def _str_list(v: Any) -> bool:
    return isinstance(v, list) and all(_str(s) for s in v)


def _str_map(v: Any) -> bool:
    return isinstance(v, dict) and all(_str(k) and _str(s) for k, s in v.items())


def _hyperparams(v: Any) -> bool:
    return (isinstance(v, dict) and (v.get("policy") is None or _str(v["policy"]))
            and (v.get("normalize") is None or isinstance(v["normalize"], dict)))


#: field -> (check, allowed, as said in the error). Everything a loader reads is here.
FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "env_id": (_str, "a registered env id"),
    "algo": (_str, "an algorithm name"),
    "env_kwargs": (lambda v: isinstance(v, dict), "an object of gym.make keyword arguments"),
    "timesteps": (_opt(_count), "null or an integer >= 0"),
    "timesteps_trained": (_opt(_count), "null or an integer >= 0"),
    "n_envs": (_opt(lambda v: _int(v) and 1 <= v <= 256), "null or an integer in [1, 256]"),
    "seed": (_opt(lambda v: _int(v) and 0 <= v <= MAX_SEED), f"null or an integer in [0, {MAX_SEED}]"),
    "eval_seeds": (_seeds, f"a list of at most {MAX_EVAL_SEEDS} integers in [0, {MAX_SEED}]"),
    "eval_split": (_opt(_str), "null or a split name"),
    "baselines": (_str_list, "a list of baseline names"),
    "references": (_opt(_str_map), "null or an object of reference names"),
    "hyperparams_source": (_opt(_str), "null or a string"),
    "hyperparams": (_hyperparams, "an object whose policy is null or a string and normalize null or an object"),
    "model": (_opt(_str), "null or a file name"),
    "tensorboard": (_opt(_str), "null or a folder name"),
    "eval_history": (lambda v: isinstance(v, list) and all(isinstance(r, dict) for r in v), "a list of objects"),
    "baseline_eval": (lambda v: isinstance(v, dict) and all(isinstance(r, list) for r in v.values()),
                      "an object of lists"),
}



def find_run_file(model_path: Path) -> Path | None:
    """The ``run.json`` of a saved model: in its folder, or the parent for checkpoints."""
    from servegym.bounded_io import refuse_link_out

    for d in (model_path.parent, model_path.parent.parent):
        f = d / RUN_FILE
        refuse_link_out(f, d, "the run.json servegym train writes")
        if f.is_file():
            return f
    return None


def parse_run_file(path: Path, user_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The checked fields of ``path`` (see the module docstring); ``user_kwargs`` are the env kwargs the
    user gave on the command line (a file path named there may also appear in the run's env kwargs)."""
    from servegym.bounded_io import read_user_text

    where = str(path)
    text = read_user_text(path, MAX_RUN_BYTES, "the JSON object servegym train writes")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{where}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
                          "allowed: the JSON object servegym train writes") from None
    except RecursionError:
        raise ConfigError(f"{where}: JSON nested too deeply; allowed: the JSON object servegym train writes") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: a JSON {type(doc).__name__}, not an object; allowed: the JSON object "
                          "servegym train writes")
    out: dict[str, Any] = {}
    for name, (check, allowed) in FIELDS.items():
        if name not in doc:
            continue
        v = doc[name]
        if not check(v):
            raise ConfigError(f"{where}: {name} ({type(v).__name__}) is not allowed; allowed: {allowed}")
        out[name] = v
    if "env_id" in out:
        from servegym.env_ids import check_env_id

        out["env_id"] = check_env_id(out["env_id"], f"{where}: env_id", quote=False)
    if "algo" in out:
        from servegym.agents.algos import ALGOS

        if out["algo"] not in ALGOS:
            raise ConfigError(f"{where}: algo is unknown; allowed: {', '.join(ALGOS)}")
    if "env_kwargs" in out:
        from servegym.file_refs import check_file_refs

        check_file_refs(out["env_kwargs"], f"{where}: env_kwargs", "a model folder's run.json",
                        user_values=user_kwargs, quote=False)
    return out


def read_run(model_path: Path, user_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The checked ``run.json`` of a saved model (:func:`parse_run_file`), None when there is none."""
    f = find_run_file(model_path)
    return None if f is None else parse_run_file(f, user_kwargs)
