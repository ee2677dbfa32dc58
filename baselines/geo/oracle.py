"""The geo hindsight oracle: a rolling-window facility MILP that knows what no scheduler can.

What it knows (and the shipped schedulers do not):

- **true output lengths**: the run is played with ``osl_mode = "oracle"``, so every estimate uses
  each request's real OSL instead of the workload mean;
- **the realized grid**: the snapshots carry the CI in force, even where the scenario's schedulers see a
  day-ahead forecast of it (``shift-ci-forecast``);
- **fresh state**: snapshots every :data:`ORACLE_POLL_S` (or the scenario's own period if that is
  shorter), so no decision is taken on a state older than half a second, whatever the scenario's
  poll period (5 s on the ``shift-stale`` split and in GeoRouteWindow-v0's leaderboard config);
- **near-future arrivals**: every request arriving within one oracle poll interval, across all
  regional schedulers, is placed by *one* MILP before the interval starts (a scheduler only ever
  sees its own window, and only once it closed), and each request still leaves at its own arrival:
  no window wait and no solver delay (the oracle's solve time is not charged to the requests).

The model is the facility MILP of :mod:`~servegym.baselines.geo.milp` (same ``c_{r,d}``, SLO-feasible
pairs ``F_r``, wake costs ``f_d``, solved by :func:`~servegym.baselines.geo.solver.solve_facility`
with HiGHS; nothing of the dynamics is re-modelled here): the window is the whole oracle interval
and ``H_d`` the estimator's batch-slot headroom of the fresh snapshot drained to the interval's last
arrival (:func:`~servegym.baselines.geo.ilp.drained_snapshot`), times ``cap_scale``. With ``passes > 1``
the interval is solved again with the feasibility of every pair re-checked on the snapshot with the
previous solve's placements projected onto it (the iterative ILP's
:func:`~servegym.baselines.geo.ilp.project_assignment`), since one interval's placements share the same
slots and queues. Requests no solve places go to their lowest-carbon feasible DC beyond the caps (the least-late DC when none is
feasible), as GeoRouteWindow-v0's overflow does.

What it is: a **strong feasible policy**, run by the same simulator on the same scenario (arrival
stream, grid hours, shift), so its return is *attainable*: a lower bound on the optimum of the
episode, not the optimum itself. An exact episode optimum would need the engines' queueing and
batching dynamics inside the model (not tractable at tens of thousands of requests). The bound the
solver gives is per window: the LP relaxation of each window's MILP (step 1 of
:func:`~servegym.baselines.geo.solver.solve_facility`) bounds that window model's objective from
below; ``stats["lp_bound_g"]`` sums it over the episode next to the MILP objective
(``stats["milp_obj_g"]``; both in the model's gCO2 units, the big-M penalty of requests left
unplaced included), so their ratio is how far the rolling MILPs are from their own models'
optimum. Neither is a bound on the simulator's carbon (the estimator is a model of the engines).

The registry's ``oracle`` (:class:`HindsightOracle`) plays this MILP at a few ``cap_scale`` values and
the shipped schedulers that need less information, and keeps, per episode, the plan whose return was
best: hindsight in the strongest sense (it picks after seeing how each played out), still a real run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from servegym.baselines.geo.ilp import drained_snapshot, project_assignment
from servegym.baselines.geo.milp import wake_costs
from servegym.baselines.geo.solver import new_highs, solve_facility
from servegym.envs.geo.sim.cluster import GeoSimulation
from servegym.envs.geo.sim.config import GeoConfig
from servegym.envs.geo.sim.decisions import BasePolicy, DecisionContext
from servegym.envs.geo.sim.estimator import MAX_DUTY, Estimator
from servegym.envs.geo.sim.metrics import GeoResults
from servegym.envs.geo.sim.provisioner import Snapshot

from servegym.errors import ConfigError

#: Provisioner period (s) the oracle plays with: its snapshots are at most this old.
ORACLE_POLL_S = 0.5
#: Relative MIP gap and HiGHS time limit (s) of each oracle window solve.
ORACLE_MIP_REL_GAP = 1e-3
ORACLE_TIME_LIMIT_S = 2.0
#: Solves per oracle interval: the first on the fresh snapshot, the next ones with the feasibility of
#: every pair re-checked on the snapshot with the previous solve's placements projected onto it.
ORACLE_PASSES = 3


def oracle_config(config: GeoConfig) -> GeoConfig:
    """The scenario ``config`` as the oracle plays it: same arrivals, grid, fleet and shift, with the
    true OSLs in the estimator, the realized grid CI in the snapshots (not a forecast of it), fresh snapshots
    (:data:`ORACLE_POLL_S`) and per-request decisions."""
    poll = min(float(config.poll_interval_s), ORACLE_POLL_S)
    return config.replace(osl_mode="oracle", poll_interval_s=poll, decision_mode="request", ci_signal="realized")


def project_with_prefill(snap: Snapshot, estimator: Estimator, assign: NDArray[np.int64], isl: NDArray[np.int64],
                         interval_s: float) -> Snapshot:
    """:func:`~servegym.baselines.geo.ilp.project_assignment` plus the admitted prompts' prefill as prefill
    duty over ``interval_s`` (their chunks stall every decode step at d; the projection leaves that out)."""
    proj = project_assignment(snap, estimator, assign, isl)
    admitted_tokens = np.maximum(proj.kv_tokens - snap.kv_tokens, 0.0)  # per engine
    duty = snap.prefill_duty + estimator.prefill_time_s(admitted_tokens) / max(interval_s, 1e-9)
    return proj.replace(prefill_duty=np.minimum(duty, MAX_DUTY))


class HindsightMILP(BasePolicy):
    """The rolling-window hindsight facility MILP (module docstring). Run it on
    :func:`oracle_config` of the scenario (it refuses a context without true OSLs).

    Args:
        cap_scale: multiplies the headroom ``H_d`` (> 0; 1 = the estimator's free slots).
        mip_rel_gap, time_limit_s: HiGHS settings of each window solve.
        passes: solves per interval (:data:`ORACLE_PASSES`); a pair found infeasible on a projected
            snapshot stays out of the later solves.
        stall: project the admitted prompts' prefill too (:func:`project_with_prefill`): a cautious
            variant that keeps short outputs off DCs busy prefilling (it spreads load, like round robin,
            where the plain projection packs the cleanest DCs).

    ``stats`` after a run: windows, requests, overflow requests (placed beyond the caps), solver CPU
    seconds, summed LP-relaxation bound and MILP objective (gCO2, estimator units), largest gap.
    """

    batchable = True
    decision_mode = "request"

    def __init__(self, cap_scale: float = 1.0, *, mip_rel_gap: float = ORACLE_MIP_REL_GAP,
                 time_limit_s: float = ORACLE_TIME_LIMIT_S, passes: int = ORACLE_PASSES, stall: bool = False) -> None:
        if isinstance(cap_scale, bool) or not isinstance(cap_scale, (int, float)) or not 0.0 < cap_scale <= 100.0:
            raise ConfigError(f"cap_scale = {cap_scale!r} is out of range; allowed: (0, 100]")
        self.cap_scale = float(cap_scale)
        self.mip_rel_gap = float(mip_rel_gap)
        self.time_limit_s = float(time_limit_s)
        if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
            raise ConfigError(f"passes = {passes!r} is out of range; allowed: an integer >= 1")
        self.passes = passes
        self.stall = bool(stall)
        self.name = f"hindsight-milp:{self.cap_scale:g}:{self.passes}" + (":stall" if self.stall else "")
        self.reset(1, 1, 0)

    def reset(self, n_dcs: int, n_schedulers: int, seed: int) -> None:
        super().reset(n_dcs, n_schedulers, seed)
        self._highs = new_highs(self.time_limit_s)
        self.stats: dict[str, Any] = {"windows": 0, "requests": 0, "overflow_requests": 0, "solve_cpu_s": 0.0,
                                      "lp_bound_g": 0.0, "milp_obj_g": 0.0, "mip_gap_max": 0.0, "failed_solves": 0}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_highs", None)  # a HiGHS instance does not pickle; every solve passes its whole model
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._highs = new_highs(self.time_limit_s)

    def decide(self, ctx: DecisionContext) -> NDArray[np.int64]:
        if ctx.output_tokens is None or ctx.estimator is None:
            raise ConfigError("the hindsight oracle needs true output lengths: run it on oracle_config(scenario) "
                              "(osl_mode = 'oracle')")
        c0 = time.thread_time()
        n = ctx.n_requests
        est = ctx.estimates
        estimator = ctx.estimator
        cap = np.floor(self.cap_scale * estimator.headroom_requests(
            drained_snapshot(ctx.snapshot, estimator, ctx.time_s)))
        wake, awake, share = wake_costs(ctx, estimator)
        feasible = est.feasible
        assign = np.full(n, -1, dtype=np.int64)
        res = None
        for t in range(self.passes):
            res = solve_facility(est.carbon_g - share, feasible, cap, wake, awake, time_limit_s=self.time_limit_s,
                                 mip_rel_gap=self.mip_rel_gap, highs=self._highs)
            if not res.ok or np.array_equal(res.assign, assign):
                break
            assign = res.assign.copy()
            if t + 1 < self.passes:
                # The interval's own placements fill d's slots and queue: re-check feasibility with them
                # projected onto the snapshot (the iterative ILP's projection), as the iterative ILP does.
                proj = (project_with_prefill(ctx.snapshot, estimator, assign, ctx.input_tokens, ORACLE_POLL_S)
                        if self.stall else project_assignment(ctx.snapshot, estimator, assign, ctx.input_tokens))
                feasible = feasible & estimator.estimate(proj, ctx.input_tokens, ctx.osl_estimate,
                                                         ctx.scheduler).feasible
        st = self.stats
        if res is not None and res.ok:
            gap = float(res.mip_gap) if np.isfinite(res.mip_gap) else 0.0
            st["milp_obj_g"] += float(res.objective)
            st["lp_bound_g"] += float(res.objective) * (1.0 - gap)
            st["mip_gap_max"] = max(st["mip_gap_max"], gap)
        else:
            st["failed_solves"] += 1
        left = np.flatnonzero(assign < 0)
        if left.size:
            # Beyond the caps: lowest estimated carbon among the feasible DCs, else the least-late DC.
            feas = feasible[left]
            lat = est.ttft_s[left] + ctx.osl_estimate[left, None] * est.tpot_s[left]
            by_carbon = np.argmin(np.where(feas, est.carbon_g[left], np.inf), axis=1)
            assign[left] = np.where(feas.any(axis=1), by_carbon, np.argmin(lat, axis=1))
            st["overflow_requests"] += int(left.size)
        st["windows"] += 1
        st["requests"] += n
        st["solve_cpu_s"] += time.thread_time() - c0
        return assign

    def scenario(self, config: GeoConfig) -> GeoConfig:
        """The scenario as this policy plays it: :func:`oracle_config` (what it knows)."""
        return oracle_config(config)


#: The oracle's candidate plans, in tie-break order: the hindsight MILP at two headroom scales, with one
#: solve per interval or three (feasibility re-checked on the projected placements), and its cautious
#: ``stall`` variant for high loads (played
#: on :func:`oracle_config`), then shipped schedulers that use less information than the oracle has
#: (played on the scenario as is): a plan that needs less than the oracle knows is one it can play.
ORACLE_CANDIDATES: tuple[str, ...] = ("hindsight-milp:1:1", "hindsight-milp:3:1", "hindsight-milp:3:3",
                                      "hindsight-milp:1:3:stall", "moer", "ilp", "iter-ilp", "milp", "green-llm")


def poll_grid_s(config: GeoConfig) -> float:
    """Time between two provisioner polls of ``config`` (s): Δp (sync) or Δp / #DCs (async)."""
    if config.poll_mode == "sync":
        return float(config.poll_interval_s)
    from servegym.envs.grid import get_topology

    return float(config.poll_interval_s) / len(get_topology(config.topology).sites)


def play_policy(policy: Any, make_simulation: Callable[[GeoConfig, int], GeoSimulation], config: GeoConfig,
                seed: int) -> tuple[GeoSimulation, GeoResults]:
    """One run of ``policy`` on scenario ``config`` (arrival seed ``seed``), through ``make_simulation``
    (an env's run factory: its grid clock and OSL source). The policy plays its own view of the scenario
    (``policy_config``: decision mode, and the oracle's :func:`oracle_config`); a run polled more often than
    the scenario is then kept idle up to the scenario's next poll (``GeoSimulation.idle_until``), so its drain
    is charged as the scenario's poll grid charges it and its return is comparable."""
    from servegym.baselines.geo.registry import policy_config

    cfg = policy_config(config, policy)
    sim = make_simulation(cfg, seed)
    sim.run(policy)
    grid = poll_grid_s(config)
    if poll_grid_s(cfg) < grid:
        sim.idle_until(math.ceil(sim.now_s / grid - 1e-9) * grid)
    return sim, sim.metrics(policy=getattr(policy, "name", "policy"))


@dataclass
class OracleEpisode:
    """One oracle episode: the chosen candidate's run, and what every candidate returned.

    Fields:
        sim, results: the chosen candidate's simulation and results.
        chosen: its spec. returns: spec -> the episode return it reached.
        cpu_s: CPU seconds of all candidate runs (simulation and solves). solver_cpu_s: of which in
            the hindsight MILPs' ``decide`` (estimates, model build, HiGHS).
        lp_gap: for the chosen candidate if it is a hindsight MILP, ``1 - lp_bound / milp_obj`` summed
            over its windows (0: every window solved to its LP relaxation's bound); NaN otherwise.
    """

    sim: GeoSimulation
    results: GeoResults
    chosen: str
    returns: dict[str, float] = field(default_factory=dict)
    cpu_s: float = 0.0
    solver_cpu_s: float = 0.0
    lp_gap: float = math.nan


class HindsightOracle:
    """The registry's ``oracle`` of the geo envs: per episode, the best of :data:`ORACLE_CANDIDATES`
    played on the same scenario, judged by the env's own return after the fact.

    Knows: true output lengths, fresh state (0.5-s snapshots), the arrivals of the next half second (the
    hindsight MILP, module docstring), and, in hindsight, which of its candidate plans played best on
    this episode. Is: a strong feasible policy (every candidate is a real run of the simulator), so its
    return is a lower bound on the episode's optimum, not the optimum; at least as good as each shipped
    candidate scheduler on every episode by construction. Cost: one simulation per candidate.
    """

    name = "oracle"
    decision_mode = "request"
    batchable = False

    def __init__(self, candidates: tuple[str, ...] = ORACLE_CANDIDATES) -> None:
        if not candidates:
            raise ConfigError("the oracle needs at least one candidate; allowed: specs of make_policy")
        self.candidates = tuple(candidates)

    def play(self, make_simulation: Callable[[GeoConfig, int], GeoSimulation], config: GeoConfig, seed: int,
             episode_return: Callable[[GeoSimulation, dict[str, Any]], float]) -> OracleEpisode:
        """Every candidate on scenario ``config``; the one with the highest ``episode_return(sim, summary)``
        (ties: the earlier candidate)."""
        from servegym.baselines.geo.registry import make_policy

        best: OracleEpisode | None = None
        returns: dict[str, float] = {}
        cpu = solver = 0.0
        for spec in self.candidates:
            policy = make_policy(spec)
            c0 = time.process_time()
            sim, res = play_policy(policy, make_simulation, config, seed)
            cpu += time.process_time() - c0
            stats = getattr(policy, "stats", {})
            solver += float(stats.get("solve_cpu_s", 0.0))
            r = float(episode_return(sim, res.summary))
            returns[spec] = r
            if best is None or r > returns[best.chosen]:
                obj = float(stats.get("milp_obj_g", math.nan))
                gap = 1.0 - float(stats["lp_bound_g"]) / obj if isinstance(policy, HindsightMILP) and obj > 0 else math.nan
                best = OracleEpisode(sim, res, spec, lp_gap=gap)
        assert best is not None
        best.returns, best.cpu_s, best.solver_cpu_s = returns, cpu, solver
        return best
