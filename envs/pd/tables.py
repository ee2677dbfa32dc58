"""Old import path of :mod:`servegym.envs.pd.sim.tables` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.pd.sim.tables`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.pd.sim import tables

warnings.warn("servegym.envs.pd.tables moved to servegym.envs.pd.sim.tables; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = tables
