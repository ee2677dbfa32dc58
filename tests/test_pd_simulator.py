"""Request-level PD simulator: conservation, KV bounds, start-up delay, requeueing, determinism, errors,
agreement with the analytical model (slow), and the direction of the §5.3 case studies."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.envs.pd.sim.catalog import paper_system
from servegym.envs.pd.sim.model import PDModel
from servegym.envs.pd.sim.saturation import saturation_throughput
from servegym.envs.pd.sim.simulator import PDSimulator, pd_length_sampler
from servegym.envs.pd.sim.workload_moments import WorkloadMoments, parse_workload
from servegym.envs.workload import FixedLengths, Requests, make_requests, poisson_arrivals

from servegym.errors import ConfigError

FIXED = PDModel(WorkloadMoments.fixed(4096, 256))
# A small decode pool (20k slots) so that blocking, head-of-line waits and retractions all happen.
SMALL = PDModel(WorkloadMoments.fixed(1500, 300), paper_system().with_serving(kv_tokens=20_000, reserve_tokens=512))


def _stream(rate: float, duration: float, seed: int, isl: int = 4096, osl: int = 256) -> Requests:
    rng = np.random.default_rng(seed)
    return make_requests(poisson_arrivals(rate, duration, rng), FixedLengths(isl, osl), rng)


def _check_invariants(sim: PDSimulator) -> None:
    c = sim.counters()
    assert c["arrived"] == c["finished"] + c["in_prefill_queue"] + c["in_decode"]
    assert min(c["in_prefill_queue"], c["in_decode"]) >= 0
    # The same counts, recomputed independently from the per-request states.
    states = sim.request_table()["state"]
    assert c["arrived"] == int(np.count_nonzero(states != 0))
    assert c["finished"] == int(np.count_nonzero(states == 4))
    assert c["in_decode"] == int(np.count_nonzero(states == 3))
    for kv in sim.kv_state():
        assert 0 <= kv["physical"] <= sim.c_tok
        assert 0 <= kv["committed"] <= sim.c_tok  # reservations l_in + R taken at admission


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(0, 60),
    seed=st.integers(0, 2**16),
    n_p=st.integers(1, 3),
    n_d=st.integers(1, 3),
    changes=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), max_size=3),
)
def test_conservation_and_kv_bounds(n: int, seed: int, n_p: int, n_d: int, changes: list[tuple[int, int]]) -> None:
    rng = np.random.default_rng(seed)
    arrivals = np.sort(rng.uniform(0, 20, n))
    isl = rng.integers(1, 6_000, n)
    osl = rng.integers(1, 1_500, n)  # outputs above R + 1 make contexts outgrow their reservations
    sim = PDSimulator(SMALL, n_p, n_d, startup_delay_s=2.0)
    sim.submit(Requests(arrivals, isl, osl))
    t = 0.0
    for i, (p, d) in enumerate(changes):
        t += 3.0 + i
        sim.advance(t)
        _check_invariants(sim)
        sim.set_deployment(p, d)
        _check_invariants(sim)
    for t_end in (t + 5, t + 30, t + 2_000):
        sim.advance(t_end)
        _check_invariants(sim)
    assert sim.counters()["finished"] == n  # nothing is lost by blocking, retraction or removal
    tab = sim.request_table()
    assert np.all(tab["first_token_s"] >= tab["arrival_s"])
    assert np.all(tab["finish_s"] >= tab["first_token_s"])


def test_retraction_happens_and_completes() -> None:
    rng = np.random.default_rng(3)
    n = 80
    reqs = Requests(np.sort(rng.uniform(0, 5, n)), np.full(n, 1_000), np.full(n, 3_000))
    sim = PDSimulator(SMALL, 2, 1)
    sim.submit(reqs)
    for t in np.arange(1, 3_000, 7.0):
        sim.advance(float(t))
        _check_invariants(sim)
    assert sim.retractions > 0
    assert sim.counters()["finished"] == n


def test_decode_iterations_follow_the_model() -> None:
    """One request alone: TTFT is its prefill time, TPOT the single-request iteration time of the model."""
    sim = PDSimulator(FIXED, 1, 1)
    sim.submit(Requests(np.array([0.5]), np.array([4096]), np.array([256])))
    sim.advance(100)
    w = sim.window_metrics()
    assert w["ttft_s"][0] == pytest.approx(float(FIXED.prefill_time_s(4096)), rel=1e-12)
    ctx = 4096 + np.arange(1, 256)
    expected = float(np.sum(FIXED.decode_iteration_time_s(1, ctx))) / 255
    assert w["tpot_s"][0] == pytest.approx(expected, rel=1e-9)


def test_startup_delay() -> None:
    sim = PDSimulator(FIXED, 1, 1, startup_delay_s=30.0)
    sim.submit(_stream(4.0, 120, seed=1))
    sim.advance(10.0)
    sim.set_deployment(3, 2)
    assert sim.deployment() == {"n_p": 1, "n_d": 1, "n_p_starting": 2, "n_d_starting": 1}
    sim.advance(39.9)
    assert [kv["present"] for kv in sim.kv_state()][1] == 0  # the new decode instance holds nothing yet
    sim.advance(120.0)
    assert sim.deployment()["n_p"] == 3 and sim.deployment()["n_d"] == 2
    tab = sim.request_table()
    new_p = tab["prefill_instance"] >= 1
    assert new_p.any() and np.nanmin(tab["prefill_start_s"][new_p]) >= 40.0
    late_d = tab["decode_instance"] == 1
    assert late_d.any() and np.nanmin(tab["prefill_start_s"][late_d]) >= 40.0


def test_cancelled_start_and_removal_requeue() -> None:
    sim = PDSimulator(FIXED, 3, 2, startup_delay_s=30.0)
    sim.submit(_stream(6.0, 200, seed=2))
    sim.advance(60.0)
    before = sim.counters()
    sim.set_deployment(2, 1)  # immediate: one prefill and one decode instance leave with their work
    assert sim.deployment()["n_p"] == 2 and sim.deployment()["n_d"] == 1
    assert sim.counters()["requeued"] > 0
    assert sim.counters()["arrived"] == before["arrived"]
    _check_invariants(sim)
    sim.set_deployment(3, 2)
    sim.set_deployment(2, 1)  # cancels the starting instances first
    assert sim.deployment() == {"n_p": 2, "n_d": 1, "n_p_starting": 0, "n_d_starting": 0}
    sim.advance(3_000.0)
    _check_invariants(sim)
    assert sim.counters()["finished"] == sim.counters()["arrived"]


def test_power_tracks_the_deployment() -> None:
    """Power follows the ramps: a removed decode instance stops drawing; the model's balanced-load power
    at the simulated rate is matched within 5%."""
    rate = 3.1
    sim = PDSimulator(FIXED, 3, 2)
    sim.submit(_stream(rate, 900, seed=4))
    sim.advance(120)
    sim.window_metrics()
    sim.advance(420)
    p32 = sim.window_metrics()["mean_power_w"]
    sim.set_deployment(3, 1)
    sim.advance(540)
    sim.window_metrics()
    sim.advance(840)
    p31 = sim.window_metrics()["mean_power_w"]
    assert p32 == pytest.approx(FIXED.power_w(3, 2, rate), rel=0.05)
    assert p31 == pytest.approx(FIXED.power_w(3, 1, rate), rel=0.05)
    assert 450 < p32 - p31 < 700  # paper §5.3.1: about 560 W


def test_determinism() -> None:
    def run(seed: int) -> tuple[dict[str, np.ndarray], dict[str, object]]:
        sim = PDSimulator(FIXED, 2, 1, seed=seed)
        sim.submit(_stream(4.0, 120, seed=7))
        sim.advance(60)
        sim.set_deployment(1, 2)
        sim.advance(200)
        return sim.request_table(), sim.window_metrics()

    (a, wa), (b, wb) = run(0), run(0)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert wa["energy_j"] == wb["energy_j"]
    np.testing.assert_array_equal(wa["ttft_s"], wb["ttft_s"])


def test_bad_input() -> None:
    with pytest.raises(ConfigError, match="n_P"):
        PDSimulator(FIXED, 0, 1)
    with pytest.raises(ConfigError, match="n_D"):
        PDSimulator(FIXED, 1, 2.5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="startup_delay_s"):
        PDSimulator(FIXED, 1, 1, startup_delay_s=-1)
    with pytest.raises(ConfigError, match="PDModel"):
        PDSimulator("fixed:4096:256", 1, 1)  # type: ignore[arg-type]
    sim = PDSimulator(FIXED, 1, 1)
    sim.advance(10)
    with pytest.raises(ConfigError, match="now_s"):
        sim.submit(Requests(np.array([5.0]), np.array([10]), np.array([10])))
    with pytest.raises(ConfigError, match="t_end_s"):
        sim.advance(5)
    with pytest.raises(ConfigError, match="t_end_s"):
        sim.advance(float("nan"))
    with pytest.raises(ConfigError, match="C_tok"):
        sim.submit(Requests(np.array([20.0]), np.array([244_000]), np.array([200])))
    with pytest.raises(ConfigError, match="n_D"):
        sim.set_deployment(1, 0)
    with pytest.raises(ConfigError, match="Requests"):
        sim.submit([1.0, 2.0])  # type: ignore[arg-type]
    assert sim.counters()["arrived"] == 0 and sim.now_s == 10  # nothing changed by the rejected calls
    with pytest.raises(ConfigError, match="workload"):
        pd_length_sampler("fixed:4096")


def test_case_study_direction() -> None:
    """Decode removal at 5.3 req/s (3p2d -> 3p1d -> 3p2d), shortened: the queue grows during the removal
    and drains after the restore; power drops while the instance is out."""
    from servegym.envs.pd.reports.case_studies import Phase, run_scenario

    phases = (Phase(0, 5.3, 3, 2), Phase(180, 5.3, 3, 1), Phase(480, 5.3, 3, 2))
    res = run_scenario(FIXED, phases, duration_s=780, seed=1, sample_s=5.0)
    t, q, p = res.t_s, res.queue_len, res.power_w
    before = q[(t > 60) & (t <= 180)]
    during_end = q[(t > 420) & (t <= 480)]
    after = q[t > 720]
    assert during_end.mean() > 3 * before.mean() + 10
    assert after.mean() < during_end.mean() / 3
    assert p[(t > 200) & (t <= 480)].mean() < p[(t > 60) & (t <= 180)].mean() - 300


@pytest.mark.slow
@pytest.mark.parametrize(("spec", "n_p", "n_d"), [
    ("fixed:4096:256", 1, 1), ("fixed:4096:256", 3, 1), ("fixed:4096:256", 3, 2),
    ("azure-conv", 2, 1), ("azure-code", 3, 1), ("mooncake", 3, 1)])
def test_simulated_saturation_matches_model(spec: str, n_p: int, n_d: int) -> None:
    model = PDModel(parse_workload(spec))
    sat = saturation_throughput(model, n_p, n_d, pd_length_sampler(spec), seed=0)
    assert abs(sat.rel_error) <= 0.05, sat
    # The admission-aware semantics tracks the same simulation within 3% (benchmarks/results/pd_crosscheck.md).
    sglang = PDModel(parse_workload(spec), semantics="sglang").capacity(n_p, n_d).mu
    assert abs(sglang / sat.throughput_rps - 1) <= 0.03, (sglang, sat)


def test_cli_simulate_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from servegym.cli import main

    assert main(["pd", "simulate", "--deployment", "3p2d", "--rate", "3", "--duration", "60", "--warmup", "10",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"throughput_rps", "ttft_s", "tpot_ms", "mean_power_w", "mu_model", "model"} <= out.keys()
    assert 0 < out["throughput_rps"] < out["mu_model"] and out["ttft_s"]["p50"] > 0
    assert main(["pd", "simulate", "--deployment", "3p2d", "--rate", "-1"]) == 2
    assert "rate" in capsys.readouterr().err
    assert main(["pd", "simulate", "--deployment", "0p2d", "--rate", "1"]) == 2
    assert main(["pd", "case-study", "nope"]) == 2
    assert "rate-drop" in capsys.readouterr().err


def test_cli_trace_run_compares_with_the_traces_own_moments(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --workload, the analytical figures beside a trace replay come from the replayed requests."""
    import json

    from servegym.envs.traces import load_trace

    from servegym.cli import main

    argv = ["pd", "simulate", "--trace", "azure-conv", "--deployment", "3p2d", "--duration", "60", "--warmup", "0",
            "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    full = load_trace("azure-conv")
    c_tok, r = paper_system().serving.kv_tokens, paper_system().serving.reserve_tokens
    keep = (full.input_tokens + full.output_tokens + r) <= c_tok
    reqs = Requests(full.arrival_s[keep] - full.arrival_s[0], full.input_tokens[keep],
                    full.output_tokens[keep]).window(0.0, 60.0)
    own = PDModel(WorkloadMoments.from_samples(reqs.input_tokens, reqs.output_tokens))
    cap, op = own.capacity(3, 2), own.operating_point(3, 2, len(reqs) / 60.0)
    assert out["workload"].startswith("azure-conv lengths")
    assert out["mu_model"] == pytest.approx(cap.mu, rel=1e-9)
    assert out["model"]["tpot_ms"] == pytest.approx(op.tpot_s * 1e3, rel=1e-9)
    assert out["model"]["power_w"] == pytest.approx(op.power_w, rel=1e-9)
    fixed_mu = PDModel(WorkloadMoments.fixed(4096, 256)).capacity(3, 2).mu
    assert abs(out["mu_model"] / fixed_mu - 1) > 0.5  # not the fixed 4096/256 model any more
    # --workload still overrides the moments (and the simulator's power normalizers with them).
    assert main([*argv, "--workload", "fixed:4096:256"]) == 0
    assert json.loads(capsys.readouterr().out)["mu_model"] == pytest.approx(fixed_mu, rel=1e-9)


@pytest.mark.slow
def test_cli_case_study_plot(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    import json
    from pathlib import Path

    from servegym.cli import main

    png = Path(str(tmp_path)) / "scale.png"
    assert main(["pd", "case-study", "scale-down", "--plot", str(png), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    figs = {r["figure"]: r for r in out["figures"]}
    assert png.stat().st_size > 10_000
    assert figs["ttft_max_at_end_s"]["simulated"] > 100  # unbounded growth at 1p1d (paper: 320 s)
    assert abs(figs["power_delta_decode_removal_w"]["simulated"] - (-520)) < 0.15 * 520


@pytest.mark.parametrize(("n_p", "n_d"), [(1, 1), (2, 1)])
def test_saturation_lies_between_the_model_bounds(n_p: int, n_d: int) -> None:
    """Mooncake, where the model's Kingman-charged reservations are most of the pool (the two cross-check
    cells outside 5%): the simulated saturation sits between the paper's capacity (every waiting request
    holds its reservation) and the no-wait bound (none does), as the shared admission semantics imply."""
    model = PDModel(parse_workload("mooncake"))
    sat = saturation_throughput(model, n_p, n_d, pd_length_sampler("mooncake"), seed=0)
    slack = 3 * sat.stderr_rps
    assert model.capacity(n_p, n_d).mu < sat.throughput_rps - slack
    assert sat.throughput_rps <= model.no_wait_capacity(n_p, n_d) + slack
