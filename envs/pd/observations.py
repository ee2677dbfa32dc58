"""What the pd env shows: the observation vector (:data:`OBS_FIELDS`, one type for every action mode) and the
``ansi`` / ``rgb_array`` renderings, computed from the config, the model's constants and the episode's state
(:class:`~servegym.envs.pd.sim.state.PDParams`, :class:`~servegym.envs.pd.sim.state.PDState`), never the env
(the env's ``_obs``, ``_state_info`` and ``render`` call these)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from servegym.render import BLUE, GREEN, GREY, LIGHT_BLUE, LIGHT_ORANGE, ORANGE, PURPLE, RED, Bar, render_bars

if TYPE_CHECKING:
    from servegym.envs.pd.env_config import PDEnvConfig
    from servegym.envs.pd.sim.state import PDParams, PDState

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
#: Entries appended when the config's ``rate_ema_periods`` is on (the pd stress tracks): the day's level so far.
LEVEL_FIELDS: tuple[str, ...] = (
    "rate_level_ema",  # EMA (time constant rate_ema_periods) of observed rate / smooth rate: the day's level
    "level_forecast_next / peak",  # smooth mean rate of the coming period x rate_level_ema
    "level_forecast_max / peak",  # max of smooth mean rate x rate_level_ema over the forecast's periods
)


def obs_fields(cfg: PDEnvConfig) -> tuple[str, ...]:
    """The observation's entries under ``cfg``: :data:`OBS_FIELDS`, then :data:`LEVEL_FIELDS` if
    ``rate_ema_periods`` is on."""
    return OBS_FIELDS + LEVEL_FIELDS if cfg.rate_ema_periods else OBS_FIELDS


def observe(cfg: PDEnvConfig, params: PDParams, state: PDState) -> NDArray[np.float32]:
    """The observation vector (:func:`obs_fields`, clipped to [-1, 10])."""
    k = min(state.k, state.signals.base_rate_rps.size - 1)
    mix = int(state.signals.mix_index[k])
    peak = cfg.scenario.peak_rate_rps
    fc = state.forecast_rates(params.lookahead)
    n_p, n_d = state.active
    cap = float(state.signals.cap_w[k])
    hour = float(state.signals.hour[k])
    ang = 2.0 * math.pi * hour / 24.0
    w = state.tables.weights[mix]
    obs = np.array([
        *(h / peak for h in state.hist),
        (float(fc[0]) if fc.size else 0.0) / peak, (float(fc.max()) if fc.size else 0.0) / peak,
        w[0], w[1], w[2],
        state.tables.in_mean[mix] / 1e4, state.tables.out_mean[mix] / 1e3,
        n_p / cfg.max_prefill, n_d / cfg.max_decode,
        len(state.pending[0]) / cfg.max_prefill, len(state.pending[1]) / cfg.max_decode,
        state.mu_list[mix][n_p][n_d] / peak,
        math.log1p(state.backlog) / 10.0,
        cap / params.budget_power_w, state.last_power_w / max(cap, 1e-9),
        float(state.signals.ci_g_per_kwh[k]) / 1000.0,
        float(state.signals.price_usd_per_kwh[k]) / state.max_price,
        math.sin(ang), math.cos(ang), state.last_viol,
        *reference_obs(cfg, params, state, mix, n_p, n_d, peak),
        *(level_obs(params, state, peak) if params.level_alpha else ()),
    ], dtype=np.float32)
    return np.clip(obs, -1.0, 10.0)


def level_obs(params: PDParams, state: PDState, peak: float) -> tuple[float, ...]:
    """The :data:`LEVEL_FIELDS` entries."""
    fc = state.level_forecast_rates(params.lookahead)
    return (state.level, (float(fc[0]) if fc.size else 0.0) / peak, (float(fc.max()) if fc.size else 0.0) / peak)


def reference_obs(cfg: PDEnvConfig, params: PDParams, state: PDState, mix: int, n_p: int, n_d: int, peak: float
                  ) -> tuple[float, ...]:
    """The OBS_FIELDS entries after ``slo_violation_last`` (what the baselines read)."""
    ref = state.ref
    cache = state.rule.mix_cache(ref.mix)
    row = int(cache.row[min(max(n_p, 1), cfg.max_prefill), min(max(n_d, 1), cfg.max_decode)])
    p_active = float(state.ref_power[row]) if row >= 0 else float(
        cache.model.power_w(n_p, n_d, ref.demand_rps))
    budget_it = params.budget_power_w / cfg.pue
    front = state.front_rows(ref.mix, params.front_slots)
    pos = min(int(np.searchsorted(cache.grid.mu[front], ref.capacity_rps)), front.size - 1)
    slots = max(params.front_slots - 1, 1)
    mu = state.mu_list[mix][max(n_p, 1)][max(n_d, 1)]
    rate = state.hist[0]
    return (ref.n_p / cfg.max_prefill, ref.n_d / cfg.max_decode, ref.capacity_rps / peak,
            p_active / budget_it, ref.power_w / budget_it, mu / rate if rate * 10.0 > mu else 10.0,
            *state.last_util, state.backlog / params.backlog_limit, pos / slots,
            front.size / params.front_slots,
            (state.end - state.k) / max(state.end - state.start, 1))


def state_info(cfg: PDEnvConfig, params: PDParams, state: PDState) -> dict[str, Any]:
    """The state keys of ``info`` (every step and the reset): deployment, backlog, rates, mix, reference."""
    k = min(state.k, state.signals.base_rate_rps.size - 1)
    mix = int(state.signals.mix_index[k])
    n_p, n_d = state.active
    fc = state.forecast_rates(params.lookahead)
    out = {
        "step": state.k, "time_s": float(state.k * cfg.scenario.period_s),
        "hour": float(state.signals.hour[k]), "n_p": n_p, "n_d": n_d,
        "pending_p": len(state.pending[0]), "pending_d": len(state.pending[1]),
        "target_p": state.target[0], "target_d": state.target[1],
        "backlog": state.backlog, "arrived_total": state.arrived, "served_total": state.served,
        "rate_rps": state.hist[0], "forecast_rate_rps": float(fc[0]) if fc.size else 0.0,
        "forecast_max_rps": float(fc.max()) if fc.size else 0.0, "mix_index": mix,
        "mix_weights": state.tables.weights[mix].copy(), "capacity_rps": float(state.mu_list[mix][n_p][n_d]),
        "next_cap_w": float(state.signals.cap_w[k]), "gpu_budget": cfg.gpu_budget,
        "reference_p": state.ref.n_p, "reference_d": state.ref.n_d,
        "reference_capacity_rps": state.ref.capacity_rps, "steps_left": state.end - state.k,
    }
    if params.level_alpha:  # the level entries (config rate_ema_periods), what min-power+ema reads
        lf = state.level_forecast_rates(params.lookahead)
        out.update(rate_level_ema=state.level, level_forecast_rps=float(lf[0]) if lf.size else 0.0,
                   level_forecast_max_rps=float(lf.max()) if lf.size else 0.0)
    return out


def render(cfg: PDEnvConfig, params: PDParams, state: PDState, render_mode: str | None
           ) -> str | NDArray[np.uint8] | None:
    """The env's ``render()`` in ``render_mode``: a line of text (``ansi``), a picture (``rgb_array``) or
    None."""
    if render_mode == "rgb_array":
        return render_rgb(cfg, params, state)
    if render_mode != "ansi":
        return None
    i = state.last_info
    line = (f"t={i.get('hour', 0.0):05.2f}h step={state.k} {state.active[0]}p{state.active[1]}d "
            f"(+{len(state.pending[0])}p+{len(state.pending[1])}d starting) "
            f"rate={i.get('rate_rps', 0.0):.2f} req/s backlog={state.backlog:.1f} "
            f"power={i.get('power_w', 0.0):.0f} W cap={i.get('cap_w', i.get('next_cap_w', 0.0)):.0f} W "
            f"slo_viol={i.get('slo_violation_pct', 0.0):.2f}%")
    return line

def render_rgb(cfg: PDEnvConfig, params: PDParams, state: PDState) -> NDArray[np.uint8]:
    """A 96 x 132 RGB picture: prefill and decode instances (active, starting stacked on top, the reference's
    count as a tick), arrival rate / peak (capacity as a tick), backlog / limit, facility power / the
    budget's (power cap as a tick), grid CI / 1000 g/kWh, price / the day's max and last SLO violation share."""
    k = min(state.k, state.signals.base_rate_rps.size - 1)
    mix = int(state.signals.mix_index[k])
    n_p, n_d = state.active
    peak = cfg.scenario.peak_rate_rps
    mp, md = cfg.max_prefill, cfg.max_decode
    return render_bars([
        Bar(n_p / mp, BLUE, len(state.pending[0]) / mp, LIGHT_BLUE, state.ref.n_p / mp),
        Bar(n_d / md, ORANGE, len(state.pending[1]) / md, LIGHT_ORANGE, state.ref.n_d / md),
        Bar(state.hist[0] / peak, GREEN, marker=state.mu_list[mix][n_p][n_d] / peak),
        Bar(state.backlog / params.backlog_limit, RED),
        Bar(state.last_power_w / params.budget_power_w, PURPLE,
            marker=float(state.signals.cap_w[k]) / params.budget_power_w),
        Bar(float(state.signals.ci_g_per_kwh[k]) / 1000.0, GREY),
        Bar(float(state.signals.price_usd_per_kwh[k]) / state.max_price, GREY),
        Bar(state.last_viol, RED),
    ])
