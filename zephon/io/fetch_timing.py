"""Per-fetch timing: where the time of each shard read goes (``fetch_timing_snapshot()``).

A *group* is the rows one fetch micro-batch reads from one shard. ``FetchOp`` opens a group
around each read when timing is on (``enable_observability("nodes")``); the dataset layer notes
into the current thread's group what it did on the way: finding an open reader (a cache hit)
or opening one (a miss; the open time, and the part of it spent making a remote shard local,
"resolve"), closing readers pushed out of the open-reader cache, retries of transient errors.
Reading is the rest of the group's time. Counts are kept per process (``LOCAL``) and travel
with the operator counters (``engine/observe/metrics.py``), like ``accounting``.

Prefetch counters (``prefetch()``): pointer blocks and samples looked ahead over, shard warm
requests and how they ended.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

FIELDS = ("samples", "groups", "group_ns", "resolve_ns", "open_ns", "read_ns", "close_ns",
          "retries", "cache_hits", "cache_misses", "shard_reopens")
PREFETCH_FIELDS = ("batches", "samples", "prefetch_requests", "prefetch_succeeded",
                   "prefetch_failed")
_NOTED = ("resolve_ns", "open_ns", "close_ns", "retries", "cache_hits", "cache_misses",
          "shard_reopens")

_current = threading.local()


def note(field: str, value: int = 1) -> None:
    """Add to the current thread's group, if a timed fetch is reading (else nothing)."""
    g = getattr(_current, "group", None)
    if g is not None:
        g[field] = g.get(field, 0) + int(value)


@contextmanager
def group(dataset_id: int, shard_id: int, samples: int, enabled: bool = True) -> Iterator[None]:
    """Time one shard read of a fetch micro-batch into ``LOCAL``."""
    if not enabled:
        yield
        return
    g: dict[str, int] = {}
    outer, _current.group = getattr(_current, "group", None), g
    t0 = time.perf_counter_ns()
    try:
        yield
    finally:
        dt = time.perf_counter_ns() - t0
        _current.group = outer
        resolve = g.get("resolve_ns", 0)
        g["open_ns"] = max(0, g.get("open_ns", 0) - resolve)  # an open includes its resolve
        g["read_ns"] = max(0, dt - resolve - g["open_ns"] - g.get("close_ns", 0))
        g.update(samples=samples, groups=1, group_ns=dt)
        LOCAL.add(dataset_id, shard_id, g)


class Counters:
    """(dataset_id, shard_id) -> FIELDS counts, and the prefetch counts, for one process."""

    def __init__(self) -> None:
        self.shards: dict[tuple[int, int], list[int]] = {}
        self.prefetch = [0] * len(PREFETCH_FIELDS)
        self._lock = threading.Lock()  # threads-runner workers and prefetch callbacks

    def add(self, dataset_id: int, shard_id: int, counts: dict[str, int]) -> None:
        with self._lock:
            row = self.shards.setdefault((int(dataset_id), int(shard_id)), [0] * len(FIELDS))
            for i, f in enumerate(FIELDS):
                row[i] += counts.get(f, 0)

    def add_prefetch(self, **counts: int) -> None:
        with self._lock:
            for i, f in enumerate(PREFETCH_FIELDS):
                self.prefetch[i] += counts.get(f, 0)

    def take_delta(self) -> dict | None:
        with self._lock:
            if not self.shards and not any(self.prefetch):
                return None
            out = {"shards": [[d, s, *row] for (d, s), row in self.shards.items()],
                   "prefetch": self.prefetch}
            self.shards, self.prefetch = {}, [0] * len(PREFETCH_FIELDS)
        return out

    def merge(self, delta: dict | None) -> None:
        if not delta:
            return
        for d, s, *row in delta["shards"]:
            self.add(d, s, dict(zip(FIELDS, row)))
        self.add_prefetch(**dict(zip(PREFETCH_FIELDS, delta["prefetch"])))


LOCAL = Counters()


def timed_ns() -> int:
    return time.perf_counter_ns()
