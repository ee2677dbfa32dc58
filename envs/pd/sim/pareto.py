"""Serving capacity-power Pareto fronts and provisioning choices over candidate PD deployments (§2.2-2.3).

Points are deployments with capacity ``mu`` (req/s, to maximize) and power ``P`` (W, to minimize).

* :func:`exact_front`: deployments that no other deployment dominates (capacity >= and power <=, one strict).
* :func:`eps_front`: an epsilon-Pareto front (epsilon-approximate Pareto set in the sense of Laumanns et al.,
  the paper's ref. [29], App. C) with a multiplicative epsilon on both axes (default 3%): the smallest subset
  S of the exact front such that every deployment x has some y in S with mu_y >= mu_x / (1 + eps) and
  P_y <= (1 + eps) P_x. Algorithm (greedy sweep, optimal for two objectives):

  1. sort the exact front by capacity (power then also increases along it);
  2. take the lowest-capacity front point x not yet covered; among the front points y that cover it
     (P_y <= (1 + eps) P_x and mu_y >= mu_x / (1 + eps)) pick the one reaching furthest, i.e. with the
     largest mu_y, and among equally far-reaching ones the least power; y covers x and every front
     point z with mu_x <= mu_z <= (1 + eps) mu_y;
  3. repeat from the first front point with capacity above (1 + eps) mu_y.

  A dominated deployment is covered through the front point dominating it. Because each step covers the
  longest possible run of the ordered front, no smaller subset covers it (the classic interval-cover
  exchange argument). Ties on equal points keep the earlier index.
* :func:`min_power_deployment`: problem (1), the minimum-power deployment with mu >= lambda / rho_bar.
* :func:`max_capacity_under_power`: the largest capacity whose power fits a budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from servegym.envs.pd.sim.model import CapacityGrid, PDModel, deployment_label

from servegym.errors import ConfigError, check_range, choice_error

DEFAULT_EPS = 0.03
DEFAULT_RHO_BAR = 0.85  # §2.2: "Prior work uses values of 0.85 and 0.90"


def _as_points(capacity: ArrayLike, power: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    c = np.asarray(capacity, dtype=float).ravel()
    p = np.asarray(power, dtype=float).ravel()
    if c.shape != p.shape:
        raise ConfigError(f"capacity and power differ in length: {c.size} vs {p.size}")
    if c.size and (not np.all(np.isfinite(c)) or not np.all(np.isfinite(p)) or c.min() <= 0 or p.min() <= 0):
        raise ConfigError("capacity (req/s) and power (W) must be finite and > 0")
    return c, p


def exact_front(capacity: ArrayLike, power: ArrayLike) -> NDArray[np.int64]:
    """Indices of the non-dominated points, sorted by increasing capacity (duplicates: first index kept)."""
    c, p = _as_points(capacity, power)
    if c.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.arange(c.size), -c, p))  # power ascending, then capacity descending, then index
    best = -np.inf
    keep = []
    for i in order:
        if c[i] > best:
            keep.append(i)
            best = c[i]
    idx = np.asarray(keep, dtype=np.int64)
    return idx[np.argsort(c[idx], kind="stable")]


def eps_front(capacity: ArrayLike, power: ArrayLike, eps: float = DEFAULT_EPS) -> NDArray[np.int64]:
    """Indices of the epsilon-Pareto front (module docstring), sorted by increasing capacity."""
    check_range("eps", eps, 0.0, 1.0, low_inclusive=False)
    c, p = _as_points(capacity, power)
    front = exact_front(c, p)  # capacity ascending, power ascending
    cf, pf = c[front], p[front]
    # reach[j]: first front position whose capacity is beyond (1 + eps) times front point j's.
    reach = np.searchsorted(cf, (1.0 + eps) * cf, side="right")
    chosen: list[int] = []
    k, n = 0, front.size
    while k < n:
        # Candidates that cover front point k: power within (1 + eps) of it, capacity within 1 / (1 + eps).
        cand = np.flatnonzero((pf <= (1.0 + eps) * pf[k]) & (cf * (1.0 + eps) >= cf[k]))
        best = cand[np.lexsort((pf[cand], -reach[cand]))[0]]  # longest reach, then least power
        chosen.append(int(front[best]))
        k = int(reach[best])
    return np.asarray(chosen, dtype=np.int64)


@dataclass(frozen=True)
class Selection:
    """One chosen deployment of a grid."""

    index: int
    n_p: int
    n_d: int
    mu: float  # req/s
    power_w: float  # W (at capacity, or at the rate, as requested)

    @property
    def label(self) -> str:
        return deployment_label(self.n_p, self.n_d)

    def as_dict(self) -> dict[str, float | int | str]:
        return {"deployment": self.label, "n_p": self.n_p, "n_d": self.n_d, "mu": self.mu, "power_w": self.power_w}


PowerAt = Literal["capacity", "rate"]


def _power(grid: CapacityGrid, model: PDModel | None, rate: float, power_at: PowerAt) -> NDArray[np.float64]:
    if power_at == "capacity":
        return grid.power_w
    if power_at == "rate":
        if model is None:
            raise ConfigError("power_at='rate' needs the PDModel that built the grid")
        return np.asarray(model.power_w(grid.n_p, grid.n_d, np.full(len(grid), rate), mu=grid.mu), dtype=float)
    raise choice_error("power_at", power_at, ("capacity", "rate"))


def _select(grid: CapacityGrid, mask: NDArray[np.bool_], keys: tuple[NDArray, ...], power: NDArray[np.float64]
            ) -> Selection | None:
    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return None
    order = np.lexsort(tuple(k[idx] for k in reversed(keys)))
    i = int(idx[order[0]])
    return Selection(index=i, n_p=int(grid.n_p[i]), n_d=int(grid.n_d[i]), mu=float(grid.mu[i]),
                     power_w=float(power[i]))


def min_power_deployment(grid: CapacityGrid, rate: float, rho_bar: float = DEFAULT_RHO_BAR, *,
                         power_at: PowerAt = "capacity", model: PDModel | None = None) -> Selection | None:
    """Problem (1): the least-power deployment with mu >= rate / rho_bar; None if no deployment qualifies.

    ``power_at="capacity"`` ranks by P at lambda = mu, as the paper's fronts do; ``"rate"`` ranks by the
    power drawn at ``rate`` (needs ``model``). Ties: fewer instances, then more capacity.
    """
    check_range("rate", rate, 0.0, None)
    check_range("rho_bar", rho_bar, 0.0, 1.0, low_inclusive=False)
    power = _power(grid, model, rate, power_at)
    mask = grid.mu >= rate / rho_bar
    return _select(grid, mask, (power, grid.n_p + grid.n_d, -grid.mu), power)


def max_capacity_under_power(grid: CapacityGrid, budget_w: float, *, power_at: PowerAt = "capacity",
                             rate: float | None = None, model: PDModel | None = None) -> Selection | None:
    """The deployment with the most capacity whose power is <= ``budget_w``; None if none fits.

    With ``power_at="rate"`` the power is evaluated at ``rate`` req/s. Ties: less power, fewer instances.
    """
    check_range("budget_w", budget_w, 0.0, None)
    if power_at == "rate" and rate is None:
        raise ConfigError("power_at='rate' needs rate (req/s)")
    power = _power(grid, model, 0.0 if rate is None else rate, power_at)
    mask = power <= budget_w
    return _select(grid, mask, (-grid.mu, power, grid.n_p + grid.n_d), power)
