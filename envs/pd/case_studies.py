"""Old import path of :mod:`servegym.envs.pd.reports.case_studies` (the reports moved to ``reports/``): the same module
object, with a DeprecationWarning; import ``servegym.envs.pd.reports.case_studies`` instead (this name goes in the next
release)."""

import sys
import warnings

from servegym.envs.pd.reports import case_studies

warnings.warn("servegym.envs.pd.case_studies moved to servegym.envs.pd.reports.case_studies; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = case_studies
