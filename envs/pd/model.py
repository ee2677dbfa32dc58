"""Old import path of :mod:`servegym.envs.pd.sim.model` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.pd.sim.model`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.pd.sim import model

warnings.warn("servegym.envs.pd.model moved to servegym.envs.pd.sim.model; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = model
