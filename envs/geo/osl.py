"""Old import path of :mod:`servegym.envs.geo.sim.osl` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.geo.sim.osl`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.geo.sim import osl

warnings.warn("servegym.envs.geo.osl moved to servegym.envs.geo.sim.osl; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = osl
