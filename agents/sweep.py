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
      - {agent: runs/PDProvision-v0_maskable-ppo_s0/model.zip, name: mppo}   # or "agent:PATH"
    seeds: [0, 1, 2]                    # or {start: 0, count: 3}

Each cell (policy, scenario, seed) plays one seeded episode (:mod:`servegym.agents.rollout`) and
becomes one row of a tidy DataFrame: ``sweep, scenario, env_id, policy, seed, reward, length,
<domain scalars...>, wall_s``. Cells are independent, so the grid runs unchanged on a local
``spawn`` process pool (default) or on Ray (``--ray``, local or ``--ray ADDRESS``; servegym must be
importable on every Ray node).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from servegym.agents.families import family_accepts, family_for

from servegym.errors import ConfigError


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


def _seeds(raw: Any) -> tuple[int, ...]:
    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if isinstance(raw, dict):
        start, count = raw.get("start", 0), raw.get("count", 1)
        if not (is_int(start) and is_int(count)) or start < 0 or not 1 <= count <= MAX_SWEEP_SEEDS:
            raise ConfigError(f"seeds = {raw!r}; allowed: start an integer >= 0, count an integer in "
                              f"[1, {MAX_SWEEP_SEEDS}]")
        return tuple(range(start, start + count))
    if is_int(raw) and raw >= 0:
        return (raw,)
    if isinstance(raw, list) and 0 < len(raw) <= MAX_SWEEP_SEEDS and all(is_int(s) and s >= 0 for s in raw):
        return tuple(raw)
    raise ConfigError(f"seeds = {str(raw)[:80]}; allowed: integers >= 0 (a list of at most {MAX_SWEEP_SEEDS}, "
                      "one, or {start, count})")


def parse_sweep(doc: Any, base_dir: Path | None = None, source: str = "sweep config") -> SweepConfig:
    """Validate a sweep document; agent paths are resolved against ``base_dir`` (the config's folder)."""
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
        kwargs = sc.get("env_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise ConfigError(f"{source}: scenarios[{i}].env_kwargs must be a mapping")
        scenarios.append(Scenario(str(sc.get("name", f"s{i}")), str(env_id), dict(kwargs)))
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
                raise ConfigError(f"{source}: policies[{i}] = {p!r}; allowed: a baseline name or {{agent: PATH}}")
            path = Path(str(p["agent"]))
            if not path.is_absolute() and base_dir is not None and not path.exists():
                path = base_dir / path
            if not path.is_file():
                raise ConfigError(f"{source}: policies[{i}].agent = {str(p['agent'])!r}: no such file")
            policies.append(PolicyRef(str(p.get("name", path.parent.name or "agent")), str(path)))
        elif isinstance(p, str):
            policies.append(PolicyRef(p))
        else:
            raise ConfigError(f"{source}: policies[{i}] = {p!r}; allowed: a baseline name or {{agent: PATH}}")
    if len({p.name for p in policies}) != len(policies):
        raise ConfigError(f"{source}: policy names must be unique (give agents a name:)")
    for sc in scenarios:
        fam = family_for(sc.env_id)
        for p in policies:
            if p.agent_path is None and (fam.run_baseline is None or not family_accepts(fam, p.name)):
                raise ConfigError(f"{source}: policy {p.name!r} is not a baseline of {sc.env_id} "
                                  f"(family {fam.name}); allowed: {', '.join(fam.baselines) or 'agents only'}")
    return SweepConfig(str(doc.get("name", "sweep")), tuple(scenarios), tuple(policies), _seeds(doc.get("seeds", [0])))


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
              fn: Any = None, tidy: bool = True) -> Any:
    """The grid on a ``spawn`` process pool (``workers`` default: CPU count, at most the cell count);
    ``workers=1`` runs the cells in this process (no start-up cost, same results). ``fn`` (a
    module-level function of one task dict; default :func:`run_task`) plays a cell; ``tidy=False``
    returns its outputs as a list instead of the tidy DataFrame."""
    fn = run_task if fn is None else fn
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm.auto import tqdm

    n = workers or os.cpu_count() or 1
    n = max(1, min(n, len(tasks)))
    rows = []
    if n == 1:
        for t in tqdm(tasks, desc="sweep (in process)", unit="cell", disable=not progress):
            rows.append(fn(t))
        return _tidy(rows) if tidy else rows
    with ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn")) as pool, \
            tqdm(total=len(tasks), desc=f"sweep ({n} processes)", unit="cell", disable=not progress) as bar:
        futures = [pool.submit(fn, t) for t in tasks]
        for fut in as_completed(futures):
            rows.append(fut.result())
            bar.update(1)
    return _tidy(rows) if tidy else rows


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray needs Ray, which is not installed; install it with "
                          "pip install 'servegym[ray]' (or run without --ray on the local process pool)") from None
    return ray


def run_ray(tasks: Sequence[dict[str, Any]], address: str | None = None, workers: int | None = None,
            progress: bool = True, fn: Any = None, tidy: bool = True) -> Any:
    """The grid on Ray: a local Ray instance (``address`` None) or an existing cluster (``"auto"`` or
    ``"ray://host:10001"``). ``workers`` caps the CPUs of a local instance."""
    from tqdm.auto import tqdm

    ray = _import_ray()
    started = False
    if not ray.is_initialized():
        init: dict[str, Any] = {"address": address, "include_dashboard": False, "log_to_driver": False,
                                "configure_logging": False}
        if address is None and workers:
            init["num_cpus"] = workers
        ray.init(**init)
        started = True
    try:
        remote = ray.remote(num_cpus=1)(run_task if fn is None else fn)
        pending = [remote.remote(t) for t in tasks]
        rows = []
        with tqdm(total=len(tasks), desc="sweep (ray)", unit="cell", disable=not progress) as bar:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                rows.extend(ray.get(done))
                bar.update(len(done))
    finally:
        if started:
            ray.shutdown()
    return _tidy(rows) if tidy else rows


def write_results(df: pd.DataFrame, out: str | Path) -> Path:
    """CSV, or Parquet for a ``.parquet`` path (needs pyarrow or fastparquet)."""
    p = Path(out)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix == ".parquet":
        try:
            df.to_parquet(p, index=False)
        except ImportError:
            raise ConfigError(f"--out = {str(out)!r}: Parquet needs pyarrow (pip install pyarrow); "
                              "or write CSV with --out results.csv") from None
    elif p.suffix in (".csv", ""):
        df.to_csv(p if p.suffix else p.with_suffix(".csv"), index=False)
    else:
        raise ConfigError(f"--out = {str(out)!r}; allowed: a .csv or .parquet path")
    return p


def run_sweep(cfg: SweepConfig, workers: int | None = None, ray_address: str | bool | None = False,
              progress: bool = True) -> pd.DataFrame:
    """Run every cell: on Ray when ``ray_address`` is not False (None/"" = a local Ray), else locally."""
    tasks = cfg.tasks()
    if ray_address is not False:
        return run_ray(tasks, address=ray_address or None, workers=workers, progress=progress)
    return run_local(tasks, workers=workers, progress=progress)


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
