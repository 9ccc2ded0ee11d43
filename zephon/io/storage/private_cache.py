"""Private temporary caches: a process's own node cache when the shared one is off or unusable.

``CacheOptions(enabled=False)``, or a cache directory this process cannot write, gives each
process a cache of its own, ``<tmp>/zephon-cache-<random>/``, holding whole shards. It must go
when its process goes, however that happens, and zephon's coordinator and workers leave through
``os._exit`` (no ``atexit``) or are killed outright. So whether a directory is still wanted is
told by a lock, not by a promise to clean up:

- the owner holds an exclusive ``flock`` on ``<dir>/.owner.lock`` for as long as it lives; the
  kernel drops it when the process ends, SIGKILL included. A forked child closes its inherited
  copy at once (a copy would keep the dead parent's lock held);
- a directory whose lock can be taken belongs to a process that has ended: ``sweep`` takes the
  lock, renames the directory out of the way and removes it, so two sweepers never race and no
  live owner loses its cache;
- every process sweeps when it makes its private cache and on its way out, after removing its
  own: a ``multiprocessing`` finalizer, which runs in the training process at exit (after the
  engines are closed, ``cleanup.py``) and in every process multiprocessing started when its
  target returns (a worker returns also when its coordinator dies: its pipe ends). Its
  priority is the lowest, so it runs after multiprocessing has terminated and joined the
  process's daemonic children: a coordinator that stops removes the caches of all its workers,
  killed ones too, and a replacement worker sweeps the cache of the one it replaces when it
  makes its own.

What ends without running any of that (SIGKILL of every process at once, a SIGTERM's
``os._exit``) is left for the next sweep: a parent's end, the training process's exit, or the
next zephon process on the machine.

A directory is made under a staging name and renamed once its lock is held, so a sweep never
finds it unlocked. Directories without a lock file (left by earlier versions) are never
touched: nothing tells whether their owner still runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import uuid
from multiprocessing import util as mp_util
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: directories are removed at exit only
    fcntl = None  # type: ignore[assignment]

__all__ = ["PREFIX", "private_root", "sweep"]

PREFIX = "zephon-cache-"
_STAGING = ".zephon-cache-new-"
_TRASH = ".zephon-cache-gone-"
_LOCK = ".owner.lock"

_lock = threading.Lock()
_mine: tuple[int, Path, int | None] | None = None  # (pid, directory, descriptor holding the lock)


def base_dir() -> Path:
    return Path(tempfile.gettempdir())


def private_root() -> Path:
    """This process's private cache directory, made (and older dead ones swept) on first use."""
    global _mine
    with _lock:
        if _mine is not None and _mine[0] == os.getpid():
            return _mine[1]
        sweep()
        base = base_dir()
        staging = Path(tempfile.mkdtemp(prefix=_STAGING, dir=base))
        fd = None
        if fcntl is not None:
            fd = os.open(staging / _LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # new and unknown to others: free
        final = base / (PREFIX + staging.name[len(_STAGING):])
        os.rename(staging, final)
        _mine = (os.getpid(), final, fd)
        return final


def _remove(path: Path) -> None:
    """Rename first: a thread still downloading into the old path then fails instead of
    recreating files in a directory that is being removed."""
    trash = path.with_name(f"{_TRASH}{uuid.uuid4().hex[:12]}")
    try:
        os.rename(path, trash)
    except OSError:
        trash = path
    shutil.rmtree(trash, ignore_errors=True)


def sweep() -> list[Path]:
    """Remove the private caches of processes that have ended; returns what was removed."""
    if fcntl is None:  # pragma: no cover
        return []
    base = base_dir()
    mine = _mine[1] if _mine is not None and _mine[0] == os.getpid() else None
    removed = []
    try:
        names = os.listdir(base)
    except OSError:
        return []
    for name in names:
        if name.startswith(_TRASH):  # a removal that was cut short
            shutil.rmtree(base / name, ignore_errors=True)
            continue
        path = base / name
        if not name.startswith(PREFIX) or path == mine:
            continue
        try:
            fd = os.open(path / _LOCK, os.O_RDWR | os.O_CLOEXEC)
        except OSError:  # no lock file (an older zephon's, or not a cache) or not ours to open
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: the owner is alive
            os.close(fd)
            continue
        try:
            _remove(path)
            removed.append(path)
        finally:
            os.close(fd)
    return removed


def _at_exit() -> None:
    global _mine
    mine, _mine = _mine, None
    if mine is not None and mine[0] == os.getpid():
        _remove(mine[1])
        if mine[2] is not None:
            os.close(mine[2])
    sweep()


class _Registration:
    """The object multiprocessing calls back in a forked child (``register_after_fork``)."""


_registration = _Registration()


def _register(_obj: object = None) -> None:
    # exitpriority below every other finalizer: after daemonic children are terminated and
    # joined (multiprocessing.util._exit_function)
    mp_util.Finalize(None, _at_exit, exitpriority=-1000)


def _after_fork_in_child() -> None:
    global _lock, _mine
    _lock = threading.Lock()  # the parent's may have been held by a thread the child lacks
    if _mine is not None and _mine[2] is not None:
        try:
            os.close(_mine[2])  # our copy would keep the parent's lock alive after it dies
        except OSError:
            pass
    _mine = None


_register()
# a child that multiprocessing forks has its finalizers cleared, then runs the after-fork hooks
mp_util.register_after_fork(_registration, _register)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
