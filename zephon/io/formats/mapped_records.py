"""Formats of memory-mapped record shards found through their own index (MDS, litData).

Each has a reader class of its own; counting a shard, opening it and warming it (copying it,
decoded, into the node cache) are the same for both, and live here.
"""

from __future__ import annotations

from typing import Any, ClassVar

from zephon.io.formats.base import Resources, ShardFormat, ShardRef, ShardStats


class MappedRecordsFormat(ShardFormat):
    """``reader(ref, res, allow_pickle)`` opens one shard (``rows``, its mapped ``_buf``,
    ``close()``). ``allow_pickle``: the ``-pickle`` entry, which reads pickled values."""

    reader: ClassVar[type]

    def __init__(self, name: str | None = None, allow_pickle: bool = False) -> None:
        if name is not None:
            self.name = name
        self.allow_pickle = allow_pickle

    def count(self, ref: ShardRef, res: Resources, *, keep: bool) -> ShardStats:
        reader = self.open(ref, res)
        try:
            return ShardStats(reader.rows, len(reader._buf))
        finally:
            reader.close()

    def open(self, ref: ShardRef, res: Resources) -> Any:
        return self.reader(ref, res, self.allow_pickle)

    def warm(self, ref: ShardRef, res: Resources) -> None:
        """The local copy, decoded where the shard is compressed."""
        self.open(ref, res).close()
