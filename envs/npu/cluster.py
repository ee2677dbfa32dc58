"""Old import path of :mod:`servegym.envs.npu.sim.cluster` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.npu.sim.cluster`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.npu.sim import cluster

warnings.warn("servegym.envs.npu.cluster moved to servegym.envs.npu.sim.cluster; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = cluster
