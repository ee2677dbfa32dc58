"""Old import path of :mod:`servegym.envs.geo.sim.profile` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.geo.sim.profile`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.geo.sim import profile

warnings.warn("servegym.envs.geo.profile moved to servegym.envs.geo.sim.profile; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = profile
