"""``servegym dataset``: record a policy's episodes as a Minari dataset (the Farama offline-RL format).

``servegym dataset --env ID (--policy NAME | --model PATH) --episodes K [--split S] [--seed N] [--out DIR]
[--force]`` plays K episodes of the split (reset seeds ``--seed .. --seed+K-1``) through the env and records
every transition in the env's own observation and action spaces with Minari's ``DataCollector``. The
dataset id is ``servegym/<env name>/<policy>-<split>-v0`` (lower case; characters Minari's ids do not
allow become ``-``, a decimal point ``_``: ``min-power+forecast:0.97`` -> ``min-power-forecast-0_97``).
Each episode's KPIs (the family's metrics, e.g. energy and SLO violation, and the return) go into the
dataset's metadata as JSON (``servegym_episodes``) with their means (``servegym_kpi_means``).

Only policies that act through the env's action can be recorded: every pd baseline on the absolute id
(``PDProvision-v0``, the baselines step it), ``follow`` on a residual id (its zero action), and any saved
agent (``--model``). The geo and npu baselines drive the simulator with decisions the env's action does
not express (joint window schedules, emergency scale-outs between epochs), and the pd baselines decide
absolute targets a residual or front action cannot always reach: those are refused in one line naming
the policies that can be recorded.

The dataset is written under ``--out`` or Minari's root (``MINARI_DATASETS_PATH``, default
``~/.minari/datasets``): built in a temporary folder beside it and renamed into place, never replacing an
existing dataset unless ``--force``. minari is an optional extra: ``pip install "servegym[offline]"``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
from servegym.agents.cli import DATASET_SPLIT as DEFAULT_SPLIT

from servegym.errors import ConfigError
from servegym.outputs import make_folders, remove_empty_folders, signals_deferred

MAX_EPISODES = 100_000


def minari_module() -> Any:
    """The ``minari`` module, or a one-line ConfigError saying how to install it."""
    try:
        # minari's DataCollector records episodes through jax.tree_util (minari's "create" extra); without
        # it recording fails deep inside minari, so it is checked here with the same one-line hint.
        import jax.tree_util  # noqa: F401
        import minari
    except ImportError:
        raise ConfigError('servegym dataset needs minari with jax; install it with: '
                          'pip install "servegym[offline]"') from None
    return minari


def slug(text: str) -> str:
    """``text`` in the characters Minari's dataset names allow (``[-_A-Za-z0-9]``), lower case."""
    s = re.sub(r"[^-_a-z0-9]+", "-", text.lower().replace(".", "_"))
    return re.sub(r"-{2,}", "-", s).strip("-_") or "policy"


def dataset_id(env_id: str, policy: str, split: str | None) -> str:
    """``servegym/<env name>/<policy>-<split>-v0``, e.g. ``servegym/pdprovision-v0/static-peak-train-v0``."""
    return f"servegym/{slug(env_id.split('/')[-1])}/{slug(policy)}-{slug(split or 'default')}-v0"


def datasets_root(out: str | os.PathLike[str] | None) -> Path:
    """``out``, else Minari's own root (``MINARI_DATASETS_PATH`` or ``~/.minari/datasets``)."""
    if out:
        return Path(out).expanduser().absolute()
    env = os.environ.get("MINARI_DATASETS_PATH")
    return Path(env).expanduser().absolute() if env else Path.home() / ".minari" / "datasets"


def _steps_env_baselines(env: gym.Env, family: str) -> bool:
    """Whether the family's baselines choose each step's action through this env (pd on the absolute id)."""
    return family == "pd" and getattr(env.unwrapped, "action_mode", "absolute") == "absolute"


def recordable_policies(env_id: str, env: gym.Env) -> list[str]:
    """The ``--policy`` names whose decisions are actions of ``env`` (agents, ``--model``, always are)."""
    from servegym.agents import protocol
    from servegym.agents.families import family_for

    names = [n for n in protocol.policy_names(env_id) if n != protocol.FOLLOW]
    out = names if _steps_env_baselines(env, family_for(env_id).name) else []
    try:
        protocol.follow_action(env)
        out = [*out, protocol.FOLLOW]
    except ConfigError:
        pass
    return out


class _StepCounter(gym.Wrapper):
    """Counts the steps taken through it, to check that a runner played the recorded env."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        return self.env.step(action)


@dataclass(frozen=True)
class DatasetRecord:
    """What :func:`record_dataset` wrote: the id, its folder, episodes, steps and the wall time (s)."""

    dataset_id: str
    path: Path
    episodes: int
    steps: int
    wall_s: float
    kpi: str
    kpi_means: dict[str, float]


def _episode_runner(env_id: str, policy: str | None, model: str | None, env_kwargs: dict[str, Any]
                    ) -> tuple[str, dict[str, Any], Callable[[gym.Env, int], Any]]:
    """(label, env kwargs, run(env, seed) -> EpisodeResult) for the named policy or saved agent."""
    from servegym.agents import protocol
    from servegym.agents.families import family_for
    from servegym.agents.rollout import agent_act_fn, play_episode

    fam = family_for(env_id)
    if model is not None:
        from servegym.agents.train import load_agent

        agent, norm, run = load_agent(model, env_id=env_id, env_kwargs=env_kwargs)
        act = agent_act_fn(agent, norm)
        label = f"agent:{run.get('algo', type(agent).__name__.lower())}"
        kwargs = {**run.get("env_kwargs", {}), **env_kwargs}
        return label, kwargs, lambda env, seed: play_episode(env, act, seed, label, fam.metrics)
    assert policy is not None
    name = protocol.resolve_policy(env_id, policy)
    if name == protocol.FOLLOW:
        return name, env_kwargs, lambda env, seed: play_episode(
            env, lambda obs, info, e: protocol.follow_action(e), seed, name, fam.metrics)
    return name, env_kwargs, lambda env, seed: fam.run_baseline(env, name, seed)


@contextmanager
def _minari_root(path: Path) -> Iterator[None]:
    """Point Minari at ``path`` while a dataset is built there (Minari reads the variable at each call)."""
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = old


def _install(tmp_root: Path, root: Path, ds_id: str, force: bool) -> Path:
    """Move the dataset built under ``tmp_root`` to ``root`` (rename), with its namespaces' metadata files.
    SIGTERM and SIGINT wait until it is done (a few renames), so an interrupted run leaves the old dataset or
    the new one, never neither, a half-copied metadata file or the old one moved aside."""
    parts = ds_id.split("/")
    final = root / ds_id
    old = None
    try:
        with signals_deferred():
            for depth in range(1, len(parts)):  # namespace folders: copy their metadata file where missing
                src, dst = tmp_root.joinpath(*parts[:depth]), root.joinpath(*parts[:depth])
                dst.mkdir(parents=True, exist_ok=True)
                meta = src / "namespace_metadata.json"
                if meta.is_file() and not (dst / meta.name).exists():
                    tmp = dst / f".{meta.name}.tmp"
                    shutil.copyfile(meta, tmp)
                    os.replace(tmp, dst / meta.name)
            if final.exists():
                if not force:
                    raise ConfigError(f"dataset {ds_id!r} already exists in {str(root)!r}; allowed: --force to "
                                      "replace it")
                old = final.with_name(f".{final.name}.old-{os.getpid()}")
                os.rename(final, old)
            try:
                os.rename(tmp_root / ds_id, final)
            except OSError:
                if old is not None:  # the old dataset back in place: a failed install replaces nothing
                    os.rename(old, final)
                    old = None
                raise
    finally:  # also when the deferred signal is raised on leaving: the replaced dataset is never left behind
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return final


def refuse_links(root: Path, ds_id: str) -> None:
    """A one-line ConfigError when a folder of the dataset's path under ``root`` (a namespace, or the dataset
    itself) is a symbolic link: the dataset would be written, or with ``--force`` replaced, through it
    (outside ``root``), and the replaced link could not be removed as a folder."""
    parts = ds_id.split("/")
    for depth in range(1, len(parts) + 1):
        p = root.joinpath(*parts[:depth])
        if p.is_symlink():
            raise ConfigError(f"dataset {ds_id!r}: {str(p)!r} is a symbolic link; allowed: a real folder (servegym "
                              "writes and replaces datasets only inside --out, never through a link)")


def _mean(values: list[float]) -> float:
    finite = [v for v in values if v == v]
    return float(sum(finite) / len(finite)) if finite else float("nan")


def _scores(env_id: str, env: gym.Env, seeds: list[int], results: list[Any]) -> tuple[Any, str]:
    """Per-episode normalized scores of ``results`` and the scale's description: the id's naive, paper and
    oracle policies played on the same seeds of ``env`` (not recorded)."""
    from servegym.agents import protocol
    from servegym.agents.benchmark import run_policy_episodes

    roles = protocol.yardsticks(env_id).roles()
    names = list(dict.fromkeys(roles[r] for r in ("naive", "paper", "oracle") if r in roles))
    runs = run_policy_episodes(env_id, env, names, seeds)
    scale = protocol.make_scale(env_id, runs[roles["naive"]], runs[roles["paper"]],
                                runs[roles["oracle"]] if "oracle" in roles else None)
    return scale.scores(results), scale.name


def record_dataset(env_id: str, policy: str | None = None, model: str | None = None, episodes: int = 10,
                   split: str | None = DEFAULT_SPLIT, seed: int = 0, out: str | os.PathLike[str] | None = None,
                   force: bool = False, env_kwargs: dict[str, Any] | None = None, score: bool = False,
                   progress: bool = False) -> DatasetRecord:
    """Record ``episodes`` seeded episodes of ``policy`` (or the saved agent ``model``) on ``split`` of
    ``env_id`` as a Minari dataset under ``out`` (default: Minari's root); see the module docstring.
    ``score``: also play the id's scale anchors (naive, paper's method, oracle) on the same seeds, unrecorded,
    and store each episode's normalized score (:func:`servegym.agents.protocol.make_scale`). ``progress``:
    a progress bar over the episodes on stderr."""
    from servegym.agents import protocol
    from servegym.agents.benchmark import make_split_env
    from servegym.agents.families import family_for
    from servegym.agents.rollout import seeds_from

    minari = minari_module()
    if (policy is None) == (model is None):
        raise ConfigError("give exactly one of --policy NAME or --model PATH")
    if not 1 <= episodes <= MAX_EPISODES:
        raise ConfigError(f"--episodes = {episodes} is out of range; allowed: an integer in [1, {MAX_EPISODES}]")
    seeds = seeds_from(seed, episodes)
    label, kwargs, run = _episode_runner(env_id, policy, model, dict(env_kwargs or {}))
    root = datasets_root(out)
    if root.exists() and not root.is_dir():
        raise ConfigError(f"--out = {str(root)!r} is an existing file; allowed: a folder")
    ds_id = dataset_id(env_id, label, split)
    refuse_links(root, ds_id)  # refused before any episode is played, as is an existing dataset
    if (root / ds_id).exists() and not force:
        raise ConfigError(f"dataset {ds_id!r} already exists in {str(root)!r}; allowed: --force to replace it")
    env = make_split_env(env_id, split, kwargs)
    made: list[Path] = []
    tmp_root: Path | None = None
    collector: Any = None
    try:
        allowed_names = recordable_policies(env_id, env)
        if model is None and policy not in allowed_names and label not in allowed_names and not (
                label != protocol.FOLLOW and _steps_env_baselines(env, family_for(env_id).name)):
            allowed = recordable_policies(env_id, env)
            raise ConfigError(
                f"--policy = {policy!r} cannot be recorded on {env_id}: it does not act through this env's action "
                f"(the env's action cannot express its decisions); allowed: {', '.join(allowed) or 'none'}, "
                "or --model PATH")
        kpi = protocol.kpi_metric(env)
        # everything is built in one temporary folder under root, the collector's episode cache included
        # (Minari puts it under its own root otherwise, outside --out), and removed whatever happens
        made = make_folders(root)
        tmp_root = Path(tempfile.mkdtemp(prefix=".servegym-dataset-", dir=root))
        with _minari_root(tmp_root):
            collector = minari.DataCollector(env, record_infos=False)
        counter = _StepCounter(collector)  # outside the collector, so the stored env spec is the env's own
        t0 = time.perf_counter()
        results = []
        from servegym.estimates import episode_units, estimate
        from servegym.progress import Progress

        est, basis = estimate(env_id, ["agent" if model is not None else label], episode_units(env), len(seeds),
                              default_config=not kwargs)
        with Progress(len(seeds), f"dataset {label} on {env_id.split('/')[-1]} ({split})", "episode",
                      what=f"recording {label}'s episodes as {ds_id}", estimate_s=est, basis=basis,
                      disable=not progress) as bar:
            for s in bar.iterate(seeds):
                before = counter.steps
                res = run(counter, s)
                if counter.steps - before != res.length:  # the runner did not play the recorded env
                    raise ConfigError(f"--policy = {label!r} did not step the env it was recorded on; allowed: "
                                      f"{', '.join(recordable_policies(env_id, env))}, or --model PATH")
                results.append(res)
        scores, scale_name = _scores(env_id, env, seeds, results) if score else (None, "")
        with _minari_root(tmp_root), warnings.catch_warnings():
            # Minari recommends an author email and a code permalink; a local recording has neither
            warnings.filterwarnings("ignore", category=UserWarning, module=r"minari\.")
            eps = [{"seed": r.seed, "return": r.reward, "length": r.length, **r.metrics} for r in results]
            if scores is not None:
                for e, sc in zip(eps, scores, strict=True):
                    e["score"] = float(sc)
            means = {k: _mean([float(e[k]) for e in eps]) for k in eps[0] if k != "seed"}
            ds = collector.create_dataset(
                dataset_id=ds_id, algorithm_name=label, author="servegym",
                description=(f"{episodes} episodes of {label} on {env_id}, split {split!r}, reset seeds "
                             f"{seeds[0]}..{seeds[-1]}, recorded by servegym dataset; KPI {kpi} mean "
                             f"{means.get(kpi, float('nan')):.6g}"))
            ds.storage.update_metadata({
                "servegym_env_id": env_id, "servegym_policy": label, "servegym_split": str(split),
                "servegym_kpi": kpi, "servegym_episodes": json.dumps(eps, allow_nan=True),
                "servegym_kpi_means": json.dumps(means, allow_nan=True), "servegym_scale": scale_name})
            steps = int(ds.total_steps)
        wall = time.perf_counter() - t0
        path = _install(tmp_root, root, ds_id, force)
        made = []  # installed: the folders made for it hold it
    finally:
        if collector is not None:  # its episode cache (under tmp_root); it closes the env too
            with suppress(Exception):
                collector.close()
        if tmp_root is not None:
            shutil.rmtree(tmp_root, ignore_errors=True)
        remove_empty_folders(made)
        env.close()
    return DatasetRecord(dataset_id=ds_id, path=path, episodes=len(results), steps=steps, wall_s=wall, kpi=kpi,
                         kpi_means=means)
