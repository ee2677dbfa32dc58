"""Old import path of :mod:`servegym.envs.geo.reports.compare` (the reports moved to ``reports/``): the same module
object, with a DeprecationWarning; import ``servegym.envs.geo.reports.compare`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.geo.reports import compare

warnings.warn("servegym.envs.geo.compare moved to servegym.envs.geo.reports.compare; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = compare
