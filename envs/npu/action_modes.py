"""Old import path of :mod:`servegym.envs.npu.actions` (the action mode classes; ``actions`` now holds them and
the env's helper mixin is ``action_decoding``): the same module object, with a DeprecationWarning; import
``servegym.envs.npu.actions`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.npu import actions

warnings.warn("servegym.envs.npu.action_modes moved to servegym.envs.npu.actions; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = actions
