"""Old import path of :mod:`servegym.envs.geo.sim.estimator` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.geo.sim.estimator`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.geo.sim import estimator

warnings.warn("servegym.envs.geo.estimator moved to servegym.envs.geo.sim.estimator; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = estimator
