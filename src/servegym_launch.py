"""The ``servegym`` console script: :func:`servegym.cli.main` with the id registration deferred.

``import servegym`` registers every id with Gymnasium, which imports gymnasium and numpy (about 0.3 CPU-s).
The command needs them only to run a subcommand, not to print ``--help`` or a usage error, so this module (outside
the ``servegym`` package, which it must not import before setting the flag) asks the package to skip that step;
:func:`servegym.cli.main` registers once the arguments are parsed. Only the process that calls :func:`main` is
affected: a child started by ``spawn`` imports ``servegym`` without calling it and registers as usual.
"""

from __future__ import annotations

import sys

#: read by ``servegym/__init__.py`` while it is first imported
defer_registration = False


def main() -> int:
    global defer_registration
    defer_registration = True
    try:
        from servegym.cli import main as cli_main
    finally:
        defer_registration = False
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
