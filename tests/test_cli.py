"""The root command line: help, version, and one-line errors instead of tracebacks."""

from __future__ import annotations

import subprocess
import sys

import pytest

from servegym import __version__
from servegym.cli import COMMAND_MODULES, build_parser, main


def test_every_command_module_registers_a_subcommand() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert len(sub.choices) >= len(COMMAND_MODULES)


def test_no_command_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage: servegym" in capsys.readouterr().out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert __version__ in capsys.readouterr().out


def test_console_script_reports_user_errors_in_one_line() -> None:
    res = subprocess.run([sys.executable, "-m", "servegym.cli", "data", "show", "no-such-dataset"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("servegym: error:") and "no-such-dataset" in lines[0]
    assert "Traceback" not in res.stderr
