"""``servegym npu validate``: each point's rule judges known sweeps right, and the command runs end to end."""

from __future__ import annotations

import json

import pytest
from servegym.envs.npu.reports.validate import fig16_points, fig20_points, fig25_points, fig28_points

from servegym.cli import main


def _sweep16(capacity: float, tpot_at_16: float = 0.05) -> list[dict]:
    """A Figure 16 sweep of a cluster whose prefill serves at most ``capacity`` req/s: throughput follows the offered
    rate up to it, TTFT explodes past it, decode follows prefill."""
    rows = []
    for rate in (1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0):
        thr = min(rate, capacity)
        rows.append({"rate_rps": rate, "prefill_rps": thr, "decode_rps": thr,
                     "ttft_p50_s": 0.3 if rate <= capacity else 600.0,
                     "tpot_p50_s": tpot_at_16 if rate == 16.0 else 0.05})
    return rows


def _by_name(points: list) -> dict:
    return {p.name: p for p in points}


def test_fig16_holds_for_a_cluster_saturating_at_8_and_misses_at_30() -> None:
    ok = _by_name(fig16_points(_sweep16(8.0)))
    assert ok["prefill saturation rate"].holds and ok["prefill saturation rate"].ours == 8.0
    assert ok["TTFT increase above saturation"].holds  # 0.3 s -> 600 s at 12 req/s
    assert ok["decode throughput at 16 req/s"].holds and ok["decode throughput at 16 req/s"].ours == 0.5
    assert ok["TPOT at 16 req/s over the lowest rate's"].holds
    far = _by_name(fig16_points(_sweep16(30.0, tpot_at_16=0.2)))
    assert far["prefill saturation rate"].holds is False
    assert far["decode throughput at 16 req/s"].holds is False  # nothing drops at 16 req/s
    assert far["TPOT at 16 req/s over the lowest rate's"].holds is False  # 4x the low-rate TPOT


def test_fig16_decode_drop_must_come_from_prefill() -> None:
    """A decode pool that cannot serve at all "drops" too, but not because of prefill: that is a miss."""
    rows = _sweep16(8.0)
    for r in rows:
        r["decode_rps"] = 0.0
    assert _by_name(fig16_points(rows))["decode throughput at 16 req/s"].holds is False


def test_fig20_needs_several_vpods_in_both_busiest_decode_groups() -> None:
    groups = [{"edge": 4096, "tokens": 9.0, "vpods_max": 3}, {"edge": 2048, "tokens": 8.0, "vpods_max": 2},
              {"edge": 128, "tokens": 1.0, "vpods_max": 1}]
    assert fig20_points({"decode_groups": groups})[0].holds
    groups[1]["vpods_max"] = 1
    assert fig20_points({"decode_groups": groups})[0].holds is False


def _quota_row(quota: dict | None, held: dict, sat: float, eff: float = 5.0) -> dict:
    return {"quota": quota, "held": held, "satisfaction_prefill": sat, "satisfaction_decode": min(1.0, sat + 0.1),
            "energy_efficiency_prefill": eff, "energy_efficiency_decode": 0.1}


def test_fig25_collapse_needs_a_binding_quota_and_a_falling_satisfaction() -> None:
    tight = {"NPU-C": 256, "NPU-D": 512}
    rows = [_quota_row(None, {"NPU-C": 900, "NPU-D": 1500}, 0.99),
            _quota_row({"NPU-C": 512, "NPU-D": 1024}, {"NPU-C": 512, "NPU-D": 1024}, 0.7),
            _quota_row(tight, {"NPU-C": 256, "NPU-D": 512}, 0.2, eff=4.0)]
    pts = _by_name(fig25_points({"quotas": rows}))
    assert pts["quota binds at C:256/D:512"].holds
    assert pts["lower of prefill/decode SLO satisfaction at C:256/D:512"].holds
    assert pts["prefill energy efficiency, unlimited over C:256/D:512"].ours == pytest.approx(1.25)
    rows[-1] = _quota_row(tight, {"NPU-C": 128, "NPU-D": 192}, 0.99)  # never binds: nothing collapses
    pts = _by_name(fig25_points({"quotas": rows}))
    assert pts["quota binds at C:256/D:512"].holds is False
    assert pts["lower of prefill/decode SLO satisfaction at C:256/D:512"].holds is False


def _fo_row(rate: float, policy: str, held: dict, viol: float, dec_eff: float, on_d: float = 1.0) -> dict:
    return {"rate_rpm": rate, "policy": policy, "held": held, "slo_violation_pct": viol,
            "cost_efficiency_decode": dec_eff, "best_fit_on_d": {"prefill": 1.0, "decode": on_d}}


def test_fig28_fail_over_pattern() -> None:
    rows = [_fo_row(60.0, "base", {"NPU-A": 0, "NPU-B": 0, "NPU-D": 16}, 0.5, 100.0),
            _fo_row(60.0, "neuscale", {"NPU-A": 0, "NPU-B": 0, "NPU-D": 16}, 0.5, 108.0),
            _fo_row(960.0, "base", {"NPU-A": 0, "NPU-B": 0, "NPU-D": 64}, 30.0, 200.0),
            _fo_row(960.0, "neuscale", {"NPU-A": 16, "NPU-B": 32, "NPU-D": 64}, 2.0, 190.0)]
    pts = fig28_points(rows)
    assert all(p.holds for p in pts), [(p.name, p.ours) for p in pts]
    assert pts[-1].ours == pytest.approx(0.08)
    # decode's best fit on NPU-B from the start: the A/B chips are not a fail-over, and the premise misses
    rows[1] = _fo_row(60.0, "neuscale", {"NPU-A": 0, "NPU-B": 16, "NPU-D": 2}, 0.5, 108.0, on_d=0.4)
    by = _by_name(fig28_points(rows))
    assert by["share of tokens whose cost best fit is NPU-D (the lower phase)"].holds is False
    assert by["NeuScale's NPU-A + NPU-B chips at 16x (at 1x)"].holds is False


def test_validate_refuses_bad_hours_before_running(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["npu", "validate", "--hours", "100"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "--hours" in err[0]


@pytest.mark.slow
def test_validate_quick_reports_every_figure(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["npu", "validate", "--quick", "--json"])
    assert rc in (0, 1)  # 1: some point misses (reported, not tuned away)
    pts = json.loads(capsys.readouterr().out)
    assert {p["figure"] for p in pts} == {"Figure 16", "Figure 20", "Figure 25", "Figure 28"}
    assert rc == (1 if any(p["holds"] is False for p in pts) else 0)
    sweep = pts[0]["detail"]["sweep"]
    assert [r["rate_rps"] for r in sweep] == [2.0, 8.0, 16.0, 32.0]
    assert all(r["held"]["NPU-D"] <= 64 and r["held"]["NPU-A"] <= 32 for r in sweep)  # the prototype's quotas
