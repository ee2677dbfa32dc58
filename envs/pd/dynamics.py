"""The pd env's period dynamics (config ``mode``) as two small classes chosen from the config, so the env and
the vector env never branch on the mode: :class:`FluidDynamics` (the analytical period of
:mod:`servegym.envs.pd.sim.fluid`, one state or a batch) and :class:`RequestDynamics` (a period of
:class:`~servegym.envs.pd.sim.simulator.PDSimulator` driven by the state's targets, below). Both read and
update the model's state (:class:`~servegym.envs.pd.sim.state.PDState`) under the config's constants and
the env's generator; neither sees the env."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from servegym.envs.pd.sim.fluid import fluid_periods
from servegym.envs.pd.sim.state import PDParams, PDState

from servegym.errors import ConfigError

if TYPE_CHECKING:
    from servegym.envs.pd.env_config import PDEnvConfig


class PeriodDynamics(abc.ABC):
    """One config's period dynamics: a new episode, the target at a period's start, the periods of a batch."""

    def __init__(self, cfg: PDEnvConfig, params: PDParams) -> None:
        self.cfg, self.params = cfg, params

    @abc.abstractmethod
    def start(self, state: PDState, rng: np.random.Generator) -> None:
        """A new episode at the state's (reset) deployment."""

    @abc.abstractmethod
    def begin(self, state: PDState, n_p: int, n_d: int) -> None:
        """Apply the target (n_P, n_D) at the start of the coming period ``state.k``."""

    @abc.abstractmethod
    def run(self, states: Sequence[PDState], arrived: Sequence[float], rngs: Sequence[np.random.Generator]
            ) -> list[dict[str, Any]]:
        """The period metrics of every state in ``states`` (``arrived``, ``rngs``: each one's arrivals and
        generator), each state updated to the period's end."""

    @abc.abstractmethod
    def check_hindsight(self) -> None:
        """ConfigError unless a hindsight oracle may read the arrivals in advance."""


class FluidDynamics(PeriodDynamics):
    """``mode="fluid"``: each period from the analytical model (the env's module docstring, "Fluid dynamics")."""

    def start(self, state: PDState, rng: np.random.Generator) -> None:
        """A new episode at the reset deployment (the fluid model needs nothing beyond the state)."""

    def begin(self, state: PDState, n_p: int, n_d: int) -> None:
        """Apply the target (n_P, n_D) at the start of the coming period (start-ups, cancellations,
        removals)."""
        state.apply_target(n_p, n_d, float(state.signals.time_s[state.k]), self.params.startup_delay_s)

    def run(self, states: Sequence[PDState], arrived: Sequence[float], rngs: Sequence[np.random.Generator]
            ) -> list[dict[str, Any]]:
        """The period metrics of every state in ``states`` (one batch; ``arrived``: each one's arrivals;
        ``rngs``: each one's generator, which the fluid period does not draw from)."""
        return fluid_periods(self.params, states, arrived)

    def check_hindsight(self) -> None:
        """Arrivals never depend on the actions here, so a hindsight oracle may read them in advance."""


class RequestDynamics(PeriodDynamics):
    """``mode="request"``: each period on the request-level simulator (the env's module docstring)."""

    def start(self, state: PDState, rng: np.random.Generator) -> None:
        start_simulator(self.cfg, state, rng)

    def begin(self, state: PDState, n_p: int, n_d: int) -> None:
        state.target = [n_p, n_d]  # the simulator handles start-up delays and removals itself

    def run(self, states: Sequence[PDState], arrived: Sequence[float], rngs: Sequence[np.random.Generator]
            ) -> list[dict[str, Any]]:
        return [request_step(self.cfg, s, r, s.k, float(s.signals.time_s[s.k]), self.params.period_s, a)
                for s, r, a in zip(states, rngs, arrived, strict=True)]

    def check_hindsight(self) -> None:
        raise ConfigError("hindsight_arrivals: mode = 'request' draws request lengths from the same "
                          "generator, so arrivals depend on the actions; allowed: mode = 'fluid'")


#: config ``mode`` -> its dynamics
DYNAMICS: dict[str, type[PeriodDynamics]] = {"fluid": FluidDynamics, "request": RequestDynamics}


def start_simulator(cfg: PDEnvConfig, state: PDState, rng: np.random.Generator) -> None:
    """A fresh :class:`~servegym.envs.pd.sim.simulator.PDSimulator` at the state's deployment (its seed drawn
    from ``rng``), stored in the state.

    Its power normalizers (mu_P, mu_D^max) come from the model of the day's mean length mix. Request
    lengths are drawn per request from the period's mix (component by share, then that component's
    App. B.4 sampler, :func:`~servegym.envs.pd.sim.simulator.pd_length_sampler`).
    """
    from servegym.envs.pd.sim.model import PDModel
    from servegym.envs.pd.sim.scenario import MIX_COMPONENTS, mixture_moments
    from servegym.envs.pd.sim.simulator import PDSimulator, pd_length_sampler

    mean_mix = np.mean(state.tables.weights[state.signals.mix_index], axis=0)
    model = PDModel(mixture_moments(mean_mix), cfg.system)
    seed = int(rng.integers(2**31 - 1))
    state.sim = PDSimulator(model, state.active[0], state.active[1], seed=seed,
                            startup_delay_s=cfg.startup_delay_s)
    state.samplers = [pd_length_sampler(c) for c in MIX_COMPONENTS]
    state.sim_max_len = int(model.c_tok - model.system.serving.reserve_tokens)


def request_step(cfg: PDEnvConfig, state: PDState, rng: np.random.Generator, k: int, t0: float, period: float,
                 arrived: float) -> dict[str, Any]:
    """One period ``k`` (from ``t0`` s, ``period`` s long) of the state's request-level simulator
    (``mode="request"``), its arrivals and lengths drawn from ``rng``.

    Arrivals: the period's count at uniform times; lengths from the period's mix (requests that could
    not fit a decode pool alone, l_in + l_out > C_tok - R, are redrawn). The violation share (``slo_violation_pct`` / 100) combines the
    share of first tokens in the period with TTFT above target (a) and of requests finished in the period
    with TPOT above target (b) as 1 - (1 - a)(1 - b); ``backlog`` is the simulator's requests arrived and
    not yet prefilled; ``served`` counts completions.
    """
    sim = state.sim
    n = round(arrived)
    sim.set_deployment(*state.target)
    if n:
        from servegym.envs.workload import Requests

        t = np.sort(t0 + rng.random(n) * period)
        comp = rng.choice(len(state.samplers), size=n, p=state.tables.weights[int(state.signals.mix_index[k])])
        lin = np.empty(n, dtype=np.int64)
        lout = np.empty(n, dtype=np.int64)
        for c, sampler in enumerate(state.samplers):
            idx = np.flatnonzero(comp == c)
            while idx.size:
                i, o = sampler.sample(idx.size, rng)
                lin[idx], lout[idx] = i, o
                idx = idx[(lin[idx] + lout[idx]) > state.sim_max_len]
        sim.submit(Requests(t, lin, lout))
    sim.advance(t0 + period)
    w = sim.window_metrics()
    dep = sim.deployment()
    state.active = [dep["n_p"], dep["n_d"]]
    state.pending = [[t0 + period + cfg.startup_delay_s] * dep["n_p_starting"],
                     [t0 + period + cfg.startup_delay_s] * dep["n_d_starting"]]
    ttft, tpot = w["ttft_s"], w["tpot_s"]
    a = float(np.mean(ttft > cfg.ttft_slo_s)) if ttft.size else 0.0
    b = float(np.mean(tpot > cfg.tpot_slo_s)) if tpot.size else 0.0
    energy = w["energy_j"] * cfg.pue
    cap_w = float(state.signals.cap_w[k])
    state.backlog = float(w["queue_len"])
    state.arrived += n
    state.served += w["finished"]
    mix = int(state.signals.mix_index[k])
    n_p, n_d = max(state.active[0], 1), max(state.active[1], 1)
    mu = state.mu_list[mix][n_p][n_d]
    return {
        "power_w": energy / period, "it_power_w": w["mean_power_w"], "energy_j": energy,
        # the simulator reports the period's mean power only, so the excess is measured on that mean
        "cap_excess_kwh": max(0.0, energy / period - cap_w) * period / 3.6e6,
        "served": float(w["finished"]), "slo_violation": 1.0 - (1.0 - a) * (1.0 - b),
        "ttft_s": float(np.mean(ttft)) if ttft.size else 0.0,
        "tpot_s": float(np.mean(tpot)) if tpot.size else 0.0,
        "prefill_util": min(w["finished"] / period / (n_p * float(state.tables.mu_p[mix])), 10.0),
        "decode_util": min(w["finished"] / period / (n_d * float(state.tables.mu_d_max[mix])), 10.0),
        "demand_util": min((n / period + state.backlog / period) / max(mu, 1e-9), 10.0),
    }
