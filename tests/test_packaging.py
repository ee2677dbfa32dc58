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


def _folder_package(folder: Path) -> str | None:
    """The import name setuptools gives a folder under one of the mapped code folders."""
    if folder.is_relative_to(REPO_ROOT / "src" / "servegym"):
        return ".".join(("servegym", *folder.relative_to(REPO_ROOT / "src" / "servegym").parts))
    for top, pkg in CODE_FOLDERS.items():
        if folder.is_relative_to(REPO_ROOT / top):
            return ".".join((pkg, *folder.relative_to(REPO_ROOT / top).parts))
    return None


def _package_folders() -> list[Path]:
    roots = [REPO_ROOT / "src" / "servegym", *(REPO_ROOT / top for top in CODE_FOLDERS)]
    found = []
    for root in roots:
        for folder in [root, *sorted(p for p in root.rglob("*") if p.is_dir())]:
            if "__pycache__" in folder.parts or any(part.startswith(".") for part in folder.parts[-1:]):
                continue
            if any(f.is_file() and not f.name.startswith(".") for f in folder.iterdir()):
                found.append(folder)
    return found


def test_every_code_and_data_folder_is_a_listed_package() -> None:
    listed = _listed_packages()
    missing = [f"{_folder_package(f)} ({f.relative_to(REPO_ROOT)})" for f in _package_folders()
               if _folder_package(f) not in listed]
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"


def test_code_folders_have_init() -> None:
    bad = [str(f.relative_to(REPO_ROOT)) for f in _package_folders()
           if any(f.glob("*.py")) and not (f / "__init__.py").exists()]
    assert not bad, f"folders with Python modules but no __init__.py: {bad}"


def test_listed_packages_exist() -> None:
    ghosts = []
    for name in _listed_packages():
        parts = name.split(".")
        top = {v: k for k, v in CODE_FOLDERS.items()}.get(".".join(parts[:2]))
        folder = REPO_ROOT / "src" / Path(*parts) if top is None else REPO_ROOT / top / Path(*parts[2:])
        if not folder.is_dir():
            ghosts.append(name)
    assert not ghosts, f"listed in pyproject.toml but no such folder: {sorted(ghosts)}"


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
