"""Old module of ``servegym geo compare``, now in :mod:`servegym.envs.geo.cli` (the geo family's one command-line
module); its names are re-exported with a DeprecationWarning (this module goes in the next release)."""

import warnings

from servegym.envs.geo.cli import (  # noqa: F401 (re-exported)
    DEFAULT_OUT_DIR,
    DEFAULT_POLICIES,
    DEFAULT_PRESET,
    DEFAULT_SIM_SECONDS,
    MAX_SEEDS,
    _compare,
)
from servegym.envs.geo.cli import _add_compare as add_geo_commands  # noqa: F401

warnings.warn("servegym.envs.geo.compare_cli moved into servegym.envs.geo.cli; import it from there",
              DeprecationWarning, stacklevel=2)
