"""Benchmark splits: the named scenario distributions that every env's ``reset(seed=...)`` samples from.

Every env id has a ``train``, a ``validation`` and a ``test`` split plus named distribution shifts
(``shift-<what>``), chosen with the ``split`` config key (``gym.make(id, split="test")``). The split
draws the scenario of each episode from the episode seed: the same seed and split always give the same
scenario, and the test split never shares a scenario with the training or validation splits (disjoint
calendar days of the grid series, disjoint days of the 2024 Azure week or segments of the arrival traces,
and arrival seeds that are derived from the split's name). ``split=None`` turns sampling off: the configured scenario is used as is
(reproductions of the papers' figures and unit tests of the dynamics).

This module holds what the families share: the split names per family (:data:`FAMILY_SPLITS`, one line
of description each, which the env docstrings repeat), their validation (:func:`check_split`), the seed
derivation (:func:`scenario_rng`), the calendar-day rule for the hourly grid series (:func:`split_days`)
and the trace-segment rule (:data:`TRACE_SEGMENTS`). What each family draws lives next to its scenario
(``envs/geo/env_common.py``, ``envs/pd/sim/scenario.py``, ``envs/npu/scenarios.py``).

Protocol rule: agents are trained on ``train``, checkpoints are chosen on ``validation``, and results
are reported on ``test`` and the shifts, which no training or selection step may read.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pandas as pd

from servegym.errors import ConfigError

BASE_SPLITS: tuple[str, ...] = ("train", "validation", "test")
"""The three in-distribution splits every env id has."""

#: Split names and one-line descriptions per env family (geo: GeoRoute-v0 and GeoRouteWindow-v0).
FAMILY_SPLITS: dict[str, dict[str, str]] = {
    "geo": {
        "train": "start day and UTC hour of the grid series drawn from the train days (2021-2023 less the "
                 "validation weeks; single-year topologies: days 1-20 of each month)",
        "validation": "the ISO weeks of 2023 divisible by 4 (single-year topologies: days 21-23 of each "
                      "month)",
        "test": "the days of 2024 (single-year topologies: day 24 to the end of each month)",
        "shift-load": "test days with the arrival rate x 1.5",
        "shift-topology": "test days on another topology of the same shape (geo-small -> geo-small-shift, "
                          "geo-mini -> geo-mini-shift; not defined for the paper preset)",
        "shift-stale": "test days with provisioner snapshots every 5 s instead of 1 s (stale load signals)",
        "shift-osl": "test days with the schedulers' estimator on the paper's OSL predictor (the shipped MLP) "
                     "instead of the workload's mean output length: the predictor's own output-length error",
        "shift-ci-forecast": "test days whose snapshots report a persistence day-ahead CI forecast (the same hour "
                             "of the previous day) while carbon is charged at the realized CI",
    },
    "pd": {
        "train": "grid day (days 1-20 of each month of NL's 2022 series) and local start hour, peak rate x "
                 "U[0.85, 1.15]; the rate shape of a 2024 Azure train weekday (coding or conversation, Mon-Wed "
                 "13-15 May; the episode wraps within the day), per-minute spread drawn per episode; azure-conv "
                 "lengths",
        "validation": "days 21-23, the same draws, on the 2024 validation weekday (Thu 16 May)",
        "test": "day 24 to the month's end, the same draws, on the 2024 test weekday (coding Fri 10 or "
                "conversation Fri 17 May)",
        "shift-code": "test days on the coding trace's test day (Fri 10 May) with the held-out azure-code lengths",
        "shift-mooncake": "test days with the held-out Mooncake conversation lengths, peak rate scaled to the GPU "
                          "budget (x the budget's capacity ratio under Mooncake vs azure-conv lengths, 0.095 at "
                          "16 GPUs)",
        "shift-burst": "test days with the per-minute spread at the plotted band's full amplitude (burstiness 1 "
                       "instead of 0.25)",
        "shift-forecast": "shift-burst's days with a persistence forecast in the observation (the smooth day x the "
                          "last completed minute's realized / smooth ratio): the forecast error is the per-minute "
                          "spread's persistence residual; arrivals unchanged",
        "shift-weekend": "as test, on a 2024 weekend day (coding Sat 11 / Sun 12, conversation Sun 12 / Sat 18 "
                         "May) scaled to its trace's test-day peak: the weekend's shape and wider per-minute band "
                         "(at its own level it fits the smallest deployment all day)",
    },
    "npu": {
        "train": "model (one of the four), 2024 Azure trace (coding or conversation), start hour, rate x "
                 "U[0.7, 1.3] of Table 4; one of the trace's three train weekdays (its per-minute rate shape; "
                 "the episode wraps within the day)",
        "validation": "as train, on the trace's validation weekday",
        "test": "as train, on the trace's test weekday",
        "shift-lveval": "test-day azure-code timestamps with the held-out LVEval lengths (Table 4 rate x the "
                        "scale)",
        "shift-openthoughts": "test-day azure-code timestamps with the held-out OpenThoughts lengths (Table 4 "
                              "rate x the scale)",
        "shift-weekend": "as test, on one of the trace's two weekend days (lower, flatter load)",
    },
}

#: Stress tracks per family: named scenario conditions laid over the base splits (``track`` config key with
#: ``split`` train, validation or test), each (one-line description, why it is a track). A track keeps the
#: split's days and arrival seeds and changes only the condition, so an agent trains on the track's train days,
#: is selected on its validation days and is scored on its test days, none of which another split shares.
FAMILY_TRACKS: dict[str, dict[str, tuple[str, str]]] = {
    "geo": {
        "stress-load": ("the split's days with the arrival rate x 1.5 (shift-load's rate) and provisioner snapshots "
                        "every 5 s (shift-stale's period)",
                        "under load the 5-s snapshot is the scarce information: the load-aware rules overfill the clean "
                        "sites between polls (on validation moer 3.8 %, the ILPs 0.2 % SLO violation) and the others pay "
                        "carbon for safety (green-llm, rr), while a policy knows its own routings since each poll and "
                        "the snapshot's age (dead reckoning)"),
        "stress-osl": ("the split's days with the schedulers' estimator on the shipped OSL predictor (shift-osl's "
                       "predictor) and provisioner snapshots every 5 s",
                       "the predictor overestimates the served mix's output lengths about 7.7-fold (mean 540 against 70 "
                       "tokens on validation, uncorrelated), so green-llm's token budgets spill onto dirty sites and "
                       "the window schedulers plan on wrong lengths, while the true lengths of the requests that "
                       "finished are observable and correct the bias"),
    },
    "pd": {
        "stress-delay": ("the split's days at twice the default peak rate (28 req/s), the plotted per-minute band at "
                         "full amplitude (burstiness 1), a 300-s instance start-up delay, a 12-GPU budget, a "
                         "persistence forecast in the observation (shift-forecast's) instead of the exact rates and "
                         "the day's level so far (a 30-period moving average of observed / smooth rate)",
                         "an instance ordered now serves in 5 min, so a rule must provision ahead, and the "
                         "persistence forecast carries the last minute's i.i.d. draw into the next 6: the "
                         "persistence rules need a low utilization target, the reactive HPA (target tuned to 0.8) "
                         "reaches the budget on a few days, while the day's expected rate (its smooth shape and band) "
                         "is the best causal forecast: the level entries let a policy and the rules estimate it from "
                         "the day's history"),
        "stress-long-delay": ("stress-delay with a 600-s instance start-up delay (a model pulled from remote storage)",
                              "10 periods of lead make the carried per-minute draw and the reactive rules' lag costlier "
                              "than at 300 s (a 10-episode validation scout put the expected-rate rule 4-7 % below the "
                              "tuned HPA at about equal SLO; 30 validation and 30 test episodes measure less)"),
    },
    "npu": {
        "stress-quota": ("the split's episodes on NPU-C and NPU-D only (no fail-over to NPU-A/B) under a chip "
                         "quota per model in the paper's C:D ratio of 1:2 (Figure 25's C:256/D:512), NPU-D at "
                         "the model's train-median unconstrained peak under Base: Llama-3-8B C:8/D:12, "
                         "Llama-3-70B C:56/D:112, Llama-3.1-405B C:288/D:576, DeepSeek-V3 C:160/D:320",
                         "a fixed C:256/D:512 would bind only where a model needs more than 512 NPU-D chips "
                         "(unconstrained Base: 5 of the 30 test episodes, all Llama-3.1-405B; never Llama-3-8B "
                         "or -70B); at each model's median the quota binds (peak chips held reach it) on 52 of "
                         "80 train, 24 of 30 validation and 14 of 30 test episodes under Base, which keeps its "
                         "decode group on NPU-D and misses up to all requests' SLO there (the paper's "
                         "collapse), while NeuScale fails decode over to NPU-C; which groups get the scarce "
                         "chips, on which version, and when, is what a policy can learn"),
    },
}


def tracks_of(family: str) -> tuple[str, ...]:
    """The stress-track names of ``family`` (empty for a family without tracks)."""
    return tuple(FAMILY_TRACKS.get(family, {}))


def check_track(family: str, track: Any, split: Any) -> str | None:
    """``track`` if it names a stress track of ``family`` played on a base split (or None: no track); else a
    ConfigError naming the field and the allowed values. A track on a shift would stack two conditions."""
    if track is None:
        return None
    names = tracks_of(family)
    if not isinstance(track, str) or track not in names:
        raise ConfigError(f"track = {track!r} is not allowed; allowed: None, {', '.join(names) or '(none)'}")
    if split is not None and split not in BASE_SPLITS:
        raise ConfigError(f"track = {track!r} with split = {split!r} is not allowed; allowed: a track on split "
                          f"{', '.join(BASE_SPLITS)} or None")
    return track


#: Env id -> family.
ENV_FAMILY: dict[str, str] = {
    "servegym/GeoRoute-v0": "geo",
    "servegym/GeoRouteWindow-v0": "geo",
    "servegym/PDProvision-v0": "pd",
    "servegym/NPUAutoscale-v0": "npu",
}

#: The split whose days and trace segment a split draws from (shifts use the test data).
DATA_SPLIT: dict[str, str] = {"train": "train", "validation": "validation", "test": "test"}

#: Share of an arrival trace's time span each split reads (train, validation, test: disjoint).
TRACE_SEGMENTS: dict[str, tuple[float, float]] = {"train": (0.0, 0.6), "validation": (0.6, 0.8),
                                                  "test": (0.8, 1.0)}


def splits_of(family: str) -> tuple[str, ...]:
    """The split names of ``family`` (``"geo"``, ``"pd"``, ``"npu"``), base splits first."""
    if family not in FAMILY_SPLITS:
        raise ConfigError(f"family = {family!r} is unknown; allowed: {', '.join(map(str, sorted(FAMILY_SPLITS)))}")
    return tuple(FAMILY_SPLITS[family])


def check_split(family: str, split: Any) -> str | None:
    """``split`` if it names a split of ``family`` (or is None: no sampling); else a ConfigError naming
    the field and the allowed values."""
    if split is None:
        return None
    names = splits_of(family)
    if not isinstance(split, str) or split not in names:
        raise ConfigError(f"split = {split!r} is not allowed; allowed: None, {', '.join(map(str, names))}")
    return split


def data_split(split: str) -> str:
    """The base split whose days and trace segment ``split`` reads (``test`` for every shift)."""
    return DATA_SPLIT.get(split, "test")


def scenario_seed(split: str, seed: int) -> int:
    """The 63-bit seed of the scenario draw for (``split``, ``seed``): different per split, so episodes of
    different splits never share arrival streams even under the same reset seed."""
    ss = np.random.SeedSequence([int(seed) & 0xFFFFFFFFFFFFFFFF, zlib.crc32(split.encode())])
    return int(ss.generate_state(2, dtype=np.uint32).astype(np.uint64) @ np.array([1, 2**32], dtype=np.uint64)
               ) & (2**63 - 1)


def scenario_rng(split: str, seed: int) -> np.random.Generator:
    """The generator a family draws the episode's scenario from (see :func:`scenario_seed`)."""
    return np.random.default_rng(scenario_seed(split, seed))


def split_days(split: str, first: pd.Timestamp, last: pd.Timestamp,
               window_h: tuple[float, float] = (0.0, 24.0)) -> pd.DatetimeIndex:
    """UTC midnights d of the days of ``split`` on which an episode covering the hours
    [d + window_h[0], d + window_h[1]) can start, inside a grid series covering the hours [first, last].

    The calendar is split first, then an episode start is kept only when every calendar day its window
    touches belongs to the same split (so no test hour ever reaches a training episode):

    - series that span 2021-2024 (the published Electricity Maps zones): validation = the days of the ISO
      weeks of 2023 divisible by 4 (13 weeks spread over the seasons), train = the other days of
      2021-2023, test = 2024;
    - series of a single year (the recomputed 2022 zones: the ``geo-paper`` topology, pd's NL grid):
      train = days 1-20 of each month, validation = days 21-23, test = day 24 to the month's end.
    """
    first = _utc(first)
    last = _utc(last)
    days = pd.date_range(first.ceil("D"), last.floor("D"), freq="D")
    if {2021, 2022, 2023, 2024} <= set(days.year):
        val = (days.year == 2023) & (days.isocalendar().week.to_numpy() % 4 == 0)
        labels = np.where(days.year == 2024, "test", np.where(val, "validation", "train"))
    else:
        dom = days.day.to_numpy()
        labels = np.where(dom <= 20, "train", np.where(dom <= 23, "validation", "test"))
    want = data_split(split)
    lo_d = int(np.floor(window_h[0] / 24.0))
    hi_d = int(np.ceil(window_h[1] / 24.0)) - 1
    n = days.size
    ok = labels == want
    for k in range(lo_d, hi_d + 1):  # every calendar day the window touches is in the split (and the series)
        shifted = np.zeros(n, dtype=bool)
        src = np.arange(n) + k
        inside = (src >= 0) & (src < n)
        shifted[inside] = labels[src[inside]] == want
        ok &= shifted
    ok &= np.asarray(days + pd.Timedelta(hours=window_h[0]) >= first)
    ok &= np.asarray(days + pd.Timedelta(hours=window_h[1]) <= last + pd.Timedelta(hours=1))
    keep = days[ok]
    if keep.size == 0:
        raise ConfigError(f"split = {split!r} has no start day in the grid series {first} - {last} for an "
                          f"episode of {window_h[1] - window_h[0]:g} h")
    return keep


def _utc(t: Any) -> pd.Timestamp:
    t = pd.Timestamp(t)
    return t.tz_convert("UTC") if t.tzinfo is not None else t.tz_localize("UTC")


def segment(split: str) -> tuple[float, float]:
    """The (start, end) shares of an arrival trace's span that ``split`` reads."""
    return TRACE_SEGMENTS[data_split(split)]


def docstring_table(family: str, width: int = 104) -> str:
    """The splits of ``family`` as reStructuredText bullets (what the env docstrings show)."""
    import textwrap

    return "\n".join(textwrap.fill(f"- ``{name}``: {text}", width, subsequent_indent="  ")
                     for name, text in FAMILY_SPLITS[family].items())


def tracks_table(family: str, width: int = 104) -> str:
    """The stress tracks of ``family`` as reStructuredText bullets, description then reason."""
    import textwrap

    return "\n".join(textwrap.fill(f"- ``{name}``: {text}. Why: {why}", width, subsequent_indent="  ",
                                   break_on_hyphens=False)
                     for name, (text, why) in FAMILY_TRACKS.get(family, {}).items())
