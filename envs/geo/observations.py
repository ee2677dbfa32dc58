"""The observation features the two geo envs share: per-DC snapshot features, time and grid features, the
forecast and residual blocks' names, the squashing maps and the renderings (each env lays its own blocks out:
:func:`~servegym.envs.geo.env_route.route_observation_names`, :func:`~servegym.envs.geo.env_window.window_observation_names`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray
from servegym.envs.geo.sim.cluster import GeoSimulation
from servegym.envs.geo.sim.provisioner import Snapshot

#: Carbon intensity that maps to 1.0 in the observations (g/kWh); coal-heavy grids reach ~900.
CI_SCALE_G_PER_KWH = 1000.0
#: Highest PUE the configs allow (``GeoConfig.pue`` range); PUE features are ``(PUE - 1) / 2``.
PUE_MAX = 3.0

#: Per-DC snapshot features, in observation order (each a block of D values, DC index order).
DC_FEATURES: tuple[str, ...] = (
    "batch_frac",        # B_d / max_num_seqs: running batch per engine
    "queue",             # squash(Q_d / max_num_batched_tokens): queued prompt tokens per engine, in prefill chunks
    "kv_frac",           # KV-cache occupancy per engine
    "prefill_duty",      # share of the last poll period spent in prefill
    "headroom_frac",     # H_d / (engines x max_num_seqs): batch-slot headroom of the estimator
    "ci",                # CI_d / 1000 g/kWh, clipped to 1
    "pue",               # (PUE_d - 1) / 2
    "age",               # (t - polled_at_d) / poll_interval_s, clipped to 1: staleness of d's row
    "own_dispatched",    # squash(own dispatches to d since d's last poll / engines per DC)
)
#: Estimator residuals per DC (``observe_residuals``), each a block of D values: an exponential
#: moving average (weight :data:`RESIDUAL_EMA` per poll with finishes at the DC) of
#: ``(realized - predicted) / SLO`` over the requests that finished at the DC, TTFT and TPOT, squashed
#: by ``tanh`` (0: the estimator was right; > 0: it was optimistic).
RESIDUAL_FEATURES: tuple[str, ...] = ("ttft_resid", "tpot_resid")
RESIDUAL_EMA = 0.3
#: Time / grid features, in observation order (scalars).
TIME_FEATURES: tuple[str, ...] = (
    "progress",          # t / duration_s, clipped to 1
    "hour_sin",          # sin(2 pi h / 24), h the UTC hour of the CI clock (ci_start + t)
    "hour_cos",          # cos(2 pi h / 24)
    "ci_mean",           # mean CI over DCs / 1000 g/kWh, clipped to 1
    "ci_cv",             # std / mean of CI over DCs, clipped to 1
)


def squash(x: NDArray[np.float64] | float) -> NDArray[np.float64] | float:
    """``x / (1 + x)`` for ``x >= 0``: a monotone map of [0, inf) onto [0, 1) (1 -> 0.5)."""
    return x / (1.0 + x)


def dc_static_features(sim: GeoSimulation, snap: Snapshot) -> NDArray[np.float64]:
    """The snapshot's per-DC features that do not depend on the request or the time:
    (7, D) rows ``batch_frac .. pue`` of :data:`DC_FEATURES`."""
    prof = sim.profile
    s = float(prof.max_num_seqs)
    out = np.empty((7, sim.n_dcs), dtype=np.float64)
    out[0] = np.minimum(snap.batch / s, 1.0)
    out[1] = squash(snap.queued_tokens / float(prof.max_num_batched_tokens))
    out[2] = np.clip(snap.kv_frac, 0.0, 1.0)
    out[3] = np.clip(snap.prefill_duty, 0.0, 1.0)
    out[4] = np.clip(sim.estimator.headroom_requests(snap) / (snap.engines_per_dc * s), 0.0, 1.0)
    out[5] = np.minimum(snap.ci_g_per_kwh / CI_SCALE_G_PER_KWH, 1.0)
    out[6] = np.clip((snap.pue - 1.0) / (PUE_MAX - 1.0), 0.0, 1.0)
    return out



def forecast_names(n_dcs: int, hours: int, residuals: bool = False) -> list[str]:
    """Names of the forecast block (lead-major): ``ci_fc<k>h[d]``, k = 1..hours, then the residual
    block (:data:`RESIDUAL_FEATURES`) when ``residuals``."""
    names = [f"ci_fc{k}h[{d}]" for k in range(1, hours + 1) for d in range(n_dcs)]
    return names + ([f"{f}[{d}]" for f in RESIDUAL_FEATURES for d in range(n_dcs)] if residuals else [])


def reference_carbon_g(sim: GeoSimulation) -> float:
    """Carbon scale of the observations (gCO2): the estimated engine energy of a mean-length
    request on an idle engine, at PUE 1 and 1000 g/kWh."""
    snap = sim.provisioner.snapshot
    est = sim.estimator.estimate(snap, np.array([sim.isl_mean]), np.array([sim.osl_mean]), np.array([0]))
    return max(float(est.energy_j.mean()) * CI_SCALE_G_PER_KWH / 3.6e6, 1e-12)


def render_ansi(t_s: float, snap: Snapshot, info: dict[str, Any], extra: str = "") -> str:
    """One line of state: time, per-DC batch/queue/CI, running carbon and SLO figures."""
    dcs = " ".join(
        f"[{d}:B{snap.batch[d]:.0f} Q{snap.queued_tokens[d]:.0f} CI{snap.ci_g_per_kwh[d]:.0f}]"
        for d in range(snap.n_dcs)
    )
    return (f"t={t_s:8.3f}s {extra} {dcs} carbon={info.get('carbon_g', 0.0):.2f}g "
            f"viol={info.get('slo_violation_pct', 0.0):.2f}% fin={info.get('finished', 0)}")


def render_rgb(snap: Snapshot, max_num_seqs: int, highlight: NDArray[np.bool_] | None = None) -> NDArray[np.uint8]:
    """A 96 x (32 D) RGB bar chart: per DC, batch load (blue) and CI (grey, 1000 g/kWh = full);
    a green strip under the DCs in ``highlight`` (the action mask)."""
    h, bw = 96, 32
    d = snap.n_dcs
    img = np.full((h, bw * d, 3), 255, dtype=np.uint8)
    load = np.clip(snap.batch / float(max_num_seqs), 0.0, 1.0)
    ci = np.clip(snap.ci_g_per_kwh / CI_SCALE_G_PER_KWH, 0.0, 1.0)
    top = h - 8
    rows = np.arange(top)[:, None]
    for i, (frac, color, x0) in enumerate(((load, (40, 90, 200), 3), (ci, (110, 110, 110), 17))):
        del i
        filled = rows >= top - np.round(frac * top)[None, :]  # (top, D)
        for k in range(d):
            img[:top, k * bw + x0:k * bw + x0 + 12][filled[:, k]] = color
    if highlight is not None:
        for k in np.flatnonzero(highlight):
            img[top + 2:h - 1, k * bw + 2:(k + 1) * bw - 2] = (40, 170, 60)
    return img


def safe_ratio_squash(x: NDArray[np.float64], scale: float) -> NDArray[np.float64]:
    """``squash(x / scale)`` with non-finite or huge ratios mapped to (just under) 1."""
    r = np.fmin(np.asarray(x, dtype=np.float64) / scale, 1e9)  # fmin: NaN -> 1e9, inf -> 1e9
    return r / (1.0 + r)
