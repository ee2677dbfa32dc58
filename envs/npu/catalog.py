"""Old import path of :mod:`servegym.envs.npu.sim.catalog` (the model moved to ``sim/``): the same module object."""

import sys

from servegym.envs.npu.sim import catalog

sys.modules[__name__] = catalog
