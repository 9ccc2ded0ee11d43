"""Exclusive inter-process locks on lock files, for the node-local shard cache.

On POSIX a lock is ``fcntl.flock`` on a descriptor of the lock file. A waiter sleeps in the
kernel and wakes the moment the holder lets go, so a read waiting for another thread's or
process's download starts as soon as the file is in place (the ``filelock`` package polls, which
adds up to its poll interval to every wait, and spends about a millisecond of Python per lock).
The kernel drops the lock when its holder dies, so a crashed download never blocks the others.
Threads of one process exclude each other too: each acquisition opens its own descriptor.

A forked child inherits the descriptors of the locks held at the fork. It closes its copies at
once: a copy would keep the lock alive after the parent released it, for as long as the child
lives (closing a copy leaves the parent's lock alone; only the last close releases it).

Without ``fcntl`` (Windows) the ``filelock`` package does the job.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["exclusive_lock"]

_POLL_S = 0.005  # filelock fallback only: its default of 50 ms would delay every waiting read

_held: set[int] = set()  # descriptors of the locks this process holds or is waiting for
_held_mutex = threading.Lock()  # held across fork, so _held is never caught half-updated


def _before_fork() -> None:
    _held_mutex.acquire()


def _after_fork_in_parent() -> None:
    _held_mutex.release()


def _after_fork_in_child() -> None:
    global _held_mutex
    for fd in _held:
        try:
            os.close(fd)
        except OSError:
            pass
    _held.clear()
    _held_mutex = threading.Lock()  # the inherited one is still held by the forking thread


if fcntl is not None and hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


def _open_lock_file(path: Path) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC
    try:
        return os.open(path, flags, 0o666)
    except FileNotFoundError:  # the cache folder was removed under a running process
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, flags, 0o666)


@contextmanager
def exclusive_lock(path: Path | str) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing, never deleted: removing a lock
    file that others wait on would let two holders in) for the ``with`` block."""
    if fcntl is None:  # pragma: no cover - Windows
        from filelock import FileLock

        with FileLock(str(path), poll_interval=_POLL_S):
            yield
        return
    with _held_mutex:
        fd = _open_lock_file(Path(path))
        _held.add(fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # blocks without the GIL; signals still interrupt it
        yield
    finally:
        with _held_mutex:
            _held.discard(fd)
            os.close(fd)  # releases the lock
