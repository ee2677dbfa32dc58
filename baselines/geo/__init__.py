"""Geo scheduling policies on the decision API of ``servegym.envs.geo`` (§IV, §V-A of the geo paper):
carbon-blind RR/LL, carbon-weighted greedy and MOER, the standard and iterative ILP, the facility
MILP, and Green-LLM. Build them by spec with :func:`make_policy`."""

from __future__ import annotations

from servegym.baselines.geo.carbon_blind import LeastLoaded, RoundRobin
from servegym.baselines.geo.greedy import MOER, Greedy
from servegym.baselines.geo.green_llm import GreenLLM
from servegym.baselines.geo.ilp import IterativeILP, StandardILP, WindowPolicy
from servegym.baselines.geo.milp import FacilityMILP
from servegym.baselines.geo.registry import PAPER_POLICIES, POLICY_SPECS, make_policy, policy_config

__all__ = [
    "MOER",
    "PAPER_POLICIES",
    "POLICY_SPECS",
    "FacilityMILP",
    "Greedy",
    "GreenLLM",
    "IterativeILP",
    "LeastLoaded",
    "RoundRobin",
    "StandardILP",
    "WindowPolicy",
    "make_policy",
    "policy_config",
]
