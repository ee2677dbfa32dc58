"""Old import path of :mod:`servegym.envs.npu.sim.selection` (the model moved to ``sim/``): the same module object."""

import sys

from servegym.envs.npu.sim import selection

sys.modules[__name__] = selection
