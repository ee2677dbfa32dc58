"""``servegym train``, ``servegym evaluate``, ``servegym sweep`` and ``servegym benchmark``.

torch and stable-baselines3 are imported inside the handlers only, so ``servegym --help`` and
``import servegym`` never load them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from servegym.errors import ConfigError

#: servegym dataset's default split: offline agents learn from the train split; evaluate them on test
DATASET_SPLIT = "train"
ALGO_NAMES = ("ppo", "maskable-ppo", "a2c", "dqn", "sac", "td3")
TRAIN_EXAMPLES = """examples:
  servegym train --env servegym/PDProvisionResidual-v0 --algo maskable-ppo --timesteps 20000
  servegym train --env servegym/GeoRoute-v0 --env-kwargs '{"config": {"preset": "mini"}}'
  servegym train --env servegym/GeoRoute-v0 --resume      # after Ctrl-C: the same command and --resume"""
EVALUATE_EXAMPLES = """examples:
  servegym evaluate --model runs/PDProvisionResidual-v0_maskable-ppo_s0/model.zip
  servegym evaluate --model runs/GeoRoute-v0_ppo_s0/model.zip --episodes 10 --out-dir runs/GeoRoute-v0_ppo_s0/eval"""


def _env_kwargs(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    shown = repr(text) if len(text) <= 80 else repr(text[:77]) + "..."
    try:
        val = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--env-kwargs = {shown} is not JSON ({exc.msg}); allowed: a JSON object, "
                          "e.g. '{\"config\": {\"preset\": \"mini\"}}'") from None
    except RecursionError:
        raise ConfigError(f"--env-kwargs = {shown} is nested too deeply; allowed: a JSON object") from None
    if not isinstance(val, dict):
        raise ConfigError(f"--env-kwargs = {shown}; allowed: a JSON object")
    return val


def runnable(tool: str) -> str:
    """How to type the console script ``tool`` of this Python environment so that it runs as printed: its bare
    name when the shell's PATH finds this environment's copy, else its path (a virtual environment that is not
    activated, as the README's ``.venv/bin/servegym`` is; a bare ``tensorboard`` there is not found)."""
    import shutil

    here = Path(sys.executable).parent / tool
    found = shutil.which(tool)
    if not here.exists() or (found is not None and Path(found).resolve() == here.resolve()):
        return tool
    try:
        return str(here.absolute().relative_to(Path.cwd()))
    except ValueError:  # not under the working folder
        return str(here.absolute())


def _positive(name: str) -> Any:
    def parse(text: str) -> int:
        try:
            v = int(float(text))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a positive integer, got {text!r}") from None
        if v < 1:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {text!r}")
        return v

    return parse


def add_commands(subparsers: Any) -> None:
    from servegym.registration import ENV_SPECS  # a table of strings: --help still loads no gymnasium

    ids = ", ".join(e.id for e in ENV_SPECS)
    tr = subparsers.add_parser("train", help="train a stable-baselines3 agent on a servegym env",
                               description="Train an agent; TensorBoard shows the domain scalars beside the "
                                           "family's baselines on the same evaluation seeds.",
                               formatter_class=argparse.RawDescriptionHelpFormatter,  # the examples' lines as written
                               epilog=TRAIN_EXAMPLES)
    tr.add_argument("--env", required=True, metavar="ID", help=f"env id: {ids} (or any Gymnasium id)")
    tr.add_argument("--algo", default="ppo", choices=ALGO_NAMES,
                    help="algorithm (default ppo; maskable-ppo reads the env's action masks)")
    tr.add_argument("--timesteps", type=_positive("--timesteps"), default=None,
                    help="environment steps (default: n_timesteps of the hyperparameter file); on-policy "
                         "algorithms round it up to whole rollouts (n_steps x n_envs, e.g. 20000 -> 20480)")
    tr.add_argument("--n-envs", type=_positive("--n-envs"), default=None,
                    help="parallel envs (default: n_envs of the hyperparameter file, else 1)")
    tr.add_argument("--vec", choices=("dummy", "subproc"), default="dummy",
                    help="dummy (default: the envs in this process) or subproc (one process each)")
    tr.add_argument("--hyperparams", metavar="FILE.yml", help="rl-zoo3-style hyperparameters (default: shipped)")
    tr.add_argument("--seed", type=int, default=0, help="seed of the model and of the training envs (default 0)")
    tr.add_argument("--tb", metavar="DIR", default="runs/tb", help="TensorBoard log dir (default runs/tb; '' to disable)")
    tr.add_argument("--out", metavar="MODEL.zip", help="final model path (default runs/<env>_<algo>_s<seed>/model.zip)")
    tr.add_argument("--env-kwargs", metavar="JSON",
                    help="gym.make keyword arguments as a JSON object (default: none, the id's defaults)")
    tr.add_argument("--eval-freq", type=int, default=None, help="evaluate every N steps (default: timesteps/5)")
    tr.add_argument("--eval-episodes", type=_positive("--eval-episodes"), default=3,
                    help="episodes (seeds) of each evaluation (default 3)")
    tr.add_argument("--baselines", default="all",
                    help="reference baselines in TensorBoard: all (default), none or a,b")
    tr.add_argument("--checkpoint-freq", type=int, default=None, help="checkpoint every N steps (default: timesteps/4; 0: none)")
    tr.add_argument("--device", default="cpu", help="torch device: cpu (default), cuda or auto")
    tr.add_argument("--no-progress", action="store_true", help="no progress bar")
    tr.add_argument("--json", action="store_true", help="print the result as JSON")
    tr_mode = tr.add_mutually_exclusive_group()
    tr_mode.add_argument("--resume", action="store_true",
                         help="continue the run in --out's folder (interrupted, or trained for fewer --timesteps)")
    tr_mode.add_argument("--force", action="store_true", help="replace a run already in --out's folder")
    tr.set_defaults(func=_train)

    ev = subparsers.add_parser("evaluate", help="a saved agent vs the family's baselines on the same seeds",
                               description="Mean ± 95% CI over episodes; CSV, markdown and a bar chart.",
                               formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EVALUATE_EXAMPLES)
    ev.add_argument("--env", default=None, help="env id (default: from the run's run.json)")
    ev.add_argument("--model", required=True, metavar="PATH",
                    help="a model .zip saved by servegym train (e.g. runs/<run>/model.zip)")
    ev.add_argument("--algo", default=None, choices=ALGO_NAMES,
                    help="needed only without run.json (default: the run's algorithm)")
    ev.add_argument("--episodes", type=_positive("--episodes"), default=5, help="episodes per policy (default 5)")
    ev.add_argument("--seed", type=int, default=None, help="first seed (default: the run's evaluation seeds)")
    ev.add_argument("--baselines", default="all", help="all (default), none or a comma list")
    ev.add_argument("--env-kwargs", metavar="JSON",
                    help="override gym.make keyword arguments (default: the run's, from run.json)")
    ev.add_argument("--out-dir", metavar="DIR", default=None,
                    help="write episodes.csv, summary.csv/.md/.png (default: print only, write nothing)")
    ev.add_argument("--json", action="store_true", help="print the summary as JSON")
    ev.add_argument("--force", action="store_true", help="replace an evaluation already in --out-dir")
    ev.set_defaults(func=_evaluate)

    sw = subparsers.add_parser("sweep", help="policy x scenario x seed grid on a process pool or Ray",
                               description="Run a sweep config (see servegym.agents.sweep) into a tidy table.")
    sw.add_argument("config", metavar="CONFIG.yml")
    sw.add_argument("--workers", type=_positive("--workers"), default=None, help="processes (default: CPUs)")
    sw.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                    help="run on Ray: a local instance, or an existing cluster at ADDRESS")
    sw.add_argument("--out", default="sweep_results.csv", help="results .csv (default) or .parquet")
    sw_mode = sw.add_mutually_exclusive_group()
    sw_mode.add_argument("--resume", action="store_true",
                         help="keep the rows already in --out (or its interrupted run's journal) and run only "
                              "the missing cells")
    sw_mode.add_argument("--force", action="store_true", help="replace an existing --out")
    sw.add_argument("--json", action="store_true", help="print per (scenario, policy) means as JSON")
    sw.set_defaults(func=_sweep)

    bm = subparsers.add_parser(
        "benchmark", help="how good a policy is: an agent or baseline scored under the benchmark protocol, or "
                          "the leaderboard suite; not simulator speed: see bench",
        description="Normalized score per episode of a split: 0 = naive, 100 = the hindsight oracle on the same "
                    "scenario (ids without an oracle: 100 = the paper's method on average, stated in the output), "
                    "IQM and mean with 95 % bootstrap CIs, the domain KPIs, the headroom and paired verdicts. "
                    "--suite trains every env id and writes benchmarks/results/leaderboard.{md,csv,json}.")
    bm.add_argument("--env", default=None, help="env id, e.g. servegym/GeoRoute-v0")
    who = bm.add_mutually_exclusive_group()
    who.add_argument("--policy", metavar="NAME", help="a role (naive, paper, strongest, follow, oracle; best = paper) or a baseline of the env's family")
    who.add_argument("--model", metavar="PATH", nargs="+",
                     help="model .zip(s) saved by servegym train; several (one per training seed) are pooled")
    bm.add_argument("--split", default="test",
                    help="train, validation, test (default) or a shift of the env (e.g. shift-load)")
    bm.add_argument("--episodes", type=_positive("--episodes"), default=10)
    bm.add_argument("--seed", type=int, default=0, help="first reset seed (default 0)")
    bm.add_argument("--env-kwargs", metavar="JSON", help="gym.make keyword arguments as a JSON object")
    bm.add_argument("--json", action="store_true", help="print the result as one JSON object")
    bm.add_argument("--suite", action="store_true", help="train and test every env id, write the leaderboard")
    bm.add_argument("--budget", default="quick", choices=("quick", "full", "smoke"),
                    help="suite budget: quick (about 30 min per section on 2 cores; the stress tracks' sections "
                         "included), full, smoke (CI check)")
    bm.add_argument("--envs", default=None,
                    help="suite: a comma list of sections, each an env id or ID@TRACK for the id on a stress track "
                         "(e.g. servegym/GeoRoute-v0@stress-load; default: all)")
    bm.add_argument("--rescore", action="store_true",
                    help="suite: rebuild the leaderboard from the stored runs (suite_runs/<budget>/) without training")
    bm.add_argument("--fill-baselines", action="store_true",
                    help="with --rescore: first play the leaderboard baselines the stored runs lack (e.g. a new "
                         "oracle or strongest baseline) on the stored test seeds, no training")
    bm.add_argument("--replay", action="store_true",
                    help="rebuild the agent rows of --envs (default: all stored) from the models shipped in "
                         "benchmarks/models, on the stored test episodes, into --out-dir DIR (DIR/leaderboard.json), "
                         "and compare them with the stored rows (exit 1 if any differs); e.g. servegym benchmark "
                         "--replay --envs servegym/PDProvision-v0 --out-dir /tmp/replay")
    bm.add_argument("--workers", type=_positive("--workers"), default=None, help="suite: processes (default: CPUs)")
    bm.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                    help="suite: run the grid on Ray (a local instance, or a cluster at ADDRESS)")
    bm.add_argument("--out-dir", default=None, metavar="DIR", help="suite: results folder (default benchmarks/results)")
    bm.add_argument("--run-dir", default=None, metavar="DIR",
                    help="suite: models, checkpoints, TensorBoard (default runs/suite/<budget>); models already "
                         "there are refused without --force")
    bm.add_argument("--force", action="store_true",
                    help="suite: replace the stored runs and trained models of the ids (and discard an interrupted "
                         "run's journal); "
                         "without it an interrupted run resumes from its journal")
    bm.set_defaults(func=_benchmark)
    _add_dataset(subparsers)


def _train(args: argparse.Namespace) -> int:
    import threading

    from servegym.agents.train import TrainConfig, train

    from servegym.outputs import interruptible

    cfg = TrainConfig(env_id=args.env, algo=args.algo, timesteps=args.timesteps, n_envs=args.n_envs,
                      vec=args.vec, hyperparams=args.hyperparams, seed=args.seed, tb=args.tb or None,
                      out=args.out, env_kwargs=_env_kwargs(args.env_kwargs), eval_freq=args.eval_freq,
                      eval_episodes=args.eval_episodes, baselines=args.baselines,
                      checkpoint_freq=args.checkpoint_freq, progress=not args.no_progress, device=args.device,
                      verbose=0 if args.json else 1, force=args.force, resume=args.resume, lock=True)
    stop, signals = threading.Event(), []

    def on_signal(signum: int) -> None:  # the first SIGINT/SIGTERM: stop at the next step and save
        signals.append(signum)
        stop.set()

    with interruptible(on_signal):
        res = train(cfg, stop)
    if not res.complete:
        import signal

        name = signal.Signals(signals[0]).name if signals else "a stop request"
        print(f"servegym: interrupted by {name} after {res.timesteps_trained:,} of {res.timesteps:,} steps: the "
              f"model and {res.run_file.name} are saved in {res.model_path.parent}; continue with the same command "
              "and --resume", file=sys.stderr)
        return 128 + (signals[0] if signals else 2)
    out = {"model": str(res.model_path), "best_model": str(res.best_model_path) if res.best_model_path else None,
           "vecnormalize": str(res.vecnormalize_path) if res.vecnormalize_path else None,
           "tensorboard": str(res.tb_dir) if res.tb_dir else None, "run": str(res.run_file),
           "wall_s": round(res.wall_s, 2), "timesteps_trained": res.timesteps_trained, "complete": res.complete,
           "final_eval": res.eval_history[-1] if res.eval_history else None}
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        asked = args.timesteps
        note = (f" (asked {asked:,}: rounded up to whole rollouts)" if asked and res.timesteps_trained > asked else "")
        print(f"trained {res.timesteps_trained:,} steps{note} in {res.wall_s:.0f} s")
        print(f"model: {out['model']}  (best: {out['best_model']})")
        if out["tensorboard"]:
            print(f"watch: {runnable('tensorboard')} --logdir {res.tb_dir.parent}")
        # the run's own folder, as --out chose it: evaluations of two runs never land in one folder
        print(f"compare: {runnable('servegym')} evaluate --model {out['model']} "
              f"--out-dir {res.model_path.parent / 'eval'}")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from servegym.agents.evaluate import evaluate_model, text_report
    from servegym.agents.families import family_for

    rep = evaluate_model(args.env, args.model, episodes=args.episodes, baselines=args.baselines, seed=args.seed,
                         out_dir=args.out_dir, algo=args.algo, env_kwargs=_env_kwargs(args.env_kwargs),
                         progress=not args.json, force=args.force)
    if args.json:
        print(rep.summary.to_json(orient="records", indent=2))
    else:
        sys.stdout.write(text_report(rep.summary, family_for(rep.env_id or args.env), rep.files.get("summary_md")))
        sys.stdout.write("".join(f"  {line}\n" for line in rep.verdicts))
        for name, path in rep.files.items():
            print(f"{name}: {path}")
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from servegym.agents.sweep import (
        journal_path,
        load_sweep,
        results_path,
        run_sweep_to,
        summary_json,
        summary_table,
    )

    from servegym import report
    from servegym.outputs import Interrupted, interruptible

    cfg = load_sweep(args.config)
    if args.out.endswith(".parquet"):
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise ConfigError(f"--out = {args.out!r}: Parquet needs pyarrow (pip install pyarrow); "
                              "or use --out results.csv") from None
    ray_address: str | bool | None = False if args.ray is None else (args.ray or None)
    try:
        with interruptible():
            run = run_sweep_to(cfg, args.out, force=args.force, resume=args.resume, workers=args.workers,
                               ray_address=ray_address, progress=not args.json)
    except Interrupted as exc:
        j = journal_path(results_path(args.out))
        print(f"servegym: interrupted by {exc}: the finished cells are in {j}; run the same command with --resume "
              "to finish", file=sys.stderr)
        return exc.exit_code
    df, path = run.df, run.path
    if args.json:
        print(summary_json(df))
    else:
        reused = f"; {run.reused} kept from {path.name}" if run.reused else ""
        print(f"{cfg.name}: {len(df)} runs ({len(cfg.policies)} policies x {len(cfg.scenarios)} scenarios x "
              f"{report.seeds_phrase(cfg.seeds)}{reused}); means over seeds:")
        print(summary_table(df, path))
        print(f"every run: {path}")
    return 0


def _benchmark(args: argparse.Namespace) -> int:
    from servegym.agents import benchmark as bm

    if args.replay:
        return _replay(args)
    if args.suite:
        extra = [f for f, v in (("--env", args.env), ("--policy", args.policy), ("--model", args.model)) if v]
        if extra:
            raise ConfigError(f"{', '.join(extra)} cannot be combined with --suite; allowed: --suite [--budget "
                              "quick|full] [--envs IDS] [--workers N] [--ray [ADDRESS]]")
        envs = [e.strip() for e in args.envs.split(",")] if args.envs else None
        ray_address: str | bool | None = False if args.ray is None else (args.ray or None)
        if args.fill_baselines and not args.rescore:
            raise ConfigError("--fill-baselines needs --rescore; allowed: --suite --rescore --fill-baselines")
        if args.rescore:
            if args.fill_baselines:
                bm.fill_missing_baselines(args.budget, args.out_dir or bm.RESULTS_DIR, env_ids=envs,
                                          workers=args.workers or 1, progress=not args.json)
            res = bm.rebuild_leaderboard(args.budget, args.out_dir or bm.RESULTS_DIR)
        else:
            if args.budget == "full":
                print(bm.budget_cost("full", args.workers or os.cpu_count() or 1), file=sys.stderr)
            from servegym.outputs import Interrupted, interruptible

            try:
                with interruptible():
                    res = bm.run_suite(args.budget, out_dir=args.out_dir or bm.RESULTS_DIR, run_dir=args.run_dir,
                                       workers=args.workers, ray_address=ray_address, progress=not args.json,
                                       env_ids=envs, force=args.force)
            except Interrupted as exc:
                j = bm.suite_journal(args.budget, Path(args.out_dir or bm.RESULTS_DIR))
                print(f"servegym: interrupted by {exc}: the finished tasks are in {j}; run the same command again "
                      "to resume", file=sys.stderr)
                return exc.exit_code
        if args.json:
            print(json.dumps(res.records, indent=2))
        else:
            print(f"leaderboard ({len(res.records)} rows, {res.wall_s / 60:.1f} min):")
            for name, path in res.files.items():
                print(f"  {name}: {path}")
        return 0
    if args.env is None:
        raise ConfigError("--env is required (or --suite); allowed: a servegym env id, e.g. servegym/GeoRoute-v0")
    if args.policy is None and args.model is None:
        raise ConfigError("one of --policy NAME or --model PATH is required; allowed policies: naive, paper, "
                          "strongest, follow, oracle (where the id has them), best or a baseline of the env's family")
    from servegym.agents.train import check_env_id

    args.env = check_env_id(args.env)
    split = None if args.split in ("none", "None") else args.split
    ev = bm.evaluate_policy(args.env, policy=args.policy, model=args.model, split=split, episodes=args.episodes,
                            seed=args.seed, env_kwargs=_env_kwargs(args.env_kwargs), progress=not args.json)
    if args.json:
        print(json.dumps(ev.record()))
    else:
        sys.stdout.write(bm.text_summary(ev))
    return 0


def _replay(args: argparse.Namespace) -> int:
    """``servegym benchmark --replay``: the shipped agents' rows rebuilt and checked (servegym.agents.replay)."""
    from servegym.agents.replay import replay

    extra = [f for f, v in (("--env", args.env), ("--policy", args.policy), ("--model", args.model),
                            ("--suite", args.suite), ("--rescore", args.rescore)) if v]
    if extra or not args.out_dir:
        raise ConfigError(f"--replay takes --out-dir DIR{' and not ' + ', '.join(extra) if extra else ''}; allowed: "
                          "--replay --out-dir DIR [--envs ID[@TRACK],...] [--budget quick|full|smoke] [--workers N]")
    envs = [e.strip() for e in args.envs.split(",")] if args.envs else None
    res, checks = replay(args.budget, envs, args.out_dir, workers=args.workers, progress=not args.json,
                         force=args.force)
    if args.json:
        print(json.dumps({"checks": [{"env": c.env_id, "rows": c.rows, "equal": c.equal, "close": c.close,
                                      "max_abs_diff": c.max_abs_diff} for c in checks], "files":
                          {k: str(v) for k, v in res.files.items()}}))
    else:
        for c in checks:
            print(c.text())
        for name, path in res.files.items():
            print(f"  {name}: {path}")
    return 0 if all(c.ok for c in checks) else 1


# servegym dataset: here rather than in servegym.agents.dataset, which imports gymnasium (--help stays light)
def _add_dataset(subparsers: Any) -> None:
    ds = subparsers.add_parser(
        "dataset", help="record a baseline's or agent's episodes as a Minari offline-RL dataset",
        description="Play K episodes through the env and write them as a Minari dataset named "
                    "servegym/<env>/<policy>-<split>-v0 under --out or MINARI_DATASETS_PATH, with each episode's "
                    "KPIs in its metadata. Needs minari: pip install \"servegym[offline]\".")
    ds.add_argument("--env", required=True, help="env id, e.g. servegym/PDProvision-v0")
    who = ds.add_mutually_exclusive_group(required=True)
    who.add_argument("--policy", metavar="NAME", help="a role (naive, paper, strongest, follow, oracle) or a baseline")
    who.add_argument("--model", metavar="PATH", help="a model .zip saved by servegym train")
    ds.add_argument("--episodes", type=_positive("--episodes"), default=10)
    ds.add_argument("--split", default=DATASET_SPLIT, help="train (default), validation, test or a shift")
    ds.add_argument("--seed", type=int, default=0, help="first reset seed (default 0)")
    ds.add_argument("--out", metavar="DIR", default=None,
                    help="datasets folder (default: MINARI_DATASETS_PATH, else ~/.minari/datasets)")
    ds.add_argument("--env-kwargs", metavar="JSON", help="gym.make keyword arguments as a JSON object")
    ds.add_argument("--force", action="store_true", help="replace an existing dataset of the same id")
    ds.add_argument("--score", action="store_true",
                    help="also store each episode's normalized score (plays the id's naive, paper and oracle "
                         "policies on the same seeds, unrecorded: about 1.6x the recording time on pd)")
    ds.add_argument("--json", action="store_true", help="print the result as one JSON object")
    ds.set_defaults(func=_dataset)


def _dataset(args: argparse.Namespace) -> int:
    from servegym.agents.dataset import datasets_root, record_dataset

    from servegym.outputs import Interrupted, interruptible

    try:
        # SIGTERM, like Ctrl-C, unwinds record_dataset's cleanup (its temporary folder) before the exit
        with interruptible():
            rec = record_dataset(args.env, policy=args.policy, model=args.model, episodes=args.episodes,
                                 split=args.split, seed=args.seed, out=args.out, force=args.force,
                                 env_kwargs=_env_kwargs(args.env_kwargs), score=args.score, progress=True)
    except Interrupted as exc:
        print(f"servegym: interrupted by {exc}: its temporary files are removed and nothing partial is left in "
              f"{datasets_root(args.out)} (a dataset is installed whole or not at all)", file=sys.stderr)
        return exc.exit_code
    if args.json:
        print(json.dumps({"dataset_id": rec.dataset_id, "path": str(rec.path), "episodes": rec.episodes,
                          "steps": rec.steps, "wall_s": round(rec.wall_s, 3), "kpi": rec.kpi,
                          "kpi_means": rec.kpi_means}))
    else:
        print(f"wrote {rec.dataset_id}: {rec.episodes} episodes, {rec.steps} steps in {rec.wall_s:.1f} s -> {rec.path}")
        print(f"mean {rec.kpi} {rec.kpi_means.get(rec.kpi, float('nan')):.6g}; load with "
              f"minari.load_dataset({rec.dataset_id!r}) (MINARI_DATASETS_PATH={rec.path.parents[2]})")
    return 0
