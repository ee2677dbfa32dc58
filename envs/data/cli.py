"""``servegym data list`` and ``servegym data show NAME [--json]``: the shipped datasets."""

from __future__ import annotations

import argparse
import json
from typing import Any

LICENSE_WIDTH = 60


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser("data", help="list and inspect the shipped traces and grid datasets")
    sub = data.add_subparsers(dest="data_command", metavar="ACTION")
    p_list = sub.add_parser("list", help="table of shipped datasets: name, kind, rows/zones, licence")
    p_list.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p_list.set_defaults(func=_cmd_list)
    p_show = sub.add_parser("show", help="summary statistics of one dataset")
    p_show.add_argument("name", help="dataset name (see `servegym data list`)")
    p_show.add_argument("--json", action="store_true", help="print JSON instead of text")
    p_show.set_defaults(func=_cmd_show)
    data.set_defaults(func=lambda args: (data.print_help(), 2)[1])


def _size(name: str, meta: dict[str, Any]) -> str:
    """Rows for traces; zones (or whatever size field the grid module gives) for grid data."""
    if meta.get("kind") in ("trace", "lengths"):
        from servegym.envs.traces import trace_stats

        return f"{trace_stats(name)['rows']} rows"
    from servegym.envs.data.catalog import summarize

    summary = summarize(name)
    for key in ("zones", "n_zones", "sites", "regions", "rows"):
        if key in summary:
            val = summary[key]
            n = len(val) if isinstance(val, (list, tuple, dict)) else val
            return f"{n} {key.removeprefix('n_')}"
    return "-"


def _cmd_list(args: argparse.Namespace) -> int:
    from servegym.envs.data.catalog import all_datasets

    datasets = all_datasets()
    rows = [{"name": n, "kind": m.get("kind", "-"), "size": _size(n, m), "license": m.get("license", "-")}
            for n, m in datasets.items()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for r in rows:  # the table stays readable; `data show NAME` and --json carry the full licence text
        if len(r["license"]) > LICENSE_WIDTH:
            r["license"] = r["license"][: LICENSE_WIDTH - 3] + "..."
    headers = {"name": "NAME", "kind": "KIND", "size": "ROWS/ZONES", "license": "LICENCE"}
    widths = {k: max(len(headers[k]), *(len(str(r[k])) for r in rows)) for k in headers}
    print("  ".join(headers[k].ljust(widths[k]) for k in headers).rstrip())
    for r in rows:
        print("  ".join(str(r[k]).ljust(widths[k]) for k in headers).rstrip())
    return 0


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.1f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v.get("name", v)) if isinstance(v, dict) else str(v) for v in value)
    return str(value)


def _cmd_show(args: argparse.Namespace) -> int:
    from servegym.envs.data.catalog import summarize

    summary = summarize(args.name)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
        return 0
    width = max(len(k) for k in summary)
    for key, value in summary.items():
        print(f"{key.ljust(width)}  {_fmt(value)}")
    return 0
