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
cold numba cache).
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
             max_steps: int = 100_000, pickle_at: int | None = None) -> dict[str, Any]:
    """One episode with seeded random actions (masked mostly, sometimes unmasked; ``follow_p``: the residual
    follow action; ``zero_p``: an all-zero Box action); everything the env returns, plus masks and renders.
    ``pickle_at``: at that step the env is pickled and the episode continues on the copy."""
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
        if hasattr(space, "n"):
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


def run_cli(args: list[str], cwd: str) -> tuple[int, str, str]:
    """``servegym <args>`` in a subprocess: (exit status, stdout, stderr)."""
    exe = Path(sys.executable).with_name("servegym")
    p = subprocess.run([str(exe), *args], cwd=cwd, capture_output=True, text=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1"}, check=False)
    return p.returncode, p.stdout, p.stderr


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
    from servegym.envs.geo.cluster import GeoSimulation
    from servegym.envs.geo.config import preset

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


def _csv_without_wall(p: Path) -> bytes:
    import pandas as pd

    df = pd.read_csv(p)
    buf = io.StringIO()
    df.drop(columns=[c for c in df.columns if "wall" in c]).to_csv(buf, index=False)
    return buf.getvalue().encode()


FAMILIES: dict[str, Callable[[], Iterator[Item]]] = {"geo": geo_items}


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
    if args.out:
        path = Path(args.out)
        if path.exists():
            raise SystemExit(f"--out {path} exists; allowed: a new file")
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"family": args.family, "total": total, "items": digests}, indent=1) + "\n")
        tmp.replace(path)
        return 0
    ref = json.loads(Path(args.check).read_text())["items"]
    diff = [k for k in sorted(set(ref) | set(digests)) if ref.get(k) != digests.get(k)]
    for k in diff:
        print(f"DIFFERS: {k}")
    print("identical" if not diff else f"{len(diff)} of {len(ref)} items differ")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
