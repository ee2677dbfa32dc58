"""Heterogeneous NPU autoscaling (NeuScale, ``papers/heterogeneous-npu-autoscaling.md``).

* :mod:`~servegym.envs.npu.catalog`: NPU-A/B/C/D (Table 2) with TPU prices, model layer shapes, :class:`VPod`.
* :mod:`~servegym.envs.npu.roofline`: analytical roofline of one serving step, vectorized over
  allocations x batches (replaces the paper's XLA cost-analysis pass and NPU simulator).
* :mod:`~servegym.envs.npu.dse`: the Pareto set and best-fit vPod table per (phase, sequence-length bucket).
"""
