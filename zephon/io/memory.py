"""In-memory shards (tests, small corpora, generated data).

Readers never hand out the user's objects: ``read_payloads`` returns deep copies and
``read_table`` builds a fresh Arrow table, so no pipeline stage can mutate the caller's data
(the reference mutates payloads in place).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from zephon.io.records import table_from_dicts

__all__ = ["InMemoryShard", "MemoryShardReader"]


class InMemoryShard(Sequence):
    """A shard held in memory: a list of payloads (dicts for dict-shaped records).

    Args:
        items: The payloads, in row order.
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
        """The payloads (the shard's own list: readers copy, never mutate it)."""
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
        if len(rows) and (rows.min() < 0 or rows.max() >= self.rows):
            bad = int(rows[(rows < 0) | (rows >= self.rows)][0])
            raise IndexError(f"dataset {self.dataset!r}, shard {self.shard_id}: row index {bad} "
                             f"out of range for a shard of {self.rows} records")
        items = self._items
        return [items[i] for i in rows.tolist()]

    def read_table(self, rows: np.ndarray, columns: list[str] | None = None) -> pa.Table:
        table = table_from_dicts(self._select(rows))
        if columns is not None:
            table = table.select([c for c in columns if c in table.column_names])
        return table

    def read_payloads(self, rows: np.ndarray) -> list[Any]:
        return [copy.deepcopy(p) for p in self._select(rows)]
