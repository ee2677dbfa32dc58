"""Power-aware provisioning of prefill-decode (PD) disaggregated serving (Yan et al., arXiv:2609.24639).

Modules (import them directly; this package imports nothing so ``import servegym`` stays light):

* :mod:`servegym.envs.pd.sim.catalog`: H200, Qwen3-32B, Table 3 calibration, KV pool C_tok fitted to 3p1d = 5.2 req/s (R = 512).
* :mod:`servegym.envs.pd.sim.workload_moments`: length moments from samples, distributions or trace names.
* :mod:`servegym.envs.pd.sim.model`: :class:`~servegym.envs.pd.sim.model.PDModel` -- capacity (Algorithm 1),
  operating points and power, scalar (brentq) and vectorized over deployments.
* :mod:`servegym.envs.pd.sim.pareto`: exact and epsilon-Pareto fronts, minimum-power and maximum-capacity picks.
* :mod:`servegym.envs.pd.validate`: model-versus-paper checks (``servegym pd validate``).
* :mod:`servegym.envs.pd.cli`: the ``servegym pd`` commands.
"""

#: the workload names ``parse_workload`` accepts (here so the ``servegym pd`` parsers need not import numpy)
WORKLOAD_SPECS = "fixed:IN:OUT, azure-conv, azure-code, mooncake"
