"""Old import path of :mod:`servegym.envs.geo.reports.validate` (the reports moved to ``reports/``): the same module
object, with a DeprecationWarning; import ``servegym.envs.geo.reports.validate`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.geo.reports import validate

warnings.warn("servegym.envs.geo.validate moved to servegym.envs.geo.reports.validate; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = validate
