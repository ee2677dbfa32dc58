"""Old import path of :mod:`servegym.envs.npu.sim.azure2024` (the model moved to ``sim/``): the same module object."""

import sys

from servegym.envs.npu.sim import azure2024

sys.modules[__name__] = azure2024
