"""Old import path of :mod:`servegym.envs.npu.sim.dse` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.npu.sim.dse`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.npu.sim import dse

warnings.warn("servegym.envs.npu.dse moved to servegym.envs.npu.sim.dse; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = dse
