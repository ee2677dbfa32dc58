"""Scale-out training on RLlib: PPO on a two-node local Ray cluster against SB3's PPO on the same env and budget.

Usage (in the environment of the ``rllib`` extra, which pins an older gymnasium; about 2 min on a quiet
shared 2-core machine; not in CI)::

    python3.11 -m venv .venv-rllib && .venv-rllib/bin/pip install "torch==2.13.0" -e ".[rl,rllib,marl]"
    nice -n 15 .venv-rllib/bin/python benchmarks/rllib_scaleout.py [--steps 16384] [--ma-steps 8192]

1. Starts a Ray cluster on this machine: ``ray start --head --num-cpus 1`` and a worker node
   ``ray start --address HEAD --num-cpus 1`` with its own temporary folder.
2. RLlib PPO (new API stack, one env runner of 1 CPU on each node, the learner in the driver) trains on
   PDProvision-v0 (one-day episodes) and, through RLlib's ``ParallelPettingZooEnv``, on the multi-agent geo
   env (the small preset's 2 regional schedulers sharing one policy) until the budget's env steps are
   sampled. The nodes the env runners ran on are recorded.
3. SB3's PPO trains on the same env with the same budget and the same PPO settings (2 envs, the same
   samples per update, minibatch, epochs, learning rate, network), in one process (the multi-agent env
   through SuperSuit's parameter sharing, as benchmarks/marl_learnability.py does: 2 copies of the env,
   one vector slot per agent and copy).
4. Throughput: env steps per wall second and per CPU second. SB3's CPU time is its process's; RLlib's
   is the driver's plus every process of both Ray nodes (user + system from /proc, read before training
   and after it, while every process still lives), so the cluster's own upkeep during training counts.

Always stops both nodes (SIGTERM, then SIGKILL: ``ray stop``, limited to this cluster's processes, since
``ray stop`` stops every Ray of the machine) and checks that no process of the cluster is left. Writes
``benchmarks/results/rllib_scaleout.md`` and ``rllib_scaleout.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ray_fault import node_processes

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results"
BIN = Path(sys.executable).parent
PD_ID = "servegym/PDProvision-v0"
#: The multi-agent geo run: the small preset (2 regions, so 2 regional schedulers), 10 s of arrivals per
#: episode (about 1,500 parallel steps).
GEO_MA_CONFIG: dict[str, Any] = {"preset": "small", "geo": {"duration_s": 10.0}}
GEO_MA_NAME = "geo multi-agent (small, 2 agents)"
#: PPO settings shared by both libraries (per update: 2 envs x ROLLOUT env steps).
N_ENVS, ROLLOUT, MINIBATCH, EPOCHS, LR, NET = 2, 512, 128, 5, 3e-4, [64, 64]


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of the given live processes (from /proc/PID/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / tick


class Cluster:
    """A head and a worker node on this machine, each with ``cpus`` CPUs and its own temporary folder, with
    token authentication (a fresh token in the work folder: a token file another Ray left in ``~/.ray`` would
    otherwise make the worker node's connection fail)."""

    def __init__(self, port: int, cpus: int = 1) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="rl_"))  # short: Ray's socket paths must fit in 107 bytes
        token = self.work / "token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        self.head = f"127.0.0.1:{port}"
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1",
                    "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
        self.port, self.cpus = port, cpus

    def start(self) -> None:
        os.environ.update(self.env)  # the driver's ray.init reads the same token
        ray = str(BIN / "ray")
        subprocess.run([ray, "start", "--head", "--num-cpus", str(self.cpus), "--port", str(self.port),
                        "--temp-dir", str(self.work / "h"), "--include-dashboard", "false",
                        "--disable-usage-stats"], env=self.env, check=True, capture_output=True)
        subprocess.run([ray, "start", "--address", self.head, "--num-cpus", str(self.cpus), "--temp-dir",
                        str(self.work / "w"), "--disable-usage-stats"], env=self.env, check=True,
                       capture_output=True)

    def pids(self) -> list[int]:
        return sorted(set(node_processes(self.work / "h")[0]) | set(node_processes(self.work / "w")[0]))

    def stop(self) -> int:
        """Stop both nodes: what ``ray stop`` does (SIGTERM, then SIGKILL after a grace period), but only to
        this cluster's processes (``ray stop`` would also stop any other Ray on a shared machine). Returns the
        number of this cluster's processes left."""
        for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            for pid in self.pids():
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.5)
        left = len(self.pids())
        shutil.rmtree(self.work, ignore_errors=True)
        return left


def rllib_config(multi_agent: bool, seed: int) -> Any:
    """RLlib PPO with the shared settings, one 1-CPU env runner per node."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    from servegym.rllib_envs import GEO_MULTI_AGENT, SINGLE_AGENT

    cfg = PPOConfig()
    if multi_agent:
        cfg = (cfg.environment(GEO_MULTI_AGENT, env_config={"config": GEO_MA_CONFIG})
               .multi_agent(policies={"shared"}, policy_mapping_fn=lambda agent_id, *a, **k: "shared"))
    else:
        cfg = cfg.environment(SINGLE_AGENT, env_config={"id": PD_ID})
    return (cfg.env_runners(num_env_runners=N_ENVS, num_envs_per_env_runner=1, num_cpus_per_env_runner=1,
                            rollout_fragment_length=ROLLOUT)
            .learners(num_learners=0)
            .training(train_batch_size_per_learner=N_ENVS * ROLLOUT, minibatch_size=MINIBATCH,
                      num_epochs=EPOCHS, lr=LR, gamma=0.99, lambda_=0.95)
            .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=NET))
            .debugging(seed=seed))


def run_rllib(cluster: Cluster, multi_agent: bool, steps: int, seed: int) -> dict[str, Any]:
    import ray

    from servegym.rllib_envs import register

    register()
    algo = rllib_config(multi_agent, seed).build_algo()
    try:
        nodes = algo.env_runner_group.foreach_env_runner(lambda r: ray.get_runtime_context().get_node_id(),
                                                         local_env_runner=False)
        c0, p0, t0 = _cpu_seconds(cluster.pids()), time.process_time(), time.perf_counter()
        sampled, agent_steps, iters, ret = 0, 0, 0, float("nan")
        while sampled < steps:
            res = algo.train()
            iters += 1
            runners = res.get("env_runners", {})
            sampled = int(runners.get("num_env_steps_sampled_lifetime", 0))
            agent_steps = int(sum(runners.get("num_agent_steps_sampled_lifetime", {}).values())) \
                if isinstance(runners.get("num_agent_steps_sampled_lifetime"), dict) else sampled
            ret = float(runners.get("episode_return_mean", float("nan")))
        wall = time.perf_counter() - t0
        cpu = (time.process_time() - p0) + (_cpu_seconds(cluster.pids()) - c0)
    finally:
        algo.stop()
    return {"library": "RLlib PPO", "env_steps": sampled, "agent_steps": agent_steps, "iterations": iters,
            "wall_s": wall, "cpu_s": cpu, "episode_return_mean": ret, "nodes": len(set(nodes)),
            "env_runners": len(nodes)}


def run_sb3(multi_agent: bool, steps: int, seed: int) -> dict[str, Any]:
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.utils import set_random_seed

    import servegym  # noqa: F401

    torch.set_num_threads(1)
    set_random_seed(seed)
    agents = 1
    if multi_agent:
        import supersuit as ss
        from servegym.envs.geo import parallel_env

        env = parallel_env(config=GEO_MA_CONFIG)
        env.reset(seed=seed)  # seeds the draws of SuperSuit's unseeded resets
        agents = len(env.possible_agents)
        # N_ENVS copies x one slot per agent; a slot step is an agent step (SB3 counts those)
        vec = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(env), N_ENVS, num_cpus=0,
                                    base_class="stable_baselines3")
    else:
        vec = make_vec_env(lambda: gym.make(PD_ID), n_envs=N_ENVS, seed=seed)
    model = PPO("MlpPolicy", vec, n_steps=ROLLOUT, batch_size=MINIBATCH, n_epochs=EPOCHS, learning_rate=LR,
                gamma=0.99, gae_lambda=0.95, policy_kwargs={"net_arch": NET}, device="cpu", verbose=0)
    p0, t0 = time.process_time(), time.perf_counter()
    model.learn(total_timesteps=steps * agents)
    wall, cpu = time.perf_counter() - t0, time.process_time() - p0
    vec.close()
    agent_steps = int(model.num_timesteps)
    return {"library": "SB3 PPO", "env_steps": agent_steps // agents, "agent_steps": agent_steps,
            "iterations": agent_steps // (vec.num_envs * ROLLOUT), "wall_s": wall, "cpu_s": cpu, "nodes": 1,
            "env_runners": 0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=16384, help="PDProvision-v0 env steps per library")
    ap.add_argument("--ma-steps", type=int, default=8192, help="multi-agent geo env steps per library")
    ap.add_argument("--port", type=int, default=6393)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT / "rllib_scaleout.md")
    args = ap.parse_args(argv)
    rep: dict[str, Any] = {"date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"), "cpus": os.cpu_count(),
                           "steps": args.steps, "ma_steps": args.ma_steps, "seed": args.seed,
                           "versions": _versions(), "runs": []}
    cluster = Cluster(args.port)
    try:
        cluster.start()
        import ray  # after start(): Ray reads the authentication settings when imported

        rep["cluster"] = "head (1 CPU) + worker node (1 CPU), one machine, separate temporary folders"
        ray.init(address=cluster.head, log_to_driver=False, configure_logging=False)
        for name, ma, steps in (("PDProvision-v0", False, args.steps), (GEO_MA_NAME, True,
                                                                         args.ma_steps)):
            print(f"[{time.strftime('%H:%M:%S')}] RLlib PPO on {name}, {steps} env steps", flush=True)
            rep["runs"].append({"env": name, **run_rllib(cluster, ma, steps, args.seed)})
        ray.shutdown()
    finally:
        rep["ray_processes_left"] = cluster.stop()
    for name, ma, steps in (("PDProvision-v0", False, args.steps), (GEO_MA_NAME, True, args.ma_steps)):
        print(f"[{time.strftime('%H:%M:%S')}] SB3 PPO on {name}, {steps} env steps", flush=True)
        rep["runs"].append({"env": name, **run_sb3(ma, steps, args.seed)})
    _write(args.out, rep)
    print(args.out.read_text())
    ok = rep["ray_processes_left"] == 0 and all(r["nodes"] == 2 for r in rep["runs"] if r["library"] != "SB3 PPO")
    return 0 if ok else 1


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in ("ray", "gymnasium", "stable-baselines3", "torch", "pettingzoo", "supersuit"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def _write(out: Path, rep: dict[str, Any]) -> None:
    lines = [
        "# Scale-out on RLlib: PPO on a two-node local Ray cluster vs SB3",
        "",
        f"Generated by `benchmarks/rllib_scaleout.py` on {rep['date']} ({rep['cpus']} cores shared with other "
        "jobs, niced). " + ", ".join(f"{k} {v}" for k, v in rep["versions"].items()) + ".",
        "",
        f"- Cluster: {rep.get('cluster', 'not started')}; RLlib: one env runner (1 CPU) per node, the learner "
        "in the driver. SB3: one process, 2 envs (DummyVecEnv; the multi-agent env: 2 copies through SuperSuit, "
        "one vector slot per agent and copy, so SB3 counts agent steps).",
        f"- Same PPO settings in both: {N_ENVS * ROLLOUT} env steps per update ({N_ENVS} envs x {ROLLOUT}), minibatch {MINIBATCH}, {EPOCHS} "
        f"epochs, learning rate {LR}, gamma 0.99, GAE lambda 0.95, network {NET}; no action masks; seed "
        f"{rep['seed']}.",
        "- CPU seconds: SB3's process; RLlib's driver plus every process of both nodes (from /proc, before and "
        "after training).",
        f"- After stopping both nodes: {rep['ray_processes_left']} processes of the cluster left.",
        "",
        "| env | library | env steps | agent steps | updates | nodes used | wall s | CPU s | env steps/s "
        "| env steps per CPU-s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rep["runs"]:
        lines.append(f"| {r['env']} | {r['library']} | {r['env_steps']:,} | {r['agent_steps']:,} | "
                     f"{r['iterations']} | {r['nodes']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | "
                     f"{r['env_steps'] / r['wall_s']:.0f} | {r['env_steps'] / r['cpu_s']:.0f} |")
    lines += ["", "Ratios (RLlib / SB3, same env):", ""]
    for env in dict.fromkeys(r["env"] for r in rep["runs"]):
        a = next(r for r in rep["runs"] if r["env"] == env and r["library"] == "RLlib PPO")
        b = next(r for r in rep["runs"] if r["env"] == env and r["library"] == "SB3 PPO")
        lines.append(f"- {env}: steps per wall-s x{(a['env_steps'] / a['wall_s']) / (b['env_steps'] / b['wall_s']):.2f}, "
                     f"steps per CPU-s x{(a['env_steps'] / a['cpu_s']) / (b['env_steps'] / b['cpu_s']):.2f}.")
    lines += ["", "Raw figures: `rllib_scaleout.json`.", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    for path, text in ((out.with_suffix(".json"), json.dumps(rep, indent=2) + "\n"), (out, "\n".join(lines))):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)  # atomic: a reader never sees half a file


if __name__ == "__main__":
    sys.exit(main())
