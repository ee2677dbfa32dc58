"""The provisioner of §III-A: per-DC state polled every Δp and broadcast as an immutable snapshot.

Every poll reads the engines' counters (``EnginePool.poll``), averages them over each DC's
engines and attaches the DC's grid CI and PUE. Schedulers see nothing else of the engines:
between polls the :class:`Snapshot` is the only coupling between them and the DCs.

Poll modes:

- ``sync``: every DC is polled at ``k·Δp`` (k = 0, 1, ...).
- ``async`` (staggered): DC ``d`` is polled at ``k·Δp + d·Δp/D``; the snapshot then mixes DCs
  observed at different times (``Snapshot.polled_at_s``). The engine pool's prefill-duty window
  resets at every pool poll (every ``Δp/D`` here), so a DC's duty is the mean of its engines'
  last ``D`` sub-window duties, which is exactly its duty over the last Δp.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from servegym.errors import ConfigError, check_choice

SNAPSHOT_DC_FIELDS = ("batch", "queued_tokens", "kv_tokens", "kv_frac", "prefill_duty", "in_flight")


def _frozen(a: Any, dtype: type = np.float64) -> NDArray:
    out = np.array(a, dtype=dtype, copy=True)
    out.flags.writeable = False
    return out


@dataclass(frozen=True)
class Snapshot:
    """What every scheduler knows about the DCs at one time. Arrays are read-only, shape (D,).

    Fields (per DC d, averaged over its engines unless stated):
        time_s: time of the latest poll (s).
        polled_at_s: when each DC was last polled (s); all equal in ``sync`` mode.
        batch: B_d, requests in the running batch per engine.
        queued_tokens: Q_d, prompt tokens waiting per engine (queued prompts and unfinished
            chunked prefills).
        kv_tokens: KV_d, cached tokens per engine.
        kv_frac: KV occupancy per engine as a fraction of the engine's KV pool.
        prefill_duty: duty_d, fraction of the last Δp the engines spent in prefill steps.
        in_flight: requests per engine that the DC holds: running (in the batch) or waiting in
            the engine queue (requests still in transit to the DC are not counted).
        ci_g_per_kwh: the DC's grid carbon intensity (gCO2/kWh) at ``time_s``.
        pue: the DC's PUE.
        dc_region: index of each DC's region (scheduler).
        rtt_s: regions x DCs, round-trip time from each scheduler to each DC (0 when local), s.
        engines_per_dc: engines in every DC.
    """

    time_s: float
    polled_at_s: NDArray[np.float64]
    batch: NDArray[np.float64]
    queued_tokens: NDArray[np.float64]
    kv_tokens: NDArray[np.float64]
    kv_frac: NDArray[np.float64]
    prefill_duty: NDArray[np.float64]
    in_flight: NDArray[np.float64]
    ci_g_per_kwh: NDArray[np.float64]
    pue: NDArray[np.float64]
    dc_region: NDArray[np.int64]
    rtt_s: NDArray[np.float64]
    engines_per_dc: int

    @property
    def n_dcs(self) -> int:
        return int(self.batch.shape[0])

    def replace(self, **arrays: Any) -> Snapshot:
        """A copy with some per-DC arrays replaced (e.g. a projected ``batch``/``queued_tokens``
        for an iterative ILP); shapes are checked and the new arrays frozen."""
        out: dict[str, Any] = {}
        for name, value in arrays.items():
            if name in ("time_s", "engines_per_dc"):
                out[name] = value
                continue
            cur = getattr(self, name)
            arr = _frozen(value, cur.dtype)
            if arr.shape != cur.shape:
                raise ConfigError(f"Snapshot.{name} must have shape {cur.shape}, got {arr.shape}")
            out[name] = arr
        return replace(self, **out)


class Provisioner:
    """Turns engine statistics into snapshots on the poll schedule.

    Args:
        n_dcs: number of DCs (engines are laid out DC-major: DC d owns engines
            ``[d·E, (d+1)·E)`` with ``E = engines_per_dc``).
        engines_per_dc: engines per DC.
        interval_s: poll period Δp (s).
        mode: ``"sync"`` or ``"async"`` (see the module docstring).
        ci_at: ``t_s -> (D,)`` grid CI in gCO2/kWh at simulated time ``t_s``.
        pue: (D,) PUE per DC.
        dc_region: (D,) region index of every DC.
        rtt_s: (regions, D) scheduler-to-DC RTT in s.
    """

    def __init__(self, n_dcs: int, engines_per_dc: int, interval_s: float, mode: str,
                 ci_at: Callable[[float], NDArray[np.float64]], pue: NDArray[np.float64],
                 dc_region: NDArray[np.int64], rtt_s: NDArray[np.float64]) -> None:
        check_choice("poll_mode", mode, ("sync", "async"), verb="is not allowed")
        self.n_dcs = n_dcs
        self.engines_per_dc = engines_per_dc
        self.interval_s = float(interval_s)
        self.mode = mode
        self.ci_at = ci_at
        self._pue = _frozen(pue)
        self._dc_region = _frozen(dc_region, np.int64)
        self._rtt = _frozen(rtt_s)
        # Between two pool polls: Δp (sync) or Δp/D (async).
        self.step_s = self.interval_s if mode == "sync" else self.interval_s / n_dcs
        self._n_events = 0
        self.last_updated = np.ones(n_dcs, dtype=bool)  # DCs refreshed by the latest observe()
        self._duty_ring = np.zeros((n_dcs if mode == "async" else 1, n_dcs), dtype=np.float64)
        zeros = np.zeros(n_dcs)
        self.snapshot = Snapshot(
            time_s=0.0, polled_at_s=_frozen(zeros), batch=_frozen(zeros), queued_tokens=_frozen(zeros),
            kv_tokens=_frozen(zeros), kv_frac=_frozen(zeros), prefill_duty=_frozen(zeros),
            in_flight=_frozen(zeros), ci_g_per_kwh=_frozen(ci_at(0.0)), pue=self._pue,
            dc_region=self._dc_region, rtt_s=self._rtt, engines_per_dc=engines_per_dc,
        )

    def event_time(self, k: int) -> float:
        """Time of the k-th pool poll (k >= 1; event 0 is the empty start at t = 0)."""
        return k * self.step_s

    def _dc_means(self, a: NDArray) -> NDArray[np.float64]:
        return np.asarray(a, dtype=np.float64).reshape(self.n_dcs, self.engines_per_dc).mean(axis=1)

    def observe(self, t_s: float, stats: Any) -> Snapshot:
        """Record a pool poll at ``t_s`` (an ``EngineStats``) and return the new snapshot."""
        self._n_events += 1
        means = {name: self._dc_means(getattr(stats, name)) for name in SNAPSHOT_DC_FIELDS if name != "in_flight"}
        # A DC knows the requests it holds, running or waiting, not those still on the network.
        means["in_flight"] = self._dc_means(np.asarray(stats.in_flight) + np.asarray(stats.queued))
        snap = self.snapshot
        if self.mode == "sync":
            update = np.ones(self.n_dcs, dtype=bool)
            duty = means["prefill_duty"]
        else:
            self._duty_ring[self._n_events % self.n_dcs] = means["prefill_duty"]
            filled = min(self._n_events, self.n_dcs)
            duty = self._duty_ring.sum(axis=0) / filled
            update = np.zeros(self.n_dcs, dtype=bool)
            update[self._n_events % self.n_dcs] = True
        means["prefill_duty"] = duty
        new: dict[str, Any] = {}
        for name, value in means.items():
            new[name] = _frozen(np.where(update, value, getattr(snap, name)))
        new["polled_at_s"] = _frozen(np.where(update, t_s, snap.polled_at_s))
        new["ci_g_per_kwh"] = _frozen(self.ci_at(t_s))
        self.last_updated = update
        self.snapshot = replace(snap, time_s=float(t_s), **new)
        return self.snapshot
