"""The fleet as the fluid NPU model's serving step sees it over one interval, cached while it cannot change.

Per interval [t0, t1) of :meth:`~servegym.envs.npu.sim.fluid.FluidCluster._chunk` the serving step needs, per
group, the ready vPod-equivalents, static and rental rates, batch slots, the dominant configuration, the
prefill capacity per batch level, and the routes. They depend on the vPods (group, configuration, ready and
deletion times), the targets and the interval, not on the traffic. In a steady interval (every live vPod
ready by t0 or not before t1, and none whose deletion ends within it) each vPod's ready and held shares are
exactly 1 or 0, so the view is the same for every interval of the same length until the fleet, the targets or
the set of ready vPods changes: it is computed once and reused (a 24-h episode mostly runs in steady state
between scaling decisions, and a booting vPod only breaks it in the interval it becomes ready). The cache key is
the vPod arrays' version (bumped wherever they change), how many vPods are live and ready, the targets' version
and the interval length, so a hit returns the arrays the full computation would give, bit for bit (tested against
the uncached view); and in a steady interval every profile bin's capacity is the interval's (``cap``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray
from servegym.envs.npu.sim.config import NB
from servegym.envs.npu.sim.fluid_books import fleet_state, fleet_view_sums

if TYPE_CHECKING:
    from servegym.envs.npu.sim.fluid import FluidCluster

_AR = np.arange(NB)


@dataclass
class FleetView:
    """Fleet aggregates of one interval of length ``T`` (s). Per group (96): ``n_ready`` ready vPod-equivalents,
    ``psr`` / ``psa`` static power (W) of the ready / held vPods, ``usd_s`` / ``usd_ready`` rental (USD/s) of the
    held / ready vPods, ``chip_s`` chips held (per s), ``slots`` batch slots of the ready vPods, ``unavail`` the
    wait (s) for the group's first ready vPod, ``dom`` the dominant configuration. Prefill (48 groups x levels):
    ``cap`` capacity in best-level vPod-equivalents, ``pbusy`` busy power (W). ``tps_best`` (48 groups x 48
    buckets) tokens/s of each prefill group's dominant configuration at its best level; ``latd`` decode step
    latency (s) per (group, bucket, level) of each decode group's dominant configuration. ``vg``, ``vc``,
    ``vr``, ``serving``, ``tps_v``: the live vPods' group, configuration, ready time, not-deleting flag and
    per-level tokens/s relative to their best level (the per-bin TTFT capacity reads them); ``steady``: every
    live vPod's ready and held shares are exactly 0 or 1 (then a bin's capacity is ``cap``). ``gp``: prefill route of every
    input bucket; ``act``: the routable decode groups (bucket indices)."""

    T: float
    n_ready: NDArray[np.float64]
    psr: NDArray[np.float64]
    psa: NDArray[np.float64]
    usd_s: NDArray[np.float64]
    usd_ready: NDArray[np.float64]
    chip_s: NDArray[np.float64]
    slots: NDArray[np.float64]
    unavail: NDArray[np.float64]
    dom: NDArray[np.int64]
    cap: NDArray[np.float64]
    pbusy: NDArray[np.float64]
    tps_best: NDArray[np.float64]
    latd: NDArray[np.float64]
    vg: NDArray[np.int64]
    vc: NDArray[np.int64]
    vr: NDArray[np.float64]
    serving: NDArray[np.bool_]
    tps_v: NDArray[np.float64]
    steady: bool
    gp: NDArray[np.int64]
    act: NDArray[np.int64]


def fleet_view(sim: FluidCluster, t0: float, t1: float) -> FleetView:
    """The :class:`FleetView` of ``sim`` over [t0, t1) (module docstring), from its cache when steady."""
    n_live, n_ready, steady = fleet_state(sim.v_ready, sim.v_gone, t0, t1)
    # every live vPod is ready over the whole interval or not before its end, and held to its end: its ready and
    # held shares are exactly 1 or 0, so the view depends on which vPods are ready and serving, not on t0. While the
    # vPod arrays stay as they are (``fleet_version``), the live vPods and the ready ones among them are threshold
    # sets of their deletion and ready times, named by their counts
    key = (t1 - t0, sim.targets_version, sim.fleet_version, n_live, n_ready) if steady else None
    if key is not None:
        hit = sim._fleet_cache
        if hit is not None and hit[0] == key:
            return hit[1]
    view = _compute(sim, sim.v_gone > t0, t0, t1, steady)
    if key is not None:
        sim._fleet_cache = (key, view)
    return view


def _compute(sim: FluidCluster, live: NDArray[np.bool_], t0: float, t1: float, steady: bool) -> FleetView:
    T = t1 - t0
    # each vPod's ready share (serving ones) and held share of the interval, summed per group in one compiled pass
    # (groups without a vPod: their target's configuration, else the bucket's best fit; the per-group sums as rows)
    vg, vc, vr, serving, tps_v, rows, dom, cap, pbusy = fleet_view_sums(
        live, sim.v_group, sim.v_cfg, sim.v_ready, sim.v_gone, t0, t1, sim.cfg_static_w, sim.cfg_usd_s, sim.cfg_maxb,
        sim.cfg_chips, sim.tps, sim.pow, 2 * NB, sim._dom_targets(), sim._fallback)
    n_ready, psr, psa, usd_s, usd_ready, slots, chip_s, unavail = rows
    # the dominant configurations' step tables, reused while they stay the same (read only)
    key = dom.tobytes()
    hit = sim._dom_tables
    if hit is None or hit[0] != key:
        hit = sim._dom_tables = (key, np.maximum(sim.tps[dom[:NB], :, -1], 1e-12), sim.lat[dom[NB:]])
    tps_best, latd = hit[1], hit[2]
    _, act, gp, _ = sim._routes()
    return FleetView(T, n_ready, psr, psa, usd_s, usd_ready, chip_s, slots, unavail, dom, cap, pbusy, tps_best, latd,
                     vg, vc, vr, serving, tps_v, steady, gp, act)
