"""Old import path of :mod:`servegym.envs.npu.sim.azure2024` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.npu.sim.azure2024`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.npu.sim import azure2024

warnings.warn("servegym.envs.npu.azure2024 moved to servegym.envs.npu.sim.azure2024; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = azure2024
