"""servegym: Gymnasium environments for energy-, carbon- and cost-aware LLM serving.

Importing the package registers every environment id (``servegym/...``) with
Gymnasium, so ``gym.make("servegym:servegym/<Id>")`` works without any other import.
Heavy optional dependencies (torch, stable-baselines3) are never imported here.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version

from servegym.registration import ENV_SPECS, register_envs

try:
    __version__ = version("servegym")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

# The ``servegym`` command (servegym_launch.main) registers after parsing its arguments, so ``--help`` stays
# light; every other import registers here.
if not getattr(sys.modules.get("servegym_launch"), "defer_registration", False):
    register_envs()

__all__ = ["ENV_SPECS", "__version__", "register_envs"]
