"""Compatibility table of servegym's ids with the RL clients: runs tests/test_clients.py (slow tests included)
in a fresh pytest process with this interpreter and writes one row per client check and one column per id.

    .venv/bin/python benchmarks/clients_compat.py [--out benchmarks/results/clients_compat.md]

The optional clients (TorchRL, Tianshou, rl-zoo3: ``pip install -e ".[clients]"``) are tested when this
interpreter has them; a client that is not installed shows as such in its row, with the installed versions
of every client in the header. Nothing is installed by the script.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests" / "test_clients.py"

#: test function -> row label, in table order.
ROWS: dict[str, str] = {
    "test_sb3_check_env_and_make_vec_env": "SB3 check_env + make_vec_env (DummyVecEnv, rgb_array)",
    "test_sb3_make_vec_env_subproc": "SB3 make_vec_env (SubprocVecEnv)",
    "test_gymnasium_make_vec[sync]": "Gymnasium make_vec (sync)",
    "test_gymnasium_make_vec[async]": "Gymnasium make_vec (async)",
    "test_torchrl_gym_env": "TorchRL GymEnv + check_env_specs (+ ActionMask)",
    "test_tianshou_collector": "Tianshou DummyVectorEnv",
    "test_rl_zoo3_train_and_enjoy": "rl-zoo3 train + enjoy (benchmarks/rl_zoo3/ppo.yml)",
    "test_rl_zoo3_conf_has_every_id_with_the_shipped_ppo_settings": "rl-zoo3 conf entry = the id's shipped ppo settings",
    "test_unknown_keyword_is_a_type_error_in_pythons_words": "unknown keyword -> TypeError",
    "test_rgb_array_is_a_small_picture_of_the_state": "render_mode='rgb_array'",
    "test_env_pickles_after_reset_and_continues_identically": "pickles mid-episode",
    "test_action_mask_observation_wrapper": "ActionMaskObservation wrapper",
    "test_spec_max_episode_steps_never_cuts_the_default_episode": "spec.max_episode_steps",
}
CLIENTS = ("gymnasium", "stable-baselines3", "sb3-contrib", "pettingzoo", "supersuit", "torchrl", "tianshou",
           "rl_zoo3")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cell(case: ET.Element) -> str:
    """One test case's outcome as a table cell."""
    for tag, word in (("failure", "FAIL"), ("error", "ERROR")):
        el = case.find(tag)
        if el is not None:
            first = (el.get("message") or "").strip().splitlines()
            return f"{word}: {first[0][:80] if first else tag}".replace("|", "/")
    el = case.find("skipped")
    if el is not None:
        msg = (el.get("message") or "").replace("Skipped: ", "")
        return ("not installed" if "not installed" in msg else f"skipped: {msg[:60]}").replace("|", "/")
    return "ok"


def run(out: Path) -> Path:
    ids = [line.split('"')[1] for line in (ROOT / "src" / "servegym" / "registration.py").read_text().splitlines()
           if line.strip().startswith('EnvSpecEntry("servegym/')]
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "slow or not slow",
                               f"--junitxml={xml}", str(TESTS)], cwd=tmp, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if not xml.exists():
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
            raise SystemExit(f"pytest wrote no report (exit {proc.returncode})")
        cases = ET.parse(xml).getroot().iter("testcase")
        cells: dict[tuple[str, str], str] = {}
        other: list[tuple[str, str]] = []
        for case in cases:
            name = case.get("name", "")
            m = re.fullmatch(r"(\w+)\[(.*)\]", name)
            if m is None:
                other.append((name, _cell(case)))
                continue
            func, params = m.groups()
            env_id = next((i for i in ids if i in params), None)
            mode = params.replace(env_id or "", "").strip("-")
            row = f"{func}[{mode}]" if mode else func
            if env_id is None or row not in ROWS:
                other.append((name, _cell(case)))
                continue
            cells[(row, env_id)] = _cell(case)
    short = [i.split("/")[1] for i in ids]
    lines = [
        "# RL client compatibility",
        "",
        f"`python benchmarks/clients_compat.py`: tests/test_clients.py (slow tests included) with Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}, {wall:.0f} s wall on {os.cpu_count()} CPUs "
        f"(pytest exit {proc.returncode}). Each id runs its smallest scenario (geo: mini preset, 2 s of "
        "arrivals; pd: 24 periods; npu: 30 min). 'ok' = the client's own calls passed; 'not installed' = the "
        "optional client is absent from this interpreter (`pip install -e \".[clients]\"`); a blank cell = "
        "the check does not apply to that id (rl-zoo3: no entry in the conf file).",
        "",
        "Client versions: " + ", ".join(f"{c} {_version(c)}" for c in CLIENTS) + ".",
        "",
        "| check | " + " | ".join(short) + " |",
        "|---|" + "---|" * len(short),
    ]
    for row, label in ROWS.items():
        lines.append(f"| {label} | " + " | ".join(cells.get((row, i), "") for i in ids) + " |")
    if other:
        lines += ["", "Multi-agent geo env (`servegym.envs.geo.parallel_env`, mini preset):", "",
                  "| check | result |", "|---|---|"]
        lines += [f"| {name} | {cell} |" for name, cell in other]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_name(out.name + ".tmp")
    tmp_out.write_text("\n".join(lines) + "\n")
    tmp_out.replace(out)  # atomic: a reader never sees half a table
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "clients_compat.md")
    args = ap.parse_args(argv)
    print(run(args.out).read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
