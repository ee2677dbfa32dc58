"""Old import path of :mod:`servegym.envs.geo.sim.engine` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.geo.sim.engine`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.geo.sim import engine

warnings.warn("servegym.envs.geo.engine moved to servegym.envs.geo.sim.engine; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = engine
