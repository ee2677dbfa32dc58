"""Old import path of :mod:`servegym.envs.npu.sim.dse` (the model moved to ``sim/``): the same module object."""

import sys

from servegym.envs.npu.sim import dse

sys.modules[__name__] = dse
