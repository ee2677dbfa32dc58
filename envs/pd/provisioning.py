"""Old import path of :mod:`servegym.envs.pd.sim.provisioning` (the model moved to ``sim/``): the same module object,
with a DeprecationWarning; import ``servegym.envs.pd.sim.provisioning`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.pd.sim import provisioning

warnings.warn("servegym.envs.pd.provisioning moved to servegym.envs.pd.sim.provisioning; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = provisioning
