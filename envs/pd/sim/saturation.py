"""Saturation throughput of a deployment on the request-level simulator: a Poisson load above the analytical
capacity mu, a warm-up, then completed requests per second over a steady window with a batch-means standard
error (``servegym pd simulate --saturation``, ``benchmarks/pd_crosscheck.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from servegym.envs.pd.sim.model import PDModel
from servegym.envs.pd.sim.simulator import PDSimulator
from servegym.envs.workload import LengthSampler, Requests, poisson_arrivals

from servegym.errors import check_range


@dataclass(frozen=True)
class Saturation:
    """Simulated saturation throughput of one deployment (req/s) next to the analytical capacity."""

    n_p: int
    n_d: int
    mu_model: float  # analytical capacity, req/s
    offered_rps: float  # Poisson load offered, req/s
    throughput_rps: float  # completed requests in the measurement window / window length
    stderr_rps: float  # standard error from batch means over the window
    warmup_s: float
    window_s: float
    mean_batch: float  # time-averaged decode batch per busy decode instance
    mean_power_w: float  # deployment power over the window, W
    retractions: int

    @property
    def rel_error(self) -> float:
        """(mu_model - simulated) / simulated."""
        return (self.mu_model - self.throughput_rps) / self.throughput_rps


def saturation_throughput(model: PDModel, n_p: int, n_d: int, lengths: LengthSampler, *,
                          load_factor: float = 1.25, warmup_s: float | None = None,
                          window_s: float | None = None, batches: int = 10, seed: int = 0) -> Saturation:
    """Saturation throughput: completed req/s over a steady window under a Poisson load above mu.

    Definition: offer Poisson arrivals at ``load_factor * mu_model`` (default 1.25) with lengths from
    ``lengths``; discard ``warmup_s`` (default max(600 s, 3,000 / mu)) while the queues fill and the
    decode pools reach their reservation-limited state; then count completions over ``window_s``
    (default max(1,200 s, 12,000 / mu), i.e. at least ~12,000 completions) and divide by its length. The
    admission queue grows throughout, so every instance stays saturated. The standard error comes from
    ``batches`` equal sub-windows (batch means).
    """
    check_range("load_factor", load_factor, 1.0, 10.0, low_inclusive=False)
    mu = float(model.capacity(n_p, n_d).mu)
    warm = max(600.0, 3_000.0 / mu) if warmup_s is None else float(warmup_s)
    win = max(1_200.0, 12_000.0 / mu) if window_s is None else float(window_s)
    rng = np.random.default_rng(seed)
    rate = load_factor * mu
    arrivals = poisson_arrivals(rate, warm + win, rng)
    isl, osl = lengths.sample(arrivals.size, rng)
    sim = PDSimulator(model, n_p, n_d, seed=seed)
    sim.submit(Requests(arrivals, isl, osl))
    sim.advance(warm)
    sim.window_metrics()
    counts, energy, batch_time = [], 0.0, 0.0
    for i in range(1, batches + 1):
        sim.advance(warm + win * i / batches)
        w = sim.window_metrics()
        counts.append(w["finished"])
        energy += w["energy_j"]
        batch_time += w["mean_batch"]
    sub = win / batches
    rates = np.asarray(counts, dtype=float) / sub
    return Saturation(n_p=int(n_p), n_d=int(n_d), mu_model=mu, offered_rps=rate,
                      throughput_rps=float(rates.mean()), stderr_rps=float(rates.std(ddof=1) / np.sqrt(batches)),
                      warmup_s=warm, window_s=win, mean_batch=batch_time / batches, mean_power_w=energy / win,
                      retractions=sim.retractions)
