"""The ``servegym`` command line.

Each family contributes its subcommands through a module listed in
:data:`COMMAND_MODULES`; that module defines ``add_commands(subparsers)`` and keeps
its heavy imports inside the handlers, so ``servegym --help`` stays fast.
A handler is stored as ``func`` on the parsed namespace and returns an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from servegym import __version__
from servegym.errors import ServegymError

# One line per module that adds subcommands (the order is the order in --help).
COMMAND_MODULES: tuple[str, ...] = (
    "servegym.envs.data.cli",
    "servegym.envs.geo.cli",
    "servegym.envs.geo.bench_cli",
    "servegym.calibration.cli",
    "servegym.envs.pd.cli",
    "servegym.envs.npu.cli",
    "servegym.agents.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="servegym",
        description="Energy-, carbon- and cost-aware LLM serving environments and baselines.",
    )
    parser.add_argument("--version", action="version", version=f"servegym {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_commands(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except (ServegymError, FileNotFoundError) as exc:
        print(f"servegym: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("servegym: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
