"""The pd family's reports: ``capacity`` (capacity and power of a deployment, the epsilon-Pareto front),
``plots`` (the capacity-power plane), ``validate`` (the model vs the paper's anchors), ``simulate`` (the
request-level simulator beside the model), ``case_studies`` (§5.3 / App. D replays) and ``compare`` (the
baselines on one day); ``servegym.envs.pd.cli`` parses the command line and calls them."""
