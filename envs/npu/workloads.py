"""Old import path of :mod:`servegym.envs.npu.sim.workloads` (the model moved to ``sim/``): the same module object."""

import sys

from servegym.envs.npu.sim import workloads

sys.modules[__name__] = workloads
