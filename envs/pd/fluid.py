"""Old import path of :mod:`servegym.envs.pd.sim.fluid` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.pd.sim.fluid`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.pd.sim import fluid

warnings.warn("servegym.envs.pd.fluid moved to servegym.envs.pd.sim.fluid; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = fluid
