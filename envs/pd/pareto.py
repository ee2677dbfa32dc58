"""Old import path of :mod:`servegym.envs.pd.sim.pareto` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.pd.sim.pareto`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.pd.sim import pareto

warnings.warn("servegym.envs.pd.pareto moved to servegym.envs.pd.sim.pareto; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = pareto
