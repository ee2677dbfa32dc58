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

``--npu-memory EPISODES`` measures the npu ids' memory per episode instead (``npu_memory.{json,md,png}``): for
each of ``--npu-ids`` (default both, NPUAutoscale-v0 and NPUAutoscaleResidual-v0) in a fresh process, its default
config (24-h days of the train split, the model drawn per episode; its workload and the model's catalog, the caches
under test, are built at reset), uniform random actions, whole days unless ``--npu-steps`` caps them; resident
memory after every episode (``gc`` run first), and with ``--npu-trace`` the traced Python heap and its largest
allocation sites. Each episode's row is saved to ``results/.npu_memory_<id>.partial.json`` as it ends;
``--npu-memory N --collect`` writes the report from those if a run had to be stopped. The report judges flatness
(every episode after the catalogs' warm-up within 20 % of the median after it) and gives each run as a row of the
soak table (the npu rows of the soak; the plain soak run writes ``soak.{json,md,png}``, which results/ no longer
keeps: its geo and pd rows are in git history).
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

from servegym.outputs import save_figure, write_text

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


SOAK_HEADER = ["| env | measured | steps | episodes | wall s | steps/s | steps/s first / last tenth | RSS start / "
               "after 1st tenth / end / max (MB) | RSS growth after warm-up (MB) | non-finite rewards | reward range |",
               "|---|---|---:|---:|---:|---:|---|---|---:|---:|---|"]


def _soak_line(res: dict[str, Any]) -> str:
    """One row of the soak table."""
    s = _summary(res)
    steps = f"{s['steps']:,}" + ("" if res.get("complete", True) else f" of {res['steps_requested']:,} (stopped)")
    return (f"| {s['env']} | {res.get('date', '?')} | {steps} | {s['episodes']:,} | {s['wall_s']:.0f} | "
            f"{s['steps_per_s']:,.0f} | {s['sps_first_tenth']:,.0f} / {s['sps_last_tenth']:,.0f} | "
            f"{s['rss_start_mb']:.0f} / {s['rss_after_first_tenth_mb']:.0f} / {s['rss_end_mb']:.0f} / "
            f"{s['rss_max_mb']:.0f} | {s['growth_after_warmup_mb']:+.1f} | {s['nonfinite_rewards']} | "
            f"[{s['reward_min']:.4g}, {s['reward_max']:.4g}] |")


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
             *SOAK_HEADER]
    lines += [_soak_line(res) for res in results]
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


NPU_IDS = ("servegym/NPUAutoscale-v0", "servegym/NPUAutoscaleResidual-v0")
FLAT_TOLERANCE = 0.20  # "flat": every episode after the warm-up within 20 % of the run's median after it


def _npu_partial_path(env_id: str) -> Path:
    return OUT / f".npu_memory_{env_id.split('/')[-1]}.partial.json"


def npu_memory(env_id: str, episodes: int, steps: int | None, trace: bool, queue: Any) -> None:
    """Per-episode memory of one npu id in its default config (24-h episodes of the train split, uniform random
    actions, reset seeds 0, 1, ...), put on ``queue``; ``steps`` caps each episode's steps (None: whole days).
    Every episode's row is also saved to the id's partial file, so a stopped run keeps what it measured."""
    import gc
    import tracemalloc

    import gymnasium as gym
    from servegym.envs.npu import env as npu_env

    import servegym  # noqa: F401  (registers the ids)

    if trace:
        tracemalloc.start(1)
    env = gym.make(env_id)
    env.action_space.seed(0)
    start = rss_mb()
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    nonfinite, reward_min, reward_max = 0, math.inf, -math.inf

    def result() -> dict[str, Any]:
        return {"env_id": env_id, "episodes": episodes, "steps_cap": steps, "trace": trace, "rss_start_mb": start,
                "wall_s": time.perf_counter() - t0, "workload_cache": npu_env._WORKLOADS.cap,
                "catalog_cache": npu_env._CATALOGS.cap, "nonfinite_rewards": nonfinite, "reward_min": reward_min,
                "reward_max": reward_max, "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
                "rows": rows, "top": []}

    for ep in range(episodes):
        t_ep = time.perf_counter()
        env.reset(seed=ep)
        n, done = 0, False
        while not done and (steps is None or n < steps):
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            r = float(reward)
            if math.isfinite(r):
                reward_min, reward_max = min(reward_min, r), max(reward_max, r)
            else:
                nonfinite += 1
            n, done = n + 1, terminated or truncated
        gc.collect()
        row = {"episode": ep, "steps": n, "wall_s": time.perf_counter() - t_ep, "rss_mb": rss_mb(),
               "catalogs": len(npu_env._CATALOGS), "workloads": len(npu_env._WORKLOADS),
               "model": env.unwrapped.cluster_config.model}
        if trace:
            row["traced_mb"] = tracemalloc.get_traced_memory()[0] / 2**20
        rows.append(row)
        write_text(_npu_partial_path(env_id), json.dumps(result()))
    res = result()
    if trace:
        root = str(Path(__file__).resolve().parents[1]) + "/"
        for st in tracemalloc.take_snapshot().statistics("lineno")[:6]:
            frame = st.traceback[0]
            where = frame.filename.split("site-packages/")[-1].split(root)[-1]
            res["top"].append({"site": f"{where}:{frame.lineno}", "mb": st.size / 2**20, "blocks": st.count})
    env.close()
    queue.put(res)
    _npu_partial_path(env_id).unlink(missing_ok=True)


def run_npu_memory(episodes: int, steps: int | None, ids: list[str], trace: bool, collect: bool = False) -> None:
    """One fresh process per id in ``ids``: RSS (and with ``trace`` the traced heap) after every episode. Runs of
    other ids (or of the other kind) are kept from npu_memory.json; npu_memory.{json,md,png} are written after
    every run. ``collect``: no new run, the report from the partial files of stopped runs (marked incomplete)."""
    ctx = mp.get_context("spawn")
    runs: list[dict[str, Any]] = []
    if (OUT / "npu_memory.json").is_file():
        runs = [r for r in json.loads((OUT / "npu_memory.json").read_text())["runs"]
                if "env_id" in r and (r["env_id"] not in ids or r["trace"] != trace)]
    for env_id in ids:
        if collect:
            if not _npu_partial_path(env_id).is_file():
                continue
            res = json.loads(_npu_partial_path(env_id).read_text())
        else:
            q = ctx.Queue()
            p = ctx.Process(target=npu_memory, args=(env_id, episodes, steps, trace, q))
            p.start()
            res = q.get()
            p.join()
        runs = sorted([*runs, res], key=lambda r: (r["trace"], NPU_IDS.index(r["env_id"])))
        date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        write_text(OUT / "npu_memory.json", json.dumps({"date": date, "runs": runs}, indent=1) + "\n")
        _npu_memory_report(runs)


def flatness(run: dict[str, Any]) -> dict[str, Any]:
    """The run's warm-up (episodes until every catalog its split draws from is loaded, at least 1) and, after it,
    the RSS median, range and largest deviation from the median (a fraction): flat when within FLAT_TOLERANCE."""
    rows = run["rows"]
    most = max(r["catalogs"] for r in rows)
    warm = max(next(i for i, r in enumerate(rows) if r["catalogs"] == most) + 1, 1)
    after = np.array([r["rss_mb"] for r in rows[warm:]] or [rows[-1]["rss_mb"]])
    med = float(np.median(after))
    up, down = float(after.max() / med - 1.0), float(1.0 - after.min() / med)
    half = len(after) // 2
    drift = float(np.mean(after[half:]) - np.mean(after[:half])) if half else 0.0
    outside = int(np.sum(np.abs(after / med - 1.0) > FLAT_TOLERANCE))
    return {"warmup": warm, "median": med, "min": float(after.min()), "max": float(after.max()), "above": up,
            "below": down, "outside": outside, "after": len(after), "drift_mb": drift,
            "flat": max(up, down) <= FLAT_TOLERANCE}


def _as_soak(run: dict[str, Any]) -> dict[str, Any]:
    """A per-episode run in the soak table's form (one sample per episode, cumulative steps and wall time)."""
    rows, steps, wall = [{"steps": 0, "wall_s": 0.0, "rss_mb": run["rss_start_mb"], "steps_per_s": math.nan}], 0, 0.0
    for r in run["rows"]:
        steps, wall = steps + r["steps"], wall + r["wall_s"]
        rows.append({"steps": steps, "wall_s": wall, "rss_mb": r["rss_mb"], "steps_per_s": r["steps"] / r["wall_s"]})
    done = len(run["rows"])
    return {"family": "npu", "env_id": run["env_id"], "steps": steps, "complete": done == run["episodes"],
            "steps_requested": steps if done == run["episodes"] else steps * run["episodes"] // max(done, 1),
            "episodes_finished": done, "wall_s": wall, "nonfinite_rewards": run["nonfinite_rewards"],
            "reward_min": run["reward_min"], "reward_max": run["reward_max"], "date": run["date"], "rows": rows}


def _npu_memory_report(runs: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rss_runs = [r for r in runs if not r["trace"]]
    lines = ["# npu memory per episode", "",
             f"`benchmarks/soak.py --npu-memory {max(r['episodes'] for r in runs)}` ({os.cpu_count()} CPUs shared "
             "with other jobs, niced): each id in "
             "its default config (24-h days of the train split, the model drawn per episode from the split's four; "
             "uniform random actions; reset seeds 0, 1, ...), one fresh process per id; resident memory (VmRSS) read "
             "after `gc` at each episode's end. Warm-up: the episodes until the last of the split's model catalogs "
             f"is loaded. Flat: every episode after the warm-up within {FLAT_TOLERANCE:.0%} of the median after it.",
             "", "| id | measured | episodes (steps each) | warm-up episodes | ep 0 MB | end of warm-up | after warm-up: "
             "median | min-max | highest above / lowest below median | episodes outside +/-20 % | drift (2nd half - 1st "
             "half, MB) | flat |", "|---|---|---|---:|---:|---:|---:|---|---|---:|---:|---|"]
    for r in rss_runs:
        f = flatness(r)
        v = [row["rss_mb"] for row in r["rows"]]
        steps = "whole days" if r["steps_cap"] is None else f"<= {r['steps_cap']}"
        done = len(v) if len(v) == r["episodes"] else f"{len(v)} of {r['episodes']} (stopped)"
        lines.append(f"| {r['env_id']} | {r['date']} | {done} ({steps}) | {f['warmup']} | {v[0]:,.0f} | "
                     f"{v[f['warmup'] - 1]:,.0f} | {f['median']:,.0f} | {f['min']:,.0f}-{f['max']:,.0f} | "
                     f"+{f['above']:.1%} / -{f['below']:.1%} | {f['outside']} of {f['after']} | {f['drift_mb']:+.0f} | "
                     f"{'yes' if f['flat'] else 'no'} |")
    lines += ["", "What bounds it: each model's catalog keeps its Pareto fronts and its last two step metrics "
              "(`dse.METRICS_CACHE_MAX`), a process caches at most four catalogs and two 24-h workloads "
              "(`CATALOG_CACHE_MAX`, `WORKLOAD_CACHE_MAX`), and each reset drops the previous episode's simulator "
              "before asking glibc to return the freed pages (`servegym.memory.release_freed_memory`); "
              "`tests/test_npu_memory.py` checks each. Earlier readings are in this file's git history: before the "
              "cache bounds RSS rose 461 -> 1,270 MB over 20 episodes (2026-12-04); with the bounds but without the "
              "trim, the residual id's RSS averaged 1,123 MB over episodes 10-199 against 895 MB with it "
              "(2026-12-07, zero actions)."]
    if rss_runs:
        lines += ["", "## The same runs as soak rows", "",
                  "The npu rows of the soak table (`benchmarks/soak.py`; its geo and pd rows are in git history, "
                  "`benchmarks/results/soak.md` before the docs site): steps/s are wall clock per episode, reset "
                  "included, on the shared machine.", "", *SOAK_HEADER]
        lines += [_soak_line(_as_soak(r)) for r in rss_runs]
    for r in (r for r in runs if r["trace"]):
        v = [row["traced_mb"] for row in r["rows"]]
        lines += ["", f"Traced Python heap (tracemalloc), {r['env_id']}: episode 0 {v[0]:.0f} MB, last {v[-1]:.0f} MB, "
                  f"max {max(v):.0f} MB; largest allocation sites at the end:", ""]
        lines += [f"- `{t['site']}`: {t['mb']:.1f} MB ({t['blocks']:,} blocks)" for t in r["top"]]
    lines += ["", "![memory per episode](npu_memory.png)", ""]
    write_text(OUT / "npu_memory.md", "\n".join(lines))
    fig, ax = plt.subplots(figsize=(8, 4))
    for r in rss_runs:
        f = flatness(r)
        line, = ax.plot([row["episode"] for row in r["rows"]], [row["rss_mb"] for row in r["rows"]], marker="o",
                        ms=2, lw=1, label=r["env_id"].split("/")[-1])
        ax.axhspan(f["median"] * (1 - FLAT_TOLERANCE), f["median"] * (1 + FLAT_TOLERANCE), color=line.get_color(),
                   alpha=0.08)
        ax.axvline(f["warmup"] - 0.5, color=line.get_color(), ls=":", lw=1)
    ax.set_xlabel("episode (24-h day)")
    ax.set_ylabel("resident memory after the episode (MB)")
    ax.set_title(f"npu RSS per episode (dotted: end of warm-up; band: median +/- {FLAT_TOLERANCE:.0%} after it)",
                 fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    save_figure(fig, OUT / "npu_memory.png", dpi=110)
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
                    help="measure the npu ids' memory per episode instead (module docstring)")
    ap.add_argument("--npu-ids", default=",".join(NPU_IDS), help="--npu-memory: the ids, comma-separated")
    ap.add_argument("--npu-steps", type=int, default=0, help="--npu-memory: steps per episode (0: whole days)")
    ap.add_argument("--npu-trace", action="store_true",
                    help="--npu-memory: trace the Python heap (tracemalloc; several times slower)")
    ap.add_argument("--collect", action="store_true",
                    help="write the report from the partial rows of stopped runs of --only (no new run)")
    args = ap.parse_args()
    if args.npu_memory:
        ids = [i if i.startswith("servegym/") else f"servegym/{i}" for i in args.npu_ids.split(",")]
        unknown = [i for i in ids if i not in NPU_IDS]
        if unknown or args.npu_memory < 1 or args.npu_steps < 0:
            ap.error(f"--npu-ids takes {', '.join(NPU_IDS)}; --npu-memory >= 1 and --npu-steps >= 0")
        run_npu_memory(args.npu_memory, args.npu_steps or None, ids, args.npu_trace, args.collect)
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
