"""The geo model owns the state its action types read, and geo's action types implement the one interface.

* No module of the geo model (``envs/geo/sim/``), no geo action type (``envs/geo/actions.py`` with its
  reference planner ``envs/geo/reference.py``), nor the observation and reward modules, reads or writes a
  private attribute of an env object: they read :class:`~servegym.envs.geo.sim.decisions.GeoDecisionState`
  (checked on the code by :func:`env_private_accesses`, whose own test plants the accesses the action types
  made before they took the state);
* every registered ``("geo", mode)`` type is an :class:`~servegym.envs.action_type.ActionType` that implements
  ``space``, ``mask``, ``decode`` and ``reference_action``, takes no env in any method, and agrees with itself on
  a reset state (its space is the env's, its mask fits the space, its reference action is allowed, every allowed
  action decodes).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO_ROOT
from servegym.envs.action_type import ACTION_TYPES, ActionType
from servegym.envs.geo import actions
from servegym.envs.geo.env_route import GeoRouteEnv
from servegym.envs.geo.env_window import GeoRouteWindowEnv
from servegym.envs.geo.sim.decisions import GeoDecisionState, WindowPlacement

GEO = REPO_ROOT / "envs" / "geo"

#: Names that hold an env object wherever they appear (as a variable, a parameter or an attribute:
#: ``env``, ``e``, ``self.env``, ``self._env``, ``core``, ``x.unwrapped``).
ENV_NAMES = frozenset({"env", "e", "_env", "core", "unwrapped"})


def _is_env_annotation(node: ast.expr | None) -> bool:
    """An annotation naming an env class (``GeoRouteEnv``, ``GeoEnvBase``, ``gym.Env``, ``"GeoRouteWindowEnv"``,
    or a union or subscript holding one)."""
    if node is None:
        return False
    text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ast.unparse(node)
    return any(part.strip(" .[]|()'\"").endswith(("Env", "EnvBase")) for part in text.replace(",", "|").split("|"))


def env_private_accesses(source: str, filename: str = "<source>") -> list[str]:
    """``"file:line: expression"`` for every read or write of a private attribute (one leading underscore, not a
    dunder) of an env object in ``source``, through attribute syntax or ``getattr``/``setattr``/``hasattr``/
    ``delattr`` with a constant name.

    An *env object* is an expression that is: a name or attribute named in :data:`ENV_NAMES`; or a name that a
    parameter or an annotated assignment of the same function (or module) annotates with an env class
    (:func:`_is_env_annotation`)."""
    tree = ast.parse(source)
    annotated: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and _is_env_annotation(node.annotation):
            annotated.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _is_env_annotation(
                node.annotation):
            annotated.add(node.target.id)

    def is_env(expr: ast.expr) -> bool:
        if isinstance(expr, ast.Name):
            return expr.id in ENV_NAMES or expr.id in annotated
        if isinstance(expr, ast.Attribute):
            return expr.attr in ENV_NAMES
        return False

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr) and is_env(node.value):
            out.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2
              and is_env(node.args[0]) and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and private(node.args[1].value)):
            out.append(f"{filename}:{node.lineno}: {ast.unparse(node)}")
    return out


def _geo_types() -> dict[str, type[ActionType[Any, Any]]]:
    return {mode: cls for (family, mode), cls in ACTION_TYPES.items() if family == "geo"}


def checked_files() -> list[Path]:
    """The geo model's modules, the action types' modules (with the residual's reference planner), the
    observation and reward modules, and the multi-agent env (it drives its core env through public methods)."""
    files = set((GEO / "sim").rglob("*.py"))
    files |= {GEO / "actions.py", GEO / "reference.py", GEO / "observations.py", GEO / "rewards.py",
              GEO / "parallel.py"}
    files |= {Path(inspect.getsourcefile(cls) or "") for cls in _geo_types().values()}
    return sorted(files)


def test_no_geo_model_action_type_observation_or_reward_module_touches_an_env_private() -> None:
    files = checked_files()
    assert len(files) > 10 and all(f.is_file() for f in files), files
    bad = [hit for f in files for hit in env_private_accesses(f.read_text(), str(f.relative_to(REPO_ROOT)))]
    assert not bad, bad


#: What the window action types did before they took the state (``place(env, ctx, share)``), and other
#: spellings of an env's private attribute: every line must be caught.
PLANTED = '''
def place(self, env: GeoRouteWindowEnv, ctx, share):
    caps = env._caps(ctx, share)
    return self.place(env, ctx, env._check_action(action))[0]

def other(self, core, thing: "GeoRouteEnv", u: gym.Env, view):
    self._env._ctx = None
    x = self.env._disp[0]
    y = core._mask
    z = thing._i
    w = getattr(u, "_sched")
    setattr(view.unwrapped, "_n", 3)
    return u.unwrapped._rows
'''
#: What the state-reading code does, which must not be flagged.
CLEAN = '''
def decode(self, state: GeoDecisionState, action):
    state.dispatched[state.scheduler[state.i], 0] += 1.0
    self._policy = state.ctx
    env.__class__, env.state.i, self.env.action_space
    getattr(env, "state"), getattr(self, "_x")
    return self._n_dcs + sim._cursor
'''


def test_the_env_private_check_bites_on_planted_accesses(tmp_path: Path) -> None:
    """The check flags every planted access (and nothing in the clean code), read from a file on disk as the
    repository's modules are."""
    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED)
    hits = env_private_accesses(planted.read_text(), planted.name)
    assert sorted(h.split(": ", 1)[1] for h in hits) == sorted([
        "env._caps", "env._check_action", "self._env._ctx", "self.env._disp", "core._mask", "thing._i",
        "getattr(u, '_sched')", "setattr(view.unwrapped, '_n', 3)", "u.unwrapped._rows",
    ]), hits
    assert all(h.startswith("planted.py:") for h in hits)
    assert env_private_accesses(CLEAN) == []


MINI = {"preset": "mini", "geo": {"duration_s": 2.0}}
#: one env per registered geo mode
ENVS: dict[str, Any] = {
    "direct": lambda: GeoRouteEnv(MINI),
    "residual": lambda: GeoRouteEnv(MINI, action_mode="residual", reference="greedy:0"),
    "residual-decide-at-window": lambda: GeoRouteEnv(MINI, action_mode="residual", decide_at="window"),
    "window-direct": lambda: GeoRouteWindowEnv(MINI),
    "window-residual": lambda: GeoRouteWindowEnv(MINI, action_mode="residual", reference="ilp"),
}


def test_every_geo_mode_is_registered_once() -> None:
    assert set(_geo_types()) == set(ENVS)
    assert {cls.family for cls in _geo_types().values()} == {"geo"}


@pytest.mark.parametrize("mode", sorted(ENVS))
def test_geo_action_types_implement_the_interface_and_take_no_env(mode: str) -> None:
    cls = _geo_types()[mode]
    assert issubclass(cls, ActionType) and issubclass(cls, actions.GeoActionType) and not inspect.isabstract(cls)
    for name in ("space", "mask", "decode", "reference_action"):
        fn = getattr(cls, name)
        assert callable(fn) and not getattr(fn, "__isabstractmethod__", False), name
    assert list(inspect.signature(cls.space).parameters) == ["self"]  # the DC count comes from the constructor
    for name in ("mask", "decode", "reference_action"):
        fn = getattr(cls, name)
        if fn is getattr(ActionType, name):  # the interface's default (no reference): ``None``
            continue
        params = list(inspect.signature(fn).parameters.values())
        assert params[1].name == "state" and params[1].annotation == "GeoDecisionState", (name, params)
    # no method of the type, inherited ones included, takes an env
    methods = [(f.__qualname__, f) for klass in cls.__mro__ if klass not in (object, ActionType)
               and not klass.__module__.startswith("typing") for f in vars(klass).values() if inspect.isfunction(f)]
    assert {"space", "mask", "decode", "reset"} <= {q.rsplit(".", 1)[1] for q, _ in methods}
    for n, f in methods:
        for p in inspect.signature(f).parameters.values():
            assert p.name not in ENV_NAMES, (n, p.name)
            ann = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", "")
            assert not _is_env_annotation(ast.Constant(ann)), (n, p.name, ann)


@pytest.mark.parametrize("mode", sorted(ENVS))
def test_geo_action_types_agree_with_their_env_and_themselves(mode: str) -> None:
    env = ENVS[mode]()
    at = env.action_type
    assert type(at) is _geo_types()[mode] and at.mode == mode
    assert env.action_space == at.space()
    env.reset(seed=0)
    st = env.state
    assert isinstance(st, GeoDecisionState) and st.ctx is not None
    mask = at.mask(st)
    assert mask.dtype == bool and mask.any()
    space = at.space()
    assert mask.shape == ((int(space.n),) if hasattr(space, "n") else space.shape)
    assert mask is not at.mask(st)  # a fresh array
    ref = at.reference_action(st)
    if at.residual:
        assert space.contains(np.asarray(ref, dtype=space.dtype).reshape(space.shape))
        if hasattr(space, "n"):
            assert mask[ref]
    else:
        assert ref is None
    if hasattr(space, "n"):
        for a in np.flatnonzero(mask):
            dc = at.decode(st, int(a))
            assert 0 <= dc < env.n_dcs and isinstance(dc, int)
    else:
        placement = at.decode(st, np.zeros(env.n_dcs, dtype=np.float32))
        assert isinstance(placement, WindowPlacement) and placement.dc.shape == (st.ctx.n_requests,)
        assert ((placement.dc >= 0) & (placement.dc < env.n_dcs)).all() and placement.sched_delay_s >= 0.0
