"""Old import path of :mod:`servegym.envs.geo.sim.metrics` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.geo.sim.metrics`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.geo.sim import metrics

warnings.warn("servegym.envs.geo.metrics moved to servegym.envs.geo.sim.metrics; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = metrics
