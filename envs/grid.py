"""The grid layer: datacenter sites, hourly carbon intensity, PUE and inter-region RTT.

Units: carbon intensity (CI) in gCO2eq/kWh (lifecycle, LCA), RTT in ms (``aws_rtt_ms``)
or s (``Topology.rtt_s``), PUE dimensionless (total facility energy / IT energy), hours in UTC.

Shipped data (``servegym/envs/data/grid``, built by ``python -m servegym.envs.data.build_grid``;
sources, licences and statistics in ``grid/PROVENANCE.md``):

- ``ci_electricitymaps_2021_2024.csv.gz``: Electricity Maps hourly series **as published**,
  consumption-based (flow-traced) average LCA intensity, 2021-01-01 to 2024-12-31 UTC
  (``ci_source = "electricitymaps-published"``).
- ``ci_recomputed_production_2022.csv.gz``: 2022 only, **production-based** LCA intensity
  recomputed by Sukprasert et al. (EuroSys 2024) from Electricity Maps' hourly production mix and
  lifecycle emission factors (``ci_source = "recomputed-production-2022"``). No published series
  for NL, BE, LT or LV was available, so the geo paper's EU-North sites use this one, which
  limits the ``geo-paper`` preset's common window to 2022.
- ``aws_rtt_p50_ms.csv.gz``: AWS inter-region one-year p50 RTT (CloudPing), 32 x 32 regions.

Electricity Maps data: research / non-commercial use with attribution.
Attribution: "Carbon intensity data: Electricity Maps (https://www.electricitymaps.com)".
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import io
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from servegym.errors import ConfigError, check_range, choice_error

__all__ = [
    "CI_SOURCES",
    "DEFAULT_PUE",
    "REPORTED_PUE",
    "ZONES",
    "Site",
    "Topology",
    "ZoneInfo",
    "available_topologies",
    "aws_regions",
    "aws_rtt_ms",
    "clear_caches",
    "get_topology",
    "grid_datasets",
    "load_ci",
    "reported_pue",
    "summarize_grid_dataset",
]

DEFAULT_PUE = 1.1
"""Uniform PUE of the geo paper (Table II, citing Google's fleet-wide figure)."""

PUBLISHED = "electricitymaps-published"
RECOMPUTED = "recomputed-production-2022"

CI_FILES: dict[str, str] = {
    PUBLISHED: "grid/ci_electricitymaps_2021_2024.csv.gz",
    RECOMPUTED: "grid/ci_recomputed_production_2022.csv.gz",
}
RTT_FILE = "grid/aws_rtt_p50_ms.csv.gz"

CI_SOURCES: dict[str, str] = {
    PUBLISHED: "Electricity Maps hourly series as published: consumption-based (flow-traced) average "
               "lifecycle (LCA) intensity, 2021-2024, not marginal",
    RECOMPUTED: "2022 production-based lifecycle intensity recomputed from Electricity Maps' hourly "
                "production mix and per-zone LCA emission factors (umassos/decarbonization-potential, "
                "column 0 = no added renewables), not consumption-based, not marginal",
}

_HOUR = pd.Timedelta(hours=1)


@dataclass(frozen=True)
class ZoneInfo:
    """A carbon zone we ship: Electricity Maps zone code, description and which series it is."""

    zone: str
    description: str
    ci_source: str   # a key of CI_SOURCES


ZONES: dict[str, ZoneInfo] = {z.zone: z for z in (
    # EU-North (the geo paper's four sites): only the recomputed 2022 series exists here.
    ZoneInfo("NL", "Netherlands", RECOMPUTED),
    ZoneInfo("BE", "Belgium", RECOMPUTED),
    ZoneInfo("LT", "Lithuania (net importer: production-based differs from consumption)", RECOMPUTED),
    ZoneInfo("LV", "Latvia (net importer: production-based differs from consumption)", RECOMPUTED),
    # US-East
    ZoneInfo("US-MIDA-PJM", "PJM Interconnection (incl. N. Virginia)", PUBLISHED),
    ZoneInfo("US-NY-NYIS", "New York ISO", PUBLISHED),
    ZoneInfo("CA-ON", "Ontario (IESO)", PUBLISHED),
    ZoneInfo("US-CAR-DUK", "Duke Energy Carolinas (North/South Carolina)", RECOMPUTED),
    # Asia
    ZoneInfo("SG", "Singapore", PUBLISHED),
    ZoneInfo("JP-TK", "Tokyo (TEPCO area; 100% Electricity Maps estimates)", PUBLISHED),
    ZoneInfo("KR", "South Korea", PUBLISHED),
    ZoneInfo("IN-WE", "Western India (100% Electricity Maps estimates)", PUBLISHED),
    # South America
    ZoneInfo("BR-CS", "Central-South Brazil (incl. Sao Paulo)", PUBLISHED),
    ZoneInfo("CL-SEN", "Chile (Sistema Electrico Nacional)", PUBLISHED),
    ZoneInfo("UY", "Uruguay", RECOMPUTED),
    ZoneInfo("PE", "Peru (SEIN)", RECOMPUTED),
)}

REPORTED_PUE: dict[str, tuple[float, str]] = {
    # Only the two per-DC figures the geo paper itself quotes (SV-E, from operator disclosures
    # compiled by Attenni & Bartolini, arXiv:2507.11563). We could not source the others here
    # and do not invent them: reported_pue() fills them with a default and says which.
    "NL": (1.08, "geo paper SV-E: 'from 1.08 (e.g., Netherlands)'"),
    "JP-TK": (1.32, "geo paper SV-E: 'the Japanese DCs ... with a PUE of 1.32'"),
}


@dataclass(frozen=True)
class Site:
    """One datacenter: ``zone`` is its Electricity Maps zone, ``pue`` its facility overhead factor,
    ``aws_region`` the AWS region whose CloudPing RTT stands for its region, ``ci_source`` which
    CI series the zone uses (a key of :data:`CI_SOURCES`)."""

    name: str
    region: str
    zone: str
    pue: float
    aws_region: str
    ci_source: str

    def __post_init__(self) -> None:
        if self.zone not in ZONES:
            raise ConfigError(f"site {self.name!r}: zone = {self.zone!r} is unknown; allowed: "
                              f"{', '.join(sorted(ZONES))}")
        check_range(f"site {self.name!r}: pue", float(self.pue), 1.0, 3.0)
        if self.ci_source != ZONES[self.zone].ci_source:
            raise ConfigError(f"site {self.name!r}: ci_source = {self.ci_source!r} does not match zone "
                              f"{self.zone}; allowed: {ZONES[self.zone].ci_source!r}")


# --------------------------------------------------------------------------------------------
# Loaders (cached: repeated env resets and topology builds re-use the parsed tables)


_DATA_DIR: Path | None = None
"""Override of the data folder (the one holding ``grid/``); ``None`` = the installed package's.
Only build_grid sets it, to compute the PROVENANCE figures from freshly built files."""


def _read_gz_csv(rel: str) -> pd.DataFrame:
    root = resources.files("servegym.envs.data") if _DATA_DIR is None else _DATA_DIR
    path = root.joinpath(rel)
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError(f"grid data file {rel!r} is missing from the installed package; rebuild it with "
                          "`python -m servegym.envs.data.build_grid --shared <data folder>`") from exc
    with gzip.open(io.BytesIO(raw), "rt") as f:
        return pd.read_csv(f)


@functools.cache
def _ci_table(source: str) -> pd.DataFrame:
    """The wide CI table of one source: UTC hourly index, one float64 column per zone (g/kWh)."""
    df = _read_gz_csv(CI_FILES[source])
    idx = pd.DatetimeIndex(pd.to_datetime(df.pop("datetime_utc"), utc=True, format="ISO8601"), name="datetime_utc")
    df.index = idx
    return df.astype(np.float64)


def load_ci(zone: str) -> pd.Series:
    """Hourly LCA carbon intensity of ``zone`` in gCO2eq/kWh, indexed by UTC hour (a copy).

    Published zones span 2021-01-01 00:00 to 2024-12-31 23:00 (35,064 hours); recomputed zones
    span 2022 only (8,760 hours). Every shipped series is complete (no gaps, no missing values).
    """
    if zone not in ZONES:
        raise choice_error("zone", zone, sorted(ZONES))
    s = _ci_table(ZONES[zone].ci_source)[zone].copy()
    s.name = zone
    return s


@functools.lru_cache(maxsize=64)
def _ci_block(zones: tuple[str, ...]) -> tuple[pd.DatetimeIndex, NDArray[np.float64]]:
    """(common hours, CI matrix hours x zones) over the hours where every zone has data."""
    series = [load_ci(z) for z in zones]
    common = series[0].index
    for s in series[1:]:
        common = common.intersection(s.index)
    if len(common) == 0:
        raise ConfigError(f"zones {list(zones)} have no hour in common")
    mat = np.column_stack([s.reindex(common).to_numpy() for s in series])
    mat.setflags(write=False)
    return common, mat


@functools.lru_cache(maxsize=64)
def _window(zones: tuple[str, ...]) -> tuple[int, int, bool]:
    """(first common hour in ns since the epoch, number of hours, whether they are contiguous)."""
    common = _ci_block(zones)[0]
    t0, t1 = common[0].value, common[-1].value
    return t0, len(common), len(common) == 1 + (t1 - t0) // _HOUR.value


@functools.lru_cache(maxsize=64)
def _cv(zones: tuple[str, ...]) -> pd.Series:
    common, mat = _ci_block(zones)
    # Population std (ddof=0) across the sites of one hour: the paper's "std of CI / its mean".
    cv = mat.std(axis=1) / mat.mean(axis=1)
    return pd.Series(cv, index=common, name="cv")


@functools.lru_cache(maxsize=1)
def _rtt_table() -> pd.DataFrame:
    df = _read_gz_csv(RTT_FILE)
    return df.set_index("src_region").astype(np.float64)


def aws_regions() -> list[str]:
    """The 32 AWS regions of the CloudPing matrix."""
    return list(_rtt_table().index)


def aws_rtt_ms(src: str, dst: str) -> float:
    """One-year p50 round-trip time from AWS region ``src`` to ``dst`` in ms, as CloudPing reports it
    (directed; the same-region value is the raw intra-region figure, about 1-8 ms)."""
    t = _rtt_table()
    for field, name in (("src", src), ("dst", dst)):
        if name not in t.index:
            raise ConfigError(f"{field} = {name!r} is not an AWS region of the RTT matrix; allowed: "
                              f"{', '.join(t.index)}")
    return float(t.at[src, dst])


# --------------------------------------------------------------------------------------------
# Topology


def _to_hour(hour: Any, field: str = "hour") -> pd.Timestamp:
    """A UTC hour (floored); naive inputs are taken as UTC."""
    try:
        ts = pd.Timestamp(hour)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{field} = {hour!r} is not a timestamp; allowed: an ISO-8601 time, "
                          "datetime or pandas Timestamp (UTC)") from exc
    if ts is pd.NaT:
        raise ConfigError(f"{field} = {hour!r} is not a timestamp (NaT)")
    ts = ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")
    if ts.minute or ts.second or ts.microsecond or ts.nanosecond:
        ts = ts.floor("h")
    return ts


@dataclass(frozen=True, eq=False)
class Topology:
    """Regions of datacenter sites with hourly CI, PUE and a region x region RTT matrix.

    ``regions`` are in a fixed order; ``site_region[i]`` indexes ``regions`` for site ``i``;
    ``rtt_s`` is the symmetrised (mean of both directions) CloudPing p50 RTT in seconds between the
    regions' AWS regions, with a zero diagonal because the paper charges nothing for a local
    placement. ``base_hour`` (UTC) is the hour whose CI a run holds constant by default.
    """

    name: str
    sites: tuple[Site, ...]
    regions: tuple[str, ...]
    site_region: NDArray[np.int64]
    rtt_s: NDArray[np.float64]
    base_hour: pd.Timestamp

    def __post_init__(self) -> None:
        if not self.sites:
            raise ConfigError("sites = () is empty; allowed: at least one Site")
        names = [s.name for s in self.sites]
        if len(set(names)) != len(names):
            raise ConfigError(f"sites: names {names} are not unique")
        n_reg = len(self.regions)
        sr = np.asarray(self.site_region, dtype=np.int64)
        if sr.shape != (len(self.sites),) or sr.min() < 0 or sr.max() >= n_reg:
            raise ConfigError(f"site_region must hold {len(self.sites)} indices in [0, {n_reg - 1}]")
        for i, s in enumerate(self.sites):
            if s.region != self.regions[sr[i]]:
                raise ConfigError(f"site {s.name!r}: region {s.region!r} != regions[site_region[{i}]] "
                                  f"= {self.regions[sr[i]]!r}")
        rtt = np.asarray(self.rtt_s, dtype=np.float64)
        if rtt.shape != (n_reg, n_reg) or not np.all(np.isfinite(rtt)) or rtt.min() < 0:
            raise ConfigError(f"rtt_s must be a finite non-negative {n_reg} x {n_reg} matrix (s)")
        if np.any(np.diag(rtt) != 0):
            raise ConfigError("rtt_s diagonal must be 0 (local placement costs no transfer)")
        object.__setattr__(self, "_zones", tuple(s.zone for s in self.sites))
        sr.setflags(write=False)
        rtt = rtt.copy()
        rtt.setflags(write=False)
        object.__setattr__(self, "site_region", sr)
        object.__setattr__(self, "rtt_s", rtt)
        object.__setattr__(self, "base_hour", _to_hour(self.base_hour, "base_hour"))
        common = self.common_hours()
        if self.base_hour not in common:
            raise ConfigError(f"base_hour = {self.base_hour} is out of range; allowed: "
                              f"[{common[0]}, {common[-1]}] (the sites' common hours)")

    # -- basic views --------------------------------------------------------------------------
    @property
    def n_sites(self) -> int:
        return len(self.sites)

    @property
    def site_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sites)

    @property
    def zones(self) -> tuple[str, ...]:
        return self._zones  # type: ignore[attr-defined,no-any-return]

    @property
    def pue(self) -> NDArray[np.float64]:
        """Per-site PUE (dimensionless)."""
        return np.array([s.pue for s in self.sites], dtype=np.float64)

    @property
    def site_rtt_s(self) -> NDArray[np.float64]:
        """RTT in s from each region's scheduler (rows) to each site (columns): regions x sites."""
        return self.rtt_s[:, self.site_region]

    # -- carbon intensity ---------------------------------------------------------------------
    def common_hours(self) -> pd.DatetimeIndex:
        """UTC hours where every site has CI data (``geo-paper``: 2022 only, set by EU-North)."""
        return _ci_block(self.zones)[0]

    def _hour_pos(self, hour: Any, field: str = "hour") -> int:
        ts = _to_hour(hour, field)
        t0, n, contiguous = _window(self.zones)
        try:
            if contiguous:   # plain arithmetic: get_loc on a tz-aware index costs ~30 us
                pos = (ts.value - t0) // _HOUR.value
                if 0 <= pos < n:
                    return int(pos)
                raise KeyError(ts)
            return int(self.common_hours().get_loc(ts))
        except KeyError:
            common = self.common_hours()
            raise ConfigError(f"{field} = {ts} is out of range; allowed: [{common[0]}, {common[-1]}] "
                              f"(UTC hours where every site of {self.name!r} has CI data)") from None

    def ci(self, hour: Any) -> NDArray[np.float64]:
        """CI per site (gCO2eq/kWh) at the UTC hour containing ``hour`` (floored; naive = UTC)."""
        return _ci_block(self.zones)[1][self._hour_pos(hour)].copy()

    def ci_series(self, start: Any, end: Any) -> pd.DataFrame:
        """Hourly CI (gCO2eq/kWh) for hours in [start, end) (UTC), one column per site name."""
        i0 = self._hour_pos(start, "start")
        common, mat = _ci_block(self.zones)
        e = _to_hour(end, "end")
        last = common[-1] + _HOUR
        if e <= common[i0] or e > last:
            raise ConfigError(f"end = {e} is out of range; allowed: ({common[i0]}, {last}]")
        i1 = int(common.searchsorted(e))
        return pd.DataFrame(mat[i0:i1].copy(), index=common[i0:i1], columns=list(self.site_names))

    def ci_matrix(self) -> tuple[pd.DatetimeIndex, NDArray[np.float64]]:
        """(common hours, read-only CI matrix hours x sites in gCO2eq/kWh): for hourly-varying runs.

        Index it directly in hot loops; :meth:`ci` costs about 8 us with a Timestamp and about
        40 us with a string (parsing) on this machine.
        """
        return _ci_block(self.zones)

    def cv_by_hour(self) -> pd.Series:
        """Coefficient of variation of CI across sites (population std / mean) per common hour.

        Computed on CI alone (not CI x PUE), as in the paper's Fig. 5b.
        """
        return _cv(self.zones).copy()

    def extreme_cv_hours(self, k: int, min_separation_h: int = 0
                         ) -> tuple[pd.DatetimeIndex, pd.DatetimeIndex]:
        """(the k lowest-CV hours, ascending CV; the k highest-CV hours, descending CV).

        Ties are broken by the earlier hour, so the result is deterministic. With
        ``min_separation_h > 0`` an hour is skipped if it lies closer than that to one already
        picked (extreme hours come in runs of adjacent hours; the paper does not say whether its
        Fig. 5b picks were separated, so the default keeps the plain k extremes).
        """
        cv = _cv(self.zones)
        for field, v, hi in (("k", k, len(cv)), ("min_separation_h", min_separation_h, 24 * 366)):
            check_range(field, v, 0 if field == "min_separation_h" else 1, hi)
            if int(v) != v:
                raise ConfigError(f"{field} = {v!r} must be an integer")
        vals, n = cv.to_numpy(), len(cv)
        hours = np.asarray((cv.index - cv.index[0]) // _HOUR, dtype=np.int64)
        out = []
        for order in (np.lexsort((np.arange(n), vals)), np.lexsort((np.arange(n), -vals))):
            picked: list[int] = []
            for i in order:
                if all(abs(hours[i] - hours[j]) >= min_separation_h for j in picked):
                    picked.append(int(i))
                    if len(picked) == k:
                        break
            if len(picked) < k:
                raise ConfigError(f"k = {k} hours {min_separation_h} h apart do not fit in the "
                                  f"{n} common hours; allowed: a smaller k or min_separation_h")
            out.append(cv.index[picked])
        return out[0], out[1]

    def median_cv_hour(self) -> pd.Timestamp:
        """The lower-median-CV common hour (ties by time): the rule that picked each preset's base hour."""
        cv = _cv(self.zones)
        order = np.lexsort((np.arange(len(cv)), cv.to_numpy()))
        return cv.index[order[(len(cv) - 1) // 2]]

    # -- PUE ----------------------------------------------------------------------------------
    def with_pue(self, pue: float | Sequence[float]) -> Topology:
        """A copy with one PUE for every site, or one value per site (in site order)."""
        if np.ndim(pue) == 0:
            values = [float(pue)] * self.n_sites  # type: ignore[arg-type]
        else:
            values = [float(p) for p in pue]  # type: ignore[union-attr]
            if len(values) != self.n_sites:
                raise ConfigError(f"pue has {len(values)} values; allowed: one value or exactly "
                                  f"{self.n_sites} (one per site)")
        for s, p in zip(self.sites, values, strict=True):
            check_range(f"pue of site {s.name!r}", p, 1.0, 3.0)
        sites = tuple(dataclasses.replace(s, pue=p) for s, p in zip(self.sites, values, strict=True))
        return dataclasses.replace(self, sites=sites)

    def summary(self) -> dict[str, Any]:
        """JSON-ready description: sites, common window, CV range, base hour, per-region mean CI."""
        common, mat = _ci_block(self.zones)
        cv = _cv(self.zones)
        lo, hi = self.extreme_cv_hours(3)
        reg_mean = {r: round(float(mat[:, self.site_region == i].mean()), 1)
                    for i, r in enumerate(self.regions)}
        return {
            "topology": self.name,
            "regions": list(self.regions),
            "sites": [dataclasses.asdict(s) for s in self.sites],
            "common_window": [str(common[0]), str(common[-1])],
            "hours": len(common),
            "years": sorted({int(y) for y in common.year}),
            "rtt_ms_offdiag": ([round(float(x) * 1e3, 1) for x in
                                (self.rtt_s[~np.eye(len(self.regions), dtype=bool)].min(),
                                 self.rtt_s.max())] if len(self.regions) > 1 else []),
            "mean_ci": round(float(mat.mean()), 1),
            "min_ci": round(float(mat.min()), 1),
            "max_ci": round(float(mat.max()), 1),
            "region_mean_ci": reg_mean,
            "cv": {"min": round(float(cv.min()), 3), "median": round(float(cv.median()), 3),
                   "mean": round(float(cv.mean()), 3), "max": round(float(cv.max()), 3)},
            "lowest_cv_hours": {str(h): round(float(cv[h]), 3) for h in lo},
            "highest_cv_hours": {str(h): round(float(cv[h]), 3) for h in hi},
            "base_hour": str(self.base_hour),
            "base_hour_cv": round(float(cv[self.base_hour]), 3),
            "base_hour_ci": dict(zip(self.site_names, np.round(self.ci(self.base_hour), 1).tolist(),
                                     strict=True)),
        }


def reported_pue(topology: Topology, default: float = DEFAULT_PUE) -> tuple[tuple[float, ...], tuple[str, ...]]:
    """(per-site PUE from :data:`REPORTED_PUE`, the names of sites filled with ``default``).

    Use as ``topo.with_pue(reported_pue(topo)[0])``. Only the figures the geo paper quotes are
    sourced; every other site gets ``default`` and is listed, so the gap stays visible.
    """
    check_range("default", default, 1.0, 3.0)
    values, filled = [], []
    for s in topology.sites:
        if s.zone in REPORTED_PUE:
            values.append(REPORTED_PUE[s.zone][0])
        else:
            values.append(float(default))
            filled.append(s.name)
    return tuple(values), tuple(filled)


# --------------------------------------------------------------------------------------------
# Presets


@dataclass(frozen=True)
class _RegionSpec:
    name: str
    aws_region: str
    zones: tuple[str, ...]


@dataclass(frozen=True)
class _PresetSpec:
    description: str
    regions: tuple[_RegionSpec, ...]
    base_hour: str


_PRESETS: dict[str, _PresetSpec] = {
    "geo-paper": _PresetSpec(
        description="Geo paper SV-A: EU-North (NL, BE, LT, LV; recomputed 2022 series), US-East, Asia, "
                    "South America, four DCs each; AWS p50 RTT 93-288 ms (paper: 85-280 ms); common "
                    "window 2022 (8,760 h) because the EU-North series cover 2022 only",
        regions=(
            # AWS has no region in NL/BE/LT/LV; Frankfurt is the nearest to NL and BE and to the four
            # sites' centroid, and matches the paper's lower RTT bound better than eu-north-1.
            _RegionSpec("EU-North", "eu-central-1", ("NL", "BE", "LT", "LV")),
            _RegionSpec("US-East", "us-east-1", ("US-MIDA-PJM", "US-NY-NYIS", "CA-ON", "US-CAR-DUK")),
            # Seoul hosts the KR site; with it the matrix spans 93-288 ms vs the paper's 85-280 ms
            # (Tokyo gives 93-257 ms, Singapore 93-327 ms).
            _RegionSpec("Asia", "ap-northeast-2", ("SG", "JP-TK", "KR", "IN-WE")),
            _RegionSpec("South-America", "sa-east-1", ("BR-CS", "CL-SEN", "UY", "PE")),
        ),
        # Lower-median-CV hour of the 2022 common window: CV 0.621 (range 0.442-0.816).
        base_hour="2022-01-27T04:00:00Z",
    ),
    "geo-small": _PresetSpec(
        description="2 regions x 2 DCs for fast RL training: US-East (PJM, Ontario) and South America "
                    "(Central-South Brazil, Chile), all published 2021-2024 series (35,064 common "
                    "hours), one clean and one dirty grid per region, 115 ms apart",
        regions=(
            _RegionSpec("US-East", "us-east-1", ("US-MIDA-PJM", "CA-ON")),
            _RegionSpec("South-America", "sa-east-1", ("BR-CS", "CL-SEN")),
        ),
        base_hour="2024-05-27T17:00:00Z",
    ),
    "geo-mini": _PresetSpec(
        description="1 region x 3 DCs (US-East: PJM, New York, Ontario), published 2021-2024 series, "
                    "no inter-region transfer: the smallest carbon-routing problem",
        regions=(_RegionSpec("US-East", "us-east-1", ("US-MIDA-PJM", "US-NY-NYIS", "CA-ON")),),
        base_hour="2022-12-07T12:00:00Z",
    ),
    # Distribution-shift twins of the two training presets (the benchmark's ``shift-topology`` split,
    # servegym.splits): same number of regions and DCs, so a trained agent's spaces fit, but other grids,
    # other CI levels and another RTT. Only zones with published 2021-2024 series qualify.
    "geo-small-shift": _PresetSpec(
        description="shift twin of geo-small, 2 regions x 2 DCs: North-East Asia (Tokyo, Korea) and "
                    "South Asia (Singapore, Western India), published 2021-2024 series, 74 ms apart; "
                    "every grid dirtier than geo-small's clean pair (450-745 g/kWh means)",
        regions=(
            _RegionSpec("Asia-NorthEast", "ap-northeast-2", ("JP-TK", "KR")),
            _RegionSpec("Asia-South", "ap-southeast-1", ("SG", "IN-WE")),
        ),
        # Lower-median-CV hour of the 2021-2024 common window: CV 0.204 (range 0.126-0.508).
        base_hour="2024-03-04T07:00:00Z",
    ),
    "geo-mini-shift": _PresetSpec(
        description="shift twin of geo-mini, 1 region x 3 DCs: Asia (Tokyo, Korea, Singapore), "
                    "published 2021-2024 series, no inter-region transfer",
        regions=(_RegionSpec("Asia", "ap-northeast-2", ("JP-TK", "KR", "SG")),),
        # Lower-median-CV hour: CV 0.099 (range 0.001-0.391: three dirty grids, little to gain by routing).
        base_hour="2023-01-30T21:00:00Z",
    ),
}


def available_topologies() -> list[str]:
    """Names accepted by :func:`get_topology`."""
    return list(_PRESETS)


def _symmetric_rtt_s(aws: Sequence[str]) -> NDArray[np.float64]:
    n = len(aws)
    rtt = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if i != j:
                # CloudPing measures each direction separately (asymmetry <= 12 ms); a round trip is
                # one quantity, so take the mean of both.
                rtt[i, j] = 0.5 * (aws_rtt_ms(aws[i], aws[j]) + aws_rtt_ms(aws[j], aws[i])) / 1e3
    return rtt


@functools.cache
def get_topology(name: str) -> Topology:
    """A preset topology (immutable; PUE 1.1 at every site): one of :func:`available_topologies`.

    Base hours (UTC; rule: the lower-median-CV hour of the common window, ties by time):
    ``geo-paper`` 2022-01-27 04:00 (CV 0.621; 2022 range 0.442-0.816), ``geo-small``
    2024-05-27 17:00 (CV 0.668; 2021-2024 range 0.403-1.036) and ``geo-mini`` 2022-12-07 12:00
    (CV 0.571; range 0.331-0.846). The paper (2021-2024, its own sites) reports 0.31-0.94.
    """
    if name not in _PRESETS:
        raise choice_error("topology", name, _PRESETS)
    spec = _PRESETS[name]
    sites, site_region = [], []
    for i, reg in enumerate(spec.regions):
        for z in reg.zones:
            sites.append(Site(name=z, region=reg.name, zone=z, pue=DEFAULT_PUE,
                              aws_region=reg.aws_region, ci_source=ZONES[z].ci_source))
            site_region.append(i)
    return Topology(
        name=name, sites=tuple(sites), regions=tuple(r.name for r in spec.regions),
        site_region=np.array(site_region, dtype=np.int64),
        rtt_s=_symmetric_rtt_s([r.aws_region for r in spec.regions]),
        base_hour=pd.Timestamp(spec.base_hour),
    )


# --------------------------------------------------------------------------------------------
# Dataset catalogue for `servegym data list/show`

_EM_LICENSE = ("Electricity Maps data: research / non-commercial use with attribution "
               "(\"Carbon intensity data: Electricity Maps, https://www.electricitymaps.com\"); "
               "redistributed via MIT / Apache-2.0 repositories")
_SUKPRASERT = ("Sukprasert et al., \"On the Limitations of Carbon-Aware Temporal and Spatial Workload "
               "Shifting in the Cloud\", EuroSys 2024")


def grid_datasets() -> dict[str, dict[str, Any]]:
    """Shipped grid datasets and presets: name -> {kind, description, license, source, file, citation}."""
    out: dict[str, dict[str, Any]] = {
        "ci-electricitymaps": {
            "kind": "carbon-intensity",
            "description": "Hourly LCA carbon intensity 2021-2024 as published by Electricity Maps "
                           "(consumption-based average): " + ", ".join(_zones_of(PUBLISHED)),
            "license": _EM_LICENSE,
            "source": "https://github.com/HewlettPackard/sustain-cluster data/carbon_intensity "
                      "@ 293fbd152dae52a4b77fee50362b0b61641f16d1",
            "file": CI_FILES[PUBLISHED],
            "citation": "Electricity Maps, https://www.electricitymaps.com",
        },
        "ci-recomputed-2022": {
            "kind": "carbon-intensity",
            "description": "Hourly production-based LCA carbon intensity for 2022, recomputed from "
                           "Electricity Maps production data: " + ", ".join(_zones_of(RECOMPUTED)),
            "license": _EM_LICENSE,
            "source": "https://github.com/umassos/decarbonization-potential "
                      "sim_what_ifs/greener/data_output/added_renewables/<ZONE>.csv column 0 "
                      "@ 3493a63016bd2aaa71cae1f33809576786b331d4",
            "file": CI_FILES[RECOMPUTED],
            "citation": _SUKPRASERT + "; Electricity Maps",
        },
        "aws-rtt": {
            "kind": "rtt",
            "description": "AWS inter-region round-trip time, one-year p50 (CloudPing), 32 x 32 regions, ms",
            "license": "Apache-2.0 (repository); cloudping.co states no data licence",
            "source": "https://github.com/oaustegard/oaustegard.github.io web-utilities/aws-ping-p50-1y.json "
                      "@ 22f8adc2f0c6507790a019946bb466cb9f3adb06 (from cloudping.co)",
            "file": RTT_FILE,
            "citation": "Matt Adorjan, CloudPing, https://www.cloudping.co",
        },
    }
    for name, spec in _PRESETS.items():
        out[name] = {"kind": "topology", "description": spec.description, "license": _EM_LICENSE,
                     "source": "servegym preset over the CI and RTT datasets above",
                     "file": ", ".join([*CI_FILES.values(), RTT_FILE]),
                     "citation": "Electricity Maps; CloudPing"}
    return out


def _zones_of(source: str) -> list[str]:
    return [z for z, info in ZONES.items() if info.ci_source == source]


def _ci_dataset_summary(source: str) -> dict[str, Any]:
    per_zone: dict[str, Any] = {}
    for z in _zones_of(source):
        s = load_ci(z)
        per_zone[z] = {"rows": len(s), "first": str(s.index[0]), "last": str(s.index[-1]),
                       "mean": round(float(s.mean()), 1), "min": round(float(s.min()), 2),
                       "max": round(float(s.max()), 2), "description": ZONES[z].description}
    zones = tuple(per_zone)
    common, mat = _ci_block(zones)
    cv = _cv(zones)
    return {
        "signal": CI_SOURCES[source],
        "zones": list(zones),
        "years": sorted({int(y) for y in common.year}),
        "rows": len(common),
        "mean_ci": round(float(mat.mean()), 1),
        "min_ci": round(float(mat.min()), 2),
        "max_ci": round(float(mat.max()), 2),
        "cv_across_zones": {"min": round(float(cv.min()), 3), "median": round(float(cv.median()), 3),
                            "max": round(float(cv.max()), 3)},
        "per_zone": per_zone,
    }


def summarize_grid_dataset(name: str) -> dict[str, Any]:
    """Summary statistics of one grid dataset (see :func:`grid_datasets`), JSON-ready."""
    if name == "ci-electricitymaps":
        return _ci_dataset_summary(PUBLISHED)
    if name == "ci-recomputed-2022":
        return _ci_dataset_summary(RECOMPUTED)
    if name == "aws-rtt":
        t = _rtt_table()
        m = t.to_numpy()
        off = m[~np.eye(len(m), dtype=bool)]
        return {"regions": list(t.index), "rows": int(m.size), "unit": "ms (round trip, p50 over one year)",
                "min_offdiag_ms": round(float(off.min()), 1), "max_ms": round(float(off.max()), 1),
                "median_offdiag_ms": round(float(np.median(off)), 1),
                "max_asymmetry_ms": round(float(np.abs(m - m.T).max()), 1),
                "diagonal_ms": [round(float(x), 1) for x in (np.diag(m).min(), np.diag(m).max())]}
    if name in _PRESETS:
        return get_topology(name).summary()
    allowed = ", ".join(grid_datasets())
    raise ConfigError(f"grid dataset = {name!r} is unknown; allowed: {allowed}")


def clear_caches() -> None:
    """Drop every cached table (after rebuilding the data files in place)."""
    for f in (_ci_table, _ci_block, _window, _cv, _rtt_table, get_topology):
        f.cache_clear()
