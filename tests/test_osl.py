"""The geo OSL predictor: shipped weights, training, invariants, errors and the CLI."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from importlib import resources

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servegym.calibration.osl import (
    TrainConfig,
    _loss_and_grads,
    accuracy_table,
    calibrate,
    evaluate,
    load_dataset,
    train,
)
from servegym.envs.geo.sim.osl import (
    APPS,
    N_BUCKETS,
    TRACE_MODEL,
    MeanOSL,
    OracleOSL,
    OSLPredictor,
    bucket_of,
    make_osl_estimator,
)

from servegym.cli import main
from servegym.errors import ConfigError

SMALL = TrainConfig(seed=3, epochs=2, max_rows_per_app=150)


@pytest.fixture(scope="module")
def shipped() -> OSLPredictor:
    return OSLPredictor.load()


def test_bucket_edges() -> None:
    osl = [1, 31, 32, 63, 64, 127, 128, 255, 256, 511, 512, 40_000]
    assert bucket_of(osl).tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]


def test_shipped_weights_reproduce_reported_heldout_accuracy(shipped: OSLPredictor) -> None:
    meta = shipped.meta
    assert shipped.n_parameters == meta["n_parameters"]
    cfg = TrainConfig(**meta["training"])
    data = load_dataset(cfg)
    assert int(data.test.sum()) == meta["n_test"] and int((~data.test).sum()) == meta["n_train"]
    got = evaluate(shipped, data)
    for name, ref in meta["metrics_test"].items():
        assert got[name]["n"] == ref["n"]
        for k in ("exact", "adjacent", "coverage_p10_p90"):
            assert got[name][k] == pytest.approx(ref[k], abs=1e-3), (name, k)
    # The net must beat the per-application majority bucket overall, and no application may fall below it.
    assert got["overall"]["exact"] > got["overall"]["majority"]["exact"] + 0.05
    for a in APPS:
        assert got[a]["exact"] >= got[a]["majority"]["exact"] - 1e-9
    # Quantiles calibrated on held-out data: ~80% inside [p10, p90], ~50% below p50.
    assert 0.75 < got["overall"]["coverage_p10_p90"] < 0.85
    assert 0.45 < got["overall"]["below_p50"] < 0.55


def test_shipped_files_are_consistent(shipped: OSLPredictor) -> None:
    root = resources.files("servegym.calibration").joinpath("profiles/osl")
    blob = root.joinpath("osl_mlp.npz").read_bytes()
    assert hashlib.sha256(blob).hexdigest() == shipped.meta["weights_sha256"]
    prov = root.joinpath("PROVENANCE.md").read_text()
    assert accuracy_table(shipped.meta["metrics_test"]) in prov


def test_training_is_deterministic_with_a_seed() -> None:
    data = load_dataset(SMALL)
    assert np.array_equal(data.test, load_dataset(SMALL).test)
    a, b = train(data, SMALL), train(data, SMALL)
    for wa, wb in zip(a.weights, b.weights, strict=True):
        assert np.array_equal(wa, wb)
    other = TrainConfig(seed=4, epochs=2, max_rows_per_app=150)
    c = train(load_dataset(other), other)
    assert not np.array_equal(a.weights[0], c.weights[0])


def test_split_is_per_application_and_disjoint() -> None:
    data = load_dataset(SMALL)
    for a in APPS:
        sel = data.app == a
        assert sel.sum() == 150
        assert data.test[sel].sum() == 30  # ceil(0.2 * 150)
    assert set(zip(data.app.tolist(), data.model.tolist(), strict=True)) == set((a, m) for a, m in TRACE_MODEL.items())


def test_gradients_match_finite_differences() -> None:
    rng = np.random.default_rng(0)
    n, n_in, h = 7, 8, 5
    params = [rng.standard_normal((n_in, h)), rng.standard_normal(h), rng.standard_normal((h, h)),
              rng.standard_normal(h), rng.standard_normal((h, N_BUCKETS + 3)), rng.standard_normal(N_BUCKETS + 3)]
    x = rng.standard_normal((n, n_in))
    yb = rng.integers(0, N_BUCKETS, n)
    yq = rng.standard_normal(n)
    _, grads = _loss_and_grads(params, x, yb, yq, 0.7)
    eps = 1e-6
    for p, g in zip(params, grads, strict=True):
        for idx in [tuple(rng.integers(0, s) for s in p.shape) for _ in range(4)]:
            old = p[idx]
            p[idx] = old + eps
            up, _ = _loss_and_grads(params, x, yb, yq, 0.7)
            p[idx] = old - eps
            down, _ = _loss_and_grads(params, x, yb, yq, 0.7)
            p[idx] = old
            assert (up - down) / (2 * eps) == pytest.approx(g[idx], rel=1e-4, abs=1e-7)


@settings(max_examples=40, deadline=None)
@given(isl=st.lists(st.integers(1, 300_000), min_size=1, max_size=50), app=st.sampled_from(APPS),
       scale=st.floats(0.1, 20.0))
def test_quantiles_are_monotone(shipped: OSLPredictor, isl: list[int], app: str, scale: float) -> None:
    q = shipped.predict_quantiles(isl, TRACE_MODEL[app], app)
    assert q.shape == (len(isl), 3)
    assert np.all(q[:, 0] <= q[:, 1]) and np.all(q[:, 1] <= q[:, 2]) and np.all(q >= 1.0)
    assert np.array_equal(shipped.predict_osl(isl, TRACE_MODEL[app], app), q[:, 1])
    b = shipped.predict_bucket(isl, TRACE_MODEL[app], app)
    assert b.dtype == np.int64 and b.min() >= 0 and b.max() < N_BUCKETS
    # Monotone by construction, not by training luck: any weights keep the order.
    rng = np.random.default_rng(len(isl))
    wild = OSLPredictor.from_parts(shipped.meta, {k: scale * rng.standard_normal(w.shape) for k, w in
                                                  zip(("W1", "b1", "W2", "b2", "W3", "b3"), shipped.weights,
                                                      strict=True)})
    qw = wild.predict_quantiles(isl, TRACE_MODEL[app], app)
    assert np.all(qw[:, 0] <= qw[:, 1]) and np.all(qw[:, 1] <= qw[:, 2])


def test_per_request_names_match_scalar_calls(shipped: OSLPredictor) -> None:
    isl = np.array([10, 900, 5000, 120, 3000, 70_000, 2, 2500])
    apps = np.array(APPS * 2)
    models = [TRACE_MODEL[a] for a in apps]
    got = shipped.predict_quantiles(isl, models, apps)
    for a in APPS:
        sel = apps == a
        np.testing.assert_array_equal(got[sel], shipped.predict_quantiles(isl[sel], TRACE_MODEL[a], a))
    assert shipped.predict_bucket(np.zeros(0, dtype=np.int64), "kimi", "mooncake").shape == (0,)


def test_fast_path_equals_the_plain_forward_pass(shipped: OSLPredictor) -> None:
    rng = np.random.default_rng(5)
    isl = rng.choice([1, 7, 300, 300, 2048, 9000, 130_000], size=200).astype(np.float64) * rng.choice([1.0, 1.5], 200)
    apps = rng.choice(APPS, size=200)
    models = [TRACE_MODEL[a] for a in apps]
    np.testing.assert_allclose(shipped.raw(isl, models, apps), shipped.forward(shipped.features(isl, models, apps)),
                               rtol=1e-12, atol=1e-12)


def test_isl_outside_training_range_is_clipped(shipped: OSLPredictor) -> None:
    hi = float(np.exp(shipped.log_isl_max))
    q = shipped.predict_quantiles([hi, 10 * hi, 1e9], "kimi", "mooncake")
    np.testing.assert_allclose(q[1:], np.repeat(q[:1], 2, axis=0))


@pytest.mark.parametrize(("args", "match"), [
    (([100], "gpt-9", "azure-conv"), "model = 'gpt-9' is unknown; allowed"),
    (([100], "kimi", "sharegpt"), "app = 'sharegpt' is unknown; allowed"),
    (([100], "kimi", "arxiv"), r"\(model, app\) = \('kimi', 'arxiv'\) was not in the training data"),
    (([100, 0], "kimi", "mooncake"), r"isl\[1\] = 0.0 is out of range; allowed: prompt tokens in \[1, inf\)"),
    (([-5], "kimi", "mooncake"), r"isl\[0\] = -5.0 is out of range"),
    (([float("nan")], "kimi", "mooncake"), r"isl\[0\] = nan is out of range"),
    (([1, 2], ["kimi"], "mooncake"), "model must be one name or one per request"),
    ((["abc"], "kimi", "mooncake"), "isl must be numbers"),
])
def test_bad_inputs_raise_clear_errors(shipped: OSLPredictor, args: tuple, match: str) -> None:
    for method in (shipped.predict_bucket, shipped.predict_quantiles, shipped.predict_osl):
        with pytest.raises(ConfigError, match=match):
            method(*args)
    with pytest.raises(ConfigError, match="kimi"):
        shipped.bind("kimi", "arxiv")


def test_oracle_and_mean_share_the_interface(shipped: OSLPredictor) -> None:
    isl = np.array([100, 2000, 50])
    true = np.array([10, 300, 700])
    oracle = make_osl_estimator("oracle", output_tokens=true)
    assert isinstance(oracle, OracleOSL)
    np.testing.assert_array_equal(oracle.predict_osl(isl, "any", "cnn-dailymail"), true)
    np.testing.assert_array_equal(oracle.predict_bucket(isl, None, None), [0, 4, 5])
    np.testing.assert_array_equal(oracle.predict_quantiles(isl, None, None), np.repeat(true[:, None], 3, axis=1))
    with pytest.raises(ConfigError, match="oracle holds 3"):
        oracle.predict_osl(isl[:2], None, None)
    with pytest.raises(ConfigError, match="output_tokens"):
        make_osl_estimator("oracle")

    mean = make_osl_estimator("mean")
    assert isinstance(mean, MeanOSL)
    m = shipped.meta["mean_table"]["azure-conv"]
    np.testing.assert_allclose(mean.predict_osl(isl, "azure-llm", "azure-conv"), m[0])
    np.testing.assert_allclose(mean.predict_quantiles(isl, "azure-llm", "azure-conv"), np.tile(m[1:], (3, 1)))
    assert mean.predict_bucket(isl, "azure-llm", "azure-conv").tolist() == [int(bucket_of(m[0]))] * 3
    with pytest.raises(ConfigError, match="app = 'nope' is unknown"):
        mean.predict_osl(isl, "azure-llm", "nope")
    custom = MeanOSL.from_lengths({"cnn-dailymail": [50, 70, 90]})
    np.testing.assert_allclose(custom.predict_osl([800], None, "cnn-dailymail"), [70.0])

    assert isinstance(make_osl_estimator("predicted"), OSLPredictor)
    with pytest.raises(ConfigError, match="osl_mode = 'guess' is unknown"):
        make_osl_estimator("guess")


def test_bound_predictor_drives_the_geo_simulation(shipped: OSLPredictor) -> None:
    from servegym.envs.geo.sim.cluster import GeoSimulation
    from servegym.envs.geo.sim.config import preset

    cfg = preset("small", duration_s=2.0, drain_s=10.0, rate_rps=40.0, nodes_per_dc=1,
                 lengths="azure-conv", osl_mode="predicted")
    sim = GeoSimulation(cfg, osl_predictor=shipped.bind("azure-llm", "azure-conv"))
    ctx = sim.next_decision()
    np.testing.assert_allclose(ctx.osl_estimate, shipped.predict_osl(ctx.input_tokens, "azure-llm", "azure-conv"))


def test_retraining_a_small_subset_is_fast_and_writes_loadable_files(tmp_path) -> None:
    rep = calibrate(SMALL, tmp_path)
    assert rep["n_test"] == 4 * 30 and set(rep["metrics_test"]) == {*APPS, "overall"}
    pred = OSLPredictor.load(tmp_path / "osl_mlp.json")
    assert pred.meta["training"]["max_rows_per_app"] == 150
    assert set(MeanOSL.load(tmp_path / "osl_mlp.json").table) == set(APPS)
    first = (tmp_path / "osl_mlp.npz").read_bytes()
    calibrate(SMALL, tmp_path)
    assert (tmp_path / "osl_mlp.npz").read_bytes() == first  # byte-identical rerun


def test_cli_calibrate_osl(tmp_path, capsys) -> None:
    out = tmp_path / "w"
    assert main(["calibrate", "osl", "--max-rows-per-app", "100", "--epochs", "2", "--out", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert {"exact", "adjacent"} <= set(rep["metrics_test"]["overall"]) and rep["training"]["epochs"] == 2
    assert (out / "osl_mlp.npz").is_file() and (out / "PROVENANCE.md").is_file()
    assert main(["calibrate", "osl", "--max-rows-per-app", "100", "--epochs", "1", "--no-save"]) == 0
    assert "azure-conv (azure-llm)" in capsys.readouterr().out
    assert main(["calibrate", "osl", "--max-rows-per-app", "100", "--overwrite-shipped"]) != 0
    assert "--max-rows-per-app cannot --overwrite-shipped" in capsys.readouterr().err
    assert main(["calibrate", "osl", "--out", str(out), "--overwrite-shipped"]) != 0
    assert "--out and --overwrite-shipped exclude each other" in capsys.readouterr().err
    assert main(["calibrate", "osl", "--epochs", "0", "--no-save"]) != 0
    assert "epochs = 0 is out of range" in capsys.readouterr().err


def test_load_rejects_bad_paths(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"must be an existing \.json"):
        OSLPredictor.load(tmp_path / "missing.json")


def _tree_digest(folder) -> dict[str, str]:
    import hashlib

    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir()) if f.is_file()}


def test_calibrate_osl_writes_a_user_folder_by_default_never_the_package(tmp_path, monkeypatch, capsys) -> None:
    from servegym.calibration.osl import default_out_dir

    shipped = _tree_digest(default_out_dir())
    monkeypatch.chdir(tmp_path)
    assert main(["calibrate", "osl", "--max-rows-per-app", "100", "--epochs", "1"]) == 0
    user = tmp_path / "servegym-results" / "calibration" / "osl"
    assert f"wrote {user.relative_to(tmp_path) / 'osl_mlp.npz'}" in capsys.readouterr().out
    assert set(_tree_digest(user)) == {"osl_mlp.npz", "osl_mlp.json", "PROVENANCE.md"}
    assert _tree_digest(default_out_dir()) == shipped


def test_output_folder_is_the_package_only_with_overwrite_shipped(tmp_path) -> None:
    """Every calibration command resolves its folder here: --out, else the package with --overwrite-shipped,
    else the user folder; the two flags together are refused. (The whole osl run into the package is the slow
    test below: the flag refuses a row subset, so it trains on every row.)"""
    import argparse

    from servegym.calibration.cli import USER_OUT, output_dir

    shipped = tmp_path / "package"
    ns = argparse.Namespace
    assert output_dir(ns(out=None, overwrite_shipped=True), "osl", shipped) == shipped
    assert output_dir(ns(out=None, overwrite_shipped=False), "osl", shipped) == USER_OUT / "osl"
    assert output_dir(ns(out=tmp_path / "x", overwrite_shipped=False), "osl", shipped) == tmp_path / "x"
    with pytest.raises(ConfigError, match="exclude each other"):
        output_dir(ns(out=tmp_path / "x", overwrite_shipped=True), "osl", shipped)


@pytest.mark.slow
def test_overwrite_shipped_is_explicit(tmp_path, monkeypatch) -> None:
    import servegym.calibration.osl as osl_mod

    monkeypatch.setattr(osl_mod, "default_out_dir", lambda: tmp_path / "package")
    monkeypatch.chdir(tmp_path)
    assert main(["calibrate", "osl", "--epochs", "1", "--overwrite-shipped", "--json"]) == 0
    assert (tmp_path / "package" / "osl_mlp.npz").is_file() and not (tmp_path / "servegym-results").exists()


def test_osl_refit_is_bit_identical(tmp_path) -> None:
    """Same seed, same files, byte for byte: two fresh runs of the CLI into two folders."""
    for d in ("a", "b"):
        assert main(["calibrate", "osl", "--max-rows-per-app", "400", "--epochs", "2", "--seed", "3", "--json",
                     "--out", str(tmp_path / d)]) == 0
    assert _tree_digest(tmp_path / "a") == _tree_digest(tmp_path / "b")


@pytest.mark.slow
def test_default_refit_reproduces_the_shipped_weights_and_accuracy(tmp_path, shipped: OSLPredictor) -> None:
    """``servegym calibrate osl`` with the defaults (seed 0, every row, 30 epochs) rebuilds the shipped
    predictor. Byte for byte on the numpy/OpenBLAS build that made the shipped files (float64 numpy
    throughout); another build drifts in the last bits over 30 epochs (seen with numpy 2.4.6: held-out
    accuracies moved by <= 0.1 pp), so there the refit must agree on every held-out figure within 0.5 pp
    and the same weight shapes. Run-to-run identity on one build is ``test_osl_refit_is_bit_identical``.
    The CLI's defaults are the training configuration the shipped file records, so this one retrain is also
    the full retrain from the recorded configuration (exact and adjacent accuracy within 0.5 pp)."""
    from servegym.calibration.osl import default_out_dir

    assert dataclasses.asdict(TrainConfig()) == shipped.meta["training"]
    assert main(["calibrate", "osl", "--out", str(tmp_path), "--json"]) == 0
    assert json.loads((tmp_path / "osl_mlp.json").read_text())["training"] == shipped.meta["training"]
    if _tree_digest(tmp_path) == _tree_digest(default_out_dir()):
        return
    ours = json.loads((tmp_path / "osl_mlp.json").read_text())
    shipped = json.loads((default_out_dir() / "osl_mlp.json").read_text())
    assert ours["metrics_test"].keys() == shipped["metrics_test"].keys()
    for app, m in shipped["metrics_test"].items():
        assert ours["metrics_test"][app]["n"] == m["n"]
        for key in ("exact", "adjacent", "coverage_p10_p90", "below_p50"):
            assert abs(ours["metrics_test"][app][key] - m[key]) <= 0.005, (app, key)
    with np.load(tmp_path / "osl_mlp.npz") as a, np.load(default_out_dir() / "osl_mlp.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        assert all(a[k].shape == b[k].shape for k in a.files)
