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

This module holds the single-policy benchmark and is the public entry of the suite, whose names it re-exports
from the modules that hold them: the entries and section keys (:mod:`servegym.agents.suite_entries`), the
tasks a run hands its executors (:mod:`servegym.agents.suite_tasks`), the stored runs and the journal
(:mod:`servegym.agents.suite_runs`), the run, rescore and fill-baselines (:mod:`servegym.agents.suite_runner`),
the leaderboard's table (:mod:`servegym.agents.leaderboard_scores`) and its files
(:mod:`servegym.agents.leaderboard_files`); the env of a split and the policies' episodes on it are in
:mod:`servegym.agents.split_episodes`, and the replay of the shipped models in :mod:`servegym.agents.replay`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from servegym.agents import protocol
from servegym.agents.families import EpisodeResult, family_for
from servegym.agents.leaderboard_files import _f, write_leaderboard
from servegym.agents.leaderboard_scores import EnvBoard, by_role_order, env_board, leaderboard
from servegym.agents.rollout import agent_act_fn, play_episode, seeds_from
from servegym.agents.split_episodes import make_split_env, run_policy_episodes
from servegym.agents.suite_entries import (
    BUDGETS,
    FULL_COST_S_PER_SEED,
    PD_STRONGEST,
    RESULTS_DIR,
    SUITE,
    TEST_SEED,
    TRACK_SEP,
    VALIDATION_SEED,
    SuiteEntry,
    budget_cost,
    section_key,
    section_of,
    select_entries,
)
from servegym.agents.suite_runner import fill_missing_baselines, rebuild_leaderboard, run_suite
from servegym.agents.suite_runs import (
    SUITE_RUNS,
    SuiteResult,
    default_run_dir,
    models_dir_for,
    save_entry_outputs,
    stored_outputs,
    suite_journal,
    trained_models,
)
from servegym.agents.suite_tasks import (
    baseline_task,
    follow_available,
    model_folder,
    shipped_hyperparams,
    suite_header,
    suite_journal_check,
    suite_policies,
    suite_progress,
    suite_task,
    suite_tasks,
    task_key,
    train_config,
    train_task,
)
from servegym.agents.verdict import verdict_ranking

from servegym.errors import ConfigError

#: The names this module defines and those it re-exports from the suite's modules (its public interface).
__all__ = [
    "ANCHOR_ROLES", "BUDGETS", "FULL_COST_S_PER_SEED", "PD_STRONGEST", "RESULTS_DIR", "SUITE", "SUITE_RUNS",
    "TEST_SEED", "TRACK_SEP", "VALIDATION_SEED", "Candidate", "EnvBoard", "PolicyEvaluation", "SuiteEntry",
    "SuiteResult", "baseline_task", "budget_cost", "by_role_order", "default_run_dir", "env_board",
    "evaluate_policy", "fill_missing_baselines", "follow_available", "leaderboard", "make_split_env",
    "model_folder", "models_dir_for", "rebuild_leaderboard", "run_policy_episodes", "run_suite",
    "save_entry_outputs", "section_key", "section_of", "select_entries", "select_strongest", "shipped_hyperparams",
    "stored_outputs", "suite_header", "suite_journal", "suite_journal_check", "suite_policies", "suite_progress",
    "suite_task", "suite_tasks", "task_key", "text_summary", "train_config", "train_task", "trained_models",
    "write_leaderboard",
]


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
