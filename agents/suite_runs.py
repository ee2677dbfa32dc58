"""A suite's stored files: the raw outputs of each env id (``suite_runs/<budget>/<Id>.json``, one section per track),
the journal of a run in progress, where its models are trained and shipped, and the :class:`SuiteResult` that a
run or a rescore returns."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from servegym.agents.suite_entries import RESULTS_DIR, SUITE, SuiteEntry
from servegym.agents.suite_tasks import model_folder

from servegym.outputs import write_text

#: The folder under which each budget's suite trains by default (``runs/suite/<budget>``, relative to the
#: working folder): :func:`default_run_dir`.
SUITE_RUNS = Path("runs") / "suite"


@dataclass
class SuiteResult:
    leaderboard: pd.DataFrame
    records: list[dict[str, Any]]
    files: dict[str, Path] = field(default_factory=dict)
    wall_s: float = 0.0
    #: section key (:attr:`SuiteEntry.section`) -> the run that made its rows: ``wall_s`` (the whole run's wall
    #: time), ``env_ids`` (the sections trained together in it) and ``workers`` (processes; None for Ray or unknown)
    entry_runs: dict[str, dict[str, Any]] = field(default_factory=dict)


def suite_journal(budget: str, out_dir: Path) -> Path:
    """The journal of a suite run in progress: one line per finished task (removed when the run completes)."""
    return _raw_dir(budget, out_dir) / ".partial.jsonl"


def default_run_dir(budget: str) -> Path:
    """Where a suite of ``budget`` trains when ``--run-dir`` is not given: ``runs/suite/<budget>``, one folder
    per budget, so a quick suite never replaces a full or smoke suite's models."""
    return SUITE_RUNS / budget


def trained_models(tasks: Sequence[dict[str, Any]]) -> list[Path]:
    """The model folders of ``tasks``' training seeds that already hold a trained model (``model.zip`` or
    ``run.json``), which training them would replace."""
    from servegym.agents.run_file import RUN_FILE

    folders = [model_folder(t) for t in tasks if t["kind"] == "train"]
    return [d for d in folders if (d / "model.zip").exists() or (d / RUN_FILE).exists()]


def models_dir_for(out_dir: str | Path) -> Path:
    """Where a suite writing ``out_dir`` ships its models: ``benchmarks/models`` for the repo's results
    folder, ``<out_dir>/models`` for any other (:mod:`servegym.agents.replay`)."""
    from servegym.agents.replay import MODELS_DIR

    out = Path(out_dir)
    return MODELS_DIR if out.resolve() == RESULTS_DIR.resolve() else out / "models"


def _raw_dir(budget: str, out_dir: Path) -> Path:
    return out_dir / "suite_runs" / budget


def save_entry_outputs(entry: SuiteEntry, outs: Sequence[dict[str, Any]], budget: str, out_dir: Path,
                       run: dict[str, Any]) -> Path:
    """Store one section's raw outputs in its id's file ``suite_runs/<budget>/<Id>.json``: the entry and every
    task's output (episodes, wall time, validation history). The section without a track is the file's top level
    (as before tracks existed); a stress track's section goes under ``tracks.<track>`` in the same file, so an id
    keeps one file whatever its tracks and the other sections in it are kept as they were. The leaderboard is
    rebuilt from these files, so ``--envs`` runs accumulate, and scores can be recomputed from the stored returns
    without rerunning anything. ``run``: the run's wall time, the sections trained together in it and its
    processes (:attr:`SuiteResult.entry_runs`)."""
    path = _entry_path(entry, budget, out_dir)
    # the section is implied by where it is stored: outputs keep the fields they had before tracks existed
    section = {"entry": entry.__dict__, "suite_wall_s": run["wall_s"], "suite_env_ids": run["env_ids"],
               "suite_workers": run["workers"],
               "outputs": [{k: v for k, v in o.items() if k != "section"} for o in outs]}
    old = json.loads(path.read_text()) if path.is_file() else {}
    tracks = dict(old.get("tracks") or {})
    if entry.track is None:
        data = {**section, **({"tracks": tracks} if tracks else {})}
    else:
        tracks[entry.track] = section
        data = {**{k: v for k, v in old.items() if k != "tracks"}, "tracks": dict(sorted(tracks.items()))}
    write_text(path, json.dumps(data, indent=1, default=_json_default) + "\n")
    return path


def _entry_path(entry: SuiteEntry, budget: str, out_dir: Path) -> Path:
    """``suite_runs/<budget>/<Id>.json``, the stored runs of one env id (all its sections)."""
    return _raw_dir(budget, out_dir) / f"{entry.env_id.split('/')[-1]}.json"


def _stored_section(entry: SuiteEntry, budget: str, out_dir: Path) -> dict[str, Any] | None:
    """The stored run of ``entry``'s section (whatever entry it was made with), or None: the top level of its
    id's file for the section without a track, ``tracks.<track>`` for a stress track."""
    path = _entry_path(entry, budget, out_dir)
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    sec = data if entry.track is None else (data.get("tracks") or {}).get(entry.track)
    return sec if isinstance(sec, dict) and "entry" in sec else None


def _json_default(v: Any) -> Any:
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


def stored_outputs(budget: str, out_dir: Path
                   ) -> tuple[list[SuiteEntry], list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Every section of ``budget`` with stored outputs whose entry is still the suite's (in suite order), its
    outputs tagged with their section key (``section``); a stored section from an entry that has since changed
    (kwargs, budget) is left out, not mixed in, and so is every other track's."""
    entries, outs, runs = [], [], {}
    for e in SUITE[budget]:
        data = _stored_section(e, budget, out_dir)
        if data is None:
            continue
        if SuiteEntry(**{**data["entry"], "baselines": _tuple(data["entry"].get("baselines"))}) != e:
            continue
        entries.append(e)
        outs += [{**o, "section": e.section} for o in data["outputs"]]
        runs[e.section] = {"wall_s": float(data["suite_wall_s"]), "env_ids": data.get("suite_env_ids"),
                          "workers": data.get("suite_workers")}
    return entries, outs, runs


def _tuple(v: Any) -> tuple[str, ...] | None:
    return None if v is None else tuple(v)
