"""Old import path of :mod:`servegym.envs.geo.sim.cluster` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.geo.sim.cluster`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.geo.sim import cluster

warnings.warn("servegym.envs.geo.cluster moved to servegym.envs.geo.sim.cluster; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = cluster
