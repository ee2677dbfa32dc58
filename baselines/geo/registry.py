"""Geo policies by spec string: ``make_policy("greedy:0.5")``.

Specs (``POLICY_SPECS``): ``rr``, ``ll``, ``greedy:<alpha>`` (alpha in [0, 1]), ``moer``, ``ilp``,
``iter-ilp``, ``milp``, ``green-llm``. A window scheduler (``ilp``, ``iter-ilp``, ``milp``) may add
``@measured`` to charge its measured solve time instead of the fitted model
(:mod:`~servegym.baselines.geo.timing`), e.g. ``milp@measured``.

Every policy has ``decision_mode``: ``"window"`` for the ILP/MILP schedulers (run them with
``GeoConfig(decision_mode="window")``), ``"request"`` for the others; :func:`policy_config`
applies it to a config.
"""

from __future__ import annotations

from typing import Any

from servegym.baselines.geo.carbon_blind import LeastLoaded, RoundRobin
from servegym.baselines.geo.greedy import MOER, Greedy
from servegym.baselines.geo.green_llm import GreenLLM
from servegym.baselines.geo.ilp import IterativeILP, StandardILP
from servegym.baselines.geo.milp import FacilityMILP

from servegym.errors import ConfigError

#: The accepted spec forms (``<alpha>`` a number in [0, 1]; ``@measured`` only on window policies).
POLICY_SPECS: tuple[str, ...] = ("rr", "ll", "greedy:<alpha>", "moer", "ilp", "iter-ilp", "milp", "green-llm")
WINDOW_POLICIES = ("ilp", "iter-ilp", "milp")
#: The paper's Fig. 4a set, in plotting order.
PAPER_POLICIES: tuple[str, ...] = ("rr", "ll", "greedy:0", "greedy:0.5", "greedy:0.9", "ilp", "iter-ilp", "milp",
                                   "green-llm", "moer")

_WINDOW = {"ilp": StandardILP, "iter-ilp": IterativeILP, "milp": FacilityMILP}
_SIMPLE = {"rr": RoundRobin, "ll": LeastLoaded, "moer": MOER, "green-llm": GreenLLM}


def _bad(spec: Any, why: str = "") -> ConfigError:
    extra = f" ({why})" if why else ""
    return ConfigError(f"policy spec {spec!r} is not allowed{extra}; allowed: {list(POLICY_SPECS)}, "
                       f"and '@measured' after {list(WINDOW_POLICIES)}")


def make_policy(spec: str) -> Any:
    """A fresh policy (a ``GeoPolicy``) for ``spec``; :class:`ConfigError` lists the allowed specs."""
    if not isinstance(spec, str):
        raise _bad(spec)
    s = spec.strip().lower()
    timing = "modelled"
    if s.endswith("@measured"):
        s = s[: -len("@measured")]
        if s not in _WINDOW:
            raise _bad(spec, "'@measured' applies to window schedulers only")
        timing = "measured"
    if s in _WINDOW:
        return _WINDOW[s](timing=timing)
    if s in _SIMPLE:
        pol = _SIMPLE[s]()
        if not hasattr(pol, "decision_mode"):
            pol.decision_mode = "request"
        return pol
    if s.startswith("greedy:"):
        try:
            alpha = float(s.split(":", 1)[1])
        except ValueError as exc:
            raise _bad(spec, "alpha must be a number in [0, 1]") from exc
        if not 0.0 <= alpha <= 1.0:
            raise _bad(spec, "alpha must be in [0, 1]")
        return Greedy(alpha)
    raise _bad(spec)


def policy_config(config: Any, policy: Any) -> Any:
    """``config`` (a ``GeoConfig``) with ``decision_mode`` set to what ``policy`` decides on."""
    mode = getattr(policy, "decision_mode", "request")
    return config if config.decision_mode == mode else config.replace(decision_mode=mode)
