"""Training a stable-baselines3 agent on a servegym env (``servegym train``).

A run directory holds everything a later ``servegym evaluate`` needs::

    <out>.zip                      the final model
    <out>_vecnormalize.npz         VecNormalize observation statistics as plain arrays (when the
                                   hyperparameters normalize; never a pickle, see agents/model_io.py)
    best_model.zip (+ _vecnormalize.npz)   best mean evaluation reward on the fixed evaluation seeds
    checkpoints/model_<N>_steps.zip (+ model_vecnormalize_<N>_steps.npz)
    run.json                       env id, env kwargs, algo, seeds, hyperparameters, evaluation history,
                                   ``status`` (complete or interrupted) and ``timesteps_trained``

Nothing is lost or silently replaced (:mod:`servegym.outputs`): every file above is written atomically
(a temporary file beside it, then a rename); a folder that already holds a run is refused unless
``force`` (train afresh) or ``resume``; ``<out>.zip.lock`` keeps a second run off the same folder. With a
``stop`` event (the CLI sets it on SIGINT or SIGTERM) training ends at the next step and the model, its
statistics and ``run.json`` (``status: interrupted``) are saved; ``resume`` continues such a run to its
``timesteps``: the model's weights and optimizer state, the VecNormalize statistics (observations and
returns, with their counts), the steps done (learning-rate schedules continue from there) and the
evaluation history with its best score. A resumed run is a continuation, not a bit-identical replay of an
uninterrupted one: the rollout in progress at the signal is discarded and the training envs start new
episodes.

Imports torch and stable-baselines3: the CLI imports this module inside its handler only.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium as gym
from servegym.agents.algos import algo_class, check_algo
from servegym.agents.families import family_for, resolve_baselines
from servegym.agents.hparams import Hyperparams, check_rollout, load_hyperparams, materialize, merge_kwargs
from servegym.agents.rollout import has_action_masks, seeds_from
from servegym.agents.run_file import RUN_FILE

from servegym.errors import ConfigError, check_range

# Evaluation seeds start here by default, away from the training seeds (seed, seed+1, ... per env).
EVAL_SEED = 1000


@dataclass(frozen=True)
class TrainConfig:
    """One training run. ``timesteps`` counts environment steps over all parallel envs; ``eval_freq``
    likewise (0: evaluate only at the end); ``checkpoint_freq`` in environment steps (0: none)."""

    env_id: str
    algo: str = "ppo"
    timesteps: int | None = None
    n_envs: int | None = None
    vec: str = "dummy"
    hyperparams: str | None = None
    seed: int = 0
    tb: str | None = "runs/tb"
    out: str | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    eval_freq: int | None = None
    eval_episodes: int = 3
    eval_seed: int = EVAL_SEED
    eval_split: str | None = "validation"  # split of the evaluation env (servegym ids); None: the env's default
    baselines: str | None = "all"
    checkpoint_freq: int | None = None
    progress: bool = True
    device: str = "cpu"
    verbose: int = 1
    force: bool = False  # replace a run already in the output folder
    resume: bool = False  # continue the interrupted (or shorter) run in the output folder
    lock: bool = False  # hold <out>.zip.lock for the run (the CLI; suite workers run under the suite's lock)

    def __post_init__(self) -> None:
        if self.vec not in ("dummy", "subproc"):
            raise ConfigError(f"--vec = {self.vec!r}; allowed: dummy, subproc")
        if self.timesteps is not None:
            check_range("--timesteps", self.timesteps, 1)
        if self.n_envs is not None:
            check_range("--n-envs", self.n_envs, 1, 256)
        check_range("--eval-episodes", self.eval_episodes, 1)
        if self.force and self.resume:
            raise ConfigError("--force and --resume exclude each other; allowed: one of them")


@dataclass(frozen=True)
class TrainResult:
    model_path: Path
    best_model_path: Path | None
    vecnormalize_path: Path | None
    tb_dir: Path | None
    run_file: Path
    eval_history: list[dict[str, float]]
    wall_s: float
    #: steps actually trained: on-policy algorithms round the request up to whole rollouts (n_steps x n_envs)
    timesteps_trained: int = 0
    #: False when a stop request (SIGINT/SIGTERM in the CLI) ended training early; resume with ``resume=True``
    complete: bool = True
    #: the steps this run was to reach: the target rounded up to whole rollouts (callbacks.planned_steps), as the
    #: progress start line says
    timesteps: int = 0


def check_device(device: str) -> None:
    """A one-line error for a torch device string that does not parse or is not on this machine."""
    import torch

    if device == "auto":
        return
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigError(f"--device = {device!r} is not a torch device; allowed: cpu, cuda, cuda:N, mps, "
                          "auto") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device = {device!r}: no CUDA device on this machine; allowed: cpu, auto")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"--device = {device!r}: no MPS device on this machine; allowed: cpu, auto")
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"--device = {device!r}; allowed: cpu, cuda, cuda:N, mps, auto")


def check_env_id(env_id: str, source: str = "--env") -> str:
    """The registered id ``env_id`` names, or a one-line error (:func:`servegym.env_ids.check_env_id`: no
    ``module:`` prefix is ever imported)."""
    from servegym.env_ids import check_env_id as check

    return check(env_id, source)


def make_monitored_env(env_id: str, env_kwargs: dict[str, Any]) -> gym.Env:
    """A training env with SB3's Monitor (episode return/length in the logs); module-level so that
    SubprocVecEnv can pickle it under ``spawn``."""
    from stable_baselines3.common.monitor import Monitor

    import servegym  # noqa: F401  (registers the ids in spawned workers)

    return Monitor(gym.make(env_id, **env_kwargs))


def vecnormalize_path_for(model_path: Path) -> Path:
    """Where the observation statistics (``.npz``) of a saved model live (checkpoints use SB3's names)."""
    stem = model_path.stem
    parts = stem.rsplit("_", 2)
    if len(parts) == 3 and parts[2] == "steps" and parts[1].isdigit():
        return model_path.with_name(f"{parts[0]}_vecnormalize_{parts[1]}_steps.npz")
    return model_path.with_name(stem + "_vecnormalize.npz")


def _default_out(cfg: TrainConfig) -> Path:
    return Path("runs") / f"{cfg.env_id.split('/')[-1]}_{cfg.algo}_s{cfg.seed}" / "model.zip"


def _json_safe(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_json_safe(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return repr(x)


def output_path(cfg: TrainConfig) -> Path:
    """The final model's path (``--out`` with ``.zip``, default ``runs/<env>_<algo>_s<seed>/model.zip``)."""
    out = Path(cfg.out) if cfg.out else _default_out(cfg)
    return out if out.suffix == ".zip" else out.with_suffix(".zip")


def train(cfg: TrainConfig, stop: threading.Event | None = None) -> TrainResult:
    """Train, evaluate periodically against the family's baselines, save; see the module docstring.
    ``stop``: when set, training ends at the next step and the run is saved as interrupted. A run that
    fails leaves no folder it created behind (empty ones; a checked env id first, so that a misspelt one
    names no folder at all)."""
    from servegym.outputs import OutputLock, created_folders_removed_on_error

    check_env_id(cfg.env_id)
    out = output_path(cfg)
    with created_folders_removed_on_error(out.parent):
        if not cfg.lock:
            return _train(cfg, stop)
        with OutputLock(out, "--out"):
            return _train(cfg, stop)


def _differing_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    """The dotted keys at which the JSON values ``a`` and ``b`` differ (a whole value where either is not
    an object)."""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return [] if a == b else [prefix or "(all)"]
    out: list[str] = []
    for k in sorted(set(a) | set(b), key=str):
        out += _differing_keys(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else str(k))
    return out


def _previous_run(cfg: TrainConfig, out: Path, env_kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The run already in ``out``'s folder: refused without force/resume; with resume, its checked
    ``run.json`` fields (it must be this run: same env id, algorithm, seed and env kwargs (the hyperparameters'
    and ``--env-kwargs`` merged), and not finished: an evaluation history of two configs would be one run's)."""
    from servegym.outputs import refuse_existing

    run_file = out.parent / RUN_FILE
    if cfg.force or not (out.exists() or run_file.exists()):
        if cfg.resume:
            raise ConfigError(f"--resume: --out = {str(out)!r} holds no run to resume; train without --resume")
        return None
    if not cfg.resume:
        refuse_existing("--out", out if out.exists() else run_file, "a trained model")
    if not (out.is_file() and run_file.is_file()):
        raise ConfigError(f"--resume: {str(out.parent)!r} needs both {out.name} and {RUN_FILE}; pass --force to "
                          "train afresh")
    from servegym.agents.run_file import MAX_RUN_BYTES

    from servegym.bounded_io import read_user_text, refuse_link_out

    refuse_link_out(run_file, run_file.parent, f"the {RUN_FILE} servegym train writes")
    raw = read_user_text(run_file, MAX_RUN_BYTES, f"the {RUN_FILE} servegym train writes")
    try:
        run = json.loads(raw)
    except (ValueError, RecursionError):
        raise ConfigError(f"--resume: {str(run_file)!r} is not the JSON object servegym train writes") from None
    if not isinstance(run, dict):
        raise ConfigError(f"--resume: {str(run_file)!r} is not the JSON object servegym train writes")
    for key, mine in (("env_id", cfg.env_id), ("algo", algo_class_name(cfg.algo)), ("seed", cfg.seed)):
        if run.get(key) != mine:
            # the file's value is not quoted: a run.json that is not this run's may hold anyone's text
            raise ConfigError(f"--resume: {RUN_FILE} has another {key} than this run ({mine!r}); allowed: the same "
                              "env, algorithm and seed (or --force)")
    diff = _differing_keys(run.get("env_kwargs"), _json_safe(env_kwargs))
    if diff:
        more = f" and {len(diff) - 3} more" if len(diff) > 3 else ""
        raise ConfigError(f"--resume: {RUN_FILE} has other env kwargs than this run (at {', '.join(diff[:3])[:120]}"
                          f"{more}); allowed: the same --env-kwargs and hyperparameters (or --force)")
    done = run.get("timesteps_trained")
    if not (isinstance(done, int) and not isinstance(done, bool) and done >= 0):
        raise ConfigError(f"--resume: {RUN_FILE} field timesteps_trained = {str(done)[:40]}; allowed: an integer >= 0")
    hist = run.get("eval_history")
    run["eval_history"] = [h for h in hist if isinstance(h, dict)] if isinstance(hist, list) else []
    return run


def algo_class_name(algo: str) -> str:
    """The algorithm name ``run.json`` stores (the spec names are the lower-case CLI names)."""
    return algo.lower()


def _train(cfg: TrainConfig, stop: threading.Event | None) -> TrainResult:
    t0 = time.perf_counter()
    cpu0 = time.process_time()  # each evaluation's cpu_s counts from here (warm start and baselines included)
    if check_env_id(cfg.env_id) != cfg.env_id:  # a "servegym:" prefix: train under the registered id
        from dataclasses import replace

        cfg = replace(cfg, env_id=check_env_id(cfg.env_id))
    family = family_for(cfg.env_id)
    hp: Hyperparams = load_hyperparams(cfg.env_id, cfg.algo, cfg.hyperparams)
    env_kwargs = {**hp.env_kwargs, **cfg.env_kwargs}
    probe = gym.make(cfg.env_id, **env_kwargs)
    try:
        spec = check_algo(cfg.algo, probe.action_space, cfg.env_id, has_action_masks(probe))
    finally:
        probe.close()
    baselines = resolve_baselines(family, cfg.baselines)
    refs = _protocol_references(cfg.env_id)
    eval_split = cfg.eval_split if refs is not None else None
    if _pins_split(env_kwargs):
        # the user chose the scenario distribution (split=None pins a fixed scenario, whose drawn fields a named
        # split would refuse): evaluation follows that choice instead of the validation split
        eval_split = None
    if refs is not None:  # the normalized score needs both references on the evaluation seeds
        baselines += [b for b in dict.fromkeys(refs.values()) if b not in baselines]
    timesteps = cfg.timesteps or hp.n_timesteps
    if timesteps is None:
        raise ConfigError(f"--timesteps is required: {hp.source} sets no n_timesteps for {cfg.algo}")
    n_envs = cfg.n_envs or hp.n_envs or 1
    check_rollout(hp, n_envs)

    check_device(cfg.device)
    # The learning stack is imported only once the inputs are known to be valid (fast errors).
    from servegym.agents.callbacks import (
        EpisodeMetricsCallback,
        SeededEvalCallback,
        StatsCheckpointCallback,
        StopCallback,
        TqdmCallback,
        planned_steps,
    )
    from servegym.agents.model_io import restore_vecnormalize, save_obs_stats, set_parameters
    from stable_baselines3.common.callbacks import CallbackList
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecNormalize

    from servegym.outputs import save_model, write_json

    out = output_path(cfg)
    previous = _previous_run(cfg, out, env_kwargs)
    run_dir = out.parent
    run_dir.mkdir(parents=True, exist_ok=True)

    vec_cls = SubprocVecEnv if cfg.vec == "subproc" else DummyVecEnv
    vec_kwargs = {"start_method": "spawn"} if cfg.vec == "subproc" else None
    # Training envs add the hyperparameters' train_env_kwargs (e.g. a horizon curriculum) where the env kwargs
    # do not set them (those win, nested dicts merged key by key); evaluation envs play env_kwargs as they are.
    train_kwargs = merge_kwargs(hp.train_env_kwargs, env_kwargs)
    venv = vec_cls([partial(make_monitored_env, cfg.env_id, train_kwargs) for _ in range(n_envs)],
                   **(vec_kwargs or {}))
    venv.seed(cfg.seed)  # env i resets first with seed + i
    algo_kwargs, policy_kwargs = materialize(hp)
    if hp.normalize is not None:
        norm = {"norm_obs": True, "norm_reward": True, **hp.normalize}
        venv = VecNormalize(venv, gamma=float(algo_kwargs.get("gamma", 0.99)), **norm)
    cls = algo_class(spec.name)
    try:
        model = cls(hp.policy, venv, seed=cfg.seed, tensorboard_log=cfg.tb, verbose=0, device=cfg.device,
                    policy_kwargs=policy_kwargs or None, **algo_kwargs)
    except TypeError as exc:
        venv.close()
        raise ConfigError(f"{hp.source}: bad hyperparameter for {spec.name}: {exc}") from exc
    done = 0
    if previous is not None:  # continue: weights + optimizer state, statistics, steps done
        set_parameters(model, out)
        vn_prev = model.get_vec_normalize_env()
        if vn_prev is not None:
            restore_vecnormalize(vn_prev, vecnormalize_path_for(out))
        done = int(previous["timesteps_trained"])
        model.num_timesteps = done

    warm: dict[str, float] | None = None
    if hp.warm_start is not None and previous is None:  # behaviour cloning of the teacher action, then RL
        from servegym.agents.warm_start import behaviour_clone

        warm = behaviour_clone(model, partial(gym.make, cfg.env_id, **train_kwargs), hp.warm_start, cfg.seed)
    improvement: dict[str, Any] | None = None
    eval_seeds = seeds_from(cfg.eval_seed, cfg.eval_episodes)

    def make_eval_env() -> gym.Env:
        # checkpoints are chosen on the validation split only; training envs keep their split
        return gym.make(cfg.env_id, **env_kwargs, **({"split": eval_split} if eval_split is not None else {}))

    if hp.policy_improvement is not None and warm is not None:  # rollout improvement of the clone, then RL
        from servegym.agents.policy_improvement import improve_policy

        improvement = improve_policy(model, partial(gym.make, cfg.env_id, **train_kwargs), hp.policy_improvement,
                                     cfg.seed, partial(_validation_return, model, make_eval_env, eval_seeds, family))
    eval_freq = cfg.eval_freq if cfg.eval_freq is not None else max(timesteps // 5, 1)
    best_path = run_dir / "best_model.zip"

    evaluator = SeededEvalCallback(make_eval_env, family, eval_seeds, baselines,
                                   eval_freq if eval_freq > 0 else timesteps + 1, best_path,
                                   verbose=cfg.verbose, strict_baselines=cfg.baselines not in (None, "all"),
                                   references=refs, stop=stop, eval_at_start=warm is not None,
                                   cpu_origin=cpu0)
    if previous is not None:
        evaluator.resume_from(previous["eval_history"], done)
    callbacks: list[Any] = [StopCallback(stop), EpisodeMetricsCallback(family), evaluator]
    ckpt = cfg.checkpoint_freq if cfg.checkpoint_freq is not None else max(timesteps // 4, 1)
    if ckpt > 0:
        callbacks.append(StatsCheckpointCallback(save_freq=max(ckpt // n_envs, 1),
                                                 save_path=str(run_dir / "checkpoints"), name_prefix="model"))
    if cfg.progress:
        # shown in logs too (not only on terminals), as compare and evaluate do
        from servegym.progress import train_estimate

        n_evals = (timesteps // eval_freq + 1) if eval_freq > 0 else 1
        what = (f"{spec.name} on {cfg.env_id}, seed {cfg.seed}, {n_envs} env(s); {n_evals} evaluation{'s' if n_evals != 1 else ''} on "
                f"{len(eval_seeds)} seed{'s' if len(eval_seeds) != 1 else ''} (agent and {len(baselines)} baselines)")
        # first in the list, so the start line comes before the evaluator plays the baselines
        callbacks.insert(0, TqdmCallback(timesteps, disable=False, what=what,
                                         estimate=_with_evaluations(train_estimate(cfg.env_id, timesteps, cfg.env_kwargs), cfg.env_id,
                                                                    make_eval_env, baselines, n_evals,
                                                                    len(eval_seeds))))
    # TensorBoard's run is named after the run's folder (the one --out names; by default runs/<id>_<algo>_s<seed>),
    # so `tensorboard --logdir` shows the runs as the user named them
    tb_name = out.resolve().parent.name or f"{cfg.env_id.split('/')[-1]}_{spec.name}_s{cfg.seed}"
    planned = planned_steps(model, timesteps, done)
    try:
        if done < timesteps:
            # resumed: learn the remaining steps; SB3 counts on from num_timesteps (schedules included)
            model.learn(total_timesteps=timesteps - done, callback=CallbackList(callbacks), tb_log_name=tb_name,
                        reset_num_timesteps=previous is None)
        save_model(model, out)
        vn_path: Path | None = None
        vn = model.get_vec_normalize_env()
        if vn is not None:
            vn_path = vecnormalize_path_for(out)
            save_obs_stats(vn, vn_path)
    finally:
        venv.close()
    complete = not (stop is not None and stop.is_set()) or int(model.num_timesteps) >= timesteps
    tb_dir = Path(model.logger.get_dir()) if cfg.tb else None
    run = {
        "env_id": cfg.env_id, "algo": spec.name, "env_kwargs": env_kwargs, "timesteps": timesteps,
        "timesteps_trained": int(model.num_timesteps), "status": "complete" if complete else "interrupted",
        "resumed_at": [*((previous or {}).get("resumed_at") or []), done] if previous is not None else [],
        "n_envs": n_envs, "seed": cfg.seed, "eval_seeds": eval_seeds, "eval_split": eval_split,
        "baselines": baselines, "references": refs, "warm_start": warm,
        "policy_improvement": improvement,
        "hyperparams_source": hp.source, "hyperparams": asdict(hp), "model": out.name,
        "tensorboard": str(tb_dir) if tb_dir else None, "eval_history": evaluator.history,
        "baseline_eval": {n: [r.row() for r in res] for n, res in evaluator.baseline_results.items()},
    }
    run_file = run_dir / RUN_FILE
    write_json(run_file, _json_safe(run))
    return TrainResult(model_path=out, best_model_path=best_path if best_path.exists() else None,
                       vecnormalize_path=vn_path, tb_dir=tb_dir, run_file=run_file,
                       eval_history=evaluator.history, wall_s=time.perf_counter() - t0,
                       timesteps_trained=int(model.num_timesteps), complete=complete, timesteps=planned)


def _validation_return(model: Any, make_env: Any, seeds: Sequence[int], family: Any) -> float:
    """The mean return of ``model``'s greedy policy on the evaluation episodes ``seeds`` (the validation split):
    what policy improvement keeps a round by."""
    from servegym.agents.rollout import agent_act_fn, play_episode

    vn = model.get_vec_normalize_env()
    act = agent_act_fn(model, vn.normalize_obs if vn is not None else None)
    env = make_env()
    try:
        return float(sum(play_episode(env, act, s, "agent", family.metrics).reward for s in seeds) / len(seeds))
    finally:
        env.close()


def _pins_split(env_kwargs: dict[str, Any]) -> bool:
    """Whether the env kwargs choose a split themselves (top-level ``split`` or ``config["split"]``)."""
    config = env_kwargs.get("config")
    return "split" in env_kwargs or (isinstance(config, dict) and "split" in config)


def _protocol_references(env_id: str) -> dict[str, str] | None:
    """The env id's naive/best references (servegym ids with splits), else None."""
    from servegym.agents.protocol import checkpoint_references

    return checkpoint_references(env_id)


def read_run(model_path: Path, user_kwargs: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The checked ``run.json`` of a saved model (its folder, or the parent for checkpoints): see
    :mod:`servegym.agents.run_file`; ``user_kwargs`` are the env kwargs the user gave."""
    from servegym.agents.run_file import read_run as read

    return read(model_path, user_kwargs)


def _missing_model(p: Path) -> str:
    """The error for a ``--model`` that is not a file: a run folder (what ``train`` prints as the run) points at
    the model inside it."""
    if not p.is_dir():
        return f"--model = {str(p)!r}: no such file"
    saved = sorted(z.name for z in p.glob("*.zip"))
    if "model.zip" in saved:
        hint = f"did you mean {str(p / 'model.zip')!r}?"
    elif saved:
        hint = f"it holds {', '.join(saved)}"
    else:
        hint = "it holds no model .zip"
    return f"--model = {str(p)!r} is a folder ({hint}); allowed: a model .zip saved by servegym train"


def load_agent(model_path: str | Path, algo: str | None = None, env_id: str | None = None,
               env_kwargs: dict[str, Any] | None = None) -> tuple[Any, Any, dict]:
    """(model, observation normalizer or None, run info) of a saved model, loaded without unpickling
    anything (servegym.agents.model_io): the spaces come from the env (``env_id`` or the run's, made with
    the run's env kwargs updated by ``env_kwargs``), the statistics from the ``.npz`` beside the model."""
    from servegym.agents.model_io import load_obs_normalizer, load_sb3_model

    p = Path(model_path)
    if not p.is_file():
        raise ConfigError(_missing_model(p))
    if env_id:
        env_id = check_env_id(env_id)
    run = read_run(p, env_kwargs) or {}
    algo = algo or run.get("algo")
    if algo is None:
        raise ConfigError(f"--algo is required: no {RUN_FILE} beside {p} says which algorithm saved it")
    if env_id and run.get("env_id") and run["env_id"] != env_id:
        raise ConfigError(f"--env = {env_id!r} but the model was trained on {run['env_id']!r}")
    env_id = env_id or run.get("env_id")
    if env_id is None:
        raise ConfigError(f"--env is required: no {RUN_FILE} beside {p} names the env")
    env_id = check_env_id(env_id)
    cls = algo_class(algo)
    env = gym.make(env_id, **{**(run.get("env_kwargs") or {}), **(env_kwargs or {})})
    try:
        obs_space, act_space = env.observation_space, env.action_space
    finally:
        env.close()
    policy = (run.get("hyperparams") or {}).get("policy")
    model = load_sb3_model(p, cls, obs_space, act_space, policy=policy if isinstance(policy, str) else None)
    stats = vecnormalize_path_for(p)
    norm = load_obs_normalizer(stats)
    _check_normalization(run, stats, norm is not None)
    if norm is not None:
        norm.check_space(obs_space, repr(str(stats)))
    return model, norm, {**run, "algo": algo}


def _check_normalization(run: dict[str, Any], stats: Path, found: bool) -> None:
    """Refuse a model whose statistics file disagrees with its run.json: a run that normalized (its
    hyperparameters' ``normalize`` is an object) played without its statistics, or statistics applied to a
    run that did not normalize, gives wrong actions without an error. Without a run.json's hyperparameters
    the file decides, as before."""
    hp = run.get("hyperparams")
    if not isinstance(hp, dict) or "normalize" not in hp:
        return
    normalized = hp["normalize"] is not None
    if normalized and not found:
        raise ConfigError(f"{str(stats)!r} is missing, but {RUN_FILE} says the model was trained with VecNormalize; "
                          "allowed: the statistics file servegym train wrote beside the model")
    if found and not normalized:
        raise ConfigError(f"{str(stats)!r} is present, but {RUN_FILE} says the model was trained without "
                          "VecNormalize; allowed: a model folder as servegym train wrote it")


def _with_evaluations(train: tuple[float | None, str], env_id: str, make_env: Any, baselines: Sequence[str],
                      n_evals: int, n_seeds: int) -> tuple[float | None, str]:
    """``train``'s estimate (the training steps) plus the evaluations: the agent ``n_evals`` times and the baselines
    once, each on ``n_seeds`` episodes, at the CPU-s per unit of benchmarks/episode_costs.py
    (:mod:`servegym.estimates`); ``train`` unchanged when either part has no measured rate."""
    from servegym.estimates import episode_units, estimate

    est, basis = train
    if est is None:
        return train
    env = make_env()
    try:
        units = episode_units(env)
    finally:
        env.close()
    agent, _ = estimate(env_id, ["agent"], units, n_evals * n_seeds, setup=False)
    base, _ = estimate(env_id, list(baselines), units, n_seeds, setup=False) if baselines else (0.0, "")
    if agent is None or base is None:
        return train
    return est + agent + base, (basis.removesuffix(", evaluations add to it")
                                + f"; plus the evaluations ({agent + base:.0f} s: the agent {n_evals} x {n_seeds} "
                                "episodes, the baselines once, at the CPU-s per unit measured in "
                                "benchmarks/results/episode_costs.md)")
