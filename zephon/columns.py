"""The columnar face of a batch: ``SampleBatch.to_arrow()`` and ``SampleBatch.column(name)``.

A delivered batch already is columns (Arrow over the shared memory the engine wrote it into),
so reading it by column costs no per-record Python objects: the fast way to read a batch, where
``batch.records`` builds a dict and a ``SampleRecord`` per record. What ``column`` returns
depends on what the column holds, so that each kind comes in the form that is cheapest to use:

- fixed-width numbers (ints, floats) without nulls: a read-only numpy array (a view, no copy);
- ragged numbers (token ids, masks: Arrow lists of ints or floats) without nulls: a
  ``RaggedColumn``, numpy ``offsets`` (int64, starting at 0) and ``values`` (a view);
- anything else (strings, bytes, booleans, nested values, columns with nulls): a
  ``pyarrow.Array`` (a view); ``.to_pylist()`` gives Python objects, ``pyarrow.compute``
  works on it as it is;
- the identity fields (``dataset_id``, ``shard_id``, ``sample_idx``, ``lane_id``, ``chunk_id``,
  ``chunk_offset``) when the payload has no column of that name: read-only int64 numpy arrays.

A column that only some records had (datasets with different columns in one batch) holds nulls
for the records that lacked it. Hidden columns (``__`` prefix, the engine's own) are left out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from zephon.block import META_FIELDS, Block
from zephon.ragged_columns import ragged_column


class RaggedColumn:
    """A ragged numeric column: row ``i`` is ``values[offsets[i]:offsets[i + 1]]``."""

    __slots__ = ("offsets", "values")

    def __init__(self, offsets: np.ndarray, values: np.ndarray) -> None:
        self.offsets = offsets
        self.values = values

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"row {i} out of range for {n} rows")
        i %= n
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __repr__(self) -> str:
        return f"RaggedColumn(rows={len(self)}, values={self.values.dtype}[{len(self.values)}])"


def _read_only(a: np.ndarray) -> np.ndarray:
    v = a.view()
    v.flags.writeable = False
    return v


def _visible(table: pa.Table) -> list[str]:
    return [c for c in table.column_names if not c.startswith("__")]


def _require_columnar(block: Block, what: str) -> pa.Table | None:
    if block.payload is None or block.columnar:
        return block.payload
    raise TypeError(f"{what}: this batch's payloads are Python objects that Arrow cannot hold "
                    "as columns (not all dicts, or values of mixed types); read them with "
                    "batch.records")


_NUMBERS, _RAGGED, _ARROW = 0, 1, 2
_KINDS: dict[pa.DataType, int] = {}  # what ``column`` returns for a type without nulls


def _kind(t: pa.DataType) -> int:
    kind = _KINDS.get(t)
    if kind is None:
        if pa.types.is_integer(t) or pa.types.is_floating(t):
            kind = _NUMBERS
        elif (pa.types.is_list(t) or pa.types.is_large_list(t)
              or pa.types.is_fixed_size_list(t)) \
                and (pa.types.is_integer(t.value_type) or pa.types.is_floating(t.value_type)):
            kind = _RAGGED
        else:
            kind = _ARROW
        _KINDS[t] = kind
    return kind


def column(block: Block, name: str) -> Any:
    """One column of ``block`` (see the module docstring for what comes back). It runs once
    per batch in a training loop, so the type checks are cached per type: the per-batch cost
    of reading a string column was 5 us, a third of reading its 32 texts."""
    table = block.payload
    i = table.schema.get_field_index(name) if isinstance(table, pa.Table) else -1
    if i < 0 or name.startswith("__"):
        table = _require_columnar(block, f"column({name!r})")
        if name in META_FIELDS:
            return _read_only(block.meta[name])
        names = _visible(table) if table is not None else []
        raise KeyError(f"no column {name!r} in this batch: payload columns {names}, identity "
                       f"columns {list(META_FIELDS)}")
    col = table.column(i)
    kind = _kind(col.type) if col.null_count == 0 else _ARROW
    if kind == _NUMBERS:
        if col.num_chunks == 1:
            return _read_only(col.chunk(0).to_numpy(zero_copy_only=True))
        return col.to_numpy()
    if kind == _RAGGED:
        offsets, values = ragged_column(table, name)
        return RaggedColumn(_read_only(offsets), _read_only(values))
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _lineage_array(lineage: np.ndarray) -> pa.Array:
    """The (n, depth) -1 padded lineage matrix as a list<int32> column (no padding)."""
    keep = lineage >= 0
    offsets = np.zeros(len(lineage) + 1, dtype=np.int32)
    np.cumsum(keep.sum(axis=1), out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(lineage[keep], type=pa.int32()))


def to_arrow(block: Block) -> pa.Table:
    """The identity columns (``META_FIELDS``, then ``lineage`` when records were split and
    ``padding_length`` for packed rows), then the payload's visible columns, as one table."""
    table = _require_columnar(block, "to_arrow()")
    payload_names = _visible(table) if table is not None else []
    ident: dict[str, pa.Array] = {k: pa.array(block.meta[k]) for k in META_FIELDS}
    if block.lineage.shape[1]:
        ident["lineage"] = _lineage_array(block.lineage)
    if "padding_length" in block.meta:
        ident["padding_length"] = pa.array(block.meta["padding_length"])
    clash = sorted(set(ident) & set(payload_names))
    if clash:
        raise ValueError(f"to_arrow(): payload columns {clash} have the names of identity "
                         "columns; read them with batch.column(name), the identity with "
                         "batch.ids / batch.lane_ids")
    arrays = list(ident.values()) + [table.column(c) for c in payload_names]
    return pa.table(arrays, names=list(ident) + payload_names)
