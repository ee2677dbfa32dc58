"""servegym: Gymnasium environments for energy-, carbon- and cost-aware LLM serving.

Importing the package registers every environment id (``servegym/...``) with
Gymnasium, so ``gym.make("servegym:servegym/<Id>")`` works without any other import.
Heavy optional dependencies (torch, stable-baselines3) are never imported here.

Public helpers: :func:`action_mask_for_sample` (an env's ``action_masks()`` in the form
``env.action_space.sample(mask=...)`` takes) and :func:`sample_masked_action` (an allowed action the env
applies as sent), both from :mod:`servegym.masks`.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from servegym.registration import ENV_SPECS, register_envs

try:
    __version__ = version("servegym")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

# The ``servegym`` command (servegym_launch.main) registers after parsing its arguments, so ``--help`` stays
# light; every other import registers here.
if not getattr(sys.modules.get("servegym_launch"), "defer_registration", False):
    register_envs()

__all__ = ["ENV_SPECS", "__version__", "action_mask_for_sample", "register_envs", "sample_masked_action"]

#: names this package exports from a submodule loaded on first use (servegym.masks imports numpy and gymnasium,
#: which the ``servegym --help`` path never loads)
_LAZY = {"action_mask_for_sample": "servegym.masks", "sample_masked_action": "servegym.masks"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'servegym' has no attribute {name!r}")
