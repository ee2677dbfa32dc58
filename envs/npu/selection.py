"""Old import path of :mod:`servegym.envs.npu.sim.selection` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.npu.sim.selection`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.npu.sim import selection

warnings.warn("servegym.envs.npu.selection moved to servegym.envs.npu.sim.selection; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = selection
