"""Old import path of :mod:`servegym.envs.geo.sim.decisions` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.geo.sim.decisions`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.geo.sim import decisions

warnings.warn("servegym.envs.geo.decisions moved to servegym.envs.geo.sim.decisions; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = decisions
