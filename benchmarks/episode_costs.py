"""CPU-s per unit of work of every policy, for the up-front estimates of evaluate, dataset and the compare commands.

The long commands print their estimated time before they start (:mod:`servegym.estimates`): the work's size in
units, known from the config before anything runs, times the CPU-s per unit measured here. The units:

* geo (``geo compare`` runs and the GeoRoute ids' episodes): 1,000 simulated requests (``rate_rps x duration_s``);
* pd (``pd compare`` and the PDProvision ids' episodes): one provisioning period;
* npu: one 5-minute epoch of the NPUAutoscale ids' episodes; 1,000 replayed requests of ``npu compare``.

Each context is measured in a process of its own (when no ``--only`` is given) with an empty disk cache of the npu
tables (a first run's cost), at the default config of its context (the env id's ``gym.make`` default; the compare commands'
defaults, geo compare with ``--sim-seconds 10``, npu compare with ``--hours 2``), one episode or run per policy after a warm-up, so one-time
costs (catalogs, workloads, kernels) are excluded and reported as ``setup`` (an env's ``gym.make`` + first
``reset``; npu compare's workload and catalog). ``agent`` is an env episode with sampled valid actions plus the
forward pass of a default SB3 MlpPolicy (measured per call). One process, one thread, on the shared 2-core dev
machine; other configs (bigger topologies, other models) differ, which the commands' start lines say.

Run: ``.venv/bin/python benchmarks/episode_costs.py`` (writes ``benchmarks/results/episode_costs.json`` and
``.md`` atomically; ``src/servegym/estimates.py`` holds the same numbers, a test checks they agree).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

RESULTS = Path(__file__).resolve().parent / "results"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _timed(fn: Any) -> tuple[float, Any]:
    c0 = _cpu()
    out = fn()
    return _cpu() - c0, out


def _inference_s_per_step(env: Any) -> float:
    """CPU-s of one ``predict`` of a default SB3 (Maskable)PPO MlpPolicy on this env's observations."""
    try:
        import torch
        from stable_baselines3 import PPO
    except ImportError:
        return 0.0
    torch.set_num_threads(1)
    model = PPO("MlpPolicy", env, device="cpu", n_steps=64)
    obs, _ = env.reset(seed=0)
    model.predict(obs, deterministic=True)
    c, _ = _timed(lambda: [model.predict(obs, deterministic=True) for _ in range(200)])
    return c / 200


def env_units(env: Any) -> float:
    from servegym.estimates import episode_units

    units = episode_units(env)
    assert units is not None
    return units


def measure_env(env_id: str) -> dict[str, Any]:
    import gymnasium as gym
    import numpy as np
    from servegym.agents.families import family_for, run_baseline_episodes
    from servegym.agents.rollout import play_episode

    fam = family_for(env_id)
    setup, env = _timed(lambda: gym.make(env_id))
    c, _ = _timed(lambda: env.reset(seed=0))
    setup += c
    units = env_units(env.unwrapped)
    rng = np.random.default_rng(0)

    def sampled(obs: Any, info: dict, e: Any) -> Any:
        masks = getattr(e.unwrapped, "action_masks", None)
        space = e.action_space
        if masks is None:
            return space.sample()
        m = np.asarray(masks(), dtype=np.int8)
        if hasattr(space, "nvec"):
            parts, i = [], 0
            for n in space.nvec.tolist():
                allowed = np.flatnonzero(m[i:i + n])
                parts.append(int(rng.choice(allowed)) if allowed.size else 0)
                i += n
            return np.array(parts, dtype=space.dtype)
        return space.sample(mask=m)

    per_unit: dict[str, float] = {}
    c, res = _timed(lambda: play_episode(env, sampled, 0, "agent", fam.metrics))
    infer = _inference_s_per_step(env)
    per_unit["agent"] = (c + infer * res.length) / units
    for name in fam.baselines:
        c, _ = _timed(lambda name=name: run_baseline_episodes(fam, env, [name], [0]))
        per_unit[name] = c / units
        print(f"  {env_id} {name}: {c:.2f} CPU-s", flush=True)
    env.close()
    return {"unit_count": units, "setup_cpu_s": setup, "cpu_s_per_unit": per_unit,
            "inference_cpu_s_per_step": infer}


def measure_geo_compare(sim_seconds: float) -> dict[str, Any]:
    from servegym.envs.geo.cli import DEFAULT_POLICIES, DEFAULT_PRESET
    from servegym.envs.geo.reports.compare import run_one
    from servegym.envs.geo.sim.config import preset

    cfg = preset(DEFAULT_PRESET, load="moderate", duration_s=sim_seconds, osl_mode="oracle")
    units = cfg.rate_rps * cfg.duration_s / 1000.0
    setup, _ = _timed(lambda: run_one(cfg, "rr", 0))  # warm-up: kernels, profiles, topology
    per_unit = {}
    for spec in ["rr", *[s for s in DEFAULT_POLICIES.split(",") if s != "rr"]]:
        c, _ = _timed(lambda spec=spec: run_one(cfg, spec, 0))
        per_unit[spec] = c / units
        print(f"  geo compare {spec}: {c:.2f} CPU-s", flush=True)
    return {"unit_count": units, "setup_cpu_s": setup, "cpu_s_per_unit": per_unit,
            "config": f"preset {DEFAULT_PRESET}, moderate load, {sim_seconds:g} s"}


def measure_pd_compare() -> dict[str, Any]:
    from servegym.baselines.pd import compare_policies, default_policies

    setup, _ = _timed(lambda: compare_policies(None, seed=0, max_steps=10))
    per_unit = {}
    for p in default_policies():
        c, res = _timed(lambda p=p: compare_policies(None, seed=0, policies=[p]))
        per_unit[res[0].policy] = c / res[0].steps
        print(f"  pd compare {res[0].policy}: {c:.2f} CPU-s", flush=True)
    return {"unit_count": 1440, "setup_cpu_s": setup, "cpu_s_per_unit": per_unit, "config": "default day"}


def measure_npu_compare(fidelity: str) -> dict[str, Any]:
    from servegym.baselines.npu import POLICIES, compare
    from servegym.envs.npu.sim.config import ClusterConfig
    from servegym.envs.npu.sim.vpods import ConfigCatalog
    from servegym.envs.npu.sim.workloads import make_workload

    model, hours = "DeepSeek-V3-671B", 2.0  # the CLI's default model and trace, a shorter replay
    # setup: what compare() builds once before the policies (the workload and the catalog), first cold (what a
    # command pays), then again warm (what each compare() call below pays besides its policy; subtracted)
    def build() -> Any:
        wl = make_workload("azure", hours=hours, seed=0)
        ConfigCatalog(ClusterConfig(model=model, n_candidates=1))
        return wl

    c_wl, wl = _timed(lambda: make_workload("azure", hours=hours, seed=0))
    setup, _ = _timed(lambda: ConfigCatalog(ClusterConfig(model=model, n_candidates=1)))
    again, _ = _timed(build)
    units = len(wl.requests) / 1000.0
    per_unit = {"workload": c_wl / units}  # built once per command, in proportion to its requests
    for p in POLICIES:
        c, _ = _timed(lambda p=p: compare(model, "azure", hours, (p,), fidelity=fidelity))
        per_unit[p] = max(c - again, 0.0) / units
        print(f"  npu compare ({fidelity}) {p}: {c:.2f} CPU-s", flush=True)
    return {"unit_count": units, "setup_cpu_s": setup, "cpu_s_per_unit": per_unit,
            "config": f"{model}, azure, {hours:g} h, {fidelity} level"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="comma list of contexts to measure (default: all)")
    ap.add_argument("--out", type=Path, default=RESULTS / "episode_costs.json")
    args = ap.parse_args()
    from servegym.registration import ENV_SPECS

    out: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    contexts = [e.id for e in ENV_SPECS] + ["geo compare", "pd compare", "npu compare", "npu compare fluid"]
    if args.only:
        contexts = [c for c in contexts if c in args.only.split(",")]
    if not args.only:  # each context in a fresh process, so its setup includes what a new command pays
        import subprocess
        import sys
        import tempfile

        for ctx in contexts:
            with tempfile.TemporaryDirectory(prefix="servegym-cost-cache-") as cache:
                subprocess.run([sys.executable, __file__, "--only", ctx, "--out", str(args.out)], check=True,
                               env={**os.environ, "SERVEGYM_CACHE_DIR": cache})
        contexts = []
        out = json.loads(args.out.read_text())
    for ctx in contexts:
        t0 = time.perf_counter()
        if ctx == "geo compare":
            row = measure_geo_compare(10.0)
        elif ctx == "pd compare":
            row = measure_pd_compare()
        elif ctx.startswith("npu compare"):
            row = measure_npu_compare("fluid" if ctx.endswith("fluid") else "request")
        else:
            row = measure_env(ctx)
        row["measured"] = time.strftime("%Y-%m-%d")
        out[ctx] = row
        print(f"{ctx}: {json.dumps(row)} ({time.perf_counter() - t0:.0f} s wall)", flush=True)
        from servegym.outputs import write_json

        write_json(args.out, out)  # after every context: an interrupted run keeps what it measured
    lines = ["# CPU-s per unit of work, for the commands' up-front estimates", "",
             "`benchmarks/episode_costs.py` (see its docstring for the units and what is measured); "
             "`src/servegym/estimates.py` holds these numbers.", "",
             "| context | unit | units measured | setup CPU-s | CPU-s per unit by policy |", "|---|---|---|---|---|"]
    for ctx, row in out.items():
        from servegym.estimates import _unit_of

        unit = _unit_of(ctx)
        pol = ", ".join(f"{k} {v:.3g}" for k, v in row["cpu_s_per_unit"].items())
        lines.append(f"| {ctx} | {unit} | {row['unit_count']:g} | {row['setup_cpu_s']:.2f} | {pol} |")
    from servegym.outputs import write_text

    write_text(args.out.with_suffix(".md"), "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
