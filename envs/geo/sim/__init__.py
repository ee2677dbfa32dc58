"""The geo model: the serving simulator and its decision points, importing nothing from the envs, reports or CLI.

``config`` (scenarios, presets), ``profile`` (engine profiles), ``engine`` and ``engine_kernels`` (continuous
batching, numba), ``provisioner`` (snapshots), ``estimator`` (the schedulers' TTFT/TPOT/carbon estimates),
``osl`` (output-length predictor), ``decisions`` (the decision contexts baselines and envs both answer),
``metrics`` (run summaries) and ``cluster`` (:class:`~servegym.envs.geo.sim.cluster.GeoSimulation`, the loop).
"""
