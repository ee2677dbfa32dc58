"""Policy × scenario × seed grids (``servegym sweep CONFIG.yml``) on a local process pool or on Ray.

Config (YAML)::

    name: pd-demo                       # optional, copied into the results
    env: servegym/PDProvision-v0        # default env of the scenarios
    scenarios:                          # each: a name, an env id (optional) and gym.make kwargs
      - {name: short-day, env_kwargs: {config: {scenario: {horizon_steps: 120}}}}
      - {name: carbon, env_kwargs: {config: {objective: carbon}}}
    policies:                           # baseline names of the env's family, or saved agents
      - min-power
      - static-peak
      - {agent: runs/PDProvision-v0_maskable-ppo_s0/model.zip, name: mppo}   # or "agent:PATH"; PATH
                                                                            # inside this file's folder
    seeds: [0, 1, 2]                    # or {start: 0, count: 3}

Each cell (policy, scenario, seed) plays one seeded episode (:mod:`servegym.agents.rollout`) and
becomes one row of a tidy DataFrame: ``sweep, scenario, env_id, policy, seed, reward, length,
<domain scalars...>, wall_s``. Cells are independent, so the grid runs unchanged on a local
``spawn`` process pool (default) or on Ray (``--ray``, local or ``--ray ADDRESS``; servegym must be
importable on every Ray node).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from servegym.agents.families import family_accepts, family_for

from servegym.env_ids import check_env_id
from servegym.errors import ConfigError, shown
from servegym.file_refs import check_file_refs, path_in_folder


@dataclass(frozen=True)
class Scenario:
    name: str
    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PolicyRef:
    """A baseline (``agent_path is None``) or a saved agent."""

    name: str
    agent_path: str | None = None


@dataclass(frozen=True)
class SweepConfig:
    name: str
    scenarios: tuple[Scenario, ...]
    policies: tuple[PolicyRef, ...]
    seeds: tuple[int, ...]

    def tasks(self) -> list[dict[str, Any]]:
        """The grid's cells as plain dicts (picklable for any executor)."""
        return [{"sweep": self.name, "scenario": sc.name, "env_id": sc.env_id, "env_kwargs": sc.env_kwargs,
                 "policy": p.name, "agent_path": p.agent_path, "seed": s}
                for sc in self.scenarios for p in self.policies for s in self.seeds]


MAX_SWEEP_SEEDS = 10_000
#: Times Ray reruns a task whose worker process or node died (cells are deterministic).
RAY_TASK_RETRIES = 3


def _seeds(raw: Any) -> tuple[int, ...]:
    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if isinstance(raw, dict):
        start, count = raw.get("start", 0), raw.get("count", 1)
        if not (is_int(start) and is_int(count)) or start < 0 or not 1 <= count <= MAX_SWEEP_SEEDS:
            raise ConfigError(f"seeds = {shown(raw)}; allowed: start an integer >= 0, count an integer in "
                              f"[1, {MAX_SWEEP_SEEDS}]")
        return tuple(range(start, start + count))
    if is_int(raw) and raw >= 0:
        return (raw,)
    if isinstance(raw, list) and 0 < len(raw) <= MAX_SWEEP_SEEDS and all(is_int(s) and s >= 0 for s in raw):
        return tuple(raw)
    raise ConfigError(f"seeds = {str(raw)[:80]}; allowed: integers >= 0 (a list of at most {MAX_SWEEP_SEEDS}, "
                      "one, or {start, count})")


MAX_NAME_CHARS = 200


def _name(raw: Any, where: str) -> str:
    """A sweep, scenario or policy name: a short string (or number) as given."""
    if isinstance(raw, bool) or not isinstance(raw, (str, int, float)) or len(str(raw)) > MAX_NAME_CHARS:
        raise ConfigError(f"{where} = {shown(raw)} ({type(raw).__name__}); allowed: a string of at most "
                          f"{MAX_NAME_CHARS} characters")
    return str(raw)


def parse_sweep(doc: Any, base_dir: Path | None = None, source: str = "sweep config") -> SweepConfig:
    """Validate a sweep document. Agent paths are relative to ``base_dir`` (the config's folder; default: the
    working folder) and must lie inside it, as files named in env kwargs must."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: expected a mapping with scenarios, policies, seeds")
    unknown = sorted(set(doc) - {"name", "env", "scenarios", "policies", "seeds"})
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {unknown}; allowed: name, env, scenarios, policies, seeds")
    default_env = doc.get("env")
    raw_sc = doc.get("scenarios") or [{"name": "default"}]
    if not isinstance(raw_sc, list):
        raise ConfigError(f"{source}: scenarios must be a list")
    scenarios = []
    for i, sc in enumerate(raw_sc):
        if not isinstance(sc, dict):
            raise ConfigError(f"{source}: scenarios[{i}] must be a mapping with name, env, env_kwargs")
        env_id = sc.get("env", default_env)
        if not env_id:
            raise ConfigError(f"{source}: scenarios[{i}] has no env (set env: at the top or in the scenario)")
        # checked against the registry before Gymnasium sees it: no "module:" prefix is ever imported
        field_name = f"scenarios[{i}].env" if "env" in sc else "env"
        env_id = check_env_id(env_id, f"{source}: {field_name}")
        kwargs = sc.get("env_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise ConfigError(f"{source}: scenarios[{i}].env_kwargs must be a mapping")
        # a path in a sweep file must lie in the sweep file's folder (or be shipped data by name)
        check_file_refs(kwargs, f"{source}: scenarios[{i}].env_kwargs", "a sweep config",
                        roots=() if base_dir is None else (base_dir,),
                        fix="put it in the sweep config's folder (or below it)")
        scenarios.append(Scenario(_name(sc.get("name", f"s{i}"), f"{source}: scenarios[{i}].name"), env_id,
                                  dict(kwargs)))
    if len({s.name for s in scenarios}) != len(scenarios):
        raise ConfigError(f"{source}: scenario names must be unique")
    raw_p = doc.get("policies")
    if not isinstance(raw_p, list) or not raw_p:
        raise ConfigError(f"{source}: policies must be a non-empty list of baseline names or agents")
    policies = []
    for i, p in enumerate(raw_p):
        if isinstance(p, str) and p.startswith("agent:"):
            p = {"agent": p[len("agent:"):]}
        if isinstance(p, dict):
            if "agent" not in p:
                raise ConfigError(f"{source}: policies[{i}] = {shown(p)}; allowed: a baseline name or {{agent: PATH}}")
            # only a file in the sweep file's folder (docs/security.md): refused on the text, before any lookup
            where = f"{source}: policies[{i}].agent"
            path = path_in_folder(p["agent"], base_dir if base_dir is not None else Path.cwd(), where)
            if not path.is_file():
                raise ConfigError(f"{where} = {shown(str(p['agent']))}: no such file")
            policies.append(PolicyRef(_name(p.get("name", path.parent.name or "agent"), f"{source}: policies[{i}].name"),
                                      str(path)))
        elif isinstance(p, str):
            policies.append(PolicyRef(_name(p, f"{source}: policies[{i}]")))
        else:
            raise ConfigError(f"{source}: policies[{i}] = {shown(p)}; allowed: a baseline name or {{agent: PATH}}")
    if len({p.name for p in policies}) != len(policies):
        raise ConfigError(f"{source}: policy names must be unique (give agents a name:)")
    for sc in scenarios:
        fam = family_for(sc.env_id)
        for p in policies:
            if p.agent_path is None and (fam.run_baseline is None or not family_accepts(fam, p.name)):
                raise ConfigError(f"{source}: policy {p.name!r} is not a baseline of {sc.env_id} "
                                  f"(family {fam.name}); allowed: {', '.join(fam.baselines) or 'agents only'}")
    return SweepConfig(_name(doc.get("name", "sweep"), f"{source}: name"), tuple(scenarios), tuple(policies), _seeds(doc.get("seeds", [0])))


def load_sweep(path: str | Path) -> SweepConfig:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"CONFIG = {str(path)!r}: no such file")
    from servegym.agents.hparams import _read_yaml

    return parse_sweep(_read_yaml(p), base_dir=p.parent, source=str(p))


_AGENTS: dict[str, Any] = {}


def run_task(task: dict[str, Any]) -> dict[str, Any]:
    """Play one cell; module-level so both executors can ship it. Loaded agents are cached per process."""
    import gymnasium as gym
    from servegym.agents.rollout import agent_act_fn, play_episode

    import servegym  # noqa: F401  (registers the ids in fresh workers)

    t0 = time.perf_counter()
    fam = family_for(task["env_id"])
    env = gym.make(task["env_id"], **task["env_kwargs"])
    try:
        if task["agent_path"] is None:
            assert fam.run_baseline is not None
            res = fam.run_baseline(env, task["policy"], task["seed"])
        else:
            path = task["agent_path"]
            if path not in _AGENTS:
                from servegym.agents.train import load_agent

                _AGENTS[path] = load_agent(path, env_id=task["env_id"], env_kwargs=task["env_kwargs"])
            model, norm, _ = _AGENTS[path]
            res = play_episode(env, agent_act_fn(model, norm), task["seed"], task["policy"], fam.metrics)
    finally:
        env.close()
    return {"sweep": task["sweep"], "scenario": task["scenario"], "env_id": task["env_id"],
            "policy": task["policy"], "seed": task["seed"], "reward": res.reward, "length": res.length,
            **res.metrics, "wall_s": time.perf_counter() - t0}


def _tidy(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows))
    return df.sort_values(["scenario", "policy", "seed"], kind="stable").reset_index(drop=True)


def run_local(tasks: Sequence[dict[str, Any]], workers: int | None = None, progress: bool = True,
              fn: Any = None, tidy: bool = True, on_result: Any = None, desc: str = "sweep", what: str = "",
              estimate: tuple[float | None, str] = (None, "")) -> Any:
    """The grid on a ``spawn`` process pool (``workers`` default: CPU count, at most the cell count);
    ``workers=1`` runs the cells in this process (no start-up cost, same results). ``fn`` (a
    module-level function of one task dict; default :func:`run_task`) plays a cell; ``tidy=False``
    returns its outputs as a list instead of the tidy DataFrame; ``on_result(task, output)`` is called
    as each cell finishes (the journal of a resumable run). On any exception, :class:`Interrupted`
    included, the pool's workers are terminated before it propagates: no process outlives the run.
    ``desc``, ``what`` and ``estimate`` (seconds or None, and what it rests on) name the progress lines
    (:class:`servegym.progress.Progress`)."""
    fn = run_task if fn is None else fn
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from servegym.outputs import ignore_sigint
    from servegym.progress import Progress

    n = workers or os.cpu_count() or 1
    n = max(1, min(n, len(tasks)))
    rows = []
    unit = "task" if fn is not run_task else "cell"
    where = "in this process" if n == 1 else f"on {n} processes"
    head = f"{what + ' ' if what else ''}{where}"
    if n == 1 or not tasks:
        with Progress(len(tasks), desc, unit, what=head, estimate_s=estimate[0], basis=estimate[1],
                      disable=not progress or not tasks) as bar:
            for t in bar.iterate(tasks):
                rows.append(fn(t))
                if on_result is not None:
                    on_result(t, rows[-1])
        return _tidy(rows) if tidy else rows
    pool = ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"), initializer=ignore_sigint)
    try:
        with Progress(len(tasks), desc, unit, what=head, estimate_s=estimate[0], basis=estimate[1],
                      disable=not progress) as bar:
            futures = {pool.submit(fn, t): t for t in tasks}
            for fut in as_completed(futures):
                rows.append(fut.result())
                if on_result is not None:
                    on_result(futures[fut], rows[-1])
                bar.update(1)
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown()
    return _tidy(rows) if tidy else rows


def stop_pool(pool: Any) -> None:
    """Cancel a process pool's queued cells and terminate its workers now (a worker mid-episode would
    otherwise run on, parented to init, after the parent is gone), then reap them."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join(5)


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs Ray, which is not installed; install it with "
                          "pip install 'servegym[ray]' (or run without --ray on the local process pool)") from None
    return ray


def run_ray(tasks: Sequence[dict[str, Any]], address: str | None = None, workers: int | None = None,
            progress: bool = True, fn: Any = None, tidy: bool = True, on_result: Any = None, desc: str = "sweep",
            what: str = "", estimate: tuple[float | None, str] = (None, "")) -> Any:
    """The grid on Ray: a local Ray instance (``address`` None) or an existing cluster (``"auto"`` or
    ``"ray://host:10001"``). ``workers`` caps the CPUs of a local instance. A task whose worker or node
    dies is retried by Ray (:data:`RAY_TASK_RETRIES` times; cells are deterministic, so a retried cell
    gives the same row); ``on_result`` as in :func:`run_local`; on an exception the pending tasks of a
    cluster are cancelled, and a local instance is shut down with all its processes (SIGTERM and SIGINT
    included: :func:`_init_ray`). ``desc``, ``what``, ``estimate``: the progress lines, as in :func:`run_local`."""
    from servegym.progress import Progress

    ray = _import_ray()
    started = False
    signum = None
    if not ray.is_initialized():
        init: dict[str, Any] = {"address": address, "include_dashboard": False, "log_to_driver": False,
                                "configure_logging": False}
        if address is None and workers:
            init["num_cpus"] = workers
        signum = _init_ray(ray, init)
        started = True
    try:
        if signum is not None:  # a signal came during ray.init: acted on now that ray.shutdown can stop it all
            _replay_signal(signum)
        remote = ray.remote(num_cpus=1, max_retries=RAY_TASK_RETRIES)(run_task if fn is None else fn)
        refs = {remote.remote(t): t for t in tasks}
        pending = list(refs)
        rows = []
        try:
            with Progress(len(tasks), desc, "task" if fn is not None else "cell",
                          what=f"{what + ' ' if what else ''}on Ray", estimate_s=estimate[0], basis=estimate[1],
                          disable=not progress) as bar:
                while pending:
                    done, pending = ray.wait(pending, num_returns=1)
                    for ref in done:
                        rows.append(ray.get(ref))
                        if on_result is not None:
                            on_result(refs[ref], rows[-1])
                    bar.update(len(done))
        except BaseException:
            # a local instance's tasks end with ray.shutdown below; force-cancelling them first races their
            # replies and can abort the driver inside Ray's core worker (before the shutdown, so its agents live on)
            for ref in pending if not (started and address is None) else ():
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            raise
    finally:
        if started:
            ray.shutdown()
    return _tidy(rows) if tidy else rows


def _init_ray(ray: Any, init: dict[str, Any]) -> int | None:
    """``ray.init(**init)`` with this process's SIGTERM and SIGINT handlers kept. Ray installs its own SIGTERM
    handlers while it starts (``sys.exit(15)`` with no message, then one that kills the node's processes
    and exits 1 with Ray's traceback, leaving its dashboard and runtime-env agents running): the handlers
    :func:`servegym.outputs.interruptible` set must stay the ones that run, so that SIGTERM unwinds to
    ``ray.shutdown``. A signal during ``ray.init`` is only recorded (stopping it half-way would leave
    processes no shutdown knows of) and returned, to be acted on once Ray is up; if ``ray.init`` fails,
    whatever it started is shut down."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    ours = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)} if main else {}
    got: list[int] = []
    for s in ours:
        signal.signal(s, lambda signum, frame: got.append(signum))
    utils = getattr(getattr(ray, "_private", None), "utils", None)
    set_handler = getattr(utils, "set_sigterm_handler", None)
    if set_handler is not None and main:
        utils.set_sigterm_handler = lambda handler: None  # Ray's handlers are not installed at all
    try:
        ray.init(**init)
    except BaseException:
        with contextlib.suppress(Exception):
            ray.shutdown()
        raise
    finally:
        if set_handler is not None and main:
            utils.set_sigterm_handler = set_handler
        for s, h in ours.items():
            signal.signal(s, h)
    return got[0] if got else None


def _replay_signal(signum: int) -> None:
    """Act on a signal recorded while a handler could not run: through the handler now installed (e.g.
    :func:`servegym.outputs.interruptible`'s, which raises), else as :class:`servegym.outputs.Interrupted`."""
    import signal

    from servegym.outputs import Interrupted

    handler = signal.getsignal(signum)
    if callable(handler):
        handler(signum, None)
    raise Interrupted(signum)


def results_path(out: str | Path) -> Path:
    """The results file ``--out`` names: a ``.csv`` (added when there is no suffix) or ``.parquet`` path."""
    p = Path(out)
    if p.suffix == "":
        return p.with_suffix(".csv")
    if p.suffix not in (".csv", ".parquet"):
        raise ConfigError(f"--out = {str(out)!r}; allowed: a .csv or .parquet path")
    return p


def write_results(df: pd.DataFrame, out: str | Path) -> Path:
    """CSV, or Parquet for a ``.parquet`` path (needs pyarrow or fastparquet), written atomically (a
    temporary file beside it, then a rename): a reader or a killed run never sees half a file."""
    from servegym.outputs import write_frame

    p = results_path(out)
    try:
        write_frame(df, p)
    except ImportError:
        raise ConfigError(f"--out = {str(out)!r}: Parquet needs pyarrow (pip install pyarrow); "
                          "or write CSV with --out results.csv") from None
    return p


def read_results(path: Path) -> pd.DataFrame:
    """An earlier run's results file (to resume from)."""
    try:
        return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except (ValueError, OSError, ImportError) as exc:
        raise ConfigError(f"--out = {str(path)!r} exists but does not read as sweep results "
                          f"({type(exc).__name__}); pass --force to replace it") from None


CELL_KEYS = ("sweep", "scenario", "env_id", "policy", "seed")


def cell_key(cell: dict[str, Any]) -> str:
    """A cell's identity in results and journals: sweep, scenario, env id, policy and seed."""
    return json.dumps([str(cell["sweep"]), str(cell["scenario"]), str(cell["env_id"]), str(cell["policy"]),
                       int(cell["seed"])])


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def finite_number(v: Any, minimum: float | None = None) -> bool:
    """Whether a value read back from JSON is a finite number (not a bool), at least ``minimum`` if given."""
    import math

    return _number(v) and math.isfinite(v) and (minimum is None or v >= minimum)


def is_count(v: Any) -> bool:
    """Whether a value read back from JSON is an integer >= 0 (not a bool)."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def journal_check(tasks: Sequence[dict[str, Any]]) -> Any:
    """A :meth:`servegym.outputs.Journal.read` check of a sweep journal's lines against the config's cells
    and the row :func:`run_task` writes: the key is a cell of this config, the row names that very cell
    (the same sweep, scenario, env id, policy and seed, of the same types), ``reward`` is a finite number,
    ``length`` an integer >= 0, ``wall_s`` a finite number >= 0, and every other column one of the family's
    metrics holding a number (NaN allowed) or null. A line failing it is skipped: its cell runs again."""
    cells = {cell_key(t): t for t in tasks}
    metric_keys = {t["env_id"]: {m.key for m in family_for(t["env_id"]).metrics} for t in tasks}

    def check(key: str, row: Any) -> str | None:
        task = cells.get(key)
        if task is None:
            return f"key {shown(key)} is not a cell of this sweep config"
        if not isinstance(row, dict):
            return f"the row of {key} is a {type(row).__name__}, not a mapping"
        for k in CELL_KEYS:
            if k not in row or row[k] != task[k] or type(row[k]) is not type(task[k]):
                return f"the row of {key} has {k} = {shown(row.get(k), 40)}, not {task[k]!r}"
        reward, length, wall = row.get("reward"), row.get("length"), row.get("wall_s")
        if not finite_number(reward):
            return f"the row of {key} has reward = {shown(reward, 40)}; allowed: a finite number"
        if not is_count(length):
            return f"the row of {key} has length = {shown(length, 40)}; allowed: an integer >= 0"
        if not finite_number(wall, 0):
            return f"the row of {key} has wall_s = {shown(wall, 40)}; allowed: a finite number >= 0"
        for k, v in row.items():
            if k in CELL_KEYS or k in ("reward", "length", "wall_s"):
                continue
            if k not in metric_keys[task["env_id"]]:
                return f"the row of {key} has the column {shown(k, 40)}, not a metric of {task['env_id']}"
            if v is not None and not _number(v):
                return f"the row of {key} has {k} = {shown(v, 40)}; allowed: a number or null"
        return None

    return check


def config_fingerprint(cfg: SweepConfig) -> str:
    """A hash of every cell's inputs (env kwargs and agent paths included): a journal of another config is
    never resumed."""
    import hashlib

    text = json.dumps(cfg.tasks(), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class SweepRun:
    """What :func:`run_sweep_to` did: the results, the file, and how many cells it reused."""

    df: pd.DataFrame
    path: Path
    reused: int
    ran: int


def journal_path(path: Path) -> Path:
    """The journal of a sweep writing ``path``: one line per finished cell, removed when the run completes."""
    return path.with_name(path.name + ".partial.jsonl")


def run_sweep_to(cfg: SweepConfig, out: str | Path, *, force: bool = False, resume: bool = False,
                 workers: int | None = None, ray_address: str | bool | None = False,
                 progress: bool = True) -> SweepRun:
    """Run the grid into ``out`` without losing or silently replacing results:

    * ``out`` is locked (``<out>.lock``) for the run: a second sweep on it fails at once (OutputBusy);
    * an existing ``out`` (or the journal of an interrupted run) is refused unless ``resume`` (keep its
      rows, run only the missing cells; a results file's cells match by sweep, scenario, env id, policy and
      seed, a journal only if it is of this very config) or ``force`` (start afresh);
    * each finished cell is appended to ``<out>.partial.jsonl`` at once, so SIGTERM, SIGINT or a crash lose
      at most the cells in flight; the results file is written atomically at the end and the journal removed;
    * a journal line that is not a finished cell of this config (:func:`journal_check`: a cell the config
      lacks, a row naming another cell, a value of the wrong type) is skipped with one warning line, and its
      cell runs again: nothing but a row :func:`run_task` could have written reaches the results.
    """
    from servegym.outputs import Journal, OutputLock, refuse_existing

    path = results_path(out)
    tasks = cfg.tasks()
    with OutputLock(path, "--out"):
        journal = Journal(journal_path(path))
        if (path.exists() or journal.path.exists()) and not (force or resume):
            refuse_existing("--out", path, "results" if path.exists() else "an interrupted run's cells "
                            f"({journal.path.name})")
        header = config_fingerprint(cfg)
        done: dict[str, dict[str, Any]] = {}
        kept: dict[str, Any] = {}
        if resume and not force:
            if path.exists():
                old = read_results(path)
                missing = [c for c in CELL_KEYS if c not in old.columns]
                if missing:
                    raise ConfigError(f"--out = {str(path)!r} has no column(s) {missing}: not sweep results; "
                                      "pass --force to replace it")
                done.update({cell_key(r): r for r in old.to_dict("records")})
            if journal.path.exists():
                partial = journal.read(header, check=journal_check(tasks))
                if partial is None:
                    raise ConfigError(f"--resume: {journal.path.name} is from another sweep config (its cells "
                                      "differ); pass --force to discard it and start afresh")
                kept = partial
                done.update(partial)
        todo = [t for t in tasks if cell_key(t) not in done]
        journal.open(header, keep=kept)
        try:
            rows = run_sweep_tasks(todo, workers=workers, ray_address=ray_address, progress=progress,
                                   on_result=lambda _t, row: journal.add(cell_key(row), row), what=_what(cfg))
        finally:
            journal.close()
        df = _tidy([*done.values(), *rows]) if (done or rows) else pd.DataFrame(columns=list(CELL_KEYS))
        write_results(df, path)
        journal.close(remove=True)
    return SweepRun(df=df, path=path, reused=len(done), ran=len(rows))


def run_sweep(cfg: SweepConfig, workers: int | None = None, ray_address: str | bool | None = False,
              progress: bool = True) -> pd.DataFrame:
    """Run every cell: on Ray when ``ray_address`` is not False (None/"" = a local Ray), else locally."""
    return _tidy(run_sweep_tasks(cfg.tasks(), workers=workers, ray_address=ray_address, progress=progress,
                                 what=_what(cfg)))


def _what(cfg: SweepConfig) -> str:
    """The progress start line's description of a sweep."""
    return (f"{cfg.name}: {len(cfg.policies)} policies x {len(cfg.scenarios)} scenarios x {len(cfg.seeds)} seeds "
            "(one episode per cell)")


def run_sweep_tasks(tasks: Sequence[dict[str, Any]], workers: int | None = None,
                    ray_address: str | bool | None = False, progress: bool = True,
                    on_result: Any = None, what: str = "") -> list[dict[str, Any]]:
    """The rows of ``tasks`` (any order) on Ray or the local pool (:func:`run_sweep`)."""
    if ray_address is not False:
        return run_ray(tasks, address=ray_address or None, workers=workers, progress=progress, tidy=False,
                       on_result=on_result, what=what)
    return run_local(tasks, workers=workers, progress=progress, tidy=False, on_result=on_result, what=what)


def summary_table(df: pd.DataFrame, out_path: str | Path | None = None, width: int = 120) -> str:
    """Per scenario and policy, the mean over seeds of reward and the family's domain scalars, as text; the
    columns that fit in ``width`` characters (the results file has every cell), then one verdict per scenario
    (the policy with the highest mean reward)."""
    from servegym import report

    num = [c for c in df.columns if c not in ("seed", "length", "wall_s") and pd.api.types.is_numeric_dtype(df[c])]
    agg = df.groupby(["scenario", "policy"], sort=False)[num].mean().reset_index()
    seeds = df.groupby(["scenario", "policy"], sort=False)["seed"].nunique().reset_index(drop=True)
    cols = [report.format_column(agg[c].astype(float).tolist()) for c in num]
    rows = [[str(r["scenario"]), str(r["policy"]), str(int(seeds[i])), *(c[i] for c in cols)]
            for i, (_, r) in enumerate(agg.iterrows())]
    header, rows, dropped = report.fit_width(["scenario", "policy", "seeds", *num], rows, width)
    lines = [report.text_table(header, rows)]
    if dropped:
        where = f" in {out_path}" if out_path else ""
        lines.append(report.wrap(f"more columns{where}: {', '.join(dropped)}", width, "  "))
    for sc, g in agg.groupby("scenario", sort=False):
        scores = dict(zip(g["policy"], g["reward"].astype(float), strict=True))
        # "ideal" (npu) is an oracle bound, not a competitor
        lines.append(report.wrap(f"{sc}: " + report.verdict(scores, higher_is_better=True, what="mean reward",
                                                              agent=None, exclude=("ideal",)), width, "  "))
    return "\n".join(lines)


def summary_json(df: pd.DataFrame) -> str:
    """Mean of every numeric column per (scenario, policy), as JSON records."""
    num = [c for c in df.columns if c not in ("seed",) and pd.api.types.is_numeric_dtype(df[c])]
    agg = df.groupby(["scenario", "policy"], sort=False)[num].mean().reset_index()
    return json.dumps(agg.to_dict(orient="records"), indent=2)
