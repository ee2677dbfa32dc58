"""Old import path of :mod:`servegym.envs.geo.sim.engine_kernels` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.geo.sim.engine_kernels`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.geo.sim import engine_kernels

warnings.warn("servegym.envs.geo.engine_kernels moved to servegym.envs.geo.sim.engine_kernels; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = engine_kernels
