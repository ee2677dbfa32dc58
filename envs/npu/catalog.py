"""Old import path of :mod:`servegym.envs.npu.sim.catalog` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.npu.sim.catalog`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.npu.sim import catalog

warnings.warn("servegym.envs.npu.catalog moved to servegym.envs.npu.sim.catalog; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = catalog
