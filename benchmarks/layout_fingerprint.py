"""Behaviour fingerprint of a family, for refactors that must change nothing (such as moving a family into layers).

Plays a fixed set of short, seeded runs through the public entry points (registered env ids in every
action mode, several splits and seeds; the multi-agent env; every baseline through the benchmark's own
runner; the hindsight oracle; the family's CLI reports) and records one sha256 digest per item of what
they return: observations, rewards, flags, infos, masks, renderings, spaces, error texts, tables. Floats
are hashed exactly (``float.hex``), so "identical" means bit-identical. Objects are hashed by their data,
never by their pickles or module paths, so moving a class to another module does not change a digest.

Usage (the first run records, a later run compares and exits 1 naming every item that differs)::

    python benchmarks/layout_fingerprint.py geo --out /tmp/geo_before.json
    python benchmarks/layout_fingerprint.py geo --check /tmp/geo_before.json

A family is a function that yields ``(item name, value)`` pairs (:data:`FAMILIES`); add one for the next
family's move. The digests are those of this machine's numpy/numba builds: compare runs made on the same
install, before and after a change (``geo``: 126 items, about 8 CPU-s with its CLI subprocesses, 10 with a
cold numba cache; ``pd``: 180 items, about 33 CPU-s with its CLI and cross-check subprocesses; ``npu``: 28 items, about 35 CPU-s
with its CLI subprocesses).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

Item = tuple[str, Any]


def canon(x: Any) -> Any:
    """A JSON-able, exact, module-path-free form of ``x`` (arrays by dtype, shape and bytes; floats by hex)."""
    if isinstance(x, np.ndarray):
        a = np.ascontiguousarray(x)
        if a.dtype == object:  # the elements, not their addresses
            return ["nd", "object", list(a.shape), canon(a.tolist())]
        return ["nd", str(a.dtype), list(a.shape), hashlib.sha256(a.tobytes()).hexdigest()]
    if isinstance(x, dict):
        return {str(k): canon(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
    if isinstance(x, (list, tuple)):
        return [canon(v) for v in x]
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return float(x).hex()
    if x is None or isinstance(x, str):
        return x
    if hasattr(x, "__dataclass_fields__"):
        return {"dataclass": type(x).__qualname__,
                **{k: canon(getattr(x, k)) for k in x.__dataclass_fields__}}
    if hasattr(x, "to_dict") and hasattr(x, "columns"):  # a DataFrame
        return canon({"columns": [str(c) for c in x.columns], "rows": x.to_dict(orient="list")})
    return f"<{type(x).__qualname__}>"


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(canon(value), sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------- drivers
def _error(fn: Callable[[], Any]) -> str:
    """The class name and text of the error ``fn`` raises ("no error" if none)."""
    try:
        fn()
    except Exception as exc:  # the text is what is fingerprinted
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def play_env(env: Any, seed: int, rng_seed: int, follow_p: float = 0.0, zero_p: float = 0.0,
             max_steps: int = 100_000, pickle_at: int | None = None,
             extra: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """One episode with seeded random actions (masked mostly, sometimes unmasked; ``follow_p``: the residual
    follow action; ``zero_p``: an all-zero Box action); everything the env returns, plus masks and renders.
    ``pickle_at``: at that step the env is pickled and the episode continues on the copy. ``extra(base env)``:
    recorded before each step as well (what else the family's env offers its drivers)."""
    rng = np.random.default_rng(rng_seed)
    obs, info = env.reset(seed=seed)
    base = env.unwrapped
    out: dict[str, Any] = {"reset": (obs, info), "steps": [], "spaces": (repr(env.observation_space),
                                                                          repr(env.action_space))}
    names = getattr(base, "observation_names", None)
    out["names"] = list(names) if names is not None else None
    out["bound"] = base.per_step_reward_bound() if hasattr(base, "per_step_reward_bound") else None
    space = env.action_space
    for k in range(max_steps):
        mask = base.action_masks() if hasattr(base, "action_masks") else None
        more = extra(base) if extra is not None else None
        if hasattr(space, "nvec"):  # MultiDiscrete: per dimension, masked (sb3-contrib's layout) or not
            if follow_p and rng.random() < follow_p:
                a = np.asarray(base.follow_action())
            else:
                cuts = np.cumsum(space.nvec)[:-1]
                parts = np.split(mask, cuts) if mask is not None else [np.ones(n, bool) for n in space.nvec]
                masked = rng.random() < 0.8
                a = np.array([int(rng.choice(np.flatnonzero(m))) if masked else int(rng.integers(len(m)))
                              for m in parts], dtype=np.int64)
        elif hasattr(space, "n"):
            n = int(space.n)
            if follow_p and rng.random() < follow_p:
                a = n - 1
            elif mask is not None and rng.random() < 0.8:
                a = int(rng.choice(np.flatnonzero(mask)))
            else:
                a = int(rng.integers(n))
        else:
            a = (np.zeros(space.shape, dtype=np.float32) if zero_p and rng.random() < zero_p
                 else rng.uniform(-1.0, 1.0, size=space.shape).astype(np.float32))
        if pickle_at is not None and k == pickle_at:
            env = pickle.loads(pickle.dumps(env))
            base = env.unwrapped
        obs, r, term, trunc, info = env.step(a)
        rec = [a, obs, r, term, trunc, info, mask]
        if extra is not None:
            rec.append(more)
        if k < 3 and base.render_mode is not None:
            rec.append(env.render())
        out["steps"].append(rec)
        if term or trunc:
            break
    out["after_end"] = _error(lambda: env.step(space.sample()))
    return out


def play_parallel(env: Any, seed: int, rng_seed: int) -> dict[str, Any]:
    """One multi-agent episode with seeded random actions per agent."""
    rng = np.random.default_rng(rng_seed)
    obs, infos = env.reset(seed=seed)
    out: dict[str, Any] = {"reset": (obs, infos), "steps": []}
    while env.agents:
        acts = {a: int(rng.integers(int(env.action_space(a).n))) for a in env.agents}
        out["steps"].append((acts, *env.step(acts)))
    return out


#: the one stderr line that depends on the user cache, not the code: the npu table cache's note when it builds
#: tables a cold cache lacks (``envs/npu/sim/table_cache.py``); a warm cache prints nothing
CACHE_NOTE = "servegym: building the npu best-fit tables of "


def run_cli(args: list[str], cwd: str) -> tuple[int, str, str]:
    """``servegym <args>`` in a subprocess: (exit status, stdout, stderr without the cache's build note, so a
    digest is the same whether the user cache was warm or cold)."""
    exe = Path(sys.executable).with_name("servegym")
    p = subprocess.run([str(exe), *args], cwd=cwd, capture_output=True, text=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1"}, check=False)
    err = "".join(line for line in p.stderr.splitlines(keepends=True) if not line.startswith(CACHE_NOTE))
    return p.returncode, p.stdout, err


# ------------------------------------------------------------------------------------------------- geo
def geo_items() -> Iterator[Item]:
    """Every geo env id and action mode, the multi-agent env, every baseline, the oracle and the reports."""
    import gymnasium as gym

    import servegym  # noqa: F401  (registers the ids)

    short = {"duration_s": 3.0}
    route, window = "servegym/GeoRoute-v0", "servegym/GeoRouteWindow-v0"
    envs: list[tuple[str, str, dict[str, Any], float, float]] = [
        # (label, id, config, follow_p, zero_p)
        ("route-direct", route, {"preset": "mini", "geo": short}, 0.0, 0.0),
        ("route-direct-poll-resid-fc", route, {"preset": "mini", "geo": short, "reward": "poll",
                                               "observe_residuals": True, "ci_forecast_h": 2,
                                               "ci_forecast_noise": 0.3, "ci_time_scale": 120.0}, 0.0, 0.0),
        ("route-residual-milp", route, {"preset": "mini", "geo": short, "action_mode": "residual"}, 0.5, 0.0),
        ("route-residual-greedy", route, {"preset": "mini", "geo": short, "action_mode": "residual",
                                          "reference": "greedy:0.5", "observe_residuals": True}, 0.5, 0.0),
        ("route-residual-moer", route, {"preset": "mini", "geo": short, "action_mode": "residual",
                                        "reference": "moer"}, 0.3, 0.0),
        ("route-residual-window-milp", route, {"preset": "mini", "geo": short, "action_mode": "residual",
                                               "decide_at": "window"}, 0.5, 0.0),
        ("route-residual-window-iterilp", route, {"preset": "mini", "geo": short, "action_mode": "residual",
                                                  "reference": "iter-ilp", "decide_at": "window"}, 0.5, 0.0),
        ("window-direct", window, {"preset": "mini", "geo": short}, 0.0, 0.2),
        ("window-direct-poll-resid-fc", window, {"preset": "mini", "geo": short, "reward": "poll",
                                                 "observe_residuals": True, "ci_forecast_h": 1,
                                                 "ci_time_scale": 120.0}, 0.0, 0.2),
        ("window-residual-milp", window, {"preset": "mini", "geo": {**short, "poll_interval_s": 5.0},
                                          "action_mode": "residual"}, 0.0, 0.3),
        ("window-residual-ilp", window, {"preset": "mini", "geo": short, "action_mode": "residual",
                                         "reference": "ilp"}, 0.0, 0.3),
    ]
    splits = {"route-direct": ("train", "validation", "test", "shift-load", "shift-topology", "shift-stale",
                               "shift-osl", "shift-ci-forecast", None),
              "window-direct": ("train", "test", "shift-stale", "shift-osl", "shift-ci-forecast", None),
              "route-residual-milp": ("train", "test", "shift-topology")}
    for label, env_id, cfg, follow_p, zero_p in envs:
        for split in splits.get(label, ("test",)):
            for seed in (0, 3):
                kw = dict(cfg, split=split)
                render = "ansi" if seed == 0 else "rgb_array"
                env = gym.make(env_id, config=kw, render_mode=render)
                pick = 5 if (seed == 3 and split == "test") else None
                yield (f"env {label} split={split} seed={seed}",
                       play_env(env, seed, 1000 + seed, follow_p, zero_p, pickle_at=pick))
    # the small preset (the README's config) and a max_steps truncation
    env = gym.make(route, config={"geo": {"duration_s": 1.0}, "max_steps": 40})
    yield "env route-direct small max_steps=40", play_env(env, 1, 7)
    env = gym.make(window, config={"geo": {"duration_s": 2.0}})
    yield "env window-direct small", play_env(env, 1, 7)

    # config and action errors (their texts are part of the interface)
    bad = [{"action_mode": "front"}, {"decide_at": "window"}, {"reference": "rr", "action_mode": "residual"},
           {"split": "nope"}, {"geo": {"seed": 1}}, {"w_slo": -1}, {"ci_forecast_h": 30}, {"max_steps": 0},
           {"preset": "huge"}, {"reward": "sparse"}]
    yield "config errors route", [_error(lambda b=b: gym.make(route, config=b)) for b in bad]
    yield "config errors window", [_error(lambda b=b: gym.make(window, config=b)) for b in bad]
    yield "config errors window decide_at", _error(lambda: gym.make(window, config={
        "action_mode": "residual", "decide_at": "window"}))
    yield "config errors window ref", _error(lambda: gym.make(window, config={"action_mode": "residual",
                                                                                "reference": "moer"}))
    yield "kwarg error", _error(lambda: gym.make(route, bogus=1))
    e = gym.make(route, config={"preset": "mini", "geo": short}).unwrapped
    e.reset(seed=0)
    yield "action errors route", [_error(lambda a=a: e.step(a)) for a in (-1, 4, 1.5, True, np.array([1, 2]))]
    yield "route follow_action direct", _error(e.follow_action)
    w = gym.make(window, config={"preset": "mini", "geo": short}).unwrapped
    w.reset(seed=0)
    yield "window placements", w.placements(np.array([0.5, -0.5, 0.0, 1.0][:w.n_dcs], dtype=np.float32))
    yield "action errors window", [_error(lambda a=a: w.step(a)) for a in (
        np.zeros(w.n_dcs + 1), np.full(w.n_dcs, np.nan), np.full(w.n_dcs, 2.0), "abc")]
    wr = gym.make(window, config={"preset": "mini", "geo": short, "action_mode": "residual"}).unwrapped
    wr.reset(seed=0)
    yield "window residual placements error", _error(lambda: wr.placements(np.zeros(wr.n_dcs)))
    rr = gym.make(route, config={"preset": "mini", "geo": short, "action_mode": "residual"}).unwrapped
    yield "route follow_action residual", rr.follow_action()

    # the multi-agent env (PettingZoo; skipped where the marl extra is missing)
    try:
        from servegym.envs.geo import parallel_env

        for cfg in ({"preset": "mini", "geo": short}, {"preset": "mini", "geo": short, "action_mode": "residual"}):
            yield f"parallel {cfg.get('action_mode', 'direct')}", play_parallel(parallel_env(cfg), 2, 5)
    except ImportError:
        yield "parallel", "pettingzoo missing"

    # every baseline through the benchmark's runner, on two scenarios of each id, and the oracle on one
    from servegym.agents.adapters import GEO_BASELINES, run_geo_baseline

    for env_id, cfg in ((route, {"preset": "mini", "geo": short, "split": "test"}),
                        (window, {"preset": "mini", "geo": {**short, "poll_interval_s": 5.0}, "split": "test",
                                  "action_mode": "residual"})):
        env = gym.make(env_id, config=cfg)
        for name in GEO_BASELINES:
            if name == "oracle" and env_id == window:
                continue  # the oracle on one id's scenarios (one simulation per candidate)
            for s in (0, 1):
                res = run_geo_baseline(env, name, s)
                yield f"baseline {env_id} {name} seed={s}", (res.policy, res.seed, res.reward, res.length,
                                                             res.metrics)

    # the simulator's own loop, with the full summary, in both decision modes and with predicted OSLs
    from servegym.baselines.geo import make_policy
    from servegym.envs.geo.sim.cluster import GeoSimulation
    from servegym.envs.geo.sim.config import preset

    for spec, over in (("rr", {}), ("greedy:0.9", {"osl_mode": "predicted"}), ("milp", {"decision_mode": "window"}),
                       ("green-llm", {"ci_mode": "hourly", "ci_start": "2023-03-01T05:00Z"})):
        from servegym.envs.geo.reports.compare import osl_predictor_for

        cfg = preset("mini", load="high", duration_s=2.0, **over)
        res = GeoSimulation(cfg, seed=4, osl_predictor=osl_predictor_for(cfg)).run(make_policy(spec))
        summary = {k: v for k, v in res.summary.items() if "wall" not in k and "cpu" not in k}
        yield f"simulation {spec} {sorted(over)}", summary

    # reports: compare (library and CLI), validate, the ML.ENERGY check, CLI help texts
    from servegym.envs.geo.reports.compare import json_records, run_comparison, summarize, text_table

    cfg = preset("mini", duration_s=2.0, osl_mode="oracle")
    runs = run_comparison(cfg, ["rr", "ll", "greedy:0.5", "moer", "milp", "green-llm"], 2)
    runs = runs.drop(columns=[c for c in runs.columns if "wall" in c])
    yield "compare runs", runs
    yield "compare summary", (text_table(summarize(runs)), json_records(runs))
    with tempfile.TemporaryDirectory() as tmp:
        rc, out, _err = run_cli(["geo", "compare", "--preset", "mini", "--sim-seconds", "2", "--seeds", "2",
                                "--policies", "rr,greedy:0.5,iter-ilp,moer", "--json", "--out-dir", tmp], tmp)
        yield "cli geo compare --json", (rc, out)
        files = {}
        for p in sorted(Path(tmp).iterdir()):
            files[p.name] = _csv_without_wall(p) if p.suffix == ".csv" else p.read_bytes()
        yield "cli geo compare files", {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}
        for args in (["geo", "--help"], ["geo", "compare", "--help"], ["geo", "validate", "--help"],
                     ["bench", "speed", "geo", "--help"], ["geo", "compare", "--preset", "huge"],
                     ["geo", "compare", "--policies", "rr,nope"], ["geo", "validate", "--rates", "x"]):
            yield f"cli {' '.join(args)}", run_cli(args, tmp)
        rc, out, _err = run_cli(["geo", "validate", "--rates", "2,10", "--requests", "100", "--json"], tmp)
        yield "cli geo validate --json", (rc, out)
    from servegym.envs.geo.reports.mlenergy_check import run_check

    yield "mlenergy run_check", run_check(models=None)[:2]


# -------------------------------------------------------------------------------------------------- pd
def _pd_extra(base: Any) -> Any:
    """What the pd env offers its drivers besides step(): the reference's action, forecasts, the mix."""
    return (base.reference_action(), base.forecast_rates(3), base.mix_index(), base.step_index)


def pd_items() -> Iterator[Item]:
    """Every pd env id and action mode (fluid and request dynamics), the vector envs, every baseline, the
    hindsight oracle, the model, both simulators, the reports and the CLI."""
    import gymnasium as gym

    import servegym  # noqa: F401  (registers the ids)

    absolute, residual, front = ("servegym/PDProvision-v0", "servegym/PDProvisionResidual-v0",
                                 "servegym/PDProvisionFront-v0")
    short = {"curriculum": [[150, 1]]}  # 150 periods of the drawn day (the full day on the test split)
    request = {"mode": "request", "scenario": {"horizon_steps": 6, "peak_rate_rps": 2.0}}
    envs: list[tuple[str, str, dict[str, Any], float, tuple[str | None, ...]]] = [
        # (label, id, config, follow_p, splits)
        ("abs", absolute, {}, 0.0, ("test",)),
        ("abs-short", absolute, short, 0.0, ("train", "validation", "shift-code", "shift-mooncake", "shift-burst",
                                             "shift-forecast", None)),
        ("abs-carbon-mean-curriculum", absolute, {"objective": "carbon", "arrivals": "mean", "random_start": True,
                                                  "curriculum": [[30, 1], [60, 0]]}, 0.0, ("train", "test")),
        ("abs-cost-terminates", absolute, {**short, "objective": "cost", "backlog_limit_s": 2.0, "gpu_budget": 4,
                                           "max_prefill": 2, "max_decode": 2, "termination_penalty": 5.0},
         0.0, ("test",)),
        ("abs-terminates-default-penalty", absolute, {**short, "backlog_limit_s": 1.0, "gpu_budget": 3,
                                                      "max_prefill": 2, "max_decode": 2}, 0.0, ("test",)),
        ("abs-startup0-initial", absolute, {**short, "startup_delay_s": 0.0, "initial_deployment": [2, 2]},
         0.0, ("test",)),
        ("abs-request", absolute, request, 0.0, ("test", None)),
        ("residual", residual, {}, 0.5, ("test",)),
        ("residual-short", residual, short, 0.5, ("train", "shift-forecast", "shift-mooncake", None)),
        ("residual-forecast-L3", residual, {**short, "reference": "min-power+forecast:0.97", "residual_levels": 3},
         0.5, ("test",)),
        ("residual-request", residual, request, 0.5, ("test",)),
        ("front", front, {}, 0.0, ("test",)),
        ("front-short", front, {**short, "front_eps": 0.1}, 0.0, ("train", "shift-mooncake", None)),
        ("front-request", front, request, 0.0, ("test",)),
        ("abs-as-residual-config", absolute, {**short, "action_mode": "residual"}, 0.5, ("test",)),
    ]
    for label, env_id, cfg, follow_p, splits in envs:
        for split in splits:
            for seed in (0, 3):
                render = "ansi" if seed == 0 else "rgb_array"
                env = gym.make(env_id, config=dict(cfg, split=split), render_mode=render)
                pick = 5 if (seed == 3 and split == "test") else None
                yield (f"env {label} split={split} seed={seed}",
                       play_env(env, seed, 2000 + seed, follow_p, pickle_at=pick, extra=_pd_extra))
    env = gym.make(absolute, split="test").unwrapped
    yield "pd default_config", env.default_config()
    yield "pd split scales", [gym.make(absolute, split=s).unwrapped.split_capacity_scale()
                              for s in ("train", "shift-mooncake")]
    yield "pd front slots", [gym.make(front, split=s).unwrapped.front_slots for s in ("train", None)]
    env.reset(seed=1)
    yield "pd hindsight arrivals", env.hindsight_arrivals()
    yield "pd absolute twin", [type(gym.make(i).unwrapped.absolute_twin().action_space).__name__
                               for i in (absolute, residual, front)]
    tw = gym.make(front, split="test").unwrapped.absolute_twin()
    yield "pd absolute twin config", tw.config
    yield "pd reset options", [_error(lambda o=o: gym.make(absolute, config={"curriculum": [[5, 1]]}).reset(
        seed=0, options=o)[1]) for o in ({"curriculum_stage": 0}, {"curriculum_stage": 1}, {"curriculum_stage": True})]

    # config, kwarg, id and action errors (their texts are part of the interface)
    bad = [{"action_mode": "nope"}, {"mode": "x"}, {"split": "nope"}, {"gpu_budget": 1}, {"max_prefill": 1.5},
           {"residual_levels": 9}, {"reference": "nope"}, {"reference": "min-power+forecast:2"},
           {"front_eps": 0.0}, {"curriculum": [[0, 1]]}, {"curriculum": 3}, {"initial_deployment": [9, 9]},
           {"initial_deployment": [0, 1]}, {"scenario": {"period_s": 0.1}}, {"scenario": {"bogus": 1}},
           {"scenario": {"start_hour": 3.0}}, {"objective": "money"}, {"pue": 5}, {"ttft_slo_s": 0},
           {"termination_penalty": -1}, {"mode": "request", "scenario": {"peak_rate_rps": 9000.0}},
           {"system": 3}, {"bogus": 1}]
    for env_id in (absolute, residual, front):
        yield f"config errors {env_id}", [_error(lambda b=b, i=env_id: gym.make(i, config=b)) for b in bad]
    yield "kwarg error", _error(lambda: gym.make(absolute, bogus=1))
    yield "render mode error", _error(lambda: gym.make(absolute, render_mode="human"))
    yield "id/config mode error", _error(lambda: gym.make(residual, config={"action_mode": "front"}))
    for env_id, acts in ((absolute, ([1, 2, 3], [-1, 1], [13, 1], [1.5, 1], "ab", [0, 0], [12, 8])),
                         (residual, ([5, 0], [0, 0, 0], [1.5, 2], 7, [4, 4])),
                         (front, (-1, 99, [1, 2], 1.5, np.array([2]), True))):
        e = gym.make(env_id, split="test").unwrapped
        yield f"step before reset {env_id}", _error(lambda e=e: e.step(e.action_space.sample()))
        e.reset(seed=2)
        yield f"action errors {env_id}", [_error(lambda a=a, e=e: e.step(a)[4]["action_adjusted"]) for a in acts]
        yield f"follow action {env_id}", _error(lambda e=e: e.follow_action().tolist())

    # the native vector envs (one numpy batch of fluid periods) and the SB3 VecEnv over them
    from servegym.envs.pd.vector import PDVectorEnv

    for mode, cfg in (("absolute", {}), ("residual", {}), ("front", {}), ("absolute", request)):
        venv = PDVectorEnv(3, config=dict(cfg, split="test"), action_mode=mode, max_episode_steps=40)
        rng = np.random.default_rng(11)
        rec: list[Any] = [venv.reset(seed=[1, 2, 3])]
        for _ in range(40):  # up to the truncation (the autoreset after it draws an unseeded scenario)
            masks = venv.action_masks()
            if hasattr(venv.single_action_space, "nvec"):
                cuts = np.cumsum(venv.single_action_space.nvec)[:-1]
                acts = np.stack([np.array([int(rng.choice(np.flatnonzero(m))) for m in np.split(row, cuts)])
                                 for row in masks])
            else:
                acts = np.array([int(rng.choice(np.flatnonzero(row))) for row in masks])
            rec.append((acts, masks, *venv.step(acts)))
        yield f"vector {mode} {sorted(cfg)}", rec
    try:
        from servegym.envs.pd.sb3_vector import PDSB3VecEnv

        venv = PDSB3VecEnv(PDVectorEnv(2, config={"split": "test"}, action_mode="residual", max_episode_steps=30))
        venv.seed(4)
        rec = [venv.reset()]
        for _ in range(30):
            rec.append(venv.step(np.array([[2, 2], [1, 3]])))
        yield "sb3 vector residual", rec
    except ImportError:
        yield "sb3 vector residual", "stable-baselines3 missing"

    # every baseline through the benchmark's runner, on two test scenarios of each id (the oracle included)
    from servegym.agents.adapters import PD_BASELINES, run_pd_baseline

    for env_id in (absolute, residual, front):
        env = gym.make(env_id, split="test")
        for name in PD_BASELINES:
            for s in (0, 1):
                res = run_pd_baseline(env, name, s)
                yield f"baseline {env_id} {name} seed={s}", (res.policy, res.seed, res.reward, res.length,
                                                             res.metrics)
    env = gym.make(absolute, split="shift-forecast")
    for name in PD_BASELINES:
        res = run_pd_baseline(env, name, 5)
        yield f"baseline shift-forecast {name}", (res.reward, res.length, res.metrics)
    from servegym.baselines.pd import compare_policies, plot_deployments
    from servegym.baselines.pd_oracle import solve_oracle

    for split, seed in (("test", 0), ("shift-burst", 2)):
        env = gym.make(absolute, split=split).unwrapped
        env.reset(seed=seed)
        yield f"oracle plan {split} {seed}", solve_oracle(env)
    results = compare_policies({"mode": "fluid"}, seed=1, max_steps=200, progress=False)
    yield "compare_policies", [(r.summary(), r.series) for r in results]
    with tempfile.TemporaryDirectory() as tmp:
        plot_deployments(results, f"{tmp}/dep.png")
        yield "plot_deployments png", hashlib.sha256(Path(f"{tmp}/dep.png").read_bytes()).hexdigest()

    # the model: capacities, operating points, grids, fronts, picks, mix tables, the min-power rule
    from servegym.envs.pd.sim.catalog import (
        fitted_serving,
        paper_system,
        sglang_profiled_kv_tokens,
        sglang_serving,
    )
    from servegym.envs.pd.sim.model import PDModel
    from servegym.envs.pd.sim.pareto import (
        eps_front,
        exact_front,
        max_capacity_under_power,
        min_power_deployment,
    )
    from servegym.envs.pd.sim.provisioning import MinPowerRule
    from servegym.envs.pd.sim.tables import mix_tables
    from servegym.envs.pd.sim.workload_moments import parse_workload

    yield "catalog", (paper_system(), fitted_serving(), sglang_serving(), sglang_profiled_kv_tokens())
    for spec in ("fixed:4096:256", "azure-conv", "azure-code", "mooncake"):
        for sem in ("paper", "sglang"):
            m = PDModel(parse_workload(spec), semantics=sem)
            g = m.grid(8)
            yield f"model {spec} {sem}", (
                m.workload, [m.capacity(p, d) for p, d in ((1, 1), (3, 1), (3, 2), (4, 2))],
                m.no_wait_capacity(2, 1), m.operating_point(3, 1, 2.0), g, eps_front(g.mu, g.power_w),
                exact_front(g.mu, g.power_w), min_power_deployment(g, 3.0, 0.85),
                max_capacity_under_power(g, 3000.0), m.power_w(np.array([1, 2]), np.array([1, 1]), 1.5))
    tab = mix_tables(np.array([[0.2, 0.5, 0.3], [1.0, 0.0, 0.0]]), paper_system(), 12, 8)
    yield "mix tables", (tab.mu, tab.mu_p, tab.mu_d_max, tab.t_p_quantiles_s, tab.in_mean, tab.out_mean)
    rule = MinPowerRule(tab, 16, 1.1, rho_bar=0.9, lookahead=1, eps=0.03)
    yield "min-power rule", [rule.mix_cache(m).front for m in (0, 1)]

    # the simulators: fluid formulas, the request-level simulator, saturation, case studies
    from servegym.envs.pd.reports.case_studies import comparison_rows, get_case_study, run_case_study
    from servegym.envs.pd.sim.fluid import backlogged_slo, steady_slo
    from servegym.envs.pd.sim.saturation import saturation_throughput
    from servegym.envs.pd.sim.simulator import PDSimulator, pd_length_sampler
    from servegym.envs.workload import Requests, poisson_arrivals

    m = PDModel(parse_workload("azure-conv"))
    yield "fluid formulas", _fluid_formulas(steady_slo, backlogged_slo)
    for spec, dep in (("azure-conv", (3, 1)), ("fixed:4096:256", (2, 2))):
        model = PDModel(parse_workload(spec))
        sim = PDSimulator(model, *dep, seed=3, startup_delay_s=30.0)
        rng = np.random.default_rng(5)
        t = poisson_arrivals(2.0, 120.0, rng)
        lin, lout = pd_length_sampler(spec).sample(t.size, rng)
        sim.submit(Requests(t, lin, lout))
        sim.advance(60.0)
        w1 = sim.window_metrics()
        sim.set_deployment(dep[0] + 1, 1)
        sim.advance(120.0)
        yield f"request simulator {spec}", (w1, sim.window_metrics(), sim.deployment(), sim.counters(),
                                            sim.kv_state(), sim.request_table(), sim.power_w())
    sat = saturation_throughput(m, 1, 1, pd_length_sampler("azure-conv"), seed=0, warmup_s=100.0, window_s=200.0)
    yield "saturation", (sat, sat.rel_error)
    for name in ("rate-drop", "scale-down"):
        cs, res, model = run_case_study(name, seed=1, sample_s=5.0)
        yield f"case study {name}", (get_case_study(name), res, comparison_rows(cs, res, model))

    # reports: validate, the CLI (JSON outputs, texts, plots, help and error texts), the crosscheck benchmark
    from servegym.envs.pd.reports.validate import all_required_pass, run_checks

    checks = run_checks()
    yield "validate checks", ([c.as_dict() for c in checks], all_required_pass(checks))
    with tempfile.TemporaryDirectory() as tmp:
        runs = [["pd", "capacity", "--workload", "azure-conv", "--deployment", "3p1d", "--json"],
                ["pd", "capacity", "--workload", "mooncake", "--deployment", "2p2d", "--semantics", "sglang"],
                ["pd", "capacity", "--workload", "fixed:2048:128", "--deployment", "1p1d", "--kv-tokens",
                 "sglang-profiled", "--reserve", "256", "--json"],
                ["pd", "pareto", "--workload", "azure-code", "--rate", "3", "--budget", "3000", "--json"],
                ["pd", "pareto", "--workload", "azure-conv", "--max-instances", "6", "--rate", "2", "--budget",
                 "2500", "--plot", f"{tmp}/pareto.png"],
                ["pd", "validate", "--json"], ["pd", "validate"],
                ["pd", "simulate", "--workload", "azure-conv", "--deployment", "3p1d", "--rate", "2",
                 "--duration", "60", "--warmup", "20", "--json"],
                ["pd", "simulate", "--deployment", "2p1d", "--load", "0.7", "--duration", "60", "--warmup", "20"],
                ["pd", "simulate", "--deployment", "1p1d", "--trace", "azure-code", "--time-scale", "0.2",
                 "--duration", "60", "--warmup", "10", "--json"],
                ["pd", "case-study", "decode-removal", "--sample", "5", "--json"],
                ["pd", "case-study", "rate-drop", "--sample", "5", "--plot", f"{tmp}/cs.png"],
                ["pd", "compare", "--steps", "120", "--seed", "2", "--json"],
                ["pd", "compare", "--steps", "60", "--plot", f"{tmp}/cmp.png"],
                ["pd", "compare", "--steps", "4", "--mode", "request", "--json"]]
        for args in runs:
            yield f"cli {' '.join(a.replace(tmp, 'TMP') for a in args)}", _without_wall(run_cli(args, tmp), tmp)
        yield "cli pd png files", {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                                   for p in sorted(Path(tmp).glob("*.png"))}
        for args in (["pd"], ["pd", "--help"], ["pd", "capacity", "--help"], ["pd", "pareto", "--help"],
                     ["pd", "validate", "--help"], ["pd", "simulate", "--help"], ["pd", "case-study", "--help"],
                     ["pd", "compare", "--help"], ["pd", "capacity", "--workload", "nope", "--deployment", "1p1d"],
                     ["pd", "capacity", "--workload", "azure-conv", "--deployment", "0p1d"],
                     ["pd", "pareto", "--workload", "azure-conv", "--eps", "2"],
                     ["pd", "simulate", "--deployment", "1p1d", "--rate", "-1"],
                     ["pd", "simulate", "--deployment", "1p1d", "--rate", "500", "--max-requests", "10"],
                     ["pd", "case-study", "nope"], ["pd", "compare", "--steps", "0"],
                     ["pd", "capacity", "--workload", "azure-conv", "--deployment", "1p1d", "--kv-tokens", "x"]):
            yield f"cli {' '.join(args)}", run_cli(args, tmp)
        exe = [sys.executable, str(Path(__file__).with_name("pd_crosscheck.py"))]
        p = subprocess.run([*exe, "--workloads", "fixed:4096:256", "--deployments", "1p1d", "--seeds", "1",
                            "--out", f"{tmp}/cc"], cwd=tmp, capture_output=True, text=True, check=False,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
        data = json.loads(Path(f"{tmp}/cc.json").read_text()) if p.returncode == 0 else p.stderr
        if isinstance(data, dict):
            data = {"meta": {k: v for k, v in data["meta"].items() if "wall" not in k},
                    "rows": [{k: v for k, v in r.items() if "wall" not in k} for r in data["rows"]]}
        yield "pd_crosscheck json", (p.returncode, data)


def _fluid_formulas(steady_slo: Callable[..., Any], backlogged_slo: Callable[..., Any]) -> Any:
    """The fluid model's SLO formulas on a few operating points, scalar and vectorized."""
    tpq = np.linspace(0.05, 3.0, 64)
    one = steady_slo(3.0, 3, 2, 1.2, 0.8, 0.02, 1e-6, 210.0, tpq, 0.6, 10.0, 0.05)
    many = steady_slo(np.array([1.0, 3.0, 5.0]), np.array([2, 3, 4]), np.array([1, 2, 2]), 1.2, 0.8, 0.02, 1e-6,
                      210.0, tpq, 0.6, 2.0, 0.05)
    back = backlogged_slo(np.array([0.0, 50.0]), np.array([2.0, 4.0]), np.array([3.0, 3.0]), np.array([60.0, 30.0]),
                          np.array([2, 3]), np.array([1, 2]), 1.2, 0.8, 0.02, 1e-6, 210.0, tpq, 0.6,
                          np.array([40.0, 80.0]), 10.0, 0.05)
    return one, many, back


def _without_wall(res: tuple[int, str, str], tmp: str) -> tuple[int, str, str]:
    """A CLI result with the temp folder's name and any wall-clock figures taken out."""
    import re

    rc, out, err = (res[0], res[1].replace(tmp, "TMP"), res[2].replace(tmp, "TMP"))
    out = re.sub(r'"(wall_s|wall_seconds|elapsed_s)": [0-9.e+-]+', r'"\1": 0', out)
    err = "\n".join(line for line in err.splitlines() if not re.match(r"\[\d\d:\d\d:\d\d\] ", line))  # progress
    return rc, out, err


def _csv_without_wall(p: Path) -> bytes:
    import pandas as pd

    df = pd.read_csv(p)
    buf = io.StringIO()
    df.drop(columns=[c for c in df.columns if "wall" in c]).to_csv(buf, index=False)
    return buf.getvalue().encode()


def npu_items() -> Iterator[Item]:
    """Both npu env ids on 2 seeds (short episodes), the fluid cross-check, and every ``servegym npu`` command
    (--json and text outputs, png files, help and error texts)."""
    import gymnasium as gym

    import servegym  # noqa: F401  (registers the ids)

    for env_id in ("servegym/NPUAutoscale-v0", "servegym/NPUAutoscaleResidual-v0"):
        for seed in (0, 1):
            env = gym.make(env_id)
            yield f"{env_id} seed {seed}", play_env(env, seed, rng_seed=seed + 7, max_steps=12,
                                                    pickle_at=5)
            env.close()
    from servegym.envs.npu.reports.fluid_check import crosscheck
    from servegym.envs.npu.sim.cluster import ClusterConfig
    from servegym.envs.npu.sim.workloads import make_workload

    wl = make_workload("azure", hours=0.25, seed=3, azure_trace="azure-code", start_hour=10.0)
    rows = crosscheck(ClusterConfig(model="Llama-3-8B", n_candidates=1), wl, seed=1)
    yield "fluid_check crosscheck", [{k: v for k, v in r.items() if not k.startswith("cpu_s")} for r in rows]
    with tempfile.TemporaryDirectory() as tmp:
        runs = [["npu", "compare", "--model", "Llama-3-8B", "--hours", "0.25", "--fast", "--json"],
                ["npu", "compare", "--model", "Llama-3-8B", "--hours", "0.25", "--fast", "--plot-dir", tmp],
                ["npu", "compare", "--model", "Llama-3-70B", "--hours", "0.1", "--objective", "cost",
                 "--policies", "base,neuscale"],
                ["npu", "dse", "--model", "llama-3-8b", "--json"],
                ["npu", "dse", "--model", "Llama-3-8B", "--phase", "decode", "--fallbacks",
                 "--plot", f"{tmp}/dse.png"],
                ["npu", "dse", "--model", "Llama-3-70B", "--objective", "cost", "--phase", "prefill"],
                ["npu", "catalog", "--json"], ["npu", "catalog"]]
        for args in runs:
            yield f"cli {' '.join(a.replace(tmp, 'TMP') for a in args)}", _without_wall(run_cli(args, tmp), tmp)
        yield "cli npu png files", {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                                    for p in sorted(Path(tmp).glob("*.png"))}
        for args in (["npu"], ["npu", "--help"], ["npu", "dse", "--help"], ["npu", "catalog", "--help"],
                     ["npu", "compare", "--help"], ["npu", "dse", "--model", "nope"],
                     ["npu", "dse", "--model", "Llama-3-8B", "--phase", "x"],
                     ["npu", "dse", "--model", "Llama-3-8B", "--objective", "x"],
                     ["npu", "compare", "--hours", "0"], ["npu", "compare", "--model", "nope"],
                     ["npu", "compare", "--rate-rpm", "-1"], ["npu", "compare", "--trace", "nope", "--hours", "0.1"],
                     ["npu", "compare", "--policies", "x", "--hours", "0.1"],
                     ["npu", "compare", "--max-requests", "10"]):
            yield f"cli {' '.join(args)}", _without_wall(run_cli(args, tmp), tmp)  # some print progress first


FAMILIES: dict[str, Callable[[], Iterator[Item]]] = {"geo": geo_items, "pd": pd_items, "npu": npu_items}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("family", choices=sorted(FAMILIES))
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", help="write the digests to this JSON file (refuses to overwrite)")
    g.add_argument("--check", help="compare with the digests in this JSON file; exit 1 on any difference")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    c0 = time.process_time()
    digests: dict[str, str] = {}
    for name, value in FAMILIES[args.family]():
        if name in digests:
            raise SystemExit(f"duplicate item {name!r}")
        digests[name] = digest(value)
    total = hashlib.sha256("".join(f"{k}={v}\n" for k, v in digests.items()).encode()).hexdigest()
    cpu = time.process_time() - c0
    print(f"{args.family}: {len(digests)} items, total {total[:16]}, {cpu:.1f} CPU-s (this process; the CLI "
          "subprocesses add their own)")
    return record_or_check(digests, {"family": args.family, "total": total}, args.out, args.check)


def identity_main(label: str, items: Callable[[], Iterator[Item]], description: str,
                  argv: list[str] | None = None) -> int:
    """The command line of a family's bit-identity check (``benchmarks/<family>_identity.py``): digest every
    item of ``items()`` and ``--out`` record them or ``--check`` compare them (exit status 1 on a difference)."""
    ap = argparse.ArgumentParser(description=description)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", help="write the digests to this JSON file (refuses to overwrite)")
    g.add_argument("--check", help="compare with the digests in this JSON file; exit 1 on any difference")
    args = ap.parse_args(argv)
    c0 = time.process_time()
    digests: dict[str, str] = {}
    for name, value in items():
        if name in digests:
            raise SystemExit(f"duplicate item {name!r}")
        digests[name] = digest(value)
        print(f"  {name}: {digests[name][:16]} ({time.process_time() - c0:.1f} CPU-s)", flush=True)
    total = hashlib.sha256("".join(f"{k}={v}\n" for k, v in digests.items()).encode()).hexdigest()
    print(f"{label} identity: {len(digests)} items, total {total[:16]}, {time.process_time() - c0:.1f} CPU-s")
    return record_or_check(digests, {"total": total}, args.out, args.check)


def record_or_check(digests: dict[str, str], head: dict[str, str], out: str | None, check: str | None) -> int:
    """Write ``head`` and the ``digests`` to the new file ``out``, or compare them with those of ``check``
    (prints every item that differs; returns 1 if any does, else 0)."""
    if out:
        path = Path(out)
        if path.exists():
            raise SystemExit(f"--out {path} exists; allowed: a new file")
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**head, "items": digests}, indent=1) + "\n")
        tmp.replace(path)
        return 0
    assert check is not None
    ref = json.loads(Path(check).read_text())["items"]
    diff = [k for k in sorted(set(ref) | set(digests)) if ref.get(k) != digests.get(k)]
    for k in diff:
        print(f"DIFFERS: {k}")
    print("identical" if not diff else f"{len(diff)} of {len(ref)} items differ")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
