"""Reads of exact row lists started ahead, for readers whose format decodes any rows at once.

The inline engine tells the fetch what the next pointer block reads (``FetchOp.read_ahead``,
``Dataset.read_ahead``): a reader with the ``read_ahead`` capability starts reading those very
rows on the read-ahead threads (``zephon/io/ahead/read_ahead.py``) and the read that asks for
them takes the finished table. Vortex and Lance decode in Rust without the GIL, so the decode
of the next block overlaps with the batching of this one on another core, as a native scan's
own read-ahead threads do. A hint never changes what a read returns: the read run ahead is the
read the caller would run, and its error (a ``DataError`` naming the shard) is raised by the
read that takes it. Guesses are off in worker processes, where no hint arrives.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np
import pyarrow as pa

from zephon.io.ahead import read_ahead

__all__ = ["RowsAhead", "RowsAheadReader"]

# reads held per reader: the engine hints one block ahead; a few more cover a block that reads
# a shard in two runs and hints that were never followed by their read (a pipeline closed early)
HELD = 4


class RowsAhead:
    """The reads one shard reader has started ahead, by the exact rows they read."""

    def __init__(self, read: Callable[[np.ndarray], pa.Table]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._held: OrderedDict[bytes, Future] = OrderedDict()

    def start(self, rows: np.ndarray) -> None:
        """Start reading ``rows`` (all columns) on a read-ahead thread, unless that read is
        held already."""
        rows = np.array(rows, dtype=np.int64).ravel()  # a copy: the caller's array may change
        if not len(rows):
            return
        key = rows.tobytes()
        with self._lock:
            if key in self._held:
                return
            while len(self._held) >= HELD:
                self._held.popitem(last=False)
            self._held[key] = read_ahead.submit(self._read, rows)

    def take(self, rows: np.ndarray) -> Future | None:
        """The read of exactly ``rows`` started ahead (no longer held after), or None."""
        if not self._held:
            return None
        with self._lock:
            return self._held.pop(np.ascontiguousarray(rows, dtype=np.int64).tobytes(), None)

    def clear(self) -> None:
        with self._lock:
            self._held.clear()


class RowsAheadReader:
    """What the readers of such formats share (Vortex, Lance): each holds its file in
    ``_file`` and the reads started ahead in ``_ahead``, and defines ``read_table``."""

    _file: object
    _ahead: RowsAhead
    read_table: Callable[[np.ndarray], pa.Table]

    def read_ahead_rows(self, rows: np.ndarray) -> None:
        self._ahead.start(rows)

    def read_payloads(self, rows: np.ndarray) -> list[dict]:
        from zephon.payload_values import payload_rows

        table = self.read_table(rows)
        return payload_rows(table, table.column_names)

    def close(self) -> None:
        self._ahead.clear()
        self._file = None
