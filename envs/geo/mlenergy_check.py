"""Old import path of :mod:`servegym.envs.geo.reports.mlenergy_check` (the reports moved to ``reports/``): the same module
object, with a DeprecationWarning; import ``servegym.envs.geo.reports.mlenergy_check`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.geo.reports import mlenergy_check

warnings.warn("servegym.envs.geo.mlenergy_check moved to servegym.envs.geo.reports.mlenergy_check; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = mlenergy_check
