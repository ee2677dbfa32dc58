"""The family adapter table: each family's env ids, domain scalars and baseline runners.

A baseline runner plays one seeded episode of the *same env* the agent plays, choosing each
action with the family's baseline policy, so agent and baseline results come from one loop.
Runners import their family's modules lazily (inside the runner), so this table is cheap.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from servegym.agents.families import EpisodeAccumulator, EpisodeResult, Family, MetricSpec, register_family
from servegym.agents.rollout import play_episode

from servegym.errors import ConfigError

# ---------------------------------------------------------------------------------------------- geo
# The geo envs put the simulator's run summary in info["episode_metrics"] at the end of a complete
# run (the same dict GeoSimulation.run returns for a baseline); agg "last" reads it there.
GEO_METRICS = (
    MetricSpec("carbon_g", ("carbon_g",), label="carbon over the serving window (gCO2)"),
    MetricSpec("slo_violation_pct", ("slo_violation_pct",), label="SLO violation (%)"),
    # the requests the violation share counts (finished + unfinished): the verdict's SLO resolution
    MetricSpec("slo_requests", ("arrived",), lower_is_better=False, label="requests the SLO share counts"),
    MetricSpec("ttft_p50_s", ("ttft_p50_s",), label="p50 TTFT (s)"),
    MetricSpec("ttft_p99_s", ("ttft_p99_s",), label="p99 TTFT (s)"),
    MetricSpec("tpot_p99_s", ("tpot_p99_s",), label="p99 TPOT (s)"),
    MetricSpec("energy_kwh", ("energy_kwh",), label="facility energy (kWh)"),
    MetricSpec("power_w", ("power_w",), label="mean facility power (W)"),
)
#: The paper's Fig. 4a set (servegym.baselines.geo.PAPER_POLICIES), then the hindsight oracle
#: (servegym.baselines.geo.oracle: the per-episode best of its candidate plans; one run per candidate).
GEO_BASELINES = ("rr", "ll", "greedy:0", "greedy:0.5", "greedy:0.9", "ilp", "iter-ilp", "milp", "green-llm",
                 "moer", "oracle")
#: The geo causal references of the stress tracks (servegym.baselines.geo.causal): a rule fed a dead-reckoned
#: snapshot (``+dr[:<k>]``) and/or bias-corrected OSL estimates (``+bc``); a ``:<k>`` and a further ``+bc`` are
#: accepted after each (``milp+dr:1.5+bc``). Not baselines of the default runs: they are the tracks' references.
GEO_CAUSAL_REFERENCES = ("iter-ilp+dr", "ilp+dr", "milp+dr", "green-llm+bc", "ilp+bc", "iter-ilp+bc", "milp+bc")


def geo_return(cfg: Any, sim: Any, summary: dict[str, Any]) -> float:
    """The geo envs' episode return of a complete run: -(w_carbon * carbon with drain + w_slo * every miss,
    unfinished requests included) (the return identity of ``servegym.envs.geo.env_common``)."""
    return -(cfg.w_carbon * float(summary["carbon_with_drain_g"])
             + cfg.w_slo * float(sim.n_finished_violations + summary["unfinished"]))


def run_geo_baseline(env: gym.Env, name: str, seed: int) -> EpisodeResult:
    """One geo run with a :mod:`servegym.baselines.geo` policy on the env's scenario and seed.

    ``env.episode_scenario(seed)`` is the scenario ``env.reset(seed=seed)`` draws from the env's split
    (grid hour, arrival seed, shift), so the baseline serves the same request stream under the same grid. It runs the simulator's own
    policy loop rather than stepping the env: the window schedulers (ILP, MILP) decide jointly,
    which neither env's action expresses. ``reward`` is the env's reward formula applied to the
    run (-w_carbon * carbon with drain - w_slo * every miss, unfinished requests included); the metrics are the run summary the
    env reports in ``info["episode_metrics"]``. An env configured with ``max_steps`` stops early
    and is then not comparable with these full runs.
    """
    from servegym.baselines.geo import make_policy
    from servegym.baselines.geo.oracle import play_policy

    base = env.unwrapped
    policy = make_policy(name)
    # what env.reset(seed=seed) runs (its split's draw), through the env's own run factory: same grid
    # clock (CI series, time scale) and OSL source as the agent's
    episode_config, scenario = base.episode_scenario(int(seed))
    if hasattr(policy, "play"):  # the hindsight oracle plays the scenario itself (best of its candidates)
        ep = policy.play(base.make_simulation, episode_config, scenario["sim_seed"],
                         lambda s, summary: geo_return(base.config, s, summary))
        sim, summary = ep.sim, ep.results.summary
    else:
        sim, res = play_policy(policy, base.make_simulation, episode_config, scenario["sim_seed"])
        summary = res.summary
    reward = geo_return(base.config, sim, summary)
    acc = EpisodeAccumulator(GEO_METRICS)
    acc.add({"episode_metrics": summary})
    # Length in the env's own steps: requests for GeoRoute-v0, windows for GeoRouteWindow-v0.
    length = summary["arrived"] if base.decision_mode == "request" else summary["decisions"]
    return EpisodeResult(policy=name, seed=int(seed), reward=reward, length=int(length),
                         metrics=acc.result())

# ----------------------------------------------------------------------------------------------- pd
# PDProvision-v0 reports per-period quantities: energy/carbon/cost add up, power is averaged, the
# violation share is weighted by the period's arrivals.
PD_METRICS = (
    MetricSpec("carbon_g", ("carbon_g",), agg="sum", label="carbon (gCO2)"),
    MetricSpec("energy_kwh", ("energy_kwh",), agg="sum", label="facility energy (kWh)"),
    MetricSpec("cost_usd", ("cost_usd",), agg="sum", label="energy cost (USD)"),
    MetricSpec("slo_violation_pct", ("slo_violation_pct",), agg="wmean", weight_key="arrived",
               label="SLO violation (%)"),
    MetricSpec("slo_requests", ("arrived",), agg="sum", lower_is_better=False,
               label="requests the SLO share counts (arrived)"),
    MetricSpec("ttft_mean_s", ("ttft_s",), agg="wmean", weight_key="arrived", label="mean TTFT (s)"),
    MetricSpec("power_w", ("power_w",), agg="mean", label="mean facility power (W)"),
    MetricSpec("cap_excess_kwh", ("cap_excess_kwh",), agg="sum", label="power-cap excess (kWh)"),
    MetricSpec("termination_penalty", ("termination_penalty",), agg="last",
               label="backlog-limit termination penalty (reward units; 0 = not terminated)"),
)

# ---------------------------------------------------------------------------------------------- npu
# NPUAutoscale-v0 reports per-epoch flows in info (energy, cost, tokens, misses): summed over the
# episode; the epoch's SLO violation (%) is weighted by the requests finished in it, power averaged.
NPU_METRICS = (
    MetricSpec("energy_j", ("energy_j",), agg="sum", label="energy (J)"),
    MetricSpec("cost_usd", ("cost_usd",), agg="sum", label="cost (USD)"),
    MetricSpec("tokens", ("tokens",), agg="sum", lower_is_better=False, label="tokens served"),
    MetricSpec("slo_requests", ("finished",), agg="sum", lower_is_better=False,
               label="requests the SLO share counts (finished)"),
    MetricSpec("slo_violation_pct", ("slo_violation_pct",), agg="wmean", weight_key="finished",
               label="SLO violation (%)"),
    MetricSpec("slo_misses", ("slo_misses",), agg="sum", label="SLO misses (requests)"),
    MetricSpec("power_w", ("power_w",), agg="mean", label="mean pool power (W)"),
    MetricSpec("chips", ("chips",), agg="mean", label="mean chips held"),
    # the env's emergency safety layer (action_mode="residual" or safety_layer=True); absent otherwise
    MetricSpec("emergency_scaleouts", ("emergency_scaleouts",), agg="sum", label="emergency scale-outs"),
)


def _unknown(family: str, name: str, allowed: tuple[str, ...]) -> ConfigError:
    from servegym.errors import near_miss

    return ConfigError(f"baseline = {name!r} unknown for family {family!r}{near_miss(name, allowed)}; "
                       f"allowed: {', '.join(allowed)}")


#: ``min-power+forecast`` takes a utilization target: ``min-power+forecast:0.95`` (``threshold-hpa`` too: its
#: per-pool utilization target, ``threshold-hpa:0.8``; default 0.7); ``oracle`` is the
#: hindsight DP (servegym.baselines.pd_oracle), the pd ids' 100.
PD_BASELINES = ("min-power", "min-power+lookahead", "static-peak", "threshold-hpa", "min-power+forecast", "oracle")


#: The pd causal reference (servegym.baselines.pd.MinPowerPerfectForecast): min-power+forecast given the true
#: arrivals of the next periods; ``min-power+perfect:<rho>`` takes a utilization target like the forecast rule.
#: ``min-power+expected[:<rho>]`` (MinPowerExpectedForecast) is the stress tracks' causal reference: the day's
#: expected rates, none of the episode's per-minute draws.
PD_CAUSAL_REFERENCES = ("min-power+perfect", "min-power+expected")
#: The pd stress tracks' rule fed the day-level estimate (MinPowerEmaForecast, ``min-power+ema[:<rho>]``): it reads
#: the observation's level entries, which only an env with ``rate_ema_periods`` (the tracks) has.
PD_TRACK_BASELINES = ("min-power+ema",)


def _pd_policy(name: str) -> Any:
    from servegym.baselines.pd import (
        MinPowerEmaForecast,
        MinPowerExpectedForecast,
        MinPowerForecast,
        MinPowerPareto,
        MinPowerPerfectForecast,
        StaticPeak,
        ThresholdAutoscaler,
    )
    from servegym.baselines.pd_oracle import HindsightOracle

    head, _, arg = name.partition(":")
    targeted = {"min-power+forecast": MinPowerForecast, "min-power+perfect": MinPowerPerfectForecast,
                "min-power+expected": MinPowerExpectedForecast, "min-power+ema": MinPowerEmaForecast,
                "threshold-hpa": lambda rho_bar: ThresholdAutoscaler(target=rho_bar)}
    if head in targeted and arg:
        try:
            rho = float(arg)
        except ValueError:
            raise ConfigError(f"baseline = {name!r}: the utilization target must be a number in (0, 1]") from None
        return targeted[head](rho_bar=rho)
    makers = {"min-power": lambda: MinPowerPareto(lookahead=0), "min-power+lookahead": lambda: MinPowerPareto(lookahead=1),
              "static-peak": StaticPeak, "threshold-hpa": ThresholdAutoscaler, "min-power+forecast": MinPowerForecast,
              "min-power+perfect": MinPowerPerfectForecast, "min-power+expected": MinPowerExpectedForecast,
              "min-power+ema": MinPowerEmaForecast, "oracle": HindsightOracle}
    if name not in makers:
        raise _unknown("pd", name, (*PD_BASELINES, *PD_CAUSAL_REFERENCES, *PD_TRACK_BASELINES))
    return makers[name]()


def run_pd_baseline(env: gym.Env, name: str, seed: int) -> EpisodeResult:
    """One PDProvision-v0 episode stepped by a :mod:`servegym.baselines.pd` policy (``reset(env, info)``,
    ``act(obs, info)``), through the same env the agent plays."""
    policy = _pd_policy(name)
    base = env.unwrapped
    if getattr(base, "action_mode", "absolute") != "absolute":
        # The baselines decide absolute targets: they play the same config (same model, scenario, seed and
        # reward) through the absolute driver, since a residual or front action cannot express every target.
        env = base.absolute_twin()
    return play_episode(env, lambda obs, info, _env: policy.act(obs, info), seed, name, PD_METRICS,
                        on_reset=lambda e, info: policy.reset(e.unwrapped, info))


register_family(Family(name="geo", env_ids=("servegym/GeoRoute-v0", "servegym/GeoRouteWindow-v0"),
                       metrics=GEO_METRICS, baselines=GEO_BASELINES, run_baseline=run_geo_baseline,
                       causal_references=GEO_CAUSAL_REFERENCES, reference="rr", saving_metric="carbon_g",
                       recommended_algo={"servegym/GeoRoute-v0": "maskable-ppo",
                                         "servegym/GeoRouteWindow-v0": "ppo"}))
PD_IDS = ("servegym/PDProvision-v0", "servegym/PDProvisionResidual-v0", "servegym/PDProvisionFront-v0")
register_family(Family(name="pd", env_ids=PD_IDS, metrics=PD_METRICS,
                       baselines=PD_BASELINES, run_baseline=run_pd_baseline, causal_references=PD_CAUSAL_REFERENCES,
                       track_baselines=PD_TRACK_BASELINES,
                       recommended_algo=dict.fromkeys(PD_IDS, "maskable-ppo")))


#: ``hindsight``: the hindsight provisioning plan (servegym.baselines.npu_hindsight; knows the future demand, plays
#: about 10 candidate plans per episode on copies of its simulator), a feasible bound beside the Ideal oracle.
NPU_BASELINES = ("base", "neuscale", "ideal", "hindsight")


def run_npu_baseline(env: gym.Env, name: str, seed: int) -> EpisodeResult:
    """One NPUAutoscale-v0 episode of a :mod:`servegym.baselines.npu` policy on the agent's episode.

    NeuScale and Base drive the simulator with their own 60-s decision loop (emergency scale-out
    between epochs, which the env's per-epoch action cannot express), so they do not step the env:
    :meth:`NPUAutoscaleEnv.run_baseline` resets it with ``seed`` and runs the policy on a simulator with
    the same workload and simulator seed, reporting per-epoch infos with the step's keys and formulas.
    ``ideal`` is the §5.1 oracle (true lengths): one info with the episode's totals, no ``chips``.
    Every action and reward mode of the env (``action_mode``, ``reward_mode``) is served the same way:
    the reward is the env's formula for that mode (0 for Base when the reward is relative to Base), and
    in residual mode NeuScale's run is what the agent's all-zero action reproduces.
    """
    if name not in NPU_BASELINES:
        raise _unknown("npu", name, NPU_BASELINES)
    out = env.unwrapped.run_baseline(name, int(seed))
    acc = EpisodeAccumulator(NPU_METRICS)
    for info in out["infos"]:
        acc.add(info)
    return EpisodeResult(policy=name, seed=int(seed), reward=float(out["reward"]), length=int(out["length"]),
                         metrics=acc.result())


NPU_IDS = ("servegym/NPUAutoscale-v0", "servegym/NPUAutoscaleResidual-v0")
register_family(Family(name="npu", env_ids=NPU_IDS, metrics=NPU_METRICS,
                       baselines=NPU_BASELINES, run_baseline=run_npu_baseline, reference="base",
                       saving_metric="energy_j", recommended_algo=dict.fromkeys(NPU_IDS, "maskable-ppo")))

__all__ = ["GEO_METRICS", "NPU_BASELINES", "NPU_METRICS", "PD_METRICS", "EpisodeResult", "play_episode"]
