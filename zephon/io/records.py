"""Dict records as Arrow tables, keeping "key absent" apart from "key is null".

Arrow has one schema per table, so a record without key ``k`` gets a null in column ``k``. The
block layer's convention (``zephon.block``): schema metadata ``b"zephon.sparse"`` lists, comma
separated, the top-level columns in which a null means "absent"; record views drop those keys.
Readers here only return a table when that convention reproduces every record exactly:

- no nulls anywhere: exact as is;
- a top-level column whose nulls are all absent keys: listed as sparse;
- a top-level column whose nulls are all explicit ``null``: not listed;
- a column holding both, or an absent key inside a nested object: ``NotColumnar`` (callers
  then use ``read_payloads``, which returns the exact dicts).

Flat records whose values are all strings skip all that: ``flat_string_table`` builds their
table from the ``lineindex_records`` kernel's decoded values, where every null is an absent key.

Member counts prove the nested case: the colons outside strings in a JSON line (the
``lineindex`` kernel) equal the members Arrow materialised for that row unless a nested key
was filled in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from zephon._ext import kernel
from zephon.block import NotColumnar

__all__ = [
    "SPARSE_KEY",
    "arrow_member_counts",
    "flat_string_table",
    "has_nested_objects",
    "has_nulls",
    "payloads_from_table",
    "sparse_columns",
    "table_from_dicts",
    "with_sparse",
]

SPARSE_KEY = b"zephon.sparse"


def with_sparse(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    if not columns:
        return table
    md = dict(table.schema.metadata or {})
    md[SPARSE_KEY] = ",".join(columns).encode()
    return table.replace_schema_metadata(md)


def flat_string_table(keys: list[bytes], values: np.ndarray, vstart: np.ndarray,
                      vend: np.ndarray) -> pa.Table | None:
    """String columns from ``lineindex_records.flat_strings``: a record without a key gets a
    null there, listed as sparse. None when there is no column (the general reader knows the
    row count of a table without columns) or a column outgrows 32-bit offsets (Arrow's reader
    would split it into chunks)."""
    if not keys:
        return None
    gather = kernel("lineindex").gather_spans
    n = vstart.shape[1]
    arrays, sparse = [], []
    for j in range(len(keys)):
        starts, ends = vstart[j], vend[j]
        present = starts >= 0
        absent = n - int(np.count_nonzero(present))
        if absent:
            starts, ends = np.where(present, starts, 0), np.where(present, ends, 0)
        size = int((ends - starts).sum())
        if size > np.iinfo(np.int32).max:
            return None
        data = pa.allocate_buffer(size)  # Arrow's pool recycles pages; see gather_spans
        _, offsets = gather(values, starts, ends, np.frombuffer(data, dtype=np.uint8))
        validity = pa.py_buffer(np.packbits(present, bitorder="little")) if absent else None
        arrays.append(pa.StringArray.from_buffers(
            n, pa.py_buffer(offsets.astype(np.int32)), data, validity, absent))
        if absent:
            sparse.append(keys[j].decode())
    table = pa.Table.from_arrays(arrays, names=[k.decode() for k in keys])
    return with_sparse(table, sparse)


def sparse_columns(table: pa.Table) -> frozenset[str]:
    raw = (table.schema.metadata or {}).get(SPARSE_KEY)
    return frozenset(x for x in raw.decode().split(",") if x) if raw else frozenset()


def payloads_from_table(table: pa.Table) -> list[dict]:
    """Python dicts of a reader's table, with absent keys left out (the record view)."""
    rows = table.to_pylist()
    sparse = sparse_columns(table)
    if sparse:
        rows = [{k: v for k, v in r.items() if v is not None or k not in sparse} for r in rows]
    return rows


def _array_has_nulls(arr: pa.Array) -> bool:
    if arr.null_count:
        return True
    t = arr.type
    if pa.types.is_struct(t):
        return any(_array_has_nulls(arr.field(i)) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _array_has_nulls(arr.flatten())
    return False


def has_nulls(table: pa.Table) -> bool:
    return any(_array_has_nulls(chunk) for col in table.columns for chunk in col.chunks)


def _type_has_struct(t: pa.DataType) -> bool:
    if pa.types.is_struct(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _type_has_struct(t.value_type)
    return False


def has_nested_objects(schema: pa.Schema) -> bool:
    return any(_type_has_struct(f.type) for f in schema)


def _member_counts(arr: pa.Array) -> np.ndarray:
    """Object members Arrow holds per element (struct fields of valid structs, recursively)."""
    t = arr.type
    n = len(arr)
    if pa.types.is_struct(t):
        inner = np.zeros(n, dtype=np.int64)
        for i in range(t.num_fields):
            inner += _member_counts(arr.field(i))
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        return np.where(valid, t.num_fields + inner, 0)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        inner = _member_counts(arr.values)
        cum = np.concatenate(([0], np.cumsum(inner)))
        return cum[offsets[1:]] - cum[offsets[:-1]]
    if pa.types.is_fixed_size_list(t):
        size = t.list_size
        inner = _member_counts(arr.flatten())
        cum = np.concatenate(([0], np.cumsum(inner)))
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        ends = np.cumsum(np.where(valid, size, 0))
        return cum[ends] - cum[ends - np.where(valid, size, 0)]
    return np.zeros(n, dtype=np.int64)


def arrow_member_counts(table: pa.Table) -> np.ndarray:
    """Per row: top-level columns plus nested struct members, as Arrow materialised them."""
    counts = np.full(table.num_rows, table.num_columns, dtype=np.int64)
    for col in table.columns:
        if _type_has_struct(col.type):
            counts += np.concatenate([_member_counts(c) for c in col.chunks] or [np.zeros(0)])
    return counts


def _python_member_counts(obj: Any) -> int:
    if type(obj) is dict:
        return len(obj) + sum(_python_member_counts(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_python_member_counts(v) for v in obj)
    return 0


def table_from_dicts(payloads: Sequence[Any]) -> pa.Table:
    """A table that reproduces ``payloads`` exactly under the sparse convention, or
    NotColumnar. The table is a copy: the payloads are never modified."""
    if not all(type(p) is dict for p in payloads):
        raise NotColumnar("payloads are not all dicts")
    if not payloads:
        return pa.table({})
    try:
        struct = pa.array(payloads)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError,
            ValueError, OverflowError) as e:
        raise NotColumnar(f"payloads do not fit one Arrow schema: {e}") from e
    if not pa.types.is_struct(struct.type):
        raise NotColumnar(f"payloads became {struct.type}, not a struct")
    table = pa.Table.from_struct_array(struct)
    if not has_nulls(table):
        return table
    sparse = []
    absent_top = np.zeros(len(payloads), dtype=np.int64)
    for name in table.column_names:
        if not table.column(name).null_count:
            continue
        missing = np.fromiter((name not in p for p in payloads), dtype=bool, count=len(payloads))
        if missing.any():
            nulls = np.asarray(table.column(name).is_null().to_numpy(zero_copy_only=False))
            if (nulls & ~missing).any():
                raise NotColumnar(f"column {name!r} holds both absent keys and nulls")
            sparse.append(name)
            absent_top += missing
    if has_nested_objects(table.schema):
        python = np.fromiter((_python_member_counts(p) for p in payloads), dtype=np.int64,
                             count=len(payloads))
        if (arrow_member_counts(table) - python - absent_top).any():
            raise NotColumnar("nested objects differ in their keys; Arrow would add nulls")
    return with_sparse(table, sparse)
