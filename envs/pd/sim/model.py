"""Analytical serving-capacity and power model of a prefill-decode (PD) disaggregated deployment.

Implements §3-4 and Algorithm 1 of the PD provisioning paper (shared/papers/pd-power-aware-provisioning.md):

* prefill (compute roofline, eqs. 3-5): t_P(l) = a_P l + b_P l^2 with a_P = 2N / (pi MFU),
  b_P = c_a L d / (pi MFU); mu_P = 1 / E[t_P]  (s, req/s);
* decode (memory roofline with overheads, eqs. 8, 9, 30): t_D = a_D + b_D B with
  a_D = 2N / (beta MBU) + t_iter, b_D = kappa l_ctx / (beta MBU) + t_req; mu_D(B) = B / (E[l_out-1] t_D);
* operating batch B: the root of the KV memory balance g(B) = 0 (eq. 10 / §4.2) with prefill reservations
  l_in + R held for the Kingman waiting time (eq. 21, CVa^2 = 1/n_P) plus the prefill time, decode
  occupancy B (l_ctx + R) and the unused space E[(l_in+R)^2] / (2 E[l_in+R]) (eq. 24); unique in
  (0, min(B_max, B_rho)) (Theorem 4.3);
* deployment capacity mu = min(n_P mu_P, n_D mu_D) (eq. 2) and full-pool capacity mu_D^max = mu_D(B_max);
* power (eqs. 12-14): capped ramps of normalized throughput, balanced load, summed over instances.

Admission semantics (the same in :mod:`servegym.envs.pd.sim.simulator`; paper §4.2, SGLang 0.5.9
``disaggregation/decode.py``): a request is routed round-robin to a decode instance on arrival and is
*admitted* when that instance's ``DecodePreallocQueue`` pre-allocates ``l_in`` slots for it while keeping
``R`` free per request it already holds (the admission test ``free >= l_in + R``, FCFS with head-of-line
blocking). Only then does its prefill server receive it (the bootstrap handshake completes), so a request
holds ``l_in + R`` from admission through its prefill wait and service, and ``l_ctx + R`` while decoding.
While the pool cannot fit the head request, arrivals wait in the pre-allocation queue *without* memory.
The paper's prefill wait t_W is counted from admission (Lemma 4.2), and the model estimates it with
Kingman's formula for the whole prefill queue: it assumes every request waiting for prefill holds its
reservation, i.e. that admission itself never waits. Its capacity mu is therefore the largest rate at
which the mean reserved prefill queue still fits in the pool. Above it the simulator (and SGLang) can keep
serving more, with the overflow waiting unreserved, up to the saturation throughput: the model is
conservative wherever the Kingman queue of reservations is a large share of the pool. This matters for a
single prefill instance with heavy-tailed inputs (Mooncake 1p1d: mu = 0.81 vs a simulated saturation of
0.86 req/s, see ``benchmarks/results/pd_crosscheck.md``); the opposite bound, no reserved waiting at all
(t_W = 0, :meth:`PDModel.no_wait_capacity`), overshoots the simulation by up to 16% (Mooncake 4p2d),
because round-robin prefill queues fed by memory-gated admission do idle.

Two capacity semantics (``PDModel(..., semantics=...)``):

* ``"paper"`` (default): the paper's model as published, reservation held during the whole Kingman wait of a
  Poisson stream split round-robin over n_P instances (CV_a^2 = 1/n_P, eq. 21). Kept as the paper's model:
  its error against the simulator (up to 6.4%, Mooncake 1p1d) is model error, as the paper's own 3.0% MAPE
  against its measurements is.
* ``"sglang"`` (beyond the paper; KV held only once admitted): at saturation requests are admitted only when
  finished ones release memory, so the stream into the prefill queues is paced by the pool rather than by
  the arrivals; it is taken as regular (CV_a^2 = 0) and only the prefill service-time variability CV_s^2
  leaves reserved requests waiting. Same memory balance, same root-finding; with deterministic prefill
  (fixed lengths) the wait term vanishes and the capacity is the no-wait bound. Compared side by side with
  the paper's semantics in ``benchmarks/results/pd_crosscheck.md``.

Below capacity admission rarely waits, so :meth:`PDModel.operating_point` uses the Poisson (CV_a^2 = 1/n_P)
Kingman wait for TTFT under both semantics; only the capacity balance differs.

:class:`PDModel` binds a :class:`~servegym.envs.pd.sim.catalog.PDSystem` to a workload and caches the
deployment-independent coefficients; :meth:`PDModel.capacity` is the scalar path (``scipy.optimize.brentq``,
as in the paper) and :meth:`PDModel.grid` evaluates many deployments at once with a vectorized bisection
on the same bracket. The request-level simulator can reuse :meth:`PDModel.prefill_time_s` and
:meth:`PDModel.decode_iteration_time_s` for per-request / per-iteration timing.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import brentq
from servegym.envs.pd.sim.catalog import PDSystem, paper_system
from servegym.envs.pd.sim.workload_moments import WorkloadMoments

from servegym.errors import ConfigError, choice_error

#: Admission semantics of the capacity model (see the module docstring): ``paper`` (default) charges the
#: whole Kingman prefill wait to KV reservations; ``sglang`` holds KV only once admitted.
SEMANTICS = ("paper", "sglang")
_DEPLOYMENT = re.compile(r"^\s*(\d+)\s*p\s*(\d+)\s*d\s*$", re.IGNORECASE)
MAX_INSTANCES_PER_POOL = 4096


def parse_deployment(spec: str) -> tuple[int, int]:
    """``"3p2d"`` -> (3, 2). Both counts must be >= 1."""
    m = _DEPLOYMENT.match(spec)
    if not m:
        raise ConfigError(f"deployment {spec!r} is not of the form <n_P>p<n_D>d (e.g. 3p2d)")
    n_p, n_d = int(m.group(1)), int(m.group(2))
    check_deployment(n_p, n_d)
    return n_p, n_d


def check_deployment(n_p: int, n_d: int) -> None:
    for name, v in (("n_P", n_p), ("n_D", n_d)):
        if int(v) != v or not 1 <= v <= MAX_INSTANCES_PER_POOL:
            raise ConfigError(f"deployment {name} = {v!r}; allowed: integer in [1, {MAX_INSTANCES_PER_POOL}]")


def deployment_label(n_p: int, n_d: int) -> str:
    return f"{int(n_p)}p{int(n_d)}d"


def all_deployments(max_instances: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Every (n_P, n_D) with n_P, n_D >= 1 and n_P + n_D <= max_instances, ordered by n_P then n_D."""
    if int(max_instances) != max_instances or not 2 <= max_instances <= 2 * MAX_INSTANCES_PER_POOL:
        raise ConfigError(f"max_instances = {max_instances!r}; allowed: integer in [2, {2 * MAX_INSTANCES_PER_POOL}]")
    n_p, n_d = np.meshgrid(np.arange(1, max_instances), np.arange(1, max_instances), indexing="ij")
    keep = (n_p + n_d) <= max_instances
    return n_p[keep].astype(np.int64), n_d[keep].astype(np.int64)


@dataclass(frozen=True)
class Capacity:
    """Capacity of one deployment (req/s unless stated)."""

    n_p: int
    n_d: int
    mu: float  # deployment serving capacity, eq. (2)
    mu_p: float  # per prefill instance
    mu_d: float  # per decode instance at the operating batch
    batch: float  # operating batch B (requests)
    mu_d_max: float  # full-pool decode capacity per instance, mu_D(B_max)
    b_max: float  # full-pool batch (requests)
    rho_p: float  # prefill utilization at the operating point
    wait_s: float  # Kingman mean prefill wait at the operating point, s
    t_d_s: float  # mean decode-iteration time at B, s
    power_w: float  # deployment power at lambda = mu, W

    @property
    def label(self) -> str:
        return deployment_label(self.n_p, self.n_d)

    def as_dict(self) -> dict[str, float | int | str]:
        d: dict[str, float | int | str] = {"deployment": self.label}
        d.update(asdict(self))
        return d


@dataclass(frozen=True)
class CapacityGrid:
    """Capacities and powers of many deployments (arrays aligned with ``n_p``/``n_d``)."""

    n_p: NDArray[np.int64]
    n_d: NDArray[np.int64]
    mu: NDArray[np.float64]  # req/s
    mu_d: NDArray[np.float64]  # req/s per decode instance
    batch: NDArray[np.float64]  # requests
    power_w: NDArray[np.float64]  # W at lambda = mu
    mu_p: float  # req/s per prefill instance
    mu_d_max: float  # req/s per decode instance

    def __len__(self) -> int:
        return int(self.n_p.size)

    def labels(self) -> list[str]:
        return [deployment_label(p, d) for p, d in zip(self.n_p, self.n_d, strict=True)]

    def index(self, n_p: int, n_d: int) -> int:
        hit = np.flatnonzero((self.n_p == n_p) & (self.n_d == n_d))
        if hit.size == 0:
            raise ConfigError(f"deployment {deployment_label(n_p, n_d)} is not in this grid")
        return int(hit[0])


@dataclass(frozen=True)
class OperatingPoint:
    """Steady state of a deployment at an offered rate under balanced load (fluid view, below capacity)."""

    n_p: int
    n_d: int
    rate: float  # offered, req/s
    served: float  # min(rate, mu), req/s
    rho_p: float  # prefill utilization served / (n_P mu_P)
    wait_s: float  # Kingman mean prefill wait, s (inf when rate >= mu: the queue grows)
    ttft_s: float  # wait + E[t_P], s (KV transfer not modeled)
    batch: float  # mean decode batch per instance (Little's law), requests
    tpot_s: float  # mean decode-iteration time a_D + b_D B, s
    power_w: float  # W

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


class PDModel:
    """The analytical model for one system and one workload (Algorithm 1 plus the power model)."""

    def __init__(self, workload: WorkloadMoments, system: PDSystem | None = None, *,
                 semantics: str = "paper") -> None:
        if semantics not in SEMANTICS:
            raise choice_error("semantics", semantics, SEMANTICS)
        self.semantics = semantics
        self.system = paper_system() if system is None else system
        self.workload = w = workload
        hw, mdl, cal, srv = self.system.hardware, self.system.model, self.system.calibration, self.system.serving
        r = srv.reserve_tokens
        # Prefill, eqs. (4)-(5).
        self.a_p = 2.0 * mdl.n_params / (hw.peak_flops * cal.mfu)  # s/token
        self.b_p = cal.c_a * mdl.n_layers * mdl.attention_width / (hw.peak_flops * cal.mfu)  # s/token^2
        self.t_p_mean_s = self.a_p * w.in_m1 + self.b_p * w.in_m2
        self.mu_p = 1.0 / self.t_p_mean_s
        t_p_sq = self.a_p**2 * w.in_m2 + 2 * self.a_p * self.b_p * w.in_m3 + self.b_p**2 * w.in_m4
        self.cv_s2 = max(t_p_sq / self.t_p_mean_s**2 - 1.0, 0.0)
        # Decode, eqs. (7), (8), (30).
        self.l_ctx = w.mean_active_context()
        bw = hw.mem_bandwidth * cal.mbu
        self.a_d = mdl.weight_bytes / bw + cal.t_iter_s  # s
        self.b_d = mdl.kv_bytes_per_token * self.l_ctx / bw + cal.t_req_s  # s per request in the batch
        self._kv_per_token_s = mdl.kv_bytes_per_token / bw
        self.decode_tokens = w.decode_tokens  # E[l_out - 1]
        # Memory-balance terms that do not depend on B or the deployment (eqs. 20, 23, 24).
        self.res_mean = w.in_m1 + r  # E[l_in + R]
        self.res_tp = self.a_p * (w.in_m2 + r * w.in_m1) + self.b_p * (w.in_m3 + r * w.in_m2)  # E[t_P (l_in+R)]
        self.unused = (w.in_m2 + 2 * r * w.in_m1 + r * r) / (2.0 * self.res_mean)  # E_k[U_k]
        self.per_batch = self.l_ctx + r  # decode occupancy per active request
        self.c_tok = srv.kv_tokens
        if self.c_tok <= self.unused:
            raise ConfigError(
                f"kv_tokens = {self.c_tok:g} is too small for workload {w.name}: the pool must exceed the mean "
                f"unused space {self.unused:.0f} tokens (Theorem 4.3)")
        self.b_max = (self.c_tok - self.unused) / self.per_batch
        self.mu_d_max = self.decode_capacity(self.b_max)

    # --- timing primitives (reused by the request-level simulator) ----------------------------
    def prefill_time_s(self, input_tokens: ArrayLike) -> NDArray[np.float64]:
        """Prefill service time of requests with these input lengths, eq. (4), s."""
        x = np.asarray(input_tokens, dtype=float)
        return self.a_p * x + self.b_p * x * x

    def decode_iteration_time_s(self, batch: ArrayLike, context_tokens: ArrayLike) -> NDArray[np.float64]:
        """Time of one decode iteration with ``batch`` active requests holding ``context_tokens`` in total, s.

        Memory roofline of eq. (15) with the calibrated overheads of eq. (30):
        2N/(beta MBU) + t_iter + kappa * context/(beta MBU) + t_req * batch.
        """
        cal = self.system.calibration
        return (self.a_d + self._kv_per_token_s * np.asarray(context_tokens, dtype=float)
                + cal.t_req_s * np.asarray(batch, dtype=float))

    def decode_capacity(self, batch: ArrayLike) -> NDArray[np.float64] | float:
        """mu_D(B) = B / (E[l_out - 1] (a_D + b_D B)), eq. (9), req/s per decode instance."""
        b = np.asarray(batch, dtype=float)
        out = b / (self.decode_tokens * (self.a_d + self.b_d * b))
        return float(out) if out.ndim == 0 else out

    # --- operating batch --------------------------------------------------------------------
    def _capacity_ca2(self, n_p: ArrayLike) -> NDArray[np.float64] | float:
        """SCV of the stream of admissions into one prefill queue at capacity (dimensionless).

        ``paper``: Poisson arrivals split round-robin over n_P instances, CV_a^2 = 1/n_P (eq. 21).
        ``sglang``: at saturation admission is paced by the release of KV memory (a request is admitted when a
        finished one frees its slots), not by the arrival process; the paced stream is taken as regular,
        CV_a^2 = 0, and only the prefill service-time variability CV_s^2 makes reserved requests wait.
        """
        if self.semantics == "sglang":
            return np.zeros_like(np.asarray(n_p, dtype=float)) if np.ndim(n_p) else 0.0
        return 1.0 / np.asarray(n_p, dtype=float) if np.ndim(n_p) else 1.0 / float(n_p)  # type: ignore[arg-type]

    def _residual(self, b: NDArray[np.float64], n_p: NDArray[np.float64], n_d: NDArray[np.float64]
                  ) -> NDArray[np.float64]:
        """g(B) of §4.2 (tokens); +inf where the prefill queue is unstable (rho_P >= 1)."""
        mu_d = b / (self.decode_tokens * (self.a_d + self.b_d * b))
        rho = n_d * mu_d / (n_p * self.mu_p)
        stable = rho < 1.0
        safe = np.where(stable, rho, 0.0)
        wait = (self._capacity_ca2(n_p) + self.cv_s2) / 2.0 * safe / (self.mu_p * (1.0 - safe))
        g = mu_d * (wait * self.res_mean + self.res_tp) + b * self.per_batch + self.unused - self.c_tok
        return np.where(stable, g, np.inf)

    def residual(self, batch: float, n_p: int, n_d: int) -> float:
        """g(B) for one deployment, tokens (occupancy minus C_tok)."""
        return float(self._residual(np.asarray(float(batch)), np.asarray(float(n_p)), np.asarray(float(n_d))))

    def batch_bracket(self, n_p: ArrayLike, n_d: ArrayLike) -> NDArray[np.float64]:
        """Upper end min(B_max, B_rho) of the root bracket (Theorem 4.3), requests.

        B_rho solves n_D mu_D(B) = n_P mu_P, i.e. B = c E a_D / (1 - c E b_D) with c = n_P mu_P / n_D
        (inf when c E b_D >= 1: the prefill pool can never be saturated).
        """
        c = np.asarray(n_p, dtype=float) * self.mu_p / np.asarray(n_d, dtype=float)
        den = 1.0 - c * self.decode_tokens * self.b_d
        b_rho = np.where(den > 0, c * self.decode_tokens * self.a_d / np.where(den > 0, den, 1.0), np.inf)
        return np.minimum(self.b_max, b_rho)

    def operating_batch(self, n_p: int, n_d: int) -> float:
        """The unique root of g(B) = 0 in (0, min(B_max, B_rho)) by ``scipy.optimize.brentq``, requests.

        As in App. C, the upper endpoint is moved inside the bracket until g is finite and positive.
        """
        check_deployment(n_p, n_d)
        hi = float(self.batch_bracket(n_p, n_d))
        g_lo = self.residual(0.0, n_p, n_d)
        if not g_lo < 0:  # guaranteed by the C_tok > E[U] check in __init__
            raise ConfigError(f"no positive operating batch: g(0) = {g_lo:g} tokens")
        top = hi
        for shrink in (0.0, 1e-12, 1e-9, 1e-6, 1e-3):
            top = hi * (1.0 - shrink)
            g_hi = self.residual(top, n_p, n_d)
            if np.isfinite(g_hi) and g_hi > 0:
                break
            if np.isfinite(g_hi):
                # Only without a wait term (sglang semantics, deterministic prefill): the pool still has room
                # when decode matches the prefill pool, so the deployment is prefill-bound at B_rho.
                return top
        else:  # pragma: no cover - Theorem 4.3 rules this out
            raise ConfigError(f"could not bracket the operating batch of {deployment_label(n_p, n_d)}")
        return float(brentq(self.residual, 0.0, top, args=(n_p, n_d)))

    def _batch_vectorized(self, n_p: NDArray[np.float64], n_d: NDArray[np.float64], iters: int = 64
                          ) -> NDArray[np.float64]:
        """Bisection on the same bracket for many deployments at once (g is increasing, Theorem 4.3)."""
        lo = np.zeros_like(n_p, dtype=float)
        hi = self.batch_bracket(n_p, n_d).astype(float)
        for _ in range(iters):
            mid = 0.5 * (lo + hi)
            pos = self._residual(mid, n_p, n_d) > 0
            hi = np.where(pos, mid, hi)
            lo = np.where(pos, lo, mid)
        return 0.5 * (lo + hi)

    # --- capacity and power -----------------------------------------------------------------
    def power_w(self, n_p: ArrayLike, n_d: ArrayLike, rate: ArrayLike,
                mu: ArrayLike | None = None) -> NDArray[np.float64] | float:
        """Deployment power at request rate ``rate`` (req/s) under balanced load, eq. (14), W.

        Each prefill instance runs at x_P = lambda / (n_P mu_P), each decode instance at
        x_D = lambda / (n_D mu_D^max) (eq. 12). The served rate is min(lambda, mu): a deployment cannot
        serve more than its capacity, so ``mu`` (computed if omitted) caps the load.
        """
        cal = self.system.calibration
        n_p_a = np.asarray(n_p, dtype=float)
        n_d_a = np.asarray(n_d, dtype=float)
        lam = np.asarray(rate, dtype=float)
        if np.any(~np.isfinite(lam)) or np.any(lam < 0):
            raise ConfigError(f"rate = {rate!r}; allowed: finite and >= 0 req/s")
        if mu is None:
            mu = self.grid_for(n_p_a.astype(np.int64).ravel(), n_d_a.astype(np.int64).ravel()).mu.reshape(
                np.broadcast(n_p_a, n_d_a).shape)
        served = np.minimum(lam, np.asarray(mu, dtype=float))
        p = (n_p_a * cal.prefill_ramp(served / (n_p_a * self.mu_p))
             + n_d_a * cal.decode_ramp(served / (n_d_a * self.mu_d_max)))
        return float(p) if p.ndim == 0 else p

    def capacity(self, n_p: int, n_d: int) -> Capacity:
        """Capacity, operating point and power at capacity of one deployment (scalar path, brentq)."""
        b = self.operating_batch(n_p, n_d)
        mu_d = float(self.decode_capacity(b))
        mu = min(n_p * self.mu_p, n_d * mu_d)
        rho = n_d * mu_d / (n_p * self.mu_p)
        wait = (float(self._capacity_ca2(n_p)) + self.cv_s2) / 2.0 * rho / (self.mu_p * (1.0 - rho))
        power = float(self.power_w(n_p, n_d, mu, mu=mu))
        return Capacity(n_p=int(n_p), n_d=int(n_d), mu=mu, mu_p=self.mu_p, mu_d=mu_d, batch=b,
                        mu_d_max=self.mu_d_max, b_max=self.b_max, rho_p=rho, wait_s=wait,
                        t_d_s=self.a_d + self.b_d * b, power_w=power)

    def no_wait_capacity(self, n_p: int, n_d: int) -> float:
        """Capacity if no request ever waited for prefill while holding a reservation, req/s.

        The memory balance of eq. (10) with t_W = 0 (only requests in prefill service hold ``l_in + R``):
        its root B_0 does not depend on the deployment, and the capacity is min(n_P mu_P, n_D mu_D(B_0)).
        Under the admission semantics of the module docstring this is an upper reference for the simulated
        saturation throughput, reached when memory-gated admission keeps every prefill instance busy; it is
        not the paper's capacity (:meth:`capacity`), which charges the Kingman wait to reservations.
        """
        check_deployment(n_p, n_d)

        def g0(b: float) -> float:
            return float(self.decode_capacity(b)) * self.res_tp + b * self.per_batch + self.unused - self.c_tok

        # g0(0) = E[U] - C_tok < 0 (checked in __init__) and g0(B_max) = mu_D(B_max) E[t_P (l_in+R)] > 0.
        b0 = float(brentq(g0, 0.0, self.b_max))
        return min(n_p * self.mu_p, n_d * float(self.decode_capacity(b0)))

    def operating_point(self, n_p: int, n_d: int, rate: float, mu: float | None = None) -> OperatingPoint:
        """Waiting time, TTFT, decode batch, TPOT and power at ``rate`` req/s (same model, below saturation).

        Prefill: Kingman's wait (eq. 21) at rho_P = served / (n_P mu_P). Decode: each instance admits
        served / n_D req/s and, by Little's law over decode tokens, runs at B = lambda_i E[l_out-1] t_D(B),
        i.e. B = lambda_i E a_D / (1 - lambda_i E b_D); TPOT is t_D(B). At or above capacity the served rate
        is mu, the decode batch is the operating batch and the prefill wait is unbounded (a backlog grows).
        """
        check_deployment(n_p, n_d)
        if not (np.isfinite(rate) and rate >= 0):
            raise ConfigError(f"rate = {rate!r}; allowed: finite and >= 0 req/s")
        b_cap: float | None = None
        if mu is None:
            cap = self.capacity(n_p, n_d)
            mu_v, b_cap = cap.mu, cap.batch
        else:
            mu_v = float(mu)
        served = min(rate, mu_v)
        rho = served / (n_p * self.mu_p)
        if rate >= mu_v:
            wait = float("inf")
            batch = b_cap if b_cap is not None else self.operating_batch(n_p, n_d)
        else:
            wait = (1.0 / n_p + self.cv_s2) / 2.0 * rho / (self.mu_p * (1.0 - rho))
            lam_i = served / n_d
            batch = lam_i * self.decode_tokens * self.a_d / (1.0 - lam_i * self.decode_tokens * self.b_d)
        power = float(self.power_w(n_p, n_d, served, mu=mu_v))
        return OperatingPoint(n_p=int(n_p), n_d=int(n_d), rate=float(rate), served=served, rho_p=rho,
                              wait_s=wait, ttft_s=wait + self.t_p_mean_s, batch=float(batch),
                              tpot_s=self.a_d + self.b_d * float(batch), power_w=power)

    def grid_for(self, n_p: ArrayLike, n_d: ArrayLike) -> CapacityGrid:
        """Capacity and power at capacity for arrays of deployments (vectorized)."""
        n_p_i = np.atleast_1d(np.asarray(n_p)).astype(np.int64)
        n_d_i = np.atleast_1d(np.asarray(n_d)).astype(np.int64)
        if n_p_i.shape != n_d_i.shape:
            raise ConfigError(f"n_P and n_D arrays differ in shape: {n_p_i.shape} vs {n_d_i.shape}")
        if n_p_i.size and (n_p_i.min() < 1 or n_d_i.min() < 1):
            raise ConfigError("deployment counts must be >= 1 instance per pool")
        fp, fd = n_p_i.astype(float), n_d_i.astype(float)
        b = self._batch_vectorized(fp, fd)
        mu_d = b / (self.decode_tokens * (self.a_d + self.b_d * b))
        mu = np.minimum(fp * self.mu_p, fd * mu_d)
        power = np.asarray(self.power_w(fp, fd, mu, mu=mu), dtype=float)
        return CapacityGrid(n_p=n_p_i, n_d=n_d_i, mu=mu, mu_d=mu_d, batch=b, power_w=power,
                            mu_p=self.mu_p, mu_d_max=self.mu_d_max)

    def grid(self, max_instances: int = 8) -> CapacityGrid:
        """Every deployment with n_P + n_D <= ``max_instances`` (the paper evaluates up to 8 GPUs)."""
        return self.grid_for(*all_deployments(max_instances))
