"""Old import path of :mod:`servegym.envs.npu.sim.cluster` (the model moved to ``sim/``): the same module object."""

import sys

from servegym.envs.npu.sim import cluster

sys.modules[__name__] = cluster
