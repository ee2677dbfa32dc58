"""The pd model: capacity, power, fronts, the day's signals, both dynamics and the decision rule, importing
nothing from the envs, reports or CLI.

``catalog`` (hardware, model, calibration and serving constants), ``workload_moments`` (length moments),
``model`` (:class:`~servegym.envs.pd.sim.model.PDModel`: capacity by Algorithm 1, operating points, power),
``pareto`` (fronts and picks), ``tables`` (per-mix capacity tables of a day), ``scenario`` (the day: rates,
length mix, carbon, cap, price; splits), ``provisioning`` (:class:`~servegym.envs.pd.sim.provisioning.MinPowerRule`,
the decision rule the baselines play and the envs act around), ``fluid`` (one fluid period of one or many env
states) and ``simulator`` (:class:`~servegym.envs.pd.sim.simulator.PDSimulator`, request by request).
"""
