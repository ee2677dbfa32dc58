"""Old import path of :mod:`servegym.envs.pd.sim.catalog` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.pd.sim.catalog`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.pd.sim import catalog

warnings.warn("servegym.envs.pd.catalog moved to servegym.envs.pd.sim.catalog; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = catalog
