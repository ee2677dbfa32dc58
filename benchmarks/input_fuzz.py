"""Crafted and fuzzed user files against servegym's trust boundary (sweep YAML, a model folder's run.json,
sweep journals, model zips and their statistics, hyperparameter files, env ids, config durations).

Usage: ``nice -n 10 .venv/bin/python benchmarks/input_fuzz.py [--mutations 2000] [--seed 0]`` (about 5 min
on a shared 2-core machine; not in CI).

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
(it warns in one line and reruns those cells). Writes ``benchmarks/results/input_fuzz.json`` and
``input_fuzz.md``.
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
    counts = {"parsed": 0, "config_error": 0, "multi_line_error": 0, "other_exception": 0}
    others: list[str] = []
    worst = 0.0
    f = tmp / "run.json"
    for _ in range(n):
        text = mutate(base, rng)
        t0 = time.perf_counter()
        try:
            warned = False
            if kind == "journal":  # lines skipped with one warning line count as a one-line error
                warned = _read_journal(text, tmp / "r.csv.partial.jsonl", header, check, cells)
            elif kind == "sweep":
                parse_sweep(parse_yaml(text, "s.yml"), base_dir=tmp, source="s.yml")
            else:
                f.write_bytes(text.encode("utf-8", "surrogatepass"))
                parse_run_file(f)
            counts["config_error" if warned else "parsed"] += 1
        except ConfigError as exc:
            counts["config_error" if len(str(exc).splitlines()) == 1 else "multi_line_error"] += 1
        except Exception as exc:  # what the boundary must never let through
            counts["other_exception"] += 1
            if len(others) < 5:
                others.append(f"{type(exc).__name__}: {str(exc)[:120]}")
        worst = max(worst, time.perf_counter() - t0)
    return {"kind": kind, "mutations": n, **counts, "max_s_per_input": round(worst, 4), "examples": others}


def write_report(rows: list[dict[str, Any]], fz: list[dict[str, Any]], args: argparse.Namespace) -> None:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    meta = {"date": now, "python": platform.python_version(), "machine": platform.machine(),
            "mutations": args.mutations, "seed": args.seed, "baseline_evaluate_peak_mb": args.baseline_peak_mb}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "input_fuzz.json").write_text(json.dumps({"meta": meta, "crafted": rows, "fuzz": fz}, indent=2) + "\n")
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
    lines += ["", "Mutation fuzzing (in process; each mutant must parse or raise a one-line ConfigError):", "",
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
    ap.add_argument("--craft", nargs=2, metavar=("NAME", "FOLDER"), help=argparse.SUPPRESS)  # run_case's helper
    args = ap.parse_args()
    if args.craft:
        CRAFTS[args.craft[0]][1](Path(args.craft[1]))
        return
    rows = []
    with tempfile.TemporaryDirectory() as d:
        base = train_base(Path(d))
        baseline = run_case({"name": CRAFTS["untouched"][0], "files": {}, "argv": EVALUATE, "craft": "untouched"},
                            base)
        args.baseline_peak_mb = baseline["peak_mb"]
        for c in [*cases(), *model_folder_cases()]:
            rows.append(run_case(c, base))
            print(f"{rows[-1]['case']}: exit {rows[-1]['exit']}, {rows[-1]['lines']} line(s), "
                  f"{rows[-1]['peak_mb']} MB, {rows[-1]['wall_s']} s", flush=True)
    with tempfile.TemporaryDirectory() as d:
        fz = [fuzz(kind, args.mutations, args.seed, Path(d)) for kind in ("sweep", "run.json", "journal")]
    for f in fz:
        print(f)
    write_report(rows, fz, args)


if __name__ == "__main__":
    main()
