"""The install layout: every code folder is a listed package, and the core import stays light."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from conftest import REPO_ROOT

CODE_FOLDERS = {"envs": "servegym.envs", "baselines": "servegym.baselines",
                "agents": "servegym.agents", "calibration": "servegym.calibration"}


def _listed_packages() -> set[str]:
    cfg = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    return set(cfg["tool"]["setuptools"]["packages"])


def test_every_code_folder_is_a_listed_package() -> None:
    listed = _listed_packages()
    missing = []
    for folder, pkg in CODE_FOLDERS.items():
        root = REPO_ROOT / folder
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            rel = path.parent.relative_to(root)
            name = ".".join((pkg, *rel.parts)) if rel.parts else pkg
            if name not in listed:
                missing.append(f"{name} ({path.parent})")
            if not (path.parent / "__init__.py").exists():
                missing.append(f"{path.parent} has no __init__.py")
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(set(missing))}"


def test_listed_packages_exist() -> None:
    for name in _listed_packages():
        parts = name.split(".")
        if parts[:2] == ["servegym"] and len(parts) == 1:
            folder = REPO_ROOT / "src" / "servegym"
        else:
            top = {v: k for k, v in CODE_FOLDERS.items()}.get(".".join(parts[:2]))
            folder = REPO_ROOT / "src/servegym" if top is None else REPO_ROOT / top / Path(*parts[2:])
        assert (folder / "__init__.py").exists(), f"{name} is listed but {folder} has no __init__.py"


def _run_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_import_from_any_folder_without_torch(tmp_path: Path) -> None:
    code = (
        "import sys, servegym, servegym.envs, servegym.baselines, servegym.calibration;"
        "bad = sorted(m for m in ('torch', 'stable_baselines3', 'sb3_contrib', 'tensorboard') if m in sys.modules);"
        "assert not bad, bad; print(servegym.__version__)"
    )
    res = _run_python(code, tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip()


def test_repo_root_does_not_shadow_the_package() -> None:
    # A top-level folder named servegym/ would shadow the installed package from the repo root.
    assert not (REPO_ROOT / "servegym").exists()
    res = _run_python("import servegym, os; print(os.path.dirname(servegym.__file__))", REPO_ROOT)
    assert res.returncode == 0, res.stderr
    assert Path(res.stdout.strip()) != REPO_ROOT / "servegym"
