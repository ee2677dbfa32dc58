"""The pd leaderboard's agent verdicts re-checked on the request-level simulator.

The pd ids are scored on the fluid model (``mode="fluid"``), whose capacity is within 1.9 % of the
request-level simulator on average and 6.2 % at worst (``pd_crosscheck.md``); an agent's gain over the
strongest baseline can be smaller than that. This plays, for each pd id on the stored leaderboard (by default
the ids whose agent beats the strongest there; ``--all`` every pd id), the shipped models of every training
seed (``benchmarks/models/quick/<Id>/s<k>``) and the strongest baseline on the first ``--episodes`` test
episodes with ``mode="request"`` (same scenarios, arrivals drawn request by request), and judges them with the
protocol's verdict (:mod:`servegym.agents.verdict`) beside the fluid verdict on the same episodes.

    python benchmarks/pd_request_check.py [--episodes 10] [--all] [--ids PDProvision-v0,...]

Writes ``benchmarks/results/pd_request_check.{json,md}`` atomically after every id; a rerun skips stored ids
(``--force`` replays them). About 12 CPU-s per request-level episode.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from servegym.agents import benchmark as bm
from servegym.agents import protocol
from servegym.agents.families import EpisodeResult, family_for
from servegym.agents.replay import shipped_folder
from servegym.agents.rollout import agent_act_fn, play_episode, seeds_from

import servegym  # noqa: F401  (registers the ids)
from servegym.outputs import write_text

RESULTS = Path(__file__).resolve().parent / "results"
PD_IDS = ("servegym/PDProvision-v0", "servegym/PDProvisionResidual-v0", "servegym/PDProvisionFront-v0")


def _agent_runs(env_id: str, kwargs: dict[str, Any], seeds: list[int], n_seeds: int) -> list[EpisodeResult]:
    from servegym.agents.train import load_agent

    out = []
    for k in range(n_seeds):
        model = shipped_folder("quick", env_id, k) / "model.zip"
        agent, norm, run = load_agent(model, env_id=env_id, env_kwargs=kwargs)
        env = bm.make_split_env(env_id, "test", kwargs)
        try:
            act = agent_act_fn(agent, norm)
            for s in seeds:
                r = play_episode(env, act, s, f"agent:{run.get('algo', 'agent')}", family_for(env_id).metrics)
                out.append(EpisodeResult(r.policy, r.seed, r.reward, r.length, r.metrics, train_seed=k))
                print(f"  {env_id} seed {k} episode {s}: {r.metrics['energy_kwh']:.3f} kWh", file=sys.stderr, flush=True)
        finally:
            env.close()
    return out


def check(env_id: str, episodes: int) -> dict[str, Any]:
    """The agent and the strongest on request-level test episodes, with both verdicts."""
    entry = next(e for e in bm.SUITE["quick"] if e.env_id == env_id)
    strongest = protocol.yardsticks(env_id).roles()["strongest"]
    seeds = seeds_from(bm.TEST_SEED, episodes)
    t0 = time.process_time()
    req_kwargs = {**entry.env_kwargs, "config": {**entry.env_kwargs.get("config", {}), "mode": "request"}}
    env = bm.make_split_env(env_id, "test", req_kwargs)
    try:
        base = bm.run_policy_episodes(env_id, env, [strongest], seeds)[strongest]
        kpi = protocol.kpi_metric(env)
    finally:
        env.close()
    agent = _agent_runs(env_id, req_kwargs, seeds, entry.seeds)
    board = [r for r in json.loads((RESULTS / "leaderboard.json").read_text()) if r["env"] == env_id]
    fluid = next((r["vs_strongest"] for r in board if r["role"] == "agent"), None)
    v = protocol.paired_verdict(agent, base, kpi, strongest)
    return {"env_id": env_id, "strongest": strongest, "episodes": episodes, "seeds": entry.seeds,
            "request": v.as_dict(), "text": v.text("agent"), "fluid_board": fluid,
            "strongest_request_kpi": protocol.mean_metric(base, kpi),
            "strongest_request_slo_pct": protocol.mean_metric(base, protocol.SLO_METRIC),
            "agent_request_kpi": protocol.mean_metric(agent, kpi),
            "agent_request_slo_pct": protocol.mean_metric(agent, protocol.SLO_METRIC),
            "cpu_s": time.process_time() - t0}


def markdown(report: dict[str, Any]) -> str:
    lines = ["# pd agents against the strongest on the request-level simulator (`python benchmarks/pd_request_check.py`)",
             "", "The leaderboard scores pd on the fluid model; this replays the shipped agents (every training seed) "
             "and the strongest baseline on the first test episodes with `mode=\"request\"` and applies the same "
             f"verdict ({protocol.BEATS_RULE}). The fluid column is the leaderboard's verdict on all its test "
             "episodes.", "",
             "| env id | episodes x seeds | strongest | request level: energy diff kWh [95 % CI] (%) | SLO diff pp [CI] "
             "(tolerance) | outcome | fluid board: outcome, energy diff (%) | CPU-s |", "|---|---|---|---|---|---|---|---|"]
    for r in report["ids"].values():
        v, f = r["request"], r["fluid_board"] or {}
        lines.append(f"| {r['env_id']} | {r['episodes']} x {r['seeds']} | {r['strongest']} | {v['kpi_diff']:+.3f} "
                     f"[{v['kpi_diff_ci'][0]:+.3f}, {v['kpi_diff_ci'][1]:+.3f}] ({v['kpi_diff_pct']:+.2f} %) | "
                     f"{v['slo_diff_pp']:+.4f} [{v['slo_diff_ci'][0]:+.4f}, {v['slo_diff_ci'][1]:+.4f}] "
                     f"({v['slo_tolerance_pp']:.2g}) | {v['outcome']} ({v['seeds_beating']} of {v['seeds']} seeds) | "
                     f"{f.get('outcome', '-')}, {f.get('kpi_diff', float('nan')):+.3f} ({f.get('kpi_diff_pct', float('nan')):+.2f} %) | "
                     f"{r['cpu_s']:.0f} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--all", action="store_true", help="every pd id, not only those whose agent beats")
    ap.add_argument("--ids", default=None, help="comma list of pd ids (short or full names)")
    ap.add_argument("--out", default=str(RESULTS / "pd_request_check"))
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    board = json.loads((RESULTS / "leaderboard.json").read_text())
    if args.ids:
        ids = [i if i.startswith("servegym/") else f"servegym/{i}" for i in args.ids.split(",")]
    else:
        ids = [i for i in PD_IDS if args.all or any(r["env"] == i and r["role"] == "agent"
                                                    and (r.get("vs_strongest") or {}).get("beats") for r in board)]
    bad = [i for i in ids if i not in PD_IDS]
    if bad or args.episodes < 2:
        print(f"--ids {bad} / --episodes {args.episodes}: allowed {', '.join(PD_IDS)}, episodes >= 2", file=sys.stderr)
        return 2
    out = Path(args.out)
    js = out.with_suffix(".json")
    report: dict[str, Any] = json.loads(js.read_text()) if js.exists() else {"ids": {}}
    if not ids:
        print("no pd agent beats the strongest on the leaderboard: nothing to re-check (--all plays them anyway)",
              file=sys.stderr)
    for i in ids:
        if i in report["ids"] and not args.force and report["ids"][i]["episodes"] == args.episodes:
            continue
        report["ids"][i] = check(i, args.episodes)
        print(report["ids"][i]["text"], file=sys.stderr, flush=True)
        write_text(js, json.dumps(report, indent=1, default=float) + "\n")
        write_text(out.with_suffix(".md"), markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
