"""What crosses the simulator's decision point: the policy's :class:`ScalingDecision`, the
:class:`Observation` it decides on, and the :class:`EpochMetrics` of an advance (npu paper §3.4, §4)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class ScalingDecision:
    """Declarative per-group targets: ``targets[(phase, bucket_edge)] = {config id: vPod count}``.

    Groups not listed keep their targets; a listed group's configurations not in its mapping go to 0.
    Creation order (under a quota) follows the order of ``targets``.
    """

    targets: Mapping[tuple[str, int], Mapping[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Observation:
    """What a policy (or agent) sees at a decision point. Arrays are (2 phases, 48 buckets).

    Rates in req/s by bucket of the requests' lengths (prefill: input; decode: total), from the
    monitor: ``rate_recent`` over the last epoch, ``rate_peak`` the peak ``rate_bin_s`` rate over the
    window, ``epoch_peak`` the peak over the last epoch; ``tokens_per_req`` the mean prefill (input)
    or decode (output) tokens per request of the bucket over the window (0 when none). Group arrays
    (index = the group's bucket): ``ready``/``alive`` vPod counts, ``queue`` waiting jobs now,
    ``peak_queue`` the peak since the previous decision point, ``slots`` the summed max batch of
    ready vPods, ``util`` busy fraction over the last check interval. ``counts[(phase, edge)]`` maps
    config id -> vPods alive (not being deleted). ``quota_left`` chips per version (inf: unlimited).
    ``epoch_token_bins`` (bins of the last epoch x 2 x 48): the monitor's time series of tokens arrived
    per ``rate_bin_s`` bin and bucket (newest first), from which a policy takes the peak of a *group's*
    aggregate rate (§3.4: "the peak request rate ... that would be served by this group"); None when
    not available (a hand-built observation), which policies read as "bucket peaks coincide".
    """

    time_s: float
    epoch: int
    at_epoch_boundary: bool
    bucket_edges: np.ndarray
    rate_recent: np.ndarray
    rate_peak: np.ndarray
    epoch_peak: np.ndarray
    tokens_per_req: np.ndarray
    ready: np.ndarray
    alive: np.ndarray
    queue: np.ndarray
    peak_queue: np.ndarray
    slots: np.ndarray
    util: np.ndarray
    slo_recent: np.ndarray
    counts: dict[tuple[str, int], dict[int, int]]
    targets: dict[tuple[str, int], dict[int, int]]
    quota_left: dict[str, float]
    epoch_token_bins: np.ndarray | None = None


@dataclass
class EpochMetrics:
    """Totals of one advance call (per phase index 0 prefill, 1 decode): J, USD, tokens, requests."""

    t0_s: float
    t1_s: float
    energy_j: np.ndarray
    usd: np.ndarray
    tokens: np.ndarray
    finished: int
    slo_met: np.ndarray
    slo_total: float
    alive: np.ndarray
    energy_busy_j: np.ndarray = field(default_factory=lambda: np.zeros(2))
    usd_busy: np.ndarray = field(default_factory=lambda: np.zeros(2))

    @property
    def slo_violation_pct(self) -> float:
        """Share (%) of the requests finished in this span that missed TTFT or TPOT (0 when none finished)."""
