"""Old import path of :mod:`servegym.envs.pd.sim.workload_moments` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.pd.sim.workload_moments`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.pd.sim import workload_moments

warnings.warn("servegym.envs.pd.workload_moments moved to servegym.envs.pd.sim.workload_moments; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = workload_moments
