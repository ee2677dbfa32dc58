"""The env cards in docs/cards/ are the code's own description of every id: regenerating a card gives the committed
file byte for byte, so a change to an env's spaces, observation names, ``info`` keys, config fields, allowed values
or documented reward/splits that is not followed by ``python -m servegym.env_cards`` fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import REPO_ROOT

from servegym import env_cards
from servegym.env_ids import servegym_ids

CARDS = REPO_ROOT / "docs" / "cards"


@pytest.mark.parametrize("env_id", servegym_ids())
def test_committed_card_matches_the_env(env_id: str) -> None:
    path = env_cards.card_path(CARDS, env_id)
    assert path.is_file(), f"{path} missing; run python -m servegym.env_cards"
    assert env_cards.card(env_id) == path.read_text(encoding="utf-8"), (
        f"{path.relative_to(REPO_ROOT)} disagrees with {env_id}; run python -m servegym.env_cards")


def test_every_card_is_included_by_its_family_page() -> None:
    for env_id in servegym_ids():
        name = env_id.split("/")[-1]
        page = (REPO_ROOT / "docs" / f"{env_cards.family_of(env_id)}.md").read_text(encoding="utf-8")
        assert f'--8<-- "cards/{name}.md"' in page, (env_id, "not included by its family page")
    assert sorted(p.name for p in CARDS.glob("*.md")) == sorted(f"{i.split('/')[-1]}.md" for i in servegym_ids())


def test_the_check_sees_a_stale_card(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env_id = "servegym/PDProvisionFront-v0"
    stale = env_cards.card(env_id).replace("Discrete(22)", "Discrete(23)")
    env_cards.card_path(tmp_path, env_id).write_text(stale, encoding="utf-8")
    assert env_cards.main(["--out", str(tmp_path), "--check", env_id]) == 1
    assert "out of date" in capsys.readouterr().err


def test_a_card_states_what_the_env_has() -> None:
    """The parts a user reads first: spaces, every observation entry counted, the info keys of a real step, and
    the allowed values its validation enforces."""
    import gymnasium as gym

    text = (CARDS / "PDProvision-v0.md").read_text(encoding="utf-8")
    env = gym.make("servegym/PDProvision-v0")
    assert f"`{env.observation_space}`" in text and f"`{env.action_space}`" in text
    assert f"({len(env_cards.observation_names(env))} entries" in text
    assert "| `energy_kwh` | - | float |" in text and "| `gpu_budget` | `int` | `16` | [2, 512] |" in text
    env.close()


def test_docstring_sections_fail_loudly_when_missing() -> None:
    with pytest.raises(LookupError, match="no paragraph"):
        env_cards.section_text(env_cards.Section("servegym.envs.pd.env", r"\*\*No such heading\*\*"), "")


@pytest.mark.parametrize("env_id", servegym_ids())
def test_every_info_key_the_card_names_is_one_the_env_returns(env_id: str) -> None:
    """The card's `info` prose (from the env's docstring) names only keys the env really returns after reset, a
    step or at the episode's end (the table under it, generated from real infos, the committed card equal to
    it by the test above): geo's `episode_metrics`, present only at the end, is in the table's end column."""
    text = env_cards.card_path(CARDS, env_id).read_text(encoding="utf-8")
    section = text.split("### `info`", 1)[1].split("### Episode end", 1)[0]
    prose, table = section.split("Keys after `reset(seed=0)`", 1)
    named = env_cards.info_key_names(prose)
    returned = set(re.findall(r"^\| `([a-z0-9_]+)` \|", table, flags=re.M))
    assert named, f"{env_id}'s card names no info key in its prose"
    assert named <= returned, f"{env_id}'s card names info keys the env does not return: {sorted(named - returned)}"


def test_the_end_column_holds_the_keys_only_the_last_step_has() -> None:
    info = env_cards.end_info("servegym/GeoRouteWindow-v0")
    assert "episode_metrics" in info
    text = env_cards.card_path(CARDS, "servegym/GeoRouteWindow-v0").read_text(encoding="utf-8")
    assert re.search(r"^\| `episode_metrics` \| - \| - \| dict \(", text, flags=re.M)
