"""Saving and loading agents without executing code from the files (see docs/security.md).

Two files make a saved agent:

* ``<model>.zip``: stable-baselines3's archive. Its ``data`` entry is JSON in which SB3 stores what JSON cannot
  hold (spaces, the policy class, learning-rate schedules, ``policy_kwargs`` with classes) as cloudpickle,
  and SB3's own ``load`` unpickles those: a crafted zip runs code. :func:`load_sb3_model` reads the JSON
  itself and hands SB3 a ``custom_objects`` entry for *every* pickled key, so none is ever decoded: the
  spaces come from the env, the policy class from the algorithm's aliases, class-valued policy kwargs
  from a short allowlist, schedules are constants (unused when acting). Tensors are read with
  ``torch.load(weights_only=True)``, forced here whatever the SB3 version does.
* ``<model>_vecnormalize.npz``: the observation statistics of SB3's ``VecNormalize`` as plain float arrays
  (written by :func:`save_obs_stats`, read by :func:`read_stats_arrays`: no pickles, each ``.npy`` header
  checked against the bytes it holds). A ``_vecnormalize.pkl`` (SB3's pickle) is never read: beside an
  ``.npz`` it is ignored, alone it is refused with an error.

Both are zip files, whose members may expand a thousandfold (a 1 GiB array of zeros compresses to 1 MB).
Before anything is inflated, the member list is checked against the names servegym and SB3 write and each
member's declared uncompressed size against a cap (:func:`checked_members`; zipfile never reads past the
declared size and checks the CRC, so the declared size bounds what is inflated). The caps are fixed and
stated here: :data:`MAX_TENSOR_BYTES` per tensor file, :data:`MAX_MODEL_BYTES` for a whole model,
:data:`MAX_STATS_BYTES` for a statistics file. A model's spaces (as SB3 records them in ``data``) must be
the env's, and its statistics must have the env's observation shape.

torch and SB3 are imported inside the functions that need them.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import zipfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from servegym.errors import ConfigError, shown

# The largest ``data`` JSON read from a model zip (SB3's are a few kB; the cap keeps a crafted zip from
# inflating gigabytes into memory before anything is checked).
MAX_DATA_BYTES = 16 * 2**20
#: The largest observation-statistics file read, on disk and as its members' declared sizes added up
#: (a few kB in practice: two float64 arrays of the observation's size and a few scalars).
MAX_STATS_BYTES = 64 * 2**20
#: The largest tensor file (``policy.pth``, ``policy.optimizer.pth``, ...) of a model zip, declared
#: uncompressed: 16 M float32 numbers. The shipped hyperparameters train 64 x 64 networks (~10 k weights,
#: ~100 kB with the optimizer's state); the widest net_arch the hyperparameter ranges allow
#: (:data:`servegym.agents.hparams.MAX_NET_WEIGHTS` hidden weights per network) fits with its optimizer state.
MAX_TENSOR_BYTES = 64 * 2**20
#: The most all members of a model zip may declare together (the data entry and every tensor file).
MAX_MODEL_BYTES = 160 * 2**20
#: The most members either zip may hold (SB3 writes 6 or 7, save_obs_stats 3 + 3 per observation key + 6).
MAX_MEMBERS = 1024
#: Small text members of SB3's zip (its version string, a system description).
_MAX_TEXT_BYTES = 64 * 2**10

# What SB3 writes into a model zip (every .pth file it reads; SAC/TD3 keep actor and critic optimizers, SAC
# an entropy optimizer, SB3 < 0.9 called pytorch_variables "tensors").
_MODEL_MEMBERS = re.compile(r"data|_stable_baselines3_version|system_info\.txt|(policy|policy\.optimizer|"
                            r"actor\.optimizer|critic\.optimizer|ent_coef_optimizer|pytorch_variables|tensors)\.pth")
# What save_obs_stats writes (mean_<i> etc. per key of a dict observation space).
_STATS_MEMBERS = re.compile(r"(norm_obs|clip_obs|epsilon|keys|mean|var|count|ret_mean|ret_var|ret_count"
                            r"|(mean|var|count)_\d{1,4})\.npy")

_CLASS_REPR = re.compile(r"^<class '([A-Za-z_][\w.]*)'>$")


def _allowed_classes() -> dict[str, type]:
    """Classes a saved ``policy_kwargs`` may name, by ``module.qualname``: activations, optimizers and SB3's
    feature extractors. Anything else in a model file is refused rather than imported."""
    import torch.nn as nn
    import torch.optim as optim
    from stable_baselines3.common import torch_layers

    classes: list[type] = [nn.Tanh, nn.ReLU, nn.ELU, nn.LeakyReLU, nn.GELU, nn.SiLU, nn.Sigmoid, nn.Softplus,
                           nn.Identity, optim.Adam, optim.AdamW, optim.SGD, optim.RMSprop,
                           torch_layers.FlattenExtractor, torch_layers.CombinedExtractor, torch_layers.NatureCNN]
    return {f"{c.__module__}.{c.__qualname__}": c for c in classes}


def _is_pickled(item: Any) -> bool:
    return isinstance(item, dict) and ":serialized:" in item


def checked_members(zf: zipfile.ZipFile, where: str, names: re.Pattern[str], cap: Callable[[str], int],
                    total_cap: int, what: str) -> dict[str, zipfile.ZipInfo]:
    """The members of ``zf`` by name, once every name matches ``names`` (once), every declared uncompressed
    size is within ``cap(name)`` and all of them within ``total_cap``; a one-line :class:`ConfigError`
    starting with ``where`` otherwise. Reads no member: nothing is inflated before the sizes are known."""
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise ConfigError(f"{where} holds {len(infos):,} members; allowed: <= {MAX_MEMBERS} ({what})")
    out: dict[str, zipfile.ZipInfo] = {}
    total = 0
    for info in infos:
        name = info.filename
        if names.fullmatch(name) is None or name in out:
            again = " twice" if name in out else ""
            raise ConfigError(f"{where}: member {shown(name, 40)}{again} is not one {what} holds; allowed: "
                              f"the members servegym and stable-baselines3 write")
        if info.file_size > cap(name):
            raise ConfigError(f"{where}: member {name!r} expands to {info.file_size:,} bytes; allowed: "
                              f"<= {cap(name):,}")
        total += info.file_size
        out[name] = info
    if total > total_cap:
        raise ConfigError(f"{where}: members expand to {total:,} bytes together; allowed: <= {total_cap:,}")
    return out


def _model_member_cap(name: str) -> int:
    if name == "data":
        return MAX_DATA_BYTES
    return MAX_TENSOR_BYTES if name.endswith(".pth") else _MAX_TEXT_BYTES


def check_model_zip(path: Path, flag: str = "--model") -> None:
    """Refuse a model zip with a member SB3 does not write or one that expands beyond its cap
    (:func:`checked_members`), before SB3 or torch reads any of it (SB3 inflates every ``.pth`` member)."""
    where = f"{flag} = {str(path)!r}"
    try:
        with zipfile.ZipFile(path) as zf:
            checked_members(zf, where, _MODEL_MEMBERS, _model_member_cap, MAX_MODEL_BYTES,
                            "a stable-baselines3 model")
    except (zipfile.BadZipFile, OSError) as exc:
        raise ConfigError(f"{where} is not a readable zip file ({type(exc).__name__})") from None


def read_model_data(path: str | Path) -> dict[str, Any]:
    """The JSON ``data`` entry of an SB3 model zip, parsed (nothing in it is unpickled), once the zip's
    members are checked (:func:`check_model_zip`)."""
    p = Path(path)
    check_model_zip(p)
    try:
        with zipfile.ZipFile(p) as zf:
            try:
                info = zf.getinfo("data")
            except KeyError:
                raise ConfigError(f"--model = {str(p)!r} is not a stable-baselines3 model: no 'data' entry") from None
            with zf.open(info) as fh:
                raw = fh.read(MAX_DATA_BYTES + 1)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ConfigError(f"--model = {str(p)!r} is not a readable zip file ({exc})") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(f"--model = {str(p)!r}: 'data' is not JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--model = {str(p)!r}: 'data' is not a JSON object")
    return data


def _policy_kwargs(item: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """Rebuild a pickled ``policy_kwargs`` from the plain copy SB3 stores beside the pickle: JSON values as
    they are, ``"<class 'x.Y'>"`` strings through the allowlist."""
    allowed = _allowed_classes()
    out: dict[str, Any] = {}
    for key, val in item.items():
        if key.startswith(":"):
            continue
        if isinstance(val, str) and val.startswith("<"):
            m = _CLASS_REPR.match(val)
            if m is None or m.group(1) not in allowed:
                raise ConfigError(f"--model = {str(path)!r}: policy_kwargs.{key} = {val[:120]!r} cannot be loaded "
                                  f"without unpickling; allowed classes: {', '.join(sorted(allowed))}")
            out[key] = allowed[m.group(1)]
        else:
            out[key] = val
    return out


def safe_custom_objects(data: Mapping[str, Any], algo_cls: type, observation_space: Any, action_space: Any,
                        policy: str | None, path: Path) -> dict[str, Any]:
    """A ``custom_objects`` replacing every pickled entry of ``data`` (see the module docstring)."""
    import gymnasium as gym
    from stable_baselines3.common.type_aliases import TrainFreq, TrainFrequencyUnit
    from stable_baselines3.common.utils import ConstantSchedule

    aliases = getattr(algo_cls, "policy_aliases", {})
    if policy is None:
        policy = "MultiInputPolicy" if isinstance(observation_space, gym.spaces.Dict) else "MlpPolicy"
    if policy not in aliases:
        raise ConfigError(f"policy {policy!r} is not a policy of {algo_cls.__name__}; allowed: {', '.join(aliases)}")
    out: dict[str, Any] = {}
    for key, item in data.items():
        if key == "policy_class":
            out[key] = aliases[policy]
        elif key == "observation_space":
            out[key] = observation_space
        elif key == "action_space":
            out[key] = action_space
        elif not _is_pickled(item):
            continue
        elif key == "policy_kwargs":
            out[key] = _policy_kwargs(item, path)
        elif key in ("lr_schedule", "clip_range", "clip_range_vf", "learning_rate"):
            out[key] = ConstantSchedule(0.0)  # only training reads schedules
        elif key == "train_freq":
            out[key] = TrainFreq(1, TrainFrequencyUnit.STEP)
        else:
            # Training state (last observations, episode buffers, buffer classes): not needed to act.
            out[key] = None
    return out


@contextlib.contextmanager
def _tensors_only() -> Iterator[None]:
    """``torch.load`` with ``weights_only=True`` for the duration (SB3 >= 2.4 already passes it)."""
    import torch

    original = torch.load

    def load(*args: Any, **kwargs: Any) -> Any:
        kwargs["weights_only"] = True
        return original(*args, **kwargs)

    torch.load = load
    try:
        yield
    finally:
        torch.load = original


_INTS = re.compile(r"-?\d+")
_TYPE_NAME = re.compile(r"<class '(?:[\w]+\.)*(\w+)'>")
# The attributes of a space that fix the policy's layers, as SB3 writes them into ``data`` (str of arrays).
_SIZE_ATTRS = ("n", "nvec", "start")


def _space_mismatch(item: Any, space: Any) -> str | None:
    """How the space SB3 recorded in ``data`` (``item``: its JSON copy of the space's attributes) differs from
    the env's ``space`` (class, shape, Discrete's n, MultiDiscrete's nvec, their starts), None when it does
    not; the description quotes only the class name and numbers parsed from the file."""
    if not isinstance(item, dict) or not isinstance(item.get(":type:"), str):
        return "no space recorded"
    m = _TYPE_NAME.fullmatch(item[":type:"])
    name = m.group(1) if m else "an unknown class"
    shape = item.get("_shape")
    if item[":type:"] != str(type(space)):
        return f"a {name}"
    if shape is not None and (not isinstance(shape, list) or [int(v) for v in space.shape or ()] != shape):
        return f"a {name} of shape {shown(shape, 40)}"
    for attr in _SIZE_ATTRS:
        saved = item.get(attr)
        if isinstance(saved, str) and hasattr(space, attr):
            ints = [int(v) for v in _INTS.findall(saved)[:64]]
            if ints != np.ravel(getattr(space, attr)).astype(int).tolist()[:64]:
                return f"a {name} with {attr} {shown(ints, 40)}"
    return None


def check_saved_spaces(data: Mapping[str, Any], observation_space: Any, action_space: Any, path: Path) -> None:
    """Refuse a model zip saved for other spaces than the env's (e.g. PDProvisionFront-v0's Discrete(22)
    beside a PDProvision-v0 run: its 22 logits load into MultiDiscrete([13 9])'s layer and act wrongly)."""
    for key, space in (("observation_space", observation_space), ("action_space", action_space)):
        diff = _space_mismatch(data.get(key), space)
        if diff is not None:
            raise ConfigError(f"--model = {str(path)!r} was saved for {diff} as its {key.replace('_', ' ')}; the "
                              f"env's is {shown(space, 60)}; allowed: a model trained on this env")


def load_sb3_model(path: str | Path, algo_cls: type, observation_space: Any, action_space: Any,
                   policy: str | None = None) -> Any:
    """Load an SB3 model zip without unpickling anything in it (see the module docstring), once its members
    and spaces are checked."""
    p = Path(path)
    data = read_model_data(p)
    check_saved_spaces(data, observation_space, action_space, p)
    pk = data.get("policy_kwargs")
    if isinstance(pk, dict) and "net_arch" in pk:  # plain JSON, or the plain copy beside SB3's pickle
        from servegym.agents.hparams import check_policy_kwargs

        # SB3 builds the network before it loads a weight: a net_arch of [1e6, 1e6] would allocate terabytes
        check_policy_kwargs({"net_arch": pk["net_arch"]}, f"--model = {str(p)!r}: data")
    custom = safe_custom_objects(data, algo_cls, observation_space, action_space, policy, p)
    leftover = [k for k, v in data.items() if _is_pickled(v) and k not in custom]
    assert not leftover, leftover  # every pickled entry is replaced, or SB3 would decode it
    try:
        with _tensors_only():
            return algo_cls.load(p, device="cpu", custom_objects=custom)
    except ConfigError:
        raise
    except Exception as exc:  # a zip of another algorithm or env, or tensors that are not plain weights
        raise ConfigError(f"--model = {str(p)!r} does not load as {algo_cls.__name__}: "
                          f"{type(exc).__name__}: {str(exc)[:300]}") from None


# --------------------------------------------------------------------------- observation statistics


def save_obs_stats(vecnormalize: Any, path: str | Path) -> Path:
    """Write the observation statistics of a ``VecNormalize`` as an ``.npz`` of plain arrays, atomically.
    The counts and the return statistics go in too (``count``, ``ret_*``): acting ignores them, resuming
    a run (:func:`restore_vecnormalize`) needs them."""
    from servegym.outputs import atomic_path

    p = Path(path)
    arrays: dict[str, np.ndarray] = {
        "norm_obs": np.asarray(bool(vecnormalize.norm_obs)),
        "clip_obs": np.asarray(float(vecnormalize.clip_obs)),
        "epsilon": np.asarray(float(vecnormalize.epsilon)),
    }
    # SB3 keeps no observation statistics when only the reward is normalized (norm_obs=False)
    rms = getattr(vecnormalize, "obs_rms", None)
    if rms is None:
        arrays["keys"] = np.zeros(0, dtype=np.str_)
    elif isinstance(rms, dict):
        keys = list(vecnormalize.norm_obs_keys or [])
        arrays["keys"] = np.asarray(keys, dtype=np.str_)
        for i, k in enumerate(keys):
            arrays[f"mean_{i}"] = np.asarray(rms[k].mean, dtype=np.float64)
            arrays[f"var_{i}"] = np.asarray(rms[k].var, dtype=np.float64)
    else:
        arrays["mean"] = np.asarray(rms.mean, dtype=np.float64)
        arrays["var"] = np.asarray(rms.var, dtype=np.float64)
        arrays["count"] = np.asarray(float(rms.count))
    if isinstance(rms, dict):
        for i, k in enumerate(vecnormalize.norm_obs_keys or []):
            arrays[f"count_{i}"] = np.asarray(float(rms[k].count))
    ret = getattr(vecnormalize, "ret_rms", None)
    if ret is not None:
        arrays["ret_mean"] = np.asarray(ret.mean, dtype=np.float64)
        arrays["ret_var"] = np.asarray(ret.var, dtype=np.float64)
        arrays["ret_count"] = np.asarray(float(ret.count))
    with atomic_path(p) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
    return p


def _npy_array(raw: bytes, name: str, where: str) -> np.ndarray:
    """The array of one ``.npy`` member's bytes, its header checked first: a plain (non-object) dtype and a
    shape whose bytes are the ones that follow the header (numpy would allocate the declared shape first)."""
    fh = io.BytesIO(raw)
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(fh)
        else:
            raise ValueError(f"version {version}")
    except (ValueError, SyntaxError, TypeError, OverflowError) as exc:
        raise ConfigError(f"{where}: member {name!r} is not a .npy array ({type(exc).__name__})") from None
    count = 1
    for n in shape:
        count *= int(n)
    if dtype.hasobject or count * dtype.itemsize != len(raw) - fh.tell():
        raise ConfigError(f"{where}: member {name!r} declares {'objects' if dtype.hasobject else 'a shape'} "
                          f"its bytes do not hold; allowed: plain arrays as servegym train writes them")
    flat = np.frombuffer(raw, dtype=dtype, count=count, offset=fh.tell()) if count else np.empty(0, dtype)
    return flat.reshape(shape, order="F" if fortran else "C").copy()


def read_stats_arrays(path: Path, where: str | None = None) -> dict[str, np.ndarray]:
    """The arrays of a statistics ``.npz`` by name (without ``.npy``): its members checked first
    (:func:`checked_members`: only the names :func:`save_obs_stats` writes, :data:`MAX_STATS_BYTES` declared
    in all), then each read within its declared size and parsed without pickles (:func:`_npy_array`)."""
    where = where or repr(str(path))
    try:
        if path.stat().st_size > MAX_STATS_BYTES:
            raise ConfigError(f"{where} is {path.stat().st_size:,} bytes; allowed: <= {MAX_STATS_BYTES:,}")
        with zipfile.ZipFile(path) as zf:
            members = checked_members(zf, where, _STATS_MEMBERS, lambda _: MAX_STATS_BYTES, MAX_STATS_BYTES,
                                      "a statistics file")
            return {name.removesuffix(".npy"): _npy_array(zf.read(info), name, where)
                    for name, info in members.items()}
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
        raise ConfigError(f"{where} is not a readable .npz of observation statistics ({type(exc).__name__})") from None


def restore_vecnormalize(vecnormalize: Any, path: Path) -> None:
    """Put the statistics :func:`save_obs_stats` wrote back into a fresh ``VecNormalize`` (resuming a run
    of one's own: plain arrays, read with ``allow_pickle=False``; shapes must match the env's)."""
    if not path.is_file():
        raise ConfigError(f"--resume: {str(path)!r} is missing: the run normalizes observations and its "
                          "statistics are needed to continue it (or pass --force to train afresh)")
    a = read_stats_arrays(path, f"--resume: {str(path)!r}")
    try:
        # SB3 keeps no observation statistics with norm_obs=False (GeoRoute-v0's hyperparameters): nothing to restore
        rms = getattr(vecnormalize, "obs_rms", None)
        if isinstance(rms, dict):
            for i, k in enumerate(vecnormalize.norm_obs_keys or []):
                _set_rms(rms[k], a[f"mean_{i}"], a[f"var_{i}"], a.get(f"count_{i}"))
        elif rms is not None and "mean" in a:
            _set_rms(rms, a["mean"], a["var"], a.get("count"))
        if vecnormalize.ret_rms is not None and "ret_mean" in a:
            _set_rms(vecnormalize.ret_rms, a["ret_mean"], a["ret_var"], a.get("ret_count"))
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"--resume: {str(path)!r} does not hold this run's statistics "
                          f"({type(exc).__name__}: {str(exc)[:80]})") from None


def _set_rms(rms: Any, mean: np.ndarray, var: np.ndarray, count: Any) -> None:
    if np.shape(mean) != np.shape(rms.mean) or np.shape(var) != np.shape(rms.var):
        raise ValueError(f"shape {np.shape(mean)} instead of {np.shape(rms.mean)}")
    rms.mean = np.asarray(mean, dtype=np.float64).copy()
    rms.var = np.asarray(var, dtype=np.float64).copy()
    if count is not None:
        rms.count = float(count)


def set_parameters(model: Any, path: Path) -> None:
    """Load a saved run's weights and optimizer state into ``model`` (resuming a run of one's own; tensors
    only, ``torch.load(weights_only=True)``, nothing in the zip's data entry is decoded)."""
    check_model_zip(path, "--resume")
    try:
        with _tensors_only():
            model.set_parameters(str(path), exact_match=True, device=model.device)
    except Exception as exc:
        raise ConfigError(f"--resume: {str(path)!r} does not load into this run's model "
                          f"({type(exc).__name__}: {str(exc)[:200]})") from None


class ObsNormalizer:
    """The frozen observation normalization of a trained ``VecNormalize``:
    ``clip((obs - mean) / sqrt(var + epsilon), -clip_obs, clip_obs)`` as float32, per key for dict spaces."""

    def __init__(self, norm_obs: bool, clip_obs: float, epsilon: float,
                 stats: dict[str | None, tuple[np.ndarray, np.ndarray]]) -> None:
        self.norm_obs = norm_obs
        self.clip_obs = clip_obs
        self.epsilon = epsilon
        self.stats = stats

    @classmethod
    def from_vecnormalize(cls, vn: Any) -> ObsNormalizer:
        rms = getattr(vn, "obs_rms", None)
        if rms is None:  # norm_obs=False: nothing to apply
            stats: dict[str | None, tuple[np.ndarray, np.ndarray]] = {}
        elif isinstance(rms, dict):
            stats = {k: (np.asarray(rms[k].mean), np.asarray(rms[k].var)) for k in (vn.norm_obs_keys or [])}
        else:
            stats = {None: (np.asarray(rms.mean), np.asarray(rms.var))}
        return cls(bool(vn.norm_obs), float(vn.clip_obs), float(vn.epsilon), stats)

    @classmethod
    def load(cls, path: str | Path) -> ObsNormalizer:
        """Read an ``.npz`` written by :func:`save_obs_stats` (no pickles: object arrays are refused)."""
        p = Path(path)
        if p.suffix == ".pkl":
            raise ConfigError(f"{str(p)!r}: refusing to unpickle VecNormalize statistics (a pickle can run code); "
                              "expected the .npz that servegym train writes")
        arrays = read_stats_arrays(p)
        try:
            norm_obs = bool(arrays["norm_obs"])
            clip_obs = float(arrays["clip_obs"])
            epsilon = float(arrays["epsilon"])
            if "keys" in arrays:
                keys = [str(k) for k in arrays["keys"]]
                stats: dict[str | None, tuple[np.ndarray, np.ndarray]] = {
                    k: (arrays[f"mean_{i}"], arrays[f"var_{i}"]) for i, k in enumerate(keys)}
            else:
                stats = {None: (arrays["mean"], arrays["var"])}
        except KeyError as exc:
            raise ConfigError(f"{str(p)!r}: no array {shown(str(exc), 40)}; allowed: the arrays servegym train "
                              "writes") from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{str(p)!r}: a malformed scalar ({type(exc).__name__}); allowed: the arrays "
                              "servegym train writes") from None
        if not (np.isfinite(clip_obs) and clip_obs > 0 and np.isfinite(epsilon) and epsilon >= 0):
            raise ConfigError(f"{str(p)!r}: clip_obs = {clip_obs:.3g} and epsilon = {epsilon:.3g}; allowed: > 0 "
                              "and >= 0")
        for k, (mean, var) in stats.items():
            ok = (mean.dtype.kind == "f" and var.dtype.kind == "f" and mean.shape == var.shape
                  and np.isfinite(mean).all() and np.isfinite(var).all() and (var >= 0).all()
                  # the divisor sqrt(var + epsilon) must not be 0 (var = 0 where an observation never varied)
                  and (var + epsilon > 0).all())
            if not ok:
                raise ConfigError(f"{str(p)!r}: statistics{'' if k is None else f' of {shown(k, 40)}'} must be "
                                  "finite float arrays of equal shape with var >= 0 and var + epsilon > 0")
        return cls(norm_obs, clip_obs, epsilon, stats)

    def check_space(self, space: Any, where: str) -> None:
        """Refuse statistics whose shapes are not the observation shapes of ``space`` (the env's): they
        would broadcast into a wrong observation or fail in the middle of an episode."""
        if not self.norm_obs:
            return
        import gymnasium as gym

        for k, (mean, _) in self.stats.items():
            sub = space if k is None else (space.spaces.get(k) if isinstance(space, gym.spaces.Dict) else None)
            shape = getattr(sub, "shape", None)
            if shape is None or tuple(mean.shape) != tuple(shape):
                of = "" if k is None else f" of {shown(k, 40)}"
                raise ConfigError(f"{where}: statistics{of} have shape {shown(tuple(mean.shape), 40)}; allowed: "
                                  f"the env's observation shape {shape if shape is not None else '(none)'}")

    def _one(self, obs: Any, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
        x = (np.asarray(obs) - mean) / np.sqrt(var + self.epsilon)
        return np.clip(x, -self.clip_obs, self.clip_obs).astype(np.float32)

    def __call__(self, obs: Any) -> Any:
        if not self.norm_obs:
            return obs
        if isinstance(obs, dict):
            out = dict(obs)
            for k, (mean, var) in self.stats.items():
                out[k] = self._one(obs[k], mean, var)
            return out
        mean, var = self.stats[None]
        return self._one(obs, mean, var)


def legacy_stats_path(stats_path: Path) -> Path:
    """The ``.pkl`` name SB3 (and servegym before the safe format) used for ``stats_path``."""
    return stats_path.with_suffix(".pkl")


def load_obs_normalizer(stats_path: Path) -> ObsNormalizer | None:
    """The normalizer at ``stats_path`` (``.npz``), None when the model has none; an SB3 pickle in its
    place is refused (never unpickled), as is a link to a file outside the model's folder."""
    from servegym.bounded_io import refuse_link_out

    refuse_link_out(stats_path, stats_path.parent, "the statistics servegym train writes")
    if stats_path.is_file():
        return ObsNormalizer.load(stats_path)
    legacy = legacy_stats_path(stats_path)
    if legacy.is_file():
        raise ConfigError(f"{str(legacy)!r}: refusing to unpickle VecNormalize statistics (a pickle can run code). "
                          f"If you made this file yourself, convert it once in a trusted session with "
                          f"servegym.agents.model_io.convert_trusted_pickle({str(legacy)!r}), or retrain")
    return None


def convert_trusted_pickle(pkl_path: str | Path) -> Path:
    """Convert a ``_vecnormalize.pkl`` **that you made yourself** to the safe ``.npz`` beside it.
    This unpickles the file: never call it on a file from someone else."""
    import pickle

    p = Path(pkl_path)
    with open(p, "rb") as fh:
        vn = pickle.load(fh)
    return save_obs_stats(vn, p.with_suffix(".npz"))
