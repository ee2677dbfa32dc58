"""Power-aware provisioning of prefill-decode (PD) disaggregated serving (Yan et al., arXiv:2609.24639), in
three layers (import the modules directly; this package imports nothing so ``import servegym`` stays light).

* :mod:`servegym.envs.pd.sim`: the model -- ``catalog`` (H200, Qwen3-32B, Table 3 calibration, the fitted
  KV pool), ``workload_moments``, ``model`` (:class:`~servegym.envs.pd.sim.model.PDModel`: capacity by
  Algorithm 1, operating points, power), ``pareto``, ``tables``, ``scenario`` (the day and its splits),
  ``provisioning`` (the min-power rule, the decision point baselines and envs share), ``fluid`` and
  ``simulator`` (the two dynamics) and ``saturation``; it imports nothing from the layers below.
* The Gymnasium env: :mod:`~servegym.envs.pd.env` (``PDProvisionEnv``, the three registered ids), built from
  :mod:`~servegym.envs.pd.env_config`, :mod:`~servegym.envs.pd.actions` (one class per action mode),
  :mod:`~servegym.envs.pd.dynamics` (fluid or request-level periods), :mod:`~servegym.envs.pd.observations` and
  :mod:`~servegym.envs.pd.rewards`; :mod:`~servegym.envs.pd.vector` (N days in one numpy batch) and
  :mod:`~servegym.envs.pd.sb3_vector`.
* Reports and commands: :mod:`servegym.envs.pd.reports` (capacity, plots, validate, simulate, case_studies,
  compare) and :mod:`~servegym.envs.pd.cli` (``servegym pd ...``, parsing only).
"""

#: the workload names ``parse_workload`` accepts (here so the ``servegym pd`` parsers need not import numpy)
WORKLOAD_SPECS = "fixed:IN:OUT, azure-conv, azure-code, mooncake"
