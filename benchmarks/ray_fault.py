"""Scale-out under faults: the benchmark suite on a two-node Ray cluster whose worker node is killed mid-run.

Usage: ``nice -n 10 .venv/bin/python benchmarks/ray_fault.py [--budget smoke] [--envs ID,...]`` (Linux;
about 5-10 min for the smoke budget on a shared 2-core machine; not in CI).

1. Reference: ``servegym benchmark --suite`` on one node (the local process pool, ``--workers 1``).
2. A two-node Ray cluster on this machine: ``ray start --head --num-cpus 1`` and a second
   ``ray start --address HEAD --num-cpus 1`` with its own temporary folder (a worker node).
3. The same suite with ``--ray HEAD``. Once a task is running on the worker node (a Ray worker process
   of that node titled ``ray::suite_task``), the worker node is killed with SIGKILL: its raylet and every
   process under it, as a lost machine would be.
4. Ray reruns the lost tasks on the surviving node (``max_retries``, servegym.agents.sweep.RAY_TASK_RETRIES).
   If the run still fails, the same command is run again, which resumes from the suite's journal.
5. Every stored result is compared with the reference: the test episodes' rows (returns and KPIs) of every
   task, and the leaderboard (all columns but wall time).

Writes ``benchmarks/results/ray_fault.md`` and ``ray_fault.json``. Always ends with ``ray stop --force``
and checks that no process of the cluster is left.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"
BIN = Path(sys.executable).parent


def _procs() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process, from /proc."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        out[int(d.name)] = (int(stat[stat.rindex(")") + 2:].split()[1]), cmd)
    return out


def _descendants(root: int, procs: dict[int, tuple[int, str]]) -> list[int]:
    kids, todo = [], [root]
    while todo:
        p = todo.pop()
        for pid, (ppid, _) in procs.items():
            if ppid == p:
                kids.append(pid)
                todo.append(pid)
    return kids


def node_processes(temp_dir: Path) -> tuple[list[int], list[int]]:
    """(every process of the Ray node whose temporary folder is ``temp_dir``, its busy task workers): the
    processes naming the folder in their command line and everything under them."""
    procs = _procs()
    roots = [pid for pid, (_, cmd) in procs.items() if str(temp_dir) in cmd and pid != os.getpid()]
    mine = set(roots)
    for r in roots:
        mine.update(_descendants(r, procs))
    busy = [p for p in mine if procs.get(p, (0, ""))[1].startswith("ray::suite_task")]
    return sorted(mine), busy


def ray_processes() -> list[int]:
    """Processes of any Ray node still alive (raylet, GCS, workers, agents)."""
    names = ("raylet", "gcs_server", "ray::", "dashboard", "log_monitor", "runtime_env", "default_worker")
    return sorted(pid for pid, (_, cmd) in _procs().items() if any(n in cmd for n in names) and "ray_fault" not in cmd)


def suite_cmd(budget: str, envs: str | None, out_dir: Path, run_dir: Path, ray: str | None) -> list[str]:
    cmd = [str(BIN / "servegym"), "benchmark", "--suite", "--budget", budget, "--out-dir", str(out_dir),
           "--run-dir", str(run_dir), "--json"]
    if envs:
        cmd += ["--envs", envs]
    return cmd + (["--ray", ray] if ray else ["--workers", "1"])


def stored_rows(out_dir: Path, budget: str) -> dict[str, list[dict[str, Any]]]:
    """Every stored task's test rows by env id, in task order (wall times aside)."""
    rows = {}
    for f in sorted((out_dir / "suite_runs" / budget).glob("*.json")):
        data = json.loads(f.read_text())
        rows[f.stem] = [o["rows"] for o in data["outputs"]]
    return rows


def compare(ref: Path, got: Path, budget: str) -> dict[str, Any]:
    import pandas as pd

    a, b = stored_rows(ref, budget), stored_rows(got, budget)
    n_tasks = sum(len(v) for v in a.values())
    same_rows = a == b
    stem = "leaderboard_smoke" if budget == "smoke" else "leaderboard"
    la = pd.read_csv(ref / f"{stem}.csv").drop(columns=["wall_s"])
    lb = pd.read_csv(got / f"{stem}.csv").drop(columns=["wall_s"])
    same_board = la.shape == lb.shape and la.equals(lb)
    return {"tasks": n_tasks, "ids": sorted(a), "rows_identical": same_rows, "leaderboard_identical": same_board,
            "leaderboard_rows": len(lb), "missing_ids": sorted(set(a) - set(b))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", default="smoke")
    ap.add_argument("--envs", default=None, help="a comma list of env ids (default: all of the budget)")
    ap.add_argument("--port", type=int, default=6391)
    ap.add_argument("--keep", action="store_true", help="keep the run folders (printed)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rf_"))  # short: Ray's socket paths must fit in 107 bytes
    head_tmp, node_tmp = work / "h", work / "w"
    head = f"127.0.0.1:{args.port}"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1"}
    rep: dict[str, Any] = {"budget": args.budget, "envs": args.envs,
                           "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "cpus": os.cpu_count()}
    ray = str(BIN / "ray")
    try:
        t0 = time.perf_counter()
        ref = subprocess.run(suite_cmd(args.budget, args.envs, work / "ref", work / "ref_runs", None), env=env,
                             capture_output=True, text=True)
        rep["single_node_s"] = time.perf_counter() - t0
        if ref.returncode != 0:
            raise SystemExit(f"reference run failed: {ref.stderr[-2000:]}")
        subprocess.run([ray, "start", "--head", "--num-cpus", "1", "--port", str(args.port), "--temp-dir",
                        str(head_tmp), "--include-dashboard", "false", "--disable-usage-stats"], env=env,
                       check=True, capture_output=True)
        subprocess.run([ray, "start", "--address", head, "--num-cpus", "1", "--temp-dir", str(node_tmp),
                        "--disable-usage-stats"], env=env, check=True, capture_output=True)
        rep["cluster"] = "head (1 CPU) + worker node (1 CPU), one machine, separate temporary folders"
        t0 = time.perf_counter()
        cmd = suite_cmd(args.budget, args.envs, work / "fault", work / "fault_runs", head)
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        killed: dict[str, Any] = {}
        while proc.poll() is None and not killed:
            pids, busy = node_processes(node_tmp)
            if busy:
                time.sleep(2.0)  # let the task get well under way
                pids, busy = node_processes(node_tmp)
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                journal = work / "fault" / "suite_runs" / args.budget / ".partial.jsonl"
                done = journal.read_text().count("\n") - 1 if journal.exists() else 0
                killed = {"at_s": time.perf_counter() - t0, "processes": len(pids), "busy_tasks": len(busy),
                          "tasks_done_before": max(done, 0)}
                break
            time.sleep(0.5)
        _, err = proc.communicate()
        rep["killed"] = killed or None
        rep["ray_run_rc"] = proc.returncode
        rep["ray_run_s"] = time.perf_counter() - t0
        rep["resumed"] = False
        if proc.returncode != 0:  # Ray gave up on a task: the same command resumes from the journal
            rep["ray_run_error"] = err.strip().splitlines()[-1][:300] if err.strip() else ""
            t1 = time.perf_counter()
            again = subprocess.run(cmd, env=env, capture_output=True, text=True)
            rep["resumed"] = True
            rep["resume_rc"] = again.returncode
            rep["resume_s"] = time.perf_counter() - t1
        rep.update(compare(work / "ref", work / "fault", args.budget))
        rep["nodes_alive_after"] = _alive_nodes(head, env)
    finally:
        subprocess.run([ray, "stop", "--force"], env=env, capture_output=True)
        time.sleep(2.0)
        rep["ray_processes_left"] = len(ray_processes())
        if args.keep:
            print(f"run folders kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "ray_fault.json").write_text(json.dumps(rep, indent=2) + "\n")
    (OUT / "ray_fault.md").write_text(_markdown(rep))
    print(_markdown(rep))
    ok = rep.get("rows_identical") and rep.get("leaderboard_identical") and rep["ray_processes_left"] == 0
    return 0 if ok else 1


def _alive_nodes(head: str, env: dict[str, str]) -> int | None:
    code = (f"import ray; ray.init(address={head!r}, log_to_driver=False, configure_logging=False); "
            "print(sum(1 for n in ray.nodes() if n['Alive']))")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    try:
        return int(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def _markdown(r: dict[str, Any]) -> str:
    k = r.get("killed") or {}
    yes = {True: "yes", False: "no", None: "n/a"}
    lines = [
        "# Benchmark suite on a two-node Ray cluster, worker node killed mid-run",
        "",
        f"Generated by `benchmarks/ray_fault.py` on {r['date']} ({r['cpus']} cores shared with other jobs). "
        f"Budget `{r['budget']}`" + (f", ids {r['envs']}" if r.get("envs") else ", every id of the budget") + ".",
        "",
        f"- Cluster: {r.get('cluster', 'not started')}.",
        f"- Single-node reference (`--workers 1`, no Ray): {r.get('single_node_s', float('nan')):.0f} s.",
        (f"- Worker node killed (SIGKILL to its raylet and all {k.get('processes')} of its processes) "
         f"{k.get('at_s', float('nan')):.0f} s into the Ray run, with {k.get('busy_tasks')} task(s) running on it "
         f"and {k.get('tasks_done_before')} task(s) already finished.") if k else
        "- The worker node was never seen running a task: no kill (the run is not a fault test).",
        f"- Ray run: exit status {r.get('ray_run_rc')}, {r.get('ray_run_s', float('nan')):.0f} s; "
        + ("finished on the head node alone after Ray retried the lost task(s)." if r.get("ray_run_rc") == 0 and k
           else f"failed ({r.get('ray_run_error', '')}); the same command then resumed from the journal "
                f"(exit status {r.get('resume_rc')}, {r.get('resume_s', float('nan')):.0f} s)."
           if r.get("resumed") else ""),
        f"- Results: {r.get('tasks')} tasks over {', '.join(r.get('ids', []))}; every stored task's test rows "
        f"identical to the single-node run: {yes.get(r.get('rows_identical'))}; leaderboard ({r.get('leaderboard_rows')} "
        f"rows, every column but wall time) identical: {yes.get(r.get('leaderboard_identical'))}; ids missing: "
        f"{r.get('missing_ids') or 'none'}.",
        f"- Nodes alive after the run: {r.get('nodes_alive_after')} (the head). After `ray stop --force`: "
        f"{r.get('ray_processes_left')} Ray processes left.",
        "",
        "Raw figures: `ray_fault.json`.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
