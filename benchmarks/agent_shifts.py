"""Generalization of the leaderboard's learned agents: the same stored models on every named shift of their env
id, with the paired verdict against the id's strongest baseline on each.

    python benchmarks/agent_shifts.py --ids PDProvisionFront-v0 PDProvisionResidual-v0 --episodes 10 \\
        --models PDProvisionFront-v0=/path/to/suite_runs_models ...

For every env id it reads the stored suite run (``benchmarks/results/suite_runs/quick/<id>.json``: the entry's env
kwargs and, per training seed, the validation-selected checkpoint it played on test, ``chosen``). ``--models ID=DIR``
says where those checkpoints lie now (``DIR/<run folder>/<file>``; the models are not in git); without it the stored
path is used as it is.

1. **Reproduction check.** Every seed's model replays the stored test episodes; its per-episode returns must equal
   the stored ones exactly, or the id is skipped (``reproduces: false`` in the output, with the largest difference).
   The summary builder below is then run on the stored test rows and compared with ``leaderboard.json``'s agent
   record (score, KPI difference and CI, gap closed), so the shift figures come from the leaderboard's own arithmetic.
2. **Shifts.** On every named shift of the id's family (:data:`servegym.splits.FAMILY_SPLITS`), on reset seeds
   ``0 .. episodes-1``: the suite's policies (naive, the paper's method, the strongest, follow where the id has it,
   the oracle, the family's other baselines) and the 5 seeds' agents, all on the same episodes. Per shift: each
   policy's normalized score (0 = naive, 100 = the oracle, per episode, on the shift's own episodes), the agent's
   paired verdict against the id's strongest baseline (chosen on validation, never on a shift; the protocol's
   rule, :mod:`servegym.agents.verdict`) (results stored before 2026-12-07 were judged with the earlier rule: episodes-only CIs, mean SLO within max(0.05 pp, 10 %)), the gap closed, the shift's headroom, and which baseline scores best on the shift in hindsight
   (with the agent's verdict against it where it is not the strongest).

Results are written atomically after every (id, shift) to ``--out-dir``/agent_shifts.{json,md}; a rerun resumes:
an (id, split) already there with the same episode count is kept (``--force`` replays it). CPU-s are this process's
user + system time per (id, shift).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# one thread before numpy/torch load: with more, the replayed test returns differed from the stored ones by 1 ulp
# on 6 of 50 PDProvisionFront-v0 episodes; with one, all 50 are identical
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from servegym.agents import protocol
from servegym.agents.benchmark import (
    RESULTS_DIR,
    TEST_SEED,
    SuiteEntry,
    make_split_env,
    run_policy_episodes,
    suite_policies,
)
from servegym.agents.families import EpisodeResult, family_for
from servegym.agents.leaderboard_scores import _result
from servegym.agents.rollout import agent_act_fn, play_episode, seeds_from
from servegym.agents.suite_runs import _tuple

from servegym.errors import ConfigError
from servegym.outputs import write_json, write_text
from servegym.splits import BASE_SPLITS, ENV_FAMILY, splits_of

SUITE = RESULTS_DIR / "suite_runs" / "quick"
OUT_DIR = RESULTS_DIR / "learnability"
IDS = ("PDProvisionFront-v0", "PDProvisionResidual-v0", "PDProvision-v0", "NPUAutoscaleResidual-v0",
       "NPUAutoscale-v0", "GeoRoute-v0", "GeoRouteWindow-v0")
AGENT = "agent"


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def family_splits(env_id: str) -> list[str]:
    """The named shifts of the id's family (every split that is not train/validation/test)."""
    fam = family_for(env_id).name
    fam = ENV_FAMILY.get(env_id, fam)
    return [s for s in splits_of(fam) if s not in BASE_SPLITS]


# ----------------------------------------------------------------------------------------------- summary
def _f(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def summarize(env_id: str, by_policy: dict[str, list[EpisodeResult]], strongest: str, kpi: str) -> dict[str, Any]:
    """The leaderboard's figures for one split from every policy's episodes (``by_policy[AGENT]``: the agents'
    episodes pooled over training seeds, each with ``metrics['train_seed']``): scores on the split's own scale,
    the agent's (and every policy's) paired verdict against ``strongest``, gap closed, headroom, and the best
    baseline on the split in hindsight. Uses only :mod:`servegym.agents.protocol`, as the leaderboard does."""
    y = protocol.yardsticks(env_id)
    scale = protocol.make_scale(env_id, by_policy[y.naive], by_policy[y.paper], by_policy.get(y.oracle or ""))
    strong = by_policy[strongest]
    strong_by_seed = protocol.seed_scores(strong, scale.scores(strong))
    head, head_ci = protocol.headroom(strong_by_seed) if scale.oracle else (math.nan, (math.nan, math.nan))
    pols: dict[str, Any] = {}
    for name, res in by_policy.items():
        sc = scale.scores(res)
        st = protocol.score_stats(sc)
        v = None if name == strongest else protocol.paired_verdict(res, strong, kpi, strongest)
        gc, gc_ci = (protocol.gap_closed(protocol.seed_scores(res, sc), strong_by_seed) if scale.oracle
                     else (math.nan, (math.nan, math.nan)))
        pols[name] = {"episodes": len(res), "score_mean": _f(st.mean), "score_mean_ci": [_f(x) for x in st.mean_ci],
                      "score_iqm": _f(st.iqm), kpi: _f(protocol.mean_metric(res, kpi)),
                      "slo_violation_pct": _f(protocol.mean_metric(res, protocol.SLO_METRIC)),
                      "vs_strongest": None if v is None else {**v.as_dict(), "reason": v.reason()},
                      "gap_closed": _f(gc), "gap_closed_ci": [_f(x) for x in gc_ci]}
    # the best non-learned baseline on this split in hindsight (not the oracle; follow is not a baseline)
    cands = [p for p in by_policy if p not in (AGENT, protocol.FOLLOW, y.oracle, y.hindsight)
             and pols[p]["score_mean"] is not None]
    best = max(cands, key=lambda p: pols[p]["score_mean"]) if cands else strongest
    out: dict[str, Any] = {"scale": scale.name, "kpi": kpi, "strongest": strongest, "policies": pols,
                           "headroom": _f(head), "headroom_ci": [_f(x) for x in head_ci], "best_baseline": best}
    if AGENT in by_policy:
        agent = by_policy[AGENT]
        if best != strongest:
            vb = protocol.paired_verdict(agent, by_policy[best], kpi, best)
            out["agent_vs_best_baseline"] = {**vb.as_dict(), "reason": vb.reason()}
        if protocol.FOLLOW in by_policy:
            vf = protocol.paired_verdict(agent, by_policy[protocol.FOLLOW], kpi, protocol.FOLLOW)
            out["agent_vs_follow"] = vf.as_dict()
        # per training seed: mean KPI difference to the strongest over the split's episodes
        sk = {r.seed: r.metrics[kpi] for r in strong}
        per: dict[int, list[float]] = {}
        for r in agent:
            per.setdefault(int(r.metrics.get("train_seed", -1)), []).append(r.metrics[kpi] - sk[r.seed])
        out["per_seed_kpi_diff"] = {str(k): float(np.mean(v)) for k, v in sorted(per.items())}
    return out


# ---------------------------------------------------------------------------------------------- playing
def load_run(idn: str, suite: Path = SUITE) -> tuple[SuiteEntry, list[dict[str, Any]]]:
    data = json.loads((suite / f"{idn}.json").read_text())
    e = SuiteEntry(**{**data["entry"], "baselines": _tuple(data["entry"].get("baselines"))})
    return e, data["outputs"]


def model_paths(outs: Sequence[dict[str, Any]], models: Path | None) -> dict[int, Path]:
    """Training seed -> the checkpoint the suite played on test (relocated under ``models`` if given)."""
    out = {}
    for o in outs:
        if o["kind"] == "train":
            p = Path(o["chosen"])
            out[int(o["seed"])] = p if models is None else models / p.parent.name / p.name
    return dict(sorted(out.items()))


def load_agents(e: SuiteEntry, paths: dict[int, Path]) -> dict[int, Any]:
    from servegym.agents.train import load_agent

    acts = {}
    for k, p in paths.items():
        model, norm, _ = load_agent(p, env_id=e.env_id, env_kwargs=e.env_kwargs)
        acts[k] = agent_act_fn(model, norm)
    return acts


def reference_of(env: Any) -> Any:
    """The action that plays the env's reference (its strongest-baseline plan where the entry sets ``reference``)
    for the coming step: ``reference_action()`` where the env has it, else the residual zero action, else None."""
    fn = getattr(env.unwrapped, "reference_action", None)
    try:
        return fn() if fn is not None else protocol.follow_action(env)
    except ConfigError:
        return None


class Agreement:
    """How an agent's actions relate to the reference's on the steps it played (why it wins or loses): the share
    of steps equal to the reference action, and per action dimension the mean of agent - reference and the
    shares below and above it (pd: prefill/decode instances or the front slot; geo: the DC index, order-free)."""

    def __init__(self) -> None:
        self.diffs: list[np.ndarray] = []

    def wrap(self, act: Any) -> Any:
        def tracked(obs: Any, info: dict[str, Any], env: Any) -> Any:
            a = act(obs, info, env)
            ref = reference_of(env)
            if ref is not None:
                self.diffs.append(np.atleast_1d(np.asarray(a, dtype=np.float64) - np.asarray(ref, dtype=np.float64)))
            return a

        return tracked

    def summary(self) -> dict[str, Any] | None:
        if not self.diffs:
            return None
        d = np.stack(self.diffs)
        return {"steps": int(d.shape[0]), "equal": float(np.mean(np.all(d == 0, axis=1))),
                "mean_diff": d.mean(axis=0).tolist(), "below": (d < 0).mean(axis=0).tolist(),
                "above": (d > 0).mean(axis=0).tolist()}


def play_agents(e: SuiteEntry, env: Any, acts: dict[int, Any], seeds: Sequence[int],
                agreement: Agreement | None = None) -> list[EpisodeResult]:
    fam = family_for(e.env_id)
    res = []
    for k, act in acts.items():
        play = act if agreement is None else agreement.wrap(act)
        for s in seeds:
            r = play_episode(env, play, s, AGENT, fam.metrics)
            res.append(EpisodeResult(r.policy, r.seed, r.reward, r.length, {**r.metrics, "train_seed": float(k)}))
        log(f"    agent seed {k}: {len(seeds)} episodes")
    return res


def verify(e: SuiteEntry, outs: Sequence[dict[str, Any]], acts: dict[int, Any]) -> dict[str, Any]:
    """Replay the stored test episodes of every seed's model: returns must be identical (played through
    :class:`Agreement`, so the check also shows that reading the reference action changes nothing)."""
    env = make_split_env(e.env_id, "test", e.env_kwargs)
    fam = family_for(e.env_id)
    worst, n, equal = 0.0, 0, 0
    agree = Agreement()
    try:
        for o in outs:
            if o["kind"] != "train":
                continue
            play = agree.wrap(acts[int(o["seed"])])
            for row in o["rows"]:
                r = play_episode(env, play, int(row["seed"]), AGENT, fam.metrics)
                d = abs(r.reward - float(row["reward"]))
                worst, n, equal = max(worst, d), n + 1, equal + (d == 0.0)
    finally:
        env.close()
    return {"episodes": n, "identical": equal, "max_abs_return_diff": worst, "reproduces": bool(n and equal == n),
            "agreement": agree.summary()}


def stored_by_policy(outs: Sequence[dict[str, Any]]) -> dict[str, list[EpisodeResult]]:
    """The stored test rows per policy (agents under :data:`AGENT`, with their training seed)."""
    by: dict[str, list[EpisodeResult]] = {}
    for o in outs:
        for row in o["rows"]:
            r = _result(row)
            if o["kind"] == "train":
                r = EpisodeResult(AGENT, r.seed, r.reward, r.length, {**r.metrics, "train_seed": float(o["seed"])})
            by.setdefault(r.policy, []).append(r)
    return by


def leaderboard_check(env_id: str, test: dict[str, Any], board: Path) -> dict[str, Any]:
    """The builder's test figures against leaderboard.json's agent record (largest absolute difference)."""
    recs = [r for r in json.loads(board.read_text()) if r["env"] == env_id and r["role"] == "agent"]
    if not recs:
        return {"compared": False}
    rec, mine = recs[0], test["policies"][AGENT]
    pairs = [(rec["score_mean"], mine["score_mean"]), (rec["vs_strongest"]["kpi_diff"], mine["vs_strongest"]["kpi_diff"]),
             *zip(rec["vs_strongest"]["kpi_diff_ci"], mine["vs_strongest"]["kpi_diff_ci"], strict=True),
             (rec["vs_strongest"]["slo_diff_pp"], mine["vs_strongest"]["slo_diff_pp"])]
    if rec.get("gap_closed") is not None:
        pairs.append((rec["gap_closed"], mine["gap_closed"]))
    diff = max(abs(a - b) for a, b in pairs)
    return {"compared": True, "max_abs_diff": diff,
            "beats_equal": rec["vs_strongest"]["beats"] == mine["vs_strongest"]["beats"]}


def run_shift(e: SuiteEntry, split: str, acts: dict[int, Any], episodes: int) -> dict[str, Any]:
    t0 = cpu_s()
    env = make_split_env(e.env_id, split, e.env_kwargs)
    seeds = seeds_from(TEST_SEED, episodes)
    try:
        kpi = protocol.kpi_metric(env)
        names = suite_policies(e)
        log(f"  {split}: {', '.join(names)} and {len(acts)} agents on {episodes} episodes")
        by = run_policy_episodes(e.env_id, env, names, seeds)
        agree = Agreement()
        by[AGENT] = play_agents(e, env, acts, seeds, agree)
    finally:
        env.close()
    strongest = protocol.yardsticks(e.env_id).roles()["strongest"]
    out = summarize(e.env_id, by, strongest, kpi)
    out.update(split=split, episodes=episodes, cpu_s=cpu_s() - t0, agreement=agree.summary(),
               returns={p: [[r.seed, r.reward] for r in rs] for p, rs in by.items()})
    return out


# ----------------------------------------------------------------------------------------------- tables
#: KPI key -> (factor, unit) for the tables (npu's joules shown in MJ).
UNITS = {"energy_j": (1e-6, "MJ"), "energy_kwh": (1.0, "kWh"), "carbon_g": (1.0, "g"), "cost_usd": (1.0, "USD")}


def _ci(v: Any, key: str = "kpi_diff_ci", nd: int = 3, k: float = 1.0) -> str:
    lo, hi = v[key]
    return "n/a" if lo is None else f"[{k * lo:+.{nd}f}, {k * hi:+.{nd}f}]"


def _num(v: float | None, fmt: str = ".1f") -> str:
    return "n/a" if v is None else format(v, fmt)


def _agree(a: dict[str, Any] | None) -> str:
    if a is None:
        return "-"
    return f"{100 * a['equal']:.1f} % ({', '.join(f'{d:+.3f}' for d in a['mean_diff'])})"


def table(results: dict[str, Any]) -> str:
    """The markdown report of :func:`main`'s results (one row per id x split, the stored test row first)."""
    lines = ["| env id | split | episodes | agent vs strongest: ΔKPI [95 % CI] | ΔSLO pp (tolerance) | beats | "
             "score agent [95 % CI] | strongest | paper | follow | headroom | gap closed [95 % CI] | "
             "best baseline on the split (score); agent vs it | seeds with mean ΔKPI < 0 | steps at the reference's action "
             "(mean agent − reference) | CPU-s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for idn, r in results["ids"].items():
        if not r.get("verify", {}).get("reproduces", False):
            notes.append(f"- {idn}: not evaluated ({r.get('skipped', 'the stored models do not reproduce')}).")
            continue
        y = protocol.yardsticks("servegym/" + idn)
        for split, s in [("test (stored)", r["test"]), *r["shifts"].items()]:
            a, pol = s["policies"][AGENT], s["policies"]
            v = a["vs_strongest"]
            k, unit = UNITS.get(s["kpi"], (1.0, s["kpi"]))
            best = s["best_baseline"]
            vb = s.get("agent_vs_best_baseline")
            bcell = f"`{best}` ({_num(pol[best]['score_mean'])})" + (
                "" if vb is None else
                f"; ΔKPI {k * vb['kpi_diff']:+.3f} {_ci(vb, k=k)}, {'beats' if vb['beats'] else 'no'}")
            per = s.get("per_seed_kpi_diff", {})
            fol = pol.get(protocol.FOLLOW)
            lines.append(
                f"| {idn} | {split} | {s['episodes']} | {k * v['kpi_diff']:+.3f} {_ci(v, k=k)} {unit} | "
                f"{v['slo_diff_pp']:+.4f} ({v['slo_tolerance_pp']:.3g}) | {'**yes**' if v['beats'] else 'no'} | "
                f"{_num(a['score_mean'])} {_ci(a, 'score_mean_ci', 1).replace('+', '')} | "
                f"{_num(pol[s['strongest']]['score_mean'])} | {_num(pol[y.paper]['score_mean'])} | "
                f"{'-' if fol is None else _num(fol['score_mean'])} | {_num(s['headroom'])} | "
                f"{_num(a['gap_closed'], '.2f')} {_ci(a, 'gap_closed_ci', 2)} | {bcell} | "
                f"{sum(d < 0 for d in per.values())}/{len(per)} | {_agree(s.get('agreement'))} | "
                f"{_num(s.get('cpu_s'), '.0f')} |")
    head = ["Strongest baseline per id (chosen on validation, kept on every shift): "
            + ", ".join(f"{i} `{r['strongest']}`" for i, r in results["ids"].items() if "strongest" in r) + ".",
            "", protocol.BEATS_RULE + ". Agents: the 5 training seeds' validation-selected checkpoints of the stored "
            "suite run, pooled (per scenario the mean over seeds). Scores: 0 = naive, 100 = the oracle, per episode on "
            "the split's own episodes. \"test (stored)\" is the leaderboard's row rebuilt by this script from the stored "
            "episodes (checked against leaderboard.json).", ""]
    cost = [f"- {i}: {sum(x.get('cpu_s', 0.0) for x in r['shifts'].values()) + r['verify'].get('cpu_s', 0.0):.0f} "
            f"CPU-s (reproduction check {r['verify'].get('cpu_s', 0.0):.0f}), `{r.get('command', '')}`"
            for i, r in results["ids"].items() if r.get("verify", {}).get("reproduces")]
    return "\n".join(head + lines + (["", *notes] if notes else []) + ["", "CPU (user + system of this script) and "
                                                                       "commands:", "", *cost]) + "\n"


# ------------------------------------------------------------------------------------------------- main
def parse_models(items: Sequence[str]) -> dict[str, Path]:
    out = {}
    for it in items:
        if "=" not in it:
            raise SystemExit(f"--models {it!r}: expected ID=DIR")
        k, v = it.split("=", 1)
        out[k.split("/")[-1]] = Path(v)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ids", nargs="+", default=list(IDS))
    ap.add_argument("--episodes", type=int, default=10, help="episodes per shift (reset seeds 0..N-1)")
    ap.add_argument("--models", nargs="*", default=[], help="ID=DIR: where the id's stored checkpoints lie now")
    ap.add_argument("--splits", default=None, help="comma-separated shifts (default: every shift of the family)")
    ap.add_argument("--out-dir", type=Path, default=OUT_DIR)
    ap.add_argument("--suite", type=Path, default=SUITE)
    ap.add_argument("--force", action="store_true", help="replay (id, split) results already in the json")
    ap.add_argument("--report", action="store_true", help="only rewrite the markdown from the json")
    args = ap.parse_args(argv)
    if args.report:
        data = json.loads((args.out_dir / "agent_shifts.json").read_text())
        write_text(args.out_dir / "agent_shifts.md", table(data))
        return 0
    import torch

    torch.set_num_threads(1)
    models = parse_models(args.models)
    jpath, mpath = args.out_dir / "agent_shifts.json", args.out_dir / "agent_shifts.md"
    results = json.loads(jpath.read_text()) if jpath.is_file() else {"ids": {}}
    command = "python benchmarks/agent_shifts.py " + " ".join(argv if argv is not None else sys.argv[1:])

    def save() -> None:
        write_json(jpath, results, indent=1)
        write_text(mpath, table(results))

    for idn in args.ids:
        idn = idn.split("/")[-1]
        e, outs = load_run(idn, args.suite)
        t0 = cpu_s()
        paths = model_paths(outs, models.get(idn))
        missing = [str(p) for p in paths.values() if not p.is_file()]
        r = results["ids"].setdefault(idn, {"shifts": {}})
        r["strongest"] = protocol.yardsticks(e.env_id).roles()["strongest"]
        r["command"] = command
        if missing:
            r.update(verify={"reproduces": False}, skipped=f"checkpoints missing: {missing[0]} ...")
            log(f"{idn}: {r['skipped']}")
            save()
            continue
        acts = load_agents(e, paths)
        if args.force or not r.get("verify", {}).get("reproduces"):
            log(f"{idn}: replaying the stored test episodes of {len(acts)} models")
            r["verify"] = {**verify(e, outs, acts), "cpu_s": cpu_s() - t0}
            r.pop("skipped", None)
            env = make_split_env(e.env_id, "test", e.env_kwargs)
            kpi = protocol.kpi_metric(env)
            env.close()
            r["test"] = summarize(e.env_id, stored_by_policy(outs), r["strongest"], kpi)
            r["test"].update(split="test", episodes=e.episodes, agreement=r["verify"]["agreement"])
            r["verify"]["leaderboard"] = leaderboard_check(e.env_id, r["test"], args.suite.parents[1] / "leaderboard.json")
            log(f"{idn}: {r['verify']}")
            save()
        if not r["verify"]["reproduces"]:
            r["skipped"] = (f"the stored models do not reproduce the stored test returns "
                            f"({r['verify']['identical']}/{r['verify']['episodes']} identical, largest difference "
                            f"{r['verify']['max_abs_return_diff']:.3g})")
            save()
            continue
        splits = args.splits.split(",") if args.splits else family_splits(e.env_id)
        for split in splits:
            old = r["shifts"].get(split)
            if old is not None and old["episodes"] == args.episodes and not args.force:
                continue
            r["shifts"][split] = run_shift(e, split, acts, args.episodes)
            s = r["shifts"][split]
            v = s["policies"][AGENT]["vs_strongest"]
            log(f"  {idn} {split}: dKPI {v['kpi_diff']:+.4f} {_ci(v)}, dSLO {v['slo_diff_pp']:+.4f} pp, "
                f"beats={v['beats']}, score {s['policies'][AGENT]['score_mean']}, {s['cpu_s']:.0f} CPU-s")
            save()
    save()
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
