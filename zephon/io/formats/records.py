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

Flat records of scalar values skip all that: ``flat_record_table`` builds their table from the
``lineindex_records`` kernel's decoded values with Arrow's JSON typing rules, and declines
(None) whatever it cannot reproduce exactly.

Member counts prove the nested case: the colons outside strings in a JSON line (the
``lineindex`` kernel) equal the members Arrow materialised for that row unless a nested key
was filled in.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zephon._ext import kernel
from zephon.block import NotColumnar
from zephon.payload_values import mark_from_payloads

__all__ = [
    "SPARSE_KEY",
    "arrow_member_counts",
    "beyond_int64",
    "flat_record_table",
    "has_nested_objects",
    "has_nulls",
    "lone_surrogate",
    "payloads_from_table",
    "sparse_columns",
    "table_from_dicts",
    "with_sparse",
]

SPARSE_KEY = b"zephon.sparse"
LONG_DIGITS = re.compile(rb"[0-9]{19}")  # a JSON number that may not fit 64 bits


def with_sparse(table: pa.Table, columns: Sequence[str]) -> pa.Table:
    if not columns:
        return table
    md = dict(table.schema.metadata or {})
    md[SPARSE_KEY] = ",".join(columns).encode()
    return table.replace_schema_metadata(md)


def flat_record_table(keys: list[bytes], values: np.ndarray, vstart: np.ndarray,
                      vend: np.ndarray, kinds: np.ndarray, ints: np.ndarray) -> pa.Table | None:
    """The table ``pyarrow.json`` (plus the sparse marking of ``JsonlShardReader``) makes of
    the records ``lineindex_records.flat_records`` decoded, or None where that is not certain.
    None too when there is no column (the general reader knows the row count of a table
    without columns)."""
    if not keys:
        return None
    k = kernel("lineindex_records")
    arrays, sparse = [], []
    for j in range(len(keys)):
        counts = np.bincount(kinds[j], minlength=k.KIND_NULL + 1)
        if counts[k.KIND_ABSENT] and counts[k.KIND_NULL]:
            return None  # absent keys and nulls in one column: the general path says NotColumnar
        arr = _typed_column(k, counts, values, vstart[j], vend[j], kinds[j], ints[j])
        if arr is None:
            return None
        arrays.append(arr)
        if counts[k.KIND_ABSENT]:
            sparse.append(keys[j].decode())
    table = pa.Table.from_arrays(arrays, names=[key.decode() for key in keys])
    return with_sparse(table, sparse)


def _typed_column(k, counts: np.ndarray, values: np.ndarray, starts: np.ndarray,
                  ends: np.ndarray, kinds: np.ndarray, ints: np.ndarray) -> pa.Array | None:
    """One column the way Arrow's JSON reader types it: null alone -> null; strings -> string;
    integers alone -> int64; integers and other numbers -> double; booleans -> bool; nulls in
    any of those -> validity. Other mixes make Arrow fail or guess: None."""
    n = len(kinds)
    valid = (kinds != k.KIND_ABSENT) & (kinds != k.KIND_NULL)
    present = {kind for kind in (k.KIND_STRING, k.KIND_INT, k.KIND_FLOAT, k.KIND_TRUE,
                                 k.KIND_FALSE) if counts[kind]}
    if not present:
        return pa.nulls(n)
    if present == {k.KIND_STRING}:
        return _string_column(values, starts, ends, valid)
    if present == {k.KIND_INT}:
        return pa.Array.from_buffers(pa.int64(), n, [_validity(valid),
                                                    pa.py_buffer(np.ascontiguousarray(ints))],
                                     n - int(np.count_nonzero(valid)))
    if present <= {k.KIND_INT, k.KIND_FLOAT}:
        return _double_column(k, values, starts, ends, valid, kinds, ints)
    if present <= {k.KIND_TRUE, k.KIND_FALSE}:
        bits = pa.py_buffer(np.packbits(kinds == k.KIND_TRUE, bitorder="little"))
        return pa.Array.from_buffers(pa.bool_(), n, [_validity(valid), bits],
                                     n - int(np.count_nonzero(valid)))
    return None


def _validity(valid: np.ndarray) -> pa.Buffer | None:
    return None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))


def _string_column(values: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                   valid: np.ndarray) -> pa.Array | None:
    """The values' bytes as a string array, null where not ``valid``; None past 32-bit offsets
    (Arrow's reader would split such a column into chunks)."""
    n = len(valid)
    nulls = n - int(np.count_nonzero(valid))
    if nulls:
        starts, ends = np.where(valid, starts, 0), np.where(valid, ends, 0)
    size = int((ends - starts).sum())
    if size > np.iinfo(np.int32).max:
        return None
    data = pa.allocate_buffer(size)  # Arrow's pool recycles pages; see gather_spans
    _, offsets = kernel("lineindex").gather_spans(values, starts, ends,
                                                  np.frombuffer(data, dtype=np.uint8))
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets.astype(np.int32)), data,
                                       _validity(valid), nulls)


def _double_column(k, values: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                   valid: np.ndarray, kinds: np.ndarray, ints: np.ndarray) -> pa.Array | None:
    """Numbers typed double: Arrow's reader converts each number's text with the parser its
    string-to-double cast uses, so the cast of the same texts gives the same doubles. Integers
    past 2**53 are left to the general path (its per-record fallback refuses to round them)."""
    big = (ints < -2**53) | (ints > 2**53)  # np.abs would overflow on -2**63
    if (big & (kinds == k.KIND_INT)).any():
        return None
    texts = _string_column(values, starts, ends, valid)
    if texts is None:
        return None
    try:
        return pc.cast(texts, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def sparse_columns(table: pa.Table) -> frozenset[str]:
    """The columns of a reader's table in which a null stands for a key the record lacks.

    Args:
        table: A table from ``Dataset.read_table``.

    Returns:
        Their names.
    """
    raw = (table.schema.metadata or {}).get(SPARSE_KEY)
    return frozenset(x for x in raw.decode().split(",") if x) if raw else frozenset()


def payloads_from_table(table: pa.Table) -> list[dict]:
    """Python dicts of a reader's table, with absent keys left out (the record view).

    Args:
        table: A table from ``Dataset.read_table``.

    Returns:
        One dict per row.
    """
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
    table = mark_from_payloads(pa.Table.from_struct_array(struct), payloads)
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


def beyond_int64(table: pa.Table) -> bool:
    """Whether a floating-point value of the table (at any depth) lies outside int64's range:
    where Arrow's reader may have turned an integer it could not hold into a double. Checked
    per column, no per-record loop; a double that large written as such only costs a parse."""
    def huge(arr: pa.Array) -> bool:
        t = arr.type
        if pa.types.is_floating(t):
            if not len(arr) or arr.null_count == len(arr):
                return False
            mm = pc.min_max(pc.abs(arr))
            return mm["max"].as_py() is not None and mm["max"].as_py() >= 2.0 ** 63
        if pa.types.is_struct(t):
            return any(huge(arr.field(i)) for i in range(t.num_fields))
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return huge(arr.flatten())
        return False

    return any(huge(chunk) for col in table.columns for chunk in col.chunks)


def lone_surrogate(obj: Any) -> str | None:
    """The first lone surrogate (escaped, ``\\ud800``) in the strings of a parsed record, or
    None: Python's json takes them, but no text encodes them (UTF-8 refuses)."""
    import json

    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        return e.object[e.start:e.end].encode("unicode_escape").decode()
    return None
