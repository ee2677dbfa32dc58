"""Old module of ``servegym bench speed geo``, now in :mod:`servegym.envs.geo.cli` (the geo family's one
command-line module); its names are re-exported with a DeprecationWarning (this module goes in the next release)."""

import warnings

from servegym.envs.geo.cli import _bench_geo  # noqa: F401 (re-exported)
from servegym.envs.geo.cli import add_bench_commands as add_commands  # noqa: F401

warnings.warn("servegym.envs.geo.bench_cli moved into servegym.envs.geo.cli; import it from there",
              DeprecationWarning, stacklevel=2)
