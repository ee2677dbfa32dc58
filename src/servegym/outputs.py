"""Writing results so that none is lost or silently replaced: atomic writes, output locks, interruption.

* **Atomic writes.** :func:`atomic_path` yields a temporary name in the destination's own folder (same
  file system, same suffix, so libraries that pick a format by suffix behave) and moves it over the
  destination with :func:`os.replace` only when the writer returned without error: a reader, or a run
  killed mid-write, sees the old file or the new one, never half of one. :func:`write_text`,
  :func:`write_json` and :func:`write_frame` are the common cases.
* **Output locks.** :class:`OutputLock` holds ``<output>.lock`` (created with ``O_EXCL``; it holds the
  owner's pid, host and process start time) for as long as a run writes an output. A second run on the
  same output gets a one-line :class:`OutputBusy` (exit status 2). A lock is reclaimed when its owner is
  gone on this host (a run killed with SIGKILL, a machine reboot): its pid names no process, or names a
  process that started at another time than the owner (the pid was reused); a lock that names no valid
  pid at all (torn, or not written by servegym) is reclaimed too. Folders made for the lock are removed
  again on release while empty (:func:`make_folders`), so a failed or refused run leaves none behind.
* **Refusing to overwrite.** :func:`refuse_existing` is the one-line error a run gives when its output
  exists and neither ``--force`` nor ``--resume`` was passed.
* **Nothing left by a failure.** :func:`created_folders_removed_on_error` removes the empty folders a
  command created when it fails (a misspelt env id must not leave ``runs/<id>_<algo>_s0/`` behind).
* **Interruption.** :func:`interruptible` turns SIGTERM (and SIGINT, as Python does already) into
  :class:`Interrupted` in the main thread, so ``finally`` blocks shut process pools down and the partial
  results are saved before the process exits with ``128 + signal``.
* **Journals.** :class:`Journal` appends one JSON line per finished unit of work (a sweep cell, a suite
  task) and flushes it to disk, so an interrupted run can be resumed from what it finished.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from servegym.errors import ConfigError

_UMASK = os.umask(0o022)
os.umask(_UMASK)
#: The largest journal line read back when resuming (a suite task's output is a few kB).
MAX_JOURNAL_LINE = 16 * 2**20


class OutputBusy(ConfigError):
    """Another live run holds the lock of the output this run would write."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; ``signum`` says which (the exit status is ``128 + signum``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


# --------------------------------------------------------------------------- atomic writes
@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix); on normal exit it replaces ``path`` atomically,
    on an exception it is removed and ``path`` is left as it was. Creates the folder."""
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=f".tmp{dest.suffix}", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; results get the mode any new file would
    try:
        yield tmp
        _fsync(tmp)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _fsync(p: Path) -> None:
    """Flush ``p``'s data to disk before the rename (so a crash after it cannot leave an empty file)."""
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike[str], obj: Any, **dumps: Any) -> Path:
    return write_text(path, json.dumps(obj, **{"indent": 2, **dumps}) + "\n")


def write_frame(df: Any, path: str | os.PathLike[str]) -> Path:
    """A pandas DataFrame as CSV, or Parquet for a ``.parquet`` path, atomically (no index)."""
    p = Path(path)
    with atomic_path(p) as tmp:
        if p.suffix == ".parquet":
            df.to_parquet(tmp, index=False)
        else:
            df.to_csv(tmp, index=False)
    return p


def save_figure(fig: Any, path: str | os.PathLike[str], **savefig: Any) -> Path:
    """``fig.savefig`` atomically (the suffix picks the format, as matplotlib does)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, **savefig)
    return Path(path)


def save_model(model: Any, path: str | os.PathLike[str]) -> Path:
    """A stable-baselines3 model's ``save`` atomically (``path`` ends in ``.zip``)."""
    with atomic_path(path) as tmp:
        model.save(tmp)
    return Path(path)


# --------------------------------------------------------------------------- folders, overwrite and locks
def _missing_folders(path: str | os.PathLike[str]) -> list[Path]:
    """``path`` and its parents that do not exist yet, deepest first."""
    p = Path(os.path.abspath(path))
    return [d for d in (p, *p.parents) if not d.exists()]


def make_folders(path: str | os.PathLike[str]) -> list[Path]:
    """``mkdir -p path``; returns the folders it created, deepest first, for :func:`remove_empty_folders`."""
    missing = _missing_folders(path)
    Path(path).mkdir(parents=True, exist_ok=True)
    return missing


def remove_empty_folders(made: list[Path]) -> None:
    """Remove the folders :func:`make_folders` created, deepest first, while they are empty: a run that
    failed, was refused or was interrupted leaves no empty folder it made behind."""
    for d in made:
        try:
            d.rmdir()
        except OSError:  # the run wrote into it (or another run did): kept, and so are its parents
            break


def refuse_existing(flag: str, path: str | os.PathLike[str], what: str, resume: bool = True) -> None:
    """The one-line error when ``path`` (an earlier run's ``what``) exists and the user did not choose."""
    how = "--resume to continue it or --force to replace it" if resume else "--force to replace it"
    raise ConfigError(f"{flag} = {str(path)!r} already holds {what}; pass {how} (or choose another {flag})")


@contextlib.contextmanager
def created_folders_removed_on_error(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Run the block; if it raises, remove the folders it created at and above ``folder`` and the empty
    folders it created inside them, bottom up. Only folders that did not exist before the block and are
    empty are removed (``os.rmdir`` refuses anything else), so no file is ever deleted."""
    new = _missing_folders(folder)
    try:
        yield
    except BaseException:
        if new:
            for root, _, _ in sorted(os.walk(new[0]), key=lambda w: -len(w[0])):  # inside, deepest first
                with contextlib.suppress(OSError):
                    os.rmdir(root)
            remove_empty_folders(new[1:])
        raise


#: pid_t is a C int: a recorded pid outside [1, MAX_PID] names no process (``os.kill`` would overflow on it)
MAX_PID = 2**31 - 1


def _pid_alive(pid: int) -> bool:
    if not 1 <= pid <= MAX_PID:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    except OSError:  # any other refusal: no process we could be sharing an output with
        return False
    return True


def process_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (field 22 of ``/proc/<pid>/stat``); None
    where there is no ``/proc`` or no such process. A pid is reused once its process is gone; the pair
    (pid, start) is not, so a lock records both."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as fh:
            data = fh.read(4096)
    except (OSError, ValueError, OverflowError):
        return None
    # field 2 (the command name) is in parentheses and may hold spaces or ")": count from the last ")"
    fields = data[data.rfind(b")") + 1:].split()
    try:
        return int(fields[19])  # fields[0] is field 3 (the state), so field 22 is fields[19]
    except (IndexError, ValueError):
        return None


def _boot_time() -> float | None:
    """The machine's boot time (seconds since the epoch, ``btime`` in ``/proc/stat``), or None."""
    try:
        with open("/proc/stat", "rb") as fh:
            for line in fh:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _owner_alive(owner: dict[str, Any], lock_path: Path) -> bool:
    """Whether the run that wrote the lock ``owner`` (on this host) still runs: its pid is alive and that
    process is the one that wrote the lock (its start time is the recorded one; for a lock without one,
    from a servegym before it was recorded, the process started before the lock file was written)."""
    pid = owner.get("pid")
    if not _is_int(pid) or not _pid_alive(pid):
        return False
    now = process_start(pid)
    if now is None:  # no /proc (not Linux): the pid is all there is to go by
        return True
    start = owner.get("start")
    if _is_int(start):
        return start == now
    boot, tick = _boot_time(), os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        written = lock_path.stat().st_mtime
    except OSError:
        return True
    # btime is whole seconds: a process that started more than 2 s after the lock was written did not write it
    return boot is None or boot + now / tick <= written + 2.0


class OutputLock:
    """``<path>.lock`` held while a run writes ``path`` (module docstring). Use as a context manager;
    ``flag`` names the option that chose ``path`` in the error message."""

    def __init__(self, path: str | os.PathLike[str], flag: str = "--out") -> None:
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.flag = flag
        self.held = False
        #: folders acquire() made for the lock, deepest first: removed again on release when still empty,
        #: so a run that fails (or is refused) leaves no empty folder behind
        self._made: list[Path] = []

    def _owner(self) -> dict[str, Any] | None:
        try:
            with self.lock_path.open("rb") as fh:
                doc = json.loads(fh.read(4096).decode("utf-8", "replace"))
            return doc if isinstance(doc, dict) else None
        except (OSError, ValueError):
            return None

    def acquire(self) -> OutputLock:
        self._made = make_folders(self.lock_path.parent)
        try:
            return self._acquire()
        except BaseException:
            self._remove_made()
            raise

    def _remove_made(self) -> None:
        remove_empty_folders(self._made)
        self._made = []

    def _acquire(self) -> OutputLock:
        me = {"pid": os.getpid(), "host": socket.gethostname(), "start": process_start(os.getpid())}
        for _ in range(3):
            try:
                fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = self._owner()
                if owner is None:
                    # being written this instant by its creator, or torn: the creator's content appears at once
                    import time

                    time.sleep(0.05)
                    owner = self._owner()
                pid = owner.get("pid") if owner else None
                # a lock naming no valid pid (torn, or not servegym's) or a run gone from this host: stale
                valid = _is_int(pid) and 1 <= pid <= MAX_PID
                same_host = owner is not None and owner.get("host") == me["host"]
                if owner is None or not valid or (same_host and not _owner_alive(owner, self.lock_path)):
                    with contextlib.suppress(FileNotFoundError):  # a stale lock: its run is gone
                        self.lock_path.unlink()
                    continue
                host = str(owner.get("host"))[:80]
                raise OutputBusy(f"{self.flag} = {str(self.path)!r} is being written by another run (pid {pid} on "
                                 f"{host}; lock {self.lock_path.name}); wait for it to finish or choose another "
                                 f"{self.flag} (if that run is gone, delete {str(self.lock_path)!r})") from None
            with os.fdopen(fd, "w") as fh:
                json.dump(me, fh)
            self.held = True
            return self
        raise OutputBusy(f"{self.flag} = {str(self.path)!r}: could not take the lock {self.lock_path.name}")

    def release(self) -> None:
        if self.held:
            owner = self._owner()
            if owner is None or owner.get("pid") == os.getpid():
                with contextlib.suppress(FileNotFoundError):
                    self.lock_path.unlink()
            self.held = False
            self._remove_made()

    def __enter__(self) -> OutputLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# --------------------------------------------------------------------------- interruption
@contextlib.contextmanager
def interruptible(on_signal: Callable[[int], None] | None = None) -> Iterator[None]:
    """While inside, SIGTERM and SIGINT raise :class:`Interrupted` in the main thread (after calling
    ``on_signal(signum)`` when given; if that returns normally the first time, the signal only sets a flag,
    and a second signal raises). Outside the main thread this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        seen.append(signum)
        if on_signal is not None and len(seen) == 1:
            on_signal(signum)
            return
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGTERM and SIGINT held back while inside (steps that must happen together, such as moving an old
    output aside and the new one into place) and delivered on leaving, where :func:`interruptible` raises.
    Outside the main thread this does nothing.

    The hold is at Python's level: the handlers are swapped for one that records the signal, and on leaving the
    original handler gets it at once, at the block's exit. A signal mask would not do: ``pthread_sigmask``
    masks the calling thread only, so a signal reaching another thread (numba's, jax's, a BLAS pool's) still
    ran the handler inside the block; and unblocking ran it at some later bytecode, e.g. inside the caller's
    clean-up, which it cut short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    originals = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def record(sig: int, _frame: Any) -> None:
        held.append(sig)

    for sig in originals:
        signal.signal(sig, record)
    try:
        yield
    finally:
        for sig, handler in originals.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(held):  # each signal once, in the order they came
            handler = originals[sig]
            if callable(handler):
                handler(sig, None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(sig)


def ignore_sigint() -> None:
    """Pool-worker initializer: a terminal's Ctrl-C reaches the whole process group; the parent alone
    decides (it shuts the pool down), so workers do not die mid-write with their own tracebacks."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# --------------------------------------------------------------------------- journals
class Journal:
    """Append-only JSON lines (``{"key": ..., "value": ...}``) of finished work, flushed and fsynced per
    line; :meth:`read` returns the complete lines (a line torn by a kill is skipped). The first line is a
    header ``{"header": ...}``; a journal whose header differs from the run's is not resumed."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fh: Any = None

    def read(self, header: Any, check: Callable[[str, Any], str | None] | None = None) -> dict[str, Any] | None:
        """key -> value of the finished entries; None when there is no journal or it is another run's.

        A journal is the run's own file, but it is a file: a line that is complete yet not a finished entry
        of this run (not JSON, not ``{"key", "value"}``, or refused by ``check(key, value)``, which returns
        why or None) is skipped, so its unit of work runs again rather than its content reaching the
        results; the skipped lines are reported in one warning line on stderr. A torn last line (a kill
        mid-write) is skipped silently."""
        if not self.path.is_file():
            return None
        out: dict[str, Any] = {}
        skipped: list[str] = []
        with self.path.open("rb") as fh:
            first = fh.readline(MAX_JOURNAL_LINE)
            try:
                head = json.loads(first)
            except ValueError:
                return None
            if not isinstance(head, dict) or head.get("header") != header:
                return None
            for number, line in enumerate(fh, start=2):
                if len(line) > MAX_JOURNAL_LINE or not line.endswith(b"\n"):
                    continue
                try:
                    doc = json.loads(line)
                except (ValueError, RecursionError):
                    skipped.append(f"line {number}: not JSON")
                    continue
                if not (isinstance(doc, dict) and isinstance(doc.get("key"), str) and "value" in doc):
                    skipped.append(f"line {number}: not a {{key, value}} entry")
                    continue
                why = check(doc["key"], doc["value"]) if check is not None else None
                if why is not None:
                    skipped.append(f"line {number}: {why}")
                    continue
                out[doc["key"]] = doc["value"]
        if skipped:
            print(f"servegym: warning: {self.path.name}: skipped {len(skipped)} line(s) that are not finished work "
                  f"of this run (first: {skipped[0][:160]}); that work runs again", file=sys.stderr)
        return out

    def open(self, header: Any, keep: dict[str, Any] | None = None) -> Journal:
        """Start the journal afresh with ``header`` and the already finished entries ``keep``."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.path) as tmp, tmp.open("w") as fh:
            fh.write(json.dumps({"header": header}) + "\n")
            for k, v in (keep or {}).items():
                fh.write(json.dumps({"key": k, "value": v}, default=_json_default) + "\n")
        self._fh = self.path.open("a", encoding="utf-8")
        return self

    def add(self, key: str, value: Any) -> None:
        self._fh.write(json.dumps({"key": key, "value": value}, default=_json_default) + "\n")
        self._fh.flush()
        try:
            os.fsync(self._fh.fileno())
        except OSError as exc:  # pragma: no cover - file systems without fsync
            if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
                raise

    def close(self, remove: bool = False) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if remove:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


def _json_default(v: Any) -> Any:
    import numpy as np

    if isinstance(v, (np.integer, np.floating, np.bool_)):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)
