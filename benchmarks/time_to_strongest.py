"""Time to the strongest baseline on validation, per env id and training seed, from the stored quick-suite runs.

For every stored run (``benchmarks/results/suite_runs/<budget>/<id>.json``) this script:

1. plays the id's naive, paper and strongest baselines on the run's validation episodes (the validation split,
   seeds 1000.., the entry's env kwargs merged over its hyperparameter file's, as training did) and checks the
   stored validation scores against them: each stored ``normalized_score`` must equal
   ``100 (mean_reward - mean R_naive) / G`` with G the pooled paper - naive gap of these episodes (it does to
   ~1e-13 where the episodes are the same). The strongest's score on that scale is the target; where the
   strongest is the paper's method it is 100 by construction, and the check is only reported (a stored run
   made before a simulator change replays differently today). A failed check otherwise leaves the id
   without a target;
2. reads each seed's validation history (:mod:`servegym.agents.time_to_strongest`): the first evaluation whose
   mean return reaches the strongest's on the same episodes, in environment steps and CPU-s, or never;
3. with ``--measure``, reruns the entry's training for seed 0 up to its ``--evals``-th evaluation to measure
   the CPU-s at each evaluation (the stored runs record only steps and wall time): CPU-s at later steps are
   extrapolated linearly and labelled ``est.``; the rerun's validation returns are compared with the stored
   seed 0's (a reproduction check of the run on today's code).

Writes ``time_to_strongest.{json,md}`` in ``--out-dir`` (the json is what the leaderboard builder reads for runs
made before the evaluator recorded the strongest and CPU-s). ``--fill-leaderboard`` adds the column to the
agent rows of ``leaderboard.{json,csv,md}`` in place, leaving every other field as it is (checked).

    nice -n 15 python benchmarks/time_to_strongest.py --measure          # ~ minutes of CPU
    python benchmarks/time_to_strongest.py --fill-leaderboard             # no episodes played
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import resource
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from servegym.agents import benchmark as bm
from servegym.agents import protocol
from servegym.agents import time_to_strongest as tts
from servegym.agents.suite_runs import _tuple

from servegym.outputs import write_text

ROOT = Path(__file__).resolve().parent / "results"


def cpu_now() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def stored_runs(out_dir: Path, budget: str, ids: list[str] | None) -> list[tuple[bm.SuiteEntry, dict[str, Any]]]:
    """Every stored run of ``budget`` in suite order (also one whose entry the suite has since changed: the
    leaderboard rows spliced from it still stand; the output says so)."""
    order = [e.env_id for e in bm.SUITE[budget]]
    runs = []
    for path in sorted((out_dir / "suite_runs" / budget).glob("*.json")):
        data = json.loads(path.read_text())
        e = bm.SuiteEntry(**{**data["entry"], "baselines": _tuple(data["entry"].get("baselines"))})
        if ids and e.env_id.split("/")[-1] not in ids:
            continue
        runs.append((e, data))
    return sorted(runs, key=lambda r: order.index(r[0].env_id) if r[0].env_id in order else len(order))


def eval_kwargs(e: bm.SuiteEntry) -> dict[str, Any]:
    """The evaluation env's kwargs of a training run of ``e`` (hyperparameter file's env kwargs, then the entry's)."""
    from servegym.agents.hparams import load_hyperparams

    hp = load_hyperparams(e.env_id, e.algo, bm.shipped_hyperparams(e.hyperparams))
    return {**hp.env_kwargs, **e.env_kwargs}


def validation_references(e: bm.SuiteEntry, trains: list[dict[str, Any]]) -> dict[str, Any]:
    """The strongest's mean validation return on the run's validation episodes, checked via the stored scores."""
    from servegym.agents.families import family_for, run_baseline_episodes

    y = protocol.yardsticks(e.env_id).roles()
    names = list(dict.fromkeys([y["naive"], y["paper"], y["strongest"]]))
    seeds = list(range(bm.VALIDATION_SEED, bm.VALIDATION_SEED + e.val_episodes))
    env = bm.make_split_env(e.env_id, "validation", eval_kwargs(e))
    c0 = cpu_now()
    try:
        res = run_baseline_episodes(family_for(e.env_id), env, names, seeds)
    finally:
        env.close()
    cpu = cpu_now() - c0
    mean = {n: float(np.mean([r.reward for r in res[n]])) for n in names}
    gap = protocol.reference_gap([r.reward for r in res[y["naive"]]], [r.reward for r in res[y["paper"]]])
    diffs = [abs(100.0 * (h["mean_reward"] - mean[y["naive"]]) / gap - h["normalized_score"])
             for o in trains for h in o.get("validation") or []
             if math.isfinite(h.get("normalized_score", math.nan))]
    worst = max(diffs) if diffs else math.nan
    ok = math.isfinite(worst) and worst < 1e-6 * max(1.0, max(abs(h["normalized_score"]) for o in trains
                                                               for h in o.get("validation") or []))
    score = 100.0 if y["strongest"] == y["paper"] else 100.0 * (mean[y["strongest"]] - mean[y["naive"]]) / gap
    return {"strongest": y["strongest"], "naive": y["naive"], "paper": y["paper"], "seeds": seeds,
            "mean_reward": mean, "gap": gap,
            "target_score": score if ok or y["strongest"] == y["paper"] else None,
            "score_check_max_abs_diff": worst, "score_check_ok": ok, "cpu_s": cpu,
            "slo": {n: float(np.mean([r.metrics.get(protocol.SLO_METRIC, math.nan) for r in res[n]])) for n in names}}


def measure_cpu(e: bm.SuiteEntry, evals: int) -> dict[str, Any]:
    """Seed 0 of ``e`` trained as the suite trains it (the stored runs' baselines: naive and paper), stopped
    after its ``evals``-th validation evaluation; (steps, CPU-s) at each evaluation and its validation returns."""
    import torch
    from servegym.agents import callbacks
    from servegym.agents.train import train

    torch.set_num_threads(1)
    stop = threading.Event()
    base = callbacks.SeededEvalCallback

    class StopAfter(base):  # type: ignore[misc, valid-type]
        """The suite's evaluator, ending the run after ``evals`` evaluations (a timing run, not a result)."""

        def evaluate(self) -> dict[str, float]:
            out = super().evaluate()
            if len(self.history) >= evals:
                stop.set()
            return out

    refs = protocol.checkpoint_references(e.env_id) or {}
    with tempfile.TemporaryDirectory(prefix="tts_") as tmp:
        cfg = replace(bm.train_config({"entry": e.__dict__, "seed": 0, "run_dir": tmp}),
                      baselines=",".join(sorted(set(refs.values()))))
        callbacks.SeededEvalCallback = StopAfter
        c0, w0 = cpu_now(), time.perf_counter()
        try:
            res = train(cfg, stop=stop)
        finally:
            callbacks.SeededEvalCallback = base
        cpu, wall = cpu_now() - c0, time.perf_counter() - w0
    hist = res.eval_history
    return {"steps": [float(h["timesteps"]) for h in hist], "cpu_s": [float(h["cpu_s"]) for h in hist],
            "mean_reward": [float(h["mean_reward"]) for h in hist], "run_cpu_s": cpu, "run_wall_s": wall}


def id_result(e: bm.SuiteEntry, data: dict[str, Any], measure: bool, evals: int,
              previous: dict[str, Any] | None) -> dict[str, Any]:
    trains = [o for o in data["outputs"] if o["kind"] == "train"]
    refs = validation_references(e, trains)
    timing = measure_cpu(e, evals) if measure else (previous or {}).get("timing")
    if timing and previous is None and not measure:
        timing = None
    model = tts.CpuModel(tuple(timing["steps"]), tuple(timing["cpu_s"])) if timing else None
    roles = protocol.yardsticks(e.env_id).roles()
    reach = tts.time_to_strongest(trains, roles, refs["target_score"], model)
    repro = None
    if timing:
        s0 = next((o for o in trains if int(o["seed"]) == 0), None)
        stored = [float(h["mean_reward"]) for h in (s0 or {}).get("validation", [])][:len(timing["mean_reward"])]
        repro = {"stored": stored, "rerun": timing["mean_reward"],
                 "identical": stored == timing["mean_reward"]}
    best = [max((h.get("normalized_score", math.nan) for h in o.get("validation") or []), default=math.nan)
            for o in sorted(trains, key=lambda o: int(o["seed"]))]
    return {"entry": e.__dict__, "in_suite": e in bm.SUITE["quick"], "strongest": refs["strongest"],
            "target_score": refs["target_score"],
            "references": refs, "timing": timing,
            "cpu_model": None if model is None else {"steps": list(model.steps), "cpu_s": list(model.cpu_s)},
            "reproduction": repro, "best_validation_score": best,
            "train_wall_s": [float(o["train_s"]) for o in sorted(trains, key=lambda o: int(o["seed"]))],
            "time_to_strongest": None if reach is None else reach.as_dict()}


def _f(v: float | None, fmt: str = ",.0f") -> str:
    return "-" if v is None or not math.isfinite(v) else format(v, fmt)


def markdown(results: dict[str, dict[str, Any]], budget: str, cpu_total: float) -> str:
    lines = [f"# Time to the strongest baseline on validation ({budget} suite runs)", "",
             "Per training seed: the first validation evaluation whose validation score (0 = naive, 100 = the paper's "
             "method, pooled over the run's validation episodes: the checkpoint scale) reaches the strongest "
             "baseline's on the same episodes, in environment steps and CPU-s; "
             "\"never\" if no evaluation within the budget does. Steps are exact (the stored histories). CPU-s "
             "are estimated, marked est.: the stored runs recorded only steps and their wall time on a machine "
             "shared by many processes, so seed 0 of each entry was rerun up to its first evaluations with the "
             "CPU-s recorded at each (warm start and the validation baselines included), and later evaluations "
             "extrapolated linearly. Runs made from now on record `cpu_s` at every evaluation and the "
             "strongest's validation episodes, and need no estimate. The stored scores were checked against "
             "the naive and paper episodes replayed here (max abs difference below).", "",
             f"Generated by `benchmarks/time_to_strongest.py`; {cpu_total:,.0f} CPU-s in all.", "",
             "| env id | strongest | its validation score | agents' best validation score per seed | time to the "
             "strongest: median over the seeds that reached it | seeds reached | budget (steps) | score check |",
             "|---|---|---|---|---|---|---|---|"]
    for env_id, r in results.items():
        t = r["time_to_strongest"] or {}
        per = ", ".join(_f(v, ".1f") for v in r["best_validation_score"])
        budget_steps = max((s["budget_steps"] for s in t.get("per_seed", [])), default=math.nan)
        note = "" if r["in_suite"] else " (stored run of an entry the suite has since changed)"
        lines.append(f"| {env_id.split('/')[-1]}{note} | `{r['strongest']}` | {_f(r['target_score'], '.2f')} | {per} | "
                     f"{t.get('text', 'no target')} | {t.get('seeds_reached', '-')}/{t.get('seeds', '-')} | "
                     f"{_f(budget_steps)} | {r['references']['score_check_max_abs_diff']:.1e} |")
    failed = [k.split("/")[-1] for k, r in results.items() if not r["references"]["score_check_ok"]]
    if failed:
        lines += ["", f"Score check failed for {', '.join(failed)}: today's code replays those validation episodes "
                  "differently from the stored run (a simulator change since it was made). Where the strongest is the "
                  "paper's method its score is 100 on the run's own scale by construction, so the time to it still "
                  "reads from the stored history; otherwise the id has no target."]
    lines += ["", "## Per seed", "", "| env id | seed | reached at (steps) | CPU-s | best validation score minus the strongest's |", "|---|---|---|---|---|"]
    for env_id, r in results.items():
        for s in (r["time_to_strongest"] or {}).get("per_seed", []):
            cpu = "-" if s["cpu_s"] is None else f"{s['cpu_s']:,.1f}" + (" est." if s["cpu_source"] == "estimated" else "")
            lines.append(f"| {env_id.split('/')[-1]} | {s['seed']} | {'never' if not s['reached'] else _f(s['steps'])} "
                         f"| {cpu} | {s['best_margin']:+.4g} |")
    lines += ["", "## CPU model (timing rerun of seed 0) and reproduction", "",
              "| env id | evaluations at steps | CPU-s at each | rerun CPU-s / wall s | validation returns identical to "
              "the stored seed 0's |", "|---|---|---|---|---|"]
    for env_id, r in results.items():
        tm, rp = r["timing"], r["reproduction"]
        if not tm:
            why = "no seed reached the strongest" if not (r["time_to_strongest"] or {}).get("seeds_reached") else "-"
            lines.append(f"| {env_id.split('/')[-1]} | - | - | not measured ({why}) | - |")
            continue
        ident = "yes" if rp and rp["identical"] else (
            "no: " + ", ".join(f"{a:.6g} vs {b:.6g}" for a, b in zip(rp["rerun"], rp["stored"], strict=False)) if rp else "-")
        lines.append(f"| {env_id.split('/')[-1]} | {', '.join(_f(s) for s in tm['steps'])} | "
                     f"{', '.join(_f(c, '.1f') for c in tm['cpu_s'])} | {tm['run_cpu_s']:.1f} / {tm['run_wall_s']:.0f} | "
                     f"{ident} |")
    return "\n".join(lines) + "\n"


# --- the leaderboard column, filled into the built files (no other field changes) ---------------------------

def reach_of(env_id: str, out_dir: Path, budget: str, results: dict[str, Any]
             ) -> tuple[tts.TimeToStrongest | None, int]:
    """The time to the strongest of ``env_id``'s stored run, with this script's target and CPU model only where
    they were measured for the same entry; and the run's number of agent test episodes."""
    data = json.loads((out_dir / "suite_runs" / budget / f"{env_id.split('/')[-1]}.json").read_text())
    trains = [o for o in data["outputs"] if o["kind"] == "train"]
    mine = results.get(env_id) or {}
    ref = tts.Reference()
    if tts._same_entry(mine.get("entry", {}), data["entry"]):
        cm = mine.get("cpu_model")
        ref = tts.Reference(mine.get("target_score"),
                            tts.CpuModel(tuple(cm["steps"]), tuple(cm["cpu_s"])) if cm else None)
    roles = protocol.yardsticks(env_id).roles()
    return tts.time_to_strongest(trains, roles, ref.target, ref.cpu_model), sum(len(o["rows"]) for o in trains)


def fill_leaderboard(out_dir: Path, budget: str) -> list[str]:
    """Add the time-to-the-strongest column to every agent row of leaderboard.{json,csv,md} whose stored run
    matches it (same number of agent episodes); returns the ids filled. Every other field stays byte-identical."""
    results = json.loads((out_dir / tts.RESULT_FILE).read_text())["ids"]
    jpath, cpath, mpath = (out_dir / f"leaderboard.{x}" for x in ("json", "csv", "md"))
    jtext = jpath.read_text()
    records = json.loads(jtext)
    if json.dumps(records, indent=2) + "\n" != jtext:
        raise SystemExit("leaderboard.json does not round-trip byte for byte; not filling it")
    reach: dict[tuple[str, str], tts.TimeToStrongest | None] = {}
    for rec in records:
        if rec.get("role") != "agent":
            continue
        got, episodes = reach_of(rec["env"], out_dir, budget, results)
        if episodes != rec["episodes"]:
            raise SystemExit(f"{rec['env']}: the leaderboard row has {rec['episodes']} agent episodes, the stored run "
                             f"{episodes}; not the same run")
        reach[(rec["env"], rec["policy"])] = got
        rec["time_to_strongest"] = None if got is None else got.as_dict()
    new_json = json.dumps(records, indent=2) + "\n"
    # csv: the new columns appended to each line, as the builder writes them (pandas' quoting and float repr)
    lines = cpath.read_text().splitlines()
    head = next(csv.reader([lines[0]]))
    cols = list(tts.csv_fields(None))
    if any(c in head for c in cols):
        raise SystemExit("leaderboard.csv already has the column")
    ie, ip = head.index("env"), head.index("policy")
    out = [lines[0] + "," + ",".join(cols)]
    for line in lines[1:]:
        row = next(csv.reader([line]))
        vals = tts.csv_fields(reach.get((row[ie], row[ip])))
        buf = io.StringIO()
        csv.writer(buf, lineterminator="").writerow(["" if isinstance(v, float) and math.isnan(v) else
                                                     (repr(float(v)) if isinstance(v, (int, float)) and not isinstance(v, str)
                                                      else v) for v in vals.values()])
        out.append(line + "," + buf.getvalue())
    new_csv = "\n".join(out) + "\n"
    # md: the header sentence, then one more column in every section's table
    md = mpath.read_text()
    anchor = "Agents: each seed's checkpoint chosen on the validation split only. "
    if anchor not in md or tts.LEADERBOARD_NOTE in md:
        raise SystemExit("leaderboard.md: header sentence not found, or already filled")
    md = md.replace(anchor, anchor + tts.LEADERBOARD_NOTE + " ", 1)
    env = None
    mlines = []
    for line in md.split("\n"):
        if line.startswith("## "):
            env = line[3:].strip()
        if line.startswith("| policy | role |"):
            line += f" {tts.MD_HEADER} |"
        elif line.startswith("|---|"):
            line += "---|"
        elif line.startswith("| ") and env:
            cells = line.split(" | ")
            policy, role = cells[0][2:], cells[1]
            got = reach.get((env, policy)) if role == "agent" else None
            line += f" {got.text() if got is not None else '-'} |"
        mlines.append(line)
    write_text(jpath, new_json)
    write_text(cpath, new_csv)
    write_text(mpath, "\n".join(mlines))
    return sorted({k[0] for k in reach})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budget", default="quick")
    ap.add_argument("--out-dir", type=Path, default=ROOT)
    ap.add_argument("--ids", nargs="*", help="env id names (e.g. PDProvision-v0); default all stored")
    ap.add_argument("--measure", action="store_true", help="rerun seed 0 up to --evals evaluations for CPU-s")
    ap.add_argument("--evals", type=int, default=2)
    ap.add_argument("--fill-leaderboard", action="store_true")
    a = ap.parse_args(argv)
    if a.fill_leaderboard:
        print("filled:", ", ".join(fill_leaderboard(a.out_dir, a.budget)))
        return 0
    path = a.out_dir / tts.RESULT_FILE
    old = json.loads(path.read_text())["ids"] if path.is_file() else {}
    c0 = cpu_now()
    results = dict(old)
    for e, data in stored_runs(a.out_dir, a.budget, a.ids):
        prev = old.get(e.env_id)
        prev = prev if prev and tts._same_entry(prev.get("entry", {}), e.__dict__) else None
        t0 = cpu_now()
        results[e.env_id] = id_result(e, data, a.measure, a.evals, prev)
        t = results[e.env_id]["time_to_strongest"] or {}
        print(f"{e.env_id}: {t.get('text', 'no target')} ({cpu_now() - t0:.1f} CPU-s)", file=sys.stderr, flush=True)
        # partial results on disk after each id (a long --measure run can be stopped and resumed per id)
        write_text(path, json.dumps({"budget": a.budget, "ids": results}, indent=1) + "\n")
    total = cpu_now() - c0 + sum(r["references"]["cpu_s"] + ((r.get("timing") or {}).get("run_cpu_s") or 0.0)
                                 for k, r in old.items() if k in results and results[k] is r)
    order = [e.env_id for e in bm.SUITE[a.budget]]
    results = dict(sorted(results.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
    write_text(path, json.dumps({"budget": a.budget, "ids": results}, indent=1) + "\n")
    write_text(a.out_dir / "time_to_strongest.md", markdown(results, a.budget, total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
