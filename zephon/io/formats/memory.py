"""In-memory shards (tests, small corpora, generated data) as a registry entry.

``Dataset.from_dict`` holds ``InMemoryShard`` objects instead of files: the format has no
suffixes and is never detected, but is read like any other (``MEMORY.open`` on a
``MemoryShardRef``). Readers never hand out the user's objects: ``read_payloads`` returns deep
copies and ``read_table`` builds a fresh Arrow table, so no pipeline stage can mutate the
caller's data (the reference mutates payloads in place).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from zephon.io.formats.base import Resources, ShardFormat, ShardStats
from zephon.io.formats.reader_checks import check_rows
from zephon.io.formats.records import table_from_dicts

__all__ = ["MEMORY", "InMemoryShard", "MemoryFormat", "MemoryShardReader", "MemoryShardRef"]


class InMemoryShard(Sequence):
    """A shard held in memory: a list of payloads (dicts for dict-shaped records).

    Supports ``len``, indexing (a slice is an ``InMemoryShard``) and iteration.

    Args:
        items: The payloads, in row order; copied into a new list (the payloads themselves are
            not copied here; reads hand out deep copies). Default: none.
    """

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[Any] = ()) -> None:
        self._items = list(items)

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return InMemoryShard(self._items[index])
        return self._items[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, InMemoryShard):
            return self._items == other._items
        return NotImplemented

    def __hash__(self) -> int:  # mutable contents: identity hash
        return id(self)

    def __repr__(self) -> str:
        return f"InMemoryShard({len(self._items)} records)"

    @property
    def items(self) -> list[Any]:
        """The shard's own list of payloads (not a copy)."""
        return self._items


class MemoryShardReader:
    def __init__(self, dataset: str, shard_id: int, shard: InMemoryShard) -> None:
        self.dataset = dataset
        self.shard_id = shard_id
        self._items = shard.items
        self.rows = len(self._items)

    def close(self) -> None:
        pass

    def _select(self, rows: np.ndarray) -> list[Any]:
        rows = np.asarray(rows, dtype=np.int64).ravel()
        check_rows(rows, self.rows, f"dataset {self.dataset!r}, shard {self.shard_id}", "records")
        items = self._items
        return [items[i] for i in rows.tolist()]

    def read_table(self, rows: np.ndarray, columns: list[str] | None = None) -> pa.Table:
        table = table_from_dicts(self._select(rows))
        if columns is not None:
            table = table.select([c for c in columns if c in table.column_names])
        return table

    def read_payloads(self, rows: np.ndarray) -> list[Any]:
        return [copy.deepcopy(p) for p in self._select(rows)]


@dataclass(frozen=True)
class MemoryShardRef:
    """One in-memory shard of a dataset (what ``MEMORY.open`` reads)."""

    dataset: str
    shard_id: int
    shard: InMemoryShard
    location: None = None  # no storage: nothing is downloaded, nothing checked for links

    @property
    def display(self) -> str:
        return f"memory:{self.shard_id}"


class MemoryFormat(ShardFormat):
    name = "memory"
    stored = False

    def count(self, ref: MemoryShardRef, res: Resources, *,  # type: ignore[override]
              keep: bool) -> ShardStats:
        """The list's length; no stored bytes."""
        return ShardStats(len(ref.shard), 0)

    def open(self, ref: MemoryShardRef, res: Resources) -> MemoryShardReader:  # type: ignore[override]
        return MemoryShardReader(ref.dataset, ref.shard_id, ref.shard)

    def downloads_whole(self, ref: Any, res: Resources) -> bool:
        return False

    def warm(self, ref: Any, res: Resources) -> None:
        pass


MEMORY = MemoryFormat()


def memory_shards(name: str, shards: Mapping[Any, Any]) -> dict[int, InMemoryShard]:
    """``Dataset.from_dict``'s shards, checked: int ids, each given once, shards of records
    (empty ones left out). ValueError / TypeError naming the dataset otherwise."""
    if not isinstance(shards, Mapping) or not shards:
        raise ValueError(f"dataset {name!r}: from_dict needs a non-empty dict of shards")
    memory: dict[int, InMemoryShard] = {}
    for key, shard in shards.items():
        try:
            sid = int(key)
        except (TypeError, ValueError):
            raise ValueError(f"dataset {name!r}: shard id {key!r} is not an integer") from None
        if sid in memory:
            raise ValueError(f"dataset {name!r}: shard id {sid} given twice")
        if isinstance(shard, (str, bytes)) or not isinstance(shard, Iterable):
            raise TypeError(f"dataset {name!r}: shard {key!r} must be an InMemoryShard or "
                            f"a list of payloads, got {type(shard).__name__}")
        items = InMemoryShard(list(shard))
        if len(items):
            memory[sid] = items
    if not memory:
        raise ValueError(f"dataset {name!r} is empty: {len(shards)} shard(s), no records")
    return memory
