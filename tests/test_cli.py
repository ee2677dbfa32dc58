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


#: Modules the command's --help must not load (each costs 0.1-1 CPU-s to import).
HEAVY_MODULES = ("gymnasium", "numpy", "scipy", "pandas", "numba", "torch", "stable_baselines3", "matplotlib")

_HELP_PROBE = """
import sys
sys.path.insert(0, sys.argv[1])  # the checkout's servegym_launch, also in a venv installed before it existed
import servegym_launch

servegym_launch.defer_registration = True  # as servegym_launch.main does
import servegym.cli as cli
servegym_launch.defer_registration = False

def walk(parser, prefix):
    yield prefix
    for action in parser._actions:
        if getattr(action, "choices", None) and hasattr(action, "_name_parser_map"):
            for name, sub in action.choices.items():
                yield from walk(sub, [*prefix, name])

commands = list(walk(cli.build_parser(), []))
texts = {}
for argv in commands:
    sys.argv = ["servegym", *argv, "--help"]
    import io, contextlib
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        try:
            servegym_launch.main()
        except SystemExit:
            pass
    texts[" ".join(argv)] = buf.getvalue()
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[2].split(",")))
import gymnasium
registered = [sum(i.startswith("servegym/") for i in gymnasium.registry)]
with contextlib.redirect_stdout(io.StringIO()):
    code = cli.main(["data", "list"])  # a command runs: the ids are registered first
registered.append(sum(i.startswith("servegym/") for i in gymnasium.registry))
import json
print(json.dumps({"heavy": heavy, "commands": len(commands), "texts": texts, "registered": registered, "code": code}))
"""


def test_help_of_every_command_loads_no_heavy_module() -> None:
    """``servegym --help`` and every subcommand's ``--help`` (one process, all of them) import neither
    gymnasium/numpy nor the learning stack (benchmarks/cli_help_speed.py measures what that saves); the ids are
    registered once a command runs."""
    import json

    from conftest import REPO_ROOT

    res = subprocess.run([sys.executable, "-c", _HELP_PROBE, str(REPO_ROOT / "src"), ",".join(HEAVY_MODULES)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["commands"] >= 20
    assert out["heavy"] == [], out["heavy"]
    texts = out["texts"]
    assert all(t.startswith("usage: servegym") for t in texts.values()), [k for k, t in texts.items() if not t]
    assert not [k for k, t in texts.items() if "%%" in t]
    assert "95 %" in texts["benchmark"]
    assert out["code"] == 0 and out["registered"][0] == 0 and out["registered"][1] >= 7, out["registered"]


def _subparser(parser, name: str):
    """The sub-parser ``name`` of ``parser`` (argparse keeps them in its subparsers action)."""
    import argparse

    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def _example_lines(text: str) -> list[list[str]]:
    import shlex

    return [shlex.split(line.split("  #")[0]) for line in text.splitlines() if line.startswith("  servegym ")]


def test_help_examples_parse_and_bench_and_benchmark_say_how_they_differ() -> None:
    """servegym --help, train --help and evaluate --help end with examples, each a command line the parser
    accepts; bench's and benchmark's one-line help each point at the other and say what it measures."""
    parser = build_parser()
    texts = {"": parser.format_help(), **{n: _subparser(parser, n).format_help() for n in ("train", "evaluate")}}
    for name, text in texts.items():
        examples = _example_lines(text)
        assert len(examples) >= 2, name
        for argv in examples:
            assert argv[0] == "servegym"
            parser.parse_args(argv[1:])  # a bad example exits with a usage error
    listing = " ".join(texts[""].split())
    assert "bench how fast a simulator runs (simulated s per wall s); not a policy's score: see benchmark" in listing
    assert "benchmark how good a policy is:" in listing and "not simulator speed: see bench " in listing


@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_train_and_evaluate_help_state_every_default(command: str) -> None:
    """Each option with a default says it in its help (train's --algo, --seed, --tb, --eval-episodes...), and
    train --help lists every registered env id."""
    import argparse

    from servegym.registration import ENV_SPECS

    sub = _subparser(build_parser(), command)
    for action in sub._actions:
        if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._StoreTrueAction)):
            continue
        if action.required:
            continue
        assert action.help and "default" in action.help, action.option_strings
        if action.default not in (None, ""):
            assert f"default {action.default}" in action.help or f"{action.default} (default" in action.help, (
                action.option_strings, action.help)
    if command == "train":
        text = " ".join(sub.format_help().split())
        assert all(e.id in text for e in ENV_SPECS)
