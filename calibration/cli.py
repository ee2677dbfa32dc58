"""``servegym calibrate geo ...``: regenerate the geo profiles or fit a user's measurement CSV.

    servegym calibrate geo [--profile NAME|all] [--data DIR] [--out DIR | --overwrite-shipped] [--tables DIR] [--json]
    servegym calibrate geo --csv FILE --kind prefill|decode|energy-prefill|energy-decode [--json]

CSV columns per kind (one row per measured step; units s, J, tokens):
prefill: n_tokens, n_requests, sum_sq, time_s; decode: batch, kv_tokens, time_s;
energy-prefill: n_tokens, sum_sq, energy_j; energy-decode: batch, kv_tokens, energy_j.

Calibration writes into a user folder (default ./servegym-results/calibration/<target>), never into the
installed package; --overwrite-shipped replaces the package's shipped files instead (for maintainers).
A profile written elsewhere is used by passing its path: GeoConfig(profile="PATH/NAME.json").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

KINDS = ("prefill", "decode", "energy-prefill", "energy-decode")
#: Where calibration writes by default (relative to the working directory): a user folder, never the package.
USER_OUT = Path("servegym-results") / "calibration"


def output_dir(args: argparse.Namespace, target: str, shipped: Path) -> Path:
    """``--out``, else the package's ``shipped`` folder with ``--overwrite-shipped``, else ``USER_OUT/target``."""
    from servegym.errors import ConfigError

    if args.out is not None and args.overwrite_shipped:
        raise ConfigError("--out and --overwrite-shipped exclude each other")
    if args.overwrite_shipped:
        return shipped
    return args.out if args.out is not None else USER_OUT / target


def _add_out_flags(p: argparse.ArgumentParser, target: str) -> None:
    p.add_argument("--out", type=Path, default=None,
                   help=f"output folder (default: ./{(USER_OUT / target).as_posix()}; never the installed package)")
    p.add_argument("--overwrite-shipped", action="store_true",
                   help="write into the package's shipped calibration/profiles/ folder instead (maintainers)")


def calibrate_targets(subparsers: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """The ``calibrate`` family's subparsers, created once and shared by every family that adds a target."""
    existing = subparsers.choices.get("calibrate")
    if existing is not None and hasattr(existing, "servegym_targets"):
        return existing.servegym_targets
    cal = subparsers.add_parser("calibrate", help="fit step models from measurements and regenerate profiles")
    targets = cal.add_subparsers(dest="calibrate_target", metavar="TARGET")
    cal.servegym_targets = targets  # type: ignore[attr-defined]
    cal.set_defaults(func=lambda args: (cal.print_help(), 2)[1])
    return targets


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    targets = calibrate_targets(subparsers)
    geo = targets.add_parser(
        "geo", help="geo engine profiles: regenerate from ../shared/data or fit your own CSV",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    geo.add_argument("--profile", default="all", help="profile name or 'all' (default)")
    geo.add_argument("--data", type=Path, default=None, help="raw data folder (default: ../shared/data)")
    _add_out_flags(geo, "geo")
    geo.add_argument("--tables", type=Path, default=None,
                     help="also write each profile's composed step tables (CSV) to this folder")
    geo.add_argument("--csv", type=Path, default=None, help="fit this measurement CSV instead (see --kind)")
    geo.add_argument("--kind", choices=KINDS, default=None, help="table kind of --csv")
    geo.add_argument("--json", action="store_true", help="print JSON")
    geo.set_defaults(func=_cmd_geo)
    _add_osl(targets)
    _add_pd_kv(targets)


def _add_pd_kv(targets: argparse._SubParsersAction) -> None:
    """``servegym calibrate pd-kv``: the PD model's KV pool C_tok, fitted to 3p1d = 5.2 req/s."""
    from servegym.calibration.pd_kv import add_arguments, run_cli

    p = targets.add_parser(
        "pd-kv", help="pd KV pool C_tok: refit to the paper's 3p1d = 5.2 req/s (brentq) and compare with the record",
        description="Fit the PD model's decode KV pool C_tok (the one unpublished parameter) to the paper's one "
                    "decode-bound capacity measurement, 3p1d = 5.2 req/s at fixed 4096/256 (§5.3.2), by brentq; "
                    "print it beside the shipped record. Writes nothing unless --out or --overwrite-shipped.")
    add_arguments(p)
    p.set_defaults(func=run_cli)


def _add_osl(targets: argparse._SubParsersAction) -> None:
    """``servegym calibrate osl``: retrain the geo OSL predictor (``servegym.calibration.osl``)."""
    p = targets.add_parser(
        "osl", help="geo OSL predictor: retrain the MLP on the shipped traces and report bucket accuracy",
        description="Retrain the geo paper's OSL predictor (servegym.calibration.osl) on the shipped traces "
                    "(azure-code, azure-conv, mooncake, arxiv) with a seeded train/test split, report held-out "
                    "bucket accuracy per application, and write osl_mlp.npz/.json and PROVENANCE.md into "
                    "./servegym-results/calibration/osl (--out DIR elsewhere; --overwrite-shipped replaces the "
                    "package's predictor). The same seed gives the same files bit for bit.",
    )
    p.add_argument("--seed", type=int, default=0, help="split/init/minibatch seed (default 0)")
    p.add_argument("--epochs", type=int, default=None, help="training epochs (default: TrainConfig's, 30)")
    p.add_argument("--max-rows-per-app", type=int, default=None,
                   help="train on a seeded subset of this many requests per application (default: all)")
    _add_out_flags(p, "osl")
    p.add_argument("--no-save", action="store_true", help="only report; write nothing")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_cmd_osl)


def _cmd_osl(args: argparse.Namespace) -> int:
    from servegym.calibration.osl import run_cli

    return run_cli(args)


def _cmd_geo(args: argparse.Namespace) -> int:
    from servegym.errors import ConfigError

    if args.csv is not None:
        if args.kind is None:
            raise ConfigError(f"--kind is required with --csv; allowed: {', '.join(map(str, KINDS))}")
        return _fit_csv(args.csv, args.kind, args.json)
    if args.kind is not None:
        raise ConfigError("--kind only applies with --csv FILE")
    return _regenerate(args)


def _fit_csv(path: Path, kind: str, as_json: bool) -> int:
    import pandas as pd
    from servegym.calibration.geo.fitting import fit_table

    from servegym.errors import ConfigError

    if not path.is_file():
        raise ConfigError(f"--csv {str(path)!r} does not exist")
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--csv {str(path)!r} is not a readable CSV: {exc}") from exc
    res = fit_table(df, kind, source=str(path))
    out = {"kind": kind, "file": str(path), "rows_train": res.n_train, "rows_test": res.n_test,
           "mape_holdout_pct": res.mape_holdout, "mape_train_pct": res.mape_train, "coefficients": res.coefficients()}
    if as_json:
        print(json.dumps(out, indent=2))
    else:
        print(f"{kind} fit of {path} ({res.n_train} train / {res.n_test} held-out rows)")
        for k, v in out["coefficients"].items():
            print(f"  {k:14s} {v}")
        print(f"  held-out MAPE {res.mape_holdout:.2f}%  (train {res.mape_train:.2f}%)")
    return 0


def _regenerate(args: argparse.Namespace) -> int:
    from servegym.calibration.geo.anchors import anchor_report, distserve_crosscheck
    from servegym.calibration.geo.profiles import SETUPS, build_profile, profile_dir
    from servegym.calibration.geo.sources import default_data_dir
    from tqdm import tqdm

    from servegym.errors import ConfigError

    names = list(SETUPS) if args.profile == "all" else [args.profile]
    for n in names:
        if n not in SETUPS:
            raise ConfigError(f"--profile {n!r} is unknown; allowed: {', '.join(map(str, [*SETUPS, 'all']))}")
    data = args.data if args.data is not None else default_data_dir()
    if not Path(data).is_dir():
        raise ConfigError(f"raw data folder {str(data)!r} not found; pass --data DIR (the shared data folder "
                          "holding vidur_profiling/, gpu_perf/, ml_energy/)")
    out = output_dir(args, "geo", profile_dir())
    out.mkdir(parents=True, exist_ok=True)
    report = {}
    for n in tqdm(names, desc="calibrating", disable=args.json or len(names) == 1, leave=False):
        prof = build_profile(n, data, tables_out=args.tables)
        path = out / f"{n}.json"
        prof.save(path)
        report[n] = {"file": str(path), "fit_mape_pct": prof.fit_mape, "anchors": anchor_report(prof),
                     "distserve_ratio": distserve_crosscheck(prof, data)}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for n, r in report.items():
        m, a = r["fit_mape_pct"], r["anchors"]
        print(f"{n} -> {r['file']}")
        print("  held-out MAPE %: " + ", ".join(f"{k} {v:.2f}" for k, v in m.items()))
        print(f"  t_dec(B=1,K=900) {a['tdec_b1_k900_ms']:.2f} ms | prefill 841 tok {a['prefill_841_one_step_ms']:.1f} ms"
              f" (chunked {a['ttft_841_chunked_ms']:.1f} ms) | 3-engine saturation ~{a['saturation_req_s_3_engines']:.2f}"
              f" req/s (paper 27.58 for Llama TP1) | decode {a['decode_power_w_per_gpu_max_batch']:.0f} W/GPU,"
              f" prefill {a['prefill_power_w_per_gpu_8192_tokens']:.0f} W/GPU")
        if r["distserve_ratio"]:
            print("  vs DistServe vLLM A100 (OPT-13B scaled): " + ", ".join(
                f"{k} {v:.2f}" for k, v in r["distserve_ratio"].items()))
    return 0
