"""Old import path of :mod:`servegym.envs.pd.sim.simulator` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.pd.sim.simulator`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.pd.sim import simulator

warnings.warn("servegym.envs.pd.simulator moved to servegym.envs.pd.sim.simulator; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = simulator
