"""The one interface every action mode of every family implements (HighwayEnv's ``ActionType`` is the model).

An action type is a small object built from the env's config. It owns the action space, the mask of the
actions valid in the model's current state, the decoding of an action into the model's decision, and, where
the family has a reference policy, the action that plays the reference's suggestion. It reads the model's
state (a typed object the model layer owns: pd's ``PDState``, npu's ``NPUState``, geo's ``GeoDecisionState``),
never the env: an env builds its action type once with its family's factory and calls these four methods,
so ``step()`` never branches on the mode.

Each family registers its types with :func:`register` (one ``(family, mode)`` key each), and its factory
returns ``ActionType`` typed to its own state and decision. ``tests/test_action_types.py`` checks every
registered type against this interface.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

StateT = TypeVar("StateT", contravariant=True)
DecisionT = TypeVar("DecisionT", covariant=True)


class ActionType(abc.ABC, Generic[StateT, DecisionT]):
    """One action mode: its space, its mask, its decoding into the model's decision and the reference's action.

    ``StateT`` is what the model exposes at a decision point (the type reads it, never writes it, and never
    reads the env); ``DecisionT`` is what the model applies (pd: the target ``(n_P, n_D, adjusted)``; npu: the
    per-group targets and configuration options; geo: the data centre of a request or the window's placement).
    """

    #: the family ("geo", "pd", "npu") and the config's ``action_mode`` value this type implements
    family: ClassVar[str]
    mode: ClassVar[str]

    @abc.abstractmethod
    def space(self) -> spaces.Space[Any]:
        """The action space (the same object's shape on every call; built from the config)."""

    @abc.abstractmethod
    def mask(self, state: StateT) -> NDArray[np.bool_]:
        """The valid actions in ``state``, in sb3-contrib's layout (per-dimension masks concatenated; a fresh
        array). A type with a continuous space returns an all-true vector of the space's size."""

    @abc.abstractmethod
    def decode(self, state: StateT, action: Any) -> DecisionT:
        """The model's decision for ``action`` in ``state``; ``servegym.errors.ActionError`` if it is invalid."""

    def reference_action(self, state: StateT) -> Any | None:
        """The action that plays the reference policy's suggestion in ``state`` (a behaviour-cloning teacher);
        ``None`` for a family or mode without a reference."""
        return None


#: (family, mode) -> the registered class
ACTION_TYPES: dict[tuple[str, str], type[ActionType[Any, Any]]] = {}

_T = TypeVar("_T", bound=type)


def register(cls: _T) -> _T:
    """Class decorator: record ``cls`` under ``(cls.family, cls.mode)``; a second class for a key is an error."""
    if not (isinstance(cls, type) and issubclass(cls, ActionType)):
        raise TypeError(f"{cls!r} is not an ActionType subclass")
    key = (cls.family, cls.mode)
    if key in ACTION_TYPES and ACTION_TYPES[key] is not cls:
        raise ValueError(f"action type {key} is registered twice ({ACTION_TYPES[key].__name__}, {cls.__name__})")
    ACTION_TYPES[key] = cls
    return cls
