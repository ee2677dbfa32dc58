"""Build the shipped grid data (``grid/``) from the project's raw data folder.

    python -m servegym.envs.data.build_grid --shared /work/shared/data [--out DIR]

Writes, byte-for-byte reproducibly (gzip with mtime 0 and no file name):

- ``grid/ci_electricitymaps_2021_2024.csv.gz``: ``datetime_utc`` + one column per published zone
  (the LCA column ``carbon_intensity_gco2_per_kwh`` of ``carbon_intensity/electricitymaps_hourly``,
  values unchanged);
- ``grid/ci_recomputed_production_2022.csv.gz``: ``datetime_utc`` + one column per recomputed zone
  (from ``carbon_intensity/recomputed_production_lca_2022/all_zones_2022_wide.csv.gz``, unchanged);
- ``grid/aws_rtt_p50_ms.csv.gz``: the CloudPing p50 matrix in ms, ``src_region`` rows x ``dst``
  columns (from ``network/aws_interregion_rtt_p50_1y_cloudping.csv``, unchanged);
- ``grid/PROVENANCE.md``: sources, licences, transforms and the statistics the tests check.

The zones shipped are exactly those of :data:`servegym.envs.grid.ZONES`.
"""

from __future__ import annotations

import argparse
import gzip
import io
from pathlib import Path

import numpy as np
import pandas as pd
from servegym.envs import grid

PUBLISHED_DIR = "carbon_intensity/electricitymaps_hourly"
RECOMPUTED_WIDE = "carbon_intensity/recomputed_production_lca_2022/all_zones_2022_wide.csv.gz"
RTT_RAW = "network/aws_interregion_rtt_p50_1y_cloudping.csv"
LCA_COL = "carbon_intensity_gco2_per_kwh"
FROM_TO = "from \\ to"


def write_gz(path: Path, text: str) -> None:
    """gzip ``text`` deterministically: no file name, mtime 0, level 9."""
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as g:
        g.write(text.encode("utf-8"))
    path.write_bytes(buf.getvalue())


def _check_hourly(idx: pd.Series, what: str) -> None:
    t = pd.to_datetime(idx, utc=True)
    if t.duplicated().any() or not (t.diff().dropna() == pd.Timedelta(hours=1)).all():
        raise ValueError(f"{what}: timestamps are not a complete hourly sequence")


def build_published(shared: Path) -> tuple[pd.DataFrame, dict[str, float]]:
    """(wide table, % of hours Electricity Maps estimated per zone)."""
    cols, est = {}, {}
    index = None
    for z in grid._zones_of(grid.PUBLISHED):
        raw = pd.read_csv(shared / PUBLISHED_DIR / f"{z}.csv.gz", dtype={"is_estimated": str})
        _check_hourly(raw["datetime_utc"], z)
        if raw[LCA_COL].isna().any():
            raise ValueError(f"{z}: missing LCA values")
        if index is None:
            index = raw["datetime_utc"]
        elif not index.equals(raw["datetime_utc"]):
            raise ValueError(f"{z}: hours differ from the other published zones")
        cols[z] = raw[LCA_COL].to_numpy(np.float64)
        est[z] = round(100.0 * float((raw["is_estimated"].str.lower() == "true").mean()), 1)
    assert index is not None
    return pd.DataFrame({"datetime_utc": index.to_numpy(), **cols}), est


def build_recomputed(shared: Path) -> pd.DataFrame:
    raw = pd.read_csv(shared / RECOMPUTED_WIDE)
    zones = grid._zones_of(grid.RECOMPUTED)
    out = raw[["datetime_utc", *zones]]
    _check_hourly(out["datetime_utc"], "recomputed")
    if out[zones].isna().any().any():
        raise ValueError("recomputed zones have missing hours")
    return out


def build_rtt(shared: Path) -> pd.DataFrame:
    raw = pd.read_csv(shared / RTT_RAW)
    m = raw.pivot(index="src_region", columns="dst_region", values="rtt_p50_ms")
    if m.isna().any().any() or m.shape[0] != m.shape[1]:
        raise ValueError("RTT matrix is not complete and square")
    m = m.loc[sorted(m.index), sorted(m.index)]
    m.index.name = "src_region"
    m.columns.name = None
    return m.reset_index()


def _md_table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def zone_stats_table(est: dict[str, float]) -> str:
    rows = []
    for z, info in grid.ZONES.items():
        s = grid.load_ci(z)
        rows.append([z, info.description, info.ci_source, len(s), s.index[0].strftime("%Y-%m-%dT%H"),
                     s.index[-1].strftime("%Y-%m-%dT%H"), f"{s.mean():.1f}", f"{s.min():.2f}",
                     f"{s.max():.2f}", est.get(z, "n/a")])
    return _md_table(["zone", "description", "ci_source", "rows", "first (UTC)", "last (UTC)", "mean",
                      "min", "max", "% hours estimated by EM"], rows)


def topology_section(name: str) -> str:
    t = grid.get_topology(name)
    s = t.summary()
    site_rows = [[x.name, x.region, x.zone, x.ci_source, x.aws_region] for x in t.sites]
    reg = ", ".join(f"{r} {v}" for r, v in s["region_mean_ci"].items())
    lo = ", ".join(f"{h[:13]}h CV {v}" for h, v in s["lowest_cv_hours"].items())
    hi = ", ".join(f"{h[:13]}h CV {v}" for h, v in s["highest_cv_hours"].items())
    aws = [grid._PRESETS[name].regions[i].aws_region for i in range(len(t.regions))]
    rtt_rows = [[r, *[f"{1e3 * v:.1f}" for v in t.rtt_s[i]]] for i, r in enumerate(t.regions)]
    base_ci = ", ".join(f"{k} {v}" for k, v in s["base_hour_ci"].items())
    return f"""### `{name}`

{grid._PRESETS[name].description}.

{_md_table(["site", "region", "zone", "ci_source", "aws_region (RTT)"], site_rows)}

- Common window: {s["common_window"][0]} to {s["common_window"][1]} ({s["hours"]} hours).
- CV of CI across sites per hour: min {s["cv"]["min"]}, median {s["cv"]["median"]}, mean {s["cv"]["mean"]},
  max {s["cv"]["max"]}.
- Three lowest-CV hours: {lo}.
- Three highest-CV hours: {hi}.
- **Base hour** {s["base_hour"]} (CV {s["base_hour_cv"]}); CI there (g/kWh): {base_ci}.
- Mean CI per region over the common window (g/kWh): {reg}; all sites {s["mean_ci"]}.
- RTT (ms, mean of both CloudPing directions, diagonal 0) between {", ".join(aws)}:

{_md_table([FROM_TO, *t.regions], rtt_rows)}
"""


PROVENANCE = """# Grid data shipped with servegym (`servegym.envs.data/grid`)

Built by `python -m servegym.envs.data.build_grid --shared <raw data folder>` from the project's raw data
(`shared/data/carbon_intensity` and `shared/data/network`, each with its own PROVENANCE.md giving the upstream
commits and the scripts that produced it). The build is byte-for-byte reproducible (gzip, mtime 0, no name).
Values are copied unchanged (no rounding, no resampling). Loaders: `servegym.envs.grid`.

## Attribution and licences

- **Carbon intensity: Electricity Maps** (https://www.electricitymaps.com). All CI numbers here are
  Electricity Maps data, either as published or recomputed from Electricity Maps production data. The
  repositories that redistribute them are MIT (HewlettPackard/sustain-cluster) and Apache-2.0
  (umassos/decarbonization-potential), but they do not restate Electricity Maps' own terms; treat the CI
  files as **research / non-commercial use with attribution**: "Carbon intensity data: Electricity Maps".
  The recomputed series are also due to Sukprasert et al., "On the Limitations of Carbon-Aware Temporal and
  Spatial Workload Shifting in the Cloud", EuroSys 2024.
- **RTT: CloudPing** (https://www.cloudping.co, Matt Adorjan), as snapshotted in
  oaustegard/oaustegard.github.io (Apache-2.0); cloudping.co states no data licence.

## Files

1. `ci_electricitymaps_2021_2024.csv.gz`: columns `datetime_utc` + one per zone, hourly
   2021-01-01T00Z..2024-12-31T23Z (35,064 rows). **Electricity Maps published series: consumption-based
   (flow-traced) average, lifecycle (LCA) gCO2eq/kWh, not marginal.** Source: the `carbon_intensity_gco2_per_kwh`
   column of `carbon_intensity/electricitymaps_hourly/<ZONE>.csv.gz`, which came from
   https://github.com/HewlettPackard/sustain-cluster `data/carbon_intensity/<FOLDER>/<YEAR>/` @
   `293fbd152dae52a4b77fee50362b0b61641f16d1` (data last changed in `ff60e461ed45d45a525e1182025f16998d791b4e`).
   Transform: the LCA column of each zone placed side by side on the shared hourly index (the build checks
   every zone has the same complete hourly index and no missing value).
2. `ci_recomputed_production_2022.csv.gz`: columns `datetime_utc` + one per zone, hourly
   2022-01-01T00Z..2022-12-31T23Z (8,760 rows). **Production-based lifecycle intensity for 2022, recomputed
   from Electricity Maps' hourly production mix and per-zone LCA emission factors; not consumption-based,
   not marginal.** Source: `carbon_intensity/recomputed_production_lca_2022/all_zones_2022_wide.csv.gz`, i.e.
   column `0` (no added renewables) of https://github.com/umassos/decarbonization-potential
   `sim_what_ifs/greener/data_output/added_renewables/<ZONE>.csv` (last changed in
   `e745ebddff367646baa819ed8aad5375dac813a4`, snapshot `3493a63016bd2aaa71cae1f33809576786b331d4`); timestamps
   were attached by the raw folder's curators (row i = 2022-01-01T00Z + i hours). Transform: column selection.
3. `aws_rtt_p50_ms.csv.gz`: the CloudPing one-year p50 round-trip matrix in ms, a `src_region` column and one
   column per destination, 32 x 32 AWS regions, diagonal = the raw intra-region value (the topologies set it to 0).
   Source: `network/aws_interregion_rtt_p50_1y_cloudping.csv` (= oaustegard/oaustegard.github.io
   `web-utilities/aws-ping-p50-1y.json` @ `22f8adc2f0c6507790a019946bb466cb9f3adb06`). Transform: long -> wide.

## Which series is which, and why these zones

- EU-North (NL, BE, LT, LV) are the geo paper's own four sites. No Electricity Maps *published* hourly series
  for them was reachable, so they use the recomputed 2022 production-based series. LT and LV import much of
  their electricity, so their production-based CI can differ markedly from the consumption-based figure
  Electricity Maps publishes (the raw PROVENANCE shows EE at 864 g/kWh production-based for this reason).
  Because these four series cover 2022 only, **the `geo-paper` preset's common window is 2022 (8,760 h)**,
  not the paper's 2021-2024 (~35K h).
- US-East: US-MIDA-PJM (PJM, incl. N. Virginia), US-NY-NYIS and CA-ON (Ontario) are published series. The
  only other published US zones are ERCOT and CAISO, which are not in the east, so the fourth site is
  US-CAR-DUK (Duke Energy Carolinas) from the recomputed 2022 set. The raw folder's validation of the
  recomputation against published 2022 series found r 0.997 and a mean within 7 % for US-MIDA-PJM (and
  r >= 0.97 for ERCOT and CAISO), i.e. good agreement for US balancing authorities; DUK itself cannot be
  validated here.
- Asia: SG, JP-TK, KR, IN-WE, all published. JP-TK and IN-WE are 100 % Electricity Maps estimates (smoother
  hour to hour than measured data).
- South America: BR-CS (Central-South Brazil, incl. Sao Paulo) and CL-SEN (Chile) are published. The only
  other published South American series is BR (all of Brazil, 2021-2023), which contains BR-CS (hourly
  r 0.92 with it in 2022) and so adds little spatial diversity; we use UY (Uruguay) and PE (Peru) from the
  recomputed 2022 set instead. Caveat: the raw validation found the recomputed CL-SEN tracks the published
  one perfectly in shape (r 1.00) but sits at 180 vs 324 g/kWh, so the recomputed level of South American
  zones may be biased by the emission-factor set; BR-CS recomputed agrees well (r 0.963, mean within 5 %).
- `geo-small` and `geo-mini` use only published zones, so their common window is the full 2021-2024
  (35,064 h), suitable for hourly-varying CI over long RL episodes.

## AWS region per region (for RTT; intra-region placement costs 0)

AWS has no region in NL, BE, LT, LV, Chile, Uruguay or Peru; the paper only says it uses "the measured one-year
p50 RTT between the corresponding AWS regions" and Table II gives 85-280 ms. Our choices (own judgement):
EU-North -> eu-central-1 (Frankfurt: nearest AWS region to NL and BE and to the four sites' centroid;
eu-north-1 Stockholm would give 112 ms instead of 93 ms to us-east-1, further from the paper's 85 ms lower
bound); US-East -> us-east-1 (N. Virginia, inside PJM); Asia -> ap-northeast-2 (Seoul, hosts the KR site;
the matrix then spans 93-288 ms vs the paper's 85-280 ms, against 93-257 ms with Tokyo and 93-327 ms with
Singapore); South America -> sa-east-1 (Sao Paulo, inside BR-CS). CloudPing measures each direction; a
topology uses the mean of both (largest asymmetry in the whole matrix: 11.8 ms).

## PUE

Default: uniform 1.1 (geo paper Table II). Per-site option: `servegym.envs.grid.reported_pue(topology)` uses
only the two per-DC values the geo paper quotes (SV-E, from operator disclosures compiled by Attenni and
Bartolini, arXiv:2507.11563): NL 1.08 and JP-TK 1.32. We could not source the other sites' figures here and
do not invent them: they get the default and the function returns their names.

## Coefficient of variation and base hour

CV = population standard deviation of CI across a topology's sites / their mean, per common hour (CI only, no
PUE). The paper reports, over its 35K hours of 2021-2024, a lowest CV of 0.31 and a highest of 0.94. The paper
does not give its base hour; ours is, per preset, the lower-median-CV hour of the common window (sort hours by
CV, ties by time, take index (n-1)//2): a typical CI spread, chosen deterministically.

## Per-zone statistics (gCO2eq/kWh; checked by tests/test_grid.py)

{zone_table}

## Topology presets (figures checked by tests/test_grid.py)

{topologies}
"""


def build(shared: Path, out: Path) -> None:
    """Write the grid files and PROVENANCE.md into ``out`` (a folder named ``grid``)."""
    pub, est = build_published(shared)
    write_gz(out / Path(grid.CI_FILES[grid.PUBLISHED]).name, pub.to_csv(index=False, lineterminator="\n"))
    rec = build_recomputed(shared)
    write_gz(out / Path(grid.CI_FILES[grid.RECOMPUTED]).name, rec.to_csv(index=False, lineterminator="\n"))
    rtt = build_rtt(shared)
    write_gz(out / Path(grid.RTT_FILE).name, rtt.to_csv(index=False, lineterminator="\n"))
    # The statistics are computed by the same loaders users get, from the files just written.
    saved = grid._DATA_DIR
    grid._DATA_DIR = out.parent
    grid.clear_caches()
    try:
        text = PROVENANCE.format(zone_table=zone_stats_table(est),
                                 topologies="\n".join(topology_section(n) for n in grid.available_topologies()))
    finally:
        grid._DATA_DIR = saved
        grid.clear_caches()
    (out / "PROVENANCE.md").write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, required=True, help="raw data folder (holds carbon_intensity/, network/)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "grid",
                    help="output folder, named 'grid' (default: the package's)")
    args = ap.parse_args(argv)
    if args.out.name != "grid":
        ap.error("--out must be a folder named 'grid'")
    build(args.shared, args.out)
    for p in sorted(args.out.iterdir()):
        print(f"{p.stat().st_size:>9,d}  {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
