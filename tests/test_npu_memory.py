"""NPUAutoscale-v0's per-process caches are bounded (least recently used first out), and an evicted workload
rebuilt later is the same episode (benchmarks/results/npu_memory.md has the memory figures)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.envs.npu import env as npu_env

import servegym  # noqa: F401  (registers the ids)


@settings(max_examples=60, deadline=None)
@given(cap=st.integers(1, 5), keys=st.lists(st.integers(0, 7), max_size=40))
def test_lru_is_bounded_and_drops_the_least_recently_used(cap: int, keys: list[int]) -> None:
    cache = npu_env._LRU(cap)
    model: list[int] = []  # most recent last
    built: list[int] = []
    for k in keys:
        assert cache.get_or_make(k, lambda k=k: built.append(k) or k * 10) == k * 10
        if k in model:
            model.remove(k)
        else:
            assert built[-1] == k  # made only when absent
        model.append(k)
        model = model[-cap:]
        assert list(cache) == model and len(cache) <= cap


def test_caches_have_their_stated_bounds() -> None:
    assert npu_env._CATALOGS.cap == npu_env.CATALOG_CACHE_MAX == 4
    assert npu_env._WORKLOADS.cap == npu_env.WORKLOAD_CACHE_MAX == 2


@pytest.mark.slow
def test_resets_keep_at_most_two_workloads_and_an_evicted_one_replays_identically() -> None:
    env = gym.make("servegym/NPUAutoscale-v0", config={"hours": 1.0})
    first, _ = env.reset(seed=0)
    for seed in (1, 2, 3):
        env.reset(seed=seed)
        assert len(npu_env._WORKLOADS) <= 2 and len(npu_env._CATALOGS) <= 4
    again, _ = env.reset(seed=0)  # its workload was evicted and is built again
    np.testing.assert_array_equal(first, again)
    env.close()


def test_dse_keeps_pareto_fronts_not_every_buckets_step_metrics() -> None:
    """A table keeps at most METRICS_CACHE_MAX step metrics however many buckets are queried; the kept
    fronts equal fronts computed afresh (from metrics that were evicted and rebuilt)."""
    from servegym.envs.npu.sim import dse

    table = dse.run_dse("Llama-3-8B", seq_lens=[512, 1024, 4096, 32768], batches=[1, 4, 16, 64])
    fronts = {(ph, s): table.pareto(ph, s) for ph in ("prefill", "decode") for s in (512, 1024, 4096, 32768)}
    assert len(table._cache) <= dse.METRICS_CACHE_MAX < len(fronts)
    fresh = dse.run_dse("Llama-3-8B", seq_lens=[512, 1024, 4096, 32768], batches=[1, 4, 16, 64])
    for (ph, s), front in fronts.items():
        assert front and front == fresh._front(fresh._key(ph, s), fresh.objective, None)
        assert table.pareto(ph, s) == front  # from the kept fronts


def test_a_reset_lets_the_previous_simulator_go_and_returns_the_freed_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """What kept the resident memory climbing over episodes (benchmarks/results/npu_memory.md): each reset asks
    the allocator to return freed pages (glibc's malloc_trim, a no-op elsewhere), once, and by then the previous
    episode's simulator is no longer referenced, so its arrays are among the freed pages."""
    import gc
    import weakref

    from servegym.memory import release_freed_memory

    assert isinstance(release_freed_memory(), bool)
    previous: list[weakref.ref] = []
    released_after: list[bool] = []

    def trim() -> bool:
        gc.collect()
        released_after.append(all(ref() is None for ref in previous))
        return True

    monkeypatch.setattr(npu_env, "release_freed_memory", trim)
    env = gym.make("servegym/NPUAutoscale-v0", config={"hours": 0.5, "split": None, "rate_rpm": 120.0})
    env.reset(seed=0)
    env.step(env.action_space.sample())
    previous.append(weakref.ref(env.unwrapped.sim))
    env.reset(seed=1)
    assert released_after == [True, True] and env.unwrapped.sim is not None
    env.close()
