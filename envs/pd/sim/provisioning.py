"""The paper's provisioning rule as one object, shared by the baselines and the environment's drivers.

:class:`MinPowerRule` is problem (1) of Yan et al. (arXiv:2609.24639, §2.2): each period, the least-power
deployment whose capacity covers lambda / rho_bar (rho_bar = 0.85) under the coming period's length mix,
ranked by the power drawn at lambda (W). It reads only what the environment reports (observed rate,
scenario forecast, backlog, coming mix, coming power cap), so :class:`servegym.baselines.pd.MinPowerPareto`
and the ``residual`` / ``front`` action modes of :class:`servegym.envs.pd.env.PDProvisionEnv` compute the
same suggestion with the same code. Two documented additions to the paper's steady-state rule: the
backlog is a demand to drain within ``drain_s`` (300 s; ``None`` = the paper's rule), and with
``respect_cap`` a choice whose facility power at lambda exceeds the coming cap is replaced by the
largest-capacity deployment under the cap. If nothing within the budget reaches the target capacity, the
largest-capacity deployment is used.

Per mix it also caches the capacity grid of the budget and its epsilon-Pareto front (capacity vs power at
capacity, :func:`servegym.envs.pd.sim.pareto.eps_front`), which the ``front`` action mode offers.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray
from servegym.envs.pd.sim.model import CapacityGrid
from servegym.envs.pd.sim.pareto import DEFAULT_EPS, DEFAULT_RHO_BAR, Selection, _select, eps_front
from servegym.envs.pd.sim.tables import MixTables

from servegym.errors import ConfigError, check_range


class Suggestion(NamedTuple):
    """The rule's choice for the coming period and what it was computed from (units in names; a NamedTuple
    because the environment builds one every step)."""

    n_p: int
    n_d: int
    demand_rps: float  # lambda the rule sized for (observed or forecast rate + backlog drain), req/s
    capacity_rps: float  # mu of the suggested deployment under the coming mix
    power_w: float  # IT power of the suggested deployment at demand_rps, W
    mix: int


class _MixCache:
    """Grid, front and a (n_P, n_D) -> grid-row index of one mix (budget-limited)."""

    def __init__(self, tables: MixTables, mix: int, budget: int, eps: float) -> None:
        self.grid: CapacityGrid = tables.grid(mix, budget)
        self.model = tables.models[mix]
        self.n_inst = self.grid.n_p + self.grid.n_d
        self.row = np.full(tables.mu.shape[1:], -1, dtype=np.int64)
        self.row[self.grid.n_p, self.grid.n_d] = np.arange(len(self.grid))
        self.front = eps_front(self.grid.mu, self.grid.power_w, eps)  # grid rows, capacity ascending
        # eq. (14) terms of PDModel.power_w, precomputed with the same operations (bit-identical results)
        cal = tables.models[mix].system.calibration
        self._np_f = self.grid.n_p.astype(float)
        self._nd_f = self.grid.n_d.astype(float)
        self._den_p = self._np_f * self.model.mu_p
        self._den_d = self._nd_f * self.model.mu_d_max
        self._rp, self._rd = cal.prefill_ramp, cal.decode_ramp

    def power_at(self, rate_rps: float) -> NDArray[np.float64]:
        """IT power (W) of every grid row at ``rate_rps``: :meth:`PDModel.power_w` without its input checks."""
        served = np.minimum(self.grid.mu, float(rate_rps))
        rp, rd = self._rp, self._rd
        return (self._np_f * np.minimum(rp.p0_w + rp.slope_w * (served / self._den_p), rp.p_sat_w)
                + self._nd_f * np.minimum(rd.p0_w + rd.slope_w * (served / self._den_d), rd.p_sat_w))


_CACHES: dict[tuple[int, int, float], tuple[MixTables, dict[int, _MixCache]]] = {}


def _caches(tables: MixTables, budget: int, eps: float) -> dict[int, _MixCache]:
    """Per-mix caches shared by every rule on the same tables in a process (they are pure functions of
    the tables, so sharing them only saves time); an entry keeps ``tables`` alive so its id stays unique."""
    key = (id(tables), int(budget), float(eps))
    hit = _CACHES.get(key)
    if hit is None or hit[0] is not tables:
        if len(_CACHES) >= 16:
            _CACHES.pop(next(iter(_CACHES)))
        hit = _CACHES[key] = (tables, {})
    return hit[1]


def _least_power(g: CapacityGrid, mask: NDArray[np.bool_], power: NDArray[np.float64],
                 n_inst: NDArray[np.int64]) -> Selection | None:
    """``_select(g, mask, (power, n_inst, -mu), power)`` without the sort when the least power is unique."""
    pw = np.where(mask, power, np.inf)
    i = int(pw.argmin())
    p = pw[i]
    if p == np.inf:
        return None
    if np.count_nonzero(pw == p) > 1:
        return _select(g, mask & (power == p), (power, n_inst, -g.mu), power)
    return Selection(index=i, n_p=int(g.n_p[i]), n_d=int(g.n_d[i]), mu=float(g.mu[i]), power_w=float(p))


def check_rule(rho_bar: float, lookahead: int, drain_s: float | None) -> None:
    """ConfigError naming the field unless the rule's parameters are in range."""
    check_range("rho_bar", rho_bar, 0.0, 1.0, low_inclusive=False)
    if lookahead not in (0, 1):
        raise ConfigError(f"lookahead = {lookahead!r}; allowed: 0 (forecast-free) or 1 (one period ahead)")
    if drain_s is not None:
        check_range("drain_s", drain_s, 0.0, None, low_inclusive=False)


#: The references the environment's ``reference`` config key names: the paper's rule with one period of
#: lookahead (the default), the rule sized for the forecast maximum over the start-up horizon at a
#: utilization target (``"min-power+forecast:0.97"``; :class:`servegym.baselines.pd.MinPowerForecast`), or the
#: rule sized for the level forecast's maximum over that horizon (``"min-power+ema:0.875"``; needs the config's
#: ``rate_ema_periods``; :class:`servegym.baselines.pd.MinPowerEmaForecast`).
REFERENCE_PAPER = "min-power+lookahead"
REFERENCE_FORECAST = "min-power+forecast"
REFERENCE_EMA = "min-power+ema"


def parse_reference(name: str) -> tuple[bool, float]:
    """(sizes for the start-up horizon's forecast maximum, rho_bar) of a ``reference`` name, or a ConfigError
    naming the allowed forms: ``"min-power+lookahead"``, ``"min-power+forecast"`` / ``"min-power+ema"`` (rho_bar
    0.85) or ``"min-power+forecast:RHO"`` / ``"min-power+ema:RHO"`` with RHO in (0, 1]."""
    allowed = (f"allowed: {REFERENCE_PAPER!r}, {REFERENCE_FORECAST!r} or '{REFERENCE_FORECAST}:RHO' "
               f"with RHO in (0, 1], {REFERENCE_EMA!r} or '{REFERENCE_EMA}:RHO' (with rate_ema_periods > 0)")
    if not isinstance(name, str) or len(name) > 64:
        raise ConfigError(f"reference = {str(name)[:64]!r}; {allowed}")
    if name == REFERENCE_PAPER:
        return False, DEFAULT_RHO_BAR
    head, sep, arg = name.partition(":")
    if head not in (REFERENCE_FORECAST, REFERENCE_EMA):
        raise ConfigError(f"reference = {name!r}; {allowed}")
    if not sep:
        return True, DEFAULT_RHO_BAR
    try:
        rho = float(arg)
    except ValueError:
        raise ConfigError(f"reference = {name!r}; {allowed}") from None
    if not 0.0 < rho <= 1.0:  # also refuses nan
        raise ConfigError(f"reference = {name!r}: RHO = {arg}; {allowed}")
    return True, rho


def reference_uses_level(name: str) -> bool:
    """Whether the ``reference`` name (valid by :func:`parse_reference`) sizes for the level forecast."""
    return name.partition(":")[0] == REFERENCE_EMA


class MinPowerRule:
    """Minimum-power deployment for lambda / rho_bar under the coming mix (module docstring).

    ``lookahead=1`` sizes for max(observed rate, the scenario's mean rate of the next period);
    ``lookahead=0`` for the observed rate only.
    """

    def __init__(self, tables: MixTables, gpu_budget: int, pue: float, *, rho_bar: float = DEFAULT_RHO_BAR,
                 lookahead: int = 1, drain_s: float | None = 300.0, respect_cap: bool = True,
                 eps: float = DEFAULT_EPS) -> None:
        check_rule(rho_bar, lookahead, drain_s)
        self.tables, self.gpu_budget, self.pue = tables, int(gpu_budget), float(pue)
        self.rho_bar, self.lookahead, self.drain_s, self.respect_cap = rho_bar, lookahead, drain_s, respect_cap
        check_range("eps", eps, 0.0, 1.0, low_inclusive=False)
        self.eps = eps
        self._cache = _caches(tables, self.gpu_budget, eps)

    def mix_cache(self, mix: int) -> _MixCache:
        c = self._cache.get(mix)
        if c is None:
            c = self._cache[mix] = _MixCache(self.tables, mix, self.gpu_budget, self.eps)
        return c

    def demand(self, rate_rps: float, forecast_rps: float, backlog: float) -> float:
        """The rate the rule sizes for, req/s."""
        rate = float(rate_rps)
        if self.lookahead:
            rate = max(rate, float(forecast_rps))
        if self.drain_s is not None:
            rate += float(backlog) / self.drain_s
        return rate

    def power_at(self, mix: int, rate_rps: float) -> NDArray[np.float64]:
        """IT power (W) of every grid row of ``mix`` at ``rate_rps`` (eq. 14, served rate capped at mu)."""
        check_range("rate_rps", rate_rps, 0.0, None)
        return self.mix_cache(mix).power_at(rate_rps)

    def suggest(self, rate_rps: float, forecast_rps: float, backlog: float, mix: int, cap_w: float
                ) -> tuple[Suggestion, NDArray[np.float64]]:
        """The rule's deployment for the coming period and the IT power of every grid row at its demand."""
        rate = self.demand(rate_rps, forecast_rps, backlog)
        c = self.mix_cache(mix)
        g = c.grid
        power = c.power_at(rate)
        sel = _least_power(g, g.mu >= rate / self.rho_bar, power, c.n_inst)
        if sel is None:  # nothing reaches the target: the largest capacity (ranked by power at capacity)
            sel = _select(g, np.ones(len(g), dtype=bool), (-g.mu, g.power_w, c.n_inst), g.power_w)
        assert sel is not None
        if self.respect_cap:
            budget_it_w = float(cap_w) / self.pue
            if sel.power_w > budget_it_w:
                capped = _select(g, power <= budget_it_w, (-g.mu, power, c.n_inst), power)
                if capped is not None:
                    sel = capped
        i = sel.index
        return Suggestion(n_p=sel.n_p, n_d=sel.n_d, demand_rps=rate, capacity_rps=float(g.mu[i]),
                          power_w=float(power[i]), mix=int(mix)), power

    def suggest_from_info(self, info: dict) -> Suggestion:
        """:meth:`suggest` from a step or reset ``info`` of the environment (what a baseline reads)."""
        return self.suggest(float(info["rate_rps"]), float(info["forecast_rate_rps"]), float(info["backlog"]),
                            int(info["mix_index"]), float(info["next_cap_w"]))[0]
