"""The ``servegym`` command line.

Each family contributes its subcommands through a module listed in
:data:`COMMAND_MODULES`; that module defines ``add_commands(subparsers)`` and keeps
its heavy imports inside the handlers, so ``servegym --help`` stays fast.
A handler is stored as ``func`` on the parsed namespace and returns an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from servegym import __version__
from servegym.errors import ConfigError, ServegymError
from servegym.registration import register_envs

# One line per module that adds subcommands (the order is the order in --help).
COMMAND_MODULES: tuple[str, ...] = (
    "servegym.envs.data.cli",
    "servegym.envs.geo.cli",
    "servegym.calibration.cli",
    "servegym.envs.pd.cli",
    "servegym.envs.npu.cli",
    "servegym.agents.cli",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr (``servegym pd simulate: error: ... (see --help)``),
    exit status 2, like every other user error. Sub-parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# Options that several subcommands share by name, checked here once for all of them before any work starts
# (a subcommand added later is covered by naming its options the same way).
MAX_SEED = 2**32 - 1
DIR_OPTIONS = ("out_dir", "plot_dir", "tb")
FILE_OPTIONS = ("plot",)
EITHER_OPTIONS = ("out",)  # a file for train/sweep, a folder for calibrate
PLOT_SUFFIXES = (".png", ".pdf", ".svg")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def check_output_path(flag: str, value: str | os.PathLike[str], kind: str) -> None:
    """Raise :class:`ConfigError` unless ``value`` can be written as ``kind`` (``"dir"``, ``"file"`` or
    ``"either"``): no existing file on its way, a writable nearest existing folder."""
    p = Path(value).absolute()
    q = p
    while not q.exists() and q != q.parent:
        q = q.parent
    shown = str(value)
    if q != p:
        if not q.is_dir():
            raise ConfigError(f"{flag} = {shown!r} is under the existing file {str(q)!r}; allowed: a path whose "
                              "folders are folders")
        if not os.access(q, os.W_OK):
            raise ConfigError(f"{flag} = {shown!r}: the folder {str(q)!r} is not writable")
        return
    if kind == "dir" and not p.is_dir():
        raise ConfigError(f"{flag} = {shown!r} is an existing file; allowed: a folder")
    if kind == "file" and p.is_dir():
        raise ConfigError(f"{flag} = {shown!r} is an existing folder; allowed: a file name")
    if not os.access(p, os.W_OK):
        raise ConfigError(f"{flag} = {shown!r} is not writable")


def check_shared_options(args: argparse.Namespace) -> None:
    """Seeds in range and output paths writable, for whichever subcommand parsed ``args``."""
    seed = getattr(args, "seed", None)
    if seed is not None and isinstance(seed, int) and not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"--seed = {seed} is out of range; allowed: an integer in [0, {MAX_SEED}]")
    for dest, kind in [*((d, "dir") for d in DIR_OPTIONS), *((d, "file") for d in FILE_OPTIONS),
                       *((d, "either") for d in EITHER_OPTIONS)]:
        value: Any = getattr(args, dest, None)
        if value is None or value == "" or not isinstance(value, (str, os.PathLike)):
            continue
        if dest == "plot" and Path(value).suffix.lower() not in PLOT_SUFFIXES:
            raise ConfigError(f"--plot = {str(value)!r} has no image suffix; allowed: a file name ending in "
                              f"{', '.join(PLOT_SUFFIXES)}")
        check_output_path(_flag(dest), value, kind)


#: The top-level --help's closing lines: a first session's commands, in order (kept as written)
EXAMPLES = """examples:
  servegym data list                                    # the shipped traces and grid data
  servegym train --env servegym/PDProvisionResidual-v0 --algo maskable-ppo --timesteps 20000
  servegym evaluate --model runs/PDProvisionResidual-v0_maskable-ppo_s0/model.zip
  servegym benchmark --env servegym/PDProvisionResidual-v0 --policy strongest   # a policy's score
  servegym bench speed geo --preset mini                # a simulator's speed

Each command has its own --help."""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="servegym",
        description="Energy-, carbon- and cost-aware LLM serving environments and baselines.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the examples' lines as written
    )
    parser.add_argument("--version", action="version", version=f"servegym {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an unexpected error (accepted anywhere on the line)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_commands(subparsers)
    return parser


def _cause(exc: BaseException) -> BaseException:
    """The error a worker raised, for an error that wraps it: Ray's ``RayTaskError`` (which subclasses the
    worker's error type) holds it in ``cause`` and puts the worker's traceback in its own message."""
    for _ in range(5):
        inner = getattr(exc, "cause", None)
        if not isinstance(inner, BaseException) or inner is exc:
            break
        exc = inner
    return exc


def _unexpected(exc: BaseException) -> str:
    """One line for an error servegym did not anticipate: its type and the start of its message."""
    text = " ".join(str(exc).split())
    if len(text) > 200:
        text = text[:200] + "..."
    return (f"servegym: unexpected error: {type(exc).__name__}{': ' + text if text else ''} "
            "(rerun with --debug for the traceback, and please report it)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand. Every error a user can cause is one line on stderr and exit status 2; anything
    else is one line pointing to ``--debug`` (which shows the traceback) and exit status 1."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # --debug is accepted anywhere on the line (not only before the subcommand), as users add it last
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    # results printed line by line reach a log file at once (progress lines go to stderr, flushed)
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(line_buffering=True)
    try:
        check_shared_options(args)
        register_envs()  # deferred by the console script (servegym_launch) until a subcommand runs
        return int(func(args) or 0)
    except (ServegymError, OSError) as exc:  # OSError: a file or folder the user named
        if debug:
            raise
        print("servegym: error: " + " ".join(str(_cause(exc)).splitlines()), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("servegym: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        print(_unexpected(_cause(exc)), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
