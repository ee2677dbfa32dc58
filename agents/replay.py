"""The leaderboard's trained agents, shipped in the repo and replayable from it alone.

**Shipping.** Each training seed of a suite run keeps the checkpoint chosen on validation. The suite copies it
into ``benchmarks/models/<budget>/<Id>/s<seed>/`` (``<Id>@<track>`` for a stress track's section; :func:`shipped_folder`): ``model.zip`` (SB3's archive,
loaded without unpickling by :mod:`servegym.agents.model_io`), ``model_vecnormalize.npz`` where the run
normalized observations, and a ``run.json`` with the fields a loader reads (env id, env kwargs, algorithm,
seed, hyperparameters) and its provenance (the commit, the package versions), no machine path. The stored
run (``suite_runs/<budget>/<Id>.json``, a track's section under its ``tracks``) names that repo-relative folder as
``chosen``.

**Replay** (``servegym benchmark --replay --envs ID[@track] --out-dir DIR``, :func:`replay`). For every selected
section (an id, or an id on a stress track),
each shipped seed plays the stored run's test episodes again (the same reset seeds), and the replayed agent
rows replace the stored ones in a copy of the stored run under ``DIR/suite_runs/<budget>/``; the baselines'
stored rows are kept (they are not models). The leaderboard of ``DIR`` is rebuilt from it (``DIR/leaderboard.
{json,md,csv}``) and every replayed row is compared with the stored one: the same return and every metric
within :data:`REL_TOL` relative, and how many rows are bit-identical (they are when the replay runs its models in
processes laid out as the suite's were: spawned workers, one thread each).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from servegym.errors import ConfigError
from servegym.outputs import write_text

REPO = Path(__file__).resolve().parents[1]
#: Where the suite ships its chosen models (one folder per budget, id and training seed).
MODELS_DIR = REPO / "benchmarks" / "models"
#: The run.json fields a shipped model keeps (those :func:`servegym.agents.train.load_agent` reads).
KEPT_FIELDS = ("env_id", "algo", "env_kwargs", "timesteps", "timesteps_trained", "n_envs", "seed", "eval_split",
               "eval_seeds", "baselines", "references", "hyperparams_source", "hyperparams")
#: Packages whose versions a shipped model records.
PACKAGES = ("servegym", "stable-baselines3", "sb3-contrib", "torch", "gymnasium", "numpy")


def shipped_folder(budget: str, env_id: str, seed: int, models_dir: Path = MODELS_DIR, track: str | None = None) -> Path:
    """``<models_dir>/<budget>/<Id>/s<seed>`` (``<Id>@<track>`` on a stress track): where one training seed's chosen
    model is shipped."""
    name = env_id.split("/")[-1] + ("" if track is None else f"@{track}")
    return Path(models_dir) / budget / name / f"s{int(seed)}"


def provenance() -> dict[str, Any]:
    """The commit of the repo (None outside a git checkout) and the installed versions of :data:`PACKAGES`."""
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    versions = {}
    for p in PACKAGES:
        try:
            versions[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            versions[p] = None
    return {"commit": commit, "packages": versions}


def ship_model(chosen: str | Path, dest: Path, run: dict[str, Any]) -> Path:
    """Copy the chosen model (and its observation statistics) into ``dest`` with a path-free ``run.json``;
    returns ``dest / "model.zip"``. Each file is written atomically (a copy, then a rename)."""
    from servegym.agents.train import vecnormalize_path_for

    src = Path(chosen)
    dest.mkdir(parents=True, exist_ok=True)
    pairs = [(src, dest / "model.zip")]
    stats = vecnormalize_path_for(src)
    if stats.is_file():
        pairs.append((stats, dest / "model_vecnormalize.npz"))
    elif (dest / "model_vecnormalize.npz").exists():  # a previous ship of a normalizing run: not this one's
        (dest / "model_vecnormalize.npz").unlink()
    for a, b in pairs:
        tmp = b.with_name(b.name + ".tmp")
        shutil.copyfile(a, tmp)
        tmp.replace(b)
    kept = {k: run[k] for k in KEPT_FIELDS if k in run}
    write_text(dest / "run.json", json.dumps({**kept, "model": "model.zip", "provenance": provenance()},
                                             indent=1, sort_keys=True) + "\n")
    return dest / "model.zip"


def repo_relative(path: Path, base: Path | None = None) -> str:
    """``path`` relative to the repo where it lies inside it, else relative to ``base`` (a results folder
    elsewhere): no machine path in a stored run."""
    p = Path(path).resolve()
    for root in (REPO, base):
        if root is not None:
            try:
                return p.relative_to(Path(root).resolve()).as_posix()
            except ValueError:
                pass
    return str(path)


def replay_task(task: dict[str, Any]) -> dict[str, Any]:
    """One shipped seed of one id on the stored test episodes (module-level for the process pool)."""
    import os

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    from servegym.agents.benchmark import make_split_env
    from servegym.agents.families import family_for
    from servegym.agents.rollout import agent_act_fn, play_episode
    from servegym.agents.train import load_agent

    t0 = time.perf_counter()
    agent, norm, _run = load_agent(task["model"], env_id=task["env_id"], env_kwargs=task["env_kwargs"])
    env = make_split_env(task["env_id"], "test", task["env_kwargs"])
    rows = []
    try:
        act = agent_act_fn(agent, norm)
        for s in task["seeds"]:
            r = play_episode(env, act, int(s), task["policy"], family_for(task["env_id"]).metrics)
            rows.append({**r.row(), "train_seed": int(task["seed"])})
    finally:
        env.close()
    return {"env_id": task["env_id"], "section": task.get("section", task["env_id"]), "seed": int(task["seed"]),
            "rows": rows, "wall_s": time.perf_counter() - t0}


#: Relative tolerance of a replayed value against the stored one. The same actions on the same episode give the
#: same numbers up to the order of floating-point sums, which depends on the process (a spawned worker or the
#: calling process, its BLAS threads): differences of ~1e-14 relative, far below anything a table shows.
REL_TOL = 1e-9


@dataclass
class RowCheck:
    """How the replayed rows of one id compare with the stored ones: ``equal`` rows are bit-identical,
    ``close`` rows agree within :data:`REL_TOL` in every numeric field (bit-identical ones included)."""

    env_id: str
    rows: int = 0
    equal: int = 0
    close: int = 0
    max_abs_diff: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.rows > 0 and self.close == self.rows

    def add(self, other: RowCheck) -> None:
        self.rows, self.equal, self.close = self.rows + other.rows, self.equal + other.equal, self.close + other.close
        for k, v in other.max_abs_diff.items():
            self.max_abs_diff[k] = max(self.max_abs_diff.get(k, 0.0), v)

    def text(self) -> str:
        worst = ", ".join(f"{k} {v:.3g}" for k, v in sorted(self.max_abs_diff.items(), key=lambda kv: -kv[1])[:3]
                          if v > 0)
        return (f"{self.env_id}: {self.close} of {self.rows} replayed agent rows equal to the stored rows within "
                f"{REL_TOL:g} relative, {self.equal} bit for bit" + (f" (largest differences: {worst})" if worst else ""))


def compare_rows(env_id: str, stored: list[dict[str, Any]], replayed: list[dict[str, Any]]) -> RowCheck:
    """Row by row (training seed, reset seed): every numeric field bit-identical (``equal``) or within
    :data:`REL_TOL` relative (``close``); a row without a stored counterpart is neither."""
    check = RowCheck(env_id)
    old = {(r["train_seed"], r["seed"]): r for r in stored}
    for r in replayed:
        check.rows += 1
        o = old.get((r["train_seed"], r["seed"]))
        if o is None:
            check.max_abs_diff["missing rows"] = check.max_abs_diff.get("missing rows", 0.0) + 1.0
            continue
        same = near = True
        for k, v in r.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                w = o.get(k)
                if isinstance(w, (int, float)) and (w == v or (math.isnan(w) and math.isnan(v))):
                    continue
                same = False
                d = abs(float(v) - float(w)) if isinstance(w, (int, float)) else math.inf
                near = near and d <= REL_TOL * max(abs(float(v)), 1e-300)
                check.max_abs_diff[k] = max(check.max_abs_diff.get(k, 0.0), d)
        check.equal += same
        check.close += near
    return check


def replay(budget: str, env_ids: list[str] | None, out_dir: str | Path, stored_dir: str | Path | None = None,
           models_dir: str | Path | None = None, workers: int | None = None, progress: bool = True,
           force: bool = False) -> tuple[Any, list[RowCheck]]:
    """Rebuild the agent rows of the sections ``env_ids`` (env ids, or ``<id>@<track>``; default: every section
    with a stored run) from the shipped models and
    write ``out_dir``'s leaderboard (module docstring). A folder that already holds stored runs is refused
    unless ``force``. Returns the leaderboard result and the row checks."""
    from servegym.agents import benchmark as bm
    from servegym.agents.sweep import run_local

    if budget not in bm.SUITE:
        raise ConfigError(f"--budget = {budget!r}; allowed: {', '.join(bm.BUDGETS)}")
    stored = Path(stored_dir) if stored_dir is not None else bm.RESULTS_DIR
    models_dir = Path(models_dir) if models_dir is not None else bm.models_dir_for(stored)
    out = Path(out_dir)
    if out.resolve() == stored.resolve():
        raise ConfigError(f"--out-dir = {str(out)!r} is the stored results folder; allowed: another folder (the "
                          "replay is compared with the stored rows, never written over them)")
    held = sorted(p.name for p in (out / "suite_runs" / budget).glob("*.json")) if out.is_dir() else []
    if held and not force:
        raise ConfigError(f"--out-dir = {str(out)!r} already holds stored runs ({', '.join(held[:3])}); allowed: an "
                          "empty or new folder, or --force to replace them")
    entries, outs, runs = bm.stored_outputs(budget, stored)
    if not entries:
        raise ConfigError(f"--replay: no stored {budget} runs in {stored}; allowed: a budget with stored runs there")
    if env_ids is not None:
        unknown = [i for i in env_ids if i not in {e.section for e in entries}]
        if unknown:
            raise ConfigError(f"--envs: no stored {budget} run of {', '.join(unknown)} in {stored}; allowed: "
                              f"{', '.join(e.section for e in entries)}")
        entries = [e for e in entries if e.section in env_ids]
    tasks, where = [], {}  # where: (section, training seed) -> index of its stored output
    for e in entries:
        for i, o in enumerate(outs):
            if bm.section_of(o) != e.section or o["kind"] != "train":
                continue
            model = shipped_folder(budget, e.env_id, o["seed"], Path(models_dir), track=e.track) / "model.zip"
            if not model.is_file():
                raise ConfigError(f"{e.section} seed {o['seed']}: no shipped model at {model}; the stored run was "
                                  f"made before models were shipped: run `servegym benchmark --suite --budget "
                                  f"{budget} --envs {e.section} --force` to train and ship them")
            seeds = [int(r["seed"]) for r in o["rows"]]
            policy = o["rows"][0]["policy"] if o["rows"] else f"agent:{e.algo}"
            tasks.append({"env_id": e.env_id, "section": e.section, "env_kwargs": e.env_kwargs, "seed": int(o["seed"]),
                          "seeds": seeds, "model": str(model), "policy": policy})
            where[(e.section, int(o["seed"]))] = i
    results = run_local(tasks, workers=workers, progress=progress, fn=replay_task, tidy=False,
                        desc=f"replay ({budget})", what=f"{len(tasks)} shipped models on their stored test episodes")
    new_outs = [dict(o) for o in outs]
    checks = {e.section: RowCheck(e.section) for e in entries}
    for res in results:  # in the order they finished: matched by (section, training seed)
        k = where[(res["section"], res["seed"])]
        o = new_outs[k]
        checks[res["section"]].add(compare_rows(res["section"], o["rows"], res["rows"]))
        new_outs[k] = {**o, "rows": res["rows"], "replay_wall_s": res["wall_s"]}
    for e in entries:
        run = runs.get(e.section) or {"wall_s": 0.0, "env_ids": [e.section], "workers": None}
        bm.save_entry_outputs(e, [o for o in new_outs if bm.section_of(o) == e.section], budget, out, run)
    return bm.rebuild_leaderboard(budget, out), [checks[e.section] for e in entries]
