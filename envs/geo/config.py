"""Old import path of :mod:`servegym.envs.geo.sim.config` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.geo.sim.config`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.geo.sim import config

warnings.warn("servegym.envs.geo.config moved to servegym.envs.geo.sim.config; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = config
