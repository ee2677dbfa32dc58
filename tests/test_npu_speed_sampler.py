"""The speed benchmark's random driver (benchmarks/npu_env_speed.py, ``MaskedSampler``) draws every dimension's valid
values, and only those, about equally often: its figures are for the env's uniform random policy."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

_SPEC = importlib.util.spec_from_file_location(
    "npu_env_speed", Path(__file__).resolve().parents[1] / "benchmarks" / "npu_env_speed.py")
assert _SPEC is not None and _SPEC.loader is not None
_MOD = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_MOD)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=6), st.integers(0, 2**31 - 1))
def test_masked_sampler_is_uniform_over_the_valid_values(nvec: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    nv = np.array(nvec)
    mask = rng.random(nv.sum()) < 0.6
    for d, start in enumerate(np.concatenate(([0], np.cumsum(nv)[:-1]))):
        mask[start + rng.integers(nv[d])] = True  # every dimension keeps a valid value
    sample = _MOD.MaskedSampler(nv)
    n = 3000
    counts = np.zeros((nv.size, nv.max()))
    for _ in range(n):
        a = sample(rng, mask)
        counts[np.arange(nv.size), a] += 1
    for d, start in enumerate(np.concatenate(([0], np.cumsum(nv)[:-1]))):
        valid = mask[start:start + nv[d]]
        assert counts[d, :nv[d]][~valid].sum() == 0 and counts[d, nv[d]:].sum() == 0
        share = counts[d, :nv[d]][valid] / n
        assert np.all(np.abs(share - 1.0 / valid.sum()) < 0.05)
