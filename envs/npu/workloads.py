"""Old import path of :mod:`servegym.envs.npu.sim.workloads` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.npu.sim.workloads`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.npu.sim import workloads

warnings.warn("servegym.envs.npu.workloads moved to servegym.envs.npu.sim.workloads; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = workloads
