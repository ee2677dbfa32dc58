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

Every value is range-checked before anything is built (:data:`ALGO_RANGES`, :data:`POLICY_RANGES`,
:func:`check_net_arch`): a mistyped exponent (``n_steps: 1e9``, ``net_arch: [1e6, 1e6]``) would otherwise
allocate gigabytes to terabytes, and a negative count fails deep inside SB3. Keys outside the tables are
refused with the allowed list; the arguments servegym sets itself (seed, device, verbosity, TensorBoard)
and those that take Python objects (buffer classes, action noise) are not hyperparameters here.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from servegym.agents.policy_improvement import PolicyImprovement, parse_policy_improvement
from servegym.agents.warm_start import WarmStart, check_number, parse_warm_start

from servegym.errors import ConfigError, near_miss, shown

# Keys the trainer consumes itself; the rest are algorithm constructor arguments.
TRAINER_KEYS = ("n_envs", "n_timesteps", "policy", "normalize", "env_kwargs", "train_env_kwargs", "policy_kwargs",
                "warm_start", "policy_improvement")


#: The trainer's own counts: n_envs as ``--n-envs`` allows, n_timesteps as run.json's counts.
TRAINER_RANGES: dict[str, tuple[float, float]] = {"n_envs": (1, 256), "n_timesteps": (1, 10**12)}

#: Algorithm arguments (SB3 2.x's PPO, A2C, DQN, SAC, TD3 and sb3-contrib's MaskablePPO) -> (kind, low, high).
#: kind: "int", "float", "bool", "rate" (a number or rl-zoo3's ``lin_<number>``), "coef" (a number, or
#: SAC's ``auto``/``auto_<number>``), "entropy" (a number or ``auto``), "freq" (an integer or
#: ``[integer, step|episode]``); a trailing "?" also allows null. Bounds are closed. The widest ranges
#: still keep one run's buffers within a few GB: a rollout is n_steps x n_envs observations, a replay
#: buffer buffer_size of them.
ALGO_RANGES: dict[str, tuple[str, float, float]] = {
    "learning_rate": ("rate", 1e-9, 1.0),
    "n_steps": ("int", 1, 65_536),
    "batch_size": ("int", 1, 65_536),
    "n_epochs": ("int", 1, 1_000),
    "gamma": ("float", 0.0, 1.0),
    "gae_lambda": ("float", 0.0, 1.0),
    "clip_range": ("rate", 1e-9, 10.0),
    "clip_range_vf": ("float?", 1e-9, 10.0),
    "normalize_advantage": ("bool", 0, 1),
    "ent_coef": ("coef", 0.0, 10.0),
    "vf_coef": ("float", 0.0, 100.0),
    "max_grad_norm": ("float", 1e-9, 1e6),
    "use_sde": ("bool", 0, 1),
    "sde_sample_freq": ("int", -1, 1_000_000),
    "target_kl": ("float?", 1e-9, 10.0),
    "stats_window_size": ("int", 1, 100_000),
    "rms_prop_eps": ("float", 1e-12, 1.0),
    "use_rms_prop": ("bool", 0, 1),
    "buffer_size": ("int", 1, 1_000_000),
    "learning_starts": ("int", 0, 10**9),
    "tau": ("float", 0.0, 1.0),
    "train_freq": ("freq", 1, 1_000_000),
    "gradient_steps": ("int", -1, 10_000),
    "optimize_memory_usage": ("bool", 0, 1),
    "target_update_interval": ("int", 1, 10**9),
    "exploration_fraction": ("float", 0.0, 1.0),
    "exploration_initial_eps": ("float", 0.0, 1.0),
    "exploration_final_eps": ("float", 0.0, 1.0),
    "target_entropy": ("entropy", -1e6, 1e6),
    "use_sde_at_warmup": ("bool", 0, 1),
    "policy_delay": ("int", 1, 1_000),
    "target_policy_noise": ("float", 0.0, 10.0),
    "target_noise_clip": ("float", 0.0, 10.0),
}
#: The most observations one rollout holds (n_steps x n_envs): 2^20, ~0.7 GB at NPUAutoscale-v0's 171 floats.
MAX_ROLLOUT = 2**20
#: Policy keyword arguments besides ``net_arch`` (checked by :func:`check_net_arch`) and ``activation_fn``
#: (a name, resolved by :func:`materialize`).
POLICY_RANGES: dict[str, tuple[str, float, float]] = {
    "log_std_init": ("float", -20.0, 20.0),
    "ortho_init": ("bool", 0, 1),
    "share_features_extractor": ("bool", 0, 1),
    "normalize_images": ("bool", 0, 1),
    "full_std": ("bool", 0, 1),
    "use_expln": ("bool", 0, 1),
    "squash_output": ("bool", 0, 1),
    "n_critics": ("int", 1, 4),
}
#: A net_arch layer's width, its number of layers, and the weights between its hidden layers (per network:
#: the shared list, or each of pi, vf, qf). 2^21 keeps the widest policy with its optimizer state within
#: :data:`servegym.agents.model_io.MAX_TENSOR_BYTES`.
MAX_NET_WIDTH = 4096
MAX_NET_LAYERS = 8
MAX_NET_WEIGHTS = 2**21


def _numeric(val: Any) -> Any:
    """A string YAML 1.1 leaves unparsed (``1e5``, ``3e-4``: no dot) as the float it spells, else ``val``."""
    if isinstance(val, str):
        try:
            return float(val)
        except ValueError:
            return val
    return val


def _checked_value(name: str, val: Any, kind: str, low: float, high: float) -> Any:
    """``val`` checked against one row of :data:`ALGO_RANGES` (``name`` in the error), numbers normalized
    (``1e4`` for an integer becomes 10000)."""
    if kind.endswith("?"):
        if val is None:
            return None
        kind = kind[:-1]
    if kind == "bool":
        if not isinstance(val, bool):
            raise ConfigError(f"{name} = {shown(val)}; allowed: true or false")
        return val
    if kind == "rate" and isinstance(val, str) and val.startswith("lin_"):  # rl-zoo3's linear schedule
        check_number(f"{name} (lin_<start>)", _numeric(val[4:]), (low, high), False)
        return val
    if kind in ("coef", "entropy") and val == "auto":  # SAC tunes it
        return val
    if kind == "coef" and isinstance(val, str) and val.startswith("auto_"):  # SAC tunes it from this start
        check_number(f"{name} (auto_<start>)", _numeric(val[5:]), (1e-9, high), False)
        return val
    if kind == "freq" and isinstance(val, list):
        if len(val) != 2 or val[1] not in ("step", "episode"):
            raise ConfigError(f"{name} = {shown(val)}; allowed: an integer or [integer, step|episode]")
        return (check_number(name, _numeric(val[0]), (low, high), True), val[1])  # SB3 wants a tuple
    return check_number(name, _numeric(val), (low, high), kind in ("int", "freq"))


def check_net_arch(net_arch: Any, where: str) -> Any:
    """``net_arch`` (a list of layer widths, or a mapping of pi/vf/qf to such lists) within
    :data:`MAX_NET_WIDTH`, :data:`MAX_NET_LAYERS` and :data:`MAX_NET_WEIGHTS`; a one-line error naming
    ``where`` otherwise."""
    allowed = (f"allowed: a list of at most {MAX_NET_LAYERS} integer widths in [1, {MAX_NET_WIDTH}] with at most "
               f"{MAX_NET_WEIGHTS:,} weights between them, or a mapping of pi, vf, qf to such lists")
    lists = net_arch if isinstance(net_arch, dict) else {None: net_arch}
    if not lists or any(k not in (None, "pi", "vf", "qf") for k in lists):
        raise ConfigError(f"{where}: net_arch = {shown(net_arch)}; {allowed}")
    for key, widths in lists.items():
        name = f"{where}: net_arch" + ("" if key is None else f".{key}")
        ok = isinstance(widths, list) and len(widths) <= MAX_NET_LAYERS and all(
            isinstance(w, int) and not isinstance(w, bool) and 1 <= w <= MAX_NET_WIDTH for w in widths)
        if not ok or sum(a * b for a, b in itertools.pairwise(widths)) > MAX_NET_WEIGHTS:
            raise ConfigError(f"{name} = {shown(widths)}; {allowed}")
    return net_arch


def check_policy_kwargs(policy_kwargs: dict[str, Any], source: str) -> None:
    """Every key of ``policy_kwargs`` known and within :data:`POLICY_RANGES` (net_arch:
    :func:`check_net_arch`)."""
    for key, val in policy_kwargs.items():
        if key == "net_arch":
            check_net_arch(val, f"{source}: policy_kwargs")
        elif key in POLICY_RANGES:
            _checked_value(f"{source}: policy_kwargs.{key}", val, *POLICY_RANGES[key])
        elif key != "activation_fn":
            raise ConfigError(f"{source}: policy_kwargs.{shown(key, 40)} is not a policy argument here; allowed: "
                              f"{', '.join(['net_arch', 'activation_fn', *POLICY_RANGES])}")


def check_algo_kwargs(algo_kwargs: dict[str, Any], source: str) -> dict[str, Any]:
    """``algo_kwargs`` with every value within :data:`ALGO_RANGES` (numbers normalized); a one-line error
    naming the file and the key otherwise, also for a key that is not in the table."""
    out: dict[str, Any] = {}
    for key, val in algo_kwargs.items():
        if key not in ALGO_RANGES:
            hint = near_miss(key, [*TRAINER_KEYS, *ALGO_RANGES])
            raise ConfigError(f"{source}: {shown(key, 40)} is not a hyperparameter servegym train passes on{hint}; "
                              "allowed: the trainer's keys and the algorithm arguments of "
                              "servegym.agents.hparams.ALGO_RANGES (n_steps, batch_size, gamma, learning_rate, ...)")
        out[key] = _checked_value(f"{source}: {key}", val, *ALGO_RANGES[key])
    return out


def check_rollout(hp: Hyperparams, n_envs: int) -> None:
    """Refuse a rollout of more than :data:`MAX_ROLLOUT` observations (n_steps x n_envs)."""
    n_steps = hp.algo_kwargs.get("n_steps")
    if isinstance(n_steps, int) and n_steps * n_envs > MAX_ROLLOUT:
        raise ConfigError(f"{hp.source}: n_steps x n_envs = {n_steps} x {n_envs} = {n_steps * n_envs:,} "
                          f"observations a rollout; allowed: <= {MAX_ROLLOUT:,}")


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
        return None if v is None else int(check_number(f"{source}: {key}", _numeric(v), TRAINER_RANGES[key], True))

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
    check_policy_kwargs(policy_kwargs, source)
    policy = str(raw.pop("policy", "MlpPolicy"))
    algo_kwargs = check_algo_kwargs(raw, source)
    hp = Hyperparams(policy=policy, n_envs=n_envs, n_timesteps=n_timesteps,
                     normalize=normalize, env_kwargs=dict(env_kwargs), train_env_kwargs=dict(train_env_kwargs),
                     policy_kwargs=dict(policy_kwargs),
                     algo_kwargs=algo_kwargs, source=source, warm_start=warm_start, policy_improvement=improvement)
    if n_envs is not None:
        check_rollout(hp, n_envs)
    return hp


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
