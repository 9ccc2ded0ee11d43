"""Background threads, per process, that decode what a reader will want next.

Parquet decoding runs in Arrow's C++ without the GIL, so a row group decoded here while the
caller batches, maps or ships the previous one overlaps with that work on another core (a
DataLoader reading whole files gets the same from Arrow's own threads). Two kinds of guesses
come in: a shard reader moving forward asks for its next row groups, and the inline engine
passes on which rows the next pointer block reads (``FetchOp.read_ahead``), so a read that
moves to another shard finds its first row groups decoded too. Guesses land in the row-group
cache: a wrong one costs a decode and nothing else.

Two threads: the inline W1 benchmark reads two datasets at once, and one thread left the
busier dataset's decodes queued behind the other's.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

THREADS = 2

_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid that made it, pool)
_threads = THREADS
# Guesses are off in Zephon's worker processes: there are as many of them as cores already, and
# guessing decoded row groups that another worker was reading (W1 Parquet, 2 workers, 2 cores:
# slower). There only the row groups the coordinator says a worker owns are submitted.
enabled = True


def disable() -> None:
    """No guesses in this process; what is submitted still runs, on a single thread."""
    global enabled, _threads
    enabled = False
    _threads = 1


def submit(fn: Callable, *args) -> Future:
    """Run ``fn(*args)`` on this process's read-ahead threads (made anew after a fork)."""
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(),
                     ThreadPoolExecutor(_threads, thread_name_prefix="zephon-read-ahead"))
        return _pool[1].submit(fn, *args)


def drain() -> None:
    """Wait for every decode in flight (the threads are started anew by the next submit)."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None and pool[0] == os.getpid():
        pool[1].shutdown(wait=True)
