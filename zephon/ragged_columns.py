"""Ragged (list) columns of Arrow tables as numpy offsets + values, and back.

Token ids, masks and positions travel as Arrow list columns. The operators and kernels want
them as two flat arrays (int64 row offsets, values) without a copy, and hand back new columns
built over such arrays; a take of rows goes through the ``ragged`` kernel, several times faster
than Arrow's generic take on list arrays. Arrow may hold a column in several chunks: ``ragged_chunks``
leaves them where they are (the kernels gather across chunks), ``ragged_column`` joins them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

__all__ = ["RaggedChunks", "list_array", "ragged_chunks", "ragged_column", "take_table"]


def _is_token_list(t: pa.DataType) -> bool:
    return ((pa.types.is_list(t) or pa.types.is_large_list(t))
            and (pa.types.is_integer(t.value_type) or pa.types.is_floating(t.value_type)))


def take_table(table: pa.Table, idx: np.ndarray) -> pa.Table:
    """Rows ``idx`` of a table. Ragged numeric columns (token ids, masks) go through the
    ``ragged`` kernel, several times faster than Arrow's generic take on list arrays, and read
    a column of several chunks in place (one copy of the taken rows, not two)."""
    if not len(idx):
        return table.slice(0, 0)
    arr = pa.array(idx)
    cols = []
    for name, col in zip(table.column_names, table.columns):
        if _is_token_list(col.type) and col.null_count == 0 and \
                not any(c.values.null_count for c in col.chunks):  # null elements: Arrow's take
            from zephon._ext import kernel

            chunks = ragged_chunks(table.select([name]), name)
            rows = np.asarray(idx, dtype=np.int64)
            if len(rows) and (rows.min() < 0 or rows.max() >= len(chunks.offsets) - 1):
                raise ValueError(f"row index out of range for {len(chunks.offsets) - 1} rows")
            start = chunks.offsets[rows]
            values, src, chunk = chunks.locate(start)
            off, val = kernel("ragged").gather_ragged(values, src, chunks.offsets[rows + 1] - start,
                                                      chunk=chunk)
            cols.append(list_array(off, val, col.type))
        else:
            cols.append(col.take(arr))
    return pa.Table.from_arrays(cols, schema=table.schema) if cols else table.take(arr)


def ragged_column(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(offsets int64, values) numpy views of a list column, zero-copy where Arrow allows.

    A column of several chunks is joined by the ``ragged`` kernel in one copy (Arrow's
    combine_chunks would copy, then the values would be copied again); callers that gather
    from the column anyway should use ``ragged_chunks``, which copies nothing.
    """
    col = table.column(name)
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    if len(chunks) == 1:
        return _ragged_chunk(chunks[0], name)
    if not chunks:
        return np.zeros(1, dtype=np.int64), np.empty(0, dtype=np.int32)
    parts = [_ragged_chunk(c, name) for c in chunks]
    from zephon._ext import kernel

    return kernel("ragged").concat_ragged([p[0] for p in parts], [p[1] for p in parts])


class RaggedChunks(NamedTuple):
    """A list column left in its Arrow chunks (zero-copy views).

    ``offsets`` (int64, rows + 1) index the values as if the chunks were joined, exactly as
    ``ragged_column`` would return them; ``values`` holds each chunk's values and ``starts``
    the joined position where each chunk begins. No row spans two chunks.
    """

    offsets: np.ndarray
    values: list[np.ndarray]
    starts: np.ndarray

    def locate(self, pos: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray | None]:
        """Kernel arguments ``(values, src, chunk)`` for segments starting at joined positions
        ``pos``: the one array and ``pos`` itself for a single chunk, else the chunk list, the
        start inside each segment's chunk and the chunk index (``ragged`` kernels' ``chunk=``)."""
        pos = np.asarray(pos, dtype=np.int64)
        if len(self.values) == 1:
            return self.values[0], pos, None
        chunk = np.searchsorted(self.starts, pos, side="right") - 1
        np.maximum(chunk, 0, out=chunk)  # a (bad) negative start stays in chunk 0 and fails there
        return self.values, pos - self.starts[chunk], chunk


def ragged_chunks(table: pa.Table, name: str) -> RaggedChunks:
    """A list column as ``RaggedChunks``: offsets over the joined rows, values per chunk."""
    col = table.column(name)
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    if len(chunks) == 1:
        offsets, values = _ragged_chunk(chunks[0], name)
        return RaggedChunks(offsets, [values], np.zeros(1, dtype=np.int64))
    if not chunks:
        return RaggedChunks(np.zeros(1, dtype=np.int64), [np.empty(0, dtype=np.int32)],
                            np.zeros(1, dtype=np.int64))
    parts = [_ragged_chunk(c, name) for c in chunks]
    sizes = np.array([len(p[1]) for p in parts], dtype=np.int64)
    starts = np.zeros(len(parts), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    offsets = np.concatenate([[0]] + [p[0][1:] + b for p, b in zip(parts, starts.tolist())])
    return RaggedChunks(offsets.astype(np.int64, copy=False), [p[1] for p in parts], starts)


def _ragged_chunk(arr: pa.Array, name: str) -> tuple[np.ndarray, np.ndarray]:
    if pa.types.is_fixed_size_list(arr.type):
        width = arr.type.list_size
        values = arr.flatten().to_numpy(zero_copy_only=False)
        offsets = np.arange(len(arr) + 1, dtype=np.int64) * width
        return offsets, values
    if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
        raise TypeError(f"column {name!r} is {arr.type}, not a list of tokens")
    if arr.null_count:
        raise ValueError(f"column {name!r} has null rows")
    offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    values = arr.values.to_numpy(zero_copy_only=False)
    if offsets[0] != 0:
        values = values[offsets[0] : offsets[-1]]
        offsets = offsets - offsets[0]
    else:
        values = values[: offsets[-1]]
    return offsets, values


def list_array(offsets: np.ndarray, values: np.ndarray,
               type: pa.DataType | None = None) -> pa.Array:
    """A ragged Arrow column over numpy offsets + values (no copy of the values).

    ``type``: the list type to give it (e.g. the source column's, whose element field may be
    named or non-null), honoured when the offsets fit it; a table schema then matches as is
    instead of being cast per call.
    """
    offsets = np.asarray(offsets)
    small = offsets[-1] < 2**31
    if type is not None and pa.types.is_list(type) and small:
        large = False
    elif type is not None and pa.types.is_large_list(type):
        large = True
    else:
        type, large = None, not small
    if large:
        return pa.LargeListArray.from_arrays(pa.array(offsets.astype(np.int64)), pa.array(values),
                                             type=type)
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values),
                                    type=type)
