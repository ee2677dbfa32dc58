"""Old import path of :mod:`servegym.envs.npu.sim.roofline` (the model moved to ``sim/``): the same module object."""

import sys

from servegym.envs.npu.sim import roofline

sys.modules[__name__] = roofline
