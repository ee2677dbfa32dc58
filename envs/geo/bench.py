"""Old import path of :mod:`servegym.envs.geo.reports.bench` (the reports moved to ``reports/``): the same module
object, with a DeprecationWarning; import ``servegym.envs.geo.reports.bench`` instead (this name goes in the next release)."""

import sys
import warnings

from servegym.envs.geo.reports import bench

warnings.warn("servegym.envs.geo.bench moved to servegym.envs.geo.reports.bench; import it from there",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = bench
