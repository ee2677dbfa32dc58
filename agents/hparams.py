"""rl-zoo3-style hyperparameter files: one YAML per env id, one section per algorithm.

Shipped files live in ``servegym/agents/hyperparams/<EnvName>.yml`` (the id without the
``servegym/`` namespace). A section uses rl-zoo3's vocabulary::

    ppo:
      n_envs: 4              # parallel envs (``--n-envs`` overrides)
      n_timesteps: 100000    # default budget (``--timesteps`` overrides)
      policy: MlpPolicy
      normalize: true        # VecNormalize; or a mapping {norm_obs: true, norm_reward: false}
      env_kwargs: {}         # passed to gym.make
      train_env_kwargs: {}   # training envs only (e.g. a curriculum): what env_kwargs and --env-kwargs
                             # do not set (nested dicts merged); evaluation envs play env_kwargs as they are
      policy_kwargs: {net_arch: [64, 64], activation_fn: tanh}
      learning_rate: lin_3e-4   # "lin_X": linear decay from X to 0, as in rl-zoo3
      warm_start: {steps: 4096, epochs: 10}   # behaviour cloning of the reference (teacher action)
                             # before RL (servegym.agents.warm_start)
      policy_improvement: {rounds: 1, states: 4000}   # after warm_start: rollout policy improvement with
                             # common random numbers (servegym.agents.policy_improvement)
      n_steps: 256           # everything else goes to the algorithm's constructor

A user file given with ``--hyperparams`` may have the same layout, rl-zoo3's layout (env ids as
top-level keys) or be a single flat section.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from servegym.agents.policy_improvement import PolicyImprovement, parse_policy_improvement
from servegym.agents.warm_start import WarmStart, parse_warm_start

from servegym.errors import ConfigError, shown

# Keys the trainer consumes itself; the rest are algorithm constructor arguments.
TRAINER_KEYS = ("n_envs", "n_timesteps", "policy", "normalize", "env_kwargs", "train_env_kwargs", "policy_kwargs",
                "warm_start", "policy_improvement")


@dataclass(frozen=True)
class Hyperparams:
    """A resolved section: ``algo_kwargs`` go to the algorithm; the rest configure the run."""

    policy: str = "MlpPolicy"
    n_envs: int | None = None
    n_timesteps: int | None = None
    normalize: dict[str, Any] | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    train_env_kwargs: dict[str, Any] = field(default_factory=dict)
    policy_kwargs: dict[str, Any] = field(default_factory=dict)
    algo_kwargs: dict[str, Any] = field(default_factory=dict)
    source: str = "defaults"
    warm_start: WarmStart | None = None
    policy_improvement: PolicyImprovement | None = None


def env_file_name(env_id: str) -> str:
    return env_id.split("/")[-1] + ".yml"


def _read_yaml(path: Path | Any) -> Any:
    """A YAML file's document, read within bounds (:func:`servegym.safe_yaml.load_yaml`)."""
    try:
        import yaml  # noqa: F401
    except ImportError as exc:
        raise ConfigError("YAML files (sweep configs, hyperparameters) need pyyaml, a core dependency of servegym: "
                          "pip install pyyaml") from exc
    from servegym.safe_yaml import load_yaml

    return load_yaml(path)


def shipped_file(env_id: str) -> Any | None:
    """The shipped hyperparameter file of an env id (a Traversable), or ``None``."""
    f = resources.files("servegym.agents").joinpath("hyperparams", env_file_name(env_id))
    return f if f.is_file() else None


def _section(doc: Any, env_id: str, algo: str, where: str) -> dict[str, Any] | None:
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: expected a mapping at the top level, got {type(doc).__name__}")
    if env_id in doc:  # rl-zoo3 layout: {env_id: {...}} for one algorithm
        doc = doc[env_id]
    if algo in doc and isinstance(doc[algo], dict):
        return dict(doc[algo])
    if any(isinstance(v, dict) and k.replace("_", "-") in _algo_names() for k, v in doc.items()):
        return None  # a per-algo file without a section for this algo
    return dict(doc)


def _algo_names() -> set[str]:
    from servegym.agents.algos import ALGOS

    return set(ALGOS)


def load_hyperparams(env_id: str, algo: str, path: str | Path | None = None) -> Hyperparams:
    """The section for ``algo`` from ``path`` (or the env's shipped file); SB3 defaults when absent."""
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"--hyperparams = {str(path)!r}: no such file")
        raw = _section(_read_yaml(p), env_id, algo, str(p))
        if raw is None:
            raise ConfigError(f"--hyperparams = {str(path)!r} has no section for algo {algo!r}")
        from servegym.file_refs import check_file_refs

        for key in ("env_kwargs", "train_env_kwargs"):  # files it names lie in its folder, like a sweep's
            check_file_refs(raw.get(key), f"{p}: {key}", "a hyperparameter file", roots=(p.parent,),
                            fix="put it in the hyperparameter file's folder (or below it)")
        source = str(p)
    else:
        f = shipped_file(env_id)
        raw = _section(_read_yaml(f), env_id, algo, str(f)) if f is not None else None
        source = f"servegym/agents/hyperparams/{env_file_name(env_id)}" if raw is not None else "defaults"
    return parse_section(raw or {}, source)


def parse_section(raw: dict[str, Any], source: str) -> Hyperparams:
    raw = dict(raw)
    normalize = raw.pop("normalize", False)
    if isinstance(normalize, str):  # rl-zoo3 writes "{'norm_obs': True, 'norm_reward': False}"
        normalize = {"norm_obs": "norm_obs': false" not in normalize.lower(),
                     "norm_reward": "norm_reward': false" not in normalize.lower()}
    if normalize is True:
        normalize = {}
    elif normalize is False or normalize is None:
        normalize = None
    elif not isinstance(normalize, dict):
        raise ConfigError(f"{source}: normalize = {shown(normalize)}; allowed: true, false or a mapping")

    def _int(key: str) -> int | None:
        v = raw.pop(key, None)
        if v is None:
            return None
        try:
            iv = int(float(v))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{source}: {key} = {shown(v)}; allowed: a positive integer") from exc
        if iv < 1:
            raise ConfigError(f"{source}: {key} = {shown(v)}; allowed: >= 1")
        return iv

    n_envs = _int("n_envs")
    n_timesteps = _int("n_timesteps")
    env_kwargs = raw.pop("env_kwargs", None) or {}
    train_env_kwargs = raw.pop("train_env_kwargs", None) or {}
    policy_kwargs = raw.pop("policy_kwargs", None) or {}
    warm_start = parse_warm_start(raw.pop("warm_start", None), source)
    improvement = parse_policy_improvement(raw.pop("policy_improvement", None), source)
    if improvement is not None and warm_start is None:
        raise ConfigError(f"{source}: policy_improvement needs warm_start (it improves the cloned teacher); "
                          "allowed: policy_improvement together with warm_start, or neither")
    for key, val in (("env_kwargs", env_kwargs), ("train_env_kwargs", train_env_kwargs),
                     ("policy_kwargs", policy_kwargs)):
        if not isinstance(val, dict):
            raise ConfigError(f"{source}: {key} must be a mapping, got {shown(val)}")
    return Hyperparams(policy=str(raw.pop("policy", "MlpPolicy")), n_envs=n_envs, n_timesteps=n_timesteps,
                       normalize=normalize, env_kwargs=dict(env_kwargs), train_env_kwargs=dict(train_env_kwargs),
                       policy_kwargs=dict(policy_kwargs),
                       algo_kwargs=raw, source=source, warm_start=warm_start, policy_improvement=improvement)


def materialize(hp: Hyperparams) -> tuple[dict[str, Any], dict[str, Any]]:
    """(algo kwargs, policy kwargs) with rl-zoo3 shorthands resolved (imports torch)."""
    import torch.nn as nn

    acts = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "leaky_relu": nn.LeakyReLU, "gelu": nn.GELU}
    pk = dict(hp.policy_kwargs)
    if isinstance(pk.get("activation_fn"), str):
        name = pk["activation_fn"].lower().removeprefix("nn.")
        if name not in acts:
            raise ConfigError(f"{hp.source}: policy_kwargs.activation_fn = {shown(pk['activation_fn'])}; "
                              f"allowed: {', '.join(acts)}")
        pk["activation_fn"] = acts[name]
    ak = dict(hp.algo_kwargs)
    for key in ("learning_rate", "clip_range"):
        v = ak.get(key)
        if isinstance(v, str):
            if v.startswith("lin_"):
                start = float(v[4:])
                ak[key] = _Linear(start)
            else:
                try:
                    ak[key] = float(v)
                except ValueError as exc:
                    raise ConfigError(f"{hp.source}: {key} = {shown(v)}; allowed: a number or lin_<number>") from exc
    return ak, pk


class _Linear:
    """rl-zoo3's linear schedule: ``progress_remaining * start`` (picklable, unlike a closure)."""

    def __init__(self, start: float) -> None:
        self.start = start

    def __call__(self, progress_remaining: float) -> float:
        return progress_remaining * self.start


def merge_kwargs(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``over``, nested dicts merged key by key (``{"config": {...}}`` overrides stay partial)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge_kwargs(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
