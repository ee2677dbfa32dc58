"""pd's model owns its state: the model, the observations, rewards, vector env and action types read and update
:class:`~servegym.envs.pd.sim.state.PDState`, never the env's private attributes; pd's action types implement
the one action-type interface (:mod:`servegym.envs.action_type`) over that state."""

from __future__ import annotations

import ast
import copy
import inspect
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from servegym.envs.pd.env import PDProvisionEnv
from servegym.envs.pd.sim.fluid import fluid_periods
from servegym.envs.pd.sim.state import PDParams, PDState

import servegym  # noqa: F401 (registers the ids)

REPO = Path(__file__).resolve().parents[1]
PD = REPO / "envs" / "pd"

#: the modules that may not reach into an env: the model (every module under sim/), the action types, the
#: observations, the rewards, the period dynamics and the vector envs
CHECKED = sorted([*(PD / "sim").glob("*.py"), PD / "actions.py", PD / "observations.py", PD / "rewards.py",
                  PD / "dynamics.py", PD / "vector.py", PD / "sb3_vector.py"])

#: an identifier that names an env object: ``e``, ``env``, ``envs``, ``twin`` or any name ending in ``env``
#: or ``envs`` (``venv``, ``base_env``, ``sub_envs``)
ENV_NAME = re.compile(r"^(e|twin|\w*envs?)$")


def env_expression(node: ast.expr) -> bool:
    """Whether ``node`` evaluates to an env object: an env-like name (:data:`ENV_NAME`), an attribute of that
    name on anything (``self.env``, ``self.envs``), or an item of one (``envs[i]``, ``self.envs[i]``)."""
    while isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Name):
        return bool(ENV_NAME.match(node.id))
    if isinstance(node, ast.Attribute):
        return bool(ENV_NAME.match(node.attr))
    return False


def private(name: str) -> bool:
    """One leading underscore and not a dunder (``_k``, ``_activate``; not ``__dict__``)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def env_private_accesses(source: str) -> list[str]:
    """``line: expression`` of every read, write or call of an env object's private attribute in ``source``
    (``getattr(env, "_x")`` included)."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and private(node.attr) and env_expression(node.value):
            hits.append(f"{node.lineno}: {ast.unparse(node)}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2
              and env_expression(node.args[0]) and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str) and private(node.args[1].value)):
            hits.append(f"{node.lineno}: {ast.unparse(node)}")
    return hits


def test_the_check_sees_every_form_of_access() -> None:
    src = ("e._k += 1\nx = env._pending[0]\nself.env._activate(t)\nself.envs[i]._decode(a)\nvenv.envs[0]._ref\n"
           "getattr(twin, '_target')\nsub_envs[2]._backlog = 0\n")
    assert len(env_private_accesses(src)) == 7
    clean = ("state.k += 1\nself._masks.copy()\nenv.__dict__\nenv.step_index\nrule._cache\n"
             "getattr(env, 'state')\nenvironment_count._x\n")
    assert env_private_accesses(clean) == []


def test_no_pd_model_action_type_observation_reward_or_vector_module_touches_env_privates() -> None:
    """The model (envs/pd/sim/), the action types, observations, rewards and the vector env take the state
    (and the config), not the env: none of them reads, writes or calls a private attribute of an env object."""
    bad = {str(p.relative_to(REPO)): hits for p in CHECKED if (hits := env_private_accesses(p.read_text()))}
    assert not bad, bad


def test_every_registered_pd_action_type_implements_the_interface_over_the_state() -> None:
    """Each ("pd", mode) type is an ActionType of its mode with the four methods (and mask_given), and none of its
    methods takes an env: every parameter is the state, the action, ``chosen`` or ``self``, annotated so."""
    from servegym.envs.action_type import ACTION_TYPES, ActionType
    from servegym.envs.pd import actions
    from servegym.envs.pd.env_config import ACTION_MODES

    assert inspect.signature(actions.pd_action_type).return_annotation == "PDAction"
    assert issubclass(actions.PDAction, ActionType)
    pd_types = {mode: cls for (family, mode), cls in ACTION_TYPES.items() if family == "pd"}
    assert sorted(pd_types) == sorted(ACTION_MODES)
    for mode, cls in pd_types.items():
        assert issubclass(cls, actions.PDAction) and cls.family == "pd" and cls.mode == mode
        assert not getattr(cls, "__abstractmethods__", frozenset()), (cls, cls.__abstractmethods__)
        assert cls.reference_action is not ActionType.reference_action  # the pd types all have a reference
        assert not hasattr(cls, "absolute_twin")  # an env's twin is the env's business
        for name in ("space", "mask", "decode", "reference_action", "mask_given", "follow_action"):
            params = list(inspect.signature(getattr(cls, name)).parameters.values())
            assert params[0].name == "self", (cls, name)
            for p in params[1:]:
                assert "env" not in p.name.lower(), (cls, name, p.name)
                assert not re.search(r"Env\b|gym\.", str(p.annotation)), (cls, name, p.name, p.annotation)
            if name in ("mask", "decode", "reference_action", "mask_given"):
                assert (params[1].name, params[1].annotation) == ("state", "PDState"), (cls, name)


@pytest.mark.parametrize("env_id", ["servegym/PDProvision-v0", "servegym/PDProvisionResidual-v0",
                                    "servegym/PDProvisionFront-v0"])
def test_env_builds_its_registered_type_and_delegates_to_it_with_the_state(env_id: str) -> None:
    from servegym.envs.action_type import ACTION_TYPES

    env = gym.make(env_id, split="test").unwrapped
    env.reset(seed=3)
    at = env.action_type
    assert type(at) is ACTION_TYPES[("pd", env.action_mode)]
    for _ in range(5):
        np.testing.assert_array_equal(env.action_masks(), at.mask(env.state))
        np.testing.assert_array_equal(env.reference_action(), at.reference_action(env.state))
        np.testing.assert_array_equal(env.action_masks_given(), at.mask_given(env.state, ()))
        assert at.decode(env.state, env.reference_action()) == env.decode_action(env.reference_action())
        env.step(env.reference_action())


def test_absolute_twin_is_the_env_in_absolute_mode_and_one_kept_env_otherwise() -> None:
    absolute = PDProvisionEnv({"split": "test"})
    assert absolute.absolute_twin() is absolute
    residual = PDProvisionEnv({"split": "test", "action_mode": "residual"})
    twin = residual.absolute_twin()
    assert twin is residual.absolute_twin() and twin is not residual
    assert twin.action_mode == "absolute" and twin.config == replace(residual.config, action_mode="absolute")


def test_the_env_keeps_no_episode_state_of_its_own() -> None:
    """The state is the one owner: none of the env's former private episode attributes is on the env."""
    env = PDProvisionEnv({"split": "test", "scenario": {"horizon_steps": 30}})
    env.reset(seed=1)
    env.step(np.array([3, 2]))
    former = {"_k", "_rates", "_persistence", "_active", "_pending", "_target", "_backlog", "_arrived", "_served",
              "_hist", "_last_power_w", "_last_viol", "_last_util", "_last_info", "_done", "_adjusted_actions",
              "_start", "_end", "_stage", "_ref", "_ref_power", "_ref_horizon", "_lookahead", "_mu_list", "_ramp_p",
              "_ramp_d", "_idle_w", "_budget_power_w", "_max_price", "_sim", "_samplers", "_sim_max_len",
              "_step_bound"}
    assert not former & set(vars(env)), former & set(vars(env))
    assert isinstance(env.state, PDState) and isinstance(env.params, PDParams)
    assert env.step_index == env.state.k == 1 and env.signals is env.state.signals and env.reference is env.state.rule


def _play(env: PDProvisionEnv, actions: list[Any]) -> list[Any]:
    out = []
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        out.append((obs.tobytes(), float(r).hex(), term, trunc, repr(sorted(info.items())),
                    env.action_masks().tobytes()))
        if term or trunc:
            break
    return out


@pytest.mark.parametrize("mode", ["absolute", "residual", "front"])
def test_the_state_and_the_generator_are_the_whole_episode(mode: str) -> None:
    """Restoring a copy of the state and of the env's generator replays the episode bit for bit, and the same
    state put into a second env of the config plays the same: nothing else in the env changes as it steps."""
    cfg = {"split": "test", "action_mode": mode, "arrivals": "poisson", "scenario": {"horizon_steps": 90}}
    env = PDProvisionEnv(cfg)
    env.reset(seed=7)
    rng = np.random.default_rng(0)
    first = [env.action_space.sample() for _ in range(30)]
    for a in first:
        env.step(a)
    snap, gen = copy.deepcopy(env.state), copy.deepcopy(env.np_random)
    rest = [env.action_space.sample() if rng.random() < 0.5 else env.reference_action() for _ in range(40)]
    played = _play(env, rest)
    env.state, env.np_random = copy.deepcopy(snap), copy.deepcopy(gen)
    assert _play(env, rest) == played
    other = PDProvisionEnv(cfg)
    other.reset(seed=99)  # another episode, then the snapshot's
    other.state, other.np_random = copy.deepcopy(snap), copy.deepcopy(gen)
    assert _play(other, rest) == played


def test_the_model_steps_a_state_without_an_env() -> None:
    """fluid_periods on a copy of the state gives the env's period bit for bit and leaves the copy where the
    env's state is (the model needs the state and the constants, nothing else)."""
    env = PDProvisionEnv({"split": "test", "scenario": {"horizon_steps": 40}, "startup_delay_s": 90.0})
    env.reset(seed=4)
    for t in range(30):
        n_p, n_d, adjusted = env.decode_action(np.array([2 + t % 5, 1 + t % 4]))
        arrived = env.begin_period(n_p, n_d)
        twin = copy.deepcopy(env.state)
        [alone] = fluid_periods(env.params, [twin], [arrived])
        [m] = env.dynamics.run([env.state], [arrived], [env.np_random])
        assert repr(alone) == repr(m)
        assert (twin.active, twin.pending, twin.backlog.hex(), twin.served.hex()) == (
            env.state.active, env.state.pending, env.state.backlog.hex(), env.state.served.hex())
        env.finish_step(n_p, n_d, adjusted, arrived, m)
