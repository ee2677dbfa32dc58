"""The benchmark protocol: the yardsticks of every env id, the normalized score, the paired "beats"
verdict and rliable statistics, shared by ``servegym benchmark``, ``servegym evaluate``, the training
callback and the suite.

**Yardsticks** (:data:`YARDSTICKS`, one :class:`Yardsticks` per env id). Every env id names, among its
family's baselines, the policies an agent is measured against; each role is also a policy name wherever a
policy name is accepted (:func:`policy_names`, :func:`resolve_policy`):

* ``naive``: the simple baseline that is 0 on the scale (geo ``rr``, pd ``static-peak``, npu ``base``);
* ``paper``: the paper's own method, exactly as published (geo ``milp``, pd ``min-power+lookahead``, npu
  ``neuscale``); ``best`` is kept as an alias of ``paper`` (the name older runs and commands use);
* ``oracle``: the hindsight bound that is 100 on the scale, run by the same simulator on the same
  scenario, documented by what it knows and whether it is an ``optimum``, a ``relaxation`` (an upper bound
  on the return) or a strong ``feasible`` policy (a lower bound on the optimum) (:attr:`Yardsticks.oracle_kind`);
* ``strongest``: the strongest non-learned baseline, chosen on the *validation* split
  (:func:`select_strongest`; the choice and its evidence are in :attr:`Yardsticks.strongest_note`);
* ``follow``: the residual action mode's zero action (the agent copies the paper's method), for ids whose
  action mode is residual (:func:`follow_action`), so an agent that only copies is visible as such.

Beside the roles, an id may name a second hindsight bound (:attr:`Yardsticks.hindsight`, with its own kind and
what it knows) that is *not* the 100 of the scale: npu's ``hindsight`` provisioning plan (known future demand,
the real vPod boot times, played through the simulator: a ``feasible`` policy, so a lower bound on the
simulator's hindsight optimum) sits beside the Ideal relaxation that stays its ``oracle``. It is reported on the
oracle's scale (how much of the Ideal's headroom a policy that knows the future actually reaches) and is not a
leaderboard role.

**Scale.** With an oracle, episode i of return R_i scores ``100 (R_i - N_i) / (O_i - N_i)``, N_i and O_i
the naive and oracle returns on the *same* scenario (same split and reset seed): naive scores 0 and the
oracle 100 on every episode, by construction. Per episode and not pooled, because the hindsight oracle
cannot lose to naive on its own scenario the way the paper's method could (that swap is why the
paper-anchored scale below pools its gap), and a per-episode anchor makes the headroom an episode's
property. An episode where ``O_i - N_i`` is below :data:`REFERENCE_GAP_MIN` of the anchors' magnitude has
no scale (NaN, counted in ``undefined``), never a huge ratio.

*Fallback, stated in every output* (:func:`scale_name`): an env id without an oracle yet keeps the
paper-anchored scale ``100 (R - N_i) / G`` with G = mean(R_paper - R_naive) pooled over the evaluated
scenarios (0 = naive on every episode, 100 = the paper's method on average). Pooled there because the
references tie or swap on single scenarios (NPUAutoscale-v0's 2-h test scenarios: NeuScale below Base on
6 of 10; a per-episode denominator gave a 35x-Base-energy agent +3,681).

**Headroom and gap closed.** Per env id and split: headroom = 100 - the strongest baseline's score (mean
over episodes, paired bootstrap CI), the room a learner has above the best thing that needs no learning;
an agent's share of the gap closed = (S_agent - S_strongest) / (100 - S_strongest) on the same episodes
(:func:`gap_closed`; 1 = reaches the oracle, 0 = the strongest baseline, < 0 = below it).

**Beats** (:func:`paired_verdict`, the one rule the leaderboard, ``servegym evaluate`` and training use;
:mod:`servegym.agents.verdict` states it in full). On the same episodes, with a crossed bootstrap that resamples
an agent's training seeds and the test episodes: the KPI lower with the CI of the difference below 0, the
SLO difference's CI upper bound within max(10 % of the baseline's violation, one request's share of an
episode), and the mean return not lower. A tie is reported as a tie; fewer than two paired episodes never win.

**Statistics** (Agarwal et al., "Deep RL at the Edge of the Statistical Precipice", NeurIPS 2021, with
its ``rliable`` library): IQM and mean of the normalized scores with 95 % stratified-bootstrap
percentile CIs (2,000 resamples; the runs of each task are resampled independently, scipy's
multi-sample bootstrap), probability of improvement, and performance profiles (fraction of runs with
score > tau). The aggregate functions and the profile plot are rliable's (:mod:`rliable.metrics`,
:mod:`rliable.plot_utils`); the resampling is scipy's, because ``rliable.library`` imports ``arch``,
whose releases allowed by rliable 1.2 (< 8) fail to import with pandas 3. One run is one evaluation
episode: an agent's runs are its training seeds x test episodes, a baseline's its test episodes.

This module states the protocol and is its public entry: it re-exports the names of the modules that hold it,
the yardsticks and policy names (:mod:`servegym.agents.protocol_yardsticks`), the scales
(:mod:`servegym.agents.protocol_scale`), the statistics (:mod:`servegym.agents.protocol_stats`) and the paired
verdict (:mod:`servegym.agents.verdict`).
"""

from __future__ import annotations

from servegym.agents.protocol_scale import (  # noqa: F401  (the scales are protocol names)
    REFERENCE_GAP_MIN,
    Scale,
    checkpoint_scale,
    episode_scores,
    make_scale,
    normalized_scores,
    oracle_scores,
    reference_gap,
)
from servegym.agents.protocol_stats import (  # noqa: F401  (the statistics are protocol names)
    ScoreStats,
    benchmark_record,
    gap_closed,
    headroom,
    kpi_means,
    mean_metric,
    performance_profile,
    plot_performance_profiles,
    probability_of_improvement,
    score_stats,
    seed_scores,
)
from servegym.agents.protocol_yardsticks import (  # noqa: F401  (the yardsticks are protocol names)
    FOLLOW,
    MODEL_ERRORS,
    ORACLE_KINDS,
    ROLES,
    TRACK_YARDSTICKS,
    YARDSTICKS,
    ModelError,
    Yardsticks,
    checkpoint_references,
    follow_action,
    kpi_metric,
    model_error,
    policy_names,
    references,
    register_yardsticks,
    resolve_policy,
    scale_name,
    track_of,
    yardsticks,
)
from servegym.agents.verdict import (  # noqa: F401  (the verdict is part of the protocol's public names)
    BEATS_RULE,
    BOOTSTRAP_REPS,
    CONFIDENCE,
    SLO_COUNT_METRIC,
    SLO_METRIC,
    SLO_TOL_REL,
    Verdict,
    beats,
    crossed_ci,
    crossed_iqm_ci,
    paired_verdict,
    per_seed_means,
    slo_resolution_pp,
    slo_tolerance_pp,
    value_table,
)

