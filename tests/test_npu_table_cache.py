"""The npu best-fit tables' disk cache (servegym.envs.npu.sim.table_cache) and the user cache folder
(servegym.user_cache): content keys, atomic writes, field-by-field validation, rebuild of bad entries,
concurrent writers. Every test points the cache at its own tmp folder."""

from __future__ import annotations

import io
import json
import multiprocessing as mp
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servegym.envs.npu.sim import table_cache
from servegym.envs.npu.sim.config import ClusterConfig
from servegym.envs.npu.sim.roofline import RooflineParams
from servegym.envs.npu.sim.table_cache import InvalidEntry, cached_run_dse, flush, load_table
from servegym.envs.npu.sim.vpods import ConfigCatalog

from servegym import user_cache

MODEL = "Llama-3-8B"  # the cheapest table (~0.5 CPU-s cold)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("SERVEGYM_CACHE_DIR", str(folder))
    monkeypatch.delenv("SERVEGYM_NO_CACHE", raising=False)
    return folder


def _same(a, b) -> bool:
    return (a.best == b.best and a.per_version == b.per_version and a.slo_s == b.slo_s and a._fronts == b._fronts
            and np.array_equal(a.batches, b.batches) and np.array_equal(a.buckets, b.buckets)
            and a.space.vpods == b.space.vpods and a.space.params == b.space.params)


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, bytes, str]:
    """A table built cold with two fronts computed, its entry's bytes and key (built once for the module)."""
    folder = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp_:
        mp_.setenv("SERVEGYM_CACHE_DIR", str(folder))
        t = cached_run_dse(MODEL)
        t.pareto("decode", 1024)
        t.pareto("prefill", 4096, versions=("NPU-D", "NPU-B"))
        flush(t)
        (path,) = (folder / table_cache.KIND).glob("*.npz")
        return t, path.read_bytes(), path.stem


def _load(data: bytes, key: str):
    return load_table(data, key, table_cache.model(MODEL), "energy", table_cache.VERSIONS, 5.0, RooflineParams())


def test_round_trip_is_exact(stored) -> None:
    t, data, key = stored
    loaded = _load(data, key)
    assert _same(t, loaded) and len(loaded._fronts) == 2
    # the loaded table answers like the computed one, fronts it never stored included
    assert loaded.pareto("decode", 2048) == t.pareto("decode", 2048)
    assert loaded.candidates("decode", 1024, 4) == t.candidates("decode", 1024, 4)


@pytest.mark.slow  # builds a catalog's tables from nothing (the cold read): about 1.7 CPU-s
def test_warm_catalog_equals_cold(cache: Path) -> None:
    cfg = ClusterConfig(model=MODEL, step_models="paper")  # two tables (the default chooses on the scoring one)
    cold = ConfigCatalog(cfg)
    files = sorted((cache / table_cache.KIND).glob("*.npz"))
    assert len(files) == 2  # the selection and the scoring model's tables
    warm = ConfigCatalog(cfg)
    assert warm.table._disk[1] == len(cold.table._fronts) > 0  # read with every front the catalog needs
    assert _same(cold.table, warm.table) and _same(cold.scoring_table, warm.scoring_table)
    for k, v in cold.fields.items():
        if k not in ("table", "scoring_table"):
            assert (np.array_equal(v, warm.fields[k]) if isinstance(v, np.ndarray) else v == warm.fields[k]), k
    assert sorted((cache / table_cache.KIND).glob("*.npz")) == files  # nothing rewritten under a new name


def test_key_covers_the_inputs_and_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    assert table_cache.CODE_DIGEST == user_cache.source_digest(table_cache.CODE_MODULES) is not None
    spec = table_cache.model(MODEL)
    base = dict(spec=spec, objective="energy", versions=table_cache.VERSIONS, slo_factor=5.0,
                params=RooflineParams(), slo_s=None, test_params=None)
    k0 = table_cache.table_key(**base)
    assert k0 == table_cache.table_key(**base)
    changed = [dict(base, objective="cost"), dict(base, slo_factor=4.0), dict(base, versions=("NPU-D", "NPU-C")),
               dict(base, params=RooflineParams.selection()), dict(base, test_params=RooflineParams()),
               dict(base, spec=table_cache.model("Llama-3-70B")), dict(base, slo_s={("decode", 128): 1.0})]
    keys = {table_cache.table_key(**c) for c in changed}
    assert k0 not in keys and len(keys) == len(changed)
    monkeypatch.setattr(table_cache, "CODE_DIGEST", "edited")
    assert table_cache.table_key(**base) != k0
    monkeypatch.setattr(table_cache, "CODE_DIGEST", None)  # source unreadable: no caching
    assert table_cache.table_key(**base) is None


def _rewrite(data: bytes, **changes) -> bytes:
    """``data`` with arrays changed, re-signed (its digest recomputed, unless ``meta`` is changed): so each edit
    reaches the field check it is aimed at rather than failing on the digest first."""
    z = np.load(io.BytesIO(data), allow_pickle=False)
    arrays = {k: z[k] for k in z.files}
    arrays.update(changes)
    arrays = {k: v for k, v in arrays.items() if v is not None}  # None: the column is left out
    if "meta" not in changes and all(v.dtype != object for v in arrays.values()):
        meta = json.loads(arrays["meta"].tobytes())
        meta["digest"] = table_cache.arrays_digest(meta["key"], arrays)
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _meta(data: bytes, **changes) -> np.ndarray:
    meta = json.loads(np.load(io.BytesIO(data))["meta"].tobytes())
    meta.update(changes)
    return np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)


def _bad_entries(data: bytes) -> dict[str, bytes]:
    z = np.load(io.BytesIO(data))
    alloc, f, slot = z["e_alloc"].copy(), z["e_f"].copy(), z["e_slot"].copy()
    alloc[3] = 10**6
    f[5, 0] = np.nan
    slo = z["slo_val"].copy()
    slo[0] *= 2
    slot[0] = 1  # a best fit filed as a fail-over: its role no longer matches
    return {
        "truncated": data[: len(data) // 2],
        "not a zip": b"\x93NUMPY not really",
        "empty": b"",
        "stale key": _rewrite(data, meta=_meta(data, key="0" * 64)),
        "old format": _rewrite(data, meta=_meta(data, format_version=0)),
        "allocation out of range": _rewrite(data, e_alloc=alloc),
        "NaN metric": _rewrite(data, e_f=f),
        "SLO differs": _rewrite(data, slo_val=slo),
        "slot and role": _rewrite(data, e_slot=slot),
        "float indices": _rewrite(data, e_batch=z["e_batch"].astype(float)),
        "missing column": _rewrite(data, e_meets=None),
        "pickled object": _rewrite(data, f_versions=np.array([object()] * z["f_versions"].size, dtype=object)),
    }


CASES = ["truncated", "not a zip", "empty", "stale key", "old format", "allocation out of range", "NaN metric",
         "SLO differs", "slot and role", "float indices", "missing column", "pickled object"]


@pytest.mark.parametrize("case", CASES)
def test_bad_entries_are_refused(case: str, stored) -> None:
    _, data, key = stored
    with pytest.raises(InvalidEntry):
        _load(_bad_entries(data)[case], key)


@pytest.mark.parametrize("case", ["truncated", "stale key", "pickled object"])
def test_a_bad_entry_is_rebuilt_and_rewritten(case: str, stored, cache: Path) -> None:
    t, data, key = stored
    path = cache / table_cache.KIND / f"{key}.npz"
    path.parent.mkdir(parents=True)
    path.write_bytes(_bad_entries(data)[case])
    rebuilt = cached_run_dse(MODEL)
    assert rebuilt.best == t.best and rebuilt.slo_s == t.slo_s and rebuilt._disk[1] == -1
    flush(rebuilt)
    assert _same(_load(path.read_bytes(), key), rebuilt)  # rewritten, valid


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["slo_phase", "slo_seq", "e_slot", "e_phase", "e_seq", "e_role", "e_alloc", "e_batch",
                             "f_phase", "f_seq", "f_obj"]),
       pos=st.integers(0, 10**6), value=st.integers(-3, 2**20))
def test_any_edited_index_loads_identically_or_is_refused(stored, name: str, pos: int, value: int) -> None:
    t, data, key = stored
    a = np.load(io.BytesIO(data))[name].copy()
    a[pos % a.size] = value
    try:
        loaded = _load(_rewrite(data, **{name: a}), key)
    except InvalidEntry:
        return
    # never another exception; an edit the checks let through (the same value written back, or another valid
    # batch or bucket) still gives a table whose entries agree with its SLOs and cover its buckets once
    assert loaded.slo_s.keys() == t.slo_s.keys()
    for k, e in loaded.best.items():
        assert e.slo_s == loaded.slo_s[k] and (not e.meets_slo or e.latency_s <= e.slo_s)


def test_cache_folder_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVEGYM_NO_CACHE", raising=False)
    monkeypatch.setenv("SERVEGYM_CACHE_DIR", str(tmp_path / "mine"))
    assert user_cache.cache_root() == tmp_path / "mine"
    monkeypatch.delenv("SERVEGYM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(user_cache.sys, "platform", "linux")
    assert user_cache.cache_root() == tmp_path / "xdg" / "servegym"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_cache.cache_root() == tmp_path / "home" / ".cache" / "servegym"
    monkeypatch.setenv("SERVEGYM_NO_CACHE", "1")
    assert user_cache.cache_root() is None and user_cache.entry_path("npu-dse", "k", ".npz") is None


def test_unwritable_cache_costs_only_the_rebuild(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stored) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("SERVEGYM_CACHE_DIR", str(blocker))
    t = cached_run_dse(MODEL)
    flush(t)  # cannot create the folder: no error
    assert t.best == stored[0].best and t._disk[1] == -1


def test_prune_keeps_the_most_recently_used(tmp_path: Path) -> None:
    import os

    for i in range(5):
        p = tmp_path / f"{i}.npz"
        p.write_bytes(b"x")
        os.utime(p, (1000 + i, 1000 + i))
    stale_tmp = tmp_path / ".0.npz.abc.tmp.npz"
    stale_tmp.write_bytes(b"half")
    os.utime(stale_tmp, (1000, 1000))
    user_cache.prune(tmp_path, keep=2, suffix=".npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["3.npz", "4.npz"]


def test_concurrent_writers_never_expose_a_partial_entry(tmp_path: Path, stored) -> None:
    """Processes writing the same entry while this one reads it: every read is the whole entry."""
    from concurrent.futures import ProcessPoolExecutor

    _, data, key = stored
    path = tmp_path / table_cache.KIND / f"{key}.npz"
    with ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as pool:
        # the workers import servegym.user_cache only (standard library), not this module
        futs = [pool.submit(user_cache.write_entry, path, data) for _ in range(80)]
        reads = 0
        while not all(f.done() for f in futs):
            got = user_cache.read_entry(path)
            if got is not None:
                assert got == data
                reads += 1
        assert all(f.result() for f in futs)
    assert path.read_bytes() == data and reads > 0
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind


def test_a_build_is_announced_in_one_line_and_a_cache_hit_is_silent(cache: Path, capsys: pytest.CaptureFixture[str],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The first make of an npu id builds its tables for seconds: one stderr line says so (once for the two
    tables of one model a catalog builds); a later process reads them from the cache and prints nothing."""
    monkeypatch.setattr(table_cache, "_ANNOUNCED", set())
    tables = [cached_run_dse(MODEL), cached_run_dse(MODEL, slo_factor=4.0)]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"servegym: building the npu best-fit tables of {MODEL}"), err
    assert str(cache) in err
    flush(*tables)
    monkeypatch.setattr(table_cache, "_ANNOUNCED", set())  # as a new process: the tables are on disk now
    cached_run_dse(MODEL)
    assert capsys.readouterr().err == ""
