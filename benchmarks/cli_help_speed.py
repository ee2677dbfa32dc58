"""CPU time of ``servegym --help`` and a few subcommands' ``--help``, against ``import servegym``.

The console script (:mod:`servegym_launch`) defers the id registration, so ``--help`` imports neither gymnasium
nor numpy; the parsers import only light modules (handlers import the rest). Each case runs in a fresh process
``--repeat`` times; the figure is the median user+sys CPU time of the child (``resource.RUSAGE_CHILDREN``), so load
from other processes on the machine inflates it less than wall time. Run:
    .venv/bin/python benchmarks/cli_help_speed.py [--repeat 7] [--out benchmarks/results/cli_help_speed.md]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PY = sys.executable
SCRIPT = shutil.which("servegym", path=str(Path(PY).parent)) or "servegym"
CASES: tuple[tuple[str, list[str]], ...] = (
    ("python -c pass (interpreter floor)", [PY, "-c", "pass"]),
    ("python -c 'import servegym' (registers the ids: gymnasium + numpy)", [PY, "-c", "import servegym"]),
    ("python -m servegym.cli --help (registration not deferred)", [PY, "-m", "servegym.cli", "--help"]),
    ("servegym --help", [SCRIPT, "--help"]),
    ("servegym train --help", [SCRIPT, "train", "--help"]),
    ("servegym benchmark --help", [SCRIPT, "benchmark", "--help"]),
    ("servegym geo compare --help", [SCRIPT, "geo", "compare", "--help"]),
    ("servegym calibrate pd-kv --help", [SCRIPT, "calibrate", "pd-kv", "--help"]),
)

#: measured before the console script deferred registration and the parsers stopped importing numpy/scipy/numba
BEFORE = ("Before (main at 56924de, `/usr/bin/time` user+sys of one run each, same machine): `servegym --help` "
          "1.41 CPU-s, `train --help` 1.14, `benchmark --help` 1.27, `evaluate --help` 1.23, `geo compare --help` "
          "1.28 (the parsers imported gymnasium, numpy, scipy.optimize and numba).")


def cpu_of(cmd: list[str]) -> float:
    """User + system CPU seconds of one run of ``cmd`` (its output discarded)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    args = ap.parse_args()
    rows = []
    for name, cmd in CASES:
        cpu_of(cmd)  # warm the file cache
        runs = [cpu_of(cmd) for _ in range(args.repeat)]
        rows.append((name, statistics.median(runs), min(runs), max(runs)))
        print(f"{name}: median {rows[-1][1]:.3f} CPU-s", flush=True)
    ref = rows[1][1]
    lines = [f"# CPU time of the command's --help (median of {args.repeat} fresh processes, user+sys)", "",
             "Measured by `benchmarks/cli_help_speed.py`; ratio = median / `import servegym`'s, same run.", "",
             "| case | median CPU-s | min | max | ratio |", "|---|---|---|---|---|"]
    lines += [f"| {n} | {m:.3f} | {lo:.3f} | {hi:.3f} | {m / ref:.2f} |" for n, m, lo, hi in rows]
    lines += ["", BEFORE]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out is not None:
        fd, tmp = tempfile.mkstemp(dir=args.out.parent, prefix=".cli_help_speed.")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
