"""Rewards of :class:`~servegym.envs.npu.env.NPUAutoscaleEnv`: the per-epoch flows, the reward and its bounds, and the
baselines (Base, NeuScale, the Ideal oracle) run on the env's own episode. A mixin of the env (module docstring
there: "Reward", "Bounds", "Baselines on the agent's episode")."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray
from servegym.baselines.npu import (
    ideal_metrics,
    make_policy,
    run_policy,
)
from servegym.envs.npu.env_config import (
    BASELINES,
)
from servegym.envs.npu.scenarios import _LRU
from servegym.envs.npu.sim.cluster import (
    NB,
    ConfigCatalog,
    EpochMetrics,
    NPUCluster,
    Observation,
    ScalingDecision,
)
from servegym.envs.npu.sim.fluid import make_cluster
from servegym.envs.npu.sim.pairwise_sums import gathered_dot
from servegym.envs.npu.sim.workloads import NPUWorkload

from servegym.errors import (
    ActionError,
    choice_error,
)

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


class RewardsMixin:
    """Reward and baseline methods of :class:`~servegym.envs.npu.env.NPUAutoscaleEnv`."""

    def per_step_reward_bound(self) -> float:
        """B such that -B <= reward <= B on every step of the current episode (module docstring, **Bounds**);
        the same accessor as the geo and pd envs'. Needs ``reset()``: B depends on the drawn scenario."""
        bound = getattr(self, "reward_bound", None)
        if bound is None:
            raise ActionError("per_step_reward_bound() needs an episode: call reset() first")
        return float(bound)

    def _bounds_static(self) -> None:
        """Per-epoch objective bounds of any deployment (see the module docstring, **Bounds**): the
        floor (one cheapest vPod per phase at static power or its rental, a whole epoch) and the cap
        (every one of the 2 x 48 simulator groups at ``max_group_vpods`` alive plus as many being
        deleted, each at its configuration's largest power or rental)."""
        cat, cc = self.catalog, self.cluster_config
        if self.config.objective == "energy":
            low = cat.cfg_static_w
            pw = np.where(np.isfinite(cat.pow), cat.pow, 0.0).reshape(len(cat.configs), -1)
            high = np.maximum(pw.max(axis=1), cat.cfg_static_w)
        else:
            low = high = cat.cfg_usd_s
        self.objective_floor = float(sum(low[cat.cfg_phase == p].min() for p in (0, 1))) * cc.epoch_s
        self.objective_cap = float(sum(high[cat.cfg_phase == p].max() for p in (0, 1))) * (
            2.0 * NB * self.config.max_group_vpods * cc.epoch_s)

    def _set_reward_scale(self) -> None:
        """The episode's reward normalizers and bound (see the module docstring, **Reward** and **Bounds**)."""
        cfg = self.config
        H = self.horizon
        end = H * self.cluster_config.epoch_s
        n = int(np.searchsorted(self.workload.requests.arrival_s, end, side="left"))
        self.requests_in_horizon = n
        if cfg.reward_mode == "base":
            self._base_flows = self._base_run()
            ref = float(self._base_flows["objective"].mean())
        else:
            self._base_flows = None
            ref = self._oracle_reference()
        self.reward_scale = {"objective": max(ref, self.objective_floor), "arrivals_per_epoch": max(n, 1) / H}
        up = cfg.objective_weight * self.objective_cap / self.objective_floor
        if cfg.reward_mode == "base":
            up = max(up, cfg.objective_weight * H)
        self.reward_bound = float(up + cfg.slo_penalty * H)

    def _oracle_reference(self) -> float:
        """Mean energy (J) or cost (USD) per epoch of the Ideal oracle on the scenario's workload."""
        sim = self.sim
        assert sim is not None
        key = "energy_j_per_token" if self.config.objective == "energy" else "usd_per_token"
        r = self.workload.requests
        tot = 0.0
        for ph, bk, tok in (("prefill", sim.bk_p, r.input_tokens), ("decode", sim.bk_d, r.output_tokens)):
            # the oracle's per-token cost: the scoring model's best fits (as ideal_metrics)
            per = np.array([getattr(sim.ideal_fit[(ph, int(s))], key) if (ph, int(s)) in sim.ideal_fit else 0.0
                            for s in self.edges])
            tot += gathered_dot(tok, per, bk)  # float((tok * per[bk]).sum()), numpy's order, in one pass
        n_epochs = max(self.workload.duration_s / self.cluster_config.epoch_s, 1.0)
        return max(tot / n_epochs, 1e-12)

    def _late_count(self, sim: NPUCluster | None = None) -> int:
        """Open requests already past their SLO (:meth:`NPUCluster.late_count`)."""
        sim = self.sim if sim is None else sim
        assert sim is not None
        return sim.late_count()

    def _raw_flows(self, sim: NPUCluster, spans: list[EpochMetrics], arrived: int, late_prev: int
                   ) -> tuple[dict[str, Any], int]:
        """Info flows of one epoch of ``sim`` made of the advance spans ``spans`` (one per decision point,
        or one for the whole epoch); returns (flows, late count)."""
        late = self._late_count(sim)
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

    def _reward(self, flows: dict[str, Any], epoch: int | None) -> float:
        """The reward of epoch ``epoch`` (None: flows that total the whole episode) from its flows; adds
        ``reward_objective``, ``reward_slo`` and, relative to Base, ``base_energy_j``, ``base_cost_usd``,
        ``base_slo_misses`` (Base's flows of the same epoch or episode) to ``flows``."""
        cfg = self.config
        obj = flows["energy_j"] if cfg.objective == "energy" else flows["cost_usd"]
        misses = flows["slo_misses"]
        bf = self._base_flows
        if bf is not None:
            b = {k: float(v.sum() if epoch is None else v[epoch]) for k, v in bf.items()}
            obj -= b["objective"]
            misses -= b["slo_misses"]
            flows.update(base_energy_j=b["energy_j"], base_cost_usd=b["cost_usd"], base_slo_misses=b["slo_misses"])
        r_obj = cfg.objective_weight * obj / self.reward_scale["objective"]
        r_slo = cfg.slo_penalty * misses / self.reward_scale["arrivals_per_epoch"]
        flows.update(reward_objective=-r_obj, reward_slo=-r_slo)
        return -(r_obj + r_slo)

    def _base_run(self) -> dict[str, NDArray[np.float64]]:
        """Base's per-epoch flows on this episode (same workload and simulator seed), computed once per scenario
        and cached per process (:data:`BASE_CACHE_MAX`)."""
        key = (id(self.workload), self.simulation_seed, self.horizon)
        if self._base_key == key and self._base_flows is not None:
            return self._base_flows

        def run() -> dict[str, NDArray[np.float64]]:
            _, infos = self._policy_epochs("base")
            out = {k: np.array([f[k] for f in infos], dtype=np.float64)
                   for k in ("energy_j", "cost_usd", "slo_misses", "arrived")}
            for v in out.values():
                v.setflags(write=False)
            return out

        scenario = (ConfigCatalog.key_of(self.cluster_config), self.config.fidelity,
                    workload_fingerprint(self.workload), self.simulation_seed, self.horizon)
        out = dict(_BASE_RUNS.get_or_make(scenario, run))
        out["objective"] = out["energy_j"] if self.config.objective == "energy" else out["cost_usd"]
        self._base_key = key
        return out

    def _policy_epochs(self, policy: str) -> tuple[dict[str, float], list[dict[str, Any]]]:
        """Run Base or NeuScale (their own 60-s loop and warm start, run_policy) on a fresh simulator with
        this episode's workload and seed; (summary, per-epoch raw flows with state keys)."""
        assert self.simulation_seed is not None
        sim = make_cluster(self.cluster_config, self.workload, seed=self.simulation_seed,
                               catalog=self.catalog, fidelity=self.config.fidelity)
        cc = self.cluster_config
        per = round(cc.epoch_s / cc.check_s)
        infos: list[dict[str, Any]] = []
        state = {"n0": 0, "late": 0, "emergency": 0}
        pol = make_policy(policy)
        if policy == "hindsight" and cfg_weight_ok(self.config.objective_weight):
            # it picks its candidate plan by this env's weights (SLO misses per unit of objective)
            pol.slo_penalty = self.config.slo_penalty / self.config.objective_weight  # type: ignore[union-attr]
        decide = pol.decide

        def counted(ctx: Observation) -> ScalingDecision:  # count the emergency layer's scale-outs, as step does
            dec = decide(ctx)
            if not ctx.at_epoch_boundary:
                state["emergency"] += len(dec.targets)
            return dec

        pol.decide = counted  # type: ignore[method-assign]

        def account(e: int) -> None:
            flows, state["late"] = self._raw_flows(sim, sim.history[-per:], int(sim.next_req - state["n0"]),
                                                   state["late"])
            state["n0"] = sim.next_req
            flows.update(time_s=float(sim.now), epoch=e + 1, vpods=int(np.count_nonzero(sim.v_gone == np.inf)),
                         chips=float(sum(sim.held_chips().values())), emergency_scaleouts=state["emergency"])
            state["emergency"] = 0
            infos.append(flows)

        hours = self.horizon * cc.epoch_s / 3600.0
        summary = run_policy(sim, pol, hours=hours, progress=account)
        return summary, infos

    # ------------------------------------------------------------------------------------------ baselines
    def run_baseline(self, policy: str, seed: int | None = None) -> dict[str, Any]:
        """Run a :mod:`servegym.baselines.npu` policy on exactly the episode ``reset(seed=seed)`` produces.

        ``policy``: one of ``BASELINES`` (``base``, ``neuscale``: their own decision loop every
        ``check_s`` = 60 s with their own warm start, :func:`~servegym.baselines.npu.run_policy`;
        ``ideal``: the §5.1 oracle, :func:`~servegym.baselines.npu.ideal_metrics`, which uses true
        lengths; ``hindsight``: the hindsight provisioning plan, :mod:`servegym.baselines.npu_hindsight`, which knows
        the episode's future demand and drives the same decision loop). The env is reset with ``seed`` (so the workload and :attr:`simulation_seed` are the
        agent's) and the policy drives a fresh :class:`NPUCluster` with that seed and workload for the
        env's horizon; the env's own simulator is left at the start of that episode.

        Returns ``{"policy", "seed", "simulation_seed", "reward", "length", "infos", "summary"}``: one
        info per epoch with the same flow keys and formulas as :meth:`step`'s (``energy_j``,
        ``cost_usd``, ``tokens``, ``slo_violation_pct``, ``slo_misses``, ``power_w``, ``arrived``, ``finished``, ...,
        plus the state keys ``time_s``, ``epoch``, ``vpods``, ``chips``), ``reward`` their summed
        reward, and ``summary`` the simulator's :meth:`NPUCluster.summary`. The oracle has no vPods
        and no per-epoch schedule: one info with the episode's totals (no ``chips``), no misses, and
        ``length`` the horizon.
        """
        if policy not in BASELINES:
            raise choice_error("policy", policy, BASELINES)
        self.reset(seed=seed)
        assert self.simulation_seed is not None
        out: dict[str, Any] = {"policy": policy, "seed": seed, "simulation_seed": self.simulation_seed,
                               "length": self.horizon}
        if policy == "ideal":
            sim = make_cluster(self.cluster_config, self.workload, seed=self.simulation_seed,
                               catalog=self.catalog, fidelity=self.config.fidelity)
            hours = self.horizon * self.cluster_config.epoch_s / 3600.0
            s = ideal_metrics(sim, hours=hours)
            n = s["requests_finished"]
            info: dict[str, Any] = {
                "energy_j": s["energy_j"], "cost_usd": s["usd"], "tokens": s["tokens"], "slo_violation_pct": 0.0,
                "slo_misses": 0.0, "arrived": int(n), "finished": int(n),
                "power_w": s["energy_j"] / (hours * 3600.0) if hours > 0 else 0.0,
                "tokens_per_j": s["energy_efficiency"], "tokens_per_usd": s["cost_efficiency"],
                "time_s": hours * 3600.0, "epoch": self.horizon}
            # one info for the whole episode: relative to Base, against Base's episode totals
            out["reward"] = self._reward(info, None)
            out["infos"], out["summary"] = [info], s
            return out
        summary, infos = self._policy_epochs(policy)
        total = 0.0
        for e, info in enumerate(infos):
            total += self._reward(info, e)
        out["summary"], out["infos"], out["reward"] = summary, infos, total
        return out
