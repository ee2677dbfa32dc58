"""``servegym benchmark``: one agent or baseline under the protocol, or the whole leaderboard suite.

``servegym benchmark --env ID (--policy NAME | --model PATH) [--split test] [--episodes K] [--json]``
plays K episodes of the split (reset seeds ``--seed .. --seed+K-1``) with the policy and with the env's
yardsticks (naive, the paper's method, the strongest baseline and the oracle, where the id has one) on the
same scenarios, and reports the normalized scores' IQM and mean with 95 % bootstrap CIs next to the domain
KPIs, the headroom, the share of the gap closed and the paired verdicts (:mod:`servegym.agents.protocol`). ``--json``
prints exactly one object: ``env``, ``policy``, ``split``, ``episodes``, ``score_mean``, ``score_iqm``,
``score_ci`` (the IQM's CI) and ``kpis``.

``servegym benchmark --suite [--budget quick|full]`` trains the recommended algorithm of every env id
(:data:`SUITE`) with several seeds on the ``train`` split, keeps each seed's checkpoint with the best
mean normalized score on the ``validation`` split (the test split is never read while training or
selecting), then plays every seed's selected agent and every baseline on the same ``test`` episodes
and writes ``leaderboard.md``, ``leaderboard.csv``, ``leaderboard.json`` (a list of the objects above,
learned agents named ``agent:<algo>``) and the performance-profile and score plots into
``benchmarks/results/``. The grid (training seeds and baseline episodes) runs on the sweep engine's
process pool (default) or on Ray (``--ray``), with a progress bar.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd
from servegym.agents import protocol
from servegym.agents import time_to_strongest as tts
from servegym.agents.families import EpisodeResult, family_for, run_baseline_episodes
from servegym.agents.rollout import agent_act_fn, play_episode, seeds_from
from servegym.agents.verdict import verdict_ranking

from servegym.errors import ConfigError
from servegym.outputs import save_figure, write_frame, write_text

#: First reset seed of the test episodes (any seed works: the split draws the scenario).
TEST_SEED = 0
#: First reset seed of the validation episodes used for checkpoint selection.
VALIDATION_SEED = 1000
#: The folder under which each budget's suite trains by default (``runs/suite/<budget>``, relative to the
#: working folder): :func:`default_run_dir`.
SUITE_RUNS = Path("runs") / "suite"
RESULTS_DIR = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def make_split_env(env_id: str, split: str | None, env_kwargs: dict[str, Any] | None = None) -> gym.Env:
    """``gym.make(env_id, **env_kwargs, split=split)`` (the split keyword wins over a config's)."""
    import servegym  # noqa: F401  (registers the ids in fresh workers)

    return gym.make(env_id, **{**(env_kwargs or {}), "split": split})


def run_policy_episodes(env_id: str, env: gym.Env, names: Sequence[str], seeds: Sequence[int],
                        progress: Any = None) -> dict[str, list[EpisodeResult]]:
    """Every named policy (family baselines and ``follow``, the residual mode's zero action, which steps
    the env itself) on every seed of ``env``."""
    fam = family_for(env_id)
    out: dict[str, list[EpisodeResult]] = {}
    base_names = [n for n in names if n != protocol.FOLLOW]
    if base_names:
        out.update(run_baseline_episodes(fam, env, base_names, seeds, progress=progress))
    if protocol.FOLLOW in names:
        res = []
        for s in seeds:
            res.append(play_episode(env, lambda obs, info, e: protocol.follow_action(e), s, protocol.FOLLOW,
                                    fam.metrics))
            if progress is not None:
                progress.update(1)
        out[protocol.FOLLOW] = res
    return {n: out[n] for n in names if n in out}


@dataclass(frozen=True)
class PolicyEvaluation:
    """One policy's episodes with the yardsticks' on the same seeds, and the per-episode scores.

    ``anchors``: role -> episodes of ``naive``, ``paper``, ``strongest`` and ``oracle`` (where the id has
    one); ``scale`` the scale they define (:func:`protocol.make_scale`)."""

    env_id: str
    policy: str
    split: str | None
    results: list[EpisodeResult]
    anchors: dict[str, list[EpisodeResult]]
    scale: protocol.Scale
    scores: np.ndarray
    kpi: str

    @property
    def naive(self) -> list[EpisodeResult]:
        return self.anchors["naive"]

    @property
    def best(self) -> list[EpisodeResult]:
        """The paper's method's episodes (``best`` is its alias)."""
        return self.anchors["paper"]

    def record(self) -> dict[str, Any]:
        return protocol.benchmark_record(self.env_id, self.policy, self.split, self.results, self.scores)


ANCHOR_ROLES = ("naive", "paper", "strongest", "oracle")


def evaluate_policy(env_id: str, policy: str | None = None, model: str | Path | Sequence[str | Path] | None = None,
                    split: str | None = "test", episodes: int = 10, seed: int = TEST_SEED,
                    env_kwargs: dict[str, Any] | None = None, progress: bool = True) -> PolicyEvaluation:
    """Play ``policy`` (a name of :func:`protocol.policy_names`) or the saved agent(s) ``model`` on
    ``episodes`` episodes of ``split``, with the env's yardsticks (naive, paper, strongest, oracle) on
    the same seeds. Several models (one per training seed, the same algorithm) are pooled: every model
    plays the same episodes, and the statistics run over models x episodes."""

    if (policy is None) == (model is None):
        raise ConfigError("give exactly one of --policy NAME or --model PATH")
    roles = protocol.yardsticks(env_id, env_kwargs).roles()
    seeds = seeds_from(seed, episodes)
    kwargs = dict(env_kwargs or {})
    label = policy
    acts: list[Any] = []
    name = ""
    if model is not None:
        from servegym.agents.train import load_agent

        paths = [model] if isinstance(model, (str, Path)) else list(model)
        algos = set()
        for path in paths:
            agent, norm, run = load_agent(path, env_id=env_id, env_kwargs=kwargs)
            algos.add(run.get("algo", type(agent).__name__.lower()))
            acts.append(agent_act_fn(agent, norm))
            kwargs = {**run.get("env_kwargs", {}), **(env_kwargs or {})}
        if len(algos) > 1:
            raise ConfigError(f"--model: the models were trained with different algorithms {sorted(algos)}; "
                              "allowed: the seeds of one agent")
        label = f"agent:{algos.pop()}"
    else:
        assert policy is not None
        name = protocol.resolve_policy(env_id, policy)
    env = make_split_env(env_id, split, kwargs)
    if name == protocol.FOLLOW:
        try:
            protocol.follow_action(env)  # refused before any episode is played
        except ConfigError:
            env.close()
            raise
    anchor_names = list(dict.fromkeys(roles[r] for r in ANCHOR_ROLES if r in roles))
    n_own = len(acts) if acts else (0 if name in anchor_names else 1)
    from servegym.progress import Progress

    with Progress(len(seeds) * (len(anchor_names) + n_own), f"benchmark {env_id.split('/')[-1]} ({split})",
                  "episode", what=f"{label} and the yardsticks ({', '.join(anchor_names)}) on "
                  f"{len(seeds)} {split or 'fixed-scenario'} episodes each", disable=not progress) as bar:
        try:
            runs = run_policy_episodes(env_id, env, anchor_names, seeds, progress=bar)
            if acts:
                results = []
                for unit, act in enumerate(acts):  # one unit per model (training seed) for the verdict's CI
                    for s in seeds:
                        results.append(replace(play_episode(env, act, s, str(label), family_for(env_id).metrics),
                                               train_seed=unit))
                        bar.update(1)
            elif name in runs:
                results = runs[name]
            else:
                results = run_policy_episodes(env_id, env, [name], seeds, progress=bar)[name]
            kpi = protocol.kpi_metric(env)
        finally:
            env.close()
    anchors = {r: runs[roles[r]] for r in ANCHOR_ROLES if r in roles}
    scale = protocol.make_scale(env_id, anchors["naive"], anchors["paper"], anchors.get("oracle"))
    return PolicyEvaluation(env_id=env_id, policy=str(label), split=split, results=list(results), anchors=anchors,
                            scale=scale, scores=scale.scores(results), kpi=kpi)


@dataclass(frozen=True)
class Candidate:
    """One candidate's validation result in :func:`select_strongest`: its score and KPIs, and which other
    candidates beat it and which it beats under the protocol's verdict."""

    policy: str
    score_mean: float
    score_ci: tuple[float, float]
    kpi: float
    slo_violation_pct: float
    beaten_by: tuple[str, ...] = ()
    beats: tuple[str, ...] = ()
    mean_return: float = math.nan


def select_strongest(env_id: str, candidates: Sequence[str], episodes: int = 30, seed: int = VALIDATION_SEED,
                     split: str = "validation", env_kwargs: dict[str, Any] | None = None, progress: bool = False
                     ) -> list[Candidate]:
    """Every candidate baseline on ``episodes`` episodes of the validation split, ranked by the verdict's own
    rule (:func:`servegym.agents.verdict.verdict_ranking`: fewest candidates that beat it, then the highest
    mean return, then most it beats): the first is the ``strongest`` yardstick, a policy no candidate
    beats under the rule the leaderboard judges agents by. Scores (on the env's scale, the oracle's where it
    has one) are reported beside it. The test split is never read."""
    if split == "test":
        raise ConfigError("select_strongest: split = 'test'; allowed: a split other than test (validation)")
    env = make_split_env(env_id, split, env_kwargs)
    roles = protocol.yardsticks(env_id, env_kwargs).roles()
    seeds = seeds_from(seed, episodes)
    try:
        anchors = run_policy_episodes(env_id, env, list(dict.fromkeys([roles["naive"], roles["paper"],
                                                                       *([roles["oracle"]] if "oracle" in roles else [])])),
                                      seeds)
        runs = run_policy_episodes(env_id, env, [c for c in candidates if c not in anchors], seeds)
        kpi = protocol.kpi_metric(env)
    finally:
        env.close()
    runs = {**anchors, **runs}
    scale = protocol.make_scale(env_id, anchors[roles["naive"]], anchors[roles["paper"]],
                                anchors.get(roles.get("oracle", "")))
    out = []
    for r in verdict_ranking({c: runs[c] for c in dict.fromkeys(candidates)}, kpi):
        st = protocol.score_stats(scale.scores(runs[r.policy]))
        out.append(Candidate(r.policy, st.mean, st.mean_ci, r.kpi, r.slo_violation_pct, r.beaten_by, r.beats,
                             r.mean_return))
    return out


def text_summary(ev: PolicyEvaluation) -> str:
    """A few lines for the terminal: the scale, scores, KPIs beside the yardsticks', the paired verdicts."""
    rec = ev.record()
    st = protocol.score_stats(ev.scores, results=ev.results)
    lines = [f"{ev.env_id} · {ev.policy} · split {ev.split} · {rec['episodes']} episodes",
             f"  scale: {ev.scale.name}",
             f"  normalized score: IQM {_f(st.iqm)} [{_f(st.iqm_ci[0])}, {_f(st.iqm_ci[1])}]"
             f", mean {_f(st.mean)} [{_f(st.mean_ci[0])}, {_f(st.mean_ci[1])}]"
             + (f" ({st.undefined} episodes without scale)" if st.undefined else "")]
    if st.undefined == len(ev.scores) and ev.scores.size:
        top = "oracle" if ev.scale.oracle else "paper"
        gap = float(np.mean([ev.scale.top[r.seed] - ev.scale.naive[r.seed] for r in ev.results]))
        lines.append(f"  no scale: {top} does not beat naive on these scenarios (mean R_{top} - R_naive = {gap:.4g}); "
                     "score more episodes or longer ones (the KPIs below are still comparable)")
    fam = family_for(ev.env_id)
    roles = protocol.yardsticks(ev.env_id).roles()
    for who, res in (("policy", ev.results), *ev.anchors.items()):
        k = protocol.kpi_means(res, fam)
        shown = ", ".join(f"{key} {k[key]:.4g}" for key in (ev.kpi, protocol.SLO_METRIC) if key in k)
        tag = f"{who} ({roles[who]})" if who in roles else who
        lines.append(f"  {tag:>32}: {shown}")
    me = ev.policy if ev.policy.startswith("agent:") else protocol.resolve_policy(ev.env_id, ev.policy)
    if ev.scale.oracle and "strongest" in ev.anchors:
        strong = protocol.seed_scores(ev.anchors["strongest"], ev.scale.scores(ev.anchors["strongest"]))
        h, (lo, hi) = protocol.headroom(strong)
        lines.append(f"  headroom (oracle - strongest {roles['strongest']}): {_f(h)} [{_f(lo)}, {_f(hi)}]")
        if me not in (roles["strongest"], roles.get("oracle")):
            g, (glo, ghi) = protocol.gap_closed(protocol.seed_scores(ev.results, ev.scores), strong)
            lines.append(f"  share of the strongest-to-oracle gap closed: {g:.3g} [{glo:.3g}, {ghi:.3g}]")
    for who in ("naive", "paper", "strongest"):
        if who in ev.anchors and roles[who] != me:
            v = protocol.paired_verdict(ev.results, ev.anchors[who], ev.kpi, f"{who} ({roles[who]})")
            lines.append("  " + v.text(ev.policy))
    lines.append(f"  ({protocol.BEATS_RULE})")
    return "\n".join(lines) + "\n"


def _f(v: float) -> str:
    return "nan" if not math.isfinite(v) else f"{v:.1f}"


# ---------------------------------------------------------------------------------------------- suite
@dataclass(frozen=True)
class SuiteEntry:
    """One env id of the suite: the algorithm, the env kwargs every policy and split plays, and the budget."""

    env_id: str
    algo: str
    env_kwargs: dict[str, Any]
    timesteps: int
    seeds: int
    episodes: int
    val_episodes: int
    evals: int = 5  # validation evaluations per training run (checkpoint candidates)
    baselines: tuple[str, ...] | None = None  # leaderboard baselines besides the references (None: all)
    note: str = ""
    #: a shipped hyperparameter file (a name in servegym/agents/hyperparams/) that replaces the env id's
    #: default file for this entry (None: the default file)
    hyperparams: str | None = None

    @property
    def track(self) -> str | None:
        """The stress track the entry's env kwargs select (:func:`servegym.agents.protocol.track_of`), or None."""
        return protocol.track_of(self.env_kwargs)

    @property
    def section(self) -> str:
        """The leaderboard section the entry fills: its env id, or ``<env id>@<track>`` on a stress track (an id
        has one section per track; ``--envs`` and ``--replay --envs`` select sections by this key)."""
        return section_key(self.env_id, self.track)

    @property
    def name(self) -> str:
        """:attr:`section` without the ``servegym/`` prefix: the stem of its model folders."""
        return self.section.split("/")[-1]


#: The separator of a stress-track section's key, ``<env id>@<track>`` (:attr:`SuiteEntry.section`).
TRACK_SEP = "@"


def section_key(env_id: str, track: str | None) -> str:
    """``env_id`` (no track) or ``<env_id>@<track>``: the key of one leaderboard section."""
    return env_id if track is None else f"{env_id}{TRACK_SEP}{track}"


def section_of(output: dict[str, Any]) -> str:
    """The section key one task output belongs to (outputs stored before tracks existed carry none: their id's)."""
    return str(output.get("section") or output["env_id"])


#: pd env kwargs of the quick suite: the reference (the residual mode's zero action, every mode's observed
#: suggestion and the warm start's teacher) is the pd ids' strongest non-learned baseline.
PD_STRONGEST: dict[str, Any] = {"config": {"reference": "min-power+forecast:0.97"}}

#: The suite per budget. ``quick`` is sized to fit 30 minutes per env id on 2 cores with all seeds
#: (the docs and the leaderboard state what was measured); ``full`` is the default configs at the
#: hyperparameter files' budgets or more (its estimated cost: :data:`FULL_COST_S_PER_SEED`, :func:`budget_cost`).
SUITE: dict[str, tuple[SuiteEntry, ...]] = {
    "quick": (
        # The learning modes where an id has them (issues 12 and 13): the agent acts around the paper's
        # method. Budgets from the measured step rates (leaderboard.md states the wall time per id).
        # Test episodes: 30 per id (the verdict's CI over episodes); every id's chosen models are shipped
        # (servegym.agents.replay).
        SuiteEntry("servegym/GeoRoute-v0", "maskable-ppo",
                   {"config": {"preset": "mini", "action_mode": "residual", "reference": "iter-ilp",
                               "decide_at": "window"}}, 40_000, 5,
                   30, 3, evals=4, baselines=("ll", "greedy:0.5", "moer", "ilp"), hyperparams="GeoRoute-v0.quick.yml",
                   note="mini preset (3 DCs, 30 s), residual around the strongest baseline (iter-ilp) decided at its "
                        "own windows (follow = iter-ilp exactly), no warm start, gamma 0.9, dense reward"),
        SuiteEntry("servegym/GeoRouteWindow-v0", "ppo",
                   {"config": {"preset": "mini", "action_mode": "residual", "geo": {"poll_interval_s": 5.0}}},
                   50_000, 5, 30, 3, baselines=("ll", "greedy:0.5", "moer", "ilp"),
                   note="mini preset (3 DCs, 30 s), residual around the facility MILP (action 0 = MILP), "
                        "stale snapshots (poll interval 5 s)"),
        # pd: every mode's reference is the strongest baseline (min-power+forecast:0.97), cloned before RL
        SuiteEntry("servegym/PDProvisionResidual-v0", "maskable-ppo", PD_STRONGEST, 4_096, 5, 30, 3,
                   hyperparams="PDProvisionResidual-v0.quick.yml",
                   note="full day, 60-s periods, changes around the strongest baseline (min-power+forecast:0.97), "
                        "warm start by cloning it (20,000 steps), 3 rounds of rollout policy improvement (common random "
                        "numbers, DAgger), 4,096 conservative PPO steps, 1 h -> 4 h -> 1 day curriculum"),
        # npu residual: the reference is the strongest npu baseline (Base, chosen by the verdict on validation in the
        # paper's validated load regime), cloned before RL
        SuiteEntry("servegym/NPUAutoscaleResidual-v0", "maskable-ppo", {"config": {"hours": 2.0, "reference": "base"}},
                   6_144, 5, 30, 3, hyperparams="NPUAutoscaleResidual-v0.quick.yml",
                   note="2-h episodes (24 epochs), changes around the strongest baseline (Base), warm start by "
                        "cloning it (2,048 steps), reward relative to Base"),
        SuiteEntry("servegym/PDProvisionFront-v0", "maskable-ppo", PD_STRONGEST, 4_096, 5, 30, 3,
                   hyperparams="PDProvisionFront-v0.quick.yml",
                   note="full day, 60-s periods, a choice on the current epsilon-Pareto front, warm start by "
                        "cloning the strongest baseline's front slot (20,000 steps), 3 rounds of rollout policy improvement "
                        "(common random numbers, DAgger), 4,096 conservative PPO steps"),
        SuiteEntry("servegym/PDProvision-v0", "maskable-ppo", PD_STRONGEST, 4_096, 5, 30, 3,
                   hyperparams="PDProvision-v0.quick.yml",
                   note="full day, 60-s periods, absolute (n_P, n_D) targets, warm start by cloning the "
                        "strongest baseline's deployment (20,000 steps), 3 rounds of rollout policy improvement (common "
                        "random numbers, DAgger), 4,096 conservative PPO steps"),
        SuiteEntry("servegym/NPUAutoscale-v0", "maskable-ppo", {"config": {"hours": 2.0}}, 10_240, 5, 30, 3,
                   note="2-h episodes (24 epochs), absolute counts and vPod options"),
        # The geo stress tracks (servegym.splits.FAMILY_TRACKS), one section per (id, track) on the same leaderboard
        # (section key "<id>@<track>"): the entries above's agents and budgets on a track's own train / validation /
        # test days, judged against the track's strongest rule and causal reference (protocol.TRACK_YARDSTICKS;
        # benchmarks/stress_tracks.py measures them). The agents also observe the estimator's residuals (and the
        # snapshot's age, which every geo observation has): what a causal controller could use.
        # stress-load: the reference is the first rule of the track's validation ranking that the residual mode
        # accepts (greedy:1; ll, rr and green-llm above it are no reference rules), cloned before conservative PPO:
        # the un-cloned residual around iter-ilp overfilled the clean sites from its first evaluation on
        # (GeoRoute-v0.stress-load.quick.yml says why)
        SuiteEntry("servegym/GeoRoute-v0", "maskable-ppo",
                   {"config": {"preset": "mini", "action_mode": "residual", "reference": "greedy:1",
                               "observe_residuals": True, "track": "stress-load"}}, 40_000, 5,
                   30, 3, evals=4, baselines=("greedy:1", "greedy:0.5", "moer", "ilp", "iter-ilp", "green-llm"),
                   hyperparams="GeoRoute-v0.stress-load.quick.yml",
                   note="track stress-load (rate x 1.5, 5-s polls; mini preset, 3 DCs, 30 s), residual around greedy:1 "
                        "(the track's best reference rule on validation) decided at arrival, the estimator's residuals "
                        "observed, warm start by cloning it (8,192 steps), conservative MaskablePPO, quick budget"),
        SuiteEntry("servegym/GeoRouteWindow-v0", "ppo",
                   {"config": {"preset": "mini", "action_mode": "residual", "observe_residuals": True,
                               "track": "stress-osl"}}, 50_000, 5, 30, 3,
                   baselines=("ll", "greedy:0.5", "moer", "ilp", "iter-ilp", "green-llm"),
                   note="track stress-osl (the shipped OSL predictor, 5-s polls; mini preset, 3 DCs, 30 s), residual "
                        "around the facility MILP, the estimator's residuals observed, quick budget"),
        # pd stress-delay: the quick entries on the track; the reference (every mode's teacher and the residual
        # zero action) is the best persistence-forecast rule on the track's validation episodes, since the strongest
        # (threshold-hpa:0.8) is no reference rule
        *(SuiteEntry(pd_id, "maskable-ppo", {"config": {"reference": "min-power+forecast:0.8", "track": "stress-delay"}},
                     4_096, 5, 30, 3, hyperparams=f"{pd_id.split('/')[1]}.quick.yml",
                     baselines=("min-power", "min-power+lookahead", "threshold-hpa", "min-power+forecast:0.8",
                                "min-power+perfect:1"),
                     note=f"track stress-delay (x2 peak, burstiness 1, 300-s start-up, 12 GPUs, persistence forecast), "
                          f"{mode} around min-power+forecast:0.8, the quick entry's warm start, rounds and budget")
          for pd_id, mode in (("servegym/PDProvisionResidual-v0", "changes"), ("servegym/PDProvisionFront-v0",
                                                                               "a front slot"),
                              ("servegym/PDProvision-v0", "absolute targets"))),
    ),
    # The quick suite's modes on the default presets and whole days, at the hyperparameter files' budgets
    # or more. Its cost is estimated in FULL_COST_S_PER_SEED (printed when a full run starts).
    "full": (
        SuiteEntry("servegym/GeoRoute-v0", "maskable-ppo",
                   {"config": {"action_mode": "residual", "reference": "milp"}}, 500_000, 5, 10, 5,
                   baselines=("ll", "greedy:0.5", "moer", "ilp"),
                   note="small preset (4 DCs, 60 s), residual around the facility MILP's window plan, dense reward"),
        SuiteEntry("servegym/GeoRouteWindow-v0", "ppo",
                   {"config": {"action_mode": "residual", "geo": {"poll_interval_s": 5.0}}}, 300_000, 5, 10, 5,
                   note="small preset (4 DCs, 60 s), residual around the facility MILP, poll interval 5 s"),
        SuiteEntry("servegym/PDProvisionResidual-v0", "maskable-ppo", {}, 1_024_000, 5, 10, 5,
                   note="full day, changes around min-power+lookahead"),
        SuiteEntry("servegym/NPUAutoscaleResidual-v0", "maskable-ppo", {"config": {"hours": 24.0}}, 102_400, 5, 10, 5,
                   note="24-h episodes (288 epochs), changes around NeuScale"),
        SuiteEntry("servegym/PDProvisionFront-v0", "maskable-ppo", {}, 1_024_000, 5, 10, 5, note="full day"),
        SuiteEntry("servegym/PDProvision-v0", "maskable-ppo", {}, 1_024_000, 5, 10, 5, note="full day"),
        SuiteEntry("servegym/NPUAutoscale-v0", "maskable-ppo", {"config": {"hours": 24.0}}, 102_400, 5, 10, 5,
                   note="24-h episodes (288 epochs)"),
    ),
    # CI smoke check of the machinery: 2 env ids x 2 seeds, tiny episodes and budgets (numbers meaningless)
    "smoke": (
        SuiteEntry("servegym/GeoRoute-v0", "maskable-ppo",
                   {"config": {"preset": "mini", "geo": {"duration_s": 1.5, "drain_s": 10.0}}}, 256, 2, 2, 1,
                   evals=1, baselines=("greedy:0.5",), note="1.5-s mini episodes"),
        # two validation windows: one 4-h window of a real day may be a coding night that the smallest deployment
        # serves throughout (naive = paper: no scale to reach the strongest on)
        SuiteEntry("servegym/PDProvision-v0", "maskable-ppo", {"config": {"scenario": {"horizon_steps": 240}}},
                   256, 2, 2, 2, evals=1, baselines=("min-power",), note="4-h days"),
    ),
}
BUDGETS = tuple(SUITE)

#: ``full``'s estimated wall seconds of training per seed on one core of the 2-core dev machine (the
#: validation and test episodes add a few %), from the quick suite's measured training rates (``train_s`` in
#: benchmarks/results/suite_runs/quick: PPO included, 2 busy cores) and, for the bigger configs, training rates
#: measured on them (benchmarks/train_step_cost.md, 2026-12-06: PPO / MaskablePPO with SB3's defaults, one env,
#: CPU time with one core busy): GeoRoute-v0 residual 1,480 steps/s on mini, PPO-bound, so ~1,400 on small (env
#: 75 us/step on small vs ~20 on mini, geo_env_speed.md); GeoRouteWindow-v0 residual on small 745 steps per CPU-s
#: (the env 0.59 ms of its 1.34 ms), ~650 with both cores busy; pd 514 (absolute) to 754 (residual) steps/s, the
#: same days; npu 24-h episodes 4.8 ms (residual) and 5.9 ms (absolute) of CPU a step (the env with sampled
#: actions and its resets 2.8 and 2.0 ms of it), plus ~40 % for the busy cores. Not measured end to end: no full
#: run has been made.
FULL_COST_S_PER_SEED: dict[str, float] = {
    "servegym/GeoRoute-v0": 500_000 / 1_400,
    "servegym/GeoRouteWindow-v0": 300_000 / 650,
    "servegym/PDProvisionResidual-v0": 1_024_000 / 754,
    "servegym/PDProvisionFront-v0": 1_024_000 / 739,
    "servegym/PDProvision-v0": 1_024_000 / 514,
    "servegym/NPUAutoscaleResidual-v0": 102_400 * 0.0048 * 1.4,
    "servegym/NPUAutoscale-v0": 102_400 * 0.0059 * 1.4,
}


def suite_progress(budget: str, entries: Sequence[SuiteEntry], todo: Sequence[dict[str, Any]],
                   workers: int | None) -> tuple[str, tuple[float | None, str]]:
    """The suite's progress start line: what it runs, and the estimated time of its training tasks at the
    quick suite's measured rates (:data:`servegym.progress.TRAIN_STEPS_PER_S`) shared by ``workers``."""
    from servegym.progress import train_estimate

    trains = [t for t in todo if t.get("kind") == "train"]
    total = 0.0
    for t in trains:
        s, _ = train_estimate(t["entry"]["env_id"], int(t["entry"]["timesteps"]))
        total += s or 0.0
    n = max(1, min(workers or os.cpu_count() or 1, len(todo) or 1))
    what = (f"{len(entries)} env ids: {len(trains)} training runs and {len(todo) - len(trains)} baseline tasks, "
            "then the leaderboard")
    basis = (f"training only, at the quick suite's measured steps/s per id, shared by {n} processes; validation "
             "and test episodes add to it")
    return what, ((total / n if total else None), basis)


def budget_cost(budget: str, workers: int = 2) -> str:
    """A one-paragraph statement of ``budget``'s estimated cost (``full``: FULL_COST_S_PER_SEED; the others
    are sized to fit 30 min per env id on 2 cores, as leaderboard.md reports per id)."""
    if budget != "full":
        return f"--budget {budget}: sized for <= 30 min per env id on 2 cores (leaderboard.md states each id's wall time)"
    parts, total = [], 0.0
    for e in SUITE["full"]:
        s = FULL_COST_S_PER_SEED[e.env_id] * e.seeds
        total += s
        parts.append(f"{e.env_id.split('/')[-1]} {s / 3600:.1f} h")
    return (f"--budget full: estimated {total / 3600:.0f} CPU-hours of training ({', '.join(parts)}; "
            f"5 seeds each), about {total / 3600 / max(workers, 1):.0f} h of wall on {workers} processes "
            "(an estimate from the quick runs' measured rates: servegym.agents.benchmark.FULL_COST_S_PER_SEED)")


def suite_policies(entry: SuiteEntry) -> list[str]:
    """Policies on the leaderboard of ``entry``: the yardsticks first (naive, paper, strongest, follow,
    oracle, as the id has them), then the other baselines. An id's second hindsight bound
    (:attr:`~servegym.agents.protocol.Yardsticks.hindsight`, npu's ``hindsight`` plan) is not played by default:
    it knows the future, so it is no baseline to be "above the strongest", and its rows come from its own
    yardsticks script (benchmarks/npu_yardsticks.py) until the leaderboard gives it a role; an entry that lists it
    in ``baselines`` plays it."""
    y = protocol.yardsticks(entry.env_id, entry.env_kwargs)
    roles = y.roles()
    if "follow" in roles and not follow_available(entry.env_id, entry.env_kwargs):
        roles.pop("follow")
    fam = family_for(entry.env_id)
    others = [b for b in fam.baselines if b != y.hindsight] if entry.baselines is None else entry.baselines
    out = list(dict.fromkeys(roles[r] for r in protocol.ROLES if r in roles))
    return out + [b for b in others if b not in out]


def follow_available(env_id: str, env_kwargs: dict[str, Any] | None) -> bool:
    """Whether ``env_id`` made with ``env_kwargs`` has a residual zero action (``follow``)."""
    env = make_split_env(env_id, "test", env_kwargs)
    try:
        protocol.follow_action(env)
        return True
    except ConfigError:
        return False
    finally:
        env.close()


def model_folder(task: dict[str, Any]) -> Path:
    """The folder one suite training task trains its model in: ``<run_dir>/<section name>_<algo>_s<seed>`` (the
    section name is the id's, with ``@<track>`` on a stress track, so two tracks of one id never share a folder)."""
    e = SuiteEntry(**task["entry"])
    return Path(task["run_dir"]) / f"{e.name}_{e.algo}_s{task['seed']}"


def train_config(task: dict[str, Any]) -> Any:
    """The :class:`servegym.agents.train.TrainConfig` of one suite training task. The evaluator plays the
    strongest baseline on the validation seeds too, so the stored run holds the score the time to the
    strongest (:mod:`servegym.agents.time_to_strongest`) is measured against."""
    from servegym.agents.train import TrainConfig

    e: SuiteEntry = SuiteEntry(**task["entry"])
    out = model_folder(task) / "model.zip"
    refs = protocol.checkpoint_references(e.env_id) or {}
    played = set(refs.values()) | ({protocol.yardsticks(e.env_id, e.env_kwargs).roles()["strongest"]} if refs else set())
    return TrainConfig(env_id=e.env_id, algo=e.algo, timesteps=e.timesteps, seed=int(task["seed"]),
                       tb=str(Path(task["run_dir"]) / "tb") if task.get("tb") else None, out=str(out),
                       env_kwargs=dict(e.env_kwargs), eval_freq=max(e.timesteps // e.evals, 1),
                       eval_episodes=e.val_episodes, eval_seed=VALIDATION_SEED, eval_split="validation",
                       baselines=",".join(sorted(played)), checkpoint_freq=0, progress=False, verbose=0,
                       # the suite owns run_dir (under its lock); a rerun or retried task starts afresh
                       force=True, hyperparams=shipped_hyperparams(e.hyperparams))


def train_task(task: dict[str, Any]) -> dict[str, Any]:
    """One training seed of one env id: train on ``train``, select on ``validation``, play ``test``.
    Module-level so the process pool and Ray can ship it; returns the test episodes' rows, the validation
    history and the baselines' validation episodes."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    from servegym.agents.train import load_agent, train

    t0 = time.perf_counter()
    e: SuiteEntry = SuiteEntry(**task["entry"])
    res = train(train_config(task))
    train_s = time.perf_counter() - t0
    chosen = res.best_model_path or res.model_path
    agent, norm, run = load_agent(chosen, env_id=e.env_id, env_kwargs=e.env_kwargs)
    fam = family_for(e.env_id)
    env = make_split_env(e.env_id, "test", e.env_kwargs)
    rows = []
    try:
        act = agent_act_fn(agent, norm)
        for s in seeds_from(TEST_SEED, e.episodes):
            r = play_episode(env, act, s, f"agent:{run.get('algo', e.algo)}", fam.metrics)
            rows.append({**r.row(), "train_seed": int(task["seed"])})
    finally:
        env.close()
    if task.get("ship_dir"):
        from servegym.agents.replay import repo_relative, ship_model, shipped_folder

        ship = Path(task["ship_dir"])
        chosen = repo_relative(ship_model(chosen, shipped_folder(task["budget"], e.env_id, int(task["seed"]), ship,
                                                                 track=e.track), run), base=ship.parent)
    return {"kind": "train", "env_id": e.env_id, "section": e.section, "seed": int(task["seed"]), "rows": rows,
            "train_s": train_s, "wall_s": time.perf_counter() - t0, "env_steps": int(e.timesteps),
            "chosen": str(chosen), "validation": run.get("eval_history", []),
            "validation_baselines": run.get("baseline_eval", {})}


def shipped_hyperparams(name: str | None) -> str | None:
    """The path of the shipped hyperparameter file ``name`` (servegym/agents/hyperparams/), or None."""
    if name is None:
        return None
    from importlib import resources

    f = resources.files("servegym.agents").joinpath("hyperparams", name)
    if not f.is_file():
        raise ConfigError(f"suite entry hyperparams = {name!r}: no such shipped file in servegym/agents/hyperparams")
    return str(f)


def baseline_task(task: dict[str, Any]) -> dict[str, Any]:
    """One baseline (or ``follow``) on one test episode (module-level for the executors)."""
    t0 = time.perf_counter()
    env = make_split_env(task["env_id"], "test", task["env_kwargs"])
    try:
        r = run_policy_episodes(task["env_id"], env, [task["policy"]], [int(task["seed"])])[task["policy"]][0]
    finally:
        env.close()
    return {"kind": "baseline", "env_id": task["env_id"], "section": task.get("section", task["env_id"]),
            "rows": [{**r.row(), "train_seed": -1}],
            "wall_s": time.perf_counter() - t0, "env_steps": int(r.length)}


def suite_task(task: dict[str, Any]) -> dict[str, Any]:
    return train_task(task) if task["kind"] == "train" else baseline_task(task)


@dataclass
class SuiteResult:
    leaderboard: pd.DataFrame
    records: list[dict[str, Any]]
    files: dict[str, Path] = field(default_factory=dict)
    wall_s: float = 0.0
    #: section key (:attr:`SuiteEntry.section`) -> the run that made its rows: ``wall_s`` (the whole run's wall
    #: time), ``env_ids`` (the sections trained together in it) and ``workers`` (processes; None for Ray or unknown)
    entry_runs: dict[str, dict[str, Any]] = field(default_factory=dict)


def suite_tasks(entries: Sequence[SuiteEntry], run_dir: str | Path, tb: bool, ship_dir: str | Path | None = None,
                budget: str = "quick") -> list[dict[str, Any]]:
    """Every task of a suite run: each entry's training seeds, then its baselines' test episodes. With
    ``ship_dir`` each training seed ships its chosen model there (:mod:`servegym.agents.replay`)."""
    tasks: list[dict[str, Any]] = []
    for e in entries:
        for s in range(e.seeds):
            tasks.append({"kind": "train", "entry": e.__dict__, "seed": s, "run_dir": str(run_dir), "tb": tb,
                          **({"ship_dir": str(ship_dir), "budget": budget} if ship_dir is not None else {})})
        for p in suite_policies(e):
            for s in seeds_from(TEST_SEED, e.episodes):
                tasks.append({"kind": "baseline", "env_id": e.env_id, "section": e.section, "env_kwargs": e.env_kwargs,
                              "policy": p, "seed": s})
    return tasks


def task_key(task: dict[str, Any]) -> str:
    """A suite task's identity in the run's journal (by section: two tracks of one id are different tasks)."""
    if task["kind"] == "train":
        return json.dumps(["train", SuiteEntry(**task["entry"]).section, int(task["seed"])])
    return json.dumps(["baseline", task.get("section", task["env_id"]), task["policy"], int(task["seed"])])


def suite_header(tasks: Sequence[dict[str, Any]]) -> str:
    """A hash of a run's tasks (entries, seeds, run folder): a journal resumes only the run that wrote it."""
    return hashlib.sha256(json.dumps(list(tasks), sort_keys=True, default=str).encode()).hexdigest()[:16]


def suite_journal_check(tasks: Sequence[dict[str, Any]]) -> Any:
    """A :meth:`servegym.outputs.Journal.read` check of a suite journal's lines: the key is a task of this
    run and the value the output :func:`suite_task` returns for it (its kind, env id and training seed; a
    list of episode rows, each with a policy name, integer seeds and length and a finite reward; a finite
    wall time). A line failing it is skipped with one warning line, and its task runs again."""
    from servegym.agents.sweep import finite_number, is_count

    by_key = {task_key(t): t for t in tasks}

    def check(key: str, out: Any) -> str | None:
        task = by_key.get(key)
        if task is None:
            return f"key {key[:80]!r} is not a task of this suite run"
        env_id = task["entry"]["env_id"] if task["kind"] == "train" else task["env_id"]
        if not isinstance(out, dict) or out.get("kind") != task["kind"] or out.get("env_id") != env_id:
            return f"the output of {key} is not a {task['kind']} task's output for {env_id}"
        if task["kind"] == "train" and not (is_count(out.get("seed")) and out["seed"] == task["seed"]):
            return f"the output of {key} names another training seed"
        rows = out.get("rows")
        if not isinstance(rows, list) or not rows or not finite_number(out.get("wall_s"), 0):
            return f"the output of {key} has no episode rows or no wall time"
        for r in rows:
            if not (isinstance(r, dict) and isinstance(r.get("policy"), str) and is_count(r.get("seed"))
                    and finite_number(r.get("reward")) and is_count(r.get("length"))
                    and isinstance(r.get("train_seed"), int) and not isinstance(r.get("train_seed"), bool)):
                return f"the output of {key} has an episode row that is not one"
        return None

    return check


def suite_journal(budget: str, out_dir: Path) -> Path:
    """The journal of a suite run in progress: one line per finished task (removed when the run completes)."""
    return _raw_dir(budget, out_dir) / ".partial.jsonl"


def default_run_dir(budget: str) -> Path:
    """Where a suite of ``budget`` trains when ``--run-dir`` is not given: ``runs/suite/<budget>``, one folder
    per budget, so a quick suite never replaces a full or smoke suite's models."""
    return SUITE_RUNS / budget


def trained_models(tasks: Sequence[dict[str, Any]]) -> list[Path]:
    """The model folders of ``tasks``' training seeds that already hold a trained model (``model.zip`` or
    ``run.json``), which training them would replace."""
    from servegym.agents.run_file import RUN_FILE

    folders = [model_folder(t) for t in tasks if t["kind"] == "train"]
    return [d for d in folders if (d / "model.zip").exists() or (d / RUN_FILE).exists()]


def run_suite(budget: str = "quick", out_dir: str | Path = RESULTS_DIR, run_dir: str | Path | None = None,
              workers: int | None = None, ray_address: str | bool | None = False, progress: bool = True,
              env_ids: Sequence[str] | None = None, tb: bool = True, force: bool = False) -> SuiteResult:
    """Train, select and test every env id of ``budget`` and write the leaderboard (module docstring).

    Nothing is lost or silently replaced: the budget's stored runs are locked for the run
    (``suite_runs/<budget>.lock``) and so is the folder the models are trained in (``<run_dir>.lock``;
    ``run_dir`` defaults to :func:`default_run_dir`), so a second suite on either fails at once; an id whose
    stored run exists, or whose models are already in ``run_dir``, is refused unless ``force``; every
    finished task goes to ``suite_runs/<budget>/.partial.jsonl`` at once, and the same command run again
    after an interruption (SIGINT, SIGTERM, a crash, a lost Ray node) resumes from it automatically,
    running only the tasks it lacks and replacing only its own unfinished models (``force`` discards it).
    Tasks are deterministic, so a resumed run's results equal an uninterrupted one's."""
    from servegym.agents.sweep import run_local, run_ray

    from servegym.outputs import Journal, OutputLock

    if budget not in SUITE:
        raise ConfigError(f"--budget = {budget!r}; allowed: {', '.join(BUDGETS)}")
    entries = select_entries(budget, env_ids)
    out = Path(out_dir)
    run_dir = Path(run_dir) if run_dir is not None else default_run_dir(budget)
    t0 = time.perf_counter()
    tasks = suite_tasks(entries, run_dir, tb, ship_dir=models_dir_for(out), budget=budget)
    with OutputLock(_raw_dir(budget, out), "--out-dir"), OutputLock(run_dir, "--run-dir"):
        stored = [e.section for e in entries if _stored_section(e, budget, out) is not None]
        if stored and not force:
            raise ConfigError(f"--out-dir = {str(out)!r} already holds stored suite runs of {', '.join(stored)} "
                              f"({_raw_dir(budget, out)}); pass --force to replace them, or --rescore to rebuild "
                              "the leaderboard from them")
        journal = Journal(suite_journal(budget, out))
        header = suite_header(tasks)
        done: dict[str, Any] = {}
        resuming = journal.path.exists() and not force
        if resuming:
            found = journal.read(header, check=suite_journal_check(tasks))
            if found is None:
                raise ConfigError(f"--out-dir: {journal.path} is the journal of an interrupted suite run with other "
                                  "tasks (budget, --envs or --run-dir differ); run that command again to finish "
                                  "it, or pass --force to discard it")
            done = found  # every key is one of these tasks (suite_journal_check)
            if progress and done:
                print(f"resuming: {len(done)} of {len(tasks)} tasks from the interrupted run ({journal.path})")
        todo = [t for t in tasks if task_key(t) not in done]
        # models in run_dir are this suite's own only when it resumes its journal (whose tasks name run_dir)
        replaced = [] if resuming or force else trained_models(todo)
        if replaced:
            names = ", ".join(d.name for d in replaced[:3]) + (f" and {len(replaced) - 3} more" if len(replaced) > 3 else "")
            raise ConfigError(f"--run-dir = {str(run_dir)!r} already holds trained models ({names}) that this suite "
                              "would replace; pass --force to replace them, or choose another --run-dir")
        journal.open(header, keep=done)
        by_key = dict(done)
        try:
            def on_result(task: dict[str, Any], output: dict[str, Any]) -> None:
                journal.add(task_key(task), output)
                by_key[task_key(task)] = output

            what, est = suite_progress(budget, entries, todo, workers)
            if todo and ray_address is not False:
                run_ray(todo, address=ray_address or None, workers=workers, progress=progress, fn=suite_task,
                        tidy=False, on_result=on_result, desc=f"benchmark suite ({budget})", what=what, estimate=est)
            elif todo:
                run_local(todo, workers=workers, progress=progress, fn=suite_task, tidy=False, on_result=on_result,
                          desc=f"benchmark suite ({budget})", what=what, estimate=est)
        finally:
            journal.close()
        # task order, whatever order they finished in; journalled outputs went through JSON, so fresh ones do too
        outs = [json.loads(json.dumps(by_key[task_key(t)], default=_json_default)) for t in tasks]
        run = {"wall_s": time.perf_counter() - t0, "env_ids": [e.section for e in entries],
               "workers": None if ray_address is not False else (workers or os.cpu_count() or 1),
               "resumed_tasks": len(done)}
        for e in entries:  # the raw episodes of each section, so later runs of others add to one leaderboard
            save_entry_outputs(e, [o for o in outs if section_of(o) == e.section], budget, out, run)
        journal.close(remove=True)
        wall_s = float(run["wall_s"])
        return _rebuild(budget, out, wall_s)


def select_entries(budget: str, sections: Sequence[str] | None) -> list[SuiteEntry]:
    """The entries of ``budget`` whose section key (:attr:`SuiteEntry.section`: an env id, or ``<id>@<track>``) is in
    ``sections`` (every entry for None), in suite order; a ConfigError naming the allowed keys if a key selects
    nothing. An id alone selects its section without a track, never its tracks'."""
    entries = [e for e in SUITE[budget] if sections is None or e.section in sections]
    unknown = [k for k in sections or [] if k not in {e.section for e in SUITE[budget]}]
    if not entries or unknown:
        raise ConfigError(f"--envs = {list(sections or [])!r} selects {'nothing' if not entries else 'no ' + repr(unknown)}"
                          f"; allowed: {[e.section for e in SUITE[budget]]}")
    return entries


def models_dir_for(out_dir: str | Path) -> Path:
    """Where a suite writing ``out_dir`` ships its models: ``benchmarks/models`` for the repo's results
    folder, ``<out_dir>/models`` for any other (:mod:`servegym.agents.replay`)."""
    from servegym.agents.replay import MODELS_DIR

    out = Path(out_dir)
    return MODELS_DIR if out.resolve() == RESULTS_DIR.resolve() else out / "models"


def rebuild_leaderboard(budget: str, out_dir: str | Path = RESULTS_DIR, wall_s: float = 0.0) -> SuiteResult:
    """The leaderboard of ``budget`` from its stored raw outputs alone (no training, no episodes played):
    ``servegym benchmark --suite --rescore``, after a run of some ids or a change of the scoring code.
    Holds the budget's lock (a suite run writing it makes this fail at once)."""
    from servegym.outputs import OutputLock

    if budget not in SUITE:
        raise ConfigError(f"--budget = {budget!r}; allowed: {', '.join(BUDGETS)}")
    with OutputLock(_raw_dir(budget, Path(out_dir)), "--out-dir"):
        return _rebuild(budget, out_dir, wall_s)


def _rebuild(budget: str, out_dir: str | Path, wall_s: float) -> SuiteResult:
    if budget not in SUITE:
        raise ConfigError(f"--budget = {budget!r}; allowed: {', '.join(BUDGETS)}")
    entries, outs, runs = stored_outputs(budget, Path(out_dir))
    if not entries:
        raise ConfigError(f"--rescore: no stored runs of budget {budget!r} in {_raw_dir(budget, Path(out_dir))}; "
                          f"run `servegym benchmark --suite --budget {budget}` first")
    board, records = leaderboard(entries, outs, tts.stored_references(Path(out_dir) / tts.RESULT_FILE, entries))
    res = SuiteResult(leaderboard=board, records=records, wall_s=wall_s, entry_runs=runs)
    res.files = write_leaderboard(res, entries, outs, budget, Path(out_dir))
    return res


def _run_text(run: dict[str, Any] | None) -> str:
    """The wall time of the run that made an id's rows, saying what it covered."""
    if not run:
        return "Wall time: not recorded."
    ids, workers = run.get("env_ids") or [], run.get("workers")
    where = f"{workers} processes" if workers else "Ray or unrecorded processes"
    if len(ids) > 1:
        return (f"Wall time of the run that trained {len(ids)} env ids together ({where}; all their seeds and "
                f"baselines): {run['wall_s'] / 60:.1f} min.")
    return f"Suite wall time (all seeds and baselines, {where}): {run['wall_s'] / 60:.1f} min."


def _raw_dir(budget: str, out_dir: Path) -> Path:
    return out_dir / "suite_runs" / budget


def save_entry_outputs(entry: SuiteEntry, outs: Sequence[dict[str, Any]], budget: str, out_dir: Path,
                       run: dict[str, Any]) -> Path:
    """Store one section's raw outputs in its id's file ``suite_runs/<budget>/<Id>.json``: the entry and every
    task's output (episodes, wall time, validation history). The section without a track is the file's top level
    (as before tracks existed); a stress track's section goes under ``tracks.<track>`` in the same file, so an id
    keeps one file whatever its tracks and the other sections in it are kept as they were. The leaderboard is
    rebuilt from these files, so ``--envs`` runs accumulate, and scores can be recomputed from the stored returns
    without rerunning anything. ``run``: the run's wall time, the sections trained together in it and its
    processes (:attr:`SuiteResult.entry_runs`)."""
    path = _entry_path(entry, budget, out_dir)
    # the section is implied by where it is stored: outputs keep the fields they had before tracks existed
    section = {"entry": entry.__dict__, "suite_wall_s": run["wall_s"], "suite_env_ids": run["env_ids"],
               "suite_workers": run["workers"],
               "outputs": [{k: v for k, v in o.items() if k != "section"} for o in outs]}
    old = json.loads(path.read_text()) if path.is_file() else {}
    tracks = dict(old.get("tracks") or {})
    if entry.track is None:
        data = {**section, **({"tracks": tracks} if tracks else {})}
    else:
        tracks[entry.track] = section
        data = {**{k: v for k, v in old.items() if k != "tracks"}, "tracks": dict(sorted(tracks.items()))}
    write_text(path, json.dumps(data, indent=1, default=_json_default) + "\n")
    return path


def _entry_path(entry: SuiteEntry, budget: str, out_dir: Path) -> Path:
    """``suite_runs/<budget>/<Id>.json``, the stored runs of one env id (all its sections)."""
    return _raw_dir(budget, out_dir) / f"{entry.env_id.split('/')[-1]}.json"


def _stored_section(entry: SuiteEntry, budget: str, out_dir: Path) -> dict[str, Any] | None:
    """The stored run of ``entry``'s section (whatever entry it was made with), or None: the top level of its
    id's file for the section without a track, ``tracks.<track>`` for a stress track."""
    path = _entry_path(entry, budget, out_dir)
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    sec = data if entry.track is None else (data.get("tracks") or {}).get(entry.track)
    return sec if isinstance(sec, dict) and "entry" in sec else None


def fill_missing_baselines(budget: str, out_dir: str | Path = RESULTS_DIR, env_ids: Sequence[str] | None = None,
                           workers: int | None = 1, progress: bool = False) -> dict[str, list[str]]:
    """Play, on the stored test seeds, every leaderboard policy (:func:`suite_policies`: e.g. a yardstick
    added since the run) that the stored runs of ``budget`` lack, and add its episodes to the stored
    file: no training, the agents' stored episodes untouched. ``servegym benchmark --suite --rescore
    --fill-baselines``. Returns section key -> the policies added."""
    from servegym.agents.sweep import run_local

    from servegym.outputs import OutputLock

    if budget not in SUITE:
        raise ConfigError(f"--budget = {budget!r}; allowed: {', '.join(BUDGETS)}")
    added: dict[str, list[str]] = {}
    with OutputLock(_raw_dir(budget, Path(out_dir)), "--out-dir"):
        entries, outs, runs = stored_outputs(budget, Path(out_dir))
        for e in entries:
            if env_ids is not None and e.section not in env_ids:
                continue
            mine = [o for o in outs if section_of(o) == e.section]
            have = {r["policy"] for o in mine for r in o["rows"]}
            missing = [p for p in suite_policies(e) if p not in have]
            if not missing:
                continue
            tasks = [{"kind": "baseline", "env_id": e.env_id, "section": e.section, "env_kwargs": e.env_kwargs,
                      "policy": p, "seed": s} for p in missing for s in seeds_from(TEST_SEED, e.episodes)]
            new = run_local(tasks, workers=workers, progress=progress, fn=suite_task, tidy=False,
                            desc=f"benchmark fill {e.env_id.split('/')[-1]}",
                            what=f"{', '.join(missing)} on the stored test seeds")
            new = [json.loads(json.dumps(o, default=_json_default)) for o in new]
            save_entry_outputs(e, [*mine, *new], budget, Path(out_dir), runs[e.section])
            added[e.section] = missing
    return added


def _json_default(v: Any) -> Any:
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)


def stored_outputs(budget: str, out_dir: Path
                   ) -> tuple[list[SuiteEntry], list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Every section of ``budget`` with stored outputs whose entry is still the suite's (in suite order), its
    outputs tagged with their section key (``section``); a stored section from an entry that has since changed
    (kwargs, budget) is left out, not mixed in, and so is every other track's."""
    entries, outs, runs = [], [], {}
    for e in SUITE[budget]:
        data = _stored_section(e, budget, out_dir)
        if data is None:
            continue
        if SuiteEntry(**{**data["entry"], "baselines": _tuple(data["entry"].get("baselines"))}) != e:
            continue
        entries.append(e)
        outs += [{**o, "section": e.section} for o in data["outputs"]]
        runs[e.section] = {"wall_s": float(data["suite_wall_s"]), "env_ids": data.get("suite_env_ids"),
                          "workers": data.get("suite_workers")}
    return entries, outs, runs


def _tuple(v: Any) -> tuple[str, ...] | None:
    return None if v is None else tuple(v)


@dataclass(frozen=True)
class EnvBoard:
    """Every policy's episodes of one env id on the leaderboard, with its scale (the roles the stored runs
    lack fall back as :func:`env_board` states in ``notes``)."""

    env_id: str
    by_policy: dict[str, list[EpisodeResult]]
    roles: dict[str, str]  # role -> policy name, for the roles present in the runs
    scale: protocol.Scale
    notes: tuple[str, ...]

    def scores(self, policy: str) -> np.ndarray:
        return self.scale.scores(self.by_policy[policy])


def env_board(env_id: str, eps: pd.DataFrame, env_kwargs: dict[str, Any] | None = None) -> EnvBoard:
    """The board of one env id (on the stress track ``env_kwargs`` select, if any) from its episode rows (stored
    suite outputs)."""
    by_policy = {p: [_result(r) for r in g.to_dict("records")] for p, g in eps.groupby("policy", sort=False)}
    wanted = protocol.yardsticks(env_id, env_kwargs).roles()
    roles, notes = {}, []
    for role, name in wanted.items():
        if name in by_policy:
            roles[role] = name
        elif role == "strongest":
            roles[role] = wanted["paper"]
            notes.append(f"strongest baseline {name!r} not in these runs: the paper's method stands in")
        elif role != "paper" and role != "naive":
            notes.append(f"{role} ({name}) not in these runs")
    for role in ("naive", "paper"):
        if wanted[role] not in by_policy:
            raise ConfigError(f"{env_id}: the stored runs lack the {role} reference {wanted[role]!r}; rerun the suite")
    oracle = by_policy.get(roles["oracle"]) if "oracle" in roles else None
    scale = protocol.make_scale(env_id, by_policy[roles["naive"]], by_policy[roles["paper"]], oracle)
    return EnvBoard(env_id, by_policy, roles, scale, tuple(notes))


def leaderboard(entries: Sequence[SuiteEntry], outs: Sequence[dict[str, Any]],
                tts_refs: dict[str, tts.Reference] | None = None) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """One row per env id x policy (agents pooled over training seeds), and the JSON records: the
    protocol object plus role, scale, SLO violation, the paired verdict against the strongest baseline,
    the share of the gap closed (agents), the agents' time to the strongest on validation
    (:mod:`servegym.agents.time_to_strongest`; ``tts_refs``: the strongest's validation return and a CPU
    model per id for runs that do not carry them) and the headroom (the strongest baseline's record)."""
    rows, records = [], []
    for e in entries:
        mine = [o for o in outs if section_of(o) == e.section]
        eps = pd.DataFrame([r for o in mine for r in o["rows"]])
        board = env_board(e.env_id, eps, e.env_kwargs)
        fam = family_for(e.env_id)
        kpi = _entry_kpi(e)
        strongest = board.roles["strongest"]
        strong_res = board.by_policy[strongest]
        strong_scores = board.scores(strongest)
        strong_by_seed = protocol.seed_scores(strong_res, strong_scores)
        head, head_ci = protocol.headroom(strong_by_seed) if board.scale.oracle else (math.nan, (math.nan, math.nan))
        # headroom in the KPI's units: the oracle's and the causal reference's paired difference to the strongest
        head_kpi = {role: protocol.paired_verdict(board.by_policy[board.roles[role]], strong_res, kpi, strongest)
                    for role in ("oracle", "causal") if role in board.roles and board.roles[role] in board.by_policy}
        role_of = {v: k for k, v in reversed(list(board.roles.items()))}
        order = [p for p in by_role_order(board)] + [p for p in board.by_policy if p.startswith("agent:")]
        order += [p for p in suite_policies(e) if p not in order]
        for p in order:
            res = board.by_policy.get(p)
            if not res:
                continue
            scores = board.scores(p)
            st = protocol.score_stats(scores, results=res)
            poi, poi_ci = protocol.probability_of_improvement(scores, strong_scores)
            runs = [o for o in mine if (o["kind"] == "train") == p.startswith("agent:")
                    and (o["kind"] == "train" or o["rows"][0]["policy"] == p)]
            agent = p.startswith("agent:")
            role = "agent" if agent else role_of.get(p, "baseline")
            verdict = None if p == strongest else protocol.paired_verdict(res, strong_res, kpi, strongest)
            # the share of the gap is the agents' figure (and follow's, the agent that only copies)
            closed, closed_ci = (protocol.gap_closed(protocol.seed_scores(res, scores), strong_by_seed)
                                 if board.scale.oracle and role in ("agent", "follow") else (math.nan, (math.nan, math.nan)))
            slo = protocol.mean_metric(res, protocol.SLO_METRIC)
            me = protocol.model_error(e.env_id)
            mape = me.mape_pct if me is not None and me.mape_pct is not None else math.nan
            inside = bool(verdict is not None and math.isfinite(mape) and abs(verdict.kpi_diff_pct) < mape)
            rec = protocol.benchmark_record(e.env_id, p, "test", res, scores)
            rec.update(track=e.track, role=role, scale=board.scale.name, slo_violation_pct=protocol._json_float(slo),
                       vs_strongest=None if verdict is None else {**verdict.as_dict(), "model_error_mape_pct":
                                                                  protocol._json_float(mape),
                                                                  "inside_model_error": inside},
                       gap_closed=protocol._json_float(closed),
                       gap_closed_ci=[protocol._json_float(v) for v in closed_ci])
            reach = None
            if agent:
                ref = (tts_refs or {}).get(e.section, tts.Reference())
                reach = tts.time_to_strongest([o for o in mine if o["kind"] == "train"],
                                              {**board.roles, "strongest": strongest}, ref.target, ref.cpu_model)
                rec.update(time_to_strongest=None if reach is None else reach.as_dict())
            if p == strongest:
                rec.update(headroom=protocol._json_float(head), headroom_ci=[protocol._json_float(v) for v in head_ci],
                           headroom_kpi={role: {k: v.as_dict()[k] for k in ("kpi", "kpi_diff", "kpi_diff_ci",
                                                                              "kpi_diff_pct", "slo_diff_pp",
                                                                              "slo_diff_ci", "episodes")}
                                         for role, v in head_kpi.items()})
            records.append(rec)
            rows.append({"env": e.env_id, "track": e.track or "", "policy": p, "role": role, "episodes": len(res),
                         "seeds": len({r.get("train_seed") for r in eps[eps.policy == p].to_dict("records")}),
                         "score_iqm": st.iqm, "score_iqm_lo": st.iqm_ci[0], "score_iqm_hi": st.iqm_ci[1],
                         "score_mean": st.mean, "score_mean_lo": st.mean_ci[0], "score_mean_hi": st.mean_ci[1],
                         "p_improve_over_strongest": poi, "p_improve_lo": poi_ci[0], "p_improve_hi": poi_ci[1],
                         "kpi": kpi, **{k: v for k, v in protocol.kpi_means(res, fam).items()},
                         "kpi_diff_vs_strongest": math.nan if verdict is None else verdict.kpi_diff,
                         "kpi_diff_lo": math.nan if verdict is None else verdict.kpi_ci[0],
                         "kpi_diff_hi": math.nan if verdict is None else verdict.kpi_ci[1],
                         "kpi_diff_pct": math.nan if verdict is None else verdict.kpi_diff_pct,
                         "slo_diff_vs_strongest_pp": math.nan if verdict is None else verdict.slo_diff_pp,
                         "slo_diff_lo": math.nan if verdict is None else verdict.slo_ci[0],
                         "slo_diff_hi": math.nan if verdict is None else verdict.slo_ci[1],
                         "slo_tolerance_pp": math.nan if verdict is None else verdict.slo_tolerance_pp,
                         "return_diff": math.nan if verdict is None else verdict.return_diff,
                         "return_diff_lo": math.nan if verdict is None else verdict.return_ci[0],
                         "return_diff_hi": math.nan if verdict is None else verdict.return_ci[1],
                         "seeds_beating": -1 if verdict is None else verdict.seeds_beating,
                         "inside_model_error": inside,
                         "outcome_vs_strongest": "" if verdict is None else verdict.outcome,
                         "beats_strongest": bool(verdict is not None and verdict.beats),
                         "beats_naive": protocol.beats(res, board.by_policy[board.roles["naive"]], kpi),
                         "gap_closed": closed, "gap_closed_lo": closed_ci[0], "gap_closed_hi": closed_ci[1],
                         **{f"{role}_minus_strongest{suffix}": (getattr(head_kpi[role], attr) if p == strongest
                                                                 and role in head_kpi else math.nan)
                            for role in ("oracle", "causal")
                            for suffix, attr in (("", "kpi_diff"), ("_pct", "kpi_diff_pct"), ("_slo_pp", "slo_diff_pp"))},
                         "headroom": head if p == strongest else math.nan,
                         "headroom_lo": head_ci[0] if p == strongest else math.nan,
                         "headroom_hi": head_ci[1] if p == strongest else math.nan,
                         "scale": board.scale.name, "notes": "; ".join(board.notes),
                         "wall_s": float(sum(o["wall_s"] for o in runs)),
                         "env_steps": int(sum(o["env_steps"] for o in runs)),
                         **tts.csv_fields(reach if agent else None)})
    return pd.DataFrame(rows), records


def by_role_order(board: EnvBoard) -> list[str]:
    """The board's yardstick policies in role order (each once)."""
    return list(dict.fromkeys(board.roles[r] for r in protocol.ROLES if r in board.roles))


def _entry_kpi(e: SuiteEntry) -> str:
    env = make_split_env(e.env_id, "test", e.env_kwargs)
    try:
        return protocol.kpi_metric(env)
    finally:
        env.close()


def _result(row: dict[str, Any]) -> EpisodeResult:
    core = {"policy", "seed", "reward", "length", "train_seed"}
    metrics = {k: float(v) for k, v in row.items() if k not in core and isinstance(v, (int, float))
               and not isinstance(v, bool) and math.isfinite(float(v))}
    # agents pooled over training seeds: one episode per (training seed, test seed)
    ts = row.get("train_seed")
    train_seed = int(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) and math.isfinite(ts) else -1
    return EpisodeResult(policy=row["policy"], seed=int(row["seed"]), reward=float(row["reward"]),
                         length=int(row["length"]), metrics=metrics, train_seed=train_seed)


def write_leaderboard(res: SuiteResult, entries: Sequence[SuiteEntry], outs: Sequence[dict[str, Any]],
                      budget: str, out_dir: Path) -> dict[str, Path]:
    """leaderboard.md/.csv/.json and the plots (performance profiles, score IQMs) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"leaderboard_{budget}" if budget == "smoke" else "leaderboard"
    files = {"csv": out_dir / f"{stem}.csv", "json": out_dir / f"{stem}.json", "md": out_dir / f"{stem}.md"}
    write_frame(res.leaderboard, files["csv"])
    write_text(files["json"], json.dumps(res.records, indent=2) + "\n")
    scores_by_env: dict[str, dict[str, np.ndarray]] = {}
    for e in entries:
        mine = [o for o in outs if section_of(o) == e.section]
        board = env_board(e.env_id, pd.DataFrame([r for o in mine for r in o["rows"]]), e.env_kwargs)
        scores_by_env[e.section] = {p: board.scores(p) for p in board.by_policy}
    files["profiles"] = _plot_profiles(scores_by_env, out_dir / f"{stem}_profiles.png")
    write_text(files["md"], _markdown(res, entries, outs, budget, files))
    return files


def _plot_profiles(scores_by_env: dict[str, dict[str, np.ndarray]], path: Path) -> Path:
    """One performance-profile panel per section (an env id, or ``<id>@<track>``; rliable's plot)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from rliable import plot_utils

    taus = np.linspace(-50.0, 150.0, 81)
    n = len(scores_by_env)
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    # each panel's legend goes below it, in two columns, off the curves (rows taller by the legend's room)
    most = max((len(s) for s in scores_by_env.values()), default=1)
    legend_in = 0.16 * math.ceil(most / 2)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, (3.6 + legend_in) * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax, (env_id, scores) in zip(axes.flat[:n], scores_by_env.items(), strict=True):
        profiles, cis = {}, {}
        for p, s in scores.items():
            profiles[p], cis[p] = protocol.performance_profile(s, taus)
        plot_utils.plot_performance_profiles(profiles, taus, performance_profile_cis=cis, ax=ax,
                                             xlabel=r"normalized score $\tau$", ylabel=r"fraction of episodes $> \tau$")
        ax.set_title(env_id.split("/")[-1], fontsize=10)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.34), ncol=2, fontsize=7, frameon=False)
    fig.suptitle("test split: 0 = naive, 100 = oracle (or the paper's method where an id has no oracle; "
                 "leaderboard.md names each panel's scale)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)
    return path


def _above_strongest(sub: pd.DataFrame) -> str:
    """A sentence naming the shipped baselines that score above the strongest on this board's episodes (the
    strongest is one per id, chosen on the validation split, so on the test split another can lead)."""
    strong = sub[sub.headroom.notna()] if "headroom" in sub else sub.iloc[0:0]
    if not len(strong):
        return ""
    above = sub[~sub.role.isin(["agent", "follow", "causal", "oracle"]) & (sub.score_mean > strong.score_mean.iloc[0])]
    if not len(above):
        return ""
    names = ", ".join(f"`{p}` {_f(v)}" for p, v in zip(above.policy, above.score_mean, strict=True))
    return (f" Above the strongest on these test episodes (it is one per id, chosen on the validation split): "
            f"{names}.")


def _kpi_headroom(sub: pd.DataFrame) -> str:
    """The headroom of one id in its KPI's units: the oracle's and the causal reference's mean difference to
    the strongest (negative = less KPI), in % of the strongest's, with the SLO difference."""
    cols = [c for c in ("oracle_minus_strongest", "causal_minus_strongest") if c in sub]
    row = sub[sub[cols].notna().any(axis=1)] if cols else sub.iloc[0:0]  # the strongest's row carries them
    if not len(row):
        return ""
    r, kpi, parts = row.iloc[0], row.iloc[0]["kpi"], []
    # pd's causal reference is a perfect forecast; the geo tracks' feeds a rule what a causal controller computes
    causal = ("causal reference (a perfect forecast of the next periods)" if family_for(r["env"]).name == "pd"
              else "causal reference (a rule fed what a causal controller computes)")
    for role, what in (("oracle", "oracle"), ("causal", causal)):
        v = r.get(f"{role}_minus_strongest", math.nan)
        if isinstance(v, float) and math.isfinite(v):
            parts.append(f"{what} - strongest {v:+.4g} {kpi} ({r[f'{role}_minus_strongest_pct']:+.2f} %), SLO "
                         f"{r[f'{role}_minus_strongest_slo_pp']:+.3g} pp")
    return (" In KPI units: " + "; ".join(parts) + ".") if parts else ""


def _markdown(res: SuiteResult, entries: Sequence[SuiteEntry], outs: Sequence[dict[str, Any]], budget: str,
              files: dict[str, Path]) -> str:
    b = res.leaderboard
    lines = [f"# servegym leaderboard ({budget} budget, test split)", "",
             "Score per episode: 0 = naive, 100 = the hindsight oracle on the same scenario, 100 (R - R_naive) / "
             "(R_oracle - R_naive); an id without an oracle in its runs falls back to 100 = the paper's method "
             "(pooled gap) and its section says so (`servegym.agents.protocol`). IQM and mean with 95 % "
             "bootstrap CIs over episodes (agents: training seeds and test episodes both resampled). Headroom: 100 - the strongest "
             "baseline's score (chosen on the validation split), with its CI. Gap closed: an agent's share of the "
             "strongest-to-oracle gap, (S - S_strongest) / (100 - S_strongest). vs strongest: the paired KPI "
             "difference [95 % CI] on the same episodes, in % of the strongest's KPI, the SLO difference with its CI "
             "and tolerance, the return difference; beats strongest: yes, or the outcome (tie, worse, slo, return) "
             f"and for agents how many training seeds beat on their own. {protocol.BEATS_RULE}. "
             "Agents: each seed's checkpoint chosen on the validation split only. " + tts.LEADERBOARD_NOTE + " Generated by "
             f"`servegym benchmark --suite --budget {budget}` (one `--envs` run per section; each section states its "
             "wall time). A section is an env id, or an id on a stress track (`--envs ID@track`, `servegym.splits."
             "FAMILY_TRACKS`), whose yardsticks are the track's own.", ""]
    if budget == "full":
        lines += [budget_cost("full") + ".", ""]
    for e in entries:
        sub = b[(b.env == e.env_id) & (b.track == (e.track or ""))]
        y = protocol.yardsticks(e.env_id, e.env_kwargs)
        roles = ", ".join(f"{k} = `{v}`" for k, v in y.roles().items())
        scale = sub["scale"].iloc[0] if len(sub) else protocol.scale_name(e.env_id)
        notes = sub["notes"].iloc[0] if len(sub) and sub["notes"].iloc[0] else ""
        strong = sub[sub.headroom.notna()] if "headroom" in sub else sub.iloc[0:0]
        head = (f"Headroom (oracle - strongest): {_f(strong.headroom.iloc[0])} "
                f"[{_f(strong.headroom_lo.iloc[0])}, {_f(strong.headroom_hi.iloc[0])}]." if len(strong)
                else "Headroom: undefined (no oracle in these runs).")
        head += _kpi_headroom(sub)
        title = e.env_id if e.track is None else f"{e.env_id}, stress track {e.track}"
        lines += [f"## {title}", "",
                  f"{e.note}; `gym.make` kwargs `{json.dumps(e.env_kwargs)}`; agent {e.algo}, {e.timesteps:,} steps x "
                  f"{e.seeds} seeds, checkpoint on {e.val_episodes} validation episodes x {e.evals} evaluations; "
                  f"{e.episodes} test episodes; {roles}. {_run_text(res.entry_runs.get(e.section))}", "",
                  f"Scale: {scale}." + (f" Missing: {notes}." if notes else "") + f" {head}{_above_strongest(sub)}", "",
                  *([f"Effect sizes (the KPI differences in %) beside the {me.text()}.", ""]
                    if (me := protocol.model_error(e.env_id)) else [])]
        kpi = sub["kpi"].iloc[0] if len(sub) else "kpi"
        lines += [f"| policy | role | score mean [95% CI] | score IQM [95% CI] | {kpi} | SLO viol. % "
                  f"| vs strongest: {kpi} diff [95% CI] (%), SLO diff [CI] (tolerance), return diff | beats strongest | gap closed [95% CI] | wall s | env steps "
                  f"| {tts.MD_HEADER} |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for _, r in sub.iterrows():
            diff = ("-" if not math.isfinite(r.kpi_diff_vs_strongest) else
                    f"{r.kpi_diff_vs_strongest:+.4g} [{r.kpi_diff_lo:+.4g}, {r.kpi_diff_hi:+.4g}] "
                    f"({r.kpi_diff_pct:+.2g} %), SLO {r.slo_diff_vs_strongest_pp:+.3g} pp "
                    f"[{r.slo_diff_lo:+.3g}, {r.slo_diff_hi:+.3g}] (tol. {r.slo_tolerance_pp:.2g}), "
                    f"return {r.return_diff:+.4g}")
            verdict = ("-" if not r.outcome_vs_strongest else
                       f"{'**yes**' if r.beats_strongest else r.outcome_vs_strongest}"
                       + (f" ({r.seeds_beating} of {r.seeds} seeds)" if r.role == "agent" else "")
                       + (", inside the model's error" if r.get("inside_model_error", False) else ""))
            closed = ("-" if not math.isfinite(r.gap_closed) else
                      f"{r.gap_closed:.2f} [{r.gap_closed_lo:.2f}, {r.gap_closed_hi:.2f}]")
            lines.append(f"| {r.policy} | {r.role} | {_f(r.score_mean)} [{_f(r.score_mean_lo)}, {_f(r.score_mean_hi)}] | "
                         f"{_f(r.score_iqm)} [{_f(r.score_iqm_lo)}, {_f(r.score_iqm_hi)}] | "
                         f"{r.get(kpi, math.nan):.4g} | {r.get(protocol.SLO_METRIC, math.nan):.3f} | {diff} | "
                         f"{verdict} | {closed} | {r.wall_s:,.0f} | {r.env_steps:,} | "
                         f"{r.get('time_to_strongest') or '-'} |")
        lines.append("")
    lines += [f"![performance profiles]({files['profiles'].name})", "",
              f"Files: `{files['csv'].name}` (every column), `{files['json'].name}` (one object per section x "
              "policy: env, track (null without one), policy, split, episodes, score_mean, score_iqm, score_ci, kpis, role, scale, "
              "slo_violation_pct, vs_strongest (the paired verdict), gap_closed; the strongest baseline's "
              "also headroom).", ""]
    return "\n".join(lines)
