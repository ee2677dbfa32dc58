"""Old import path of :mod:`servegym.envs.npu.sim.roofline` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.npu.sim.roofline`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.npu.sim import roofline

warnings.warn("servegym.envs.npu.roofline moved to servegym.envs.npu.sim.roofline; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = roofline
