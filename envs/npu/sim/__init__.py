"""The NPU autoscaling model (NeuScale, ``papers/heterogeneous-npu-autoscaling.md``), below the env layer.

Nothing here imports from the Gymnasium envs, the reports or the CLI (``tests/test_layout.py``).

* :mod:`~servegym.envs.npu.sim.catalog`: NPU-A/B/C/D (Table 2) with TPU prices, model layer shapes, :class:`VPod`.
* :mod:`~servegym.envs.npu.sim.roofline`: analytical roofline of one serving step (collectives included),
  vectorized over allocations x batches (replaces the paper's XLA cost-analysis pass and NPU simulator).
* :mod:`~servegym.envs.npu.sim.dse`: the Pareto set and best-fit vPod table per (phase, sequence-length bucket).
* :mod:`~servegym.envs.npu.sim.selection`: best fits at the operating point (the batch a group runs at).
* :mod:`~servegym.envs.npu.sim.workloads`, :mod:`~servegym.envs.npu.sim.azure2024`: the request traces.
* :mod:`~servegym.envs.npu.sim.cluster`: the simulator with decision points (:class:`NPUCluster`), built
  from :mod:`~.config` (settings, Table 3), :mod:`~.records` (decision, observation, metrics),
  :mod:`~.vpods` (configurations and step tables), :mod:`~.routing`, :mod:`~.serving` and :mod:`~.accounting`.
* :mod:`~servegym.envs.npu.sim.state`: the env's episode state (:class:`~.state.NPUState`, its group layout) and the
  decision an action type decodes (:class:`~.state.NPUDecision`), applied by :func:`~.state.apply_decision`.
"""
