"""The README's quick start stays true: exactly two commands, the second one is what CI runs."""

from __future__ import annotations

import re

from conftest import REPO_ROOT


def _quick_start_commands() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text()
    m = re.search(r"## Quick start\n(.*?)\n#", text, re.S)
    assert m, "README.md needs a '## Quick start' section"
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", m.group(1), re.S)
    return [line.strip() for b in blocks for line in b.strip().splitlines() if line.strip() and not line.startswith("#")]


def test_quick_start_is_two_commands() -> None:
    cmds = _quick_start_commands()
    assert len(cmds) == 2, cmds
    assert all("python3.11 -m venv" in c for c in cmds)


def test_ci_runs_the_readme_test_command() -> None:
    test_cmd = _quick_start_commands()[1]
    ci = (REPO_ROOT / ".ci" / "run").read_text().splitlines()
    assert test_cmd in [line.strip() for line in ci], f"{test_cmd!r} not in .ci/run"


def test_torch_is_pinned_to_the_cpu_build_in_every_install_command() -> None:
    for cmd in _quick_start_commands():
        if "[" in cmd and "rl" in cmd.split("[", 1)[1]:
            assert '"torch==2.13.0"' in cmd, cmd
