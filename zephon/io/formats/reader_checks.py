"""Checks every shard reader makes, worded alike whichever format it reads.

- a shard still holds the rows discovery (or index.json) counted: one that changed since would
  shift every pointer into it, so the read stops with a ``DataError`` naming it;
- a row asked for exists (``IndexError`` naming dataset, shard and the first bad row);
- a column asked for exists (``ValueError`` listing the missing ones and the shard's).

Each format's reader once wrote these out itself; a new format's reader calls them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from zephon.io.errors import DataError
from zephon.io.storage.shard_ref import ShardRef

__all__ = ["check_columns", "check_row_count", "check_rows"]


def check_row_count(ref: ShardRef, rows: int, unit: str = "rows") -> None:
    """Raise unless the opened shard holds the ``rows`` its catalog entry counted (an entry
    without a count passes)."""
    if ref.rows is not None and rows != ref.rows:
        raise DataError(f"shard holds {rows} {unit} but {ref.rows} were counted at "
                        "discovery: it changed since (rebuild index.json or recreate the "
                        "Dataset)", dataset=ref.dataset, shard=ref.display)


def check_rows(rows: np.ndarray, count: int, where: str, unit: str = "rows") -> None:
    """Raise unless every one of ``rows`` (int64) is a row of a shard of ``count`` rows;
    ``where`` names dataset and shard (``ShardRef.label``)."""
    if len(rows) and (rows.min() < 0 or rows.max() >= count):
        bad = int(rows[(rows < 0) | (rows >= count)][0])
        raise IndexError(f"{where}: row index {bad} out of range for a shard of {count} {unit}")


def check_columns(columns: Sequence[str] | None, have: Sequence[str], where: str) -> None:
    """Raise unless the shard has every one of ``columns`` (None: all, which it has)."""
    if columns is None:
        return
    missing = [c for c in columns if c not in have]
    if missing:
        raise ValueError(f"{where}: no column(s) {missing}; the shard has {list(have)}")
