"""Which utilization targets of min-power+forecast beat the pd ids' strongest baseline under the paired verdict.

The strongest non-learned baseline (``min-power+forecast:0.97``) was chosen by the mean normalized score on
the validation split (``benchmarks/pd_yardsticks.py``); the leaderboard's "beats" rule is a different
criterion (:func:`servegym.agents.protocol.paired_verdict`, stated in :mod:`servegym.agents.verdict`)
(results stored before 2026-12-07 were judged with the earlier rule: episodes-only CIs, mean SLO within max(0.05 pp, 10 %)). This plays ``min-power+forecast:RHO`` for a few RHO on the
same 10 validation and 10 test episodes as the strongest and prints each one's energy, SLO violation, mean
return and verdict against it, with the CPU time.

    python benchmarks/pd_rho_verdict.py [--out benchmarks/results/learnability/pd_rho_verdict.md]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from servegym.agents.benchmark import TEST_SEED, VALIDATION_SEED, make_split_env, run_policy_episodes
from servegym.agents.protocol import mean_metric, paired_verdict
from servegym.agents.rollout import seeds_from

from servegym.outputs import write_text

ENV_ID = "servegym/PDProvision-v0"
STRONGEST = "min-power+forecast:0.97"
CANDIDATES = (STRONGEST, "min-power+forecast:0.98", "min-power+forecast:0.99", "min-power+forecast:1")


def table(split: str, first_seed: int, episodes: int) -> tuple[list[str], float]:
    """Markdown rows of every candidate on ``episodes`` episodes of ``split``, and the CPU seconds."""
    t0 = time.process_time()
    env = make_split_env(ENV_ID, split)
    try:
        res = run_policy_episodes(ENV_ID, env, list(CANDIDATES), seeds_from(first_seed, episodes))
    finally:
        env.close()
    rows = []
    for name in CANDIDATES:
        v = paired_verdict(res[name], res[STRONGEST], "energy_kwh", STRONGEST)
        ret = float(np.mean([r.reward for r in res[name]]))
        verdict = "-" if name == STRONGEST else ("yes" if v.beats else "no")
        rows.append(f"| {split} | {name} | {mean_metric(res[name], 'energy_kwh'):.3f} | "
                    f"{mean_metric(res[name], 'slo_violation_pct'):.4f} | {ret:.3f} | "
                    f"{v.kpi_diff:+.3f} [{v.kpi_ci[0]:+.3f}, {v.kpi_ci[1]:+.3f}] | {v.slo_diff_pp:+.4f} | "
                    f"{v.slo_tolerance_pp:.2f} | {verdict} |")
    return rows, time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    args = ap.parse_args()
    lines = [f"# pd: min-power+forecast utilization targets against the strongest ({STRONGEST}), paired verdict",
             "", f"`python benchmarks/pd_rho_verdict.py` ({ENV_ID}, {args.episodes} episodes per split; "
             "energy = facility kWh/day; return = the env's (minus energy, 2 x violation share, 2 x backlog share "
             "per period); dE = candidate - strongest, paired 95 % bootstrap CI; tol = the verdict's SLO tolerance).",
             "", "| split | policy | energy kWh | SLO viol. % | mean return | dE kWh [95 % CI] | dSLO pp | tol pp "
             "| beats strongest |", "|---|---|---|---|---|---|---|---|---|"]
    cpu = 0.0
    for split, seed in (("validation", VALIDATION_SEED), ("test", TEST_SEED)):
        rows, c = table(split, seed, args.episodes)
        lines += rows
        cpu += c
    lines += ["", f"CPU time: {cpu:.1f} s (one process)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        write_text(args.out, text)


if __name__ == "__main__":
    main()
