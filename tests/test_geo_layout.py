"""The geo family's layers: the model under ``envs/geo/sim/`` imports nothing from the envs, reports or
CLI layers (nor gymnasium, baselines or agents), the reports under ``envs/geo/reports/`` and ``cli.py`` import no
env, modules stay small, the envs do not branch on the action mode, and the old module names still import the
moved modules, with a DeprecationWarning."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT

GEO = REPO_ROOT / "envs" / "geo"
SIM = GEO / "sim"
#: What the model may import from servegym: itself, the shared pieces of envs/ and the package's helpers.
SIM_ALLOWED = ("servegym.envs.geo.sim", "servegym.envs.workload", "servegym.envs.traces", "servegym.envs.grid",
               "servegym.envs.data", "servegym.errors", "servegym.names")
#: Third-party packages of the layers above (the model runs without them).
ABOVE = ("gymnasium", "pettingzoo", "matplotlib", "stable_baselines3", "sb3_contrib", "torch")
#: Modules above the 600-line smell, with the reason each is kept whole.
LONG_MODULES = {
    # GeoSimulation is one event loop (arrivals, polls, engine steps, finishes, decisions) over shared
    # per-request arrays; its parts are already out (engine, provisioner, estimator, metrics, decisions)
    "sim/cluster.py": 700,
}
#: Old module names (``servegym.envs.geo.<name>``) kept for one release, and the layer each moved to.
OLD_NAMES = {**{m: "sim" for m in ("cluster", "engine", "engine_kernels", "profile", "config", "provisioner",
                                   "estimator", "osl", "metrics", "decisions")},
             **{m: "reports" for m in ("compare", "validate", "mlenergy_check", "bench")}}
#: The env layer's modules (the reports and the CLI import none of them).
ENV_LAYER = ("servegym.envs.geo.env_", "servegym.envs.geo.actions", "servegym.envs.geo.parallel",
             "servegym.envs.geo.observations", "servegym.envs.geo.rewards", "servegym.envs.geo.grid_clock",
             "servegym.envs.geo.reference")


def imported_names(path: Path) -> set[str]:
    """Every absolute module (and ``module.name``) a file imports, at any depth (lazy imports included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_sim_imports_nothing_from_the_layers_above() -> None:
    files = sorted(SIM.glob("*.py"))
    assert len(files) >= 10
    bad = sorted(f"{f.name}: {n}" for f in files for n in imported_names(f)
                 if (n.startswith("servegym.") and not n.startswith(SIM_ALLOWED)) or n.split(".")[0] in ABOVE)
    assert not bad, bad


def test_the_layout_test_sees_an_upward_import(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from servegym.envs.geo.reports.compare import run_one\n")
    assert "servegym.envs.geo.reports.compare" in imported_names(f)
    assert not "servegym.envs.geo.reports.compare".startswith(SIM_ALLOWED)


@pytest.mark.parametrize("path", sorted(p.relative_to(GEO).as_posix() for p in GEO.rglob("*.py")))
def test_geo_modules_are_small(path: str) -> None:
    n = len((GEO / path).read_text().splitlines())
    assert n <= LONG_MODULES.get(path, 600), f"{path} has {n} lines"


@pytest.mark.parametrize("name", sorted(OLD_NAMES))
def test_old_module_names_are_the_moved_modules(name: str) -> None:
    new_name = f"servegym.envs.geo.{OLD_NAMES[name]}.{name}"
    new = importlib.import_module(new_name)
    old_name = f"servegym.envs.geo.{name}"
    saved = sys.modules.pop(old_name, None)
    try:
        with pytest.warns(DeprecationWarning, match=new_name):
            old = importlib.import_module(old_name)
        assert old is new
    finally:
        if saved is not None:
            sys.modules[old_name] = saved


@pytest.mark.parametrize("name", ["compare_cli", "bench_cli"])
def test_old_cli_modules_reexport_the_cli(name: str) -> None:
    cli = importlib.import_module("servegym.envs.geo.cli")
    saved = sys.modules.pop(f"servegym.envs.geo.{name}", None)
    try:
        with pytest.warns(DeprecationWarning, match="servegym.envs.geo.cli"):
            old = importlib.import_module(f"servegym.envs.geo.{name}")
    finally:
        if saved is not None:
            sys.modules[f"servegym.envs.geo.{name}"] = saved
    fn = old.add_geo_commands if name == "compare_cli" else old.add_commands
    assert fn in (cli._add_compare, cli.add_bench_commands)


def test_reports_and_cli_import_no_env_and_the_cli_only_parses() -> None:
    """The reports run the model (and baselines), never the Gymnasium envs; the CLI imports at module level only
    what parsing needs (its handlers import the reports lazily)."""
    files = [*sorted((GEO / "reports").glob("*.py")), GEO / "cli.py"]
    bad = sorted(f"{f.name}: {n}" for f in files for n in imported_names(f)
                 if n.startswith(ENV_LAYER) or n.split(".")[0] in ("gymnasium", "pettingzoo"))
    assert not bad, bad
    top = [n for node in ast.parse((GEO / "cli.py").read_text()).body
           if isinstance(node, (ast.Import, ast.ImportFrom))
           for n in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""])]
    assert set(top) <= {"__future__", "argparse", "importlib", "json", "sys", "collections.abc", "pathlib",
                        "servegym.errors"}, top


def test_env_reset_and_step_do_not_branch_on_the_action_mode() -> None:
    """The action mode is a class (envs/geo/actions.py) chosen from the config; the envs only call it."""
    import inspect
    import textwrap

    from servegym.envs.geo.actions import (
        RouteDirect,
        RouteResidual,
        RouteResidualWindow,
        WindowDirect,
        WindowResidual,
    )
    from servegym.envs.geo.env_route import GeoRouteEnv
    from servegym.envs.geo.env_window import GeoRouteWindowEnv

    fns = [GeoRouteEnv.reset, GeoRouteEnv.step, GeoRouteEnv._decide, GeoRouteEnv._close_interval,
           GeoRouteEnv.action_masks, GeoRouteEnv.follow_action, GeoRouteEnv._load_interval,
           GeoRouteEnv._row_observation, GeoRouteEnv.simulator_mode, GeoRouteWindowEnv.reset,
           GeoRouteWindowEnv.step, GeoRouteWindowEnv.placements, GeoRouteWindowEnv._observation]
    for fn in fns:
        body = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
        if isinstance(body, ast.FunctionDef) and ast.get_docstring(body) is not None:
            body.body = body.body[1:]
        src = ast.unparse(body)  # the code, without docstring and comments
        for word in ("self.residual", "action_mode", "decide_at", "self._ref", "self._policy"):
            assert word not in src, f"{fn.__qualname__} names {word!r}"
    mini = {"preset": "mini", "geo": {"duration_s": 1.0}}
    assert type(GeoRouteEnv(mini).action_type) is RouteDirect
    assert type(GeoRouteEnv(mini, action_mode="residual").action_type) is RouteResidual
    env = GeoRouteEnv(mini, action_mode="residual", decide_at="window")
    assert type(env.action_type) is RouteResidualWindow and env.simulator_mode() == "window"
    assert type(GeoRouteWindowEnv(mini).action_type) is WindowDirect
    assert type(GeoRouteWindowEnv(mini, action_mode="residual").action_type) is WindowResidual
