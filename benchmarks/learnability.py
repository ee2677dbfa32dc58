"""Learnability: the recommended algorithm per family, trained for a fixed budget with several seeds,
against every baseline of the family on the same evaluation seeds.

Usage (defaults are the small budget recorded in benchmarks/results/learnability/)::

    python benchmarks/learnability.py --family pd --timesteps 30000 --seeds 3 --eval-episodes 3
    python benchmarks/learnability.py --family geo-window --timesteps 30000 --seeds 3
    python benchmarks/learnability.py --family npu --timesteps 2304 --seeds 2 --eval-episodes 3

Per family it writes ``<family>_episodes.csv`` (agent seed x eval seed, and baselines x eval seed),
``<family>_summary.md`` (mean ± 95% CI, Student t over the agents' training seeds for the agent and
over evaluation seeds for the baselines), ``<family>_curves.png`` (mean evaluation reward and the
headline metric vs steps, one line per training seed, baselines as flat lines) and a JSON record.
Training runs one after another in this process (the machine is shared); each uses
``servegym.agents.train`` exactly as ``servegym train`` does.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import pandas as pd

# family -> (env id, algorithm, gym.make kwargs, headline metrics)
SETUPS: dict[str, tuple[str, str, dict[str, Any], tuple[str, ...]]] = {
    "pd": ("servegym/PDProvision-v0", "maskable-ppo", {}, ("energy_kwh", "slo_violation_pct")),
    # Residual around min-power+lookahead (issue 13); the shipped file adds a 1 h -> 4 h -> 1 day
    # curriculum to the training envs, evaluation plays full days.
    "pd-residual": ("servegym/PDProvisionResidual-v0", "maskable-ppo", {}, ("energy_kwh", "slo_violation_pct")),
    "geo-window": ("servegym/GeoRouteWindow-v0", "ppo", {}, ("carbon_g", "slo_violation_pct")),
    "geo-route": ("servegym/GeoRoute-v0", "maskable-ppo", {"config": {"preset": "mini"}},
                  ("carbon_g", "slo_violation_pct")),
    # geo learning modes: decisions relative to the facility MILP (dense reward by default)
    "geo-route-residual": ("servegym/GeoRoute-v0", "maskable-ppo",
                           {"config": {"preset": "mini", "action_mode": "residual", "reference": "milp"}},
                           ("carbon_g", "slo_violation_pct")),
    "geo-window-residual": ("servegym/GeoRouteWindow-v0", "ppo",
                            {"config": {"action_mode": "residual", "geo": {"poll_interval_s": 5.0}}},
                            ("carbon_g", "slo_violation_pct")),
    # Two hours (24 five-minute epochs) of the default model/trace: ~40-55 ms per step, so a few
    # thousand steps per training seed fit in minutes.
    "npu": ("servegym/NPUAutoscale-v0", "maskable-ppo", {"config": {"hours": 2.0}},
            ("energy_j", "slo_violation_pct")),
    # Changes around NeuScale's decision (all-zero = NeuScale), reward relative to Base; Base's episode is
    # rerun at each reset, so a step costs about twice an absolute one.
    "npu-residual": ("servegym/NPUAutoscaleResidual-v0", "maskable-ppo", {"config": {"hours": 2.0}},
                     ("energy_j", "slo_violation_pct")),
}
OUT = Path(__file__).resolve().parent / "results" / "learnability"


def run_family(name: str, timesteps: int, n_seeds: int, eval_episodes: int, out: Path,
               baselines: str = "all") -> dict[str, Any]:
    import gymnasium as gym
    from servegym.agents.evaluate import markdown_table, summary_frame
    from servegym.agents.families import family_for, run_baseline_episodes
    from servegym.agents.rollout import agent_act_fn, play_episode, seeds_from
    from servegym.agents.train import TrainConfig, load_agent, train

    env_id, algo, kwargs, headline = SETUPS[name]
    fam = family_for(env_id)
    eval_seeds = seeds_from(1000, eval_episodes)
    rows: list[dict[str, Any]] = []
    curves: list[pd.DataFrame] = []
    t0 = time.perf_counter()
    for seed in range(n_seeds):
        res = train(TrainConfig(env_id=env_id, algo=algo, timesteps=timesteps, seed=seed, tb=str(out / "tb"),
                                out=str(out / "runs" / f"{name}_s{seed}" / "model.zip"), env_kwargs=kwargs,
                                eval_freq=max(timesteps // 6, 1), eval_episodes=eval_episodes, baselines="none",
                                progress=False, verbose=0))
        hist = pd.DataFrame(res.eval_history)
        hist["train_seed"] = seed
        curves.append(hist)
        # The best checkpoint by evaluation reward (on the evaluation seeds themselves: reported as such).
        model, norm, _ = load_agent(res.best_model_path or res.model_path)
        env = gym.make(env_id, **kwargs)
        act = agent_act_fn(model, norm)
        for s in eval_seeds:
            r = play_episode(env, act, s, "agent", fam.metrics)
            rows.append({**r.row(), "train_seed": seed})
    train_s = time.perf_counter() - t0
    env = gym.make(env_id, **kwargs)
    names = list(fam.baselines) if baselines == "all" else baselines.split(",")
    for res_b in run_baseline_episodes(fam, env, names, eval_seeds, strict=False).values():
        rows += [{**r.row(), "train_seed": -1} for r in res_b]
    eps = pd.DataFrame(rows)
    # Agent: average each training seed over the evaluation seeds first, so the CI is over training seeds.
    agent = eps[eps.policy == "agent"].groupby("train_seed").mean(numeric_only=True).reset_index()
    agent["policy"] = "agent"
    base = eps[eps.policy != "agent"]
    summ = summary_frame(pd.concat([agent, base], ignore_index=True).drop(columns=["train_seed"]))
    out.mkdir(parents=True, exist_ok=True)
    eps.to_csv(out / f"{name}_episodes.csv", index=False)
    md = [f"# Learnability: {env_id}, {algo}, {timesteps} steps x {n_seeds} training seeds",
          "", f"Evaluation seeds {eval_seeds}; agent = best checkpoint by evaluation reward per training seed; "
          "agent CI over training seeds, baseline CI over evaluation seeds (95%, Student t).",
          f"Training wall time: {train_s:.0f} s on a shared 2-core machine.", "", markdown_table(summ)]
    (out / f"{name}_summary.md").write_text("\n".join(md))
    cur = pd.concat(curves, ignore_index=True)
    cur.to_csv(out / f"{name}_curves.csv", index=False)
    _plot_curves(cur, summ, headline, out / f"{name}_curves.png", f"{env_id} ({algo})")
    best = {}
    for m in headline:
        col = f"{m}_mean"
        if col in summ:
            b = summ[summ.policy != "agent"]
            lower = next((s.lower_is_better for s in fam.metrics if s.key == m), True)
            idx = b[col].idxmin() if lower else b[col].idxmax()
            best[m] = {"best_baseline": b.loc[idx, "policy"], "baseline": float(b.loc[idx, col]),
                       "agent": float(summ.loc[summ.policy == "agent", col].iloc[0]),
                       "agent_ci": float(summ.loc[summ.policy == "agent", f"{m}_ci"].iloc[0])}
    rec = {"family": name, "env_id": env_id, "algo": algo, "timesteps": timesteps, "train_seeds": n_seeds,
           "eval_seeds": eval_seeds, "train_wall_s": train_s, "headline": best,
           "summary": json.loads(summ.to_json(orient="records"))}
    (out / f"{name}.json").write_text(json.dumps(rec, indent=2))
    return rec


def _plot_curves(cur: pd.DataFrame, summ: pd.DataFrame, headline: tuple[str, ...], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ["mean_reward", *[m for m in headline if m in cur]]
    fig, axes = plt.subplots(1, len(keys), figsize=(4.5 * len(keys), 3.4), squeeze=False)
    for ax, k in zip(axes[0], keys, strict=True):
        for seed, g in cur.groupby("train_seed"):
            ax.plot(g["timesteps"], g[k], marker="o", ms=3, color="tab:red", alpha=0.7,
                    label="agent" if seed == 0 else None)
        col = "reward_mean" if k == "mean_reward" else f"{k}_mean"
        base = summ[summ.policy != "agent"]
        if col in base:
            for i, (_, r) in enumerate(base.iterrows()):
                ax.axhline(r[col], ls="--", lw=0.8, color=plt.cm.tab10(i % 10), label=r["policy"])
        ax.set_xlabel("training steps")
        ax.set_title(k, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6, ncol=2)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=sorted(SETUPS), action="append", required=True)
    ap.add_argument("--timesteps", type=int, default=30_000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--eval-episodes", type=int, default=3)
    ap.add_argument("--baselines", default="all")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    for fam in args.family:
        rec = run_family(fam, args.timesteps, args.seeds, args.eval_episodes, args.out, args.baselines)
        print(json.dumps(rec["headline"], indent=2))


if __name__ == "__main__":
    main()
