"""Old home of ``servegym pd simulate`` and ``servegym pd case-study``: both are in :mod:`servegym.envs.pd.cli`
now (their reports in :mod:`servegym.envs.pd.reports`); this name re-exports :func:`add_sim_commands`, with a
DeprecationWarning, for one release."""

import warnings

from servegym.envs.pd.cli import add_sim_commands

warnings.warn("servegym.envs.pd.sim_cli moved to servegym.envs.pd.cli; import add_sim_commands from there",
              DeprecationWarning, stacklevel=2)

__all__ = ["add_sim_commands"]
