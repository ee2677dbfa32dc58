"""Old import path of :mod:`servegym.envs.geo.sim.provisioner` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.geo.sim.provisioner`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.geo.sim import provisioner

warnings.warn("servegym.envs.geo.provisioner moved to servegym.envs.geo.sim.provisioner; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = provisioner
