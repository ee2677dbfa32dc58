"""The npu family's reports: ``compare`` (Base, NeuScale and the Ideal oracle on one replay: the table, the
explanations and the verdict), ``dse`` (the best-fit table and the chip/model catalog), ``plots`` (the best-fit
picture) and ``fluid_check`` (the fluid simulator against the request-level one); ``servegym.envs.npu.cli``
parses the command line and calls them."""
