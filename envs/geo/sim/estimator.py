"""The shared latency, energy and carbon estimator of §IV, vectorized over requests x DCs.

Every policy (and the Gymnasium observation) sees the same estimates, computed only from
information a scheduler has at decision time: the request's prompt length ``ISL_r``, its
output length estimate ``OSL_r`` (the workload's mean OSL by default, the true OSL in
``oracle`` mode), the provisioner's snapshot and the RTT matrix.

Symbols (per DC d, per-engine averages from the snapshot): ``B_d`` batch, ``Q_d`` queued prompt
tokens, ``KV_d`` cached tokens, ``duty_d`` prefill duty; ``M`` the profile's
``max_num_batched_tokens`` (prefill chunk budget), ``S`` its ``max_num_seqs``, ``C`` its KV pool
(tokens); ``Ī``/``Ō`` the workload's mean ISL/OSL.

- Chunked prefill time of ``N`` tokens, for a prompt of ``n`` tokens among them:
  ``P(N, n) = floor(N/M)·t_pre(M, 1, 0) + t_pre(N mod M, 1, 0)·[N mod M > 0] + b2·n²``
  (each chunk as one step of one request; the attention term for the request's own prompt).
- Decode iteration time at d, prefill stalls included: ``τ_d = t_dec(max(B_d, 1), KV_d) / (1 − duty_d)``.
- ``W_d`` (wait for a batch slot, s): the per-engine slot capacity is
  ``S_d = min(S, C / ℓ_d)`` with ``ℓ_d = KV_d / B_d`` the cached tokens per running request
  (``Ī + Ō/2`` when the batch is empty); the queue ahead holds ``Q_d / Ī`` requests; the slots
  that must free before r is admitted are ``m_d = max(0, B_d + Q_d/Ī + 1 − S_d)``; requests finish
  at ``B_d / (Ō·τ_d)`` per second, so ``W_d = m_d · Ō · τ_d / max(B_d, 1)`` (0 with free slots).
- ``TTFT_{r,d} = RTT(s_r, d) + W_d + P(ISL_r + Q_d, ISL_r)``.
- ``T^pre_{r,d} = P(Q_d, 0) / OSL_r``: the prefill of the tokens already queued at d stalls r's
  decode steps once, amortized over r's ``OSL_r`` steps.
- ``TPOT_{r,d} = [t_dec(B_d + 1, KV_d + ISL_r) + T^pre_{r,d}] / (1 − duty_d)`` (r joins the batch
  and its prompt joins the cache). ``duty_d`` is clipped to 0.95.
- Energy attributed to r at d (J, engine IT energy): its prefill
  ``e_p·ISL_r + e_a·ISL_r² + e0_pre·ceil(ISL_r/M)`` plus ``OSL_r`` decode steps, each charging r
  its share of the fixed step energy, its per-request energy and its mean cache read:
  ``OSL_r·[e0_dec/(B_d + 1) + e_d + e_k·(ISL_r + OSL_r/2)]``.
- ``carbon_{r,d} = energy_{r,d} · PUE_d · CI_d / 3.6e6`` (gCO2; CI in g/kWh).
- Feasible: ``TTFT ≤ TTFT budget`` and ``TPOT ≤ TPOT budget``.
- Batch-slot headroom of DC d (requests, whole DC; :meth:`Estimator.headroom_requests`):
  ``H_d = E · max(0, S_d − B_d − Q_d/Ī)`` with ``E`` engines per DC: the requests d can admit
  at once without anyone waiting for a slot.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from servegym.envs.geo.sim.estimator_kernels import J_PER_KWH, MAX_DUTY, estimate_into, estimator_params
from servegym.envs.geo.sim.profile import EngineProfile
from servegym.envs.geo.sim.provisioner import Snapshot

__all__ = ["J_PER_KWH", "MAX_DUTY", "Estimates", "Estimator"]


@dataclass(frozen=True)
class Estimates:
    """Per (request, DC) estimates; every array has shape (n_requests, n_dcs).

    ``mask`` is ``feasible`` with every all-infeasible row replaced by all True: the action mask
    a policy or agent may use, never empty.
    """

    ttft_s: NDArray[np.float64]
    tpot_s: NDArray[np.float64]
    energy_j: NDArray[np.float64]
    carbon_g: NDArray[np.float64]
    feasible: NDArray[np.bool_]
    mask: NDArray[np.bool_]

    def rows(self, sl: slice | NDArray) -> Estimates:
        return Estimates(self.ttft_s[sl], self.tpot_s[sl], self.energy_j[sl], self.carbon_g[sl], self.feasible[sl],
                         self.mask[sl])


class Estimator:
    """The §IV estimator for one engine profile and SLO (see the module docstring for the formulas).

    Args:
        profile: the engine profile every DC runs.
        ttft_slo_s, tpot_slo_s: SLO budgets (s).
        isl_mean, osl_mean: the workload's mean prompt and output lengths (tokens), Ī and Ō.
    """

    def __init__(self, profile: EngineProfile, ttft_slo_s: float, tpot_slo_s: float,
                 isl_mean: float, osl_mean: float) -> None:
        self.profile = profile
        self.ttft_slo_s = float(ttft_slo_s)
        self.tpot_slo_s = float(tpot_slo_s)
        self.isl_mean = max(float(isl_mean), 1.0)
        self.osl_mean = max(float(osl_mean), 1.0)
        self._m = float(profile.max_num_batched_tokens)
        self._t_full_chunk = float(profile.prefill(self._m, 1, 0.0))
        #: the coefficients of the compiled form (:mod:`~servegym.envs.geo.sim.estimator_kernels`)
        self.par = estimator_params(profile, self._t_full_chunk, self.isl_mean, self.osl_mean, self.ttft_slo_s,
                                    self.tpot_slo_s)

    def prefill_time_s(self, tokens: ArrayLike, own_prompt: ArrayLike = 0.0) -> NDArray[np.float64]:
        """``P(N, n)``: chunked prefill time (s) of ``N`` tokens including a prompt of ``n``."""
        pm = self.profile.prefill
        n = np.asarray(tokens, dtype=np.float64)
        full = np.floor(n / self._m)
        rem = n - full * self._m
        rem_t = np.where(rem > 0, pm(rem, 1, 0.0), 0.0)
        own = np.asarray(own_prompt, dtype=np.float64)
        return full * self._t_full_chunk + rem_t + pm.b2 * own * own

    def _per_dc(self, snap: Snapshot) -> dict[str, NDArray[np.float64]]:
        prof = self.profile
        b = snap.batch
        duty = np.minimum(snap.prefill_duty, MAX_DUTY)
        tau = prof.decode(np.maximum(b, 1.0), snap.kv_tokens) / (1.0 - duty)
        ell = np.where(b > 0, snap.kv_tokens / np.maximum(b, 1e-9), self.isl_mean + 0.5 * self.osl_mean)
        slots = np.minimum(float(prof.max_num_seqs), prof.kv_capacity_tokens / np.maximum(ell, 1.0))
        missing = np.maximum(0.0, b + snap.queued_tokens / self.isl_mean + 1.0 - slots)
        wait = missing * self.osl_mean * tau / np.maximum(b, 1.0)
        return {
            "wait_s": wait,
            "queued_prefill_s": self.prefill_time_s(snap.queued_tokens),
            "one_minus_duty": 1.0 - duty,
            "g_per_j": snap.pue * snap.ci_g_per_kwh / J_PER_KWH,
        }

    def headroom_requests(self, snap: Snapshot) -> NDArray[np.float64]:
        """``H_d`` (requests, whole DC) per DC: free batch slots net of the queue (see module docstring)."""
        prof = self.profile
        b = snap.batch
        ell = np.where(b > 0, snap.kv_tokens / np.maximum(b, 1e-9), self.isl_mean + 0.5 * self.osl_mean)
        slots = np.minimum(float(prof.max_num_seqs), prof.kv_capacity_tokens / np.maximum(ell, 1.0))
        return snap.engines_per_dc * np.maximum(0.0, slots - b - snap.queued_tokens / self.isl_mean)

    def estimate(self, snap: Snapshot, isl: ArrayLike, osl: ArrayLike, origin: ArrayLike) -> Estimates:
        """Estimates for requests (prompt ``isl``, output estimate ``osl``, scheduler ``origin``, each of
        length n) against every DC of ``snap``; arrays of shape (n, D). Compiled
        (:func:`~servegym.envs.geo.sim.estimator_kernels.estimate_into`), bit-identical to
        :meth:`estimate_numpy`."""
        isl_f = np.asarray(isl, dtype=np.float64)
        osl_f = np.maximum(np.asarray(osl, dtype=np.float64), 1.0)
        origin_i = np.asarray(origin, dtype=np.int64)
        if not (isl_f.ndim == osl_f.ndim == origin_i.ndim == 1 and isl_f.size == osl_f.size == origin_i.size):
            return self.estimate_numpy(snap, isl, osl, origin)  # broadcasting shapes: the numpy form's rules
        shape = (isl_f.size, snap.n_dcs)
        ttft, tpot, energy, carbon = (np.empty(shape) for _ in range(4))
        feasible, mask = np.empty(shape, dtype=bool), np.empty(shape, dtype=bool)
        estimate_into(snap.batch, snap.queued_tokens, snap.kv_tokens, snap.prefill_duty, snap.pue, snap.ci_g_per_kwh,
                      snap.rtt_s, isl_f, osl_f, origin_i, self.par, ttft, tpot, energy, carbon, feasible, mask)
        return Estimates(ttft, tpot, energy, carbon, feasible, mask)

    def estimate_numpy(self, snap: Snapshot, isl: ArrayLike, osl: ArrayLike, origin: ArrayLike) -> Estimates:
        """:meth:`estimate` as numpy expressions: the reference formulation (module docstring) the compiled
        form is tested against."""
        prof = self.profile
        isl_f = np.asarray(isl, dtype=np.float64)[:, None]
        osl_f = np.maximum(np.asarray(osl, dtype=np.float64), 1.0)[:, None]
        origin_i = np.asarray(origin, dtype=np.int64)
        d = self._per_dc(snap)
        q = snap.queued_tokens[None, :]
        ttft = snap.rtt_s[origin_i] + d["wait_s"][None, :] + self.prefill_time_s(isl_f + q, isl_f)
        t_dec = prof.decode(snap.batch[None, :] + 1.0, snap.kv_tokens[None, :] + isl_f)
        tpot = (t_dec + d["queued_prefill_s"][None, :] / osl_f) / d["one_minus_duty"][None, :]
        e = prof.energy
        e_pre = e.e_p * isl_f + e.e_a * isl_f * isl_f + e.e0_pre * np.ceil(isl_f / self._m)
        e_dec = osl_f * (e.e0_dec / (snap.batch[None, :] + 1.0) + e.e_d + e.e_k * (isl_f + 0.5 * osl_f))
        energy = e_pre + e_dec
        carbon = energy * d["g_per_j"][None, :]
        feasible = (ttft <= self.ttft_slo_s) & (tpot <= self.tpot_slo_s)
        mask = feasible | ~feasible.any(axis=1, keepdims=True)
        return Estimates(ttft, tpot, energy, carbon, feasible, mask)
