"""One layout for the three families (geo, pd, npu), checked on the code.

* ``envs/<family>/sim/`` (the model and its decision points) imports nothing from the env, reports or CLI layers,
  nor gymnasium, baselines or agents;
* the reports and the CLI import no env module, and each ``cli.py`` imports at module level only what parsing
  needs (its handlers import the reports lazily);
* modules stay at or under 600 lines, except those listed in :data:`LONG_MODULES` with the reason each is whole;
* the envs do not branch on the action mode (a class per mode, chosen by a factory from the config);
* the old module names of moved modules are gone (they warned for a release);
* across the whole package, the layers of docs/ARCHITECTURE.md (helpers, model, baselines, env, reports/CLI):
  no module imports from a layer above its own (the exceptions are listed with their reasons), and none imports
  a private name (``_x``) of another layer or package.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO_ROOT

ENVS = REPO_ROOT / "envs"
#: Third-party packages of the layers above the model (the model runs without them).
ABOVE = ("gymnasium", "pettingzoo", "matplotlib", "stable_baselines3", "sb3_contrib", "torch")
#: What every family's model may import from servegym besides itself: the shared pieces of envs/ and the
#: package's helpers.
SHARED = ("servegym.envs.workload", "servegym.envs.traces", "servegym.envs.grid", "servegym.envs.data",
          "servegym.envs.azure_week",
          "servegym.errors", "servegym.names", "servegym.splits", "servegym.user_cache")


@dataclass(frozen=True)
class Layout:
    """What the layering test needs to know about one family (paths relative to ``envs/<family>/``)."""

    #: the report and command modules (import no env module)
    reports: tuple[str, ...]
    #: prefixes of the env layer's modules
    env_layer: tuple[str, ...]
    #: modules above 600 lines -> the most lines they may have (the reason is a comment at each entry)
    long_modules: dict[str, int]
    #: whether cli.py imports at module level only argparse and the standard library
    cli_only_parses: bool = True
    #: names that are the package itself (its __init__ holds a constant the parsers share)
    package_names: tuple[str, ...] = ()


LAYOUTS: dict[str, Layout] = {
    "geo": Layout(
        reports=("reports/*.py", "cli.py"),
        env_layer=("servegym.envs.geo.env_", "servegym.envs.geo.actions", "servegym.envs.geo.parallel",
                   "servegym.envs.geo.observations", "servegym.envs.geo.rewards", "servegym.envs.geo.grid_clock",
                   "servegym.envs.geo.reference"),
        long_modules={
            # GeoSimulation is one event loop (arrivals, polls, engine steps, finishes, decisions) over shared
            # per-request arrays; its parts are already out (engine, provisioner, estimator, metrics, decisions)
            "sim/cluster.py": 700,
        }),
    "pd": Layout(
        reports=("reports/*.py", "cli.py"),
        env_layer=("servegym.envs.pd.env", "servegym.envs.pd.actions", "servegym.envs.pd.observations",
                   "servegym.envs.pd.rewards", "servegym.envs.pd.dynamics", "servegym.envs.pd.vector",
                   "servegym.envs.pd.sb3_vector"),
        long_modules={
            # PDSimulator is one discrete-event loop (arrivals, KV admission and retraction, prefill jobs, decode
            # iterations, resizes with start-up delays, power bins) over shared instance and request state; its
            # readouts read the loop's private counters; the saturation measurement is already out
            "sim/simulator.py": 730,
        },
        package_names=("servegym.envs.pd", "servegym.envs.pd.WORKLOAD_SPECS")),
    "npu": Layout(
        reports=("reports/*.py", "cli.py"),
        env_layer=("servegym.envs.npu.env", "servegym.envs.npu.actions", "servegym.envs.npu.action_decoding",
                   "servegym.envs.npu.observations", "servegym.envs.npu.rewards", "servegym.envs.npu.scenarios",
                   "servegym.envs.npu.vector"),
        long_modules={
            # the step-cost model is one vectorized formula (allocation space -> micro-batch roofline ->
            # collectives) whose parts share one array layout; splitting it would spread one equation over files
            "sim/roofline.py": 730,  # 727: the KV-cache form (kv_form) added 10 lines
        }),
}
FAMILIES = sorted(LAYOUTS)


def imported_names(path: Path) -> set[str]:
    """Every absolute module (and ``module.name``) a file imports, at any depth (lazy and TYPE_CHECKING imports
    included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def upward(name: str, family: str) -> bool:
    """Whether the model of ``family`` importing ``name`` reaches above its layer."""
    lay = LAYOUTS[family]
    if name.split(".")[0] in ABOVE:
        return True
    if not name.startswith("servegym.") or name in lay.package_names:
        return False
    return not name.startswith((f"servegym.envs.{family}.sim", *SHARED))


@pytest.mark.parametrize("family", FAMILIES)
def test_sim_imports_nothing_from_the_layers_above(family: str) -> None:
    files = sorted((ENVS / family / "sim").glob("*.py"))
    assert len(files) >= 9
    bad = sorted(f"{f.name}: {n}" for f in files for n in imported_names(f) if upward(n, family))
    assert not bad, bad


def test_the_layout_test_sees_an_upward_import(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from servegym.envs.pd.env import E\n"
                 "def f():\n    from servegym.envs.geo.reports.compare import run_one\n    import gymnasium\n")
    names = imported_names(f)
    assert {"servegym.envs.pd.env", "servegym.envs.geo.reports.compare", "gymnasium"} <= names
    assert upward("servegym.envs.pd.env.E", "pd") and upward("servegym.envs.geo.reports.compare", "geo")
    assert upward("gymnasium", "npu") and upward("servegym.baselines.pd", "pd")
    assert not upward("servegym.envs.pd.sim.model", "pd") and not upward("servegym.envs.pd.WORKLOAD_SPECS", "pd")


def _modules(family: str) -> list[str]:
    return sorted(p.relative_to(ENVS / family).as_posix() for p in (ENVS / family).rglob("*.py"))


@pytest.mark.parametrize(("family", "path"), [(f, p) for f in FAMILIES for p in _modules(f)])
def test_modules_are_small(family: str, path: str) -> None:
    n = len((ENVS / family / path).read_text().splitlines())
    assert n <= LAYOUTS[family].long_modules.get(path, 600), f"envs/{family}/{path} has {n} lines"


@pytest.mark.parametrize("family", FAMILIES)
def test_listed_long_modules_exist_and_are_long(family: str) -> None:
    """An exception stays listed only while its module is above the smell (and exists)."""
    for path in LAYOUTS[family].long_modules:
        assert len((ENVS / family / path).read_text().splitlines()) > 600, path


#: old names of moved modules, removed after warning for a release (import the module's own path)
REMOVED_NAMES: dict[str, tuple[str, ...]] = {
    "geo": ("bench", "bench_cli", "cluster", "compare", "compare_cli", "config", "decisions", "engine",
            "engine_kernels", "estimator", "metrics", "mlenergy_check", "osl", "profile", "provisioner", "validate"),
    "pd": ("case_studies", "catalog", "fluid", "model", "pareto", "provisioning", "scenario", "sim_cli", "simulator",
           "tables", "validate", "workload_moments"),
    "npu": ("action_modes", "azure2024", "catalog", "cluster", "dse", "dse_plot", "fluid_check", "roofline",
            "selection", "workloads"),
}



@pytest.mark.parametrize("name", [f"servegym.envs.{f}.{m}" for f in sorted(REMOVED_NAMES) for m in REMOVED_NAMES[f]])
def test_removed_module_names_do_not_import(name: str) -> None:
    assert name not in sys.modules
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(name)


def test_no_module_stands_in_for_another() -> None:
    """No module replaces itself with another (``sys.modules[__name__] = ...``, the old-name pattern)."""
    bad = [str(f.relative_to(REPO_ROOT)) for f in MODULES.values() if "sys.modules[__name__]" in f.read_text()]
    assert not bad, bad


def test_moved_names_are_imported_from_their_modules() -> None:
    """npu's decoding helpers are functions of the state in ``action_decoding`` (``actions`` holds the action
    types); the env has no helper mixins left."""
    from servegym.envs.npu import action_decoding, actions
    from servegym.envs.npu.env import NPUAutoscaleEnv

    assert actions.residual_targets is action_decoding.residual_targets and not hasattr(action_decoding, "ActionsMixin")
    assert [c.__name__ for c in NPUAutoscaleEnv.__mro__[:2]] == ["NPUAutoscaleEnv", "Env"]


def test_pd_saturation_is_imported_from_its_module() -> None:
    """``Saturation`` and ``saturation_throughput`` are in ``pd.sim.saturation``; the simulator no longer
    re-exports them."""
    from servegym.envs.pd.sim import saturation, simulator

    assert saturation.saturation_throughput and saturation.Saturation
    for name in ("Saturation", "saturation_throughput"):
        assert not hasattr(simulator, name), name


@pytest.mark.parametrize("family", FAMILIES)
def test_reports_and_cli_import_no_env(family: str) -> None:
    """The reports run the model (and baselines), never the Gymnasium envs."""
    lay = LAYOUTS[family]
    files = sorted({f for pattern in lay.reports for f in (ENVS / family).glob(pattern)})
    assert files
    bad = sorted(f"{f.name}: {n}" for f in files for n in imported_names(f)
                 if n.startswith(lay.env_layer) or n.split(".")[0] in ("gymnasium", "pettingzoo"))
    assert not bad, bad


@pytest.mark.parametrize("family", [f for f in FAMILIES if LAYOUTS[f].cli_only_parses])
def test_cli_imports_only_what_parsing_needs(family: str) -> None:
    top = [n for node in ast.parse((ENVS / family / "cli.py").read_text()).body
           if isinstance(node, (ast.Import, ast.ImportFrom))
           for n in ([a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""])]
    assert set(top) <= {"__future__", "argparse", "importlib", "json", "sys", "typing", "collections.abc",
                        "pathlib", "servegym.errors", f"servegym.envs.{family}"}, top


def _code(fn: Any) -> str:
    """A function's code without its docstring and comments."""
    body = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    if isinstance(body, ast.FunctionDef) and ast.get_docstring(body) is not None:
        body.body = body.body[1:]
    return ast.unparse(body)


def test_geo_envs_do_not_branch_on_the_action_mode() -> None:
    """The action mode is a class (envs/geo/actions.py) chosen from the config; the envs only call it."""
    from servegym.envs.geo.actions import (
        RouteDirect,
        RouteResidual,
        RouteResidualWindow,
        WindowDirect,
        WindowResidual,
    )
    from servegym.envs.geo.env_route import GeoRouteEnv
    from servegym.envs.geo.env_window import GeoRouteWindowEnv

    fns = [GeoRouteEnv.reset, GeoRouteEnv.step, GeoRouteEnv.decide_row, GeoRouteEnv.close_interval,
           GeoRouteEnv.action_masks, GeoRouteEnv.follow_action, GeoRouteEnv._load_interval,
           GeoRouteEnv.row_observation, GeoRouteEnv.simulator_mode, GeoRouteWindowEnv.reset,
           GeoRouteWindowEnv.step, GeoRouteWindowEnv.placements, GeoRouteWindowEnv._observation]
    for fn in fns:
        src = _code(fn)
        for word in ("self.residual", "action_mode", "decide_at", "self._ref", "self._policy"):
            assert word not in src, f"{fn.__qualname__} names {word!r}"
    mini = {"preset": "mini", "geo": {"duration_s": 1.0}}
    assert type(GeoRouteEnv(mini).action_type) is RouteDirect
    assert type(GeoRouteEnv(mini, action_mode="residual").action_type) is RouteResidual
    env = GeoRouteEnv(mini, action_mode="residual", decide_at="window")
    assert type(env.action_type) is RouteResidualWindow and env.simulator_mode() == "window"
    assert type(GeoRouteWindowEnv(mini).action_type) is WindowDirect
    assert type(GeoRouteWindowEnv(mini, action_mode="residual").action_type) is WindowResidual


def test_pd_env_does_not_branch_on_the_action_mode_or_the_dynamics() -> None:
    """The action mode is a class (envs/pd/actions.py) chosen by pd_action_type, the period dynamics one of
    envs/pd/dynamics.py chosen by ``mode``; the env and the vector env only call them."""
    from servegym.envs.pd.actions import ACTION_TYPES, AbsoluteAction, FrontAction, ResidualAction
    from servegym.envs.pd.dynamics import FluidDynamics, RequestDynamics
    from servegym.envs.pd.env import PDProvisionEnv
    from servegym.envs.pd.env_config import ACTION_MODES, MODES
    from servegym.envs.pd.vector import PDVectorEnv

    fns = [PDProvisionEnv.__init__, PDProvisionEnv.reset, PDProvisionEnv.step, PDProvisionEnv.decode_action,
           PDProvisionEnv.begin_period, PDProvisionEnv.finish_step, PDProvisionEnv.action_masks,
           PDProvisionEnv._check_action, PDProvisionEnv.follow_action, PDProvisionEnv.reference_action,
           PDProvisionEnv.absolute_twin, PDProvisionEnv._obs, PDProvisionEnv.hindsight_arrivals,
           PDVectorEnv._step_envs]
    for fn in fns:
        src = _code(fn)
        for word in ("mode ==", "mode !=", "mode in", "residual_levels", '"front"', '"residual"', '"absolute"',
                     '"fluid"', '"request"'):
            assert word not in src, f"{fn.__qualname__} names {word!r}"
    assert MODES == ("fluid", "request")
    for mode, cls in (("fluid", FluidDynamics), ("request", RequestDynamics)):
        assert type(PDProvisionEnv({"split": None, "mode": mode}).dynamics) is cls
    assert ACTION_MODES == tuple(ACTION_TYPES) == ("absolute", "residual", "front")
    for env_id, cls in (("servegym/PDProvision-v0", AbsoluteAction), ("servegym/PDProvisionResidual-v0",
                                                                      ResidualAction),
                        ("servegym/PDProvisionFront-v0", FrontAction)):
        import gymnasium as gym

        import servegym  # noqa: F401

        env = gym.make(env_id, split="test").unwrapped
        assert type(env.action_type) is cls and env.action_type.mode == env.action_mode
        assert env.action_space == env.action_type.space()


def test_npu_env_does_not_branch_on_the_action_mode() -> None:
    """The action mode is a registered action type (envs/npu/actions.py) chosen from the config; reset and step
    only call it."""
    from servegym.envs.npu.actions import AbsoluteAction, ResidualAction
    from servegym.envs.npu.env import NPUAutoscaleEnv

    for fn in (NPUAutoscaleEnv._start_episode, NPUAutoscaleEnv._step, NPUAutoscaleEnv.action_masks,
               NPUAutoscaleEnv._check_action, NPUAutoscaleEnv._update_reference):
        src = inspect.getsource(fn)
        assert "self.residual" not in src and "action_mode ==" not in src, fn.__name__
    env = NPUAutoscaleEnv({"split": None, "hours": 0.25, "model": "Llama3-8B"})
    assert isinstance(env.action_type, AbsoluteAction)
    renv = NPUAutoscaleEnv({"split": None, "hours": 0.25, "model": "Llama3-8B", "action_mode": "residual"})
    assert isinstance(renv.action_type, ResidualAction)


def test_the_architecture_map_matches_the_tree() -> None:
    """Every file or folder docs/ARCHITECTURE.md names exists, each family's three layers are in its table, and
    the README links the map."""
    import re

    text = (REPO_ROOT / "docs" / "ARCHITECTURE.md").read_text()
    paths = sorted({p for p in re.findall(r"`([A-Za-z0-9_./-]+)`", text) if "/" in p})
    assert len(paths) >= 30, paths
    missing = [p for p in paths if not (REPO_ROOT / p).exists()]
    assert not missing, missing
    for family in FAMILIES:
        assert f"`envs/{family}/sim/`" in text and f"`envs/{family}/cli.py`" in text, family
    assert "(docs/ARCHITECTURE.md)" in (REPO_ROOT / "README.md").read_text()


def test_the_map_test_sees_a_missing_path() -> None:
    import re

    names = re.findall(r"`([A-Za-z0-9_./-]+)`", "see `envs/pd/nope.py` and `envs/pd/sim/`")
    assert [p for p in names if not (REPO_ROOT / p).exists()] == ["envs/pd/nope.py"]


# ------------------------------------------------------------------------------ the layers across the package
#: The code folders and their import names (as pyproject.toml's package-dir maps them).
CODE_ROOTS = {"src/servegym": "servegym", "envs": "servegym.envs", "baselines": "servegym.baselines",
              "agents": "servegym.agents", "calibration": "servegym.calibration"}


def _repo_modules() -> dict[str, Path]:
    """Every module of the package (import name -> file), the console script's module included."""
    out = {"servegym_launch": REPO_ROOT / "src" / "servegym_launch.py"}
    for folder, pkg in CODE_ROOTS.items():
        for f in sorted((REPO_ROOT / folder).rglob("*.py")):
            parts = f.relative_to(REPO_ROOT / folder).with_suffix("").parts
            out[".".join((pkg, *(parts[:-1] if parts[-1] == "__init__" else parts)))] = f
    return out


MODULES = _repo_modules()
#: The layers, lowest first: a module imports from its own layer and the ones below, never from one above.
LAYER_ORDER = ("helpers", "model", "baselines", "env", "top")
RANK = {name: i for i, name in enumerate(LAYER_ORDER)}
#: servegym's helper modules (src/servegym) that every layer may use: errors, names, splits, files and progress.
HELPERS = frozenset({"bounded_io", "errors", "estimates", "masks", "memory", "names", "outputs", "progress",
                     "render", "report", "safe_yaml", "splits", "user_cache"})
#: servegym's modules at the top, beside the reports: the command line, the env-id registry (``import servegym``
#: registers them), the wrappers and RLlib adapters, and the config file references (they list the shipped
#: geo profiles), and the env cards (the docs' pages, built from the envs).
TOP = frozenset({"cli", "env_cards", "env_ids", "file_refs", "registration", "rllib_envs", "wrappers"})
#: envs/ modules the three families' models share.
SHARED_MODEL = frozenset({"azure_week", "data", "grid", "traces", "workload"})
#: (importer, imported) -> why this import goes up a layer (docs/ARCHITECTURE.md repeats them).
UPWARD_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("servegym.baselines.pd", "servegym.envs.pd.env"):
        "pd's baselines are episode policies over the env: they decide from its info and absolute_twin(), and "
        "run_policy / compare_policies step it; the decision rule they share with the env (MinPowerRule) is in "
        "the model, and no pd env module imports a baseline, so there is no cycle",
    ("servegym.baselines.pd_oracle", "servegym.envs.pd.env"):
        "the hindsight oracle plans on the env's own arrivals and SLO evaluation (hindsight_arrivals, "
        "slo_steady), so its planned return equals its replayed return",
    ("servegym.envs.geo", "servegym.envs.geo.parallel"):
        "the family package's parallel_env (PettingZoo's entry-point convention) imports the multi-agent env "
        "inside the function, on use",
}


def layer_of(module: str) -> str | None:
    """The layer of a servegym module (``None`` outside servegym); a module no rule places is an error, so a new
    top-level module gets a layer here before it can pass."""
    parts = module.split(".")
    if parts[0] == "servegym_launch" or parts == ["servegym"]:
        return "top"  # the console script; the package itself registers the env ids
    if parts[0] != "servegym":
        return None
    head = parts[1]
    if head in HELPERS:
        return "helpers"
    if head in TOP or head in ("agents", "calibration"):
        return "top"
    if head == "baselines":
        return "baselines"
    if head == "envs":
        if len(parts) == 2 or parts[2] in SHARED_MODEL:
            return "model"
        if parts[2] in ("vector_base", "action_type"):
            return "env"
        if parts[2] in LAYOUTS:
            if len(parts) == 3 or parts[3] == "sim":
                return "model"  # the family package holds constants its model and parsers share
            return "top" if parts[3] in ("reports", "cli") else "env"
    raise ValueError(f"{module}: no layer; place it in tests/test_layout.py (layer_of)")


def _is_package(module: str) -> bool:
    return module in MODULES and MODULES[module].name == "__init__.py"


def import_targets(path: Path, module: str) -> list[tuple[str, str]]:
    """``(module, name)`` for every import in a file, at any depth (lazy and TYPE_CHECKING imports included):
    ``import a.b`` gives ``("a.b", "")``, ``from a import b`` gives ``("a.b", "")`` when ``a.b`` is a module of
    the package and ``("a", "b")`` otherwise; relative imports are resolved against ``module``."""
    here = module.split(".") if _is_package(module) else module.split(".")[:-1]
    out: list[tuple[str, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*here[:len(here) - node.level + 1], *([base] if base else [])])
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((sub, "") if sub in MODULES else (base, a.name))
    return out


def upward_imports(path: Path, module: str) -> list[str]:
    """The imports by which ``module`` (the file ``path``) reaches a layer above its own, less the exceptions."""
    here = layer_of(module)
    assert here is not None, module
    bad = []
    for target, _name in import_targets(path, module):
        there = layer_of(target)
        if there is not None and RANK[there] > RANK[here] and (module, target) not in UPWARD_EXCEPTIONS:
            bad.append(f"{module} ({here}) imports {target} ({there})")
    return bad


def private_imports(path: Path, module: str) -> list[str]:
    """The imports by which ``module`` takes a private name (``_x``, a name or a module) that another package or
    another layer owns (a package's modules may share private names within one layer)."""
    here_pkg = module if _is_package(module) else module.rpartition(".")[0]
    bad = []
    for target, name in import_targets(path, module):
        if layer_of(target) is None:
            continue
        if not any(p.startswith("_") and not p.startswith("__") for p in (*target.split("."), name)):
            continue
        owner = target if name and _is_package(target) else target.rpartition(".")[0]
        if owner != here_pkg or layer_of(target) != layer_of(module):
            bad.append(f"{module} imports {target}{'.' + name if name else ''}")
    return bad


def test_every_module_has_a_layer() -> None:
    assert len(MODULES) > 150
    assert {layer_of(m) for m in MODULES} == set(LAYER_ORDER)


def test_no_module_imports_from_a_layer_above() -> None:
    """model -> baselines -> env -> reports/CLI: the model imports no baseline, env, report or agent; the
    baselines import no env (the pd exceptions aside); the envs import no report, CLI, agent or calibration."""
    bad = [b for m, f in MODULES.items() for b in upward_imports(f, m)]
    assert not bad, bad


def test_each_upward_exception_is_still_needed() -> None:
    used = {(m, t) for m, f in MODULES.items() for t, _ in import_targets(f, m)}
    assert set(UPWARD_EXCEPTIONS) <= used, sorted(set(UPWARD_EXCEPTIONS) - used)


def test_no_module_imports_another_layers_private_names() -> None:
    bad = [b for m, f in MODULES.items() for b in private_imports(f, m)]
    assert not bad, bad


def test_the_layer_checks_see_a_violation(tmp_path: Path) -> None:
    """The checks on small made-up modules: each deliberate violation is reported, each allowed import is not."""
    model = tmp_path / "model.py"
    model.write_text(
        "from typing import TYPE_CHECKING\n"
        "from servegym.envs.pd.sim.model import PDModel\n"
        "from servegym.envs.pd.sim.pareto import _select\n"
        "from servegym.envs.pd import WORKLOAD_SPECS\n"
        "from servegym.errors import ConfigError\n"
        "from .tables import _private_helper\n"
        "if TYPE_CHECKING:\n    from servegym.envs.pd.env import PDProvisionEnv\n"
        "def f():\n    from servegym.baselines.pd import MinPower\n    from servegym.envs.pd.reports import compare\n"
        "    import gymnasium\n")
    assert upward_imports(model, "servegym.envs.pd.sim.made_up") == [
        "servegym.envs.pd.sim.made_up (model) imports servegym.envs.pd.env (env)",
        "servegym.envs.pd.sim.made_up (model) imports servegym.baselines.pd (baselines)",
        "servegym.envs.pd.sim.made_up (model) imports servegym.envs.pd.reports.compare (top)"]
    assert private_imports(model, "servegym.envs.pd.sim.made_up") == []  # its own package and layer

    baseline = tmp_path / "baseline.py"
    baseline.write_text("from servegym.envs.npu.env import NPUAutoscaleEnv\n"
                        "from servegym.envs.pd.env import PDProvisionEnv\n"
                        "from servegym.envs.npu.sim.serving import _group_sum\n"
                        "from servegym.baselines import _made_up\n")
    assert upward_imports(baseline, "servegym.baselines.made_up") == [
        "servegym.baselines.made_up (baselines) imports servegym.envs.npu.env (env)",
        "servegym.baselines.made_up (baselines) imports servegym.envs.pd.env (env)"]
    assert upward_imports(baseline, "servegym.baselines.pd") == [  # the listed exception lets pd's env in
        "servegym.baselines.pd (baselines) imports servegym.envs.npu.env (env)"]
    assert private_imports(baseline, "servegym.baselines.made_up") == [
        "servegym.baselines.made_up imports servegym.envs.npu.sim.serving._group_sum"]

    env = tmp_path / "env.py"
    env.write_text("from servegym.envs.geo.cli import _compare\nfrom servegym.envs.geo.reference import _x\n")
    assert private_imports(env, "servegym.envs.geo.made_up") == [  # one package, two layers
        "servegym.envs.geo.made_up imports servegym.envs.geo.cli._compare"]
    with pytest.raises(ValueError, match="no layer"):
        layer_of("servegym.made_up")
