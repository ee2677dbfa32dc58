"""What the pd env shows: the observation vector (:data:`OBS_FIELDS`, one type for every action mode) and the
``ansi`` / ``rgb_array`` renderings, computed from the env's state (the env's ``_obs`` and ``render`` call
these)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from servegym.render import BLUE, GREEN, GREY, LIGHT_BLUE, LIGHT_ORANGE, ORANGE, PURPLE, RED, Bar, render_bars

if TYPE_CHECKING:
    from servegym.envs.pd.env import PDProvisionEnv

#: Observation entries in order, with their scaling.
OBS_FIELDS: tuple[str, ...] = (
    "rate_last / peak_rate_rps",  # observed arrival rate of the last period
    "rate_t-2 / peak", "rate_t-3 / peak", "rate_t-4 / peak",  # observed arrival rates of the 3 periods before
    "forecast_rate_next / peak",  # scenario mean rate of the coming period (no Poisson noise)
    "forecast_rate_max / peak",  # max scenario mean rate over the next ceil(startup/period) + 1 periods
    "share_azure_code", "share_azure_conv", "share_mooncake",  # length mix of the coming period
    "mean_input_tokens / 1e4", "mean_output_tokens / 1e3",  # mean request lengths of the coming mix
    "n_p_active / max_prefill", "n_d_active / max_decode",  # instances serving now
    "n_p_starting / max_prefill", "n_d_starting / max_decode",  # instances starting up (not serving yet)
    "capacity_active / peak",  # mu of the active deployment under the coming mix
    "log1p(backlog requests) / 10",  # requests waiting at the period's start
    "power_cap_w / budget_power_w",  # cap of the coming period; budget power = gpu_budget x 692 W x pue
    "facility_power_last / power_cap_w",  # the last period's mean facility power against the coming cap
    "ci_g_per_kwh / 1000", "price / max price",  # grid carbon intensity and energy price of the coming period
    "sin(2 pi hour / 24)", "cos(2 pi hour / 24)",  # local hour of day
    "slo_violation_last",  # share (0-1) of the last period's arrivals that missed an SLO target
    # what the baselines read (added for learnability, issue 13)
    "ref_n_p / max_prefill", "ref_n_d / max_decode",  # min-power+lookahead's suggestion for the coming period
    "capacity_suggested / peak",  # mu of that suggestion under the coming mix
    "it_power_active_w / budget_it_power_w",  # at the rule's demand rate; budget = gpu_budget x 692 W
    "it_power_suggested_w / budget_it_power_w",  # IT power of the suggestion at the same demand rate
    "capacity_active / rate_last",  # mu / lambda (10 when lambda ~ 0)
    "prefill_util_last", "decode_util_last", "demand_util_last",  # as in info (<= 10)
    "backlog / backlog_limit",  # linear; the episode terminates above 1
    "front_index_suggested / (front_slots - 1)",  # first eps-front point with capacity >= the suggestion's
    "front_size / front_slots",  # points on the coming mix's eps-Pareto front
    "steps_left / episode_steps",  # time limit made observable (truncation is not a terminal state)
)


def observe(env: PDProvisionEnv) -> NDArray[np.float32]:
    """The observation vector (:data:`OBS_FIELDS`, clipped to [-1, 10])."""
    cfg = env.config
    k = min(env._k, env.signals.base_rate_rps.size - 1)
    mix = int(env.signals.mix_index[k])
    peak = cfg.scenario.peak_rate_rps
    fc = env.forecast_rates(env._lookahead)
    n_p, n_d = env._active
    cap = float(env.signals.cap_w[k])
    hour = float(env.signals.hour[k])
    ang = 2.0 * math.pi * hour / 24.0
    w = env.tables.weights[mix]
    obs = np.array([
        *(h / peak for h in env._hist),
        (float(fc[0]) if fc.size else 0.0) / peak, (float(fc.max()) if fc.size else 0.0) / peak,
        w[0], w[1], w[2],
        env.tables.in_mean[mix] / 1e4, env.tables.out_mean[mix] / 1e3,
        n_p / cfg.max_prefill, n_d / cfg.max_decode,
        len(env._pending[0]) / cfg.max_prefill, len(env._pending[1]) / cfg.max_decode,
        env._mu_list[mix][n_p][n_d] / peak,
        math.log1p(env._backlog) / 10.0,
        cap / env._budget_power_w, env._last_power_w / max(cap, 1e-9),
        float(env.signals.ci_g_per_kwh[k]) / 1000.0,
        float(env.signals.price_usd_per_kwh[k]) / env._max_price,
        math.sin(ang), math.cos(ang), env._last_viol,
        *reference_obs(env, mix, n_p, n_d, peak),
    ], dtype=np.float32)
    return np.clip(obs, -1.0, 10.0)

def reference_obs(env: PDProvisionEnv, mix: int, n_p: int, n_d: int, peak: float) -> tuple[float, ...]:
    """The OBS_FIELDS entries after ``slo_violation_last`` (what the baselines read)."""
    cfg = env.config
    ref = env._ref
    cache = env.reference.mix_cache(ref.mix)
    row = int(cache.row[min(max(n_p, 1), cfg.max_prefill), min(max(n_d, 1), cfg.max_decode)])
    p_active = float(env._ref_power[row]) if row >= 0 else float(
        cache.model.power_w(n_p, n_d, ref.demand_rps))
    budget_it = env._budget_power_w / cfg.pue
    front = env._front_rows(ref.mix)
    pos = min(int(np.searchsorted(cache.grid.mu[front], ref.capacity_rps)), front.size - 1)
    slots = max(env.front_slots - 1, 1)
    mu = env._mu_list[mix][max(n_p, 1)][max(n_d, 1)]
    rate = env._hist[0]
    return (ref.n_p / cfg.max_prefill, ref.n_d / cfg.max_decode, ref.capacity_rps / peak,
            p_active / budget_it, ref.power_w / budget_it, mu / rate if rate * 10.0 > mu else 10.0,
            *env._last_util, env._backlog / env.backlog_limit, pos / slots, front.size / env.front_slots,
            (env._end - env._k) / max(env._end - env._start, 1))


def state_info(env: PDProvisionEnv) -> dict[str, Any]:
    """The state keys of ``info`` (every step and the reset): deployment, backlog, rates, mix, reference."""
    k = min(env._k, env.signals.base_rate_rps.size - 1)
    mix = int(env.signals.mix_index[k])
    n_p, n_d = env._active
    fc = env.forecast_rates(env._lookahead)
    return {
        "step": env._k, "time_s": float(env._k * env.config.scenario.period_s),
        "hour": float(env.signals.hour[k]), "n_p": n_p, "n_d": n_d,
        "pending_p": len(env._pending[0]), "pending_d": len(env._pending[1]),
        "target_p": env._target[0], "target_d": env._target[1],
        "backlog": env._backlog, "arrived_total": env._arrived, "served_total": env._served,
        "rate_rps": env._hist[0], "forecast_rate_rps": float(fc[0]) if fc.size else 0.0,
        "forecast_max_rps": float(fc.max()) if fc.size else 0.0, "mix_index": mix,
        "mix_weights": env.tables.weights[mix].copy(), "capacity_rps": float(env._mu_list[mix][n_p][n_d]),
        "next_cap_w": float(env.signals.cap_w[k]), "gpu_budget": env.config.gpu_budget,
        "reference_p": env._ref.n_p, "reference_d": env._ref.n_d,
        "reference_capacity_rps": env._ref.capacity_rps, "steps_left": env._end - env._k,
    }


def render(env: PDProvisionEnv) -> str | NDArray[np.uint8] | None:
    """The env's ``render()``: a line of text (``ansi``), a picture (``rgb_array``) or None."""
    if env.render_mode == "rgb_array":
        return render_rgb(env)
    if env.render_mode != "ansi":
        return None
    i = env._last_info
    line = (f"t={i.get('hour', 0.0):05.2f}h step={env._k} {env._active[0]}p{env._active[1]}d "
            f"(+{len(env._pending[0])}p+{len(env._pending[1])}d starting) "
            f"rate={i.get('rate_rps', 0.0):.2f} req/s backlog={env._backlog:.1f} "
            f"power={i.get('power_w', 0.0):.0f} W cap={i.get('cap_w', i.get('next_cap_w', 0.0)):.0f} W "
            f"slo_viol={i.get('slo_violation_pct', 0.0):.2f}%")
    return line

def render_rgb(env: PDProvisionEnv) -> NDArray[np.uint8]:
    """A 96 x 132 RGB picture: prefill and decode instances (active, starting stacked on top, the reference's
    count as a tick), arrival rate / peak (capacity as a tick), backlog / limit, facility power / the
    budget's (power cap as a tick), grid CI / 1000 g/kWh, price / the day's max and last SLO violation share."""
    cfg = env.config
    k = min(env._k, env.signals.base_rate_rps.size - 1)
    mix = int(env.signals.mix_index[k])
    n_p, n_d = env._active
    peak = cfg.scenario.peak_rate_rps
    mp, md = cfg.max_prefill, cfg.max_decode
    return render_bars([
        Bar(n_p / mp, BLUE, len(env._pending[0]) / mp, LIGHT_BLUE, env._ref.n_p / mp),
        Bar(n_d / md, ORANGE, len(env._pending[1]) / md, LIGHT_ORANGE, env._ref.n_d / md),
        Bar(env._hist[0] / peak, GREEN, marker=env._mu_list[mix][n_p][n_d] / peak),
        Bar(env._backlog / env.backlog_limit, RED),
        Bar(env._last_power_w / env._budget_power_w, PURPLE,
            marker=float(env.signals.cap_w[k]) / env._budget_power_w),
        Bar(float(env.signals.ci_g_per_kwh[k]) / 1000.0, GREY),
        Bar(float(env.signals.price_usd_per_kwh[k]) / env._max_price, GREY),
        Bar(env._last_viol, RED),
    ])
