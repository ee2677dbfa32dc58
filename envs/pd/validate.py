"""Old import path of :mod:`servegym.envs.pd.reports.validate` (the reports moved to ``reports/``): the same module
object, with a DeprecationWarning; import ``servegym.envs.pd.reports.validate`` instead (this name goes in the next
release)."""

import sys
import warnings

from servegym.envs.pd.reports import validate

warnings.warn("servegym.envs.pd.validate moved to servegym.envs.pd.reports.validate; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = validate
