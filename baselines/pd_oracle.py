"""The hindsight oracle of ``servegym/PDProvision-v0``: the least-cost provisioning plan of the whole
episode with the realized arrivals known in advance, solved exactly by dynamic programming, and replayed
through the same environment.

**What it knows.** Everything a policy cannot: the arrival count of every period of the episode (drawn by
:meth:`PDProvisionEnv.hindsight_arrivals` from a copy of the episode's generator, exactly as ``step``
draws them), and the coming length mixes, carbon, prices and power caps (which the scenario fixes).

**The problem.** Choose the target (n_P, n_D) of every period, within the action grid and the GPU
budget, to minimize the episode's cost as the environment's reward charges it: objective (facility
energy, carbon or cost) + ``slo_weight`` x violation share + ``cap_weight`` x cap excess, with the
environment's own start-up delay (an added instance draws loaded-idle power for ``startup_delay_s`` and
serves from then on, for any delay the config allows: "Any start-up delay" below; removal is immediate; the
env has no other ramp limit on instance counts, and the power ramp is the capped ramp of eq. 14 in the
cost), subject to **no backlog**: the deployment serving
in each period has capacity above the period's realized arrival rate. With a start-up delay of exactly one
period, the deployment serving in period k is min(T_k, T_{k-1}) per pool and the starting instances are
max(T_k - T_{k-1}, 0), so the state of the DP is the previous target and each stage has
|grid|^2 transitions (86^2 on the default 16-GPU grid, 1,440 stages). Every period's cost is computed
with the environment's own power tables (:meth:`MinPowerRule.power_at`, eq. 14) and its own SLO
evaluation (:meth:`PDProvisionEnv.slo_steady`, the steady case of the env's per-period SLO evaluation), so the plan's predicted return equals its replayed return
(tested to 1e-9).

**What the result is.** The DP is an exact **optimum** over backlog-free plans (a plan that lets a backlog
build is outside it: its arrivals wait, the reward then charges the backlog and the queueing delay, and
with slo_weight = 2 per unit of violation share against at most ~0.2 kWh of energy per period at the
default budget a backlog never pays off on the measured days at the default 60-s delay; at 600 s it does,
slightly: a plan carrying a small backlog beat the oracle on 3 of 10 test days, see "Measured" below). It
is the ``oracle`` of the pd ids: ``oracle_kind = "optimum"``. Its **relaxation** (:attr:`OraclePlan.relaxed_return`) drops the start-up
coupling: every period independently takes its cheapest backlog-free deployment, serving at once with no
start-up draw (a per-period hindsight bound). It is an upper bound on the return of every
backlog-free plan, reported beside the oracle, never replayed (no policy can play it). The problem's LP
relaxation in the usual MILP form (binary deployment choices per period, linked by transitions) is a
shortest path over a layered graph, whose LP relaxation is integral, so it would equal the DP optimum and
bound nothing tighter; the start-up-free relaxation is the informative bound.

Where no deployment in the budget covers a period's arrivals, that period takes the largest-capacity
deployment (a backlog follows and the plan is no longer an optimum): :attr:`OraclePlan.infeasible_periods`
counts such periods, and the pd splits are sized so that there are none (tested on each split).

**Any start-up delay** (:func:`solve_delayed`; :func:`solve_oracle` calls it for every delay but 0 and one
period, whose target-state DP above stays as it was). The config allows any delay D in [0, 86,400] s, a
multiple of the period or not. Let lead = floor(D / P) and f = D / P - lead: an instance added at period c
draws loaded-idle power through periods c .. c + lead - 1 and the first f of period c + lead, and serves
from then on. Two facts of the env's dynamics give a small exact state:

* *Targets are levels.* Instances start in FIFO order and a lower target cancels the latest-started first,
  then removes active ones at once, so per pool the instances serving in period k number min(T_{k-lead},
  ..., T_k) (min(T_{k-lead-1}, ..., T_k) in the first f of it) and the rest of T_k are starting.
* *Cancelling a starting instance never pays.* Take a plan that cancels one; the plan that never added it
  (its pool's target one lower while it existed) has the same serving counts in every period and one
  starting instance less in each of those periods, and every cost term is nondecreasing in the starting
  count (weights, carbon intensities and prices are nonnegative). So an optimum exists in which no pool's
  serving count rises in period j (instances added at j - lead) if it fell in any of periods j - lead ..
  j - 1, nor in the first lead periods (nothing was added before the episode).

The DP's state is the serving deployment at the period's end and, per pool, the periods since that pool's
count last fell, capped at lead + 1: (lead + 1)^2 x 86 states on the default grid (3,096 at 300 s, 10,406
at 600 s). Each period's 86^2 transitions are grouped by how each pool changes (fall, hold, rise), so a
stage costs a few numpy reductions. A period costs what the env charges its pieces: f of it on the
smaller of the two deployments, the rest on the new one, each backlog-free; a rise of n instances is
charged their loaded-idle energy over their lead periods (and f of the serving one) at those periods'
prices. The targets follow from the serving path: T_c = serving count in c + the rises of periods c + 1 ..
c + lead, per pool; none cancels a starting instance. The DP's value (:attr:`DelayedOraclePlan.bound`) is
an upper bound on every backlog-free plan's return (it leaves out the GPUs the starting instances hold and
their share of cap excess); the plan's return is computed exactly (starting instances in facility power
and cap excess, the fluid step's pieces) and replayed, so :attr:`OraclePlan.gap` (bound - plan) is 0 where
neither binds, and the plan is then the optimum (every day measured below; exhaustive search on a 4-GPU
grid at 2 and 3 periods, 30 s and 90 s, tested). Where the starting instances would need more GPUs than the
budget, the serving deployments are held to fewer GPUs until the targets fit (``serving_budget``; a
feasible plan, the gap stated). Past :data:`EXACT_STATE_LIMIT` back-pointers (delays of 12 periods or more
on a default day) the bound is the DP without the start-up constraint (free) and the plan is that DP's path
if it never cancels (then optimal, gap 0), else the shared restriction's (one state for both pools: no pool
rises within lead + 1 periods of either pool's fall; (lead + 1) x 86 states), else, past the limit again,
the sticky restriction's (no pool rises after its first fall). Measured at 900 s and 1,800 s (test seeds
0-2): the free path never cancelled on seeds 0 and 2 (gap 0); on seed 1 the shared plan is 0.51 and 0.52
reward units (1.1 %) below the bound (the sticky one was 2.3 and 1.9 below); 1.2-3.4 CPU s per solve.

Measured (docs/pd.md, "Oracle at long start-up delays"; whole test days, reset seeds 0-9, default budget):
the plan met its bound on every day (gap <= 2e-13) and replayed to its prediction; the solve takes 2.3-2.4
CPU s at 300 s and 3.9-4.1 at 600 s (0.2 at 60 s). Oracle - ``min-power+forecast:0.99``: 1.67 [0.02, 10.17]
reward units per day at 300 s, 0.68 [-0.05, 3.07] at 600 s, where the rule beats the oracle on 3 of 10 days
by at most 0.048 (0.12 %) by letting a backlog build: at long delays the backlog-free class binds (below).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from servegym.envs.pd.env import PDProvisionEnv

from servegym.errors import ConfigError

__all__ = ["DelayedOraclePlan", "HindsightOracle", "OraclePlan", "solve_delayed", "solve_oracle"]


@dataclass(frozen=True)
class OraclePlan:
    """The oracle's targets for the episode's periods and what the DP predicts (reward units)."""

    targets: NDArray[np.int64]  # (periods, 2) target (n_P, n_D) of each period
    predicted_return: float  # minus the DP's optimal cost = the replayed return when feasible
    relaxed_return: float  # the start-up-free relaxation: an upper bound on any backlog-free plan's return
    infeasible_periods: int  # periods whose arrivals exceed every deployment's capacity
    arrivals: NDArray[np.float64]  # realized arrivals per period (requests)

    @property
    def upper_bound(self) -> float:
        """The least upper bound the solver proves on every backlog-free plan's return: the plan's own
        return where the plan is the optimum (delays of 0 or one period)."""
        return self.predicted_return

    @property
    def gap(self) -> float:
        """upper_bound - predicted_return (reward units): 0 where the plan is proven optimal."""
        return self.upper_bound - self.predicted_return


@dataclass(frozen=True)
class DelayedOraclePlan(OraclePlan):
    """:func:`solve_delayed`'s plan: the targets and their exact return, plus the DP's bound and how it was
    solved (the module docstring, "Any start-up delay")."""

    bound: float  # the serving-state DP's value: an upper bound on every backlog-free plan's return
    lead: int  # whole periods an added instance waits before the period it starts serving in
    exact_state: bool  # the DP kept the exact per-pool constraint (else the sticky restriction; bound: free DP)
    serving_budget: int  # GPUs the serving deployments were held to (below gpu_budget if pending needed room)

    @property
    def upper_bound(self) -> float:
        return max(self.bound, self.predicted_return)


def solve_oracle(env: PDProvisionEnv) -> OraclePlan:
    """The hindsight-optimal plan of ``env``'s current episode (call right after ``reset``; module docstring):
    the target-state DP for a start-up delay of 0 or one period, the serving-state DP of
    :func:`solve_delayed` for any other delay."""
    cfg = env.config
    if cfg.startup_delay_s not in (0.0, cfg.scenario.period_s):
        return solve_delayed(env)
    return _solve_target_dp(env)


def _solve_target_dp(env: PDProvisionEnv) -> OraclePlan:
    """The DP over the previous target (a start-up delay of 0 or exactly one period)."""
    cfg = env.config
    period = cfg.scenario.period_s
    delay = cfg.startup_delay_s
    if delay not in (0.0, period):
        raise ConfigError(f"the target-state DP needs startup_delay_s = 0 or one period ({period:g} s); got "
                          f"{delay:g}; allowed: 0 or scenario.period_s (solve_delayed takes any delay)")
    arrivals = env.hindsight_arrivals()
    k0 = env.step_index
    n_steps = arrivals.size
    rule = env.reference
    # the grid (every n_P, n_D >= 1 within the action maxima and the budget) is the same for every mix
    g0 = rule.mix_cache(env.mix_index(k0)).grid
    n_p, n_d = g0.n_p, g0.n_d
    size = n_p.size
    row = np.full((cfg.max_prefill + 1, cfg.max_decode + 1), -1, dtype=np.int64)
    row[n_p, n_d] = np.arange(size)
    # transition prev j -> target i: serving rows min(T_i, T_j), starting instances max(T_i - T_j, 0)
    if delay > 0:
        act = row[np.minimum(n_p[None, :], n_p[:, None]), np.minimum(n_d[None, :], n_d[:, None])]
        pend = (np.maximum(n_p[None, :] - n_p[:, None], 0) + np.maximum(n_d[None, :] - n_d[:, None], 0)).astype(float)
    else:
        act = np.broadcast_to(np.arange(size)[None, :], (size, size))
        pend = np.zeros((size, size))
    assert np.all(act >= 0)
    idle_w = cfg.system.hardware.loaded_idle_power_w
    pue = cfg.pue
    # state: the target in force before the first step (the env's initial deployment, all active)
    start = row[int(env.state.target[0]), int(env.state.target[1])]
    value = np.full(size, np.inf)
    value[start] = 0.0
    choice = np.zeros((n_steps, size), dtype=np.int64)
    relaxed = 0.0
    # each period's IT power, violation share (the env's own model, from an empty queue) and price per kWh
    st = _stage_costs(env, arrivals, n_p, n_d)
    for t in range(n_steps):
        it_w, viol, ok, obj_per_kwh = st.it_w[t], st.viol[t], st.ok[t], float(st.obj_per_kwh[t])
        cap_w = float(st.cap_w[t])
        fac_w = (it_w[act] + idle_w * pend) * pue  # (prev, target) facility power, W
        kwh = fac_w * period / 3.6e6
        excess = np.maximum(fac_w - cap_w, 0.0) * period / 3.6e6
        cost = (cfg.objective_weight * obj_per_kwh * kwh + cfg.slo_weight * viol[act] + cfg.cap_weight * excess)
        cost = np.where(ok[act], cost, np.inf)
        total = value[:, None] + cost
        choice[t] = np.argmin(total, axis=0)
        value = total[choice[t], np.arange(size)]
        # the relaxation: this period alone, serving at once, no start-up draw
        fac1 = it_w * pue
        cost1 = (cfg.objective_weight * obj_per_kwh * fac1 * period / 3.6e6 + cfg.slo_weight * viol
                 + cfg.cap_weight * np.maximum(fac1 - cap_w, 0.0) * period / 3.6e6)
        relaxed += float(np.min(np.where(ok, cost1, np.inf)))
    end = int(np.argmin(value))
    best = float(value[end])
    path = np.zeros(n_steps, dtype=np.int64)
    for t in range(n_steps - 1, -1, -1):
        path[t] = end
        end = int(choice[t, end])
    targets = np.stack([n_p[path], n_d[path]], axis=1).astype(np.int64)
    return OraclePlan(targets=targets, predicted_return=-best, relaxed_return=-relaxed,
                      infeasible_periods=st.infeasible, arrivals=arrivals)


DEC, HOLD, INC = 0, 1, 2  # a pool's change of serving count from one period to the next
INC_DEC, SAME = 3, 4  # the shared state's step where one pool rises and the other falls; an axis left alone
#: the most back-pointers (int32: (lead + 1)^2 x grid x periods) the exact serving-state DP may hold (80 MB:
#: up to 11 periods of delay on a default day); past it the bound is the free DP's, the plan its path or the
#: shared or sticky restriction's (module docstring)
EXACT_STATE_LIMIT = 20_000_000


@dataclass(frozen=True)
class _Stages:
    """Per period of the episode: the cost of every deployment serving the whole period with nothing pending
    (inf where it leaves a backlog), and what the exact evaluation needs."""

    full: NDArray[np.float64]  # (periods, grid)
    ok: NDArray[np.bool_]  # (periods, grid) backlog-free (every row where no deployment is)
    loose: NDArray[np.float64]  # (periods, grid) as full, backlog allowed (a period no deployment covers)
    it_w: NDArray[np.float64]  # (periods, grid) IT power at the period's arrival rate, W
    viol: NDArray[np.float64]  # (periods, grid) violation share from an empty queue
    obj_per_kwh: NDArray[np.float64]  # (periods,)
    cap_w: NDArray[np.float64]  # (periods,)
    infeasible: int


def _stage_costs(env: PDProvisionEnv, arrivals: NDArray[np.float64], n_p: NDArray[np.int64],
                 n_d: NDArray[np.int64]) -> _Stages:
    cfg = env.config
    period = cfg.scenario.period_s
    k0 = env.step_index
    rule = env.reference
    n, size = arrivals.size, n_p.size
    it_w = np.zeros((n, size))
    viol = np.zeros((n, size))
    ok = np.zeros((n, size), dtype=bool)
    obj = np.zeros(n)
    infeasible = 0
    for t in range(n):
        k = k0 + t
        mix = int(env.signals.mix_index[k])
        cache = rule.mix_cache(mix)
        mu = cache.grid.mu
        lam = float(arrivals[t]) / period
        it_w[t] = cache.power_at(lam)
        ok[t] = mu > lam
        if not ok[t].any():
            infeasible += 1
            ok[t] = mu >= mu.max()
        if lam > 0.0:
            viol[t] = env.slo_steady(lam, n_p, n_d, mix)[0]
        if cfg.objective == "energy":
            obj[t] = 1.0
        elif cfg.objective == "carbon":
            obj[t] = float(env.signals.ci_g_per_kwh[k]) / 1000.0
        else:
            obj[t] = float(env.signals.price_usd_per_kwh[k])
    cap_w = np.asarray(env.signals.cap_w[k0:k0 + n], dtype=float)
    fac = it_w * cfg.pue
    loose = (cfg.objective_weight * obj[:, None] * fac * period / 3.6e6 + cfg.slo_weight * viol
             + cfg.cap_weight * np.maximum(fac - cap_w[:, None], 0.0) * period / 3.6e6)
    return _Stages(full=np.where(ok, loose, np.inf), ok=ok, loose=loose, it_w=it_w, viol=viol, obj_per_kwh=obj,
                   cap_w=cap_w, infeasible=infeasible)


def _g_rules(kind: str, lead: int) -> tuple[int, int, NDArray[np.int64]]:
    """(states per pool, initial state, state after a hold) of a pool's start-up state; a decrease leads to
    state 0 and an increase needs (and keeps) the last state. ``exact``: periods since the pool's last decrease,
    capped at lead + 1 (state g - 1); ``shared``: the same for the last decrease of either pool (a restriction);
    ``sticky``: whether the pool never decreased; ``free``: none."""
    if kind in ("exact", "shared"):  # shared: one axis (the other of size 1)
        return lead + 1, 0, np.minimum(np.arange(lead + 1) + 1, lead)
    if kind == "sticky":
        return 2, 1, np.arange(2)
    return 1, 0, np.zeros(1, dtype=np.int64)


def _reduce(v: NDArray[np.float64], axis: int, kind: int, hold: NDArray[np.int64]
            ) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """The best value of each next start-up state along ``axis`` for a change ``kind`` (DEC, HOLD, INC; the
    shared state's INC_DEC; SAME leaves the axis as it is), and the previous state it comes from."""
    vm = np.moveaxis(v, axis, 0)
    n_g = vm.shape[0]
    out = np.full_like(vm, np.inf)
    arg = np.zeros(vm.shape, dtype=np.int64)
    if kind == SAME:
        return v, np.moveaxis(np.broadcast_to(np.arange(n_g).reshape((n_g,) + (1,) * (vm.ndim - 1)), vm.shape),
                              0, axis)
    if kind == DEC:
        arg[0] = np.argmin(vm, axis=0)
        out[0] = np.take_along_axis(vm, arg[0][None], 0)[0]
    elif kind in (INC, INC_DEC):
        out[0 if kind == INC_DEC else n_g - 1] = vm[n_g - 1]
        arg[0 if kind == INC_DEC else n_g - 1] = n_g - 1
    else:
        for g_new in np.unique(hold):
            prev = np.flatnonzero(hold == g_new)
            pick = np.argmin(vm[prev], axis=0)
            arg[g_new] = prev[pick]
            out[g_new] = np.take_along_axis(vm[prev], pick[None], 0)[0]
    return np.moveaxis(out, 0, axis), np.moveaxis(arg, 0, axis)


def _serving_dp(st: _Stages, n_p: NDArray[np.int64], n_d: NDArray[np.int64], start: int, lead: int, frac: float,
                charge: NDArray[np.float64], kind: str, allowed: NDArray[np.bool_]
                ) -> tuple[float, NDArray[np.int64], int]:
    """The least-cost serving path (grid row at each period's end) and its cost; ``allowed``: rows the path may
    serve on. Returns (cost, path, periods solved with a backlog allowed)."""
    n, size = st.full.shape
    n_g, g0, hold = _g_rules(kind, lead)
    n_gd = 1 if kind == "shared" else n_g
    ch_p = np.sign(n_p[None, :] - n_p[:, None]) + 1  # (prev, new): DEC, HOLD or INC of each pool
    ch_d = np.sign(n_d[None, :] - n_d[:, None]) + 1
    act = np.full((int(n_p.max()) + 1, int(n_d.max()) + 1), -1, dtype=np.int64)
    act[n_p, n_d] = np.arange(size)
    act = act[np.minimum(n_p[:, None], n_p[None, :]), np.minimum(n_d[:, None], n_d[None, :])]
    assert np.all(act >= 0)
    added = (np.maximum(n_p[None, :] - n_p[:, None], 0) + np.maximum(n_d[None, :] - n_d[:, None], 0)).astype(float)
    groups = []
    for a in (DEC, HOLD, INC):
        for b in (DEC, HOLD, INC):
            src, dst = np.nonzero((ch_p == a) & (ch_d == b) & allowed[None, :])
            if not src.size:
                continue
            order = np.argsort(dst, kind="stable")
            src, dst = src[order], dst[order]
            starts = np.flatnonzero(np.r_[True, dst[1:] != dst[:-1]])
            counts = np.diff(np.r_[starts, dst.size])
            groups.append((a, b, src, dst, starts, counts, dst[starts]))
    reach = {DEC: np.zeros(1, dtype=np.int64), INC: np.array([n_g - 1]), INC_DEC: np.zeros(1, dtype=np.int64),
             HOLD: np.unique(hold), SAME: np.zeros(1, dtype=np.int64)}  # states a step of each kind reaches

    def kinds(a: int, b: int) -> tuple[int, int]:
        if n_gd > 1:
            return a, b
        if INC in (a, b):
            return (INC_DEC if DEC in (a, b) else INC), SAME
        return (DEC if DEC in (a, b) else HOLD), SAME

    value = np.full((n_g, n_gd, size), np.inf)
    value[g0, 0 if n_gd == 1 else g0, start] = 0.0
    back = np.zeros((n, n_g, n_gd, size), dtype=np.int32)
    forced = 0
    for t in range(n):
        for loose in (False, True):
            per = st.loose[t] if loose else st.full[t]
            cost = per[None, :] if frac == 0.0 else frac * per[act] + (1.0 - frac) * per[None, :]
            cost = cost + added * charge[t]
            if t < lead:  # an instance added before the episode cannot serve in it
                cost = np.where(added > 0, np.inf, cost)
            new = np.full_like(value, np.inf)
            ptr = np.zeros(new.shape, dtype=np.int64)
            by_p: dict[int, tuple[NDArray[np.float64], NDArray[np.int64]]] = {}
            for a, b, src, dst, starts, counts, heads in groups:
                ka, kb = kinds(a, b)
                if ka not in by_p:
                    by_p[ka] = _reduce(value, 0, ka, hold)
                rp, arg_p = by_p[ka]
                rpd, arg_d = _reduce(rp, 1, kb, hold)
                gp, gd = reach[ka], reach[kb]
                block = rpd[np.ix_(gp, gd, src)] + cost[src, dst]
                best = np.minimum.reduceat(block, starts, axis=2)
                pos = np.where(block == np.repeat(best, counts, axis=2), np.arange(src.size), src.size)
                first = np.minimum.reduceat(pos, starts, axis=2)
                s_prev = src[np.minimum(first, src.size - 1)]
                g_d = arg_d[gp[:, None, None], gd[None, :, None], s_prev]
                g_p = arg_p[gp[:, None, None], g_d, s_prev]
                cur = new[np.ix_(gp, gd, heads)]
                better = best < cur
                new[np.ix_(gp, gd, heads)] = np.where(better, best, cur)
                old_ptr = ptr[np.ix_(gp, gd, heads)]
                ptr[np.ix_(gp, gd, heads)] = np.where(better, (g_p * n_gd + g_d) * size + s_prev, old_ptr)
            if np.isfinite(new).any():
                break
            forced += 1
        value = new
        back[t] = ptr
    flat = int(np.argmin(value))
    best_cost = float(value.flat[flat])
    path = np.zeros(n, dtype=np.int64)
    for t in range(n - 1, -1, -1):
        g_p, rest = divmod(flat, n_gd * size)
        g_d, s = divmod(rest, size)
        path[t] = s
        flat = int(back[t, g_p, g_d, s])
    return best_cost, path, forced


def _realize(path: NDArray[np.int64], start: int, n_p: NDArray[np.int64], n_d: NDArray[np.int64], lead: int
             ) -> NDArray[np.int64]:
    """The targets that serve ``path``: each period's serving count plus the instances added for the next
    ``lead`` periods' increases (per pool; never one cancelled)."""
    out = []
    for counts in (n_p, n_d):
        s = counts[path]
        inc = np.maximum(np.diff(np.r_[counts[start], s]), 0)
        csum = np.r_[0, np.cumsum(inc)]
        n = s.size
        hi = np.minimum(np.arange(n) + lead + 1, n)
        out.append(s + csum[hi] - csum[np.arange(n) + 1])
    return np.stack(out, axis=1).astype(np.int64)


def _never_cancels(path: NDArray[np.int64], start: int, n_p: NDArray[np.int64], n_d: NDArray[np.int64],
                   lead: int) -> bool:
    """Whether ``path`` adds serving instances only where the env can: no pool serves more in period j after
    serving less in any of periods j - lead .. j - 1 (a decrease there would cancel the instances starting),
    nor in the first ``lead`` periods."""
    for counts in (n_p, n_d):
        change = np.diff(np.r_[counts[start], counts[path]])
        last_dec = -1  # the start acts as a decrease just before the episode
        for j, c in enumerate(change):
            if c > 0 and j - last_dec < lead + 1:
                return False
            if c < 0:
                last_dec = j
    return True


def _plan_cost(st: _Stages, path: NDArray[np.int64], start: int, targets: NDArray[np.int64],
               n_p: NDArray[np.int64], n_d: NDArray[np.int64], frac: float, cfg: Any) -> float:
    """The exact cost of playing ``targets`` (serving ``path``): each period's pieces priced as the fluid step
    does, the instances still starting drawing loaded-idle power (facility power and cap excess)."""
    period = cfg.scenario.period_s
    idle_w = cfg.system.hardware.loaded_idle_power_w
    n = path.size
    prev = np.r_[start, path[:-1]]
    row = np.full((int(n_p.max()) + 1, int(n_d.max()) + 1), -1, dtype=np.int64)
    row[n_p, n_d] = np.arange(n_p.size)
    first = row[np.minimum(n_p[prev], n_p[path]), np.minimum(n_d[prev], n_d[path])]
    total = targets.sum(axis=1)
    t = np.arange(n)
    cost = np.zeros(n)
    for dep, share in ((first, frac), (path, 1.0 - frac)):
        if share == 0.0:
            continue
        pend = total - n_p[dep] - n_d[dep]
        fac = (st.it_w[t, dep] + idle_w * pend) * cfg.pue
        tau = share * period
        cost += (cfg.objective_weight * st.obj_per_kwh * fac * tau / 3.6e6 + cfg.slo_weight * share * st.viol[t, dep]
                 + cfg.cap_weight * np.maximum(fac - st.cap_w, 0.0) * tau / 3.6e6)
    return float(cost.sum())


def solve_delayed(env: PDProvisionEnv) -> DelayedOraclePlan:
    """The hindsight plan of ``env``'s current episode for any start-up delay, with its bound (module
    docstring, "Any start-up delay"; call right after ``reset``)."""
    cfg = env.config
    period = cfg.scenario.period_s
    delay = float(cfg.startup_delay_s)
    lead = int(delay // period)
    rem = delay - lead * period
    frac = 0.0 if rem <= 1e-9 else rem / period
    arrivals = env.hindsight_arrivals()
    n = arrivals.size
    lead = min(lead, n)  # an instance that never serves in the episode: lead n forbids every increase alike
    g0 = env.reference.mix_cache(env.mix_index(env.step_index)).grid
    n_p, n_d = g0.n_p.astype(np.int64), g0.n_d.astype(np.int64)
    row = np.full((cfg.max_prefill + 1, cfg.max_decode + 1), -1, dtype=np.int64)
    row[n_p, n_d] = np.arange(n_p.size)
    start = int(row[int(env.state.target[0]), int(env.state.target[1])])
    st = _stage_costs(env, arrivals, n_p, n_d)
    # one pending instance for a whole period i costs e_i; one serving from period j has waited in periods
    # j - lead .. j - 1 and for frac of period j
    e = cfg.objective_weight * st.obj_per_kwh * cfg.system.hardware.loaded_idle_power_w * cfg.pue * period / 3.6e6
    ce = np.r_[0.0, np.cumsum(e)]
    j = np.arange(n)
    charge = ce[j] - ce[np.maximum(j - lead, 0)] + frac * e
    exact = (lead + 1) ** 2 * n_p.size * n <= EXACT_STATE_LIMIT
    kind = "exact" if exact else "free"
    budget = cfg.gpu_budget
    bound_cost, path, forced = _serving_dp(st, n_p, n_d, start, lead, frac, charge, kind, n_p > 0)
    for cut in range(budget):
        allowed = (n_p + n_d <= budget - cut) & (n_p <= cfg.max_prefill - cut) & (n_d <= cfg.max_decode - cut)
        if not allowed.any():
            break
        if cut:  # the pending instances needed more GPUs than the budget left: serve on fewer
            _, path, forced = _serving_dp(st, n_p, n_d, start, lead, frac, charge, kind, allowed)
        if not exact and not _never_cancels(path, start, n_p, n_d, lead):
            fallback = "shared" if (lead + 1) * n_p.size * n <= EXACT_STATE_LIMIT else "sticky"
            _, path, forced = _serving_dp(st, n_p, n_d, start, lead, frac, charge, fallback, allowed)
        targets = _realize(path, start, n_p, n_d, lead)
        if (targets.sum(axis=1).max() <= budget and targets[:, 0].max() <= cfg.max_prefill
                and targets[:, 1].max() <= cfg.max_decode):
            break
    cost = _plan_cost(st, path, start, targets, n_p, n_d, frac, cfg)
    return DelayedOraclePlan(targets=targets, predicted_return=-cost, relaxed_return=_relaxed(st),
                             infeasible_periods=st.infeasible + forced, arrivals=arrivals, bound=-bound_cost,
                             lead=lead, exact_state=exact, serving_budget=budget - cut)


def _relaxed(st: _Stages) -> float:
    """The start-up-free relaxation: each period alone on its cheapest backlog-free deployment."""
    return -float(np.sum(np.min(st.full, axis=1)))


class HindsightOracle:
    """Plays :func:`solve_oracle`'s plan through the environment (a :class:`servegym.baselines.pd.Policy`)."""

    name = "oracle"

    def __init__(self) -> None:
        self.plan: OraclePlan | None = None
        self._t = 0

    def reset(self, env: PDProvisionEnv, info: dict[str, Any]) -> None:
        self.plan = solve_oracle(env)
        self._t = 0

    def act(self, obs: NDArray[np.float32], info: dict[str, Any]) -> NDArray[np.int64]:
        if self.plan is None:
            raise ConfigError("HindsightOracle.act before reset(env, info)")
        a = self.plan.targets[min(self._t, len(self.plan.targets) - 1)]
        self._t += 1
        return a.copy()
