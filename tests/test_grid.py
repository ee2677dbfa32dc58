"""The grid layer: shipped CI/RTT data, topology presets, CV study, PUE, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.envs import grid
from servegym.envs.data import build_grid

from servegym.errors import ConfigError

GRID_DIR = Path(grid.__file__).resolve().parent / "data" / "grid"
PROVENANCE = (GRID_DIR / "PROVENANCE.md").read_text(encoding="utf-8")
PRESET_SHAPES = {"geo-paper": (4, 4), "geo-small": (2, 2), "geo-mini": (1, 3), "geo-small-shift": (2, 2),
                 "geo-mini-shift": (1, 3)}


def _provenance_zone_rows() -> dict[str, list[str]]:
    section = PROVENANCE.split("## Per-zone statistics")[1].split("## Topology presets")[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 10 and cells[0] in grid.ZONES:
            rows[cells[0]] = cells
    return rows


def _provenance_topology(name: str) -> str:
    return PROVENANCE.split(f"### `{name}`")[1].split("### `")[0]


# ---------------------------------------------------------------------------------------------
# shipped files and loaders

def test_shipped_files_are_small_and_attributed() -> None:
    total = sum(p.stat().st_size for p in GRID_DIR.iterdir())
    assert total < 3_000_000
    assert '"Carbon intensity data: Electricity Maps"' in PROVENANCE
    assert "geo-paper` preset's common window is 2022" in PROVENANCE


@pytest.mark.parametrize("zone", list(grid.ZONES))
def test_zone_series_complete_and_matches_provenance(zone: str) -> None:
    s = grid.load_ci(zone)
    assert s.dtype == np.float64 and not s.isna().any()
    assert str(s.index.tz) == "UTC"
    assert (np.diff(s.index.asi8) == np.diff(s.index.asi8)[0]).all()          # hourly, no gap
    assert (s.index[1:] - s.index[:-1] == pd.Timedelta(hours=1)).all()
    assert s.index.is_unique and s.min() > 0
    row = _provenance_zone_rows()[zone]
    _, _, source, rows, first, last, mean, lo, hi, _ = row
    assert source == grid.ZONES[zone].ci_source
    assert len(s) == int(rows)
    assert s.index[0].strftime("%Y-%m-%dT%H") == first and s.index[-1].strftime("%Y-%m-%dT%H") == last
    assert s.mean() == pytest.approx(float(mean), abs=0.051)
    assert s.min() == pytest.approx(float(lo), abs=0.006) and s.max() == pytest.approx(float(hi), abs=0.006)
    if source == grid.PUBLISHED:
        assert (first, last, len(s)) == ("2021-01-01T00", "2024-12-31T23", 35064)
    else:
        assert (first, last, len(s)) == ("2022-01-01T00", "2022-12-31T23", 8760)


def test_load_ci_returns_a_copy() -> None:
    a = grid.load_ci("NL")
    a.iloc[0] = -1.0
    assert grid.load_ci("NL").iloc[0] > 0


def test_eu_north_is_recomputed_and_paper_sites_stated() -> None:
    topo = grid.get_topology("geo-paper")
    for s in topo.sites:
        assert s.ci_source == grid.ZONES[s.zone].ci_source
        assert (s.ci_source == grid.RECOMPUTED) == (s.zone in {"NL", "BE", "LT", "LV", "US-CAR-DUK", "UY", "PE"})
    assert [s.zone for s in topo.sites if s.region == "EU-North"] == ["NL", "BE", "LT", "LV"]


# ---------------------------------------------------------------------------------------------
# presets

@pytest.mark.parametrize("name", list(PRESET_SHAPES))
def test_preset_shapes(name: str) -> None:
    n_reg, per = PRESET_SHAPES[name]
    t = grid.get_topology(name)
    assert t.name == name and len(t.regions) == n_reg and t.n_sites == n_reg * per
    assert np.bincount(t.site_region).tolist() == [per] * n_reg
    assert t.rtt_s.shape == (n_reg, n_reg) and t.site_rtt_s.shape == (n_reg, t.n_sites)
    assert np.all(np.diag(t.rtt_s) == 0) and np.allclose(t.rtt_s, t.rtt_s.T)
    assert np.all(t.pue == grid.DEFAULT_PUE)
    assert all(s.region == t.regions[t.site_region[i]] for i, s in enumerate(t.sites))
    with pytest.raises(ValueError):
        t.rtt_s[0, 0] = 1.0                                                  # read-only
    assert grid.get_topology(name) is t                                     # cached


def test_common_windows() -> None:
    paper = grid.get_topology("geo-paper").common_hours()
    assert len(paper) == 8760 and paper[0] == pd.Timestamp("2022-01-01", tz="UTC")
    for name in ("geo-small", "geo-mini"):
        h = grid.get_topology(name).common_hours()
        assert len(h) == 35064 and h[0].year == 2021 and h[-1].year == 2024


def test_paper_rtt_values_and_range() -> None:
    t = grid.get_topology("geo-paper")
    off = t.rtt_s[~np.eye(4, dtype=bool)] * 1e3
    assert 85 <= off.min() <= 100 and 280 <= off.max() <= 295                # paper Table II: 85-280 ms
    us, sa = t.regions.index("US-East"), t.regions.index("South-America")
    expect = 0.5 * (grid.aws_rtt_ms("us-east-1", "sa-east-1") + grid.aws_rtt_ms("sa-east-1", "us-east-1"))
    assert t.rtt_s[us, sa] * 1e3 == pytest.approx(expect)
    assert "RTT 93-288 ms" in grid.grid_datasets()["geo-paper"]["description"]


def test_rtt_matrix() -> None:
    regions = grid.aws_regions()
    assert len(regions) == 32
    m = np.array([[grid.aws_rtt_ms(a, b) for b in regions] for a in regions])
    assert np.all(np.diag(m) > 0) and np.all(np.diag(m) < 10)               # raw intra-region values
    assert np.abs(m - m.T).max() == pytest.approx(11.8, abs=0.05)            # PROVENANCE: 11.8 ms
    assert grid.aws_rtt_ms("us-east-1", "eu-north-1") == pytest.approx(112.478)  # raw CSV row
    assert grid.aws_rtt_ms("eu-north-1", "us-east-1") == pytest.approx(112.136)


# ---------------------------------------------------------------------------------------------
# CI lookups and the CV study

def test_ci_at_hour_floors_and_handles_time_zones() -> None:
    t = grid.get_topology("geo-paper")
    base = t.ci("2022-03-01T05:00:00Z")
    assert base.shape == (16,)
    np.testing.assert_array_equal(t.ci("2022-03-01T05:59"), base)           # naive = UTC, floored
    np.testing.assert_array_equal(t.ci("2022-03-01T06:30+01:00"), base)
    np.testing.assert_array_equal(t.ci(pd.Timestamp("2022-03-01 05:00", tz="UTC")), base)
    direct = np.array([grid.load_ci(z)[pd.Timestamp("2022-03-01 05:00", tz="UTC")] for z in t.zones])
    np.testing.assert_array_equal(base, direct)
    base[:] = 0                                                              # a copy
    assert t.ci("2022-03-01T05:00Z").min() > 0


@settings(max_examples=30, deadline=None)
@given(h=st.integers(0, 8759), minute=st.integers(0, 59))
def test_ci_series_agrees_with_ci(h: int, minute: int) -> None:
    t = grid.get_topology("geo-paper")
    hour = pd.Timestamp("2022-01-01", tz="UTC") + pd.Timedelta(hours=h)
    df = t.ci_series(hour, hour + pd.Timedelta(hours=1))
    assert list(df.columns) == list(t.site_names) and len(df) == 1
    np.testing.assert_array_equal(df.to_numpy()[0], t.ci(hour + pd.Timedelta(minutes=minute)))


def test_ci_series_window() -> None:
    t = grid.get_topology("geo-small")
    df = t.ci_series("2023-06-01", "2023-06-08")
    assert len(df) == 7 * 24 and df.index[0] == pd.Timestamp("2023-06-01", tz="UTC")
    full = t.ci_series(t.common_hours()[0], t.common_hours()[-1] + pd.Timedelta(hours=1))
    assert len(full) == 35064


def test_cv_matches_direct_numpy() -> None:
    t = grid.get_topology("geo-paper")
    cv = t.cv_by_hour()
    mat = np.column_stack([grid.load_ci(z).loc["2022"].to_numpy() for z in t.zones])
    direct = np.std(mat, axis=1, ddof=0) / np.mean(mat, axis=1)
    assert cv.index.equals(t.common_hours())
    np.testing.assert_allclose(cv.to_numpy(), direct, rtol=1e-12)


@pytest.mark.parametrize("name", list(PRESET_SHAPES))
def test_extreme_cv_hours_are_extreme(name: str) -> None:
    t = grid.get_topology(name)
    cv = t.cv_by_hour()
    lo, hi = t.extreme_cv_hours(3)
    assert len(lo) == len(hi) == 3
    rest = cv.drop(lo.append(hi))
    assert cv[lo].max() <= rest.min() and cv[hi].min() >= rest.max()
    assert list(cv[lo]) == sorted(cv[lo]) and list(cv[hi]) == sorted(cv[hi], reverse=True)
    assert cv[lo[0]] == cv.min() and cv[hi[0]] == cv.max()
    lo24, hi24 = t.extreme_cv_hours(3, min_separation_h=24)
    for picks in (lo24, hi24):
        gaps = np.abs(np.subtract.outer(picks.asi8, picks.asi8))[~np.eye(3, dtype=bool)]
        assert gaps.min() >= 24 * 3600 * 10 ** (9 if picks.unit == "ns" else 6 if picks.unit == "us" else 0)
    assert lo24[0] == lo[0] and hi24[0] == hi[0]


@pytest.mark.parametrize("name", list(PRESET_SHAPES))
def test_base_hour_is_median_cv_and_documented(name: str) -> None:
    t = grid.get_topology(name)
    cv = t.cv_by_hour()
    assert t.base_hour == t.median_cv_hour()
    assert (cv < cv[t.base_hour]).sum() <= (len(cv) - 1) // 2 <= (cv <= cv[t.base_hour]).sum()
    sec = _provenance_topology(name)
    assert f"**Base hour** {t.base_hour} (CV {cv[t.base_hour]:.3f})" in sec
    m = re.search(r"min (\d+\.\d+), median (\d+\.\d+), mean (\d+\.\d+),\s+max (\d+\.\d+)", sec)
    assert m is not None
    assert [float(x) for x in m.groups()] == pytest.approx(
        [cv.min(), cv.median(), cv.mean(), cv.max()], abs=5e-4)


def test_summary_region_means() -> None:
    t = grid.get_topology("geo-paper")
    s = t.summary()
    _, mat = t.ci_matrix()
    assert not mat.flags.writeable
    for i, r in enumerate(t.regions):
        assert s["region_mean_ci"][r] == pytest.approx(mat[:, t.site_region == i].mean(), abs=0.05)
    json.dumps(s)


# ---------------------------------------------------------------------------------------------
# PUE

def test_with_pue() -> None:
    t = grid.get_topology("geo-small")
    u = t.with_pue(1.2)
    assert np.all(u.pue == 1.2) and np.all(t.pue == 1.1)
    v = t.with_pue([1.0, 1.1, 1.2, 1.3])
    np.testing.assert_array_equal(v.pue, [1.0, 1.1, 1.2, 1.3])
    assert v.base_hour == t.base_hour and np.array_equal(v.rtt_s, t.rtt_s)
    with pytest.raises(ConfigError, match="pue has 2 values"):
        t.with_pue([1.1, 1.2])
    with pytest.raises(ConfigError, match=r"pue of site 'CA-ON' = 0.9 is out of range; allowed: \[1, 3\]"):
        t.with_pue([1.1, 0.9, 1.1, 1.1])


def test_reported_pue() -> None:
    t = grid.get_topology("geo-paper")
    values, filled = grid.reported_pue(t)
    by_zone = dict(zip(t.zones, values, strict=True))
    assert by_zone["NL"] == 1.08 and by_zone["JP-TK"] == 1.32
    assert len(filled) == 14 and "NL" not in filled and all(by_zone[z] == 1.1 for z in filled)
    assert t.with_pue(values).pue.max() == 1.32


# ---------------------------------------------------------------------------------------------
# errors

def test_bad_inputs_raise_clear_errors() -> None:
    t = grid.get_topology("geo-paper")
    with pytest.raises(ConfigError, match=r"topology = 'nope' is unknown; allowed: geo-paper, geo-small"):
        grid.get_topology("nope")
    with pytest.raises(ConfigError, match=r"zone = 'XX' is unknown; allowed: .*NL"):
        grid.load_ci("XX")
    with pytest.raises(ConfigError, match=r"hour = 2021-06-01 00:00:00\+00:00 is out of range; allowed: "
                                          r"\[2022-01-01 00:00:00\+00:00, 2022-12-31 23:00:00\+00:00\]"):
        t.ci("2021-06-01")
    with pytest.raises(ConfigError, match="hour = 'yesterday' is not a timestamp"):
        t.ci("yesterday")
    with pytest.raises(ConfigError, match=r"end = .* is out of range"):
        t.ci_series("2022-02-01", "2022-01-01")
    with pytest.raises(ConfigError, match=r"start = .* is out of range"):
        t.ci_series("2020-01-01", "2022-01-01")
    with pytest.raises(ConfigError, match=r"k = 0 is out of range; allowed: \[1, 8760\]"):
        t.extreme_cv_hours(0)
    with pytest.raises(ConfigError, match="dst = 'mars-1' is not an AWS region"):
        grid.aws_rtt_ms("us-east-1", "mars-1")
    with pytest.raises(ConfigError, match="zone = 'XX' is unknown"):
        grid.Site("a", "r", "XX", 1.1, "us-east-1", grid.PUBLISHED)
    with pytest.raises(ConfigError, match="ci_source = 'x' does not match zone NL"):
        grid.Site("a", "r", "NL", 1.1, "us-east-1", "x")
    with pytest.raises(ConfigError, match=r"base_hour = .* is out of range"):
        grid.Topology("x", t.sites, t.regions, t.site_region, t.rtt_s, pd.Timestamp("2023-05-01"))
    with pytest.raises(ConfigError, match="rtt_s diagonal must be 0"):
        grid.Topology("x", t.sites, t.regions, t.site_region, np.ones((4, 4)), t.base_hour)
    with pytest.raises(ConfigError, match="grid dataset = 'nope' is unknown"):
        grid.summarize_grid_dataset("nope")


# ---------------------------------------------------------------------------------------------
# catalogue for `servegym data`

def test_grid_datasets_and_summaries() -> None:
    ds = grid.grid_datasets()
    assert {"ci-electricitymaps", "ci-recomputed-2022", "aws-rtt", *PRESET_SHAPES} <= set(ds)
    for name, meta in ds.items():
        assert {"kind", "description", "license", "source", "file"} <= set(meta), name
        summary = grid.summarize_grid_dataset(name)
        json.dumps(summary)
    em = grid.summarize_grid_dataset("ci-electricitymaps")
    assert em["rows"] == 35064 and em["years"] == [2021, 2022, 2023, 2024]
    assert em["per_zone"]["US-MIDA-PJM"]["mean"] == 411.0                    # raw PROVENANCE: 411.0
    rec = grid.summarize_grid_dataset("ci-recomputed-2022")
    assert rec["years"] == [2022] and rec["per_zone"]["NL"]["mean"] == 416.9  # raw index: 416.9
    assert "Electricity Maps" in ds["ci-electricitymaps"]["license"]
    rtt = grid.summarize_grid_dataset("aws-rtt")
    assert rtt["rows"] == 1024 and rtt["max_asymmetry_ms"] == 11.8


# ---------------------------------------------------------------------------------------------
# against the raw data (skipped without ../shared/data)

def test_shipped_subset_equals_raw(shared_data: Path) -> None:
    ci = shared_data / "carbon_intensity"
    wide = pd.read_csv(ci / "recomputed_production_lca_2022" / "all_zones_2022_wide.csv.gz", index_col=0)
    for zone, info in grid.ZONES.items():
        ours = grid.load_ci(zone)
        if info.ci_source == grid.PUBLISHED:
            raw = pd.read_csv(ci / "electricitymaps_hourly" / f"{zone}.csv.gz", usecols=[0, 1], index_col=0)
            raw = raw["carbon_intensity_gco2_per_kwh"]
        else:
            per_zone = ci / "recomputed_production_lca_2022" / f"{zone}.csv.gz"
            raw = pd.read_csv(per_zone, index_col=0).iloc[:, 0] if per_zone.exists() else wide[zone]
        stamps = pd.to_datetime(raw.index, utc=True, format="ISO8601")
        assert ours.index.equals(stamps), zone
        np.testing.assert_array_equal(ours.to_numpy(), raw.to_numpy(np.float64), err_msg=zone)
    idx = pd.read_csv(ci / "zones_index.csv").set_index("zone")
    for zone in grid.ZONES:
        if zone in idx.index:
            assert grid.load_ci(zone).mean() == pytest.approx(idx.at[zone, "mean_gco2_per_kwh"], abs=0.051)
            assert len(grid.load_ci(zone)) == idx.at[zone, "rows"]
    rtt = pd.read_csv(shared_data / "network" / "aws_interregion_rtt_p50_1y_cloudping.csv")
    assert len(rtt) == 1024
    for row in rtt.itertuples():
        assert grid.aws_rtt_ms(row.src_region, row.dst_region) == row.rtt_p50_ms


@pytest.mark.slow
def test_build_is_reproducible(shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "grid"
    build_grid.build(shared_data, out)
    for p in sorted(GRID_DIR.iterdir()):
        assert (out / p.name).read_bytes() == p.read_bytes(), p.name
    assert grid._DATA_DIR is None
