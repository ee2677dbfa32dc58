"""The tasks a suite run hands its executors (each entry's training seeds and its baselines' test episodes), their
keys and checks in the run's journal, and the leaderboard policies of each entry."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servegym.agents import protocol
from servegym.agents.families import family_for
from servegym.agents.rollout import agent_act_fn, play_episode, seeds_from
from servegym.agents.split_episodes import make_split_env, run_policy_episodes
from servegym.agents.suite_entries import TEST_SEED, VALIDATION_SEED, SuiteEntry

from servegym.errors import ConfigError


def suite_progress(budget: str, entries: Sequence[SuiteEntry], todo: Sequence[dict[str, Any]],
                   workers: int | None) -> tuple[str, tuple[float | None, str]]:
    """The suite's progress start line: what it runs, and the estimated time of its training tasks at the
    quick suite's measured rates (:data:`servegym.progress.TRAIN_STEPS_PER_S`) shared by ``workers``."""
    from servegym.progress import train_estimate

    trains = [t for t in todo if t.get("kind") == "train"]
    total = 0.0
    for t in trains:
        s, _ = train_estimate(t["entry"]["env_id"], int(t["entry"]["timesteps"]))
        total += s or 0.0
    n = max(1, min(workers or os.cpu_count() or 1, len(todo) or 1))
    what = (f"{len(entries)} env ids: {len(trains)} training runs and {len(todo) - len(trains)} baseline tasks, "
            "then the leaderboard")
    basis = (f"training only, at the quick suite's measured steps/s per id, shared by {n} processes; validation "
             "and test episodes add to it")
    return what, ((total / n if total else None), basis)


def suite_policies(entry: SuiteEntry) -> list[str]:
    """Policies on the leaderboard of ``entry``: the yardsticks first (naive, paper, strongest, follow,
    oracle, as the id has them), then the other baselines. An id's second hindsight bound
    (:attr:`~servegym.agents.protocol.Yardsticks.hindsight`, npu's ``hindsight`` plan) is not played by default:
    it knows the future, so it is no baseline to be "above the strongest", and its rows come from its own
    yardsticks script (benchmarks/npu_yardsticks.py) until the leaderboard gives it a role; an entry that lists it
    in ``baselines`` plays it."""
    y = protocol.yardsticks(entry.env_id, entry.env_kwargs)
    roles = y.roles()
    if "follow" in roles and not follow_available(entry.env_id, entry.env_kwargs):
        roles.pop("follow")
    fam = family_for(entry.env_id)
    others = [b for b in fam.baselines if b != y.hindsight] if entry.baselines is None else entry.baselines
    out = list(dict.fromkeys(roles[r] for r in protocol.ROLES if r in roles))
    return out + [b for b in others if b not in out]


def follow_available(env_id: str, env_kwargs: dict[str, Any] | None) -> bool:
    """Whether ``env_id`` made with ``env_kwargs`` has a residual zero action (``follow``)."""
    env = make_split_env(env_id, "test", env_kwargs)
    try:
        protocol.follow_action(env)
        return True
    except ConfigError:
        return False
    finally:
        env.close()


def model_folder(task: dict[str, Any]) -> Path:
    """The folder one suite training task trains its model in: ``<run_dir>/<section name>_<algo>_s<seed>`` (the
    section name is the id's, with ``@<track>`` on a stress track, so two tracks of one id never share a folder)."""
    e = SuiteEntry(**task["entry"])
    return Path(task["run_dir"]) / f"{e.name}_{e.algo}_s{task['seed']}"


def train_config(task: dict[str, Any]) -> Any:
    """The :class:`servegym.agents.train.TrainConfig` of one suite training task. The evaluator plays the
    strongest baseline on the validation seeds too, so the stored run holds the score the time to the
    strongest (:mod:`servegym.agents.time_to_strongest`) is measured against."""
    from servegym.agents.train import TrainConfig

    e: SuiteEntry = SuiteEntry(**task["entry"])
    out = model_folder(task) / "model.zip"
    refs = protocol.checkpoint_references(e.env_id) or {}
    played = set(refs.values()) | ({protocol.yardsticks(e.env_id, e.env_kwargs).roles()["strongest"]} if refs else set())
    return TrainConfig(env_id=e.env_id, algo=e.algo, timesteps=e.timesteps, seed=int(task["seed"]),
                       tb=str(Path(task["run_dir"]) / "tb") if task.get("tb") else None, out=str(out),
                       env_kwargs=dict(e.env_kwargs), eval_freq=max(e.timesteps // e.evals, 1),
                       eval_episodes=e.val_episodes, eval_seed=VALIDATION_SEED, eval_split="validation",
                       baselines=",".join(sorted(played)), checkpoint_freq=0, progress=False, verbose=0,
                       # the suite owns run_dir (under its lock); a rerun or retried task starts afresh
                       force=True, hyperparams=shipped_hyperparams(e.hyperparams))


def train_task(task: dict[str, Any]) -> dict[str, Any]:
    """One training seed of one env id: train on ``train``, select on ``validation``, play ``test``.
    Module-level so the process pool and Ray can ship it; returns the test episodes' rows, the validation
    history and the baselines' validation episodes."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    from servegym.agents.train import load_agent, train

    t0 = time.perf_counter()
    e: SuiteEntry = SuiteEntry(**task["entry"])
    res = train(train_config(task))
    train_s = time.perf_counter() - t0
    chosen = res.best_model_path or res.model_path
    agent, norm, run = load_agent(chosen, env_id=e.env_id, env_kwargs=e.env_kwargs)
    fam = family_for(e.env_id)
    env = make_split_env(e.env_id, "test", e.env_kwargs)
    rows = []
    try:
        act = agent_act_fn(agent, norm)
        for s in seeds_from(TEST_SEED, e.episodes):
            r = play_episode(env, act, s, f"agent:{run.get('algo', e.algo)}", fam.metrics)
            rows.append({**r.row(), "train_seed": int(task["seed"])})
    finally:
        env.close()
    if task.get("ship_dir"):
        from servegym.agents.replay import repo_relative, ship_model, shipped_folder

        ship = Path(task["ship_dir"])
        chosen = repo_relative(ship_model(chosen, shipped_folder(task["budget"], e.env_id, int(task["seed"]), ship,
                                                                 track=e.track), run), base=ship.parent)
    return {"kind": "train", "env_id": e.env_id, "section": e.section, "seed": int(task["seed"]), "rows": rows,
            "train_s": train_s, "wall_s": time.perf_counter() - t0, "env_steps": int(e.timesteps),
            "chosen": str(chosen), "validation": run.get("eval_history", []),
            "validation_baselines": run.get("baseline_eval", {})}


def shipped_hyperparams(name: str | None) -> str | None:
    """The path of the shipped hyperparameter file ``name`` (servegym/agents/hyperparams/), or None."""
    if name is None:
        return None
    from importlib import resources

    f = resources.files("servegym.agents").joinpath("hyperparams", name)
    if not f.is_file():
        raise ConfigError(f"suite entry hyperparams = {name!r}: no such shipped file in servegym/agents/hyperparams")
    return str(f)


def baseline_task(task: dict[str, Any]) -> dict[str, Any]:
    """One baseline (or ``follow``) on one test episode (module-level for the executors)."""
    t0 = time.perf_counter()
    env = make_split_env(task["env_id"], "test", task["env_kwargs"])
    try:
        r = run_policy_episodes(task["env_id"], env, [task["policy"]], [int(task["seed"])])[task["policy"]][0]
    finally:
        env.close()
    return {"kind": "baseline", "env_id": task["env_id"], "section": task.get("section", task["env_id"]),
            "rows": [{**r.row(), "train_seed": -1}],
            "wall_s": time.perf_counter() - t0, "env_steps": int(r.length)}


def suite_task(task: dict[str, Any]) -> dict[str, Any]:
    return train_task(task) if task["kind"] == "train" else baseline_task(task)


def suite_tasks(entries: Sequence[SuiteEntry], run_dir: str | Path, tb: bool, ship_dir: str | Path | None = None,
                budget: str = "quick") -> list[dict[str, Any]]:
    """Every task of a suite run: each entry's training seeds, then its baselines' test episodes. With
    ``ship_dir`` each training seed ships its chosen model there (:mod:`servegym.agents.replay`)."""
    tasks: list[dict[str, Any]] = []
    for e in entries:
        for s in range(e.seeds):
            tasks.append({"kind": "train", "entry": e.__dict__, "seed": s, "run_dir": str(run_dir), "tb": tb,
                          **({"ship_dir": str(ship_dir), "budget": budget} if ship_dir is not None else {})})
        for p in suite_policies(e):
            for s in seeds_from(TEST_SEED, e.episodes):
                tasks.append({"kind": "baseline", "env_id": e.env_id, "section": e.section, "env_kwargs": e.env_kwargs,
                              "policy": p, "seed": s})
    return tasks


def task_key(task: dict[str, Any]) -> str:
    """A suite task's identity in the run's journal (by section: two tracks of one id are different tasks)."""
    if task["kind"] == "train":
        return json.dumps(["train", SuiteEntry(**task["entry"]).section, int(task["seed"])])
    return json.dumps(["baseline", task.get("section", task["env_id"]), task["policy"], int(task["seed"])])


def suite_header(tasks: Sequence[dict[str, Any]]) -> str:
    """A hash of a run's tasks (entries, seeds, run folder): a journal resumes only the run that wrote it."""
    return hashlib.sha256(json.dumps(list(tasks), sort_keys=True, default=str).encode()).hexdigest()[:16]


def suite_journal_check(tasks: Sequence[dict[str, Any]]) -> Any:
    """A :meth:`servegym.outputs.Journal.read` check of a suite journal's lines: the key is a task of this
    run and the value the output :func:`suite_task` returns for it (its kind, env id and training seed; a
    list of episode rows, each with a policy name, integer seeds and length and a finite reward; a finite
    wall time). A line failing it is skipped with one warning line, and its task runs again."""
    from servegym.agents.sweep import finite_number, is_count

    by_key = {task_key(t): t for t in tasks}

    def check(key: str, out: Any) -> str | None:
        task = by_key.get(key)
        if task is None:
            return f"key {key[:80]!r} is not a task of this suite run"
        env_id = task["entry"]["env_id"] if task["kind"] == "train" else task["env_id"]
        if not isinstance(out, dict) or out.get("kind") != task["kind"] or out.get("env_id") != env_id:
            return f"the output of {key} is not a {task['kind']} task's output for {env_id}"
        if task["kind"] == "train" and not (is_count(out.get("seed")) and out["seed"] == task["seed"]):
            return f"the output of {key} names another training seed"
        rows = out.get("rows")
        if not isinstance(rows, list) or not rows or not finite_number(out.get("wall_s"), 0):
            return f"the output of {key} has no episode rows or no wall time"
        for r in rows:
            if not (isinstance(r, dict) and isinstance(r.get("policy"), str) and is_count(r.get("seed"))
                    and finite_number(r.get("reward")) and is_count(r.get("length"))
                    and isinstance(r.get("train_seed"), int) and not isinstance(r.get("train_seed"), bool)):
                return f"the output of {key} has an episode row that is not one"
        return None

    return check
