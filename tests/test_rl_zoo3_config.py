"""The rl-zoo3 conf file docs/clients.md describes (benchmarks/rl_zoo3/ppo.yml): it parses, is keyed by registered
servegym ids, and every entry builds an SB3 PPO on its env (rl-zoo3 itself is not installed in CI: it pulls
optuna and the Hugging Face hub, beyond what the suite needs)."""

from __future__ import annotations

import ast
from pathlib import Path

import gymnasium as gym
import pytest

import servegym  # noqa: F401  (registers the ids)

CONF = Path(__file__).resolve().parents[1] / "benchmarks" / "rl_zoo3" / "ppo.yml"
ZOO_ONLY = {"n_envs", "n_timesteps", "policy", "normalize"}  # rl-zoo3's own keys, not PPO arguments


def _kwargs_literal(text: str) -> dict:
    """``dict(a=1, ...)`` or ``{...}`` (rl-zoo3 evaluates these strings) as a dict, literals only."""
    node = ast.parse(text, mode="eval").body
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
        return {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    return ast.literal_eval(node)


def _entries() -> dict:
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load(CONF.read_text())


def test_conf_is_keyed_by_registered_ids() -> None:
    conf = _entries()
    assert "servegym/PDProvision-v0" in conf  # the docs' example
    for env_id, hp in conf.items():
        assert env_id in gym.registry
        assert {"n_timesteps", "policy", "n_envs"} <= set(hp)


@pytest.mark.parametrize("env_id", ["servegym/PDProvision-v0", "servegym/GeoRouteWindow-v0"])
def test_each_entry_builds_a_ppo(env_id: str) -> None:
    pytest.importorskip("stable_baselines3", reason="needs the rl extra: pip install -e '.[rl]'")
    from stable_baselines3 import PPO

    hp = dict(_entries()[env_id])
    if isinstance(hp.get("normalize"), str):
        assert set(_kwargs_literal(hp["normalize"])) <= {"norm_obs", "norm_reward"}
    kwargs = {k: v for k, v in hp.items() if k not in ZOO_ONLY}
    kwargs["policy_kwargs"] = _kwargs_literal(kwargs["policy_kwargs"])
    env = gym.make(env_id)
    try:
        model = PPO(hp["policy"], env, device="cpu", **kwargs)
        assert model.n_steps == hp["n_steps"]
    finally:
        env.close()
