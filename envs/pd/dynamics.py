"""The pd env's period dynamics (config ``mode``) as two small classes chosen from the config, so the env and
the vector env never branch on the mode: :class:`FluidDynamics` (the analytical period of
:mod:`servegym.envs.pd.sim.fluid`, one env or a batch) and :class:`RequestDynamics` (a period of
:class:`~servegym.envs.pd.sim.simulator.PDSimulator` driven by the env's targets, below)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from servegym.envs.pd.sim.fluid import fluid_periods

from servegym.errors import ConfigError

if TYPE_CHECKING:
    from servegym.envs.pd.env import PDProvisionEnv


class FluidDynamics:
    """``mode="fluid"``: each period from the analytical model (the env's module docstring, "Fluid dynamics")."""

    def start(self, env: PDProvisionEnv) -> None:
        """A new episode at the reset deployment (the fluid state is the env's own)."""

    def begin(self, env: PDProvisionEnv, n_p: int, n_d: int, k: int) -> None:
        """Apply the target (n_P, n_D) at the start of period ``k`` (start-ups, cancellations, removals)."""
        env._apply_target(n_p, n_d, float(env.signals.time_s[k]))

    def run(self, envs: Sequence[PDProvisionEnv], arrived: Sequence[float]) -> list[dict[str, Any]]:
        """The period metrics of every env in ``envs`` (one batch; ``arrived``: each one's arrivals)."""
        return fluid_periods(envs, arrived)

    def check_hindsight(self) -> None:
        """Arrivals never depend on the actions here, so a hindsight oracle may read them in advance."""


class RequestDynamics:
    """``mode="request"``: each period on the request-level simulator (the env's module docstring)."""

    def start(self, env: PDProvisionEnv) -> None:
        env._start_simulator()

    def begin(self, env: PDProvisionEnv, n_p: int, n_d: int, k: int) -> None:
        env._target = [n_p, n_d]  # the simulator handles start-up delays and removals itself

    def run(self, envs: Sequence[PDProvisionEnv], arrived: Sequence[float]) -> list[dict[str, Any]]:
        return [e._request_period(a) for e, a in zip(envs, arrived, strict=True)]

    def check_hindsight(self) -> None:
        raise ConfigError("hindsight_arrivals: mode = 'request' draws request lengths from the same "
                          "generator, so arrivals depend on the actions; allowed: mode = 'fluid'")


#: config ``mode`` -> its dynamics
DYNAMICS: dict[str, type[FluidDynamics] | type[RequestDynamics]] = {"fluid": FluidDynamics,
                                                                    "request": RequestDynamics}


def start_simulator(env: PDProvisionEnv) -> None:
    """A fresh :class:`~servegym.envs.pd.sim.simulator.PDSimulator` at the reset deployment.

    Its power normalizers (mu_P, mu_D^max) come from the model of the day's mean length mix. Request
    lengths are drawn per request from the period's mix (component by share, then that component's
    App. B.4 sampler, :func:`~servegym.envs.pd.sim.simulator.pd_length_sampler`).
    """
    from servegym.envs.pd.sim.model import PDModel
    from servegym.envs.pd.sim.scenario import MIX_COMPONENTS, mixture_moments
    from servegym.envs.pd.sim.simulator import PDSimulator, pd_length_sampler

    cfg = env.config
    mean_mix = np.mean(env.tables.weights[env.signals.mix_index], axis=0)
    model = PDModel(mixture_moments(mean_mix), cfg.system)
    seed = int(env.np_random.integers(2**31 - 1))
    env._sim = PDSimulator(model, env._active[0], env._active[1], seed=seed,
                            startup_delay_s=cfg.startup_delay_s)
    env._samplers = [pd_length_sampler(c) for c in MIX_COMPONENTS]
    env._sim_max_len = int(model.c_tok - model.system.serving.reserve_tokens)

def request_step(env: PDProvisionEnv, k: int, t0: float, period: float, arrived: float) -> dict[str, Any]:
    """One period of the request-level simulator (``mode="request"``).

    Arrivals: the period's count at uniform times; lengths from the period's mix (requests that could
    not fit a decode pool alone, l_in + l_out > C_tok - R, are redrawn). The violation share (``slo_violation_pct`` / 100) combines the
    share of first tokens in the period with TTFT above target (a) and of requests finished in the period
    with TPOT above target (b) as 1 - (1 - a)(1 - b); ``backlog`` is the simulator's requests arrived and
    not yet prefilled; ``served`` counts completions.
    """
    cfg = env.config
    sim = env._sim
    rng = env.np_random
    n = round(arrived)
    sim.set_deployment(*env._target)
    if n:
        from servegym.envs.workload import Requests

        t = np.sort(t0 + rng.random(n) * period)
        comp = rng.choice(len(env._samplers), size=n, p=env.tables.weights[int(env.signals.mix_index[k])])
        lin = np.empty(n, dtype=np.int64)
        lout = np.empty(n, dtype=np.int64)
        for c, sampler in enumerate(env._samplers):
            idx = np.flatnonzero(comp == c)
            while idx.size:
                i, o = sampler.sample(idx.size, rng)
                lin[idx], lout[idx] = i, o
                idx = idx[(lin[idx] + lout[idx]) > env._sim_max_len]
        sim.submit(Requests(t, lin, lout))
    sim.advance(t0 + period)
    w = sim.window_metrics()
    dep = sim.deployment()
    env._active = [dep["n_p"], dep["n_d"]]
    env._pending = [[t0 + period + cfg.startup_delay_s] * dep["n_p_starting"],
                     [t0 + period + cfg.startup_delay_s] * dep["n_d_starting"]]
    ttft, tpot = w["ttft_s"], w["tpot_s"]
    a = float(np.mean(ttft > cfg.ttft_slo_s)) if ttft.size else 0.0
    b = float(np.mean(tpot > cfg.tpot_slo_s)) if tpot.size else 0.0
    energy = w["energy_j"] * cfg.pue
    cap_w = float(env.signals.cap_w[k])
    env._backlog = float(w["queue_len"])
    env._arrived += n
    env._served += w["finished"]
    mix = int(env.signals.mix_index[k])
    n_p, n_d = max(env._active[0], 1), max(env._active[1], 1)
    mu = env._mu_list[mix][n_p][n_d]
    return {
        "power_w": energy / period, "it_power_w": w["mean_power_w"], "energy_j": energy,
        # the simulator reports the period's mean power only, so the excess is measured on that mean
        "cap_excess_kwh": max(0.0, energy / period - cap_w) * period / 3.6e6,
        "served": float(w["finished"]), "slo_violation": 1.0 - (1.0 - a) * (1.0 - b),
        "ttft_s": float(np.mean(ttft)) if ttft.size else 0.0,
        "tpot_s": float(np.mean(tpot)) if tpot.size else 0.0,
        "prefill_util": min(w["finished"] / period / (n_p * float(env.tables.mu_p[mix])), 10.0),
        "decode_util": min(w["finished"] / period / (n_d * float(env.tables.mu_d_max[mix])), 10.0),
        "demand_util": min((n / period + env._backlog / period) / max(mu, 1e-9), 10.0),
    }
