"""One background thread per process that decodes what a sequential reader will want next.

Parquet decoding runs in Arrow's C++ without the GIL, so a row group decoded on this thread
while the caller batches, maps or ships the previous one overlaps with that work on another
core (a DataLoader reading whole files gets the same from Arrow's own threads). Readers submit
at most one guess at a time and only while their accesses run forward; the guess lands in the
row-group cache, so a wrong one costs a decode and nothing else.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid that made it, pool)
# Off in Zephon's worker processes: there are as many of them as cores already, and a second
# decoding thread in each was measured to slow them down (W1 Parquet, 2 workers, 2 cores).
enabled = True


def disable() -> None:
    global enabled
    enabled = False


def submit(fn: Callable, *args) -> Future:
    """Run ``fn(*args)`` on this process's read-ahead thread (made anew after a fork)."""
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="zephon-read-ahead"))
        return _pool[1].submit(fn, *args)
