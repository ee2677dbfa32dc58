"""NeuScale's compiled grouping (servegym.baselines.npu_grouping) equals the Python method bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from servegym.baselines.npu import NeuScalePolicy
from servegym.baselines.npu_grouping import _searchsorted_left
from servegym.envs.npu.sim.cluster import NB, ClusterConfig, ConfigCatalog, NPUCluster, Observation
from servegym.envs.npu.sim.workloads import make_workload

MODEL = "Llama-3-8B"


@pytest.fixture(scope="module")
def scenario() -> tuple[ConfigCatalog, object]:
    """The catalog of MODEL and half an hour of Azure at 600 requests/min."""
    return ConfigCatalog(ClusterConfig(model=MODEL, n_candidates=1)), make_workload("azure", hours=0.5, seed=2,
                                                                                      rate_rpm=600)


def _ctx(sim: NPUCluster, rng: np.random.Generator, bins: bool) -> tuple[Observation, np.ndarray]:
    """An epoch-boundary observation with random sparse demand: tokens per request, EWMA signal and bins."""
    base = sim.observe()
    tpr = np.zeros((2, NB))
    sig = np.zeros((2, NB))
    for p in (0, 1):
        live = rng.random(NB) < rng.uniform(0.1, 0.9)
        tpr[p, live] = sim.edges[live] * rng.uniform(0.3, 1.0, int(live.sum()))
        sig[p, live] = 10.0 ** rng.uniform(-4, 1.5, int(live.sum()))
        sig[p, rng.random(NB) < 0.1] = 0.0  # tokens but no rate: not live
    token_bins = None
    if bins:
        token_bins = rng.random((30, 2, NB)) * tpr[None] * 10.0 * (rng.random((30, 2, NB)) < 0.6)
    fields = dict(base.__dict__, at_epoch_boundary=True, tokens_per_req=tpr, rate_peak=sig.copy(),
                  epoch_peak=sig.copy(), epoch_token_bins=token_bins)
    return Observation(**fields), sig


@pytest.mark.parametrize("settings", [
    {},
    {"slo_aware_merge": False},
    {"coalescing": False},
    {"coalesce_below": 3.0},
    {"fit_at": "operating"},
    {"fit_at": "operating", "fit_aware_merge": False, "coalesce_below": 2.0},
    {"objective": "cost", "fit_at": "operating"},
])
def test_compiled_groups_equal_the_python_method(scenario, settings: dict) -> None:
    cat, wl = scenario
    kw = {k: settings[k] for k in ("fit_at", "objective") if k in settings}
    cfg = ClusterConfig(model=MODEL, n_candidates=1, **kw)
    if "objective" in kw:  # its own DSE tables (cached on disk)
        own = ConfigCatalog(cfg)
    else:
        own = ConfigCatalog(cfg, table=cat.table, scoring_table=cat.scoring_table) if kw else cat
    sim = NPUCluster(cfg, wl, seed=0, catalog=own)
    pol = NeuScalePolicy(**{k: v for k, v in settings.items() if k not in kw})
    pol.reset(sim)
    rng = np.random.default_rng(len(str(settings)))
    merges = 0
    for t in range(120):
        ctx, sig = _ctx(sim, rng, bins=t % 5 != 0)
        if t % 3 == 0:  # earlier groups: the operating fit keeps a group whose allocation it already holds
            pol.decide(ctx)
        for p in (0, 1):
            n0 = len(pol.merged)
            fast = pol._groups_compiled(ctx, p, sig)
            assert fast is not None
            got_merged = pol.merged[n0:]
            del pol.merged[n0:]
            want = pol._groups_py(ctx, p, sig)
            assert pol.merged[n0:] == got_merged
            merges += len(got_merged)
            assert fast == want
            assert [type(x) for g in fast for x in g] == [type(x) for g in want for x in g]
    if settings.get("coalescing", True):
        assert merges > 0  # the cascade ran


def test_max_groups_runs_the_python_method(scenario) -> None:
    cat, wl = scenario
    pol = NeuScalePolicy(max_groups=2)
    pol.reset(NPUCluster(ClusterConfig(model=MODEL, n_candidates=1), wl, seed=0, catalog=cat))
    ctx, sig = _ctx(pol.sim, np.random.default_rng(0), bins=True)
    assert pol._groups_compiled(ctx, 1, sig) is None
    assert len(pol.groups(ctx, 1, sig)) <= 2


def test_searchsorted_is_numpys_for_any_row() -> None:
    rng = np.random.default_rng(3)
    for _ in range(2000):
        a = rng.standard_normal(int(rng.integers(0, 12)))
        if rng.random() < 0.5:
            a.sort()
        if a.size and rng.random() < 0.2:
            a[rng.integers(a.size)] = np.nan
        v = rng.choice([*a.tolist(), float(rng.standard_normal()), np.nan, np.inf]) if a.size else 0.5
        assert _searchsorted_left(a, float(v)) == int(np.searchsorted(a, v)), (a, v)
