"""npu's model owns its state, and its action types implement the one action-type interface.

* No module of npu's model (``envs/npu/sim/``) and none of the env's action, decoding, observation and reward
  modules reads or writes a private attribute of an env object (:func:`env_private_accesses` says exactly what
  counts); they take the :class:`~servegym.envs.npu.sim.state.NPUState` instead.
* Every registered ``("npu", mode)`` action type subclasses :class:`~servegym.envs.action_type.ActionType`,
  implements its four methods, and none of its methods takes an env.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO_ROOT

NPU = REPO_ROOT / "envs" / "npu"
#: the env-layer modules that work on the env's behalf (the env itself, env.py, owns its private attributes)
ENV_HELPERS = ("actions.py", "action_decoding.py", "observations.py", "rewards.py")
#: names that hold an env object by convention across the repository's code
ENV_NAMES = frozenset({"env", "e", "u", "unwrapped", "base_env", "npu_env"})
#: attributes that hold an env object (``self.env``, ``wrapper.unwrapped``)
ENV_ATTRS = frozenset({"env", "unwrapped"})
#: what an annotation names when its parameter is an env
ENV_TYPES = ("NPUAutoscaleEnv", "gym.Env", "Env[")


def _private(name: str) -> bool:
    """One leading underscore, or a name-mangled ``__x``, but not a dunder (``__dict__``)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _annotated_env(arg: ast.arg) -> bool:
    if arg.annotation is None:
        return False
    text = ast.unparse(arg.annotation)
    return any(t in text for t in ENV_TYPES) or text == "Env"


def env_private_accesses(source: str, mixins: frozenset[str] = frozenset()) -> list[str]:
    """``line: expression`` for every read or write of a private attribute of an env object in ``source``.

    An env object is: a name in :data:`ENV_NAMES`; an attribute in :data:`ENV_ATTRS` (``self.env``, ``x.unwrapped``);
    a parameter annotated with the env's type (:data:`ENV_TYPES`); and the first parameter (``self``) of a method of
    a class in ``mixins`` (classes the env inherits from, whose ``self`` is the env). An access is ``obj._x``, or
    ``getattr`` / ``setattr`` / ``hasattr`` / ``delattr`` of ``obj`` with a literal private name."""
    tree = ast.parse(source)
    out: list[str] = []

    def visit(node: ast.AST, env_names: frozenset[str]) -> None:
        if isinstance(node, ast.ClassDef):
            for child in node.body:
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in mixins:
                    args = child.args.posonlyargs + child.args.args
                    first = frozenset({args[0].arg}) if args and not _static(child) else frozenset()
                    visit_function(child, env_names, first)
                else:
                    visit(child, env_names)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            visit_function(node, env_names)
            return
        if isinstance(node, ast.Attribute) and _private(node.attr) and is_env(node.value, env_names):
            out.append(f"{node.lineno}: {ast.unparse(node)}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                and _private(node.args[1].value) and is_env(node.args[0], env_names)):
            out.append(f"{node.lineno}: {ast.unparse(node)}")
        for child in ast.iter_child_nodes(node):
            visit(child, env_names)

    def visit_function(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, env_names: frozenset[str],
                       own: frozenset[str] = frozenset()) -> None:
        a = fn.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []),
                  *([a.kwarg] if a.kwarg else [])]
        annotated = frozenset(p.arg for p in params if _annotated_env(p))
        # a parameter shadows an outer name (``self`` of a nested class's method) unless it is an env itself
        inner = (env_names - {p.arg for p in params}) | annotated | own
        for child in ast.iter_child_nodes(fn):
            if child is not fn.args:
                visit(child, inner)

    def is_env(expr: ast.expr, env_names: frozenset[str]) -> bool:
        if isinstance(expr, ast.Name):
            return expr.id in ENV_NAMES or expr.id in env_names
        return isinstance(expr, ast.Attribute) and expr.attr in ENV_ATTRS

    visit(tree, frozenset())
    return out


def _static(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)


def _env_mixins() -> dict[str, frozenset[str]]:
    """Per module file name, the classes of that module the env class inherits from."""
    from servegym.envs.npu.env import NPUAutoscaleEnv

    out: dict[str, set[str]] = {}
    for cls in NPUAutoscaleEnv.__mro__[1:]:
        if cls.__module__.startswith("servegym.envs.npu."):
            out.setdefault(cls.__module__.rsplit(".", 1)[-1] + ".py", set()).add(cls.__name__)
    return {k: frozenset(v) for k, v in out.items()}


def _checked_files() -> list[Path]:
    return [*sorted((NPU / "sim").glob("*.py")), *(NPU / name for name in ENV_HELPERS)]


@pytest.mark.parametrize("path", _checked_files(), ids=lambda p: p.relative_to(NPU).as_posix())
def test_no_npu_model_or_helper_module_touches_the_envs_private_attributes(path: Path) -> None:
    mixins = _env_mixins().get(path.name, frozenset()) if path.parent == NPU else frozenset()
    bad = env_private_accesses(path.read_text(), mixins)
    assert not bad, f"{path.relative_to(REPO_ROOT)} reads or writes the env's private attributes: {bad}"


def test_the_private_access_check_sees_each_form() -> None:
    """Each form of access is reported, and the accesses that are not an env's private attribute are not."""
    src = (
        "def f(env, sim, state: NPUState, other: 'NPUAutoscaleEnv'):\n"
        "    env._targets = {}\n"                 # 2: a write through the conventional name
        "    x = other._count\n"                  # 3: a parameter annotated with the env's type
        "    y = self.env._option\n"              # 4: an attribute that holds an env
        "    z = getattr(e, '_memo', None)\n"     # 5: getattr with a literal private name
        "    ok = (sim._x, state._y, env.__dict__, env.groups, getattr(env, 'groups'))\n"
        "class M:\n"
        "    def g(self):\n"
        "        return self._t\n"                # 9: self of a class the env inherits from
        "    @staticmethod\n"
        "    def h(self):\n"
        "        return self._t\n"
        "class N:\n"
        "    def g(self):\n"
        "        return self._t\n"
    )
    assert env_private_accesses(src, frozenset({"M"})) == [
        "2: env._targets", "3: other._count", "4: self.env._option", "5: getattr(e, '_memo', None)", "9: self._t"]
    assert env_private_accesses(src) == [
        "2: env._targets", "3: other._count", "4: self.env._option", "5: getattr(e, '_memo', None)"]


# ---------------------------------------------------------------------------------------------- action types
def _npu_types() -> dict[str, type]:
    import servegym.envs.npu.actions  # noqa: F401  (registers the types)
    from servegym.envs.action_type import ACTION_TYPES

    return {mode: cls for (family, mode), cls in ACTION_TYPES.items() if family == "npu"}


def test_every_npu_action_mode_has_a_registered_action_type() -> None:
    from servegym.envs.action_type import ActionType
    from servegym.envs.npu.actions import NPUActionType
    from servegym.envs.npu.env_config import ACTION_MODES

    types = _npu_types()
    assert sorted(types) == sorted(ACTION_MODES)
    for mode, cls in types.items():
        assert issubclass(cls, ActionType) and issubclass(cls, NPUActionType), cls
        assert cls.family == "npu" and cls.mode == mode
        assert not inspect.isabstract(cls), cls.__abstractmethods__  # type: ignore[attr-defined]
        for name in ("space", "mask", "decode", "reference_action"):
            impl = next(k for k in cls.__mro__ if name in vars(k))
            assert impl is not ActionType, f"{cls.__name__}.{name} is the interface's default"


@pytest.mark.parametrize("mode", ["absolute", "residual"])
def test_npu_action_type_methods_take_no_env(mode: str) -> None:
    """No method of the type (its own or inherited from the npu base) has a parameter named or annotated as an env."""
    cls = _npu_types()[mode]
    checked = 0
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        if name.startswith("__") or fn.__module__ == "servegym.envs.action_type":
            continue
        for p in inspect.signature(fn).parameters.values():
            ann = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", "")
            assert p.name not in ENV_NAMES, f"{cls.__name__}.{name} takes {p.name!r}"
            assert not any(t in str(ann) for t in ENV_TYPES), f"{cls.__name__}.{name}({p.name}: {ann})"
        checked += 1
    assert checked >= 8, checked


@pytest.mark.parametrize("mode", ["absolute", "residual"])
def test_npu_action_type_agrees_with_the_env(mode: str) -> None:
    """The env's space, masks and reference read the type; the reference action lies in the space and the mask,
    and decoding it (and an invalid action) changes nothing in the state."""
    from servegym.envs.npu.env import NPUAutoscaleEnv
    from servegym.envs.npu.sim.state import NPUDecision, NPUState

    from servegym.errors import ActionError

    env = NPUAutoscaleEnv({"split": None, "hours": 0.25, "model": "Llama3-8B", "action_mode": mode})
    t = env.action_type
    assert type(t) is _npu_types()[mode] and t.mode == env.config.action_mode
    assert env.action_space is t.space() and env.action_space == t.space()
    env.reset(seed=0)
    st = env.state
    assert isinstance(st, NPUState)
    assert np.array_equal(t.mask(st), env.action_masks())
    ref = t.reference_action(st)
    assert ref is not None and env.action_space.contains(ref)
    splits = np.cumsum(env.action_space.nvec)[:-1]
    assert all(m[v] for m, v in zip(np.split(t.mask(st), splits), ref, strict=True))
    before = (dict(st.targets), st.count.copy(), st.option.copy(), st.t, st.ref_counts.copy())
    dec = t.decode(st, ref)
    assert isinstance(dec, NPUDecision) and not dec.adjusted
    with pytest.raises(ActionError):
        t.decode(st, np.full(env.action_space.shape, -1))
    after = (dict(st.targets), st.count.copy(), st.option.copy(), st.t, st.ref_counts.copy())
    assert repr(before) == repr(after)
    if mode == "residual":  # the all-zero action is the reference's own
        assert not np.any(ref)
    else:
        assert np.array_equal(ref, env.heuristic_action())
