"""Training callbacks: a tqdm progress bar, per-episode domain scalars, and seeded evaluations with
the family's baselines as reference lines in TensorBoard.

TensorBoard tags written (``<m>`` = a domain scalar of the family, e.g. ``carbon_g``):

- ``episode/<m>``: each finished training episode, at the step it ended;
- ``eval/mean_reward``, ``eval/<m>`` (mean over the evaluation seeds), ``eval/saving_vs_<ref>_pct``;
- ``eval/normalized_score`` and ``eval/normalized_score_iqm``: the protocol's normalized score
  (:mod:`servegym.agents.protocol`; 0 = naive, 100 = best) on the evaluation seeds, which ``servegym
  train`` draws from the env's ``validation`` split; the best checkpoint is the one with the highest
  mean normalized score (mean reward for envs without references);
- each evaluation's history row also carries ``timesteps`` and ``cpu_s``: the process CPU seconds from
  ``cpu_origin`` (the start of ``servegym train``'s run, so a warm start counts) to the end of that
  evaluation, what the time-to-the-strongest-baseline figure reads (not logged to TensorBoard);
- ``baseline/<name>/<m>`` and ``baseline/<name>/mean_reward``: the baselines on the same seeds,
  logged at every evaluation step so they draw as flat reference lines;
- a Custom Scalars layout (TensorBoard's "Custom Scalars" tab) with one chart per metric that
  overlays the agent and every baseline.

This module imports stable-baselines3 (and torch); import it only from training code.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from servegym.agents.families import (
    EpisodeAccumulator,
    EpisodeResult,
    Family,
    run_baseline_episodes,
    saving_pct,
)
from servegym.agents.model_io import save_obs_stats
from servegym.agents.rollout import agent_act_fn, play_episode
from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback
from stable_baselines3.common.logger import TensorBoardOutputFormat

from servegym.outputs import save_model
from servegym.progress import stamp


def tb_writer(logger: Any) -> Any | None:
    """The SummaryWriter of SB3's TensorBoard output, or ``None`` when TensorBoard logging is off."""
    for fmt in getattr(logger, "output_formats", ()):
        if isinstance(fmt, TensorBoardOutputFormat):
            return fmt.writer
    return None


def planned_steps(model: Any, timesteps: int, done: int) -> int:
    """The step count ``model.learn`` ends at when asked for ``timesteps`` in all with ``done`` already trained:
    on-policy algorithms collect whole rollouts of n_steps x n_envs, counted from ``done`` (an interrupted run
    stops mid-rollout), so 20,000 asked of a fresh PPO run with 2,048-step rollouts is 20,480. The progress
    start line and the interrupt line both say this total."""
    rollout = int(getattr(model, "n_steps", 0) or 0) * int(getattr(model, "n_envs", 1) or 1)
    if rollout <= 0 or done >= timesteps:
        return max(timesteps, done)
    return done + math.ceil((timesteps - done) / rollout) * rollout


class StopCallback(BaseCallback):
    """Ends training at the next step once ``stop`` is set (SIGINT/SIGTERM in ``servegym train``); SB3 then
    returns from ``learn`` normally and the run is saved."""

    def __init__(self, stop: threading.Event | None) -> None:
        super().__init__()
        self.stop = stop

    def _on_step(self) -> bool:
        return self.stop is None or not self.stop.is_set()


class TqdmCallback(BaseCallback):
    """Progress over environment steps (:class:`servegym.progress.Progress`: a start line with the estimated
    time, a tqdm bar on a terminal, timestamped lines in a log). ``what`` and ``estimate`` (seconds or None, what
    it rests on) describe the run on the start line."""

    def __init__(self, total: int, disable: bool | None = None, what: str = "",
                 estimate: tuple[float | None, str] = (None, "")) -> None:
        super().__init__()
        self.total = total
        self.disable = disable
        self.what = what
        self.estimate = estimate
        self._bar: Any = None
        self._stepped = False

    def _on_training_start(self) -> None:
        from servegym.progress import Progress

        done = int(self.model.num_timesteps)
        asked = self.total
        self.total = planned_steps(self.model, self.total, done)  # the bar shows the steps learn() will run
        what = self.what
        if self.total != max(asked, done):  # say why the count differs from --timesteps
            n_steps, n_envs = int(self.model.n_steps), int(self.model.n_envs)
            what += (f" ({asked:,} steps asked{f', {done:,} done' if done else ''}; rounded up to whole rollouts of "
                     f"{n_steps:,} steps x {n_envs} env{'s' if n_envs != 1 else ''})")
        est, basis = self.estimate
        if est is not None and self.total:  # the estimate was for the full budget; a resumed run does the rest
            est *= max(self.total - done, 0) / self.total
        self._bar = Progress(max(self.total - done, 0), "train", "step", what=what, estimate_s=est,
                             basis=basis, disable=bool(self.disable))

    def _on_step(self) -> bool:
        if not self._stepped:  # the evaluator's baselines ran between the start line and this first step
            self._stepped = True
            self._bar.restart_clock()
        self._bar.update(self.training_env.num_envs)
        return True

    def _on_training_end(self) -> None:
        if self._bar is not None:
            self._bar.close()


class EpisodeMetricsCallback(BaseCallback):
    """Logs each finished training episode's domain scalars as ``episode/<m>`` at the current step."""

    def __init__(self, family: Family) -> None:
        super().__init__()
        self.family = family
        self._acc: list[EpisodeAccumulator] = []
        self.episodes = 0
        self.last: dict[str, float] = {}

    def _on_training_start(self) -> None:
        self._acc = [EpisodeAccumulator(self.family.metrics) for _ in range(self.training_env.num_envs)]

    def _on_step(self) -> bool:
        if not self.family.metrics:
            return True
        infos: Sequence[dict[str, Any]] = self.locals.get("infos", ())
        dones = np.asarray(self.locals.get("dones", np.zeros(len(infos), dtype=bool)))
        writer = tb_writer(self.logger)
        for i, info in enumerate(infos):
            acc = self._acc[i]
            if not acc.only_last or dones[i]:
                acc.add(info)
            if dones[i]:
                self.last = acc.result()
                acc.reset()
                self.episodes += 1
                for key, value in self.last.items():
                    self.logger.record_mean(f"episode/{key}", value, exclude=("tensorboard",))
                    if writer is not None:
                        writer.add_scalar(f"episode/{key}", value, self.num_timesteps)
        return True


def summarize_episodes(results: Sequence[EpisodeResult]) -> dict[str, float]:
    """Mean reward and mean of each domain scalar over episodes."""
    out = {"mean_reward": float(np.mean([r.reward for r in results]))}
    keys = sorted({k for r in results for k in r.metrics})
    for k in keys:
        vals = [r.metrics[k] for r in results if k in r.metrics]
        out[k] = float(np.mean(vals))
    return out


def mean_saving(agent: Sequence[EpisodeResult], reference: Sequence[EpisodeResult], metric: str) -> float:
    """Mean per-seed saving (%) of ``metric`` against the reference policy on the same seeds."""
    ref = {r.seed: r.metrics.get(metric, math.nan) for r in reference}
    vals = [saving_pct(r.metrics[metric], ref.get(r.seed, math.nan)) for r in agent if metric in r.metrics]
    vals = [v for v in vals if math.isfinite(v)]
    return float(np.mean(vals)) if vals else math.nan


class SeededEvalCallback(BaseCallback):
    """Every ``eval_freq`` environment steps, plays the agent (deterministic) on fixed seeds, logs the
    domain scalars beside the baselines' on the same seeds, and saves the best model by mean reward.

    Args:
        make_env: builds a fresh evaluation env (same id and kwargs as training).
        family: the env's family (metrics, baselines).
        seeds: evaluation episode seeds (identical at every evaluation, so curves are comparable).
        baselines: baseline names to evaluate once on ``seeds`` and draw as reference lines.
        eval_freq: evaluation period in total environment steps (over all parallel envs).
        best_path: where the best model goes (``.zip``); its observation statistics (.npz) beside it.
    """

    def __init__(self, make_env: Callable[[], gym.Env], family: Family, seeds: Sequence[int],
                 baselines: Sequence[str], eval_freq: int, best_path: Path | None, verbose: int = 0,
                 strict_baselines: bool = True, references: dict[str, str] | None = None,
                 stop: threading.Event | None = None, eval_at_start: bool = False,
                 cpu_origin: float | None = None) -> None:
        super().__init__(verbose)
        self.stop = stop
        # time.process_time() at the run's start: each evaluation records the CPU-s spent up to its end
        self.cpu_origin = time.process_time() if cpu_origin is None else cpu_origin
        # a warm-started policy is a checkpoint candidate before any RL step (RL may only degrade it)
        self.eval_at_start = eval_at_start
        self.references = references
        #: the references ordered on the evaluation seeds (set once the baselines have played them)
        self.scale: dict[str, str] | None = None
        self.last_results: list[EpisodeResult] = []
        self.best_score = -math.inf
        self.make_env = make_env
        self.family = family
        self.seeds = list(seeds)
        self.baseline_names = list(baselines)
        self.strict_baselines = strict_baselines
        self.eval_freq = max(1, int(eval_freq))
        self.best_path = best_path
        self.best_mean_reward = -math.inf
        self.baseline_results: dict[str, list[EpisodeResult]] = {}
        self.history: list[dict[str, float]] = []
        self._env: gym.Env | None = None
        self._next_eval = self.eval_freq

    def _on_training_start(self) -> None:
        self._env = self.make_env()
        self.baseline_results = run_baseline_episodes(self.family, self._env, self.baseline_names, self.seeds,
                                                      strict=self.strict_baselines)
        self.scale = self._ordered_references()
        writer = tb_writer(self.logger)
        if writer is not None and self.family.metrics:
            keys = [*self.family.metric_keys(), "mean_reward", *(["normalized_score"] if self.references else [])]
            layout = {"servegym: agent vs baselines (same seeds)": {
                k: ["Multiline", [f"eval/{k}$", f"baseline/.*/{k}$"]] for k in keys}}
            writer.add_custom_scalars(layout)
        if self.eval_at_start and not self.history:
            self.evaluate()

    def _on_rollout_start(self) -> None:
        # Checked between rollouts, where the policy has just been updated: evaluating inside an
        # on-policy rollout would score the same policy repeatedly.
        if self.num_timesteps >= self._next_eval:
            while self._next_eval <= self.num_timesteps:
                self._next_eval += self.eval_freq
            self.evaluate()

    def _on_step(self) -> bool:
        return True

    def _on_training_end(self) -> None:
        if self.stop is not None and self.stop.is_set():
            return  # interrupted: save and exit now; a resumed run evaluates at its next period and at its end
        self.evaluate()
        if self.verbose:
            for line in self.verdicts():
                print(f"[{stamp()}] {line}", flush=True)

    def verdicts(self) -> list[str]:
        """The last evaluation's paired verdicts against the references (:func:`servegym.agents.protocol.
        paired_verdict`, the rule ``servegym evaluate`` and the leaderboard use), on the evaluation seeds."""
        from servegym.agents import protocol

        if not self.last_results or self._env is None:
            return []
        kpi = protocol.kpi_metric(self._env)
        if kpi not in self.last_results[0].metrics:
            return []
        names = dict.fromkeys((self.references or {}).values()) or dict.fromkeys(self.baseline_results)
        return [f"final eval ({len(self.seeds)} validation seeds): "
                + protocol.paired_verdict(self.last_results, self.baseline_results[n], kpi, n).text("agent")
                for n in names if n in self.baseline_results]

    def resume_from(self, history: Sequence[dict[str, Any]], timesteps: int) -> None:
        """Continue an interrupted run: its evaluation history, best score and next evaluation step."""
        self.history = [dict(h) for h in history]
        for h in self.history:
            score = h.get("normalized_score")
            if isinstance(score, (int, float)) and math.isfinite(score):
                self.best_score = max(self.best_score, float(score))
            reward = h.get("mean_reward")
            if isinstance(reward, (int, float)) and math.isfinite(reward):
                self.best_mean_reward = max(self.best_mean_reward, float(reward))
        while self._next_eval <= timesteps:
            self._next_eval += self.eval_freq
        spent = self.history[-1].get("cpu_s") if self.history else None
        if isinstance(spent, (int, float)) and math.isfinite(spent):  # a resumed run counts on from its CPU-s
            self.cpu_origin = time.process_time() - float(spent)

    def evaluate(self) -> dict[str, float]:
        assert self._env is not None
        vn = self.model.get_vec_normalize_env()
        act = agent_act_fn(self.model, vn.normalize_obs if vn is not None else None)
        results = [play_episode(self._env, act, s, "agent", self.family.metrics) for s in self.seeds]
        self.last_results = results
        summary = summarize_episodes(results)
        scores = self._scores(results)
        if scores is not None:
            from servegym.agents.protocol import score_stats

            ok = scores[np.isfinite(scores)]
            summary["normalized_score"] = float(ok.mean()) if ok.size else math.nan
            summary["normalized_score_iqm"] = score_stats(ok).iqm if ok.size else math.nan
        ref, metric = self.family.reference, self.family.saving_metric
        if ref and metric and ref in self.baseline_results:
            summary[f"saving_vs_{ref}_pct"] = mean_saving(results, self.baseline_results[ref], metric)
        step = self.num_timesteps
        writer = tb_writer(self.logger)
        for key, value in summary.items():
            self.logger.record(f"eval/{key}", value, exclude=("tensorboard",))
        if writer is not None:
            for name, res in self.baseline_results.items():
                b = summarize_episodes(res)
                sc = self._scores(res)
                if sc is not None and np.isfinite(sc).any():
                    b["normalized_score"] = float(np.nanmean(sc))
                if ref and metric and ref in self.baseline_results:
                    b[f"saving_vs_{ref}_pct"] = mean_saving(res, self.baseline_results[ref], metric)
                for key, value in b.items():
                    writer.add_scalar(f"baseline/{name}/{key}", value, step)
            for key, value in summary.items():
                writer.add_scalar(f"eval/{key}", value, step)
            writer.flush()
        summary["timesteps"] = float(step)
        summary["cpu_s"] = time.process_time() - self.cpu_origin
        self.history.append(summary)
        # the protocol's selection: the highest mean normalized score (validation split); else mean reward
        score = summary.get("normalized_score", math.nan)
        key = score if math.isfinite(score) else -math.inf
        improved = (key > self.best_score) if math.isfinite(score) else (
            self.best_score == -math.inf and summary["mean_reward"] > self.best_mean_reward)
        if math.isfinite(score):
            self.best_score = max(self.best_score, key)
        if improved:
            self.best_mean_reward = max(self.best_mean_reward, summary["mean_reward"])
            if self.best_path is not None:
                save_model(self.model, self.best_path)
                if vn is not None:
                    save_obs_stats(vn, self.best_path.with_name(self.best_path.stem + "_vecnormalize.npz"))
        if self.verbose:
            shown = ", ".join(f"{k}={v:.4g}" for k, v in summary.items() if k != "timesteps")
            # timestamped, and flushed: the line reaches a log file when it happens, not when the run ends
            print(f"[{stamp()}] eval @ {step}: {shown}", flush=True)
        return summary


    def _ordered_references(self) -> dict[str, str] | None:
        """The references as the checkpoint scale's endpoints on the evaluation seeds, the lower mean return at 0
        (:func:`servegym.agents.protocol.checkpoint_scale`); None without both references' episodes."""
        if not self.references:
            return None
        from servegym.agents.protocol import checkpoint_scale

        got = {k: self.baseline_results.get(self.references[k]) for k in ("naive", "best")}
        if not got["naive"] or not got["best"]:
            return None
        return checkpoint_scale(self.references, {self.references[k]: [r.reward for r in got[k]] for k in got})

    def _scores(self, results: Sequence[EpisodeResult]) -> np.ndarray | None:
        """Normalized scores of ``results`` against the references on the same seeds (None without them)."""
        refs = self.scale or self.references
        if not refs:
            return None
        naive = self.baseline_results.get(refs["naive"])
        best = self.baseline_results.get(refs["best"])
        if not naive or not best:
            return None
        from servegym.agents.protocol import episode_scores

        return episode_scores(results, naive, best)


class StatsCheckpointCallback(CheckpointCallback):
    """SB3's checkpoints (``model_<N>_steps.zip``), written atomically, with the VecNormalize observation
    statistics as a plain-array ``.npz`` (``model_vecnormalize_<N>_steps.npz``) instead of SB3's pickle,
    which loading would have to unpickle."""

    def __init__(self, save_freq: int, save_path: str, name_prefix: str = "model", verbose: int = 0) -> None:
        super().__init__(save_freq=save_freq, save_path=save_path, name_prefix=name_prefix,
                         save_vecnormalize=False, verbose=verbose)

    def _on_step(self) -> bool:
        if self.n_calls % self.save_freq == 0:
            save_model(self.model, self._checkpoint_path(extension="zip"))
            vn = self.model.get_vec_normalize_env()
            if vn is not None:
                save_obs_stats(vn, self._checkpoint_path("vecnormalize_", extension="npz"))
        return True
