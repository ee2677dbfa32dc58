"""The geo envs' grid clock (:class:`GridClock`): the CI the DCs see over an episode, its time features and forecast."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from servegym.envs.geo.observations import CI_SCALE_G_PER_KWH
from servegym.envs.geo.sim.config import GeoConfig
from servegym.envs.geo.sim.provisioner import Snapshot


class GridClock:
    """The run's grid clock: the CI every DC sees, the UTC hour, and the CI forecast of the observations.

    The CI clock starts at ``ci_start`` (or the topology's base hour) and runs ``ci_time_scale``
    times faster than simulated time: the CI of DC d at simulated time ``t`` is the real hourly
    series (:meth:`servegym.envs.grid.Topology.ci_matrix`) at hour
    ``floor(start) + floor((s0 + t · ci_time_scale) / 3600 s)``, ``s0`` the seconds of the start hour
    already gone at ``ci_start``, so with the default scale 1 an episode whose simulated time crosses an
    hour follows the series exactly, and with e.g. 120 a 30 s episode spans an hour of grid (a compressed
    day: the fleet's seconds, the grid's hours). The splits start such a compressed clock inside its hour
    (``GeoEnvBase.episode_scenario``), so the boundary falls within the serving window: with whole-hour
    starts it came at ``t = 3600 / 120 = 30 s``, the end of the mini preset's arrivals, and 120 changed
    nothing. Carbon is exact when every hour boundary falls on a poll time (CI is charged per poll interval
    at its start): the splits draw the first boundary at a poll time, and later ones follow when
    ``3600 / ci_time_scale`` is a multiple of the poll period. ``geo.ci_mode = "fixed"`` holds the start hour. Past the
    series' last hour the CI stays at its last value.

    Forecast (``ci_forecast_h = H > 0``): the CI of the next ``H`` clock hours at every DC, with
    multiplicative log-normal noise of ``ci_forecast_noise = σ`` per square-root hour of lead
    (``CI · exp(σ √k z − σ² k / 2)``, unbiased, ``z`` standard normal, drawn once per run, clock
    hour, lead and DC from the run's seed); ``σ = 0`` gives the real series (a perfect forecast).
    """

    def __init__(self, geo: GeoConfig, scale: float = 1.0, forecast_h: int = 0, forecast_noise: float = 0.0,
                 seed: int = 0) -> None:
        import pandas as pd
        from servegym.envs.grid import get_topology

        topo = get_topology(geo.topology)
        start = pd.Timestamp(geo.ci_start) if geo.ci_start is not None else pd.Timestamp(topo.base_hour)
        if start.tzinfo is None:
            start = start.tz_localize("UTC")
        self.start_h = float(start.hour + start.minute / 60.0 + start.second / 3600.0)
        # seconds of the start hour already gone: the clock's first hour boundary comes that much earlier
        self.offset_s = float(start.minute * 60 + start.second + start.microsecond / 1e6)
        self.duration_s = float(geo.duration_s)
        self.scale = float(scale)
        self.fixed = geo.ci_mode == "fixed"
        self._mat = topo.ci_matrix()[1]
        self._pos = topo._hour_pos(start.floor("h"), "ci_start")
        self._last = self._mat.shape[0] - 1
        self.forecast_h = int(forecast_h)
        self.forecast_noise = float(forecast_noise)
        self.seed = int(seed)
        self._fc_cache: dict[int, NDArray[np.float64]] = {}
        self._ci_snap: Snapshot | None = None
        self._ci_stats = (0.0, 0.0)

    def hour_index(self, t_s: NDArray[np.float64] | float) -> NDArray[np.int64]:
        """Clock hours since the start hour at simulated times ``t_s`` (0 in ``fixed`` mode)."""
        t = np.asarray(t_s, dtype=np.float64)
        if self.fixed:
            return np.zeros(t.shape, dtype=np.int64)
        return np.floor((self.offset_s + t * self.scale) / 3600.0).astype(np.int64)

    def _row(self, h: int) -> NDArray[np.float64]:
        return self._mat[min(self._pos + h, self._last)]

    def ci_at(self, t_s: float) -> NDArray[np.float64]:
        """(D,) CI (gCO2/kWh) in force at simulated time ``t_s`` (the simulator's ``ci_at``)."""
        return self._row(int(self.hour_index(t_s)))

    def day_ahead_at(self, t_s: float) -> NDArray[np.float64]:
        """(D,) persistence day-ahead forecast of :meth:`ci_at`: the series 24 clock hours earlier (what the
        snapshots report under ``GeoConfig.ci_signal = "day-ahead"``)."""
        return self._mat[max(self._pos + int(self.hour_index(t_s)) - 24, 0)] if not self.fixed else self.ci_at(t_s)

    def forecast_at_hour(self, h: int) -> NDArray[np.float64]:
        """(H·D,) forecast features at clock hour ``h``: lead-major, CI / 1000 g/kWh clipped to 1."""
        out = self._fc_cache.get(h)
        if out is None:
            hh = self.forecast_h
            lead = np.arange(1, hh + 1)
            ci = np.stack([self._row(h if self.fixed else h + k) for k in lead])  # (H, D)
            if self.forecast_noise > 0:
                z = np.random.default_rng([self.seed, 7919, h]).standard_normal(ci.shape)
                var = self.forecast_noise ** 2 * lead[:, None]
                ci = ci * np.exp(np.sqrt(var) * z - 0.5 * var)
            out = np.minimum(ci / CI_SCALE_G_PER_KWH, 1.0).ravel()
            self._fc_cache[h] = out
        return out

    def forecast(self, t_s: NDArray[np.float64] | float) -> NDArray[np.float64]:
        """(..., H·D) forecast features at simulated times ``t_s``."""
        hours = self.hour_index(t_s)
        flat = hours.reshape(-1)
        out = np.empty((flat.size, self.forecast_h * self._mat.shape[1]))
        for h in np.unique(flat):
            out[flat == h] = self.forecast_at_hour(int(h))
        return out.reshape(*hours.shape, -1)

    def features(self, t_s: NDArray[np.float64] | float, snap: Snapshot) -> NDArray[np.float64]:
        """(..., 5) :data:`TIME_FEATURES` at times ``t_s``."""
        t = np.asarray(t_s, dtype=np.float64)
        ang = 2.0 * np.pi * ((self.start_h + t * (self.scale / 3600.0)) % 24.0) / 24.0
        if self._ci_snap is not snap:  # CI statistics change only with the snapshot
            ci = snap.ci_g_per_kwh
            mean = float(ci.mean())
            self._ci_stats = (mean, float(ci.std() / mean) if mean > 0 else 0.0)
            self._ci_snap = snap
        mean, cv = self._ci_stats
        out = np.empty((*t.shape, 5), dtype=np.float64)
        out[..., 0] = np.clip(t / self.duration_s, 0.0, 1.0)
        out[..., 1] = np.sin(ang)
        out[..., 2] = np.cos(ang)
        out[..., 3] = min(mean / CI_SCALE_G_PER_KWH, 1.0)
        out[..., 4] = min(cv, 1.0)
        return out
