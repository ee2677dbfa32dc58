"""Heterogeneous NPU autoscaling (NeuScale, ``papers/heterogeneous-npu-autoscaling.md``), in three layers.

* :mod:`servegym.envs.npu.sim`: the model -- chips and models, roofline, DSE, workloads and the cluster
  simulator with its decision points; it imports nothing from the layers below.
* The Gymnasium env: :mod:`~servegym.envs.npu.env` (``NPUAutoscaleEnv``), built from
  :mod:`~servegym.envs.npu.env_config` (config), :mod:`~servegym.envs.npu.scenarios` (splits, groups),
  :mod:`~servegym.envs.npu.actions` (one class per action mode), :mod:`~servegym.envs.npu.action_decoding`,
  :mod:`~servegym.envs.npu.observations` and :mod:`~servegym.envs.npu.rewards`.
* Reports and commands: :mod:`~servegym.envs.npu.reports`, :mod:`~servegym.envs.npu.cli`.
"""
