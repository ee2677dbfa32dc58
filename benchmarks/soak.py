"""Soak test of the envs: long runs with random valid actions, recording resident memory and steps/s over time.

Usage: ``nice -n 10 .venv/bin/python benchmarks/soak.py [--geo-steps 1000000] [--pd-steps 500000]
[--npu-episodes 10] [--only geo,pd,npu]`` (about 15-25 min on a shared 2-core machine; not in CI).

Each env runs in its own fresh process (spawn), so its resident set is its own: GeoRoute-v0 (small preset,
masked uniform random actions), PDProvision-v0 (fluid mode, uniform random actions; the env adjusts
infeasible ones) and NPUAutoscale-v0 (24-h episodes, uniform random actions). Episodes reset when they end
(seeds 0, 1, ...). Every ``--sample`` steps a row records steps, wall s, resident memory (VmRSS, MB) and
the interval's steps/s; rewards are checked finite throughout. Writes ``benchmarks/results/soak.json``,
``soak.md`` and ``soak.png``. Runs of envs not in ``--only`` are kept from an existing ``soak.json`` (so the
envs can be soaked in separate sessions), and a run in progress saves its rows at every sample to
``results/.soak_<env>.partial.json``: ``--collect`` writes the report from those if a run had to be stopped,
marking it incomplete.

``--npu-memory EPISODES`` measures NPUAutoscale-v0's memory per episode instead (``npu_memory.{json,md,png}``):
in fresh processes, resident memory after every episode (``gc`` run first), and, with tracemalloc on, the
traced Python heap and its largest allocation sites. Every episode is reset on a full 24-h day of the train
split (its workload and the drawn model's catalog, the caches under test, are built at reset) and stops after
``--npu-steps`` steps (default 24 = the first 2 h; 0 = the whole day, ~30-130 s per episode on the shared
machine, too slow for 20 episodes x 4 runs; traced episodes ``--npu-trace-steps``, default 6: tracemalloc
makes stepping several times slower). Each measurement runs twice: with the caches as they were (4 workloads,
every visited bucket's step metrics kept by each model's catalog: before) and with the env's bounds (after).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import multiprocessing as mp
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path(__file__).resolve().parent / "results"


def rss_mb() -> float:
    """Current resident set size of this process, MB (Linux /proc; 0 elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def _make(family: str) -> Any:
    import gymnasium as gym

    import servegym  # noqa: F401  (registers the ids)

    if family == "geo":
        return gym.make("servegym/GeoRoute-v0")
    if family == "pd":
        return gym.make("servegym/PDProvision-v0")
    return gym.make("servegym/NPUAutoscale-v0")


def _partial_path(family: str) -> Path:
    return OUT / f".soak_{family}.partial.json"


def soak(family: str, steps: int, sample: int, queue: Any) -> None:
    """Run ``steps`` steps of ``family``'s env and put the result dict on ``queue``."""
    rng = np.random.default_rng(0)
    env = _make(family)
    base = env.unwrapped
    masked = family == "geo"
    rows: list[dict[str, float]] = []
    t0 = time.perf_counter()
    last_t, last_n = t0, 0
    episodes, seed, nonfinite = 0, 0, 0
    reward_min, reward_max = math.inf, -math.inf
    env.reset(seed=seed)
    rows.append({"steps": 0, "wall_s": 0.0, "rss_mb": rss_mb(), "steps_per_s": math.nan})
    def result(n_done: int) -> dict[str, Any]:
        return {"family": family, "env_id": base.spec.id if base.spec else family, "steps": n_done,
                "steps_requested": steps, "complete": n_done == steps, "episodes_finished": episodes,
                "wall_s": time.perf_counter() - t0, "nonfinite_rewards": nonfinite, "reward_min": reward_min,
                "reward_max": reward_max, "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                "rows": rows}

    for n in range(1, steps + 1):
        if masked:
            valid = np.flatnonzero(base.action_masks())
            action = int(rng.choice(valid)) if valid.size else 0
        else:
            action = env.action_space.sample()
        _, reward, terminated, truncated, _ = env.step(action)
        r = float(reward)
        if not math.isfinite(r):
            nonfinite += 1
        else:
            reward_min, reward_max = min(reward_min, r), max(reward_max, r)
        if terminated or truncated:
            episodes += 1
            seed += 1
            env.reset(seed=seed)
        if n % sample == 0 or n == steps:
            now = time.perf_counter()
            rows.append({"steps": n, "wall_s": now - t0, "rss_mb": rss_mb(),
                         "steps_per_s": (n - last_n) / max(now - last_t, 1e-9)})
            last_t, last_n = now, n
            _partial_path(family).write_text(json.dumps(result(n)))
    env.close()
    queue.put(result(steps))
    _partial_path(family).unlink(missing_ok=True)


def _summary(res: dict[str, Any]) -> dict[str, Any]:
    rows = res["rows"]
    rss = np.array([r["rss_mb"] for r in rows])
    sps = np.array([r["steps_per_s"] for r in rows[1:]])
    k = max(len(sps) // 10, 1)
    # Memory after the first tenth (start-up, caches, numba compilation) vs the end: the soak's question.
    warm = rss[min(k, len(rss) - 1)]
    return {"env": res["env_id"], "steps": res["steps"], "episodes": res["episodes_finished"],
            "wall_s": res["wall_s"], "steps_per_s": res["steps"] / res["wall_s"],
            "sps_first_tenth": float(np.mean(sps[:k])), "sps_last_tenth": float(np.mean(sps[-k:])),
            "rss_start_mb": float(rss[0]), "rss_after_first_tenth_mb": float(warm), "rss_end_mb": float(rss[-1]),
            "rss_max_mb": float(rss.max()), "growth_after_warmup_mb": float(rss[-1] - warm),
            "nonfinite_rewards": res["nonfinite_rewards"], "reward_min": res["reward_min"],
            "reward_max": res["reward_max"]}


def write(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    meta = {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "python": platform.python_version(),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared with other jobs; niced)",
            "requested": {"geo_steps": args.geo_steps, "pd_steps": args.pd_steps, "npu_episodes": args.npu_episodes}}
    (OUT / "soak.json").write_text(json.dumps({"meta": meta, "runs": results}, indent=1) + "\n")
    lines = ["# Soak: resident memory and speed over long runs", "",
             f"Report {meta['date']} (each run's end time in the table), Python {meta['python']}, {meta['machine']}. Produced by `benchmarks/soak.py` "
             "(random valid actions, episodes reset when they end, one fresh process per env). Steps/s are wall "
             "clock on a machine shared with other jobs, so they show trends, not the envs' best speed "
             "(see the *_env_speed benchmarks).", "",
             "| env | measured | steps | episodes | wall s | steps/s | steps/s first / last tenth | RSS start / after 1st "
             "tenth / end / max (MB) | RSS growth after warm-up (MB) | non-finite rewards | reward range |",
             "|---|---|---:|---:|---:|---:|---|---|---:|---:|---|"]
    for res in results:
        s = _summary(res)
        steps = f"{s['steps']:,}" + ("" if res.get("complete", True) else
                                       f" of {res['steps_requested']:,} (stopped)")
        lines.append(f"| {s['env']} | {res.get('date', '?')} | {steps} | {s['episodes']:,} | {s['wall_s']:.0f} | {s['steps_per_s']:,.0f} "
                     f"| {s['sps_first_tenth']:,.0f} / {s['sps_last_tenth']:,.0f} | {s['rss_start_mb']:.0f} / "
                     f"{s['rss_after_first_tenth_mb']:.0f} / {s['rss_end_mb']:.0f} / {s['rss_max_mb']:.0f} | "
                     f"{s['growth_after_warmup_mb']:+.1f} | {s['nonfinite_rewards']} | "
                     f"[{s['reward_min']:.4g}, {s['reward_max']:.4g}] |")
    for res in results:
        third = [r["rss_mb"] for r in res["rows"][len(res["rows"]) * 2 // 3:]]
        lines.append(f"\n- {res['env_id']}: RSS over the last third of the run {min(third):.0f}-{max(third):.0f} MB.")
    done = {r["family"] for r in results}
    missing = [f for f in ("geo", "pd", "npu") if f not in done]
    if missing:
        lines += ["", f"Not measured in this run: {', '.join(missing)}."]
    lines += ["", "![RSS and steps/s over the runs](soak.png)", ""]
    (OUT / "soak.md").write_text("\n".join(lines))
    _plot(results)


def _plot(results: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(results), figsize=(4.2 * len(results), 5.6), squeeze=False)
    for j, res in enumerate(results):
        rows = res["rows"]
        x = np.array([r["steps"] for r in rows]) / 1e3
        rss = [r["rss_mb"] for r in rows]
        axes[0, j].plot(x, rss, color="tab:blue")
        axes[0, j].set_title(res["env_id"].split("/")[-1])
        axes[0, j].set_ylabel("resident memory (MB)")
        axes[0, j].set_ylim(0, max(rss) * 1.15)
        axes[1, j].plot(x[1:], [r["steps_per_s"] for r in rows[1:]], color="tab:orange")
        axes[1, j].set_ylabel("steps/s (interval)")
        axes[1, j].set_xlabel("steps (thousands)")
        axes[1, j].set_ylim(bottom=0)
        for ax in axes[:, j]:
            ax.grid(alpha=0.3)
    fig.suptitle("Soak: random valid actions, episodes reset at their end (shared 2-core machine)")
    fig.tight_layout()
    fig.savefig(OUT / "soak.png", dpi=110)
    plt.close(fig)


def npu_memory(episodes: int, steps: int | None, trace: bool, before: bool, queue: Any) -> None:
    """Per-episode memory of NPUAutoscale-v0 (default config: 24-h episodes of the train split), put on
    ``queue``; ``steps`` caps each episode's steps; ``before``: the caches as they were (4 workloads, every
    bucket's step metrics kept) instead of the env's bounds."""
    import gc
    import tracemalloc

    from servegym.envs.npu import env as npu_env
    from servegym.envs.npu.sim import dse

    if before:
        npu_env._WORKLOADS.cap = 4
        dse.METRICS_CACHE_MAX = 10**9
    if trace:
        tracemalloc.start(1)
    env = _make("npu")
    rows = []
    t0 = time.perf_counter()
    for ep in range(episodes):
        t_ep = time.perf_counter()
        env.reset(seed=ep)
        n, done = 0, False
        while not done and (steps is None or n < steps):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            n, done = n + 1, terminated or truncated
        gc.collect()
        row = {"episode": ep, "steps": n, "wall_s": time.perf_counter() - t_ep, "rss_mb": rss_mb(),
               "catalogs": len(npu_env._CATALOGS), "workloads": len(npu_env._WORKLOADS),
               "model": env.unwrapped.cluster_config.model}
        if trace:
            row["traced_mb"] = tracemalloc.get_traced_memory()[0] / 2**20
        rows.append(row)
        print(json.dumps(row), flush=True)
    top = []
    if trace:
        root = str(Path(__file__).resolve().parents[1]) + "/"
        for st in tracemalloc.take_snapshot().statistics("lineno")[:6]:
            frame = st.traceback[0]
            where = frame.filename.split("site-packages/")[-1].split(root)[-1]
            top.append({"site": f"{where}:{frame.lineno}", "mb": st.size / 2**20, "blocks": st.count})
    env.close()
    queue.put({"episodes": episodes, "steps_cap": steps, "trace": trace, "wall_s": time.perf_counter() - t0,
               "workload_cache": npu_env._WORKLOADS.cap, "catalog_cache": npu_env._CATALOGS.cap,
               "metrics_cache": "all" if before else dse.METRICS_CACHE_MAX,
               "rows": rows, "top": top})


def run_npu_memory(episodes: int, steps: int | None, trace_steps: int | None, only: str | None = None) -> None:
    """Fresh processes: RSS (episodes of ``steps`` steps) and tracemalloc (``trace_steps``), each before and after
    the bounds; ``only`` = ``rss`` or ``trace`` runs one kind and keeps the other's runs from npu_memory.json.
    Writes npu_memory.{json,md,png} after every run."""
    ctx = mp.get_context("spawn")
    runs: list[dict[str, Any]] = []
    if only and (OUT / "npu_memory.json").is_file():
        runs = [r for r in json.loads((OUT / "npu_memory.json").read_text())["runs"] if r["trace"] != (only == "trace")]
    for trace in [t for t in (False, True) if only is None or t == (only == "trace")]:
        for label, before in (("before (4 workloads, all step metrics)", True), ("after (the bounds)", False)):
            q = ctx.Queue()
            p = ctx.Process(target=npu_memory, args=(episodes, trace_steps if trace else steps, trace, before, q))
            p.start()
            res = q.get()
            p.join()
            runs = sorted([*runs, {"label": label, **res}], key=lambda r: (r["trace"], not r["label"].startswith("b")))
            date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
            (OUT / "npu_memory.json").write_text(json.dumps({"date": date, "runs": runs}, indent=1) + "\n")
            _npu_memory_report(runs)


def _npu_memory_report(runs: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# NPUAutoscale-v0 memory per episode", "",
             f"`benchmarks/soak.py --npu-memory {runs[0]['episodes']}` on {when} ({os.cpu_count()} CPUs shared with "
             "other jobs, niced): default config (24-h days of the train split, uniform random actions, reset "
             "seeds 0, 1, ...; each episode stops after the steps in the table: its day's workload and its model's "
             "catalog are built at reset), each run in a fresh process; memory read after `gc` at each episode's "
             "end.", "",
             "| run | measure | episodes (steps each) | catalogs / workloads / step metrics kept | ep 0 MB | ep 4 | ep 9 "
             "| last | max | last 5: min-max |", "|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r in runs:
        key = "traced_mb" if r["trace"] else "rss_mb"
        v = [row[key] for row in r["rows"]]
        cells = [f"{v[i]:.0f}" if i < len(v) else "-" for i in (0, 4, 9)]
        steps = "full" if r["steps_cap"] is None else f"<= {r['steps_cap']}"
        lines.append(f"| {r['label']} | {'tracemalloc heap' if r['trace'] else 'RSS'} | {len(v)} ({steps}) | "
                     f"{r['catalog_cache']} / {r['workload_cache']} / {r.get('metrics_cache', '?')} per catalog | "
                     f"{' | '.join(cells)} | {v[-1]:.0f} | "
                     f"{max(v):.0f} | {min(v[-5:]):.0f}-{max(v[-5:]):.0f} |")
    for r in (r for r in runs if r["trace"] and r["top"]):
        lines += ["", f"Largest allocation sites at the end, {r['label']}:", ""]
        lines += [f"- `{t['site']}`: {t['mb']:.1f} MB ({t['blocks']:,} blocks)" for t in r["top"]]
    lines += ["", "![memory per episode](npu_memory.png)", ""]
    (OUT / "npu_memory.md").write_text("\n".join(lines))
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, trace in zip(axes, (False, True), strict=True):
        key = "traced_mb" if trace else "rss_mb"
        for r in (r for r in runs if r["trace"] == trace):
            ax.plot([row["episode"] for row in r["rows"]], [row[key] for row in r["rows"]], marker="o", ms=3,
                    label=r["label"])
        ax.set_xlabel("episode")
        ax.set_ylabel("traced Python heap (MB)" if trace else "resident memory (MB)")
        ax.set_title("tracemalloc" if trace else "resident memory (RSS)", fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "npu_memory.png", dpi=110)
    plt.close(fig)


def _ordered(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(runs, key=lambda r: ("geo", "pd", "npu").index(r["family"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--geo-steps", type=int, default=1_000_000)
    ap.add_argument("--pd-steps", type=int, default=500_000)
    ap.add_argument("--npu-episodes", type=int, default=10, help="24-h episodes (288 steps each)")
    ap.add_argument("--sample", type=int, default=0, help="steps between samples (default: 1/100 of the run)")
    ap.add_argument("--only", default="geo,pd,npu")
    ap.add_argument("--npu-memory", type=int, default=0, metavar="EPISODES",
                    help="measure NPUAutoscale-v0's memory per episode instead (module docstring)")
    ap.add_argument("--npu-steps", type=int, default=24, help="--npu-memory: steps per episode (0: whole days)")
    ap.add_argument("--npu-trace-steps", type=int, default=6, help="--npu-memory: steps per traced episode")
    ap.add_argument("--npu-only", choices=("rss", "trace"), default=None, help="--npu-memory: one kind of run")
    ap.add_argument("--collect", action="store_true",
                    help="write the report from the partial rows of stopped runs of --only (no new run)")
    args = ap.parse_args()
    if args.npu_memory:
        run_npu_memory(args.npu_memory, args.npu_steps or None, args.npu_trace_steps or None, args.npu_only)
        return
    only = args.only.split(",")
    kept: list[dict[str, Any]] = []
    if (OUT / "soak.json").is_file():
        kept = [r for r in json.loads((OUT / "soak.json").read_text())["runs"] if r["family"] not in only]
    if args.collect:
        found = [json.loads(_partial_path(f).read_text()) for f in only if _partial_path(f).is_file()]
        write(_ordered(kept + found), args)
        return
    plan = {"geo": args.geo_steps, "pd": args.pd_steps, "npu": args.npu_episodes * 288}
    ctx = mp.get_context("spawn")
    results: list[dict[str, Any]] = list(kept)
    for family in [f for f in ("geo", "pd", "npu") if f in only]:
        steps = plan[family]
        q = ctx.Queue()
        p = ctx.Process(target=soak, args=(family, steps, args.sample or max(steps // 100, 1), q))
        p.start()
        res = q.get()
        p.join()
        results = _ordered([*results, res])
        s = _summary(res)
        print(f"{s['env']}: {s['steps']:,} steps in {s['wall_s']:.0f} s ({s['steps_per_s']:,.0f}/s), RSS "
              f"{s['rss_start_mb']:.0f} -> {s['rss_end_mb']:.0f} MB (max {s['rss_max_mb']:.0f}), "
              f"non-finite rewards {s['nonfinite_rewards']}", flush=True)
        write(results, args)


if __name__ == "__main__":
    main()
