"""Multi-agent geo learnability: one PPO policy shared by the regional schedulers (SuperSuit parameter
sharing) against round robin, greedy and the facility MILP, under the benchmark protocol.

Usage (the recorded runs: 7-10 min each on the 2-core machine, 1 training process)::

    python benchmarks/marl_learnability.py --mode residual --seeds 5 --timesteps 100000
    python benchmarks/marl_learnability.py --mode direct --seeds 5 --timesteps 100000

Setup: ``servegym.envs.geo.parallel_env`` on the small preset (2 regions, so 2 agents; 4 DCs),
20-s runs, the dense reward (each placement's estimated carbon and SLO risk, settled against the
measurement at each poll), in one of GeoRoute-v0's decision modes: ``direct`` (a DC per request) or
``residual`` (a DC, or the extra action "what the facility MILP's window plan does for this request"). Training
resets draw scenarios from the ``train`` split; each seed's policy is evaluated on 3 ``validation``
episodes at 5 points of training and the best one is kept (the test split is never read while
training); the kept policy then plays 10 ``test`` episodes. The baselines play the same test
scenarios in the single-agent GeoRoute-v0 with the same config, which the parallel env reproduces
exactly (the agents' placements are applied in arrival order by the same core;
``tests/test_geo_parallel.py``), so their KPIs and returns are comparable one to one.

Scores use the protocol (:mod:`servegym.agents.protocol`): 0 = round robin, 100 = the facility MILP, per
test episode, IQM and mean with 95 % stratified-bootstrap CIs over training seeds x test episodes.

Writes ``benchmarks/results/learnability/geo-marl-<mode>_{episodes.csv,curves.csv,curves.png,summary.md}``
and ``geo-marl-<mode>.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ENV_ID = "servegym/GeoRoute-v0"
CONFIG: dict[str, Any] = {"preset": "small", "geo": {"duration_s": 20.0}}
#: GeoRoute-v0's decision modes, as config keys added to CONFIG.
MODES: dict[str, dict[str, Any]] = {"direct": {}, "residual": {"action_mode": "residual", "reference": "milp"}}
BASELINES = ("rr", "greedy:0.5", "moer", "milp")
VALIDATION_SEED, TEST_SEED = 1000, 0
OUT = Path(__file__).resolve().parent / "results" / "learnability"


def play_parallel(model: Any, config: dict[str, Any], split: str, seed: int) -> tuple[float, dict[str, Any]]:
    """One episode of the shared policy (deterministic) in the parallel env; the summed return of all
    agents and the last info (the run's KPIs)."""
    from servegym.envs.geo import parallel_env

    env = parallel_env(config={**config, "split": split})
    obs, infos = env.reset(seed=seed)
    total, info = 0.0, {}
    while env.agents:
        acts = {a: int(model.predict(obs[a], deterministic=True)[0]) for a in env.agents}
        obs, rew, _, _, infos = env.step(acts)
        total += math.fsum(rew.values())
        info = next(iter(infos.values()))
    env.close()
    return total, info


def _metrics(info: dict[str, Any]) -> dict[str, float]:
    """The episode's KPIs as the protocol reads them for every policy: from the run summary in
    ``info["episode_metrics"]`` (carbon over the serving window, as the baselines' rows), not from the
    top-level running values (whose ``carbon_g`` includes the drain, as the return does)."""
    from servegym.agents.families import extract_metrics, family_for

    if "episode_metrics" not in info:
        raise RuntimeError("the parallel env's last info has no episode_metrics: the episode did not complete")
    return extract_metrics([info], family_for(ENV_ID).metrics)


def train_seed(config: dict[str, Any], seed: int, timesteps: int, evals: int, val_episodes: int,
               test_episodes: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], float]:
    """Train one seed, select on validation, play the test episodes: (test rows, curve rows, wall s)."""
    import supersuit as ss
    import torch
    from servegym.envs.geo import parallel_env
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.utils import set_random_seed
    from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

    torch.set_num_threads(1)
    set_random_seed(seed)
    t0 = time.perf_counter()
    env = parallel_env(config={**config, "split": "train"})
    env.reset(seed=seed)  # seeds the draws of SuperSuit's unseeded resets (a new train scenario each episode)
    vec = ss.concat_vec_envs_v1(ss.pettingzoo_env_to_vec_env_v1(env), 1, num_cpus=0,
                                base_class="stable_baselines3")
    # GeoRoute-v0's maskable-ppo hyperparameters (agents/hyperparams/GeoRoute-v0.yml) without masks
    # (SB3's PPO has none; a masked DC is allowed, it only risks SLO misses): the reward is normalized
    # (a miss costs w_slo, a placement ~1e-3 g; unnormalized, every seed froze on one DC), observations
    # are already in [-1, 1]; 2 agents x 1024 steps per update.
    vec = VecNormalize(VecMonitor(vec), norm_obs=False, norm_reward=True, gamma=0.995)
    model = PPO("MlpPolicy", vec, n_steps=1024, batch_size=256, n_epochs=5, gamma=0.995, gae_lambda=0.95,
                learning_rate=3e-4, policy_kwargs={"net_arch": [64, 64]}, device="cpu", verbose=0)
    curve: list[dict[str, Any]] = []
    best: dict[str, Any] = {"score": -math.inf, "params": None}
    every = max(timesteps // evals, 1)

    def validate() -> None:
        rets = [play_parallel(model, config, "validation", VALIDATION_SEED + k)[0] for k in range(val_episodes)]
        mean = float(np.mean(rets))
        curve.append({"train_seed": seed, "timesteps": int(model.num_timesteps), "val_return": mean})
        if mean > best["score"]:
            best.update(score=mean, params={k: v.clone() for k, v in model.policy.state_dict().items()})

    class Every(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps // every > len(curve):
                validate()
            return True

    model.learn(total_timesteps=timesteps, callback=Every())
    if len(curve) < evals:
        validate()
    model.policy.load_state_dict(best["params"])
    rows = []
    for k in range(test_episodes):
        ret, info = play_parallel(model, config, "test", TEST_SEED + k)
        rows.append({"policy": "agent:ppo-shared", "seed": TEST_SEED + k, "reward": ret, "train_seed": seed,
                     **_metrics(info)})
    vec.close()
    return rows, curve, time.perf_counter() - t0


def baseline_rows(config: dict[str, Any], test_episodes: int) -> list[dict[str, Any]]:
    import gymnasium as gym
    from servegym.agents.families import family_for

    import servegym  # noqa: F401

    fam = family_for(ENV_ID)
    env = gym.make(ENV_ID, config=config, split="test")
    rows = []
    for name in BASELINES:
        for k in range(test_episodes):
            r = fam.run_baseline(env, name, TEST_SEED + k)
            rows.append({**r.row(), "train_seed": -1})
    env.close()
    return rows


def episode_results(g: pd.DataFrame) -> list[Any]:
    """Rows of the episodes CSV as the protocol's EpisodeResults (return and the two KPIs it scores)."""
    from servegym.agents.families import EpisodeResult

    return [EpisodeResult(str(r.policy), int(r.seed), float(r.reward), 0,
                          {"carbon_g": float(r.carbon_g), "slo_violation_pct": float(r.slo_violation_pct)})
            for r in g.itertuples()]


def summarize(eps: pd.DataFrame) -> pd.DataFrame:
    from servegym.agents import protocol

    def res(p: str) -> list[Any]:
        return episode_results(eps[eps.policy == p])

    naive, best = res("rr"), res("milp")
    best_scores = protocol.episode_scores(best, naive, best)
    out = []
    for p in eps.policy.unique():
        r = res(p)
        sc = protocol.episode_scores(r, naive, best)
        st = protocol.score_stats(sc)
        poi, _ = protocol.probability_of_improvement(sc, best_scores)
        out.append({"policy": p, "runs": len(r), "score_iqm": st.iqm, "iqm_lo": st.iqm_ci[0], "iqm_hi": st.iqm_ci[1],
                    "score_mean": st.mean, "mean_lo": st.mean_ci[0], "mean_hi": st.mean_ci[1],
                    "p_improve_over_milp": poi,
                    "carbon_g": protocol.mean_metric(r, "carbon_g"),
                    "slo_violation_pct": protocol.mean_metric(r, "slo_violation_pct"),
                    "beats_rr": protocol.beats(r, naive, "carbon_g"),
                    "beats_greedy": protocol.beats(r, res("greedy:0.5"), "carbon_g")})
    return pd.DataFrame(out)


def plot_curves(cur: pd.DataFrame, eps: pd.DataFrame, path: Path, mode: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.2, 3.8))
    for seed, g in cur.groupby("train_seed"):
        ax.plot(g["timesteps"], g["val_return"], marker="o", ms=3, color=plt.cm.Reds(0.45 + 0.1 * int(seed)),
                label=f"shared PPO, seed {seed}")
    ax.set_xlabel("agent steps (both schedulers)")
    # A collapsed checkpoint returns about -5,000 while every baseline sits between -18 and -36: on a
    # linear axis the baselines merge into one line, so the axis is logarithmic beyond |R| = 10.
    ax.set_yscale("symlog", linthresh=10.0)
    ax.set_ylabel("mean validation return (3 episodes, symlog)")
    ax.set_title(f"multi-agent GeoRoute (small, 2 schedulers, 20 s, {mode} mode): validation return\n"
                 "test-split baselines' mean returns dashed (other scenarios, for scale)", fontsize=9)
    for i, p in enumerate(BASELINES):
        ax.axhline(eps[eps.policy == p].reward.mean(), ls="--", lw=0.9, color=plt.cm.tab10(i), label=p)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=tuple(MODES), default="residual", help="GeoRoute-v0's decision mode")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--timesteps", type=int, default=100_000, help="agent steps per training seed")
    ap.add_argument("--evals", type=int, default=5)
    ap.add_argument("--val-episodes", type=int, default=3)
    ap.add_argument("--test-episodes", type=int, default=10)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--rescore", action="store_true",
                    help="rewrite the summary of the recorded run of --mode from its CSVs (no training)")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from tqdm.auto import tqdm

    config = {**CONFIG, **MODES[args.mode]}
    stem = f"geo-marl-{args.mode}"
    if args.rescore:  # the recorded episodes again, under the current protocol code (no training)
        eps = pd.read_csv(args.out / f"{stem}_episodes.csv")
        cur = pd.read_csv(args.out / f"{stem}_curves.csv")
        old = json.loads((args.out / f"{stem}.json").read_text())
        write_outputs(args, config, stem, eps, cur, old["wall_s"], old["wall_per_seed_s"])
        return
    t0 = time.perf_counter()
    rows, curves, walls = baseline_rows(config, args.test_episodes), [], []
    for seed in tqdm(range(args.seeds), desc="training seeds", unit="seed"):
        r, c, w = train_seed(config, seed, args.timesteps, args.evals, args.val_episodes, args.test_episodes)
        rows += r
        curves += c
        walls.append(w)
    write_outputs(args, config, stem, pd.DataFrame(rows), pd.DataFrame(curves), time.perf_counter() - t0,
                  float(np.mean(walls)))


def write_outputs(args: argparse.Namespace, config: dict[str, Any], stem: str, eps: pd.DataFrame,
                  cur: pd.DataFrame, wall_s: float, wall_per_seed_s: float) -> None:
    """The episodes, curves, plot, summary table and JSON of one run."""
    summ = summarize(eps)
    args.out.mkdir(parents=True, exist_ok=True)
    eps.to_csv(args.out / f"{stem}_episodes.csv", index=False)
    cur.to_csv(args.out / f"{stem}_curves.csv", index=False)
    plot_curves(cur, eps, args.out / f"{stem}_curves.png", args.mode)
    seeds = int(eps.train_seed[eps.train_seed >= 0].nunique())
    tests = int(eps[eps.train_seed >= 0].seed.nunique())
    lines = ["# Learnability: multi-agent GeoRoute (PettingZoo parallel_env, SuperSuit parameter sharing)", "",
             f"Config `{json.dumps(config)}` (2 regional schedulers), {args.mode} mode, dense reward; PPO shared by "
             f"the agents, {args.timesteps:,} agent steps x {seeds} seeds, checkpoint chosen on {args.val_episodes} "
             f"validation episodes at {args.evals} points; {tests} test episodes per seed; baselines in "
             "GeoRoute-v0 on the same test scenarios. Score: 0 = rr, 100 = milp (protocol scores: per episode, "
             "scaled by the mean rr-to-milp gap), 95 % bootstrap CIs. "
             f"Beats: lower carbon at SLO violation <= the baseline's + 0.5 pp. Wall: {wall_s:.0f} s "
             f"({wall_per_seed_s:.0f} s per training seed) on the shared 2-core machine.", "",
             "| policy | runs | score IQM [95% CI] | score mean [95% CI] | P(>milp) | carbon g | SLO viol. % "
             "| beats rr | beats greedy |", "|---|---|---|---|---|---|---|---|---|"]
    for r in summ.itertuples():
        lines.append(f"| {r.policy} | {r.runs} | {r.score_iqm:.1f} [{r.iqm_lo:.1f}, {r.iqm_hi:.1f}] | "
                     f"{r.score_mean:.1f} [{r.mean_lo:.1f}, {r.mean_hi:.1f}] | {r.p_improve_over_milp:.2f} | "
                     f"{r.carbon_g:.2f} | {r.slo_violation_pct:.2f} | {'yes' if r.beats_rr else 'no'} | "
                     f"{'yes' if r.beats_greedy else 'no'} |")
    lines += ["", "Per training seed (test-split means over the same scenarios; beats = lower carbon at SLO violation "
              "<= the baseline's + 0.5 pp):", "",
              "| seed | carbon g | SLO viol. % | score mean | beats rr | beats greedy |", "|---|---|---|---|---|---|"]
    from servegym.agents import protocol

    naive, best, greedy = (episode_results(eps[eps.policy == p]) for p in ("rr", "milp", "greedy:0.5"))
    for seed, g in eps[eps.train_seed >= 0].groupby("train_seed"):
        r = episode_results(g)
        score = float(np.mean(protocol.episode_scores(r, naive, best)))
        lines.append(f"| {seed} | {g.carbon_g.mean():.2f} | {g.slo_violation_pct.mean():.3f} | {score:.1f} | "
                     f"{'yes' if protocol.beats(r, naive, 'carbon_g') else 'no'} | "
                     f"{'yes' if protocol.beats(r, greedy, 'carbon_g') else 'no'} |")
    lines += ["", f"![validation curves]({stem}_curves.png)", ""]
    (args.out / f"{stem}_summary.md").write_text("\n".join(lines))
    (args.out / f"{stem}.json").write_text(json.dumps(
        {"config": config, "mode": args.mode, "timesteps": args.timesteps, "seeds": seeds, "wall_s": wall_s,
         "wall_per_seed_s": wall_per_seed_s, "summary": json.loads(summ.to_json(orient="records"))},
        indent=2) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
