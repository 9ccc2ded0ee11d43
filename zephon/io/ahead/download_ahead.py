"""Remote shards downloaded ahead of the reads that will want them.

A reader that moves through a remote dataset shard after shard (a pass in order, the
inspector, a pipeline without a cross-shard shuffle) would otherwise wait for each download
after parsing the previous shard: transfer and parse would take turns, each leaving a core
idle. Two guesses start a download here, on a background thread, while the caller parses:

- the dataset sees a shard opened right after the one before it in catalog order, and fetches
  the ``SHARDS`` shards after it (``Dataset._reader``); a single open is no pattern, so a look
  at one shard fetches nothing more;
- the inline engine's hint (``Dataset.read_ahead``) names the shards the next pointer block
  reads.

Only shards that opening would download whole anyway are fetched (JSONL, and Parquet read
with ``remote_reads="whole"``), so a guess changes when a download happens, never whether:
it lands in the node cache like any other (locks, atomic rename, eviction), and a read of a
shard still downloading waits on the cache's lock for it instead of fetching it again. A
failed download is dropped here; the read that needs the shard redoes it and raises with the
shard's name. A guess is also dropped when the node cache could only hold the shard by
evicting another (``ShardCache.fits``): it might push out the very shard being read.

The thread is a daemon: a process that ends (Ctrl-C included) does not wait for a guess. One
cut short leaves a ``.part`` file and no lock (the kernel drops it), which the cache's next
producer of that shard removes, as after any crash.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable

__all__ = ["submit", "drain"]

SHARDS = 2  # shards fetched ahead of a reader moving in order

# One thread: guesses run one after the other, so each one's check for room in the cache sees
# the shards fetched by the guesses before it (two threads both found room for a shard each).
_lock = threading.Lock()
_idle = threading.Condition(_lock)
_queue: tuple[int, queue.SimpleQueue] | None = None  # (pid that made it, its queue)
_inflight: set[tuple] = set()


def _after_fork_in_child() -> None:
    # the lock may have been held by a thread that does not exist in the child
    global _lock, _idle, _queue
    _lock = threading.Lock()
    _idle = threading.Condition(_lock)
    _queue = None
    _inflight.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def submit(key: tuple, fn: Callable[[], object]) -> bool:
    """Run ``fn()`` on this process's download thread unless ``key`` is queued or running
    already (False then). Its exceptions are dropped."""
    global _queue
    with _lock:
        if _queue is None or _queue[0] != os.getpid():  # first use, or a forked child
            _queue = (os.getpid(), queue.SimpleQueue())
            _inflight.clear()
            threading.Thread(target=_run, args=(_queue[1],), name="zephon-download-ahead",
                             daemon=True).start()
        if key in _inflight:
            return False
        _inflight.add(key)
        _queue[1].put((key, fn))
    return True


def _run(jobs: queue.SimpleQueue) -> None:
    while True:
        key, fn = jobs.get()
        try:
            fn()
        except Exception:  # the read that needs the shard redoes it and reports the error
            pass
        finally:
            with _lock:
                _inflight.discard(key)
                _idle.notify_all()


def drain() -> None:
    """Wait until every download submitted in this process has finished."""
    with _lock:
        while _inflight and _queue is not None and _queue[0] == os.getpid():
            _idle.wait()
