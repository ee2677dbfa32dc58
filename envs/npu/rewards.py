"""Rewards of :class:`~servegym.envs.npu.env.NPUAutoscaleEnv` as functions: the per-epoch flows, the reward and its
bounds, and the baselines (Base, NeuScale, the Ideal oracle) run on the env's own episode (:class:`EpisodeInputs`).
They read the :class:`~servegym.envs.npu.sim.state.NPUState` and write only its reward fields (``base_flows``,
``base_key``) (module docstring of the env: "Reward", "Bounds", "Baselines on the agent's episode")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from servegym.baselines.npu import (
    ideal_metrics,
    make_policy,
    run_policy,
)
from servegym.envs.npu.env_config import NPUEnvConfig
from servegym.envs.npu.scenarios import _LRU
from servegym.envs.npu.sim.cluster import (
    NB,
    ConfigCatalog,
    EpochMetrics,
    NPUCluster,
    Observation,
    ScalingDecision,
)
from servegym.envs.npu.sim.config import ClusterConfig
from servegym.envs.npu.sim.fluid import make_cluster
from servegym.envs.npu.sim.pairwise_sums import gathered_dot
from servegym.envs.npu.sim.state import NPUState
from servegym.envs.npu.sim.workloads import NPUWorkload

BASE_CACHE_MAX = 64
"""Base's per-epoch flows kept per process (a few kB each): the residual mode's reward subtracts Base's flows of
the same episode, so Base runs once per scenario (settings, fidelity, workload, simulator seed, horizon), not at
every reset of it."""
_BASE_RUNS: _LRU = _LRU(BASE_CACHE_MAX)


def workload_fingerprint(w: NPUWorkload) -> tuple:
    """A cheap identity of a workload's requests (name, horizon, count and a few arrivals and lengths)."""
    r = w.requests
    n = len(r)
    probe = [0, n // 3, n // 2, (2 * n) // 3, n - 1] if n else []
    return (w.name, float(w.duration_s), n, w.description,
            tuple((float(r.arrival_s[i]), int(r.input_tokens[i]), int(r.output_tokens[i])) for i in probe))


def phase_sum(a: NDArray[np.float64]) -> float:
    """``float(a.sum())`` of a span's per-phase totals (J, USD or tokens): for a float64 pair, numpy's sum adds the
    two from -0.0 and the result to the reduction's identity 0.0, i.e. 0.0 + (a[0] + a[1]) (-0.0 + x is x), here on
    Python floats without a numpy call per span; any other array by numpy."""
    if a.shape == (2,) and a.dtype == np.float64:
        x, y = a.tolist()
        return 0.0 + (x + y)
    return float(a.sum())


def cfg_weight_ok(objective_weight: float) -> bool:
    """Whether the objective has a positive weight (else the hindsight plan keeps its default SLO weight)."""
    return objective_weight > 0.0


@dataclass(frozen=True)
class EpisodeInputs:
    """What a baseline needs to replay the env's current episode: the env's config, the simulator's settings and
    configuration catalog, the workload, the simulator seed and the horizon (epochs)."""

    config: NPUEnvConfig
    cluster_config: ClusterConfig
    catalog: ConfigCatalog
    workload: NPUWorkload
    simulation_seed: int
    horizon: int

    def fresh_cluster(self) -> NPUCluster:
        """A new simulator of this episode (its workload and seed, the env's fidelity)."""
        return make_cluster(self.cluster_config, self.workload, seed=self.simulation_seed, catalog=self.catalog,
                            fidelity=self.config.fidelity)


@dataclass(frozen=True)
class RewardScale:
    """An episode's reward normalizers and bound (module docstring of the env, **Reward** and **Bounds**):
    ``requests_in_horizon`` (requests arriving within the horizon), ``scale`` (``objective``: D, J or USD per
    epoch; ``arrivals_per_epoch``: A) and ``bound`` (B, the largest |reward| of a step)."""

    requests_in_horizon: int
    scale: dict[str, float]
    bound: float


def objective_bounds(catalog: ConfigCatalog, cc: ClusterConfig, cfg: NPUEnvConfig) -> tuple[float, float]:
    """Per-epoch objective bounds of any deployment (module docstring of the env, **Bounds**), J or USD: the
    floor (one cheapest vPod per phase at static power or its rental, a whole epoch) and the cap (every one of
    the 2 x 48 simulator groups at ``max_group_vpods`` alive plus as many being deleted, each at its
    configuration's largest power or rental)."""
    cat = catalog
    if cfg.objective == "energy":
        low = cat.cfg_static_w
        pw = np.where(np.isfinite(cat.pow), cat.pow, 0.0).reshape(len(cat.configs), -1)
        high = np.maximum(pw.max(axis=1), cat.cfg_static_w)
    else:
        low = high = cat.cfg_usd_s
    floor = float(sum(low[cat.cfg_phase == p].min() for p in (0, 1))) * cc.epoch_s
    cap = float(sum(high[cat.cfg_phase == p].max() for p in (0, 1))) * (2.0 * NB * cfg.max_group_vpods * cc.epoch_s)
    return floor, cap


def reward_scale(state: NPUState, ep: EpisodeInputs, objective_floor: float, objective_cap: float) -> RewardScale:
    """The episode's reward normalizers and bound; in ``reward_mode`` "base" also Base's per-epoch flows of the
    episode into ``state.base_flows`` (else None)."""
    cfg = ep.config
    H = ep.horizon
    end = H * ep.cluster_config.epoch_s
    n = int(np.searchsorted(ep.workload.requests.arrival_s, end, side="left"))
    if cfg.reward_mode == "base":
        state.base_flows = base_flows(state, ep)
        ref = float(state.base_flows["objective"].mean())
    else:
        state.base_flows = None
        assert state.sim is not None
        ref = oracle_reference(state.sim, ep)
    scale = {"objective": max(ref, objective_floor), "arrivals_per_epoch": max(n, 1) / H}
    up = cfg.objective_weight * objective_cap / objective_floor
    if cfg.reward_mode == "base":
        up = max(up, cfg.objective_weight * H)
    return RewardScale(n, scale, float(up + cfg.slo_penalty * H))


def oracle_reference(sim: NPUCluster, ep: EpisodeInputs) -> float:
    """Mean energy (J) or cost (USD) per epoch of the Ideal oracle on the episode's workload."""
    key = "energy_j_per_token" if ep.config.objective == "energy" else "usd_per_token"
    r = ep.workload.requests
    tot = 0.0
    for ph, bk, tok in (("prefill", sim.bk_p, r.input_tokens), ("decode", sim.bk_d, r.output_tokens)):
        # the oracle's per-token cost: the scoring model's best fits (as ideal_metrics)
        per = np.array([getattr(sim.ideal_fit[(ph, int(s))], key) if (ph, int(s)) in sim.ideal_fit else 0.0
                        for s in ep.catalog.edges])
        tot += gathered_dot(tok, per, bk)  # float((tok * per[bk]).sum()), numpy's order, in one pass
    n_epochs = max(ep.workload.duration_s / ep.cluster_config.epoch_s, 1.0)
    return max(tot / n_epochs, 1e-12)


def raw_flows(sim: NPUCluster, spans: list[EpochMetrics], arrived: int, late_prev: int) -> tuple[dict[str, Any], int]:
    """Info flows of one epoch of ``sim`` made of the advance spans ``spans`` (one per decision point,
    or one for the whole epoch); returns (flows, the count of open requests already past their SLO)."""
    late = sim.late_count()
    slo_total = sum(float(m.slo_total) for m in spans)
    slo_met = sum(float(m.slo_met[2]) for m in spans)
    # a late open request that finishes moves from `late` to the finished misses; the age test of
    # `late` is conservative, so the difference can dip below 0 by a request or two: clip
    misses = max(slo_total - slo_met + (late - late_prev), 0.0)
    energy = sum(phase_sum(m.energy_j) for m in spans)
    usd = sum(phase_sum(m.usd) for m in spans)
    tokens = sum(phase_sum(m.tokens) for m in spans)
    duration_s = sum(float(m.t1_s - m.t0_s) for m in spans)
    flows = {"energy_j": energy, "cost_usd": usd, "tokens": tokens,
             "slo_violation_pct": 100.0 * (1.0 - slo_met / slo_total) if slo_total else 0.0,
             "slo_misses": float(misses), "power_w": energy / duration_s if duration_s > 0 else 0.0,
             "arrived": arrived, "finished": sum(int(m.finished) for m in spans),
             "tokens_per_j": tokens / energy if energy > 0 else 0.0,
             "tokens_per_usd": tokens / usd if usd > 0 else 0.0}
    return flows, late


def reward(cfg: NPUEnvConfig, scale: dict[str, float], base: dict[str, NDArray[np.float64]] | None,
           flows: dict[str, Any], epoch: int | None) -> float:
    """The reward of epoch ``epoch`` (None: flows that total the whole episode) from its flows, with the
    episode's ``scale`` (:class:`RewardScale`) and Base's flows ``base`` (reward_mode "base"; else None); adds
    ``reward_objective``, ``reward_slo`` and, relative to Base, ``base_energy_j``, ``base_cost_usd``,
    ``base_slo_misses`` (Base's flows of the same epoch or episode) to ``flows``."""
    obj = flows["energy_j"] if cfg.objective == "energy" else flows["cost_usd"]
    misses = flows["slo_misses"]
    if base is not None:
        b = {k: float(v.sum() if epoch is None else v[epoch]) for k, v in base.items()}
        obj -= b["objective"]
        misses -= b["slo_misses"]
        flows.update(base_energy_j=b["energy_j"], base_cost_usd=b["cost_usd"], base_slo_misses=b["slo_misses"])
    r_obj = cfg.objective_weight * obj / scale["objective"]
    r_slo = cfg.slo_penalty * misses / scale["arrivals_per_epoch"]
    flows.update(reward_objective=-r_obj, reward_slo=-r_slo)
    return -(r_obj + r_slo)


def base_flows(state: NPUState, ep: EpisodeInputs) -> dict[str, NDArray[np.float64]]:
    """Base's per-epoch flows on this episode (same workload and simulator seed), computed once per scenario
    and cached per process (:data:`BASE_CACHE_MAX`); the state keeps the last episode's (``base_key``)."""
    key = (id(ep.workload), ep.simulation_seed, ep.horizon)
    if state.base_key == key and state.base_flows is not None:
        return state.base_flows

    def run() -> dict[str, NDArray[np.float64]]:
        _, infos = policy_epochs(ep, "base")
        out = {k: np.array([f[k] for f in infos], dtype=np.float64)
               for k in ("energy_j", "cost_usd", "slo_misses", "arrived")}
        for v in out.values():
            v.setflags(write=False)
        return out

    scenario = (ConfigCatalog.key_of(ep.cluster_config), ep.config.fidelity,
                workload_fingerprint(ep.workload), ep.simulation_seed, ep.horizon)
    out = dict(_BASE_RUNS.get_or_make(scenario, run))
    out["objective"] = out["energy_j"] if ep.config.objective == "energy" else out["cost_usd"]
    state.base_key = key
    return out


def policy_epochs(ep: EpisodeInputs, policy: str) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Run Base or NeuScale (their own 60-s loop and warm start, run_policy) on a fresh simulator with
    the episode's workload and seed; (summary, per-epoch raw flows with state keys)."""
    sim = ep.fresh_cluster()
    cc = ep.cluster_config
    per = round(cc.epoch_s / cc.check_s)
    infos: list[dict[str, Any]] = []
    state = {"n0": 0, "late": 0, "emergency": 0}
    pol = make_policy(policy)
    if policy == "hindsight" and cfg_weight_ok(ep.config.objective_weight):
        # it picks its candidate plan by this env's weights (SLO misses per unit of objective)
        pol.slo_penalty = ep.config.slo_penalty / ep.config.objective_weight  # type: ignore[union-attr]
    decide = pol.decide

    def counted(ctx: Observation) -> ScalingDecision:  # count the emergency layer's scale-outs, as step does
        dec = decide(ctx)
        if not ctx.at_epoch_boundary:
            state["emergency"] += len(dec.targets)
        return dec

    pol.decide = counted  # type: ignore[method-assign]

    def account(e: int) -> None:
        flows, state["late"] = raw_flows(sim, sim.history[-per:], int(sim.next_req - state["n0"]), state["late"])
        state["n0"] = sim.next_req
        flows.update(time_s=float(sim.now), epoch=e + 1, vpods=int(np.count_nonzero(sim.v_gone == np.inf)),
                     chips=float(sum(sim.held_chips().values())), emergency_scaleouts=state["emergency"])
        state["emergency"] = 0
        infos.append(flows)

    hours = ep.horizon * cc.epoch_s / 3600.0
    summary = run_policy(sim, pol, hours=hours, progress=account)
    return summary, infos


def baseline_episode(ep: EpisodeInputs, policy: str, seed: int | None, scale: dict[str, float],
                     base: dict[str, NDArray[np.float64]] | None) -> dict[str, Any]:
    """``policy`` (one of ``BASELINES``) on the episode ``ep`` that ``reset(seed=seed)`` just produced, its
    rewards by the episode's ``scale`` and Base's flows ``base``: the body of ``NPUAutoscaleEnv.run_baseline``
    (its docstring says what it returns)."""
    out: dict[str, Any] = {"policy": policy, "seed": seed, "simulation_seed": ep.simulation_seed,
                           "length": ep.horizon}
    if policy == "ideal":
        sim = ep.fresh_cluster()
        hours = ep.horizon * ep.cluster_config.epoch_s / 3600.0
        s = ideal_metrics(sim, hours=hours)
        n = s["requests_finished"]
        info: dict[str, Any] = {
            "energy_j": s["energy_j"], "cost_usd": s["usd"], "tokens": s["tokens"], "slo_violation_pct": 0.0,
            "slo_misses": 0.0, "arrived": int(n), "finished": int(n),
            "power_w": s["energy_j"] / (hours * 3600.0) if hours > 0 else 0.0,
            "tokens_per_j": s["energy_efficiency"], "tokens_per_usd": s["cost_efficiency"],
            "time_s": hours * 3600.0, "epoch": ep.horizon}
        # one info for the whole episode: relative to Base, against Base's episode totals
        out["reward"] = reward(ep.config, scale, base, info, None)
        out["infos"], out["summary"] = [info], s
        return out
    summary, infos = policy_epochs(ep, policy)
    total = 0.0
    for e, info in enumerate(infos):
        total += reward(ep.config, scale, base, info, e)
    out["summary"], out["infos"], out["reward"] = summary, infos, total
    return out
