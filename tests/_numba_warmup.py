"""Compile servegym's numba kernels once per test session, not once per pytest-xdist worker.

Every kernel is ``@njit(cache=True)``: a process that finds a kernel's machine code in the on-disk cache
(``__pycache__`` next to the source, numba's default) loads it in milliseconds, one that does not compiles it
(the npu fluid kernels: about 25 CPU-s in all on the 2-core dev machine). On a fresh clone the cache is empty and
every worker of ``pytest -n auto`` used to compile the same kernels at the same time, each for itself.

Two parts, both used by tests/conftest.py:

* :func:`install_compile_locks` makes every process of the session take a per-kernel file lock around a compile
  that the process does not already hold in memory: the first process compiles and saves the kernel to the
  cache, the others wait for the lock and then load the saved code (numba's compile tries the disk cache first).
  Locks are taken in call order (a kernel's lock before those of the kernels it calls, which numba compiles
  inside), so two processes can never wait on each other; a process re-entering the lock of a kernel it holds
  (a kernel compiled for a second signature while its first compile types a call) counts up instead of blocking.
* run as a script (``python tests/_numba_warmup.py LOCK_DIR``), it takes the same locks and drives the
  production code paths once (a short npu episode, the NeuScale and hindsight baselines, short episodes of both
  geo envs, their residual modes included), so the kernels compile with the very argument types production passes, in a process of their own that runs while the
  workers start on the tests; a worker that needs a kernel first waits for it instead of compiling it again.

Nothing here changes what a test checks: a kernel loaded from the cache is the machine code a compile makes.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

#: How long a process waits for another's compile of one kernel before compiling it itself (s): far above a
#: compile (the largest kernel takes about 5 CPU-s), so only a hung holder ever reaches it.
LOCK_TIMEOUT_S = 300.0


def _flock(fd: int, timeout_s: float) -> bool:
    """Take the exclusive lock on ``fd``, waiting at most ``timeout_s`` s; False if it stayed taken."""
    import fcntl
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)


def install_compile_locks(folder: Path) -> bool:
    """Wrap numba's ``Dispatcher.compile`` so a cached kernel (``cache=True``) compiles under a file lock in
    ``folder``, one per kernel. Returns False (and changes nothing) without numba or on a second call."""
    try:
        from numba.core import dispatcher, sigutils
        from numba.core.caching import NullCache
        from numba.core.compiler_lock import global_compiler_lock
    except ImportError:  # pragma: no cover - numba is a core dependency
        return False
    if getattr(dispatcher.Dispatcher.compile, "_servegym_locked", False):
        return False
    folder.mkdir(parents=True, exist_ok=True)
    original = dispatcher.Dispatcher.compile
    held: dict[str, list[int]] = {}  # lock name -> [file descriptor, depth] in this process

    def compile(self: Any, sig: Any) -> Any:
        if isinstance(self._cache, NullCache):  # not cached on disk: nothing another process could share
            return original(self, sig)
        # numba's own (re-entrant) lock first: one thread of this process compiles at a time anyway, so ``held``
        # is this thread's and two threads never wait on each other's file locks
        with global_compiler_lock:
            args, _ = sigutils.normalize_signature(sig)
            if tuple(args) in self.overloads:  # already in this process (the common call: typing a caller)
                return original(self, sig)
            f = self.py_func
            name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{f.__module__}.{f.__qualname__}")
            entry = held.get(name)
            if entry is not None:
                entry[1] += 1
            else:
                fd = os.open(folder / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
                _flock(fd, LOCK_TIMEOUT_S)  # waits while another process compiles this kernel
                held[name] = entry = [fd, 1]
            try:
                return original(self, sig)  # loads what the lock's previous holder saved, or compiles and saves
            finally:
                entry[1] -= 1
                if entry[1] == 0:
                    del held[name]
                    os.close(entry[0])  # closing the descriptor releases the lock

    compile._servegym_locked = True  # type: ignore[attr-defined]
    dispatcher.Dispatcher.compile = compile
    return True


def warm_up() -> None:
    """Drive every compiled kernel through the production code paths once, npu fluid kernels first (the
    largest, and the first the test files need in alphabetical order)."""
    import gymnasium as gym
    import numpy as np

    import servegym  # noqa: F401 - registers the environment ids

    env = gym.make("servegym/NPUAutoscale-v0", config={"hours": 0.5})
    env.reset(seed=0)
    act = np.ones(env.action_space.shape, dtype=np.int64)
    for _ in range(2):
        env.step(act)
    env.close()

    from servegym.envs.npu.env import NPUAutoscaleEnv

    npu = NPUAutoscaleEnv({"model": "Llama-3-8B", "trace": "openthoughts", "hours": 0.5, "n_candidates": 1,
                           "rate_rpm": 600.0, "split": None})
    npu.run_baseline("neuscale", 0)

    from servegym.envs.npu.sim.azure2024 import arrivals, sample_lengths

    sample_lengths("coding", 64, np.random.default_rng(0))  # the 2024 trace's sampling kernels (train split)
    arrivals("coding", 3, 0.05, 100.0, np.random.default_rng(0))

    from servegym.baselines.npu_hindsight import count_plan

    count_plan(np.array([0, 2, 3, 0, 0, 1, 2], dtype=np.int64), 1)

    # whole short episodes: the engine's kernels run when a poll interval ends, not at every decision; the
    # residual modes add the greedy reference's, the window env's and the window MILP's kernels
    short = {"preset": "mini", "geo": {"duration_s": 1.5, "drain_s": 10.0}}
    for env_id, cfg in (("servegym/GeoRoute-v0", short),
                        ("servegym/GeoRoute-v0", {**short, "action_mode": "residual", "reference": "greedy:0"}),
                        ("servegym/GeoRouteWindow-v0", {**short, "action_mode": "residual"}),
                        ("servegym/GeoRouteWindow-v0", short)):
        geo = gym.make(env_id, config=cfg)
        geo.reset(seed=0)
        geo.action_space.seed(0)
        done = False
        while not done:
            _, _, term, trunc, _ = geo.step(geo.action_space.sample())
            done = term or trunc
        geo.close()


def main(argv: list[str]) -> int:
    """``python tests/_numba_warmup.py LOCK_DIR``: warm the cache under the session's locks."""
    install_compile_locks(Path(argv[1]))
    warm_up()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
