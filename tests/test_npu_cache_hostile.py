"""Hostile entries in the npu best-fit table cache (issue 43, items 3, 7, 8 and 9), each reproduced through the real
code path: ``gym.make("servegym/NPUAutoscale-v0")`` and ``reset()``, which read the catalog's table from the
user cache folder (one: the default chooses on the scoring model, so choosing and charging share it). Every bad entry is a miss: one stderr line names it and why, the tables are rebuilt (equal to a
clean build), the entry is replaced atomically by a valid regular file, and nothing outside the cache folder is
read or touched. Each test points the cache at its own tmp folder."""

from __future__ import annotations

import io
import json
import os
import shutil
import threading
import zipfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from servegym.envs.npu import scenarios
from servegym.envs.npu.sim import table_cache

import servegym  # noqa: F401  (registers the ids)
from servegym import user_cache

MODEL = "Llama-3-8B"  # the cheapest tables (~0.5 CPU-s each cold)
CONFIG: dict[str, Any] = {"hours": 0.5, "split": None, "model": MODEL, "rate_rpm": 120.0}


def _make(capsys: pytest.CaptureFixture[str]) -> tuple[Any, str]:
    """``gym.make`` + ``reset`` in a fresh process's state (no catalog kept in memory, no build announced yet);
    the env and what it printed on stderr."""
    capsys.readouterr()
    env = gym.make("servegym/NPUAutoscale-v0", config=CONFIG)
    env.reset(seed=0)
    return env, capsys.readouterr().err


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes], Any]:
    """A cache folder filled by one clean ``gym.make`` (built once for the module): the folder, its entries'
    bytes by file name and the clean scoring table."""
    folder = tmp_path_factory.mktemp("warm")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SERVEGYM_CACHE_DIR", str(folder))
        mp.delenv("SERVEGYM_NO_CACHE", raising=False)
        mp.setattr(scenarios, "_CATALOGS", scenarios._LRU(scenarios.CATALOG_CACHE_MAX))
        env = gym.make("servegym/NPUAutoscale-v0", config=CONFIG)
        env.reset(seed=0)
        table = env.unwrapped.catalog.scoring_table
        entries = {p.name: p.read_bytes() for p in (folder / table_cache.KIND).iterdir()}
    assert len(entries) == 1  # the scoring table, which the default also chooses on
    return folder, entries, table


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warm) -> tuple[Path, Path]:
    """This test's own copy of the warm cache folder, used by ``gym.make``: (the folder of entries, the scoring
    table's entry, the one the tests spoil)."""
    root = tmp_path / "cache"
    shutil.copytree(warm[0], root)
    monkeypatch.setenv("SERVEGYM_CACHE_DIR", str(root))
    monkeypatch.delenv("SERVEGYM_NO_CACHE", raising=False)
    monkeypatch.setattr(scenarios, "_CATALOGS", scenarios._LRU(scenarios.CATALOG_CACHE_MAX))
    monkeypatch.setattr(table_cache, "_ANNOUNCED", set())
    spec = table_cache.model(MODEL)
    key = table_cache.table_key(spec, "energy", table_cache.VERSIONS, 5.0, warm[2].space.params, None, None)
    entry = root / table_cache.KIND / f"{key}.npz"
    assert entry.name in warm[1]
    return root / table_cache.KIND, entry


def _missed(err: str, entry: Path, why: str) -> None:
    """``err`` is the one line saying ``entry`` was not used because of ``why`` and is rebuilt."""
    assert err.count("\n") == 1, err
    assert err.startswith(f"servegym: npu table cache entry {entry} not used (") and why in err, err
    assert "rebuilding" in err, err


def _replaced(env: Any, entry: Path, warm) -> None:
    """The env got the clean tables, and ``entry`` is again a valid regular file holding them."""
    table = env.unwrapped.catalog.scoring_table
    assert table.best == warm[2].best and table.per_version == warm[2].per_version
    assert entry.is_file() and not entry.is_symlink()
    loaded = table_cache.load_table(entry.read_bytes(), entry.stem, table_cache.model(MODEL), "energy",
                                    table_cache.VERSIONS, 5.0, warm[2].space.params)
    assert loaded.best == warm[2].best


# ------------------------------------------------------------------------------------- item 3: a member bomb
def _with_bomb_member(data: bytes, name: str, size: int) -> bytes:
    """``data`` (an entry) with its member ``name`` replaced by a deflated uint8 array of ``size`` zeros: a small
    file that expands to ``size`` bytes."""
    src = zipfile.ZipFile(io.BytesIO(data))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            if info.filename != f"{name}.npy":
                out.writestr(info.filename, src.read(info))
                continue
            with out.open(f"{name}.npy", "w", force_zip64=True) as fh:
                np.lib.format.write_array_header_1_0(fh, {"descr": "|u1", "fortran_order": False, "shape": (size,)})
                chunk = bytes(2**20)
                for _ in range(size // len(chunk)):
                    fh.write(chunk)
    return buf.getvalue()


def test_a_member_that_expands_past_its_cap_is_a_miss_never_inflated(cache, warm, capsys) -> None:
    _folder, entry = cache
    bomb = _with_bomb_member(warm[1][entry.name], "meta", 32 * 2**20)
    assert len(bomb) < 2**20 < 32 * 2**20  # small on disk, 32 MiB inflated
    entry.write_bytes(bomb)
    # inflating a member at all is the defect: make it fail loudly if the reader does
    real_read = zipfile.ZipExtFile.read
    inflated: list[int] = []

    def read(self: zipfile.ZipExtFile, n: int = -1) -> bytes:
        got = real_read(self, n)
        if self.name == "meta.npy":
            inflated.append(len(got))
        return got

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(zipfile.ZipExtFile, "read", read)
        env, err = _make(capsys)
    _missed(err, entry, "member 'meta.npy' expands to 33,554,560 bytes; allowed: <= 4,096")
    assert sum(inflated) < 2**16  # the valid entry's meta (~0.5 KB) only; never the 32 MiB of the spoiled one
    _replaced(env, entry, warm)


# ------------------------------------------------------------------------------------------ item 7: a FIFO
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_at_an_entry_name_is_a_miss_and_never_blocks(cache, warm, capsys) -> None:
    _folder, entry = cache
    entry.unlink()
    os.mkfifo(entry)
    # a reader that opens the FIFO blocks until a writer comes: after 20 s play the writer (opening it
    # unblocks the reader, which then reads an empty file), so the old code fails this test instead of hanging
    blocked: list[bool] = []

    def unblock() -> None:
        try:
            fd = os.open(entry, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO when nobody is reading it: nothing blocked
        except OSError:
            return
        blocked.append(True)
        os.close(fd)

    timer = threading.Timer(20.0, unblock)
    timer.start()
    try:
        env, err = _make(capsys)
    finally:
        timer.cancel()
    assert not blocked, "reset() blocked on the FIFO"
    _missed(err, entry, "not a regular file")
    _replaced(env, entry, warm)  # the FIFO itself replaced by the rebuilt entry


# ------------------------------------------------------------------------------- item 9: a link out of the folder
def test_a_link_to_an_outside_file_is_a_miss_and_its_target_is_not_touched(cache, warm, tmp_path, capsys) -> None:
    _folder, entry = cache
    outside = tmp_path / "elsewhere" / "valid-entry.npz"
    outside.parent.mkdir()
    outside.write_bytes(warm[1][entry.name])  # a valid entry: the old code served it, and touched it
    os.utime(outside, (1_000_000, 1_000_000))
    entry.unlink()
    entry.symlink_to(outside)
    env, err = _make(capsys)
    _missed(err, entry, "not a regular file")
    st = outside.stat()
    assert (st.st_mtime, st.st_atime) == (1_000_000, 1_000_000)  # not read, not touched
    assert outside.read_bytes() == warm[1][entry.name]
    _replaced(env, entry, warm)  # the link itself replaced, its target left as it was


def test_a_hard_link_to_an_outside_file_is_a_miss_and_its_file_is_not_touched(cache, warm, tmp_path, capsys) -> None:
    """A hard link is a regular file, so lstat does not tell it from an entry, but its file also has a name
    outside the cache folder: it is refused from its link count, never opened or touched, and only its name in
    the cache folder is replaced (the other name keeps the file as it was)."""
    _folder, entry = cache
    outside = tmp_path / "elsewhere.npz"
    outside.write_bytes(warm[1][entry.name])  # a valid entry: reading it would touch the user's file
    os.utime(outside, (1_000_000, 1_000_000))
    entry.unlink()
    try:
        os.link(outside, entry)
    except OSError as exc:  # a file system without hard links
        pytest.skip(f"no hard links here ({exc})")
    env, err = _make(capsys)
    _missed(err, entry, "a hard link (2 names share its file")
    st = outside.stat()
    assert (st.st_mtime, st.st_atime, st.st_nlink) == (1_000_000, 1_000_000, 1)  # not read, not touched; unlinked
    assert outside.read_bytes() == warm[1][entry.name]
    _replaced(env, entry, warm)


def test_an_entry_larger_than_the_cap_is_refused_from_its_size_unread(cache, warm, capsys) -> None:
    """A sparse file of 1 TiB at the entry's name (no disk used): refused from its size, not a byte read."""
    _folder, entry = cache
    entry.unlink()
    with open(entry, "wb") as fh:
        fh.truncate(2**40)
    env, err = _make(capsys)  # (the code before read 64 MiB of it first, then said "more than 67,108,864 bytes")
    _missed(err, entry, "1,099,511,627,776 bytes; allowed: <= 67,108,864")
    _replaced(env, entry, warm)


# ---------------------------------------------------------------------------- item 8: well-formed, wrong numbers
def _arrays(data: bytes) -> dict[str, np.ndarray]:
    z = np.load(io.BytesIO(data), allow_pickle=False)
    return {k: z[k] for k in z.files}


def _save(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _spoil(data: bytes, how: str, resign: bool) -> bytes:
    """An entry whose best fits are zeroed, or whose energies are x 1000; ``resign``: with the digest in its
    ``meta`` recomputed for the edited arrays (as someone forging an entry would)."""
    a = _arrays(data)
    f = a["e_f"].copy()
    col = table_cache._FLOATS.index("energy_j_per_token")
    if how == "zero best fits":
        best = a["e_slot"] == 0
        for c in ("latency_s", "period_s", "energy_j_per_token", "usd_per_token", "tokens_per_s"):
            f[best, table_cache._FLOATS.index(c)] = 0.0
    elif how == "energy x 1000":
        f[:, col] *= 1000.0
    elif how == "a best fit dropped":
        keep = np.ones(a["e_slot"].size, dtype=bool)
        keep[int(np.flatnonzero(a["e_slot"] == 0)[-1])] = False
        a = {k: (v[keep] if k.startswith("e_") else v) for k, v in a.items()}
        f = a["e_f"]
    a["e_f"] = f
    meta = json.loads(a["meta"].tobytes())
    if resign and "digest" in meta:  # (an entry of the code before digests has none to forge)
        meta["digest"] = table_cache.arrays_digest(meta["key"], a)
        a["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    return _save(a)


@pytest.mark.parametrize("how", ["zero best fits", "energy x 1000"])
def test_an_edited_entry_is_a_miss_through_gym_make(how: str, cache, warm, capsys) -> None:
    _folder, entry = cache
    entry.write_bytes(_spoil(warm[1][entry.name], how, resign=False))
    env, err = _make(capsys)
    _missed(err, entry, "its arrays differ from the digest stored with them")
    _replaced(env, entry, warm)


@pytest.mark.parametrize(("how", "why"), [("zero best fits", "differ from this code's"),
                                          ("energy x 1000", "differ from this code's"),
                                          ("a best fit dropped", "best fits do not cover the buckets")])
def test_a_forged_entry_with_a_matching_digest_is_still_refused(how: str, why: str, cache, warm, capsys) -> None:
    """The digest only says the arrays are the ones written; a re-derived sample of buckets and the coverage
    check say the numbers are this code's for these inputs."""
    _folder, entry = cache
    entry.write_bytes(_spoil(warm[1][entry.name], how, resign=True))
    env, err = _make(capsys)
    _missed(err, entry, why)
    _replaced(env, entry, warm)


def test_a_clean_warm_cache_is_read_silently(cache, warm, capsys) -> None:
    """The control: the same path with the entries as written is a silent hit (nothing rebuilt or rewritten)."""
    folder, _entry = cache
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    env, err = _make(capsys)
    assert err == ""
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert env.unwrapped.catalog.scoring_table.best == warm[2].best


def test_a_kind_folder_that_links_out_is_neither_read_written_nor_pruned(cache, warm, tmp_path, capsys) -> None:
    """The entries' folder itself a link to a folder elsewhere (holding a valid entry and an unrelated file):
    nothing there is read, touched, written or pruned; the tables are rebuilt and kept in memory only."""
    folder, _entry = cache
    outside = tmp_path / "elsewhere"
    shutil.move(folder, outside)
    (outside / "unrelated.npz").write_bytes(b"not servegym's")
    for p in outside.iterdir():
        os.utime(p, (1_000_000, 1_000_000))
    before = {p.name: (p.read_bytes(), p.stat().st_mtime) for p in outside.iterdir()}
    folder.symlink_to(outside, target_is_directory=True)
    env, err = _make(capsys)
    assert "its folder is a symbolic link" in err and err.count("\n") == 1, err  # one line per table's entry
    assert {p.name: (p.read_bytes(), p.stat().st_mtime) for p in outside.iterdir()} == before
    assert env.unwrapped.catalog.scoring_table.best == warm[2].best


# ----------------------------------------------------------------- files that are not this entry at its name
def _declared_huge(data: bytes) -> bytes:
    """``data`` with ``e_f.npy``'s header declaring 2^37 x 6 float64 (6 TiB) over the same few bytes: numpy would
    allocate the declared shape before reading a byte."""
    src = zipfile.ZipFile(io.BytesIO(data))
    members = {i.filename: src.read(i) for i in src.infolist()}
    n = _arrays(data)["e_f"].nbytes
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f8", "fortran_order": False, "shape": (2**37, 6)})
    members["e_f.npy"] = head.getvalue() + members["e_f.npy"][-n:]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as out:
        for name, raw in members.items():
            out.writestr(name, raw)
    return buf.getvalue()


def _stale(data: bytes) -> bytes:
    """A valid entry of other inputs at this name: its stored key is not its name (digest recomputed for it)."""
    a = _arrays(data)
    meta = json.loads(a["meta"].tobytes())
    meta["key"] = "0" * 64
    meta["digest"] = table_cache.arrays_digest(meta["key"], a)
    a["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    return _save(a)


@pytest.mark.parametrize(("case", "why"), [
    ("declared huge", "member 'e_f.npy' declares a shape larger than its data"),
    ("stale key", "key differs from the file name (stale)"),
    ("a text file", "not a zip file"),
    ("another .npz", "member 'mean.npy' is not one this entry holds"),
    ("a folder", "not a regular file"),
])
def test_a_file_that_is_not_this_entry_is_a_miss_through_gym_make(case: str, why: str, cache, warm, capsys) -> None:
    """What the fuzz run (benchmarks/input_fuzz.py) crafts at the entry's name: a header declaring 6 TiB is refused
    from the header (never allocated), a stale entry by its stored key, foreign files by their members; each is a
    one-line miss, and the rebuilt entry replaces it (a folder is left alone: rebuilt each time, never removed)."""
    _folder, entry = cache
    data = warm[1][entry.name]
    entry.unlink()
    if case == "a folder":
        entry.mkdir()
        (entry / "inside.npz").write_bytes(data)
    else:
        entry.write_bytes({"declared huge": _declared_huge, "stale key": _stale,
                           "a text file": lambda d: b"just some text\n",
                           "another .npz": lambda d: _save({"mean": _arrays(d)["slo_val"]})}[case](data))
    env, err = _make(capsys)
    _missed(err, entry, why)
    if case != "a folder":
        _replaced(env, entry, warm)
        return
    # a folder is never removed (it may hold anything): the tables are rebuilt, and the folder is left as it was
    assert env.unwrapped.catalog.scoring_table.best == warm[2].best
    assert [p.name for p in entry.iterdir()] == ["inside.npz"] and (entry / "inside.npz").read_bytes() == data


def test_pruning_removes_links_never_their_targets(cache, warm, tmp_path, capsys) -> None:
    """A cold build writes its entry and prunes the folder to MAX_ENTRIES; 40 older 'entries' there are links
    to files outside the cache folder: the links beyond the limit are removed, no target is read, touched or
    deleted."""
    folder, entry = cache
    entry.unlink()
    outside = tmp_path / "users-files"
    outside.mkdir()
    for i in range(40):
        target = outside / f"f{i}.npz"
        target.write_bytes(b"the user's own file")
        os.utime(target, (1_000_000, 1_000_000))
        link = folder / f"{i:064x}.npz"
        link.symlink_to(target)
        os.utime(link, (2_000_000 + i, 2_000_000 + i), follow_symlinks=False)
    env, err = _make(capsys)
    assert err.count("\n") == 1 and err.startswith("servegym: building the npu best-fit tables"), err
    _replaced(env, entry, warm)
    names = {p.name for p in folder.iterdir()}
    assert entry.name in names and len(names) == user_cache.MAX_ENTRIES
    assert {f"{i:064x}.npz" for i in range(40 - (user_cache.MAX_ENTRIES - 1), 40)} <= names  # the oldest links gone
    for i in range(40):
        target = outside / f"f{i}.npz"
        st = target.stat()  # before this reads it: nothing else did (access time as set), nor touched or removed it
        assert (st.st_mtime, st.st_atime) == (1_000_000, 1_000_000)
        assert target.read_bytes() == b"the user's own file"
