"""Old import path of :mod:`servegym.envs.pd.sim.scenario` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.pd.sim.scenario`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.pd.sim import scenario

warnings.warn("servegym.envs.pd.scenario moved to servegym.envs.pd.sim.scenario; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = scenario
