"""``servegym benchmark --suite``: run the suite (:func:`run_suite`, resumable from its journal), rebuild the
leaderboard from the stored runs alone (``--rescore``: :func:`rebuild_leaderboard`) and play the baselines they
lack (``--fill-baselines``: :func:`fill_missing_baselines`). What a run does: :mod:`servegym.agents.benchmark`."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servegym.agents import time_to_strongest as tts
from servegym.agents.leaderboard_files import write_leaderboard
from servegym.agents.leaderboard_scores import leaderboard
from servegym.agents.rollout import seeds_from
from servegym.agents.suite_entries import BUDGETS, RESULTS_DIR, SUITE, TEST_SEED, section_of, select_entries
from servegym.agents.suite_runs import (
    SuiteResult,
    _json_default,
    _raw_dir,
    _stored_section,
    default_run_dir,
    models_dir_for,
    save_entry_outputs,
    stored_outputs,
    suite_journal,
    trained_models,
)
from servegym.agents.suite_tasks import (
    suite_header,
    suite_journal_check,
    suite_policies,
    suite_progress,
    suite_task,
    suite_tasks,
    task_key,
)

from servegym.errors import ConfigError


def run_suite(budget: str = "quick", out_dir: str | Path = RESULTS_DIR, run_dir: str | Path | None = None,
              workers: int | None = None, ray_address: str | bool | None = False, progress: bool = True,
              env_ids: Sequence[str] | None = None, tb: bool = True, force: bool = False) -> SuiteResult:
    """Train, select and test every env id of ``budget`` and write the leaderboard (the docstring of
    :mod:`servegym.agents.benchmark`).

    Nothing is lost or silently replaced: the budget's stored runs are locked for the run
    (``suite_runs/<budget>.lock``) and so is the folder the models are trained in (``<run_dir>.lock``;
    ``run_dir`` defaults to :func:`default_run_dir`), so a second suite on either fails at once; an id whose
    stored run exists, or whose models are already in ``run_dir``, is refused unless ``force``; every
    finished task goes to ``suite_runs/<budget>/.partial.jsonl`` at once, and the same command run again
    after an interruption (SIGINT, SIGTERM, a crash, a lost Ray node) resumes from it automatically,
    running only the tasks it lacks and replacing only its own unfinished models (``force`` discards it).
    Tasks are deterministic, so a resumed run's results equal an uninterrupted one's."""
    from servegym.agents.sweep import run_local, run_ray

    from servegym.outputs import Journal, OutputLock

    if budget not in SUITE:
        raise ConfigError(f"--budget = {budget!r}; allowed: {', '.join(BUDGETS)}")
    entries = select_entries(budget, env_ids)
    out = Path(out_dir)
    run_dir = Path(run_dir) if run_dir is not None else default_run_dir(budget)
    t0 = time.perf_counter()
    tasks = suite_tasks(entries, run_dir, tb, ship_dir=models_dir_for(out), budget=budget)
    with OutputLock(_raw_dir(budget, out), "--out-dir"), OutputLock(run_dir, "--run-dir"):
        stored = [e.section for e in entries if _stored_section(e, budget, out) is not None]
        if stored and not force:
            raise ConfigError(f"--out-dir = {str(out)!r} already holds stored suite runs of {', '.join(stored)} "
                              f"({_raw_dir(budget, out)}); pass --force to replace them, or --rescore to rebuild "
                              "the leaderboard from them")
        journal = Journal(suite_journal(budget, out))
        header = suite_header(tasks)
        done: dict[str, Any] = {}
        resuming = journal.path.exists() and not force
        if resuming:
            found = journal.read(header, check=suite_journal_check(tasks))
            if found is None:
                raise ConfigError(f"--out-dir: {journal.path} is the journal of an interrupted suite run with other "
                                  "tasks (budget, --envs or --run-dir differ); run that command again to finish "
                                  "it, or pass --force to discard it")
            done = found  # every key is one of these tasks (suite_journal_check)
            if progress and done:
                print(f"resuming: {len(done)} of {len(tasks)} tasks from the interrupted run ({journal.path})")
        todo = [t for t in tasks if task_key(t) not in done]
        # models in run_dir are this suite's own only when it resumes its journal (whose tasks name run_dir)
        replaced = [] if resuming or force else trained_models(todo)
        if replaced:
            names = ", ".join(d.name for d in replaced[:3]) + (f" and {len(replaced) - 3} more" if len(replaced) > 3 else "")
            raise ConfigError(f"--run-dir = {str(run_dir)!r} already holds trained models ({names}) that this suite "
                              "would replace; pass --force to replace them, or choose another --run-dir")
        journal.open(header, keep=done)
        by_key = dict(done)
        try:
            def on_result(task: dict[str, Any], output: dict[str, Any]) -> None:
                journal.add(task_key(task), output)
                by_key[task_key(task)] = output

            what, est = suite_progress(budget, entries, todo, workers)
            if todo and ray_address is not False:
                run_ray(todo, address=ray_address or None, workers=workers, progress=progress, fn=suite_task,
                        tidy=False, on_result=on_result, desc=f"benchmark suite ({budget})", what=what, estimate=est)
            elif todo:
                run_local(todo, workers=workers, progress=progress, fn=suite_task, tidy=False, on_result=on_result,
                          desc=f"benchmark suite ({budget})", what=what, estimate=est)
        finally:
            journal.close()
        # task order, whatever order they finished in; journalled outputs went through JSON, so fresh ones do too
        outs = [json.loads(json.dumps(by_key[task_key(t)], default=_json_default)) for t in tasks]
        run = {"wall_s": time.perf_counter() - t0, "env_ids": [e.section for e in entries],
               "workers": None if ray_address is not False else (workers or os.cpu_count() or 1),
               "resumed_tasks": len(done)}
        for e in entries:  # the raw episodes of each section, so later runs of others add to one leaderboard
            save_entry_outputs(e, [o for o in outs if section_of(o) == e.section], budget, out, run)
        journal.close(remove=True)
        wall_s = float(run["wall_s"])
        return _rebuild(budget, out, wall_s)


def rebuild_leaderboard(budget: str, out_dir: str | Path = RESULTS_DIR, wall_s: float = 0.0) -> SuiteResult:
    """The leaderboard of ``budget`` from its stored raw outputs alone (no training, no episodes played):
    ``servegym benchmark --suite --rescore``, after a run of some ids or a change of the scoring code.
    Holds the budget's lock (a suite run writing it makes this fail at once)."""
    from servegym.outputs import OutputLock

    if budget not in SUITE:
        raise ConfigError(f"--budget = {budget!r}; allowed: {', '.join(BUDGETS)}")
    with OutputLock(_raw_dir(budget, Path(out_dir)), "--out-dir"):
        return _rebuild(budget, out_dir, wall_s)


def _rebuild(budget: str, out_dir: str | Path, wall_s: float) -> SuiteResult:
    if budget not in SUITE:
        raise ConfigError(f"--budget = {budget!r}; allowed: {', '.join(BUDGETS)}")
    entries, outs, runs = stored_outputs(budget, Path(out_dir))
    if not entries:
        raise ConfigError(f"--rescore: no stored runs of budget {budget!r} in {_raw_dir(budget, Path(out_dir))}; "
                          f"run `servegym benchmark --suite --budget {budget}` first")
    board, records = leaderboard(entries, outs, tts.stored_references(Path(out_dir) / tts.RESULT_FILE, entries))
    res = SuiteResult(leaderboard=board, records=records, wall_s=wall_s, entry_runs=runs)
    res.files = write_leaderboard(res, entries, outs, budget, Path(out_dir))
    return res


def fill_missing_baselines(budget: str, out_dir: str | Path = RESULTS_DIR, env_ids: Sequence[str] | None = None,
                           workers: int | None = 1, progress: bool = False) -> dict[str, list[str]]:
    """Play, on the stored test seeds, every leaderboard policy (:func:`suite_policies`: e.g. a yardstick
    added since the run) that the stored runs of ``budget`` lack, and add its episodes to the stored
    file: no training, the agents' stored episodes untouched. ``servegym benchmark --suite --rescore
    --fill-baselines``. Returns section key -> the policies added."""
    from servegym.agents.sweep import run_local

    from servegym.outputs import OutputLock

    if budget not in SUITE:
        raise ConfigError(f"--budget = {budget!r}; allowed: {', '.join(BUDGETS)}")
    added: dict[str, list[str]] = {}
    with OutputLock(_raw_dir(budget, Path(out_dir)), "--out-dir"):
        entries, outs, runs = stored_outputs(budget, Path(out_dir))
        for e in entries:
            if env_ids is not None and e.section not in env_ids:
                continue
            mine = [o for o in outs if section_of(o) == e.section]
            have = {r["policy"] for o in mine for r in o["rows"]}
            missing = [p for p in suite_policies(e) if p not in have]
            if not missing:
                continue
            tasks = [{"kind": "baseline", "env_id": e.env_id, "section": e.section, "env_kwargs": e.env_kwargs,
                      "policy": p, "seed": s} for p in missing for s in seeds_from(TEST_SEED, e.episodes)]
            new = run_local(tasks, workers=workers, progress=progress, fn=suite_task, tidy=False,
                            desc=f"benchmark fill {e.env_id.split('/')[-1]}",
                            what=f"{', '.join(missing)} on the stored test seeds")
            new = [json.loads(json.dumps(o, default=_json_default)) for o in new]
            save_entry_outputs(e, [*mine, *new], budget, Path(out_dir), runs[e.section])
            added[e.section] = missing
    return added
