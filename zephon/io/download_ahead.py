"""Remote shards downloaded ahead of the reads that will want them.

A reader that moves through a remote dataset shard after shard (a pass in order, the
inspector, a pipeline without a cross-shard shuffle) would otherwise wait for each download
after parsing the previous shard: transfer and parse would take turns, each leaving a core
idle. Two guesses start a download here, on a background thread, while the caller parses:

- the dataset sees shards opened in order (the first shard, then each next one) and fetches
  the ``SHARDS`` shards after the one just opened (``Dataset._reader``);
- the inline engine's hint (``Dataset.read_ahead``) names the shards the next pointer block
  reads.

Only shards that opening would download whole anyway are fetched (JSONL, and Parquet read
with ``remote_reads="whole"``), so a guess changes when a download happens, never whether:
it lands in the node cache like any other (locks, atomic rename, eviction), and a read of a
shard still downloading waits on the cache's lock for it instead of fetching it again. A
failed download is dropped here; the read that needs the shard redoes it and raises with the
shard's name. A guess is also dropped when the node cache could only hold the shard by
evicting another (``ShardCache.fits``): it might push out the very shard being read.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["submit", "drain"]

SHARDS = 2  # shards fetched ahead of a reader moving in order
# One thread: guesses run one after the other, so each one's check for room in the cache sees
# the shards fetched by the guesses before it (two threads both found room for a shard each).
THREADS = 1

_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid that made it, pool)
_inflight: dict[tuple, Future] = {}


def submit(key: tuple, fn: Callable[[], object]) -> Future | None:
    """Run ``fn()`` on this process's download threads unless ``key`` is already in flight
    (returns None then). Exceptions are kept in the future and never raised here."""
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():  # first use, or a forked child
            _pool = (os.getpid(), ThreadPoolExecutor(THREADS,
                                                     thread_name_prefix="zephon-download-ahead"))
            _inflight.clear()
        if key in _inflight:
            return None
        fut = _pool[1].submit(fn)
        _inflight[key] = fut
    fut.add_done_callback(lambda f, key=key: _forget(key, f))
    return fut


def _forget(key: tuple, fut: Future) -> None:
    with _lock:
        if _inflight.get(key) is fut:
            del _inflight[key]


def drain() -> None:
    """Wait for every download in flight (threads are started anew by the next submit)."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
        _inflight.clear()
    if pool is not None and pool[0] == os.getpid():
        pool[1].shutdown(wait=True)
