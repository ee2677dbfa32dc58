"""The stress tracks' headroom (geo, pd and npu): the hindsight oracle, the causal reference and the tuned rules against the
strongest rule, on each track's own splits.

A stress track (:data:`servegym.splits.FAMILY_TRACKS`, the ``track`` config key) lays a condition over the base
splits. Per track, with the id's quick-suite env kwargs (its poll period replaced by the track's):

1. **validation** (reset seeds from :data:`servegym.agents.benchmark.VALIDATION_SEED`, 30 episodes): every shipped
   rule (rr, ll, greedy over alpha 0-1 in steps of 0.2, moer, ilp, iter-ilp, milp, green-llm) is ranked by the
   verdict (:func:`servegym.agents.verdict.verdict_ranking`): the first is the track's **strongest**. The causal
   candidates (:mod:`servegym.baselines.geo.causal`: a rule fed a dead-reckoned snapshot ``+dr:<k>`` and/or
   bias-corrected OSL estimates ``+bc``, over a grid of the lifetime knob ``k``) are ranked the same way among
   themselves: the first is the track's **causal reference** (its knob tuned on validation only). pd: every shipped
   rule with min-power+forecast, threshold-hpa and min-power+ema (the persistence rule fed the observation's
   day-level estimate) over utilization-target grids; the causal candidates are
   ``min-power+expected:<rho>`` (the day's expected rates, :class:`servegym.baselines.pd.MinPowerExpectedForecast`),
   and ``min-power+perfect:1`` (the realized rates) is an extra row labelled as not causal. npu: the family's two
   rules (base, neuscale; the measured id is NPUAutoscale-v0 at the quick suite's 2-h horizon, whose baseline
   episodes NPUAutoscaleResidual-v0 shares); no causal candidate exists (module :data:`NO_CAUSAL`), and the hindsight
   provisioning plan (``hindsight``, a feasible policy that knows the future demand) is an extra row. Beside the
   rows, the episodes on which each rule's peak chips held reach the quota (:func:`quota_binding`).
2. **test** (reset seeds from 0, 30 episodes): the oracle, every rule and every causal candidate on the same
   episodes; each minus the strongest, paired (:func:`servegym.agents.verdict.paired_verdict`: KPI difference
   with its 95 % CI, in % of the strongest's KPI, SLO difference in pp with its CI, return difference and the
   verdict's outcome). Learnable headroom = causal reference - strongest; oracle - causal is what only
   hindsight knows (true lengths, fresh state, the next arrivals, the best of its plans per episode).

    python benchmarks/stress_tracks.py [--tracks geo-route/stress-load,pd/stress-delay] [--episodes 30]

Each track's cells go to ``runs/stress_tracks/<track>.json`` (atomically, a rerun skips a stored track with the
same episodes and candidates) and the section between the stress-track markers of
``benchmarks/results/headroom.md`` is rewritten from every stored track (``benchmarks/headroom.py`` keeps it).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from headroom import STRESS_BEGIN, STRESS_END, splice_stress  # the script's folder is on sys.path
from headroom import _runs as _play
from servegym.agents import benchmark as bm
from servegym.agents import protocol
from servegym.agents.families import EpisodeResult
from servegym.agents.rollout import seeds_from
from servegym.agents.verdict import paired_verdict, verdict_ranking

import servegym  # noqa: F401  (registers the ids)
from servegym.outputs import write_text

RESULTS = Path(__file__).resolve().parent / "results"
STATE = RESULTS.parents[1] / "runs" / "stress_tracks"
ALPHAS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
RULES = ("rr", "ll", *(f"greedy:{a:g}" for a in ALPHAS), "moer", "ilp", "iter-ilp", "milp", "green-llm")


#: pd: every shipped rule, min-power+forecast and threshold-hpa over utilization-target grids reaching down to where
#: the persistence forecast's rules keep their violations low under a 300-s start-up delay.
PD_RHOS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.97)
PD_HPA_TARGETS = (0.6, 0.65, 0.75, 0.8, 0.85)  # threshold-hpa's utilization target (0.7 is plain threshold-hpa)
#: The tracks' observation also has the day's level (config rate_ema_periods), so the persistence rule fed it
#: (``min-power+ema:<rho>``, servegym.baselines.pd.MinPowerEmaForecast) competes too, over the expected-rate rule's grid.
PD_EMA_RHOS = (0.7, 0.75, 0.8, 0.825, 0.85, 0.875, 0.9, 0.95)
PD_RULES = ("min-power", "min-power+lookahead", "static-peak", "threshold-hpa",
            *(f"threshold-hpa:{t:g}" for t in PD_HPA_TARGETS), *(f"min-power+forecast:{r:g}" for r in PD_RHOS),
            *(f"min-power+ema:{r:g}" for r in PD_EMA_RHOS))
NPU_RULES = ("base", "neuscale")  # the family's shipped rules (benchmarks/strongest_by_verdict.py)
FAMILY_RULES: dict[str, tuple[str, ...]] = {"geo": RULES, "pd": PD_RULES, "npu": NPU_RULES}
#: Rows beside the causal candidates that a causal policy cannot reach, labelled as such: pd's rule given the
#: realized rates of the start-up horizon (the episode's own per-minute draws and Poisson counts).
EXTRA_ROWS: dict[str, tuple[str, ...]] = {"pd/stress-delay": ("min-power+perfect:1",),
                                          "pd/stress-long-delay": ("min-power+perfect:1",),
                                          "npu/stress-quota": ("hindsight",)}
EXTRA_ROLE = "realized-rate forecast (not causal)"
#: Track -> the role of its extra rows where it is not :data:`EXTRA_ROLE`.
EXTRA_ROLES: dict[str, str] = {"npu/stress-quota": "hindsight plan (not causal)"}
#: Tracks measured without a causal reference, and why none exists.
NO_CAUSAL: dict[str, str] = {
    "npu/stress-quota": "npu ships two rules (Base, NeuScale) and no forecast rule: both size groups by the last "
                        "epoch's EWMA peak rate, so no rule given the next window's true rates exists to tune, and the "
                        "only future-knowing policy is the hindsight plan (an extra row, not causal); the learnable "
                        "headroom is bounded by the hindsight row, not measured by a causal one"}


def rules_of(env_id: str) -> tuple[str, ...]:
    from servegym.splits import ENV_FAMILY

    return FAMILY_RULES[ENV_FAMILY[env_id]]


def track_kwargs(env_id: str, track: str) -> dict[str, Any]:
    """The id's quick-suite env kwargs on ``track`` (the track sets the poll period, or pd's fields, itself)."""
    base = {e.env_id: e.env_kwargs for e in bm.SUITE["quick"] if e.track is None}[env_id]  # the id's own section
    cfg = dict(base.get("config", {}))
    geo = {k: v for k, v in cfg.get("geo", {}).items() if k != "poll_interval_s"}
    cfg = {**{k: v for k, v in cfg.items() if k != "geo"}, **({"geo": geo} if geo else {}), "track": track}
    return {**base, "config": cfg}


#: track key -> (env id, track, causal candidates). Lifetime grids from a 5-episode validation scout.
TRACKS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "geo-route/stress-load": ("servegym/GeoRoute-v0", "stress-load",
                              (*(f"iter-ilp+dr:{k:g}" for k in (1.0, 1.25, 1.5, 2.0, 2.5)), "ilp+dr:1.5",
                               "milp+dr:1.5")),
    "geo-window/stress-osl": ("servegym/GeoRouteWindow-v0", "stress-osl",
                              ("green-llm+bc", "ilp+bc", "iter-ilp+bc", "milp+bc",
                               *(f"iter-ilp+dr:{k:g}+bc" for k in (1.0, 1.5, 2.0)),
                               *(f"milp+dr:{k:g}+bc" for k in (1.0, 1.5)), "ilp+dr:1.5+bc")),
    # the rule sized for the day's expected rates (servegym.baselines.pd.MinPowerExpectedForecast), target grid
    "pd/stress-delay": ("servegym/PDProvision-v0", "stress-delay",
                        tuple(f"min-power+expected:{r:g}" for r in (0.7, 0.75, 0.8, 0.825, 0.85, 0.875, 0.9, 0.95))),
    "pd/stress-long-delay": ("servegym/PDProvision-v0", "stress-long-delay",
                             tuple(f"min-power+expected:{r:g}" for r in (0.7, 0.75, 0.8, 0.825, 0.85, 0.875, 0.9,
                                                                          0.95))),
    # npu: the baselines play NPUAutoscale-v0's absolute driver (shared by the residual id); no causal candidate
    "npu/stress-quota": ("servegym/NPUAutoscale-v0", "stress-quota", ()),
}


def quota_binding(env_id: str, split: str, kwargs: dict[str, Any], names: tuple[str, ...], seeds: list[int]
                  ) -> dict[str, list[int]]:
    """npu: per rule, the reset seeds of ``split`` on which its peak chips held reach the quota
    (:func:`servegym.envs.npu.tracks.quota_binds`; the rule replayed on the episode's own simulator)."""
    from servegym.baselines.npu import make_policy, run_policy
    from servegym.envs.npu.tracks import quota_binds

    env = bm.make_split_env(env_id, split, kwargs)
    out: dict[str, list[int]] = {p: [] for p in names}
    try:
        u = env.unwrapped
        for s in seeds:
            u.reset(seed=s)
            for p in names:
                sim = u._episode().fresh_cluster()
                run_policy(sim, make_policy(p), hours=u.horizon * u.cluster_config.epoch_s / 3600.0)
                if quota_binds(sim):
                    out[p].append(int(s))
    finally:
        env.close()
    return out


def _rank(runs: dict[str, list[EpisodeResult]], kpi: str) -> list[dict[str, Any]]:
    return [{"policy": r.policy, "beaten_by": list(r.beaten_by), "beats": len(r.beats), "kpi": r.kpi,
             "slo_violation_pct": r.slo_violation_pct, "mean_return": r.mean_return}
            for r in verdict_ranking(runs, kpi)]


def measure(key: str, episodes: int) -> dict[str, Any]:
    """One track (module docstring)."""
    env_id, track, causal = TRACKS[key]
    rules, extra = rules_of(env_id), EXTRA_ROWS.get(key, ())
    kwargs = track_kwargs(env_id, track)
    oracle = protocol.yardsticks(env_id).oracle
    assert oracle is not None
    t0 = time.process_time()
    val, kpi = _play(env_id, "validation", kwargs, [*rules, *causal], seeds_from(bm.VALIDATION_SEED, episodes))
    rules_rank = _rank({p: val[p] for p in rules}, kpi)
    causal_rank = _rank({p: val[p] for p in causal}, kpi)
    strongest, ref = rules_rank[0]["policy"], (causal_rank[0]["policy"] if causal_rank else None)
    test, _ = _play(env_id, "test", kwargs, [oracle, *rules, *causal, *extra], seeds_from(bm.TEST_SEED, episodes))
    strong = test[strongest]
    rows = []
    for p in [oracle, *([ref] if ref else []), *extra, *(c["policy"] for c in rules_rank),
              *(c["policy"] for c in causal_rank)]:
        if p == strongest or any(r["policy"] == p for r in rows):
            continue
        role = ("oracle" if p == oracle else "causal reference" if p == ref else EXTRA_ROLES.get(key, EXTRA_ROLE)
                if p in extra else "causal" if p in causal else "rule")
        v = paired_verdict(test[p], strong, kpi, strongest)
        rows.append({"policy": p, "role": role, "kpi_mean": protocol.mean_metric(test[p], kpi),
                     "slo_pct": protocol.mean_metric(test[p], protocol.SLO_METRIC), **v.as_dict()})
    binding = ({split: quota_binding(env_id, split, kwargs, rules, seeds_from(seed, episodes))
                for split, seed in (("validation", bm.VALIDATION_SEED), ("test", bm.TEST_SEED))}
               if track == "stress-quota" else None)
    return {"track": key, "env_id": env_id, "name": track, "env_kwargs": kwargs, "episodes": episodes,
            **({"quota_binding": binding} if binding is not None else {}),
            "rules": list(rules), "causal_candidates": list(causal), "extra_rows": list(extra), "kpi": kpi, "strongest": strongest,
            "causal_reference": ref, "validation_rules": rules_rank, "validation_causal": causal_rank,
            "strongest_kpi": protocol.mean_metric(strong, kpi),
            "strongest_slo_pct": protocol.mean_metric(strong, protocol.SLO_METRIC),
            "strongest_return": float(sum(r.reward for r in strong) / len(strong)), "rows": rows,
            "cpu_s": time.process_time() - t0}


def _f(v: Any, fmt: str) -> str:
    return "-" if v is None or not isinstance(v, (int, float)) or not math.isfinite(v) else format(v, fmt)


#: The learnable headroom a track should show: the causal reference beats the strongest by this much of the KPI.
TARGET_PCT = 5.0


def _summary(c: dict[str, Any]) -> str:
    """One paragraph: the learnable headroom, whether it reaches TARGET_PCT at equal SLO, and the lowest-KPI test
    row whose SLO difference stays within the verdict's tolerance (what "at equal SLO" allows)."""
    rows = {r["policy"]: r for r in c["rows"]}
    orc = next(r for r in c["rows"] if r["role"] == "oracle")
    within = [r for r in c["rows"] if r["role"] not in ("oracle", EXTRA_ROLE, *EXTRA_ROLES.values())
              and r["slo_diff_ci"][1] <= r["slo_tolerance_pp"]]
    best = min(within, key=lambda r: r["kpi_diff"], default=None)
    if c["causal_reference"] is None:
        return _summary_no_causal(c, orc, best)
    ref = rows[c["causal_reference"]]
    ok = ref["outcome"] == "beats" and ref["kpi_diff_pct"] <= -TARGET_PCT
    text = (f"**Learnable headroom** (causal reference - strongest): {ref['kpi_diff_pct']:+.2f} % {c['kpi']} "
            f"[{100 * ref['kpi_diff_ci'][0] / c['strongest_kpi']:+.2f}, {100 * ref['kpi_diff_ci'][1] / c['strongest_kpi']:+.2f}] "
            f"at {ref['slo_diff_pp']:+.4f} pp SLO (tolerance {ref['slo_tolerance_pp']:.4f} pp), verdict `{ref['outcome']}`: "
            f"{'reaches' if ok else 'does not reach'} {TARGET_PCT:g} % at equal SLO. Oracle - strongest "
            f"{orc['kpi_diff_pct']:+.2f} % at {orc['slo_diff_pp']:+.4f} pp (`{orc['outcome']}`).")
    if best is not None:
        text += (f" Lowest {c['kpi']} of a causal row or rule within the SLO tolerance: `{best['policy']}` "
                 f"{best['kpi_diff_pct']:+.2f} % [{100 * best['kpi_diff_ci'][0] / c['strongest_kpi']:+.2f}, "
                 f"{100 * best['kpi_diff_ci'][1] / c['strongest_kpi']:+.2f}] at {best['slo_diff_pp']:+.4f} pp.")
    return text


def _ci_pct(r: dict[str, Any], c: dict[str, Any]) -> str:
    return (f"{r['kpi_diff_pct']:+.2f} % [{100 * r['kpi_diff_ci'][0] / c['strongest_kpi']:+.2f}, "
            f"{100 * r['kpi_diff_ci'][1] / c['strongest_kpi']:+.2f}]")


def _summary_no_causal(c: dict[str, Any], orc: dict[str, Any], best: dict[str, Any] | None) -> str:
    """:func:`_summary` of a track without a causal reference (npu): why none, the future-knowing rows, the other
    rules, and where the quota bound."""
    text = f"**No causal reference**: {NO_CAUSAL.get(c['track'], 'none measured')}."
    for r in c["rows"]:
        if r["role"] != "rule" and r["role"] != "oracle":
            text += (f" {r['policy'].capitalize()} ({r['role']}) - strongest: {_ci_pct(r, c)} {c['kpi']} at "
                     f"{r['slo_diff_pp']:+.4f} pp SLO [{r['slo_diff_ci'][0]:+.4f}, {r['slo_diff_ci'][1]:+.4f}], return "
                     f"{r['return_diff']:+.3f} [{r['return_diff_ci'][0]:+.3f}, {r['return_diff_ci'][1]:+.3f}] "
                     f"(`{r['outcome']}`).")
    text += (f" Oracle - strongest {orc['kpi_diff_pct']:+.2f} % at {orc['slo_diff_pp']:+.4f} pp (`{orc['outcome']}`; a "
             "relaxation that ignores the quota).")
    if best is not None:
        text += (f" Lowest {c['kpi']} of a rule within the SLO tolerance: `{best['policy']}` {_ci_pct(best, c)} at "
                 f"{best['slo_diff_pp']:+.4f} pp.")
    for split, per in (c.get("quota_binding") or {}).items():
        text += (f" Quota binds ({split}, peak chips held reach it): " + ", ".join(
            f"`{p}` {len(seeds)} of {c['episodes']}" for p, seeds in per.items()) + ".")
    return text


def markdown(cells: list[dict[str, Any]]) -> str:
    """The stress-track section of headroom.md (between the markers)."""
    from servegym.splits import ENV_FAMILY, FAMILY_TRACKS

    lines = [STRESS_BEGIN, "## Stress tracks (`python benchmarks/stress_tracks.py`)", "",
             "A stress track lays a condition over the base splits (`track` config key; train, validation and test "
             "days stay disjoint). Per track: the strongest shipped rule and the causal reference (geo: a rule fed a "
             "dead-reckoned snapshot `+dr:<k>` and/or bias-corrected OSL estimates `+bc`, "
             "`servegym.baselines.geo.causal`; pd: the forecast rule sized for the day's expected rates "
             "`min-power+expected:<rho>`, `servegym.baselines.pd.MinPowerExpectedForecast`; knob tuned on "
             "validation; npu: none exists, the hindsight plan is an extra row) are each the first of the verdict's "
             "ranking on the validation episodes; the rows are paired differences to the strongest on the test "
             "episodes, mean [95 % CI]. Learnable headroom = causal reference - strongest: a causal policy reaches it "
             "from what it observes; oracle - causal reference is what only hindsight knows. Outcome: the verdict "
             f"of the row against the strongest ({protocol.BEATS_RULE}).", ""]
    for c in cells:
        fam_tracks = FAMILY_TRACKS[ENV_FAMILY[c["env_id"]]]
        desc, why = fam_tracks[c["name"]]
        lines += [f"### {c['env_id']}, track `{c['name']}` ({c['episodes']} validation + {c['episodes']} test "
                  f"episodes, {c['cpu_s']:.0f} CPU-s)", "",
                  f"{desc}. Why: {why}. Env kwargs `{json.dumps(c['env_kwargs'])}`.", "",
                  f"Strongest on validation: `{c['strongest']}` (test: {c['strongest_kpi']:.4g} {c['kpi']}, SLO "
                  f"violation {c['strongest_slo_pct']:.4f} %, return {c['strongest_return']:.4g}); causal reference: "
                  + (f"`{c['causal_reference']}`." if c["causal_reference"] else "none (below)."), "",
                  f"| minus the strongest (test) | role | {c['kpi']} [95 % CI] | % | SLO pp [95 % CI] | return [95 % CI] "
                  "| outcome |", "|---|---|---|---|---|---|---|"]
        for r in c["rows"]:
            lines.append(f"| {r['policy']} | {r['role']} | {_f(r['kpi_diff'], '+.3f')} [{_f(r['kpi_diff_ci'][0], '+.3f')}, "
                         f"{_f(r['kpi_diff_ci'][1], '+.3f')}] | {_f(r['kpi_diff_pct'], '+.2f')} | "
                         f"{_f(r['slo_diff_pp'], '+.4f')} [{_f(r['slo_diff_ci'][0], '+.4f')}, "
                         f"{_f(r['slo_diff_ci'][1], '+.4f')}] | {_f(r['return_diff'], '+.3f')} "
                         f"[{_f(r['return_diff_ci'][0], '+.3f')}, {_f(r['return_diff_ci'][1], '+.3f')}] | "
                         f"{r['outcome']} |")
        lines += ["", _summary(c)]
        lines += ["", "Validation ranking (rules): " + ", ".join(
            f"`{v['policy']}` ({_f(v['kpi'], '.3f')} {c['kpi']}, {_f(v['slo_violation_pct'], '.3f')} %, return "
            f"{_f(v['mean_return'], '.2f')})" for v in c["validation_rules"][:5]) + ("; causal candidates: " + ", ".join(
            f"`{v['policy']}` ({_f(v['kpi'], '.3f')}, {_f(v['slo_violation_pct'], '.3f')} %, {_f(v['mean_return'], '.2f')})"
            for v in c["validation_causal"]) if c["validation_causal"] else "") + ".", ""]
    lines.append(STRESS_END)
    return "\n".join(lines)


def _section_heading(c: dict[str, Any]) -> str:
    return f"### {c['env_id']}, track `{c['name']}` ("


def render(out: Path, state: Path) -> None:
    """Rewrite the stress block from the stored cells, keeping the shipped sections of tracks with no stored cell
    (a checkout that measured one track keeps the others' sections as shipped), in :data:`TRACKS` order."""
    cells = [json.loads(p.read_text()) for p in sorted(state.glob("*.json"))]
    if not cells:
        return
    text = out.read_text() if out.exists() else "# Headroom\n\n"
    new = markdown(cells)
    old = text[text.index(STRESS_BEGIN):text.index(STRESS_END)] if STRESS_BEGIN in text and STRESS_END in text else ""
    kept: dict[str, str] = {}
    for part in old.split("\n### ")[1:]:
        if not any(("### " + part).startswith(_section_heading(c)) for c in cells):
            kept[part.split(" (", 1)[0]] = "### " + part.rstrip("\n") + "\n"
    fresh = {("### " + part).split(" (", 1)[0][4:]: "### " + part.rstrip("\n") + "\n"
             for part in new[:new.index(STRESS_END)].split("\n### ")[1:]}
    order = [f"{env_id}, track `{name}`" for env_id, name, _ in TRACKS.values()]
    sections = {**kept, **fresh}
    keys = sorted(sections, key=lambda k: order.index(k) if k in order else len(order))
    intro = new[:new.index("\n### ")]
    block = intro + "\n" + "\n".join(sections[k] for k in keys) + "\n" + STRESS_END
    write_text(out, splice_stress(text, block))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=30)
    ap.add_argument("--tracks", default=",".join(TRACKS), help=f"comma list; allowed: {', '.join(TRACKS)}")
    ap.add_argument("--out", default=str(RESULTS / "headroom.md"))
    ap.add_argument("--state", default=str(STATE), help="folder of the per-track cells (JSON)")
    args = ap.parse_args(argv)
    tracks = [t for t in args.tracks.split(",") if t]
    if any(t not in TRACKS for t in tracks) or args.episodes < 2:
        print(f"--tracks: allowed {', '.join(TRACKS)}; --episodes >= 2", file=sys.stderr)
        return 2
    state, out = Path(args.state), Path(args.out)
    state.mkdir(parents=True, exist_ok=True)
    for t in tracks:
        path = state / (t.replace("/", "__") + ".json")
        old = json.loads(path.read_text()) if path.exists() else None
        if old and old["episodes"] == args.episodes and old["causal_candidates"] == list(TRACKS[t][2]) \
                and old["rules"] == list(rules_of(TRACKS[t][0])) and old.get("extra_rows", []) == list(EXTRA_ROWS.get(t, ())):
            continue
        print(f"{t}: {args.episodes} validation + test episodes", file=sys.stderr, flush=True)
        write_text(path, json.dumps(measure(t, args.episodes), indent=1, default=float) + "\n")
        render(out, state)
    render(out, state)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
