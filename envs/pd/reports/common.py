"""Helpers the pd reports share: the serving system of the ``--kv-tokens`` / ``--reserve`` options and a
JSON-safe copy of a result."""

from __future__ import annotations

from typing import Any


def serving_system(kv_tokens: str | float | None, reserve: float | None) -> Any:
    """The paper's system with ``kv_tokens`` (a number or a named reading) and ``reserve`` applied."""
    from servegym.envs.pd.sim.catalog import kv_tokens_reading, paper_system

    return paper_system().with_serving(kv_tokens=kv_tokens_reading(kv_tokens), reserve_tokens=reserve)


def finite(obj: Any) -> Any:
    """JSON-safe copy: non-finite floats (an unbounded model wait, a phase with no requests) become null."""
    import numpy as np  # imported here: the CLI's parsers import nothing heavy (--help stays light)

    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if np.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj
