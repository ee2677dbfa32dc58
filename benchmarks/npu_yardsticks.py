"""The npu yardsticks, measured at the quick suite's horizon (2-h episodes): the strongest shipped
non-oracle baseline chosen on the validation split, then on the test split the scores of naive (Base),
the paper's method (NeuScale), the strongest baseline, ``follow`` (NPUAutoscaleResidual-v0's zero action)
and the oracle (the paper's Ideal, §5.1: a relaxation), with 95 % bootstrap CIs, energy and SLO violation,
and how many test episodes NeuScale's return is below Base's. Beside them, the registry's second hindsight bound,
``hindsight`` (servegym.baselines.npu_hindsight: the least-energy provisioning plan with the episode's demand known
in advance under the real vPod boot times, played through the simulator: a feasible policy, a lower bound on the
simulator's hindsight optimum), scored on the same Ideal scale, with its gap to the Ideal and to the strongest
(paired CIs) and its paired verdict against the strongest; on the test split also its planning model's optimum
(the count DP, equal to HiGHS's MILP) and the MILP's LP relaxation (``--plan-report``).

    nice -n 15 python benchmarks/npu_yardsticks.py [--hours 2] [--val-episodes 10] [--episodes 10] [--splits ...]
        [--plan-episodes 10]

On the test split and every named shift (``--splits``): the headroom over the registry's strongest and over the
best shipped baseline on that split, with CIs. Writes ``benchmarks/results/npu_yardsticks.{md,json}`` (atomically). The registry entry
(:data:`servegym.agents.protocol.YARDSTICKS`) quotes the validation choice from here.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import split_best  # the sibling module (benchmarks/ is on sys.path when run as a script)
from servegym.agents import benchmark as bm
from servegym.agents import protocol, protocol_stats
from servegym.agents.rollout import seeds_from

import servegym  # noqa: F401  (registers the ids)
from servegym.outputs import write_json, write_text

ENV = "servegym/NPUAutoscale-v0"
RESIDUAL = "servegym/NPUAutoscaleResidual-v0"
#: The shipped npu baselines that use no oracle information (the strongest is chosen among them).
CANDIDATES = ("base", "neuscale")
#: The splits scored: the test split and the env's named shifts (servegym.splits).
SPLITS = ("test", "shift-weekend", "shift-lveval", "shift-openthoughts")
RESULTS = Path(__file__).resolve().parent / "results"
#: The hindsight provisioning plan (protocol.Yardsticks.hindsight): a feasible bound beside the Ideal.
HINDSIGHT = "hindsight"


def split_table(split: str, episodes: int, strongest: str, kwargs: dict[str, Any], follow: bool = True
                ) -> dict[str, Any]:
    """Every yardstick on ``episodes`` episodes of ``split`` of NPUAutoscale-v0 (follow, where asked: the
    residual id's zero action on the same reset seeds, scored against the residual id's own anchors, whose
    returns are relative to Base per epoch), the headroom over the registry's strongest and over the best
    shipped baseline on this split, and the paper's paired verdict against Base on the KPI."""
    seeds = seeds_from(bm.TEST_SEED, episodes)  # the test split and the shifts are scored on seeds 0..
    y = protocol.yardsticks(ENV)
    env = bm.make_split_env(ENV, split, kwargs)
    try:
        runs = bm.run_policy_episodes(ENV, env, list(dict.fromkeys([y.naive, y.paper, strongest, "ideal", HINDSIGHT])),
                                      seeds)
        kpi = protocol.kpi_metric(env)
    finally:
        env.close()
    rruns: dict[str, Any] = {}
    if follow:
        renv = bm.make_split_env(RESIDUAL, split, kwargs)
        try:
            rruns = bm.run_policy_episodes(RESIDUAL, renv, ["base", "ideal", "follow"], seeds)
        finally:
            renv.close()
    scale = protocol.make_scale(ENV, runs[y.naive], runs[y.paper], runs["ideal"])
    rows = []
    strong_by_seed = protocol.seed_scores(runs[strongest], scale.scores(runs[strongest]))
    head, head_ci = protocol.headroom(strong_by_seed)
    # the best shipped non-oracle baseline on this split (for information: the registry's strongest is chosen
    # on validation only)
    best = split_best.best_baseline({c: protocol.seed_scores(runs[c], scale.scores(runs[c])) for c in CANDIDATES},
                                    strongest)
    margin = np.array([o.reward - n.reward for o, n in zip(runs["ideal"], runs[y.naive], strict=True)])
    m_ci = protocol_stats._paired_ci([margin], protocol_stats._mean_along)
    table = [("naive", y.naive, runs[y.naive], scale), ("paper", y.paper, runs[y.paper], scale),
             ("strongest", strongest, runs[strongest], scale)]
    if follow:
        rscale = protocol.make_scale(RESIDUAL, rruns["base"], rruns["base"], rruns["ideal"])
        table.append(("follow", "follow (residual id)", rruns["follow"], rscale))
    table.append(("hindsight", f"{HINDSIGHT} (feasible)", runs[HINDSIGHT], scale))
    table.append(("oracle", "ideal", runs["ideal"], scale))
    for role, name, res, sc in table:
        st = protocol.score_stats(sc.scores(res))
        rows.append({"role": role, "policy": name, "scores": [float(x) for x in sc.scores(res)],
                     "score_mean": st.mean, "score_ci": list(st.mean_ci),
                     "iqm": st.iqm, "energy_mj": protocol.mean_metric(res, "energy_j") / 1e6,
                     "kpi": protocol.mean_metric(res, kpi),
                     "slo_violation_pct": protocol.mean_metric(res, protocol.SLO_METRIC)})
    # the hindsight plan against the Ideal (its gap, 100 - its score) and against the strongest (paired)
    h_by_seed = protocol.seed_scores(runs[HINDSIGHT], scale.scores(runs[HINDSIGHT]))
    gap_ideal, gap_ideal_ci = protocol.headroom(h_by_seed)
    h_minus_s = np.array([h_by_seed[s] - strong_by_seed[s] for s in sorted(set(h_by_seed) & set(strong_by_seed))])
    hs_ci = protocol_stats._paired_ci([h_minus_s], protocol_stats._mean_along)
    hindsight = {"gap_to_ideal": gap_ideal, "gap_to_ideal_ci": list(gap_ideal_ci),
                 "minus_strongest": float(h_minus_s.mean()), "minus_strongest_ci": list(hs_ci),
                 "vs_strongest": protocol.paired_verdict(runs[HINDSIGHT], runs[strongest], kpi, strongest).as_dict(),
                 "vs_naive": protocol.paired_verdict(runs[HINDSIGHT], runs[y.naive], kpi, y.naive).as_dict()}
    below = sum(p.reward < b.reward for p, b in zip(runs[y.paper], runs[y.naive], strict=True))
    verdict = protocol.paired_verdict(runs[y.paper], runs[y.naive], kpi, y.naive)
    return {"split": split, "episodes": episodes, "seeds": seeds, "kpi": kpi, "scale": scale.name, "rows": rows,
            "headroom": head, "headroom_ci": list(head_ci), "best": best,
            "oracle_minus_naive_return": float(margin.mean()), "oracle_minus_naive_ci": list(m_ci),
            "paper_below_naive": int(below), "paper_vs_naive": verdict.as_dict(), "hindsight": hindsight,
            "returns": {n: [r.reward for r in runs[n]] for n in (y.naive, y.paper, "ideal", HINDSIGHT)}}


def plan_report(split: str, episodes: int, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The hindsight plan's planning model on ``episodes`` episodes of ``split``: the candidate it chose (structure
    per phase, utilization targets), its planned energy (the planning model's optimum for that candidate) beside
    the played energy, and for its groups' count problems the DP's static energy, HiGHS's MILP optimum and the
    MILP's LP relaxation (J); the candidates played and the planning CPU-s."""
    from servegym.baselines.npu_hindsight import HindsightPolicy, count_plan, milp_count_plan
    from servegym.envs.npu.sim.fluid import make_cluster

    env = bm.make_split_env(ENV, split, kwargs)
    u = env.unwrapped
    rows = []
    try:
        for seed in seeds_from(bm.TEST_SEED, episodes):
            u.reset(seed=seed)
            sim = make_cluster(u.cluster_config, u.workload, seed=u.simulation_seed, catalog=u.catalog,
                               fidelity=u.config.fidelity)
            c0 = time.process_time()
            pol = HindsightPolicy(slo_penalty=u.config.slo_penalty / u.config.objective_weight)
            pol.reset(sim)
            cpu = time.process_time() - c0
            plan = pol.plan
            assert plan is not None
            dp = milp = lp = 0.0
            for g in plan.groups:
                per = float(sim.cfg_static_w[g.config]) * sim.config.check_s
                dp += count_plan(g.demand, g.lead)[1] * per
                milp += milp_count_plan(g.demand, g.lead) * per
                lp += milp_count_plan(g.demand, g.lead, relax=True) * per
            chosen = pol.kept
            # the least energy among its played candidates (each a feasible run of this episode) at an SLO violation
            # no higher than Base's on the same episode: what knowing the future saves at Base's SLO
            base = u.run_baseline(y_naive(), seed)["summary"]
            ok = [c for c in pol.candidates if c["slo_violation_pct"] <= base["slo_violation_pct"]]
            low = min(ok, key=lambda c: c["played_energy_j"]) if ok else None
            rows.append({"seed": seed, "model": u.scenario["model"], "structure": list(plan.structure),
                         "utilization": list(plan.utilization), "groups": [f"{g.key[0]}<={g.key[1]}" for g in plan.groups],
                         "planned_energy_j": plan.planned_energy_j, "played_energy_j": chosen["played_energy_j"],
                         "static_dp_j": dp, "static_milp_j": milp, "static_lp_j": lp,
                         "candidates": len(pol.candidates), "cpu_s": cpu,
                         "base_energy_j": float(base["energy_j"]), "base_slo_pct": float(base["slo_violation_pct"]),
                         "slo_violation_pct": chosen["slo_violation_pct"],
                         "low_energy_at_base_slo_j": None if low is None else low["played_energy_j"],
                         "low_energy_slo_pct": None if low is None else low["slo_violation_pct"]})
    finally:
        env.close()
    return {"split": split, "episodes": episodes, "rows": rows}


def y_naive() -> str:
    """The npu ids' naive baseline (Base)."""
    return protocol.yardsticks(ENV).naive


def _f(v: float, d: int = 1) -> str:
    return "nan" if not math.isfinite(v) else f"{v:.{d}f}"


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# npu yardsticks ({ENV}, {report['hours']:g}-h episodes; `{report['command']}`)", "",
             f"Code: commit `{report.get('commit', '?')}`, fluid simulator (the env's default), splits on the 2024 "
             "Azure LLM trace days (test: its own weekday; shift-weekend: a weekend day; shift-lveval / "
             "shift-openthoughts: the other workloads).", "",
             "Scale per episode: 0 = naive (Base), 100 = the oracle, the paper's Ideal (NeuScale §5.1: every "
             "token on its length bucket's best-fit vPod at a full batch, true lengths, no idle or booting "
             "vPods, no misses) -- a relaxation no feasible policy reaches. Mean score over episodes [95 % "
             "bootstrap CI] and IQM. `follow` is NPUAutoscaleResidual-v0's zero action (around NeuScale) on the "
             "same reset seeds, scored on that id's own Base/Ideal anchors. **Headroom** = oracle - the "
             "registry's strongest (chosen on validation; where it is Base = naive, 100 by construction), and "
             "each split also names the best shipped baseline on that split and the headroom over it (base or "
             "neuscale, read off the split itself: information, not a choice; benchmarks/split_best.py).",
             "",
             f"## Strongest baseline, chosen on the validation split ({report['val_episodes']} episodes, seeds "
             f"from {bm.VALIDATION_SEED})", "",
             "| candidate | score mean [95% CI] | energy J | SLO viol. % |", "|---|---|---|---|"]
    for c in report["validation"]:
        lines.append(f"| {c['policy']} | {_f(c['score_mean'])} [{_f(c['score_ci'][0])}, {_f(c['score_ci'][1])}] "
                     f"| {c['kpi']:.4g} | {c['slo_violation_pct']:.3f} |")
    lines += ["", f"Strongest: **{report['strongest']}**.", "",
              "## Headroom per split", "",
              "| split | oracle - naive return [95% CI] | headroom over strongest (`"
              + report["strongest"] + "`) [95% CI] | "
              "paper (neuscale) score | paper vs naive: energy diff MJ [95% CI], SLO diff pp | "
              "paper below naive |", "|---|---|---|---|---|---|"]
    for t in report["splits"]:
        paper = next(r for r in t["rows"] if r["role"] == "paper")
        v = t["paper_vs_naive"]
        scale_mj = 1e6 if t["kpi"] == "energy_j" else 1.0
        lines.append(f"| {t['split']} | {t['oracle_minus_naive_return']:.1f} [{t['oracle_minus_naive_ci'][0]:.1f}, "
                     f"{t['oracle_minus_naive_ci'][1]:.1f}] | {_f(t['headroom'])} [{_f(t['headroom_ci'][0])}, "
                     f"{_f(t['headroom_ci'][1])}] | {_f(paper['score_mean'])} [{_f(paper['score_ci'][0])}, {_f(paper['score_ci'][1])}] | "
                     f"{v['kpi_diff'] / scale_mj:+.1f} [{v['kpi_diff_ci'][0] / scale_mj:+.1f}, "
                     f"{v['kpi_diff_ci'][1] / scale_mj:+.1f}], {v['slo_diff_pp']:+.2f} | "
                     f"{t['paper_below_naive']} of {t['episodes']} |")
    lines += ["", *split_best.markdown([(t["split"], t["best"]) for t in report["splits"]], ENV)]
    lines += ["", "## The hindsight provisioning plan per split", "",
              "`hindsight` (servegym.baselines.npu_hindsight, registered as the npu ids' `Yardsticks.hindsight`, kind "
              "*feasible*): the least-energy vPod plan per group and 60-s decision point with the episode's demand "
              "known in advance, ordering each vPod a worst-case boot time (108 s create + download, engine start, "
              "weight load) ahead, played through the simulator's own decision loop. A feasible policy: its return "
              "is a lower bound on the simulator's hindsight optimum, while the Ideal (the scale's 100) is an upper "
              "bound on every policy's; the true optimum lies between them. Score on the Ideal scale; gap to the "
              "Ideal = 100 - its score; minus the strongest, paired by episode; energy and SLO against the "
              "strongest with the protocol's paired verdict (95 % bootstrap CIs).", "",
              "| split | hindsight score [95% CI] | gap to Ideal [95% CI] | hindsight - strongest [95% CI] | "
              "energy vs strongest MJ [95% CI] | SLO vs strongest pp [95% CI] | beats strongest | energy vs naive "
              "MJ [95% CI], SLO pp |", "|---|---|---|---|---|---|---|---|"]
    for t in report["splits"]:
        h = t.get("hindsight")
        if h is None:
            continue
        row = next(r for r in t["rows"] if r["role"] == "hindsight")
        vs, vn = h["vs_strongest"], h["vs_naive"]
        mj = 1e6 if t["kpi"] == "energy_j" else 1.0
        lines.append(f"| {t['split']} | {_f(row['score_mean'])} [{_f(row['score_ci'][0])}, {_f(row['score_ci'][1])}] | "
                     f"{_f(h['gap_to_ideal'])} [{_f(h['gap_to_ideal_ci'][0])}, {_f(h['gap_to_ideal_ci'][1])}] | "
                     f"{_f(h['minus_strongest'])} [{_f(h['minus_strongest_ci'][0])}, {_f(h['minus_strongest_ci'][1])}] | "
                     f"{vs['kpi_diff'] / mj:+.1f} [{vs['kpi_diff_ci'][0] / mj:+.1f}, {vs['kpi_diff_ci'][1] / mj:+.1f}] | "
                     f"{vs['slo_diff_pp']:+.2f} [{vs['slo_diff_ci'][0]:+.2f}, {vs['slo_diff_ci'][1]:+.2f}] | "
                     f"{'yes' if vs['beats'] else 'no'} | {vn['kpi_diff'] / mj:+.1f} [{vn['kpi_diff_ci'][0] / mj:+.1f}, "
                     f"{vn['kpi_diff_ci'][1] / mj:+.1f}], {vn['slo_diff_pp']:+.2f} |")
    pr = report.get("plan_report")
    if pr and pr["rows"]:
        lines += ["", f"### Its planning model ({pr['split']} split, {pr['episodes']} episodes)", "",
                  "Per episode: the candidate the hindsight plan kept (grouping per phase: `partition` = the exact DP "
                  "over length-bucket ranges, `single` = one group per phase; prefill/decode utilization targets), "
                  "the planning model's energy for it (static energy of the planned counts + dynamic energy at full "
                  "batch) beside the energy the simulator charged when it was played, and for its groups' count "
                  "problems the static energy of the DP's plan, of HiGHS's MILP optimum and of the MILP's LP "
                  "relaxation. The planning optimum is an optimum of the planning model only (a bound for that "
                  "model, not for the simulator); DP = MILP shows the count DP exact, LP = MILP that the count "
                  "problem's LP relaxation is tight. rho `per-epoch` = the splice of the played plans' prefill "
                  "targets. Last columns: Base's energy and SLO violation on the episode, the kept plan's SLO "
                  "violation, and the least energy among the hindsight plan's played candidates (each a feasible "
                  "run of the episode) whose SLO violation is no higher than Base's: what knowing the future saves "
                  "at Base's SLO, where the kept plan (chosen by the env's return, 50 x per miss) spends energy on "
                  "fewer misses.", "",
                  "| seed | model | kept (prefill, decode), rho | groups | planned MJ | played MJ | DP static MJ | "
                  "MILP static MJ | LP relaxation MJ | candidates played | CPU-s | Base MJ, SLO % | kept SLO % | "
                  "least MJ at SLO <= Base's (SLO %) |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in pr["rows"]:
            rho = "per-epoch" if r["utilization"][0] != r["utilization"][0] else f"{r['utilization'][0]:g}"
            low = ("none" if r["low_energy_at_base_slo_j"] is None else
                   f"{r['low_energy_at_base_slo_j'] / 1e6:.2f} ({r['low_energy_slo_pct']:.2f})")
            lines.append(f"| {r['seed']} | {r['model']} | {r['structure'][0]}, {r['structure'][1]}; "
                         f"{rho}, {r['utilization'][1]:g} | {', '.join(r['groups'])} | "
                         f"{r['planned_energy_j'] / 1e6:.2f} | {r['played_energy_j'] / 1e6:.2f} | "
                         f"{r['static_dp_j'] / 1e6:.3f} | {r['static_milp_j'] / 1e6:.3f} | {r['static_lp_j'] / 1e6:.3f} | "
                         f"{r['candidates']} | {r['cpu_s']:.1f} | {r['base_energy_j'] / 1e6:.2f}, "
                         f"{r['base_slo_pct']:.2f} | {r['slo_violation_pct']:.2f} | {low} |")
        rows = [r for r in pr["rows"] if r["low_energy_at_base_slo_j"] is not None]
        if rows:
            saved = np.array([r["base_energy_j"] - r["low_energy_at_base_slo_j"] for r in rows]) / 1e6
            lines += ["", f"At an SLO violation no higher than Base's, the least-energy played candidate saves "
                      f"{saved.mean():.2f} MJ against Base on average over the {len(rows)} episodes that have one "
                      f"(per episode {saved.min():+.2f} to {saved.max():+.2f} MJ; a reading of the candidates played, "
                      "not a search for that trade-off)."]
    for t in report["splits"]:
        lines += ["", f"## {t['split']} ({t['episodes']} episodes, seeds {t['seeds'][0]}-{t['seeds'][-1]})", "",
                  "| role | policy | score mean [95% CI] | IQM | energy MJ | SLO viol. % |", "|---|---|---|---|---|---|"]
        for r in t["rows"]:
            lines.append(f"| {r['role']} | {r['policy']} | {_f(r['score_mean'])} [{_f(r['score_ci'][0])}, "
                         f"{_f(r['score_ci'][1])}] | {_f(r['iqm'])} | {r['energy_mj']:.2f} | "
                         f"{r['slo_violation_pct']:.3f} |")
    lines += ["", "NeuScale's return below Base's on many episodes is a known finding of the yardstick audit "
              "(reported, not tuned away): the oracle is a relaxation, and Base wins on energy at these rates.", "",
              f"Wall time {report['wall_s']:.0f} s, CPU {report['cpu_s']:.0f} s (nice 15, shared 2-core machine).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=2.0, help="episode length (h); the quick suite's is 2")
    ap.add_argument("--val-episodes", type=int, default=10)
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--splits", default=",".join(SPLITS), help="comma list of the splits scored (test first)")
    ap.add_argument("--plan-episodes", type=int, default=10,
                    help="test episodes of the hindsight plan's planning-model report (0: none)")
    ap.add_argument("--out", default=str(RESULTS / "npu_yardsticks"))
    args = ap.parse_args(argv)
    t0, c0 = time.perf_counter(), os.times()
    kwargs = {"config": {"hours": args.hours}}
    val = bm.select_strongest(ENV, list(CANDIDATES), episodes=args.val_episodes, env_kwargs=kwargs)
    strongest = val[0].policy
    report: dict[str, Any] = {
        "hours": args.hours, "val_episodes": args.val_episodes, "strongest": strongest,
        "command": f"python benchmarks/npu_yardsticks.py --val-episodes {args.val_episodes} --episodes "
                   f"{args.episodes} --hours {args.hours:g} --splits {args.splits} --plan-episodes {args.plan_episodes}",
        "commit": git_commit(),
        "validation": [{"policy": c.policy, "score_mean": c.score_mean, "score_ci": list(c.score_ci), "kpi": c.kpi,
                        "slo_violation_pct": c.slo_violation_pct} for c in val],
        "splits": []}
    for split in args.splits.split(","):
        # follow (around NeuScale) only on test: on the shifts it equals neuscale exactly (tested)
        report["splits"].append(split_table(split, args.episodes, strongest, kwargs, follow=split == "test"))
        _save(report | {"wall_s": time.perf_counter() - t0, "cpu_s": _cpu(c0)}, Path(args.out), quiet=True)
    if args.plan_episodes > 0:
        report["plan_report"] = plan_report(args.splits.split(",")[0], args.plan_episodes, kwargs)
    report["wall_s"] = time.perf_counter() - t0
    report["cpu_s"] = _cpu(c0)
    return _save(report, Path(args.out))


def _cpu(c0: Any) -> float:
    c1 = os.times()
    return (c1.user - c0.user) + (c1.system - c0.system)


def git_commit() -> str:
    """The commit the numbers were measured on (short hash; '+' when the work tree differs)."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+" if dirty else "")


def _save(report: dict[str, Any], out: Path, quiet: bool = False) -> int:
    """``out``.json and ``out``.md (atomically; written after each split, so a stopped run keeps what it
    measured), the table on stdout."""
    out.parent.mkdir(parents=True, exist_ok=True)
    text = markdown(report)
    write_json(out.with_suffix(".json"), report, indent=1, default=float)
    write_text(out.with_suffix(".md"), text)
    if not quiet:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
