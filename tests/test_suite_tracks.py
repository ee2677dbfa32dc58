"""The suite's sections keyed by (env id, stress track): one leaderboard with a section per track, each track's
stored run under its id's file, shipped models per section, replay per section, and no track's episodes mixed into
another section (servegym.agents.benchmark, servegym.agents.replay)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from servegym.agents import benchmark as bm
from servegym.agents import protocol
from servegym.agents import replay as rp

from servegym.errors import ConfigError

GEO = "servegym/GeoRoute-v0"
TINY = {"preset": "mini", "geo": {"duration_s": 1.5, "drain_s": 10.0}}


def _entry(track: str | None) -> bm.SuiteEntry:
    config = {**TINY, **({"track": track} if track else {})}
    return bm.SuiteEntry(GEO, "maskable-ppo", {"config": config}, 128, 1, 2, 1, evals=1, baselines=("greedy:0.5",),
                         note="1.5-s mini episodes" + (f" on track {track}" if track else ""))


ENTRIES = (_entry(None), _entry("stress-load"), _entry("stress-osl"))


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path]]:
    """A smoke-sized suite of one id on its default split and on two stress tracks (1 seed, 2 test episodes)."""
    tmp = tmp_path_factory.mktemp("tracks")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(bm.SUITE, "smoke", ENTRIES)
        res = bm.run_suite("smoke", out_dir=tmp / "results", run_dir=tmp / "runs", workers=1, progress=False, tb=False)
        yield res, tmp


def test_sections_are_keyed_by_id_and_track() -> None:
    assert [e.section for e in ENTRIES] == [GEO, f"{GEO}@stress-load", f"{GEO}@stress-osl"]
    assert [e.track for e in ENTRIES] == [None, "stress-load", "stress-osl"]
    quick = [e.section for e in bm.SUITE["quick"]]
    assert len(set(quick)) == len(quick)  # every section once
    assert "servegym/GeoRoute-v0@stress-load" in quick and "servegym/GeoRouteWindow-v0@stress-osl" in quick
    # an id alone selects its section without a track; a key no entry has is refused
    assert [e.section for e in bm.select_entries("quick", [GEO])] == [GEO]
    with pytest.raises(ConfigError, match="allowed"):
        bm.select_entries("quick", [f"{GEO}@no-such-track"])


def test_leaderboard_has_a_section_per_track(tracked: tuple[Any, Path]) -> None:
    res, tmp = tracked
    out = tmp / "results"
    records = json.loads((out / "leaderboard_smoke.json").read_text())
    assert {(r["env"], r["track"]) for r in records} == {(GEO, None), (GEO, "stress-load"), (GEO, "stress-osl")}
    for e in ENTRIES:
        mine = [r for r in records if r["track"] == e.track]
        y = protocol.yardsticks(GEO, e.env_kwargs)
        roles = {r["role"]: r["policy"] for r in mine}
        # the section's own yardsticks: on stress-load the track's strongest rule and causal reference
        assert roles["strongest"] == y.strongest and roles["oracle"] == y.oracle
        assert ("causal" in roles) == (y.causal is not None)
        agent = next(r for r in mine if r["role"] == "agent")
        assert agent["episodes"] == 2  # one seed x 2 test episodes: no other section's episodes
    assert {r["policy"] for r in records if r["track"] == "stress-load"} >= {"ll", "iter-ilp+dr:1.5"}
    board = res.leaderboard
    assert list(dict.fromkeys(board.track)) == ["", "stress-load", "stress-osl"]
    md = (out / "leaderboard_smoke.md").read_text()
    assert f"## {GEO}\n" in md and f"## {GEO}, stress track stress-load\n" in md
    assert f"## {GEO}, stress track stress-osl\n" in md
    # one stored file for the id, its tracks inside it; models shipped per section
    assert sorted(p.name for p in (out / "suite_runs" / "smoke").glob("*.json")) == ["GeoRoute-v0.json"]
    data = json.loads((out / "suite_runs" / "smoke" / "GeoRoute-v0.json").read_text())
    assert sorted(data["tracks"]) == ["stress-load", "stress-osl"]
    assert protocol.track_of(data["entry"]["env_kwargs"]) is None
    for e in ENTRIES:
        assert (rp.shipped_folder("smoke", GEO, 0, out / "models", track=e.track) / "model.zip").is_file()
    assert (out / "models" / "smoke" / "GeoRoute-v0@stress-load" / "s0" / "model.zip").is_file()


def test_replay_of_a_track_section_is_bit_identical(tracked: tuple[Any, Path], tmp_path: Path) -> None:
    _, tmp = tracked
    section = f"{GEO}@stress-load"
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(bm.SUITE, "smoke", ENTRIES)
        res, checks = rp.replay("smoke", [section], tmp_path / "replay", stored_dir=tmp / "results", workers=1,
                                progress=False)
    assert [c.env_id for c in checks] == [section]
    assert checks[0].ok and checks[0].equal == checks[0].rows == 2
    assert {(r["env"], r["track"]) for r in res.records} == {(GEO, "stress-load")}
    stored = json.loads((tmp / "results" / "suite_runs" / "smoke" / "GeoRoute-v0.json").read_text())
    again = json.loads((tmp_path / "replay" / "suite_runs" / "smoke" / "GeoRoute-v0.json").read_text())
    assert "entry" not in again and list(again["tracks"]) == ["stress-load"]  # only the replayed section
    rows = [r for o in stored["tracks"]["stress-load"]["outputs"] if o["kind"] == "train" for r in o["rows"]]
    assert [r for o in again["tracks"]["stress-load"]["outputs"] if o["kind"] == "train" for r in o["rows"]] == rows


def test_a_stored_run_of_another_track_is_never_mixed_in(tracked: tuple[Any, Path], tmp_path: Path) -> None:
    _, tmp = tracked
    out = tmp_path / "results"
    src = tmp / "results" / "suite_runs" / "smoke"
    (out / "suite_runs" / "smoke").mkdir(parents=True)
    path = out / "suite_runs" / "smoke" / "GeoRoute-v0.json"
    data = json.loads((src / "GeoRoute-v0.json").read_text())
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(bm.SUITE, "smoke", ENTRIES)
        # a section stored under another track's name (as if the track's entry had changed) is left out
        data["tracks"]["stress-osl"]["entry"]["timesteps"] += 1
        path.write_text(json.dumps(data, indent=1) + "\n")  # as the suite writes it
        entries, outs, runs = bm.stored_outputs("smoke", out)
        assert [e.section for e in entries] == [GEO, f"{GEO}@stress-load"] and set(runs) == {e.section for e in entries}
        assert {o["section"] for o in outs} == {GEO, f"{GEO}@stress-load"}
        # each section's board holds its own episodes only (2 test seeds per policy)
        board, _ = bm.leaderboard(entries, outs)
        assert set(board.episodes) == {2}
        # storing one section again keeps the others' stored bytes as they were
        before = path.read_text()
        mine = [o for o in outs if o["section"] == GEO]
        bm.save_entry_outputs(entries[0], mine, "smoke", out, {"wall_s": runs[GEO]["wall_s"],
                                                                "env_ids": runs[GEO]["env_ids"],
                                                                "workers": runs[GEO]["workers"]})
        assert path.read_text() == before
