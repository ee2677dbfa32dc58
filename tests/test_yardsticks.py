"""The yardsticks of every env id, checked on real episodes and on the shipped leaderboard (issue 23's
done-when):

* every split of every registered env id has a well-posed scale: one episode of naive, the paper's method
  and the oracle on the leaderboard's own config (shortened), played through the benchmark's own path,
  gives an oracle - naive margin the protocol can scale, on which naive scores 0 and the oracle 100;
* ``benchmarks/results/leaderboard.json`` carries, for every env id, naive, paper, strongest, follow (where
  the id has a residual mode), oracle and the agents, each with its score, KPIs, SLO violation and paired
  verdict against the strongest baseline, with naive at 0 and the oracle at 100.

The three pd ids share one simulator and one scenario draw (they differ only in the action mode, which the
family baselines do not use), so PDProvision-v0 plays every split here and the two other pd ids are checked
to draw the same scenarios; their own full episodes run in the slow suite.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import numpy as np
import pytest
from conftest import REPO_ROOT
from servegym.agents import benchmark as bm
from servegym.agents import protocol
from servegym.agents.families import family_for

import servegym  # noqa: F401  (registers the ids)
from servegym.splits import splits_of

LEADERBOARD = REPO_ROOT / "benchmarks" / "results" / "leaderboard.json"
#: Per family: how the leaderboard's config is shortened for one cheap episode (geo 8 s of arrivals, npu
#: half an hour = 6 epochs; pd keeps its whole day: on 4-h windows of flat load static-peak can be the
#: optimum itself, see test_pd_oracle).
SHORTEN: dict[str, dict[str, Any]] = {"geo": {"geo": {"duration_s": 8.0}}, "npu": {"hours": 0.5}, "pd": {}}
PD_TWINS = ("servegym/PDProvisionResidual-v0", "servegym/PDProvisionFront-v0")


def _quick_kwargs(env_id: str) -> dict[str, Any]:
    """The quick suite's env kwargs of ``env_id``, shortened per family (:data:`SHORTEN`)."""
    entry = next(e for e in bm.SUITE["quick"] if e.env_id == env_id)
    kw = copy.deepcopy(entry.env_kwargs)
    cfg = kw.setdefault("config", {})
    for key, val in SHORTEN[family_for(env_id).name].items():
        cfg[key] = {**cfg.get(key, {}), **val} if isinstance(val, dict) else val
    return kw


def _cases() -> list[Any]:
    out = []
    for env_id in sorted(protocol.YARDSTICKS):
        for split in splits_of(family_for(env_id).name):
            marks = [pytest.mark.slow] if env_id in PD_TWINS else []
            out.append(pytest.param(env_id, split, marks=marks, id=f"{env_id.split('/')[1]}-{split}"))
    return out


@pytest.mark.parametrize("env_id,split", _cases())
def test_every_split_of_every_id_is_well_posed(env_id: str, split: str) -> None:
    """One episode (reset seed 0) of naive, paper and oracle: the oracle - naive margin is one the protocol
    scales (above REFERENCE_GAP_MIN of the returns' size), naive scores 0 and the oracle 100 on it, every
    anchor reports its KPI and SLO violation, and an oracle documented as an optimum or a relaxation is
    not below the paper's method (a relaxation is also free of SLO misses and below naive's KPI)."""
    y = protocol.yardsticks(env_id)
    env = bm.make_split_env(env_id, split, _quick_kwargs(env_id))
    try:
        runs = bm.run_policy_episodes(env_id, env, [y.naive, y.paper, y.oracle], [0])
        kpi = protocol.kpi_metric(env)
    finally:
        env.close()
    n, p, o = (runs[name][0] for name in (y.naive, y.paper, y.oracle))
    assert o.reward - n.reward > protocol.REFERENCE_GAP_MIN * max(abs(o.reward), abs(n.reward), 1e-12)
    scale = protocol.make_scale(env_id, [n], [p], [o])
    assert scale.oracle
    np.testing.assert_allclose(scale.scores([n, o]), [0.0, 100.0], atol=1e-9)
    for res in (n, p, o):
        assert math.isfinite(res.metrics[kpi]) and math.isfinite(res.metrics[protocol.SLO_METRIC])
    if y.oracle_kind in ("optimum", "relaxation"):
        assert o.reward >= p.reward - 1e-9 * max(1.0, abs(p.reward))
    if y.oracle_kind == "relaxation":
        assert o.metrics[protocol.SLO_METRIC] == 0.0 and o.metrics[kpi] < n.metrics[kpi]


@pytest.mark.parametrize("twin", PD_TWINS)
def test_pd_ids_draw_the_same_scenarios(twin: str) -> None:
    """The pd ids other than PDProvision-v0 draw, on every split, the scenario PDProvision-v0 draws (so its
    episodes above are theirs: the family baselines and the oracle do not use the action mode)."""
    for split in splits_of("pd"):
        a = bm.make_split_env("servegym/PDProvision-v0", split, _quick_kwargs("servegym/PDProvision-v0"))
        b = bm.make_split_env(twin, split, _quick_kwargs(twin))
        try:
            for seed in (0, 7):
                assert a.reset(seed=seed)[1]["scenario"] == b.reset(seed=seed)[1]["scenario"], (split, seed)
        finally:
            a.close()
            b.close()


# ------------------------------------------------------------------------------------- leaderboard.json
def _sections() -> dict[tuple[str, str | None], list[dict[str, Any]]]:
    """The leaderboard's rows per section: (env id, stress track or None)."""
    rows = json.loads(LEADERBOARD.read_text())
    out: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault((r["env"], r.get("track") or None), []).append(r)
    return out


def _board() -> dict[str, list[dict[str, Any]]]:
    """The rows of each id's own section (no stress track)."""
    return {env: rows for (env, track), rows in _sections().items() if track is None}


def test_leaderboard_has_a_section_for_every_env_id() -> None:
    assert set(_board()) == set(protocol.YARDSTICKS)


@pytest.mark.parametrize("env_id", sorted(protocol.YARDSTICKS))
def test_leaderboard_carries_every_yardstick_with_score_kpis_slo_and_verdict(env_id: str) -> None:
    """For ``env_id`` on the test split: naive, paper, strongest, follow (residual ids), oracle and at
    least one agent, named as the registry names them; each row with a finite score, its KPIs, its SLO
    violation and (all but the strongest's own row) the paired verdict against the strongest baseline;
    naive 0 and the oracle 100 on every episode; the strongest's row carries the headroom, 100 - its score."""
    _check_section(env_id, _board()[env_id], protocol.yardsticks(env_id))


_TRACK_SECTIONS = sorted(k for k in _sections() if k[1] is not None) if LEADERBOARD.exists() else []


@pytest.mark.parametrize("section", _TRACK_SECTIONS, ids=[f"{e}@{t}" for e, t in _TRACK_SECTIONS])
def test_every_stress_track_section_carries_its_tracks_yardsticks(section: tuple[str, str]) -> None:
    """A stress-track section (``<id>@<track>``) holds the track's own yardsticks
    (:data:`~servegym.agents.protocol.TRACK_YARDSTICKS`: its strongest, causal reference and oracle), with the
    same row checks as an id's own section, and only rows of that track."""
    env_id, track = section
    rows = _sections()[section]
    assert all(r.get("track") == track for r in rows)
    y = protocol.TRACK_YARDSTICKS[(env_id, track)]
    # npu ships no causal rule (benchmarks/stress_tracks.py NO_CAUSAL): its track sections have none
    assert y.causal or env_id.startswith("servegym/NPU"), f"{env_id}@{track}: a track section needs its causal reference"
    _check_section(f"{env_id}@{track}", rows, y)


def _check_section(env_id: str, rows: list[dict[str, Any]], y: Any) -> None:
    by_policy = {r["policy"]: r for r in rows}
    roles = y.roles()
    for role, name in roles.items():
        assert name in by_policy, f"{env_id}: no row for {role} ({name})"
    assert by_policy[y.naive]["role"] == "naive" and by_policy[y.oracle]["role"] == "oracle"
    if y.follow:
        assert by_policy[protocol.FOLLOW]["role"] == "follow"
    assert any(r["role"] == "agent" for r in rows), f"{env_id}: no agent row"
    strongest = [r for r in rows if "headroom" in r]
    assert len(strongest) == 1, f"{env_id}: {len(strongest)} rows carry the headroom"
    s = strongest[0]
    assert s["headroom"] == pytest.approx(100.0 - s["score_mean"], abs=1e-9)
    assert s["headroom_ci"][0] <= s["headroom"] <= s["headroom_ci"][1]
    for r in rows:
        assert r["split"] == "test" and r["episodes"] >= 1
        assert math.isfinite(r["score_mean"]) and len(r["score_ci"]) == 2
        assert r["kpis"] and all(math.isfinite(v) for v in r["kpis"].values())
        assert math.isfinite(r["slo_violation_pct"])
        assert r["scale"].startswith("0 = naive") and f"100 = oracle ({y.oracle}" in r["scale"]
        if r is s:
            assert r["vs_strongest"] is None
            continue
        v = r["vs_strongest"]
        assert v["baseline"] == s["policy"] and v["kpi"] in r["kpis"]
        assert isinstance(v["beats"], bool) and len(v["kpi_diff_ci"]) == 2 and len(v["slo_diff_ci"]) == 2
        assert v["slo_tolerance_pp"] >= 0.0 and v["slo_diff_ci"][0] <= v["slo_diff_pp"] <= v["slo_diff_ci"][1]
        assert v["outcome"] in ("beats", "tie", "worse", "slo", "return", "no-ci") and v["beats"] == (v["outcome"] == "beats")
        assert 0 <= v["seeds_beating"] <= v["seeds"] and len(v["return_diff_ci"]) == 2
    for name, want in ((y.naive, 0.0), (y.oracle, 100.0)):
        r = by_policy[name]
        assert r["score_mean"] == pytest.approx(want, abs=1e-9)
        assert r["score_ci"] == pytest.approx([want, want], abs=1e-9)
    assert s["policy"] == roles["strongest"], (
        f"{env_id}: the row carrying the headroom is {s['policy']!r}, not the registry's strongest "
        f"{roles['strongest']!r}: rebuild the id's rows (servegym benchmark --suite --rescore --fill-baselines)")


def _split_best() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("split_best", REPO_ROOT / "benchmarks" / "split_best.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_split_best_names_the_best_baseline_beside_the_strongest() -> None:
    """benchmarks/split_best.py: the best is the highest mean over the episodes every candidate scored (an
    unscaled episode is left out for all), best - strongest is paired, tied leaders are named together, and
    the table says on which splits the strongest is not the best."""
    sb = _split_best()
    scores = {"a": {0: 90.0, 1: 80.0, 2: math.nan}, "b": {0: 95.0, 1: 85.0, 2: 0.0}, "c": {0: 95.0, 1: 85.0, 2: 1.0}}
    r = sb.best_baseline(scores, "a")
    assert r["episodes"] == 2 and r["best"] == "b" and r["best_score"] == pytest.approx(90.0)
    assert r["best_minus_strongest"] == pytest.approx(5.0) and r["best_minus_strongest_ci"] == pytest.approx([5.0, 5.0])
    assert r["headroom_over_best"] == pytest.approx(10.0)
    text = "\n".join(sb.markdown([("test", r), ("shift", sb.best_baseline(scores, "b"))], "servegym/X-v0"))
    assert "| test | `a` 85.0 | `b` = `c` 90.0" in text
    assert "not the best baseline on: test (`b` = `c`)." in text
    with pytest.raises(KeyError):
        sb.best_baseline(scores, "z")
