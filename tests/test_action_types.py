"""Every action mode of the three families implements the one interface, ``envs/action_type.py``'s ``ActionType``.

The families' own tests (``test_geo_state.py``, ``test_pd_state.py``, ``test_npu_state.py``) check their types
in depth and that no model module or action type touches an env's private attributes; this file checks the
registry as a whole and every registered env id against it.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from servegym.envs.action_type import ACTION_TYPES, ActionType, register
from servegym.envs.geo import actions as geo_actions  # noqa: F401  (registers geo's types)
from servegym.envs.npu import actions as npu_actions  # noqa: F401
from servegym.envs.npu.env_config import ACTION_MODES as NPU_MODES
from servegym.envs.pd import actions as pd_actions  # noqa: F401
from servegym.envs.pd.env_config import ACTION_MODES as PD_MODES

import servegym  # noqa: F401  (registers the ids)
from servegym.registration import ENV_SPECS

INTERFACE = ("space", "mask", "decode", "reference_action")


def _takes_an_env(fn: Any) -> list[str]:
    """The parameters of ``fn`` that name or annotate an env."""
    out = []
    for p in inspect.signature(fn).parameters.values():
        ann = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", str(p.annotation))
        if p.name in ("env", "e", "envs") or p.name.endswith("_env") or re.search(r"Env\b", str(ann)):
            out.append(f"{p.name}: {ann}")
    return out


def test_each_family_registers_a_type_for_every_action_mode_it_accepts() -> None:
    by_family: dict[str, set[str]] = {}
    for family, mode in ACTION_TYPES:
        by_family.setdefault(family, set()).add(mode)
    assert set(by_family) == {"geo", "pd", "npu"}
    assert by_family["pd"] == set(PD_MODES)
    assert by_family["npu"] == set(NPU_MODES)
    # both geo envs take action_mode "direct" or "residual": the window env's keys carry a prefix
    assert {"direct", "residual", "window-direct", "window-residual"} <= by_family["geo"]


@pytest.mark.parametrize("key", sorted(ACTION_TYPES), ids=lambda k: f"{k[0]}-{k[1]}")
def test_every_registered_type_implements_the_interface_and_takes_no_env(key: tuple[str, str]) -> None:
    cls = ACTION_TYPES[key]
    assert issubclass(cls, ActionType) and not inspect.isabstract(cls), cls
    assert (cls.family, cls.mode) == key
    for name in INTERFACE:
        assert callable(getattr(cls, name)), name
    assert "state" in inspect.signature(cls.mask).parameters
    assert "state" in inspect.signature(cls.decode).parameters
    offenders = {name: _takes_an_env(fn) for name, fn in inspect.getmembers(cls, inspect.isfunction)
                 if not name.startswith("__")}
    assert not {k: v for k, v in offenders.items() if v}, f"{cls.__name__} methods take an env: {offenders}"


def test_register_refuses_a_second_class_for_a_key_and_a_non_action_type() -> None:
    cls = ACTION_TYPES[("pd", "absolute")]
    twin = type("Twin", (cls,), {})
    with pytest.raises(ValueError, match="registered twice"):
        register(twin)
    with pytest.raises(TypeError):
        register(int)
    assert ACTION_TYPES[("pd", "absolute")] is cls


def _mask_size(space: spaces.Space[Any]) -> int:
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    return int(np.prod(space.shape))


@pytest.mark.parametrize("env_id", [e.id for e in ENV_SPECS])
def test_every_env_id_decodes_through_its_registered_type(env_id: str) -> None:
    env = gym.make(env_id).unwrapped
    try:
        env.reset(seed=0)
        t = env.action_type
        assert isinstance(t, ActionType) and ACTION_TYPES[(t.family, t.mode)] is type(t)
        assert t.space() == env.action_space
        m = t.mask(env.state)
        assert m.dtype == np.bool_ and m.shape == (_mask_size(env.action_space),)
        if hasattr(env, "action_masks"):
            np.testing.assert_array_equal(m, env.action_masks())
        ref = t.reference_action(env.state)
        if ref is not None:
            assert env.action_space.contains(np.asarray(ref, dtype=env.action_space.dtype)), (env_id, ref)
    finally:
        env.close()


def test_the_env_parameter_check_bites() -> None:
    def by_name(self: Any, env: Any) -> None: ...

    def by_annotation(self: Any, x: PDProvisionEnv) -> None: ...  # noqa: F821

    def quoted(self: Any, x: "gym.Env[Any, Any]") -> None: ...  # noqa: UP037  (a string annotation kept as one)

    def clean(self: Any, state: Any, action: Any) -> None: ...

    assert _takes_an_env(by_name) and _takes_an_env(by_annotation) and _takes_an_env(quoted)
    assert not _takes_an_env(clean)
