"""Geo policies by spec string: ``make_policy("greedy:0.5")``.

Specs (``POLICY_SPECS``): ``rr``, ``ll``, ``greedy:<alpha>`` (alpha in [0, 1]), ``moer``, ``ilp``,
``iter-ilp``, ``milp``, ``green-llm``, and the hindsight references of :mod:`~servegym.baselines.geo.oracle`:
``oracle`` (the per-episode best of the hindsight candidates; it plays whole scenarios itself, see
``HindsightOracle.play``) and ``hindsight-milp:<scale>[:<passes>[:stall]]`` (the rolling hindsight MILP with headroom
scale in (0, 100], 1-10 solves per interval, ``stall`` for its cautious projection; it plays the scenario with true output lengths and fresh snapshots, ``policy.scenario``). A window scheduler (``ilp``, ``iter-ilp``, ``milp``) may add
``@measured`` to charge its measured solve time instead of the fitted model
(:mod:`~servegym.baselines.geo.timing`), e.g. ``milp@measured``.

Causal references (:mod:`~servegym.baselines.geo.causal`): any spec above but the hindsight ones, followed by
``+dr[:<k>]`` (dead reckoning of the stale snapshot from the policy's own routings, lifetime ``k`` in mean decode
times) and/or ``+bc`` (OSL estimates bias-corrected from the requests that finished), e.g. ``iter-ilp+dr:1.5``,
``green-llm+bc``, ``milp+dr+bc``.

Every policy has ``decision_mode``: ``"window"`` for the ILP/MILP schedulers (run them with
``GeoConfig(decision_mode="window")``), ``"request"`` for the others; :func:`policy_config`
applies it to a config.
"""

from __future__ import annotations

from typing import Any

from servegym.baselines.geo.carbon_blind import LeastLoaded, RoundRobin
from servegym.baselines.geo.causal import CausalPolicy, parse_causal
from servegym.baselines.geo.greedy import MOER, Greedy
from servegym.baselines.geo.green_llm import GreenLLM
from servegym.baselines.geo.ilp import IterativeILP, StandardILP
from servegym.baselines.geo.milp import FacilityMILP
from servegym.baselines.geo.oracle import ORACLE_PASSES, HindsightMILP, HindsightOracle

from servegym.errors import ConfigError

#: The accepted spec forms (``<alpha>`` a number in [0, 1]; ``@measured`` only on window policies).
POLICY_SPECS: tuple[str, ...] = ("rr", "ll", "greedy:<alpha>", "moer", "ilp", "iter-ilp", "milp", "green-llm",
                                 "oracle", "hindsight-milp:<scale>[:<passes>[:stall]]", "<rule>+dr[:<k>]", "<rule>+bc")
WINDOW_POLICIES = ("ilp", "iter-ilp", "milp")
#: The paper's Fig. 4a set, in plotting order.
PAPER_POLICIES: tuple[str, ...] = ("rr", "ll", "greedy:0", "greedy:0.5", "greedy:0.9", "ilp", "iter-ilp", "milp",
                                   "green-llm", "moer")

_WINDOW = {"ilp": StandardILP, "iter-ilp": IterativeILP, "milp": FacilityMILP}
_SIMPLE = {"rr": RoundRobin, "ll": LeastLoaded, "moer": MOER, "green-llm": GreenLLM}


def _bad(spec: Any, why: str = "") -> ConfigError:
    from servegym.errors import listing, near_miss

    extra = f" ({why})" if why else near_miss(spec, [*POLICY_SPECS, *(f"{w}@measured" for w in WINDOW_POLICIES)])
    return ConfigError(f"policy spec {spec!r} is not allowed{extra}; allowed: {listing(POLICY_SPECS)}, "
                       f"and '@measured' after {listing(WINDOW_POLICIES)}")


def make_policy(spec: str) -> Any:
    """A fresh policy (a ``GeoPolicy``) for ``spec``; :class:`ConfigError` lists the allowed specs."""
    if not isinstance(spec, str):
        raise _bad(spec)
    s = spec.strip().lower()
    causal = parse_causal(s)
    if causal is not None:
        base, lifetime, bc = causal
        if base in ("oracle",) or base.startswith("hindsight-milp"):
            raise _bad(spec, "a causal suffix applies to the causal rules, not to a hindsight reference")
        return CausalPolicy(make_policy(base), s, lifetime, bc)
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
    if s == "oracle":
        return HindsightOracle()
    if s.startswith("hindsight-milp:"):
        parts = s.split(":")[1:]
        stall = len(parts) == 3 and parts[2] == "stall"
        try:
            scale = float(parts[0])
            passes = int(parts[1]) if len(parts) >= 2 else ORACLE_PASSES
        except ValueError as exc:
            raise _bad(spec, "scale must be a number in (0, 100], passes an integer in [1, 10]") from exc
        if len(parts) > 2 + stall or not 0.0 < scale <= 100.0 or not 1 <= passes <= 10:
            raise _bad(spec, "hindsight-milp:<scale>[:<passes>[:stall]], scale in (0, 100], passes in [1, 10]")
        return HindsightMILP(scale, passes=passes, stall=stall)
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
    """``config`` (a ``GeoConfig``) with ``decision_mode`` set to what ``policy`` decides on, as the
    policy plays it (a hindsight policy's ``scenario(config)``: true output lengths, fresh snapshots)."""
    view = getattr(policy, "scenario", None)
    if callable(view):
        config = view(config)
    mode = getattr(policy, "decision_mode", "request")
    return config if config.decision_mode == mode else config.replace(decision_mode=mode)
