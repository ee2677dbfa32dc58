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


def _readme() -> str:
    return (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_is_short_and_free_of_measurement_logs() -> None:
    """The README is for users; measured times live, dated, on the docs' performance page."""
    text = _readme()
    assert len(text.splitlines()) <= 200
    assert not re.search(r"CPU[- ]s\b|CPU-seconds?|\bwall[- ]s\b", text), "a CPU-second figure in the README"
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "a date in the README"
    hashes = [h for h in re.findall(r"\b[0-9a-f]{7,40}\b", text) if re.search(r"\d", h) and re.search(r"[a-f]", h)]
    assert not hashes, f"commit hashes in the README: {hashes}"


def _python_block() -> tuple[int, str]:
    text = _readme()
    m = re.search(r"```python\n(.*?)```", text, re.S)
    assert m, "README.md needs a Python example"
    return text[:m.start()].count("\n") + 1, m.group(1)


def test_readme_shows_a_masked_gym_loop_early_and_it_runs() -> None:
    line, code = _python_block()
    assert line <= 80, f"the gym.make loop starts at line {line}"
    for part in ("gym.make(", ".reset(seed=", "sample_masked_action(env)", ".step(action)"):
        assert part in code, part
    printed: list[tuple[object, ...]] = []
    exec(compile(code, "README.md", "exec"), {"print": lambda *a: printed.append(a)})
    assert printed and all(isinstance(v, float) for v in printed[0])


def test_readme_links_into_the_docs() -> None:
    text = _readme()
    for page in ("quickstart", "geo", "pd", "npu", "benchmark", "clients", "data", "security", "ARCHITECTURE",
                 "performance", "results"):
        target = f"(docs/{page}.md"
        assert target in text, target
        assert (REPO_ROOT / "docs" / f"{page}.md").is_file(), page
