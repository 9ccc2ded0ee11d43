"""Records an accumulator holds, addressed by the ids it gave them on arrival.

Ids increase with arrival, so the store stays sorted by id and a lookup is a binary search.
Emitting takes rows out with one gather; nothing is copied per record in Python.
"""

from __future__ import annotations

import numpy as np

from zephon.block import Block


class HeldStore:
    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.ids = np.empty(0, dtype=np.int64)
        self._merged: Block | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, block: Block, ids: np.ndarray) -> None:
        if not len(block):
            return
        self.blocks.append(block)
        self.ids = np.concatenate([self.ids, np.asarray(ids, dtype=np.int64)])
        self._merged = None

    def block(self) -> Block | None:
        if not self.blocks:
            return None
        if self._merged is None or len(self.blocks) > 1:
            self._merged = Block.concat(self.blocks)
            self.blocks = [self._merged]
        return self._merged

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        rows = np.searchsorted(self.ids, ids)
        if len(ids) and (rows.max() >= len(self.ids) or not np.array_equal(self.ids[rows], ids)):
            raise RuntimeError("accumulator asked for a record it does not hold")
        return rows

    def take(self, ids: np.ndarray) -> Block:
        """The records with these ids, in this order (they stay held)."""
        return self.block().take(self.rows_of(np.asarray(ids, dtype=np.int64)))

    def remove(self, ids: np.ndarray) -> None:
        if not len(ids):
            return
        keep = np.ones(len(self.ids), dtype=bool)
        keep[self.rows_of(np.asarray(ids, dtype=np.int64))] = False
        if keep.all():
            return
        merged = self.block()
        self.ids = self.ids[keep]
        self.blocks = [merged.filter(keep)] if keep.any() else []
        self._merged = None

    def pop(self, ids: np.ndarray) -> Block:
        out = self.take(ids)
        self.remove(np.unique(ids))
        return out

    def set(self, block: Block | None, ids: np.ndarray) -> None:
        self.blocks = [block] if block is not None and len(block) else []
        self.ids = np.asarray(ids, dtype=np.int64)
        self._merged = None
