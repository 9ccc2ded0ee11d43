"""``ShardReaders``: one process's open shard readers of one dataset.

Opening a shard can mean a download into the node cache, a line index, a Parquet footer: a
process opens each shard once and keeps its reader while it is read. At most
``MAX_OPEN_SHARDS`` stay open (least recently used closed first), so that a pass over
thousands of shards does not hold thousands of file handles. Threads that want the same shard
wait for one opener; different shards open in parallel.

It is per process on purpose: a ``Dataset`` is a picklable descriptor, and pickling drops
its ``ShardReaders``, so a worker process starts with none open and a forked child builds its
own (``Dataset._rt`` compares the process id).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from zephon.io import fetch_timing
from zephon.io.formats.base import ShardReader
from zephon.io.storage.local_copy import Resources

__all__ = ["MAX_OPEN_SHARDS", "ShardReaders"]

MAX_OPEN_SHARDS = 64


class ShardReaders:
    """This process's reading state of one dataset: storage resources and open shard readers."""

    def __init__(self, res: Resources) -> None:
        self.pid = os.getpid()
        self.res = res
        self.readers: OrderedDict[int, ShardReader] = OrderedDict()
        self.lock = threading.Lock()
        self.opening: dict[int, threading.Lock] = {}
        self.last_opened: int | None = None  # catalog position of the shard opened last
        self.row_groups: dict[int, np.ndarray | None] = {}  # shard -> row_group_starts()
        self.opened: set[int] = set()  # shards opened before (a second open is a reopen)

    def get(self, sid: int, open_shard: Callable[[int], ShardReader],
            after_open: Callable[[int], None]) -> ShardReader:
        """The open reader of shard ``sid``; ``open_shard(sid)`` opens it when none is, then
        ``after_open(sid)`` runs (in the opening thread, once per open)."""
        with self.lock:
            reader = self.readers.get(sid)
            if reader is not None:
                self.readers.move_to_end(sid)
                fetch_timing.note("cache_hits")
                return reader
            opening = self.opening.setdefault(sid, threading.Lock())
        with opening:  # one thread opens a shard; other shards open in parallel
            with self.lock:
                reader = self.readers.get(sid)
            if reader is not None:
                fetch_timing.note("cache_hits")  # another thread opened it meanwhile
            else:
                t0 = fetch_timing.timed_ns()
                reader = open_shard(sid)
                fetch_timing.note("open_ns", fetch_timing.timed_ns() - t0)
                fetch_timing.note("cache_misses")
                with self.lock:
                    if sid in self.opened:
                        fetch_timing.note("shard_reopens")
                    self.opened.add(sid)
                    self.readers[sid] = reader
                    evicted = [self.readers.popitem(last=False)[1]
                               for _ in range(len(self.readers) - MAX_OPEN_SHARDS)]
                t0 = fetch_timing.timed_ns()
                for old in evicted:
                    old.close()
                if evicted:
                    fetch_timing.note("close_ns", fetch_timing.timed_ns() - t0)
                after_open(sid)
        return reader

    def drop(self, sid: int, reader: ShardReader) -> None:
        """Forget ``reader`` of shard ``sid`` (if it is still the open one): the next read
        opens the shard again."""
        with self.lock:
            if self.readers.get(sid) is reader:
                del self.readers[sid]
        reader.close()

    def close(self) -> None:
        """Close every open reader (a later read opens its shard again)."""
        with self.lock:
            readers = list(self.readers.values())
            self.readers.clear()
        for r in readers:
            r.close()
