"""Python values of columns read from columnar files, as spec addendum A.10 gives them.

A Parquet record's payload (``batch.records[i].payload``, a ``map_transform``'s argument, a
``DatasetInspector`` read) holds, per column:

- numeric scalars as NumPy scalars of the stored dtype; timestamps, dates and durations as
  ``datetime64`` / ``timedelta64``; null as None;
- numeric or bool lists without null elements (``list<int32>`` token ids) as **read-only**
  ``np.ndarray`` of the stored dtype, views of the decoded buffer; fixed-size lists add
  dimensions (``fixed_size_list<float, 3>`` -> shape (3,), a list of them -> (n, 3));
- everything else (strings, bytes, bool, decimals, structs, lists with null elements, lists of
  lists) as the Python values ``to_pylist`` gives.

Records of JSONL shards keep plain Python values (what JSON gives). So the reader marks the
columns it decodes (field metadata ``zephon.values: numpy``, ``mark``); the mark
travels with the column through ``take``, slices, projections and Arrow IPC, and
``column_values`` converts a marked column once per block, never per value. A concatenation
keeps a column marked only when every table holding it has it marked (``concat_marks``): a
column that also holds JSONL rows stays Python values, whatever the grouping into blocks.
The engine's own operators read the Arrow columns and never see any of this.

Payloads that user code (a ``map_transform``) or an in-memory shard hands over keep their kind
the same way: a column whose first values are NumPy arrays or scalars is marked when the
payloads are laid out as a table (``mark_from_payloads``), so they come back as NumPy values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["VALUES_KEY", "column_values", "concat_marks", "is_marked", "mark",
           "mark_from_payloads", "mark_nested", "payload_rows"]

VALUES_KEY = b"zephon.values"
_NUMPY = b"numpy"
# a list<struct> column (pack_sequences' segments) whose numeric list fields are A.10 arrays
_NESTED = b"nested"


def mark(table: pa.Table, columns: Sequence[str] | None = None) -> pa.Table:
    """``table`` with its columns (or ``columns``) marked for A.10 values; no data is
    touched."""
    schema = table.schema
    wanted = set(schema.names if columns is None else columns)
    if all(_field_marked(f) for f in schema if f.name in wanted):
        return table
    fields = [f.with_metadata({**(f.metadata or {}), VALUES_KEY: _NUMPY})
              if f.name in wanted else f for f in schema]
    return pa.Table.from_arrays(table.columns, schema=pa.schema(fields, schema.metadata))


def mark_from_payloads(table: pa.Table, payloads: Sequence[Any], look: int = 8) -> pa.Table:
    """``table``, laid out from dict ``payloads``, with the columns marked whose first value
    (among the first ``look`` payloads) is a NumPy array or scalar."""
    numpy_cols = []
    head = [p for p in payloads[:look] if type(p) is dict]
    for name in table.column_names:
        value = next((p[name] for p in head if p.get(name) is not None), None)
        if isinstance(value, (np.ndarray, np.generic)):
            numpy_cols.append(name)
    return mark(table, numpy_cols) if numpy_cols else table


def mark_nested(table: pa.Table, name: str) -> pa.Table:
    """``table`` with its list<struct> column ``name`` marked: the numeric list fields of its
    structs come back as read-only arrays (A.10's values), the rest as Python values."""
    fields = [f.with_metadata({**(f.metadata or {}), VALUES_KEY: _NESTED}) if f.name == name
              else f for f in table.schema]
    return pa.Table.from_arrays(table.columns, schema=pa.schema(fields, table.schema.metadata))


def _field_marked(field: pa.Field) -> bool:
    md = field.metadata
    return bool(md) and md.get(VALUES_KEY) in (_NUMPY, _NESTED)


def _field_nested(field: pa.Field) -> bool:
    md = field.metadata
    return bool(md) and md.get(VALUES_KEY) == _NESTED


def is_marked(table: pa.Table, name: str) -> bool:
    return _field_marked(table.schema.field(name))


def concat_marks(tables: Sequence[pa.Table], out: pa.Table) -> pa.Table:
    """``out``, the concatenation of ``tables``, with a column marked only where every table
    that holds it marks it (Arrow keeps the first table's field metadata)."""
    if not any(_field_marked(f) for f in out.schema):
        return out
    unmarked = {f.name for t in tables for f in t.schema if not _field_marked(f)}
    if not unmarked.intersection(out.schema.names):
        return out
    fields = [f.remove_metadata() if f.name in unmarked and _field_marked(f) else f
              for f in out.schema]
    return pa.Table.from_arrays(out.columns, schema=pa.schema(fields, out.schema.metadata))


def column_values(col: pa.ChunkedArray | pa.Array, marked: bool, nested: bool = False) -> list:
    """One Python value per row: A.10 values for a marked column, ``to_pylist`` otherwise."""
    if not marked:
        return col.to_pylist()
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    out: list = []
    for chunk in chunks:
        out.extend(_nested_values(chunk) if nested else _chunk_values(chunk))
    return out


def _nested_values(arr: pa.Array) -> list:
    """Rows of a list<struct> column: lists of dicts whose numeric list fields are arrays."""
    t = arr.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)) \
            or not pa.types.is_struct(t.value_type) or arr.null_count:
        return arr.to_pylist()
    offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    structs = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    if structs.null_count:
        return arr.to_pylist()
    names = [structs.type.field(i).name for i in range(structs.type.num_fields)]
    cols = [_chunk_values(structs.field(i)) for i in range(len(names))]
    segs = [dict(zip(names, row)) for row in zip(*cols)] if cols else \
        [{} for _ in range(len(structs))]
    offsets = offsets - offsets[0]
    return [segs[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]


def _chunk_values(arr: pa.Array) -> list:
    t = arr.type
    if _is_numeric(t) or pa.types.is_timestamp(t) or pa.types.is_date(t) or \
            pa.types.is_duration(t):
        return _scalars(arr)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        dims, leaf = _fixed_dims(t.value_type)
        if _is_numeric(leaf) or pa.types.is_boolean(leaf):
            return _arrays(arr, dims)
    return arr.to_pylist()


def _is_numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _fixed_dims(t: pa.DataType) -> tuple[list[int], pa.DataType]:
    """The sizes of the fixed-size lists nested in ``t`` and the type inside them."""
    dims = []
    while pa.types.is_fixed_size_list(t):
        dims.append(t.list_size)
        t = t.value_type
    return dims, t


def _scalars(arr: pa.Array) -> list:
    if not arr.null_count:
        return list(arr.to_numpy(zero_copy_only=False))
    values = iter(arr.drop_null().to_numpy(zero_copy_only=False))
    return [next(values) if v else None
            for v in arr.is_valid().to_numpy(zero_copy_only=False).tolist()]


def _leaf(values: pa.Array, start: int, stop: int, dims: list[int]) -> tuple[pa.Array, int]:
    """The leaf values of elements ``start:stop`` of a list's child (fixed-size lists inside it
    unnested by offset arithmetic, which keeps null slots in place) and the leaf count of one
    element."""
    width = 1
    for size in dims:
        values = values.values
        width *= size
    return values.slice(start * width, (stop - start) * width), width


def _arrays(arr: pa.Array, dims: list[int]) -> list:
    n = len(arr)
    if pa.types.is_fixed_size_list(arr.type):
        size = arr.type.list_size
        offsets = (np.arange(n + 1, dtype=np.int64) + arr.offset) * size
    else:
        offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    leaf, width = _leaf(arr.values, first, last, dims)
    offsets = (offsets - first) * width
    nulls = leaf.null_count
    values = (leaf.fill_null(False if pa.types.is_boolean(leaf.type) else 0) if nulls
              else leaf).to_numpy(zero_copy_only=False)
    if values.flags.writeable:  # a copy (bool bits, filled nulls): read-only like a view
        values.setflags(write=False)
    shape = tuple(dims)
    out = [values[a:b].reshape((-1, *shape)) if shape else values[a:b]
           for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
    if arr.null_count or nulls:
        has_null = np.zeros(n, dtype=bool)
        if nulls:  # rows holding a null element: Python lists, as A.10 says
            cum = np.concatenate(([0], np.cumsum(leaf.is_null().to_numpy(zero_copy_only=False))))
            has_null = cum[offsets[1:]] > cum[offsets[:-1]]
        valid = arr.is_valid().to_numpy(zero_copy_only=False)
        for i in np.flatnonzero(has_null | ~valid).tolist():
            out[i] = arr[i].as_py() if valid[i] else None
    return out


def payload_rows(table: pa.Table, names: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of ``table`` (columns ``names``) as dicts, each column converted once."""
    cols = [column_values(table.column(c), _field_marked(table.schema.field(c)),
                          _field_nested(table.schema.field(c))) for c in names]
    return [dict(zip(names, row)) for row in zip(*cols)] if cols else \
        [{} for _ in range(table.num_rows)]
