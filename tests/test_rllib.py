"""RLlib (Ray's RL library) on servegym's envs through :mod:`servegym.rllib_envs`.

The creators' argument checks run everywhere (they need no Ray). The training check needs ``ray[rllib]``,
which pins an older gymnasium than the dev install and so lives in its own environment (the ``rllib``
extra): without it the test skips, saying so. benchmarks/rllib_scaleout.py runs the same training on a
two-node Ray cluster and measures its throughput against SB3.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servegym.errors import ConfigError
from servegym.rllib_envs import make_env

PD_SMALL: dict[str, Any] = {"id": "servegym/PDProvision-v0", "kwargs": {"config": {"scenario": {"horizon_steps": 24}}}}
GEO_SMALL: dict[str, Any] = {"config": {"preset": "small", "geo": {"duration_s": 2.0}}}  # 2 agents
NO_RLLIB = "ray[rllib] is not installed: it pins gymnasium 1.2, so it has its own environment (pip install -e '.[rllib]')"


def test_make_env_builds_the_id_and_its_mask_observation() -> None:
    env = make_env(PD_SMALL)
    assert env.spec is not None and env.spec.id == "servegym/PDProvision-v0"
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    masked = make_env({**PD_SMALL, "action_mask_obs": True})
    obs, _ = masked.reset(seed=0)
    assert set(obs) == {"observation", "action_mask"} and obs["action_mask"].dtype == np.int8


def test_make_env_rejects_unknown_keys_and_ids_in_one_line() -> None:
    with pytest.raises(TypeError, match=r"make_env\(\) got an unexpected keyword argument 'idd'"):
        make_env({"idd": "servegym/PDProvision-v0"})
    with pytest.raises(ConfigError, match=r"env_config\.id = 'CartPole-v1'; allowed: a servegym id"):
        make_env({"id": "CartPole-v1"})
    with pytest.raises(ConfigError, match=r"env_config\.kwargs = 3; allowed: a mapping"):
        make_env({"id": "servegym/PDProvision-v0", "kwargs": 3})


@pytest.mark.slow  # one local Ray instance, two one-iteration PPO runs: about 15-20 CPU-s
def test_rllib_ppo_trains_on_pd_and_on_the_multi_agent_geo_env() -> None:
    """RLlib's PPO (its default new API stack) samples and updates on PDProvision-v0 and, through
    ``ParallelPettingZooEnv``, on the multi-agent geo env with one policy shared by the schedulers."""
    pytest.importorskip("ray.rllib", reason=NO_RLLIB)
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    from servegym.rllib_envs import GEO_MULTI_AGENT, SINGLE_AGENT, register

    temp = Path(tempfile.mkdtemp(prefix="rl"))  # short: Ray's socket paths must fit in 107 bytes
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False,
             _temp_dir=str(temp))
    try:
        register()
        base = (PPOConfig().env_runners(num_env_runners=0, rollout_fragment_length=48)
                .learners(num_learners=0)
                .training(train_batch_size_per_learner=96, minibatch_size=48, num_epochs=1)
                .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[16]))
                .debugging(seed=0))
        runs = {
            "pd": base.copy().environment(SINGLE_AGENT, env_config=PD_SMALL),
            "geo-ma": base.copy().environment(GEO_MULTI_AGENT, env_config=GEO_SMALL).multi_agent(
                policies={"shared"}, policy_mapping_fn=lambda agent_id, *args, **kwargs: "shared"),
        }
        for name, config in runs.items():
            algo = config.build_algo()
            try:
                result = algo.train()
            finally:
                algo.stop()
            runners, learners = result["env_runners"], result["learners"]
            assert runners["num_env_steps_sampled_lifetime"] >= 96, name
            module = "default_policy" if name == "pd" else "shared"
            assert np.isfinite(learners[module]["total_loss"]), name
            assert learners[module]["num_module_steps_trained"] > 0, name
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
