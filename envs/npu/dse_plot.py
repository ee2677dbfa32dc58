"""Old import path of :mod:`servegym.envs.npu.reports.plots` (the reports moved to ``reports/``): the same module
object, with a DeprecationWarning; import ``servegym.envs.npu.reports.plots`` instead (this name goes in the next
release)."""

import sys
import warnings

from servegym.envs.npu.reports import plots

warnings.warn("servegym.envs.npu.dse_plot moved to servegym.envs.npu.reports.plots; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = plots
