"""Old import path of :mod:`servegym.envs.npu.reports.fluid_check` (the reports moved to ``reports/``): the same module
object, with a DeprecationWarning; import ``servegym.envs.npu.reports.fluid_check`` instead (this name goes in the next
release)."""

import sys
import warnings

from servegym.envs.npu.reports import fluid_check

warnings.warn("servegym.envs.npu.fluid_check moved to servegym.envs.npu.reports.fluid_check; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = fluid_check
