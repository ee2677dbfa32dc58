"""The session's numba compile locks (tests/_numba_warmup.py): a process that needs a kernel another process is
compiling waits for it and loads the saved machine code instead of compiling it a second time."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

KERNEL = '''from numba import njit


@njit(cache=True)
def plus_one(x):
    return x + 1
'''

#: Calls the kernel under the session locks and prints how many compiles this process ran (0: loaded).
CALLER = '''import sys
sys.path[:0] = [{tests!r}, {mod!r}]
from pathlib import Path
from numba.core import event
from _numba_warmup import install_compile_locks

if {lock}:
    install_compile_locks(Path({locks!r}))
compiles = []
listener = type("L", (event.Listener,), {{"on_start": lambda self, ev: compiles.append(1), "on_end": lambda self, ev: None}})()
event.register("numba:compile", listener)
import kernel_mod
print("calling", flush=True)
print(kernel_mod.plus_one(1), len(compiles), flush=True)
'''


@pytest.mark.slow  # checks the harness's speed-up (two interpreters importing numba), not servegym: slow suite
def test_a_process_waits_for_the_compile_it_needs_and_loads_it(tmp_path: Path) -> None:
    mod, locks = tmp_path / "mod", tmp_path / "locks"
    mod.mkdir()
    locks.mkdir()
    (mod / "kernel_mod.py").write_text(KERNEL)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    tests = str(Path(__file__).parent)
    script, unlocked = (CALLER.format(tests=tests, mod=str(mod), locks=str(locks), lock=lock) for lock in (True, False))
    # this test holds the kernel's lock, as a process compiling it would
    fd = os.open(locks / "kernel_mod.plus_one.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    waiting = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    assert waiting.stdout is not None
    try:
        assert waiting.stdout.readline().strip() == "calling"
        time.sleep(1.0)  # without the lock it would compile now (nothing is cached yet) and exit
        assert waiting.poll() is None, "did not wait for the lock"
        # the holder's compile: another process, without the locks, saves the kernel to the cache
        first = subprocess.run([sys.executable, "-c", unlocked], env=env, capture_output=True, text=True, check=True)
        assert first.stdout.split() == ["calling", "2", "1"]  # it compiled
        os.close(fd)  # releases the lock
        fd = -1
        out, _ = waiting.communicate(timeout=60)
    finally:
        if fd >= 0:
            os.close(fd)
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert waiting.returncode == 0 and out.split() == ["2", "0"]  # loaded what the holder saved: no compile
