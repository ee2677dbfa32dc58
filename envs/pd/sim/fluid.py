"""The pd fluid period, written once for one environment or many.

:func:`fluid_periods` advances the fluid model of :mod:`servegym.envs.pd.env` (module docstring, "Fluid
dynamics") over one period for a sequence of episode states (:class:`~servegym.envs.pd.sim.state.PDState`)
at once: the single env calls it with its own state, :class:`servegym.envs.pd.vector.PDVectorEnv` with the
states of all of its scenarios, as gymnax and EnvPool step many copies of an environment in one array
program. It reads and updates the states in place (instances, backlog, totals) and never sees an env. A
period is split at the instants starting instances become ready; piece j of every state that has one is
computed in one numpy evaluation (most periods have a single piece). With one state the formulas take
Python floats (``min``/``max``/conditionals, the fast path of a single step); with several, arrays of one
entry per state. Both evaluate the same IEEE operations in the same order, so a scenario's results do not
depend on how many others are stepped beside it (tested bit for bit).

Units: rates req/s, times s, power W, energy J.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from servegym.envs.pd.sim.state import PDParams, PDState

N_SLO_POINTS = 16
RHO_K_MAX = 0.9


def steady_slo(lam: Any, n_p: Any, n_d: Any, mu_p: Any, cv_s2: Any, a_d: Any, b_d: Any, dec: Any,
               tpq: NDArray[np.float64], t_p_mean: Any, ttft_slo_s: float, tpot_slo_s: float
               ) -> tuple[Any, Any, Any]:
    """(violation share, mean TTFT s, mean TPOT s) of arrivals at ``lam`` req/s meeting no backlog.

    Scalars (``n_p`` an int: one deployment on a step's path) or arrays of one shape S with ``tpq`` of shape
    S + (64,) or (64,) (a planner's deployments, or one entry per env). Prefill wait: Kingman's mean with
    the heavy-traffic exponential tail; TPOT at the Little's-law decode batch.
    """
    vec = not isinstance(n_p, int)  # scalars take Python's max and a conditional (the step's hot path)
    rho = np.minimum(lam / (n_p * mu_p), RHO_K_MAX) if vec else min(lam / (n_p * mu_p), RHO_K_MAX)
    mean_res = (1.0 / n_p + cv_s2) / (2.0 * mu_p * (1.0 - rho))  # W / rho: mean wait given waiting
    slack = ttft_slo_s - tpq
    rho_c, res_c = (rho[..., None], mean_res[..., None]) if vec else (rho, mean_res)
    p = np.where(slack <= 0, 1.0, rho_c * np.exp(-np.maximum(slack, 0.0) / res_c)).mean(axis=-1)
    lam_i = lam / n_d
    den = 1.0 - lam_i * dec * b_d
    batch = lam_i * dec * a_d / (np.maximum(den, 1e-9) if vec else max(den, 1e-9))
    tpot = a_d + b_d * batch
    viol = np.where(tpot > tpot_slo_s, 1.0, p) if vec else (1.0 if tpot > tpot_slo_s else p)
    return viol, rho * mean_res + t_p_mean, tpot


def backlogged_slo(q: Any, lam: Any, mu: Any, tau: Any, n_p: Any, n_d: Any, mu_p: Any, cv_s2: Any, a_d: Any,
                   b_d: Any, dec: Any, tpq: NDArray[np.float64], t_p_mean: Any, batch_cap: Any,
                   ttft_slo_s: float, tpot_slo_s: float) -> tuple[Any, Any, Any]:
    """:func:`steady_slo` of arrivals spread evenly over a piece of ``tau`` s that holds a backlog: taken at
    N_SLO_POINTS instants (the backlog is linear in time), each waiting q(s) / mu in the fluid queue first.
    Per-env values are scalars or arrays of shape S (``tpq`` S + (64,)); returns arrays of shape S.
    ``batch_cap``: the operating decode batch at capacity (used while serving at mu)."""
    q, lam, mu, tau = (np.asarray(x, dtype=float)[..., None] for x in (q, lam, mu, tau))
    n_p, n_d, mu_p, cv_s2, a_d, b_d, dec, t_p_mean, batch_cap = (
        np.asarray(x)[..., None] for x in (n_p, n_d, mu_p, cv_s2, a_d, b_d, dec, t_p_mean, batch_cap))
    s_pts = (np.arange(N_SLO_POINTS) + 0.5) * (tau / N_SLO_POINTS)
    qs = np.maximum(q + (lam - mu) * s_pts, 0.0)
    backlogged = qs > 0
    d = qs / mu
    rate_srv = np.where(backlogged | (lam >= mu), mu, lam)
    rho = np.minimum(rate_srv / (n_p * mu_p), RHO_K_MAX)
    mean_res = (1.0 / n_p + cv_s2) / (2.0 * mu_p * (1.0 - rho))  # W / rho: mean wait given waiting
    slack = ttft_slo_s - d[..., None] - np.asarray(tpq)[..., None, :]
    p_ttft = np.where(slack <= 0, 1.0, rho[..., None] * np.exp(-np.maximum(slack, 0.0) / mean_res[..., None]))
    p_ttft = p_ttft.mean(axis=-1)
    lam_i = rate_srv / n_d
    batch_lit = lam_i * dec * a_d / np.maximum(1.0 - lam_i * dec * b_d, 1e-9)
    batch = np.where(rate_srv >= mu, batch_cap, batch_lit)
    tpot_a = a_d + b_d * batch
    viol_a = np.where(tpot_a > tpot_slo_s, 1.0, p_ttft)
    ttft_a = d + rho * mean_res + t_p_mean
    return viol_a.mean(axis=-1), ttft_a.mean(axis=-1), tpot_a.mean(axis=-1)


def _piece(q: Any, lam: Any, mu: Any, tau: Any, n_p: Any, n_d: Any, idle: Any, mu_p: Any, mu_dmax: Any,
           rp: tuple[float, float, float], rd: tuple[float, float, float], pue: float, cap_w: Any, vec: bool
           ) -> tuple[Any, Any, Any, Any]:
    """(backlog at the piece's end, facility energy J, J above the cap, served requests) of one piece.

    Busy time (backlog present) serves at mu, the rest at lam; power is eq. 14's capped ramp per instance at
    the served rate plus ``idle`` W of starting instances."""
    mn, mx = (np.minimum, np.maximum) if vec else (min, max)
    if vec:
        over = lam >= mu
        with np.errstate(divide="ignore", invalid="ignore"):
            busy = np.where(over, tau, np.minimum(tau, q / np.where(over, 1.0, mu - lam)))
        q_end = np.where(over, q + (lam - mu) * tau, np.maximum(0.0, q - (mu - lam) * tau))
    elif lam >= mu:
        busy, q_end = tau, q + (lam - mu) * tau
    else:
        busy, q_end = min(tau, q / (mu - lam)), max(0.0, q - (mu - lam) * tau)
    p_busy = (n_p * mn(rp[0] + rp[1] * (mu / (n_p * mu_p)), rp[2])
              + n_d * mn(rd[0] + rd[1] * (mu / (n_d * mu_dmax)), rd[2]) + idle)
    p_free = (n_p * mn(rp[0] + rp[1] * (lam / (n_p * mu_p)), rp[2])
              + n_d * mn(rd[0] + rd[1] * (lam / (n_d * mu_dmax)), rd[2]) + idle)
    energy = (p_busy * busy + p_free * (tau - busy)) * pue
    excess = mx(0.0, p_busy * pue - cap_w) * busy + mx(0.0, p_free * pue - cap_w) * (tau - busy)
    return q_end, energy, excess, lam * tau + q - q_end


def _col(values: list[Any], vec: bool) -> Any:
    return np.array(values) if vec else values[0]


def fluid_periods(params: PDParams, states: Sequence[PDState], arrived: Sequence[float]
                  ) -> list[dict[str, Any]]:
    """Advance each state's fluid model over its current period (``state.k``) with ``arrived[i]`` requests;
    updates each state's instances, backlog and totals in place and returns its period metrics (the keys
    :meth:`PDProvisionEnv.step <servegym.envs.pd.env.PDProvisionEnv.step>` reads). All states share the
    constants ``params`` (one config: the vector env's)."""
    n = len(states)
    if n == 1:
        return [_one_period(params, states[0], arrived[0])]
    vec = True
    period = params.period_s
    pue = params.pue
    rp, rd = params.ramp_p, params.ramp_d
    idle_w = params.idle_w
    ks = [st.k for st in states]
    mixes = [int(st.signals.mix_index[k]) for st, k in zip(states, ks, strict=True)]
    tabs = [st.tables for st in states]
    mu_p = [float(t.mu_p[m]) for t, m in zip(tabs, mixes, strict=True)]
    mu_dmax = [float(t.mu_d_max[m]) for t, m in zip(tabs, mixes, strict=True)]
    lam = [a / period for a in arrived]
    t0 = [float(st.signals.time_s[k]) for st, k in zip(states, ks, strict=True)]
    cap = [float(st.signals.cap_w[k]) for st, k in zip(states, ks, strict=True)]
    bounds = []
    for st, s in zip(states, t0, strict=True):
        t1 = s + period
        events = sorted({t for pool in st.pending for t in pool if s < t < t1})
        bounds.append([s, *events, t1])
    q = [st.backlog for st in states]
    served = [0.0] * n
    energy = [0.0] * n
    excess = [0.0] * n
    viol_sum = [0.0] * n
    ttft_sum = [0.0] * n
    tpot_sum = [0.0] * n
    w_sum = [0.0] * n
    for j in range(max(len(b) for b in bounds) - 1):
        rows = []
        for i, st in enumerate(states):
            b = bounds[i]
            if j + 1 < len(b):
                st.activate(b[j])
                if b[j + 1] - b[j] > 0:
                    rows.append(i)
        if not rows:
            continue
        v = vec and len(rows) > 1
        tau = [bounds[i][j + 1] - bounds[i][j] for i in rows]
        npd = [states[i].active for i in rows]
        mu = [states[i].mu_list[mixes[i]][p][d] for i, (p, d) in zip(rows, npd, strict=True)]
        idle = [(len(states[i].pending[0]) + len(states[i].pending[1])) * idle_w for i in rows]
        cols = {name: _col([src[i] for i in rows], v) for name, src in
                (("q", q), ("lam", lam), ("mu_p", mu_p), ("mu_dmax", mu_dmax), ("cap", cap))}
        n_p, n_d = _col([p for p, _ in npd], v), _col([d for _, d in npd], v)
        mu_c, tau_c, idle_c = _col(mu, v), _col(tau, v), _col(idle, v)
        q_end, en, ex, srv = _piece(cols["q"], cols["lam"], mu_c, tau_c, n_p, n_d, idle_c, cols["mu_p"],
                                    cols["mu_dmax"], rp, rd, pue, cols["cap"], v)
        slo = _slo(params, states, rows, mixes, cols, mu_c, tau_c, n_p, n_d, v)
        for r, i in enumerate(rows):
            pick = (lambda x, r=r: float(x[r])) if v else float
            energy[i] += pick(en)
            excess[i] += pick(ex)
            served[i] += pick(srv)
            w = lam[i] * tau[r]  # arrivals in this piece
            if w > 0:
                viol_sum[i] += w * float(slo[0][r])
                ttft_sum[i] += w * float(slo[1][r])
                tpot_sum[i] += w * float(slo[2][r])
                w_sum[i] += w
            q[i] = pick(q_end)
    out = []
    for i, st in enumerate(states):
        st.activate(bounds[i][-1])
        out.append(_close_period(params, st, mixes[i], arrived[i], q[i], energy[i], excess[i], served[i],
                                 viol_sum[i], ttft_sum[i], tpot_sum[i], w_sum[i], mu_p[i], mu_dmax[i]))
    return out


def _close_period(params: PDParams, st: PDState, mix: int, arrived: float, q: float, energy: float,
                  excess: float, served: float, viol_sum: float, ttft_sum: float, tpot_sum: float,
                  w_sum: float, mu_p: float, mu_dmax: float) -> dict[str, Any]:
    """Store the period's end state in ``st`` and return its metrics (arrival-weighted SLO means)."""
    period, pue = params.period_s, params.pue
    st.backlog = q
    st.arrived += arrived
    st.served += served
    tab = st.tables
    p, d = st.active
    return {
        "power_w": energy / period,
        "it_power_w": energy / period / pue,
        "energy_j": energy,
        "cap_excess_kwh": excess / 3.6e6,
        "served": served,
        "slo_violation": viol_sum / w_sum if w_sum > 0 else 0.0,
        "ttft_s": ttft_sum / w_sum if w_sum > 0 else float(tab.t_p_mean_s[mix]),
        "tpot_s": tpot_sum / w_sum if w_sum > 0 else float(tab.a_d[mix]),
        "prefill_util": min(served / period / (p * mu_p), 10.0),
        "decode_util": min(served / period / (d * mu_dmax), 10.0),
        "demand_util": min((arrived / period + q / period) / max(st.mu_list[mix][p][d], 1e-9), 10.0),
    }


def _one_period(params: PDParams, st: PDState, arrived: float) -> dict[str, Any]:
    """:func:`fluid_periods` of one state on Python scalars, without the per-env lists (the single step's
    path; the same piece and SLO formulas)."""
    period, pue = params.period_s, params.pue
    k = st.k
    mix = int(st.signals.mix_index[k])
    tab = st.tables
    mu_p, mu_dmax = float(tab.mu_p[mix]), float(tab.mu_d_max[mix])
    lam = arrived / period
    t0 = float(st.signals.time_s[k])
    t1 = t0 + period
    cap = float(st.signals.cap_w[k])
    events = sorted({t for pool in st.pending for t in pool if t0 < t < t1})
    bounds = [t0, *events, t1]
    q = st.backlog
    served = energy = excess = viol_sum = ttft_sum = tpot_sum = w_sum = 0.0
    for j in range(len(bounds) - 1):
        st.activate(bounds[j])
        tau = bounds[j + 1] - bounds[j]
        if tau <= 0:
            continue
        n_p, n_d = st.active
        mu = st.mu_list[mix][n_p][n_d]
        idle = (len(st.pending[0]) + len(st.pending[1])) * params.idle_w
        q_end, en, ex, srv = _piece(q, lam, mu, tau, n_p, n_d, idle, mu_p, mu_dmax, params.ramp_p,
                                    params.ramp_d, pue, cap, False)
        energy += en
        excess += ex
        served += srv
        w = lam * tau  # arrivals in this piece
        if w > 0:
            v, ttft, tpot = _slo(params, [st], [0], [mix], {"q": q, "lam": lam}, mu, tau, n_p, n_d, False)
            viol_sum += w * v[0]
            ttft_sum += w * ttft[0]
            tpot_sum += w * tpot[0]
            w_sum += w
        q = q_end
    st.activate(t1)
    return _close_period(params, st, mix, arrived, q, energy, excess, served, viol_sum, ttft_sum, tpot_sum,
                         w_sum, mu_p, mu_dmax)


def _slo(params: PDParams, states: Sequence[PDState], rows: list[int], mixes: list[int], cols: dict[str, Any],
         mu: Any, tau: Any, n_p: Any, n_d: Any, vec: bool) -> tuple[list[float], list[float], list[float]]:
    """Per row: (violation share, mean TTFT, mean TPOT) of the piece's arrivals; the steady formula where
    the piece holds no backlog, else the N_SLO_POINTS one (rows with no arrivals get values never read)."""
    slos = (params.ttft_slo_s, params.tpot_slo_s)
    if not vec:  # one row of Python scalars: the single env's step, without the per-row bookkeeping below
        tab, mx = states[rows[0]].tables, mixes[rows[0]]
        args = (float(tab.mu_p[mx]), float(tab.cv_s2[mx]), float(tab.a_d[mx]), float(tab.b_d[mx]),
                float(tab.decode_tokens[mx]))
        tpq, t_p_mean = tab.t_p_quantiles_s[mx], float(tab.t_p_mean_s[mx])
        if cols["q"] <= 0.0 and cols["lam"] < mu:
            res = steady_slo(cols["lam"], n_p, n_d, *args, tpq, t_p_mean, *slos)
        else:
            res = backlogged_slo(cols["q"], cols["lam"], mu, tau, n_p, n_d, *args, tpq, t_p_mean,
                                 float(tab.batch[mx, n_p, n_d]), *slos)
        return [float(res[0])], [float(res[1])], [float(res[2])]
    m = len(rows)
    tabs = [states[i].tables for i in rows]
    mix = [mixes[i] for i in rows]
    per_row = {"q": cols["q"], "lam": cols["lam"], "mu": mu, "tau": tau, "n_p": n_p, "n_d": n_d}
    if not vec:
        per_row = {k: [v] for k, v in per_row.items()}
    steady = [per_row["q"][r] <= 0.0 and per_row["lam"][r] < per_row["mu"][r] for r in range(m)]
    out: tuple[list[float], list[float], list[float]] = ([0.0] * m, [0.0] * m, [0.0] * m)
    for want in (True, False):
        sel = [r for r in range(m) if steady[r] == want]
        if not sel:
            continue
        one = not vec  # one env: Python scalars (the single step's path); else arrays over ``sel``

        def take(values: Any, sel: list[int] = sel, one: bool = one) -> Any:
            return values[0] if one else np.asarray(values)[sel]

        def mix_col(attr: str, sel: list[int] = sel, one: bool = one) -> Any:
            vals = [float(getattr(tabs[r], attr)[mix[r]]) for r in sel]
            return vals[0] if one else np.array(vals)

        mix_args = (mix_col("mu_p"), mix_col("cv_s2"), mix_col("a_d"), mix_col("b_d"), mix_col("decode_tokens"))
        tpq = tabs[0].t_p_quantiles_s[mix[0]] if one else np.stack([tabs[r].t_p_quantiles_s[mix[r]] for r in sel])
        npv, ndv = take(per_row["n_p"]), take(per_row["n_d"])
        if want:
            res = steady_slo(take(per_row["lam"]), npv, ndv, *mix_args, tpq, mix_col("t_p_mean_s"), *slos)
        else:
            batch_cap = [float(tabs[r].batch[mix[r], per_row["n_p"][r], per_row["n_d"][r]]) for r in sel]
            res = backlogged_slo(take(per_row["q"]), take(per_row["lam"]), take(per_row["mu"]), take(per_row["tau"]),
                                 npv, ndv, *mix_args, tpq, mix_col("t_p_mean_s"),
                                 batch_cap[0] if one else np.array(batch_cap), *slos)
        vals = [np.atleast_1d(np.asarray(x, dtype=float)) for x in res]
        for k, r in enumerate(sel):
            for o in range(3):
                out[o][r] = float(vals[o][k])
    return out
