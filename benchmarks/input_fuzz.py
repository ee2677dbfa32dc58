"""Crafted and fuzzed user files against servegym's trust boundary (sweep YAML, a model folder's run.json,
sweep journals, model zips and their statistics, hyperparameter files, env ids, config durations, the npu table
cache).

Usage: ``nice -n 10 .venv/bin/python benchmarks/input_fuzz.py [--mutations 2000] [--seed 0]`` (2-4 min
on a shared 2-core machine; not in CI); ``--only-cache`` runs the table-cache part alone and writes no report.

Part 1 runs each crafted input through the real ``servegym`` command in a subprocess, in a fresh folder
that also holds ``pwnmod.py`` (which would create ``PWNED`` if imported) and a file of secret text, and
records the exit status, the number of output lines, whether a traceback, the secret or the marker
appeared, the files the command left behind, its peak resident memory and the wall time. The model-folder
cases copy a PDProvision-v0 run trained once (32 steps) and break one thing each: zip members that inflate
to 1 GiB (statistics, a policy tensor), a missing statistics file, another env's model, statistics of the
wrong shape, a run.json that links to the secret file. Part 2 mutates a valid sweep file and a valid run.json ``--mutations`` times
each (seeded byte-level flips, insertions of YAML/JSON syntax, deletions, duplications) and parses every
mutant in process (:func:`servegym.safe_yaml.parse_yaml` + :func:`servegym.agents.sweep.parse_sweep`,
:func:`servegym.agents.run_file.parse_run_file`): each must parse or raise a one-line ConfigError; anything
else is counted as a failure. It also mutates a sweep journal (``<out>.partial.jsonl``: a header and two
finished cells) and reads every mutant back as ``sweep --resume`` does
(:meth:`servegym.outputs.Journal.read` with :func:`servegym.agents.sweep.journal_check`), then builds the
results table from what it kept: a failure is any exception, or a kept row that is not a finished cell of
the config (counted under "other exception"); a read that skipped lines counts as "one-line ConfigError"
(it warns in one line and reruns those cells).

The npu table cache (Part 3): a real ``servegym benchmark`` of NPUAutoscale-v0 (a quarter-hour Llama-3-8B
episode) fills a cache folder once; each case copies it, spoils the catalog's one entry or its folder
(:data:`CACHE_CRAFTS`: a truncated entry, a text file or another ``.npz`` at its name, a stored key that is not
its name, energies x 1000 with the digest as stored or recomputed, a header declaring 6 TiB, a ``meta`` member
that inflates to 1 GiB, a symbolic or hard link to a valid entry outside the folder, a sparse 1 TiB file, a
FIFO, a folder, the entries' folder a link out, 40 links to outside files to be pruned) and runs the command
again there. Correct (:func:`cache_ok`) is exit 0 with stdout identical to the clean run's (no wrong numbers),
one stderr line saying why the entry was not used, every file outside the cache folder unchanged in bytes,
modification and access time, and the entry a valid regular file again. Then ``--mutations`` byte-level
mutants of an entry (:func:`mutate_bytes`) are read in process as the cache reads them
(:func:`~servegym.envs.npu.sim.table_cache.load_table`): each must load the clean table or be refused with a
one-line ``InvalidEntry``. Writes ``benchmarks/results/input_fuzz.md`` (and every row as JSON to ``--json``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "results"
SECRET = "SECRET-CONTENT-0xC0FFEE"
PWNMOD = "import pathlib\npathlib.Path(__file__).with_name('PWNED').write_text('ran')\n"
PD = "servegym/PDProvision-v0"


def _bomb() -> str:
    levels = ['&a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"&{n} [" + ", ".join([f"*{p}"] * 9) + "]" for p, n in zip("abcdefgh", "bcdefghi", strict=True)]
    return "[" + ", ".join(levels) + "]"


def _run_json(doc: Any) -> bytes:
    return doc if isinstance(doc, bytes) else (doc if isinstance(doc, str) else json.dumps(doc)).encode()


PD_KWARGS = {"config": {"scenario": {"horizon_steps": 24}}}
TINY_HP = "ppo:\n  n_envs: 1\n  n_steps: 32\n  batch_size: 32\n  n_epochs: 1\n  normalize: true\n" \
          "  policy_kwargs: {net_arch: [8]}\n"
GIB = 2**30


def train_base(root: Path) -> Path:
    """A PDProvision-v0 run of 32 steps (VecNormalize on), trained by the real command: the model folder
    every model-folder case copies and breaks."""
    (root / "hp.yml").write_text(TINY_HP)
    subprocess.run([sys.executable, "-m", "servegym.cli", "train", "--env", PD, "--timesteps", "32", "--hyperparams",
                    str(root / "hp.yml"), "--out", str(root / "base" / "model.zip"), "--tb", "", "--eval-freq", "0",
                    "--checkpoint-freq", "0", "--eval-episodes", "1", "--baselines", "none", "--no-progress",
                    "--env-kwargs", json.dumps(PD_KWARGS)], check=True, capture_output=True, timeout=600)
    return root / "base"


def _rezip(path: Path, members: dict[str, bytes], streamed: dict[str, Callable[[Any], None]] | None = None) -> None:
    """Rewrite the zip ``path`` with ``members``, then each ``streamed`` member written by its function into
    the open (deflated) member: a 1 GiB member goes through in pieces and compresses to ~1 MB."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, raw in members.items():
            z.writestr(name, raw)
        for name, write in (streamed or {}).items():
            with z.open(name, "w", force_zip64=True) as fh:
                write(fh)


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist()}


def _zeros(fh: Any, n: int, header: bytes = b"") -> None:
    fh.write(header)
    for _ in range(n // 2**20):
        fh.write(bytes(2**20))


def _stats_bomb(m: Path) -> None:
    """The statistics .npz plus a 1 GiB float64 array of zeros, a valid .npy that numpy would inflate."""
    import numpy as np

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (GIB // 8,)})
    f = m / "model_vecnormalize.npz"
    _rezip(f, _members(f), {"extra.npy": lambda fh: _zeros(fh, GIB, buf.getvalue())})


def _tensor_bomb(m: Path) -> None:
    """policy.pth with an extra 1 GiB tensor of zeros (torch.save streams it to a file; zero pages cost no memory)."""
    import torch

    members = _members(m / "model.zip")
    state = torch.load(io.BytesIO(members.pop("policy.pth")), weights_only=True)
    tmp = m / "policy.pth.tmp"
    torch.save({**state, "extra": torch.zeros(GIB // 4)}, tmp)
    with open(tmp, "rb") as src:
        _rezip(m / "model.zip", members, {"policy.pth": lambda fh: shutil.copyfileobj(src, fh, 2**20)})
    tmp.unlink()


def _other_env_model(m: Path) -> None:
    """PDProvisionFront-v0's model (Discrete(22): as many logits as PDProvision-v0's MultiDiscrete([13 9]))."""
    import gymnasium as gym
    from stable_baselines3 import PPO

    import servegym  # noqa: F401  (registers the ids)

    env = gym.make("servegym/PDProvisionFront-v0", **PD_KWARGS)
    PPO("MlpPolicy", env, n_steps=16, batch_size=16, device="cpu", policy_kwargs={"net_arch": [8]}).save(m / "model.zip")
    env.close()


def _stats(m: Path, **arrays: Any) -> None:
    import numpy as np

    f = m / "model_vecnormalize.npz"
    with np.load(f) as z:
        old = {k: z[k] for k in z.files}
    np.savez(f, **{**old, **arrays})


def _net_arch(m: Path) -> None:
    members = _members(m / "model.zip")
    data = json.loads(members["data"])
    data["policy_kwargs"] = {**data["policy_kwargs"], "net_arch": [1_000_000, 1_000_000]}
    _rezip(m / "model.zip", {**members, "data": json.dumps(data).encode()})


def _link_run_json(m: Path) -> None:
    (m / "run.json").unlink()
    (m / "run.json").symlink_to(m.parent / "secret.json")


def _short_stats(m: Path) -> None:
    import numpy as np

    _stats(m, mean=np.zeros(5), var=np.ones(5))


def _zero_divisor(m: Path) -> None:
    import numpy as np

    _stats(m, var=np.zeros(37), epsilon=np.asarray(0.0))


#: name -> (case, craft): each craft breaks one thing in a copy of the base run. Crafts run in a process of
#: their own (``--craft``), so that what they hold (torch, a 1 GiB tensor) is not counted in the peak memory
#: of the command (a child's peak includes its parent's resident memory at the fork).
CRAFTS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "stats-bomb": ("model folder: statistics .npz + a 1 GiB zero array, compressed", _stats_bomb),
    "tensor-bomb": ("model folder: policy.pth + a 1 GiB zero tensor, compressed", _tensor_bomb),
    "no-stats": ("model folder: no _vecnormalize.npz, run.json normalizes",
                 lambda m: (m / "model_vecnormalize.npz").unlink()),
    "other-env": ("model folder: PDProvisionFront-v0 model.zip, PDProvision-v0 run.json", _other_env_model),
    "short-stats": ("model folder: statistics of shape (5,) for 37 observations", _short_stats),
    "zero-divisor": ("model folder: var = 0 with epsilon = 0", _zero_divisor),
    "net-arch": ("model folder: data's net_arch [1e6, 1e6]", _net_arch),
    "linked-run-json": ("model folder: run.json a link to the secret file", _link_run_json),
    "untouched": ("model folder: as trained (the baseline; evaluates, exit 0)", lambda m: None),
}
EVALUATE = ["evaluate", "--model", "m/model.zip", "--episodes", "1", "--baselines", "none", "--out-dir", "eval"]


def model_folder_cases() -> list[dict[str, Any]]:
    """Model folders (a copy of :func:`train_base`'s run in ``m/``, then its craft) given to ``evaluate``."""
    return [{"name": name, "files": {}, "argv": EVALUATE, "craft": key} for key, (name, _) in CRAFTS.items()
            if key != "untouched"]


def cases() -> list[dict[str, Any]]:
    """(name, files to write, argv) of every crafted input; ``{secret}`` in a file is the secret's path."""
    ev = ["evaluate", "--model", "m/model.zip"]
    sw = ["sweep", "s.yml", "--workers", "1", "--out", "r.csv"]
    out: list[dict[str, Any]] = []

    def add(name: str, files: dict[str, bytes | str], argv: list[str]) -> None:
        out.append({"name": name, "files": files, "argv": argv})

    for mod in ("pwnmod", "this"):
        add(f"sweep env '{mod}:Evil-v0'", {"s.yml": f'env: "{mod}:Evil-v0"\npolicies: [min-power]\n'}, sw)
    add("run.json env_id 'pwnmod:Evil-v0'", {"m/run.json": _run_json({"env_id": "pwnmod:Evil-v0", "algo": "ppo"})},
        ev)
    add("--env 'pwnmod:Evil-v0'", {}, ["train", "--env", "pwnmod:Evil-v0", "--timesteps", "8"])
    for key in ("trace", "profile"):
        add(f"run.json geo.{key} = the secret file's path",
            {"m/run.json": _run_json({"env_id": "servegym/GeoRoute-v0", "algo": "ppo",
                                      "env_kwargs": {"geo": {key: "{secret}"}}})}, ev)
    add("sweep geo.trace = /etc/shadow", {"s.yml": "env: servegym/GeoRoute-v0\npolicies: [rr]\nscenarios: "
                                                   "[{name: a, env_kwargs: {geo: {trace: /etc/shadow}}}]\n"}, sw)
    in_folder = ["sweep", "sw/s.yml", "--workers", "1", "--out", "r.csv"]
    add("sweep agent: the secret file's absolute path", {"sw/s.yml": f"env: {PD}\npolicies: [{{agent: '{{secret}}'}}]\n"},
        in_folder)
    add("sweep agent: ../../../../etc/passwd",
        {"sw/s.yml": f"env: {PD}\npolicies: ['agent:../../../../etc/passwd']\n"}, in_folder)
    for name, text in (("invalid JSON", '{"env_id": '), ("a JSON list", "[1, 2]"), ("binary", b"\xff\xfe\x00\x01"),
                       ("JSON nested 100,000 deep", "[" * 100_000 + "]" * 100_000),
                       ("algo of the wrong type", '{"algo": 3}')):
        add(f"run.json: {name}", {"m/run.json": _run_json(text)}, ev)
    add("sweep YAML: binary", {"s.yml": b"\x00\xff\xfe" + bytes(range(256))}, sw)
    add("sweep YAML: nested 5,000 deep", {"s.yml": "env: " + "[" * 5000 + "]" * 5000 + "\n"}, sw)
    add("sweep YAML: billion laughs in name", {"s.yml": f"name: {_bomb()}\nenv: {PD}\npolicies: [min-power]\n"}, sw)
    add("sweep YAML: billion laughs in env_kwargs",
        {"s.yml": f"env: {PD}\nscenarios: [{{name: s, env_kwargs: {{junk: {_bomb()}}}}}]\npolicies: [min-power]\n"},
        sw)
    add("sweep YAML: !!python tag", {"s.yml": "env: !!python/object/apply:os.system ['touch PWNED']\n"}, sw)
    bm = ["benchmark", "--env", "servegym/GeoRoute-v0", "--policy", "naive", "--episodes", "1", "--env-kwargs"]
    add("geo drain_s = 1e18", {}, [*bm, '{"config": {"geo": {"drain_s": 1e18}}}'])
    add("geo duration_s = 1e12", {}, [*bm, '{"config": {"geo": {"duration_s": 1e12}}}'])
    add("pd 100,000 periods of 1 h", {}, ["benchmark", "--env", PD, "--policy", "naive", "--episodes", "1",
                                          "--env-kwargs", '{"config": {"scenario": {"horizon_steps": 100000, '
                                                          '"period_s": 3600, "mix_block_s": 3600}}}'])
    add("--env-kwargs nested 100,000 deep", {}, ["train", "--env", PD, "--env-kwargs", "[" * 100_000])
    tr = ["train", "--env", PD, "--timesteps", "64", "--hyperparams", "hp.yml", "--no-progress"]
    for section in ("n_steps: 1.0e+9", "n_steps: -5", "policy_kwargs: {net_arch: [1e6, 1e6]}",
                    "policy_kwargs: {net_arch: [1000000, 1000000]}"):
        add(f"--hyperparams {section}", {"hp.yml": f"ppo:\n  {section}\n"}, tr)
    add("train a misspelt env id (no runs/ folder left)", {}, ["train", "--env", "servegym/GeoRoutte-v0", "--algo",
                                                               "maskable-ppo", "--timesteps", "8"])
    return out


def _run(argv: list[str], cwd: Path, timeout: float = 600) -> tuple[int, str, float]:
    """(exit status, stderr + stdout, peak resident MB) of ``servegym ARGV`` in ``cwd`` (``os.wait4`` gives
    the child's own peak; output goes through files, so nothing blocks on a full pipe)."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([sys.executable, "-m", "servegym.cli", *argv], cwd=cwd, stdout=out,
                                stderr=subprocess.STDOUT)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        return proc.returncode, out.read().decode("utf-8", "replace"), usage.ru_maxrss / 1024


def run_case(case: dict[str, Any], base: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "pwnmod.py").write_text(PWNMOD)
        secret = root / "secret.csv"
        secret.write_text(SECRET + "\n")
        (root / "secret.json").write_text(json.dumps({"env_id": SECRET, "algo": SECRET}))
        if case.get("craft") is not None:
            shutil.copytree(base, root / "m")
            subprocess.run([sys.executable, __file__, "--craft", case["craft"], str(root / "m")], check=True,
                           timeout=600)
        else:
            (root / "m").mkdir()
            (root / "m" / "model.zip").write_bytes(b"not a zip: run.json is read first")
        for name, data in case["files"].items():
            raw = data if isinstance(data, bytes) else data.encode()
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(raw.replace(b"{secret}", str(secret).encode()))
        before = set(root.rglob("*"))
        t0 = time.perf_counter()
        rc, out, peak = _run(case["argv"], root)
        wall = time.perf_counter() - t0
        text = "\n".join(line for line in out.splitlines()
                         if line.strip() and not line.startswith("sweep (in process)"))
        written = sorted(str(p.relative_to(root)) for p in set(root.rglob("*")) - before
                         if "__pycache__" not in p.parts)
        return {"case": case["name"], "exit": rc, "lines": len(text.splitlines()),
                "traceback": "Traceback" in text, "secret_shown": SECRET in text or "root:" in text,
                "imported": (root / "PWNED").exists(), "written": written, "peak_mb": round(peak),
                "wall_s": round(wall, 2), "message": text[:300]}


# --------------------------------------------------------------------------- the npu table cache

NPU = "servegym/NPUAutoscale-v0"
NPU_ARGV = ["benchmark", "--env", NPU, "--policy", "naive", "--episodes", "1", "--env-kwargs",
            json.dumps({"config": {"hours": 0.25, "split_models": ["Llama-3-8B"]}})]
"""The real command every cache case runs: it reads the catalog's best-fit table (one entry) from the cache."""
KIND = "npu-dse"
OLD = 1_000_000  # the modification time given to every file outside the cache folder (checked afterwards)


def _npz_arrays(data: bytes) -> dict[str, Any]:
    import numpy as np

    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _npz_bytes(arrays: dict[str, Any]) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _edited(data: bytes, resign: bool, key: str | None = None) -> bytes:
    """The entry with every energy x 1000 (``key``: instead, its stored key replaced); ``resign``: its digest
    recomputed for the edited arrays, as a forger would."""
    import numpy as np
    from servegym.envs.npu.sim import table_cache

    a = _npz_arrays(data)
    meta = json.loads(a["meta"].tobytes())
    if key is None:
        f = a["e_f"].copy()
        f[:, table_cache._FLOATS.index("energy_j_per_token")] *= 1000.0
        a["e_f"] = f
    else:
        meta["key"] = key
    if resign:
        meta["digest"] = table_cache.arrays_digest(meta["key"], a)
    a["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    return _npz_bytes(a)


def _declared_huge(data: bytes) -> bytes:
    """The entry with ``e_f.npy``'s header declaring 2^37 float64 rows (1 TiB) over the same few bytes."""
    import numpy as np

    src = zipfile.ZipFile(io.BytesIO(data))
    raw = src.read("e_f.npy")
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": (2**37, 6)})
    hlen = len(raw) - int(np.prod(_npz_arrays(data)["e_f"].shape)) * 8
    members = {i.filename: src.read(i) for i in src.infolist()}
    members["e_f.npy"] = buf.getvalue() + raw[hlen:]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, raw in members.items():
            z.writestr(name, raw)
    return out.getvalue()


def _meta_bomb(entry: Path, data: bytes) -> None:
    """The entry with its ``meta`` member a deflated 1 GiB uint8 array (about 1 MB on disk)."""
    import numpy as np

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "|u1", "fortran_order": False, "shape": (GIB,)})
    members = {n: raw for n, raw in _members_of(data).items() if n != "meta.npy"}
    entry.write_bytes(b"")
    _rezip(entry, members, {"meta.npy": lambda fh: _zeros(fh, GIB, buf.getvalue())})


def _members_of(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {n: z.read(n) for n in z.namelist()}


def _replace(entry: Path, data: bytes) -> None:
    entry.unlink()
    entry.write_bytes(data)


def _link_out(entry: Path, data: bytes) -> None:
    """The entry a link to a valid entry outside the cache folder (``outside/``): the old code read it and
    touched it."""
    target = entry.parents[2] / "outside" / "valid-entry.npz"
    target.write_bytes(data)
    os.utime(target, (OLD, OLD))
    entry.unlink()
    entry.symlink_to(target)


def _hard_link(entry: Path, data: bytes) -> None:
    """The entry a hard link to a valid entry outside the cache folder (one file, two names)."""
    target = entry.parents[2] / "outside" / "valid-entry.npz"
    target.write_bytes(data)
    os.utime(target, (OLD, OLD))
    entry.unlink()
    os.link(target, entry)


def _sparse(entry: Path, data: bytes) -> None:
    entry.unlink()
    with open(entry, "wb") as fh:
        fh.truncate(2**40)


def _fifo(entry: Path, data: bytes) -> None:
    entry.unlink()
    os.mkfifo(entry)


def _folder(entry: Path, data: bytes) -> None:
    entry.unlink()
    entry.mkdir()
    (entry / "inside").write_bytes(data)


def _folder_links_out(entry: Path, data: bytes) -> None:
    """The entries' folder a link to a folder outside (holding the valid entry and an unrelated file)."""
    kind = entry.parent
    target = entry.parents[2] / "outside" / KIND
    shutil.move(kind, target)
    (target / "unrelated.npz").write_bytes(b"not servegym's")
    for p in target.iterdir():
        os.utime(p, (OLD, OLD))
    kind.symlink_to(target, target_is_directory=True)


def _links_to_prune(entry: Path, data: bytes) -> None:
    """No entry (a cold build, then a write that prunes the folder to 32 entries) and 40 old entries that are
    links to files outside the cache folder: pruning removes the links, never their targets."""
    entry.unlink()
    out = entry.parents[2] / "outside"
    for i in range(40):
        target = out / f"user-file-{i}.npz"
        target.write_bytes(b"the user's own file")
        os.utime(target, (OLD, OLD))
        link = entry.parent / f"{i:064x}.npz"
        link.symlink_to(target)
        os.utime(link, (OLD, OLD), follow_symlinks=False)


#: name -> (case, craft(entry, the valid entry's bytes), what the one stderr line must say). Every craft spoils the
#: catalog's one entry (or its folder) in a copy of a warm cache; the command must rebuild the table (the same
#: numbers as a clean run), say why in one line, and leave every file outside the cache folder as it was.
CACHE_CRAFTS: dict[str, tuple[str, Callable[[Path, bytes], None], str]] = {
    "untouched": ("table cache: warm, as written (the control; a silent hit)", lambda e, d: None, ""),
    "truncated": ("table cache: entry truncated to half", lambda e, d: _replace(e, d[: len(d) // 2]),
                  "not a zip file"),
    "not-an-entry": ("table cache: a text file at the entry's name", lambda e, d: _replace(e, b"just some text\n"),
                     "not a zip file"),
    "foreign-npz": ("table cache: another .npz (statistics' members) at the entry's name",
                    lambda e, d: _replace(e, _npz_bytes({"mean": _npz_arrays(d)["slo_val"]})),
                    "member 'mean.npy' is not one this entry holds"),
    "stale-key": ("table cache: stored key differs from the name (digest recomputed)",
                  lambda e, d: _replace(e, _edited(d, resign=True, key="0" * 64)), "key differs from the file name"),
    "edited": ("table cache: energies x 1000, digest as stored", lambda e, d: _replace(e, _edited(d, resign=False)),
               "its arrays differ from the digest"),
    "forged": ("table cache: energies x 1000, digest recomputed", lambda e, d: _replace(e, _edited(d, resign=True)),
               "differ from this code's"),
    "declared-huge": ("table cache: e_f.npy declares 2^37 x 6 float64 over its few bytes",
                      lambda e, d: _replace(e, _declared_huge(d)), "declares a shape larger than its data"),
    "meta-bomb": ("table cache: meta member a deflated 1 GiB array (1 MB file)", _meta_bomb,
                  "member 'meta.npy' expands to"),
    "link-out": ("table cache: entry a link to a valid entry outside the folder", _link_out,
                 "not a regular file"),
    "hard-link": ("table cache: entry a hard link to a valid entry outside the folder", _hard_link,
                  "a hard link (2 names share its file"),
    "sparse-1tib": ("table cache: a sparse 1 TiB file at the entry's name", _sparse,
                    "1,099,511,627,776 bytes; allowed: <= 67,108,864"),
    "fifo": ("table cache: a FIFO at the entry's name", _fifo, "not a regular file"),
    "folder": ("table cache: a folder at the entry's name", _folder, "not a regular file"),
    "folder-links-out": ("table cache: the entries' folder a link to a folder outside", _folder_links_out,
                         "its folder is a symbolic link"),
    "prune-links": ("table cache: no entry, 40 old entries that link to files outside (pruned)", _links_to_prune,
                    "building the npu best-fit tables"),
}


def _run_env(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str, str, float, bool]:
    """(exit status, stdout, stderr, peak resident MB, killed) of ``servegym ARGV`` in ``cwd`` under ``env``."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "servegym.cli", *argv], cwd=cwd, stdout=out, stderr=err,
                                env=env)
        killed: list[bool] = []
        killer = threading.Timer(timeout, lambda: (killed.append(True), proc.kill()))
        killer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        out.seek(0)
        err.seek(0)
        return (os.waitstatus_to_exitcode(status), out.read().decode("utf-8", "replace"),
                err.read().decode("utf-8", "replace"), usage.ru_maxrss / 1024, bool(killed))


def _outside_state(root: Path) -> dict[str, tuple[bytes, float, float]]:
    """Every file of ``root`` outside ``cache/`` (not following links) -> (bytes, mtime, atime), the times taken
    before this reads it and set back afterwards, so that a read by the command shows (where the file system
    records access times)."""
    out = {}
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if rel.parts[0] == "cache" or p.is_symlink() or not p.is_file():
            continue
        st = p.stat()
        out[str(rel)] = (p.read_bytes(), st.st_mtime, st.st_atime)
        os.utime(p, (st.st_atime, st.st_mtime))
    return out


def _entry_valid(entry: Path) -> bool:
    """Whether ``entry`` is now a regular file that loads as the table of its name (as the command reads it)."""
    from servegym.envs.npu.sim import table_cache
    from servegym.envs.npu.sim.config import ClusterConfig
    from servegym.envs.npu.sim.roofline import RooflineParams

    if entry.is_symlink() or not entry.is_file():
        return False
    spec = table_cache.model("Llama-3-8B")
    # the catalog's scoring table: its step-model parameters are the ones whose key is the entry's name
    for params in (*ClusterConfig(model="Llama-3-8B").step_params(), RooflineParams()):
        if table_cache.table_key(spec, "energy", table_cache.VERSIONS, 5.0, params, None, None) == entry.stem:
            break
    else:
        return False
    try:
        table_cache.load_table(entry.read_bytes(), entry.stem, spec, "energy", table_cache.VERSIONS, 5.0, params)
    except table_cache.InvalidEntry:
        return False
    return True


def warm_cache(root: Path) -> tuple[Path, str]:
    """A cache folder filled by the real command (a cold build), and the command's stdout."""
    env = {k: v for k, v in os.environ.items() if k != "SERVEGYM_NO_CACHE"}
    env["SERVEGYM_CACHE_DIR"] = str(root / "cache")
    rc, out, err, _, _ = _run_env(NPU_ARGV, root, env, 600)
    if rc != 0:
        raise SystemExit(f"the cold npu run failed: {err[-400:]}")
    return root / "cache", out


def run_cache_case(key: str, warm: Path, clean_out: str) -> dict[str, Any]:
    name, craft, why = CACHE_CRAFTS[key]
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        shutil.copytree(warm, root / "cache", symlinks=True)
        (root / "outside").mkdir()
        (root / "secret.csv").write_text(SECRET + "\n")
        (entry,) = (root / "cache" / KIND).glob("*.npz")
        craft(entry, entry.read_bytes())
        for p in (root / "outside", root / "secret.csv"):
            os.utime(p, (OLD, OLD))
        before = _outside_state(root)
        listing = {str(p.relative_to(root)) for p in root.rglob("*")}
        env = {k: v for k, v in os.environ.items() if k != "SERVEGYM_NO_CACHE"}
        env["SERVEGYM_CACHE_DIR"] = str(root / "cache")
        t0 = time.perf_counter()
        rc, out, err, peak, killed = _run_env(NPU_ARGV, root, env, 300)
        wall = time.perf_counter() - t0
        said = [ln for ln in err.splitlines() if ln.startswith("servegym:") or "Traceback" in ln]
        after = _outside_state(root)
        added = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                       if str(p.relative_to(root)) not in listing and p.relative_to(root).parts[0] != "cache")
        # n/a where nothing may be written: through a linked folder, or over a folder (never removed: it may
        # hold anything; that table is rebuilt in every run instead), which must be left as it was
        valid = None if key in ("folder-links-out", "folder") else _entry_valid(entry)
        if key == "folder" and not (entry / "inside").is_file():
            valid = False
        return {"case": name, "key": key, "exit": rc, "hung": killed, "cache_lines": len(said),
                "reason_ok": (why in said[0]) if why and said else not said,
                "same_numbers": out == clean_out, "outside_untouched": before == after and not added,
                "entry_valid_after": valid, "peak_mb": round(peak), "wall_s": round(wall, 2),
                "message": said[0].replace(str(entry), "<entry>").replace(str(root), "<tmp>")[:300] if said else ""}


def cache_ok(r: dict[str, Any]) -> bool:
    """The case's correct behaviour: exit 0, the clean run's numbers, one stderr line saying why (none for the
    control), nothing outside the cache folder read-touched or written, the entry valid again where writable."""
    lines = 0 if r["key"] == "untouched" else 1
    return (r["exit"] == 0 and not r["hung"] and r["cache_lines"] == lines and r["reason_ok"] and r["same_numbers"]
            and r["outside_untouched"] and r["entry_valid_after"] is not False)


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """Seeded byte-level damage: flips, deletions, insertions, duplications, a truncation, or a 4-byte field
    (a zip size or offset, say) set to an extreme."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        i = rng.randrange(len(b) + 1)
        if op < 0.35 and b:
            b[min(i, len(b) - 1)] ^= 1 << rng.randrange(8)
        elif op < 0.5:
            del b[i:i + rng.randint(1, 64)]
        elif op < 0.65:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op < 0.75:
            k = rng.randint(1, 256)
            b[i:i] = b[i:i + k] * rng.randint(2, 8)
        elif op < 0.85:
            del b[i:]
        else:
            b[i:i + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80"])
    return bytes(b)


def _cache_entry_base(tmp: Path) -> tuple[bytes, str, Any]:
    """A valid entry (the catalog's table, fronts included, built in process), its key and the table."""
    from servegym.envs.npu.sim import table_cache

    os.environ["SERVEGYM_CACHE_DIR"] = str(tmp / "cache")
    os.environ.pop("SERVEGYM_NO_CACHE", None)
    t = table_cache.cached_run_dse("Llama-3-8B")
    t.pareto("decode", 1024)
    t.pareto("prefill", 4096, versions=("NPU-D", "NPU-B"))
    table_cache.flush(t)
    (path,) = (tmp / "cache" / KIND).glob("*.npz")
    return path.read_bytes(), path.stem, t


def fuzz_cache(n: int, seed: int, tmp: Path) -> dict[str, Any]:
    """``n`` mutants of a valid entry read as the cache reads them (:func:`load_table`): each must load a table
    equal to the clean one or be refused (``InvalidEntry``: a one-line miss, rebuilt); any other exception, or a
    table with other numbers, is a failure."""
    import contextlib

    from servegym.envs.npu.sim import table_cache
    from servegym.envs.npu.sim.roofline import RooflineParams

    base, key, clean = _cache_entry_base(tmp)
    rng = random.Random(f"npu-cache-{seed}")
    tally = Tally()
    spec = table_cache.model("Llama-3-8B")
    for _ in range(n):
        data = mutate_bytes(base, rng)

        def read(data: bytes = data) -> bool:
            with contextlib.redirect_stderr(io.StringIO()):
                t = table_cache.load_table(data, key, spec, "energy", table_cache.VERSIONS, 5.0, RooflineParams())
            if (t.best, t.per_version, t.slo_s, t._fronts) != (clean.best, clean.per_version, clean.slo_s,
                                                              clean._fronts):
                raise AssertionError("loaded a table with other numbers")
            return False

        tally.run(read, table_cache.InvalidEntry)
    return tally.result("npu cache entry", n)


class Tally:
    """Outcomes of mutants read one by one: parsed, refused with one line (or more), any other exception (the
    failures, with up to five examples), and the slowest read."""

    def __init__(self) -> None:
        self.counts = {"parsed": 0, "config_error": 0, "multi_line_error": 0, "other_exception": 0}
        self.others: list[str] = []
        self.worst = 0.0

    def run(self, read: Callable[[], bool], refused: type[Exception]) -> None:
        """``read()`` one mutant: True when it warned (counted as a one-line refusal); raises ``refused``."""
        t0 = time.perf_counter()
        try:
            self.counts["config_error" if read() else "parsed"] += 1
        except refused as exc:
            self.counts["config_error" if len(str(exc).splitlines()) == 1 else "multi_line_error"] += 1
        except Exception as exc:  # what the boundary must never let through
            self.counts["other_exception"] += 1
            if len(self.others) < 5:
                self.others.append(f"{type(exc).__name__}: {str(exc)[:120]}")
        self.worst = max(self.worst, time.perf_counter() - t0)

    def result(self, kind: str, n: int) -> dict[str, Any]:
        return {"kind": kind, "mutations": n, **self.counts, "max_s_per_input": round(self.worst, 4),
                "examples": self.others}

# --------------------------------------------------------------------------- mutation fuzzing

SYNTAX = ["&a ", "*a", "[", "]", "{", "}", ":", "- ", "!!python/object:os.system ", "\n  ", '"', "'", "#", "|",
          ">", "?", ",", "\x00", "\xff", "pwnmod:", "/etc/shadow", "1e308", "-1", "null", "true", "~"]


def mutate(text: str, rng: random.Random) -> str:
    s = text
    for _ in range(rng.randint(1, 6)):
        i = rng.randrange(len(s) + 1)
        op = rng.random()
        if op < 0.4:
            s = s[:i] + rng.choice(SYNTAX) + s[i:]
        elif op < 0.6:
            s = s[:i] + s[i + rng.randint(1, 8):]
        elif op < 0.8 and s:
            j = rng.randrange(len(s))
            s = s[:j] + chr(rng.randrange(1, 0x2FF)) + s[j + 1:]
        else:
            k = rng.randint(1, 40)
            s = s[:i] + s[i:i + k] * rng.randint(2, 20) + s[i:]
    return s


def _journal_base() -> tuple[str, Any, Any, set[str]]:
    """A sweep journal of two finished cells (header, then one line per cell), its config's fingerprint, the
    check ``sweep --resume`` reads it with, and the config's cell keys."""
    from servegym.agents.families import family_for
    from servegym.agents.sweep import cell_key, config_fingerprint, journal_check, parse_sweep

    cfg = parse_sweep({"name": "demo", "env": PD, "policies": ["min-power", "static-peak"], "seeds": [0]})
    tasks = cfg.tasks()
    metrics = {m.key: 1.25 for m in family_for(PD).metrics}
    lines = [json.dumps({"header": config_fingerprint(cfg)})]
    for t in tasks:
        row = {k: t[k] for k in ("sweep", "scenario", "env_id", "policy", "seed")}
        lines.append(json.dumps({"key": cell_key(t), "value": {**row, "reward": -2.5, "length": 1440, **metrics,
                                                                "wall_s": 0.75}}))
    return "\n".join(lines) + "\n", config_fingerprint(cfg), journal_check(tasks), {cell_key(t) for t in tasks}


def _read_journal(text: str, path: Path, header: Any, check: Any, cells: set[str]) -> bool:
    """Read a mutated journal as ``sweep --resume`` does; True when it skipped lines (it warned). Raises
    AssertionError for a kept row that is not a finished cell of the config."""
    import contextlib
    import io

    from servegym.agents.sweep import _tidy, cell_key

    from servegym.outputs import Journal

    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    warned = io.StringIO()
    with contextlib.redirect_stderr(warned):
        kept = Journal(path).read(header, check=check)
    for key, row in (kept or {}).items():  # checked apart from journal_check: the key and the row's own cell
        if key not in cells or cell_key(row) != key:
            raise AssertionError(f"kept a row that is not a cell of the config: {key[:80]}")
    if kept:
        _tidy(list(kept.values()))
    return bool(warned.getvalue())


def fuzz(kind: str, n: int, seed: int, tmp: Path) -> dict[str, Any]:
    from servegym.agents.run_file import parse_run_file
    from servegym.agents.sweep import parse_sweep

    from servegym.errors import ConfigError
    from servegym.safe_yaml import parse_yaml

    rng = random.Random(f"{kind}-{seed}")
    if kind == "journal":
        base, header, check, cells = _journal_base()
    elif kind == "sweep":
        base = (f"name: demo\nenv: {PD}\nscenarios:\n  - {{name: short, env_kwargs: {{config: {{scenario: "
                "{horizon_steps: 24}}}}\n  - {name: carbon, env_kwargs: {config: {objective: carbon}}}\n"
                "policies: [min-power, static-peak]\nseeds: {start: 0, count: 3}\n")
    else:
        base = json.dumps({"env_id": PD, "algo": "ppo", "env_kwargs": {"config": {"scenario": {"horizon_steps": 24}}},
                           "eval_seeds": [1000, 1001], "hyperparams": {"policy": "MlpPolicy"}, "seed": 0})
    tally = Tally()
    f = tmp / "run.json"
    for _ in range(n):
        text = mutate(base, rng)

        def read(text: str = text) -> bool:
            if kind == "journal":  # lines skipped with one warning line count as a one-line error
                return _read_journal(text, tmp / "r.csv.partial.jsonl", header, check, cells)
            if kind == "sweep":
                parse_sweep(parse_yaml(text, "s.yml"), base_dir=tmp, source="s.yml")
            else:
                f.write_bytes(text.encode("utf-8", "surrogatepass"))
                parse_run_file(f)
            return False

        tally.run(read, ConfigError)
    return tally.result(kind, n)


def write_report(rows: list[dict[str, Any]], cache_rows: list[dict[str, Any]], fz: list[dict[str, Any]],
                 args: argparse.Namespace) -> None:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    meta = {"date": now, "python": platform.python_version(), "machine": platform.machine(),
            "mutations": args.mutations, "seed": args.seed, "baseline_evaluate_peak_mb": args.baseline_peak_mb}
    OUT.mkdir(parents=True, exist_ok=True)
    if args.json:  # not in benchmarks/results, whose every file a docs page must link
        Path(args.json).write_text(json.dumps({"meta": meta, "crafted": rows, "cache": cache_rows, "fuzz": fz},
                                              indent=2) + "\n")
    ok = sum(r["exit"] == 2 and r["lines"] == 1 and not (r["traceback"] or r["secret_shown"] or r["imported"]
                                                         or r["written"]) for r in rows)
    lines = ["# Input fuzzing: crafted and mutated user files", "",
             f"Report {now}, Python {meta['python']}, {meta['machine']}. Produced by `benchmarks/input_fuzz.py` "
             f"(seed {args.seed}). Each crafted input ran as a real `servegym` subprocess in a folder holding "
             "`pwnmod.py` (creates `PWNED` if imported) and a file of secret text; wall times include the "
             "interpreter's start on a shared 2-core machine; peak MB is the command's own peak resident memory "
             f"(`os.wait4`); an untouched model folder's `evaluate` peaks at {args.baseline_peak_mb} MB.", "",
             f"**{ok} of {len(rows)} crafted inputs** gave exit status 2 and one line, with no traceback, no "
             "secret shown, nothing imported and nothing written.", "",
             "| input | exit | lines | traceback | secret shown | imported | written | peak MB | wall s | message |",
             "|---|---:|---:|---|---|---|---|---:|---:|---|"]
    for r in rows:
        msg = r["message"].replace("|", "\\|").replace("\n", " ")
        msg = msg if len(msg) <= 160 else msg[:157] + "..."
        written = ", ".join(r["written"])[:60] or "nothing"
        lines.append(f"| {r['case']} | {r['exit']} | {r['lines']} | {r['traceback']} | {r['secret_shown']} | "
                     f"{r['imported']} | {written} | {r['peak_mb']} | {r['wall_s']:.1f} | {msg} |")
    good = sum(cache_ok(r) for r in cache_rows)
    control = next((r for r in cache_rows if r["key"] == "untouched"), None)
    lines += ["", "The npu table cache: each case spoils the one entry (or its folder) of a copy of a warm cache, then "
              f"runs the real `servegym {' '.join(NPU_ARGV[:7])}` (a quarter-hour Llama-3-8B episode, whose catalog "
              "reads the entry) with `SERVEGYM_CACHE_DIR` there. Correct is exit 0 with the numbers of a clean run "
              "(stdout identical), one stderr line saying why the entry was not used (none for the control), every "
              "file outside the cache folder (link targets, an `outside/` folder, the secret file) unchanged in "
              "bytes and times, and the entry a valid regular file again (n/a where the entries' folder is a link, "
              "through which nothing is written, and where a folder is at the entry's name: it is left as it "
              "was, the table rebuilt in each run)"
              + (f"; the control peaks at {control['peak_mb']} MB." if control else "."), "",
              f"**{good} of {len(cache_rows)} table-cache cases** behaved so.", "",
              "| input | exit | lines | reason as expected | numbers as clean | outside untouched | entry valid after "
              "| peak MB | wall s | line |", "|---|---:|---:|---|---|---|---|---:|---:|---|"]
    for r in cache_rows:
        msg = r["message"].replace("|", "\\|")
        msg = msg if len(msg) <= 160 else msg[:157] + "..."
        valid = "n/a" if r["entry_valid_after"] is None else r["entry_valid_after"]
        lines.append(f"| {r['case']} | {r['exit']}{' (hung)' if r['hung'] else ''} | {r['cache_lines']} | "
                     f"{r['reason_ok']} | {r['same_numbers']} | {r['outside_untouched']} | {valid} | {r['peak_mb']} | "
                     f"{r['wall_s']:.1f} | {msg or '(none)'} |")
    lines += ["", "Mutation fuzzing (in process; each mutant must parse or raise a one-line ConfigError; an npu cache "
              "entry, mutated byte by byte, must load a table equal to the clean one (parsed) or be refused with "
              "a one-line `InvalidEntry` (counted as a one-line error: the cache then rebuilds it), and a table "
              "with other numbers counts as another exception):", "",
              "| file | mutants | parsed | one-line ConfigError | multi-line error | other exception | "
              "slowest input s |", "|---|---:|---:|---:|---:|---:|---:|"]
    for f in fz:
        lines.append(f"| {f['kind']} | {f['mutations']:,} | {f['parsed']:,} | {f['config_error']:,} | "
                     f"{f['multi_line_error']} | {f['other_exception']} | {f['max_s_per_input']:.3f} |")
        lines += [f"  - {f['kind']}: {e}" for e in f["examples"]]
    (OUT / "input_fuzz.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mutations", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="PATH", help="also write every row as JSON there")
    ap.add_argument("--no-cache-cases", dest="cache_cases", action="store_false",
                    help="skip the crafted table-cache runs (the cache mutants still run)")
    ap.add_argument("--only-cache", action="store_true", help="only the table cache: its crafted runs and mutants")
    ap.add_argument("--craft", nargs=2, metavar=("NAME", "FOLDER"), help=argparse.SUPPRESS)  # run_case's helper
    args = ap.parse_args()
    if args.craft:
        CRAFTS[args.craft[0]][1](Path(args.craft[1]))
        return
    rows: list[dict[str, Any]] = []
    args.baseline_peak_mb = None
    with tempfile.TemporaryDirectory() as d:
        base = None if args.only_cache else train_base(Path(d))
        if base is not None:
            baseline = run_case({"name": CRAFTS["untouched"][0], "files": {}, "argv": EVALUATE,
                                 "craft": "untouched"}, base)
            args.baseline_peak_mb = baseline["peak_mb"]
        for c in [] if base is None else [*cases(), *model_folder_cases()]:
            rows.append(run_case(c, base))
            print(f"{rows[-1]['case']}: exit {rows[-1]['exit']}, {rows[-1]['lines']} line(s), "
                  f"{rows[-1]['peak_mb']} MB, {rows[-1]['wall_s']} s", flush=True)
    cache_rows = []
    if args.cache_cases:
        with tempfile.TemporaryDirectory() as d:
            warm, clean_out = warm_cache(Path(d))
            for key in CACHE_CRAFTS:
                if key == "fifo" and not hasattr(os, "mkfifo"):
                    continue
                cache_rows.append(run_cache_case(key, warm, clean_out))
                r = cache_rows[-1]
                print(f"{r['case']}: {'ok' if cache_ok(r) else 'WRONG'}, exit {r['exit']}, {r['cache_lines']} line(s), same numbers {r['same_numbers']}, "
                      f"outside untouched {r['outside_untouched']}, {r['peak_mb']} MB, {r['wall_s']} s", flush=True)
    with tempfile.TemporaryDirectory() as d:
        fz = [] if args.only_cache else [fuzz(kind, args.mutations, args.seed, Path(d))
                                         for kind in ("sweep", "run.json", "journal")]
    with tempfile.TemporaryDirectory() as d:
        fz.append(fuzz_cache(args.mutations, args.seed, Path(d)))
    for f in fz:
        print(f)
    if args.only_cache:
        print("--only-cache: no report written")
        return
    write_report(rows, cache_rows, fz, args)


if __name__ == "__main__":
    main()
