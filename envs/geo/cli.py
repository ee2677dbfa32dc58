"""``servegym geo ...`` subcommands.

The ``geo`` group is built by :func:`add_commands`. To add a subcommand, either

- write ``def _add_<name>(geo_sub)`` here and list it in :data:`GEO_SUBCOMMANDS`, or
- put ``add_geo_commands(geo_sub)`` in your own module and list that module in
  :data:`GEO_COMMAND_MODULES` (one line), keeping heavy imports inside the handler.

Either way use :func:`add_geo_subcommand` so every subcommand gets the same shape: a parser
whose ``func`` handler takes the parsed args and returns an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable

Handler = Callable[[argparse.Namespace], int]


def add_geo_subcommand(geo_sub: argparse._SubParsersAction, name: str, help: str, handler: Handler,
                       description: str | None = None) -> argparse.ArgumentParser:
    """Add ``servegym geo <name>`` and return its parser for the caller's arguments."""
    p = geo_sub.add_parser(name, help=help, description=description or help)
    p.set_defaults(func=handler)
    return p


def _validate(args: argparse.Namespace) -> int:
    from servegym.envs.geo.validate import RATES_RPS, format_report, validate

    from servegym.errors import ConfigError

    try:
        rates = RATES_RPS if args.rates is None else tuple(float(x) for x in args.rates.split(","))
    except ValueError:
        raise ConfigError(f"--rates = {args.rates!r} must be comma-separated numbers (req/s), e.g. 2,10,50") from None
    res = validate(args.profile, rates=rates, n_requests=args.requests, seed=args.seed, progress=True)
    if args.json:
        json.dump(res, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_report(res))
    return 0 if res["all_pass"] else 1


def _add_validate(geo_sub: argparse._SubParsersAction) -> None:
    from servegym.envs.geo import DEFAULT_VALIDATION_PROFILE as DEFAULT_PROFILE

    p = add_geo_subcommand(
        geo_sub, "validate", "replay the paper's §V-B engine validation and compare with its anchors",
        _validate,
        description="Three engines of a profile, round-robin, Poisson rates 2-50 req/s, CNN-DailyMail-like "
        "lengths; prints saturation throughput, TPOT and TTFT beside the paper (exit 1 if an anchor fails).",
    )
    p.add_argument("--profile", default=DEFAULT_PROFILE, help="profile name or .json path (default: %(default)s)")
    p.add_argument("--requests", type=int, default=2400, help="requests per rate (default: %(default)s)")
    p.add_argument("--rates", default=None, help="comma-separated req/s (default: the 19-rate grid 2..50)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the result as JSON")


#: In-module subcommand adders, in --help order.
GEO_SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction], None], ...] = (_add_validate,)
#: Other modules defining ``add_geo_commands(geo_sub)``.
GEO_COMMAND_MODULES: tuple[str, ...] = ("servegym.envs.geo.compare_cli",)


def add_commands(subparsers: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """Add the ``geo`` group; returns its subparsers object so callers can add more."""
    geo = subparsers.add_parser("geo", help="geo-distributed carbon/SLO serving simulator")
    geo_sub = geo.add_subparsers(dest="geo_command", metavar="GEO_COMMAND")

    def _help(_args: argparse.Namespace) -> int:
        geo.print_help()
        return 2

    geo.set_defaults(func=_help)
    for adder in GEO_SUBCOMMANDS:
        adder(geo_sub)
    for mod in GEO_COMMAND_MODULES:
        importlib.import_module(mod).add_geo_commands(geo_sub)
    return geo_sub
