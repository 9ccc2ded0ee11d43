"""The text ``tokenize`` reads from each record, and the records it cannot read.

A record's field is text (a string, or bytes that are UTF-8), or it is bad: missing, null, or a
value of another type. Arrow tells missing from null: a top-level column listed in the block's
``sparse`` set has nulls where the record had no such key (``zephon.block``); a null parent
object makes a nested path missing. Columnar blocks are classified with Arrow compute over the
whole column; Python-object blocks (payloads Arrow could not hold, such as a field that mixes
strings and numbers) are classified in the loop that reads them anyway.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from zephon.block import Block, record_location
from zephon.io.errors import DataError

OK, MISSING, NULL, NOT_TEXT, NOT_UTF8 = 0, 1, 2, 3, 4
_ABSENT = object()


class MissingFieldError(DataError, KeyError):
    """The tokenized field is missing or null (a ``KeyError`` too, as it used to be)."""

    __str__ = DataError.__str__  # not KeyError's quoted repr


def read_texts(block: Block, field: str, missing_field: str) -> tuple[pa.Array, np.ndarray, str]:
    """(texts, status, type name): one string per record ("" where it is not OK), one status
    code per record, and the offending type's name when a record holds a non-text value.
    ``missing_field="empty"`` reads missing and null fields as empty text (status OK)."""
    if block.columnar:
        texts, status, kind = _columnar(block, field)
    else:
        texts, status, kind = _objects(block.payload_list(), field)
    if missing_field == "empty":
        status[(status == MISSING) | (status == NULL)] = OK
    return texts, status, kind


def _columnar(block: Block, field: str) -> tuple[pa.Array, np.ndarray, str]:
    n = len(block)
    table: pa.Table = block.payload
    parts = field.split(".")
    status = np.zeros(n, dtype=np.int8)
    if parts[0] not in table.column_names:
        status[:] = MISSING
        return pa.array([""] * n, pa.string()), status, ""
    col = table.column(parts[0]).combine_chunks()
    missing = _nulls(col)
    if parts[0] not in block.sparse:  # explicit nulls at the top level: null, not missing
        null_here, missing = missing, np.zeros(n, dtype=bool)
    else:
        null_here = np.zeros(n, dtype=bool)
    for p in parts[1:]:
        if not pa.types.is_struct(col.type) or col.type.get_field_index(p) < 0:
            status[:] = MISSING
            return pa.array([""] * n, pa.string()), status, ""
        missing |= _nulls(col)  # a null parent object: the nested key is not there
        col = pc.struct_field(col, p)
        null_here = _nulls(col) & ~missing
    status[missing] = MISSING
    status[null_here] = NULL
    present = status == OK
    kind = ""
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        col, bad = _utf8(col)
        status[bad & present] = NOT_UTF8
    elif not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
              or pa.types.is_null(col.type)):
        kind = str(col.type)
        status[present] = NOT_TEXT
        col = pa.nulls(n, pa.string())
    if pa.types.is_null(col.type):
        col = pa.nulls(n, pa.string())
    return (pc.fill_null(col, "") if col.null_count else col), status, kind


def _nulls(col: Any) -> np.ndarray:
    if not col.null_count:
        return np.zeros(len(col), dtype=bool)
    return pc.is_null(col).to_numpy(zero_copy_only=False)


def _utf8(col: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """A binary column as strings; rows that are not UTF-8 become null and are flagged."""
    try:
        return pc.cast(col, pa.string()), np.zeros(len(col), dtype=bool)
    except pa.ArrowInvalid:
        pass
    # the error path only: find the rows the cast refused
    values = col.to_pylist()
    bad = np.zeros(len(values), dtype=bool)
    texts: list[str | None] = []
    for i, v in enumerate(values):
        try:
            texts.append(None if v is None else v.decode("utf-8"))
        except UnicodeDecodeError:
            bad[i] = True
            texts.append(None)
    return pa.array(texts, pa.string()), bad


def _objects(payloads: list, field: str) -> tuple[pa.Array, np.ndarray, str]:
    status = np.zeros(len(payloads), dtype=np.int8)
    texts: list[str] = []
    kind = ""
    parts = field.split(".")
    for i, p in enumerate(payloads):
        v = _get_path(p, parts)
        if isinstance(v, str):
            texts.append(v)
            continue
        text = ""
        if v is _ABSENT:
            status[i] = MISSING
        elif v is None:
            status[i] = NULL
        elif isinstance(v, bytes | bytearray):
            try:
                text = bytes(v).decode("utf-8")
            except UnicodeDecodeError:
                status[i] = NOT_UTF8
        else:
            status[i] = NOT_TEXT
            kind = kind or type(v).__name__
        texts.append(text)
    return pa.array(texts, pa.string()), status, kind


def _get_path(payload: Any, parts: list[str]) -> Any:
    cur = payload
    for p in parts:
        if not isinstance(cur, dict) or p not in cur:
            return _ABSENT
        cur = cur[p]
    return cur


def bad_record_error(block: Block, status: np.ndarray, kind: str, field: str,
                     datasets: list | None) -> DataError:
    """The error for the first bad record of a block, naming dataset, shard and row."""
    bad = np.flatnonzero(status != OK)
    i = int(bad[0])
    code = int(status[i])
    what = {MISSING: f"field {field!r} is missing",
            NULL: f"field {field!r} is null",
            NOT_TEXT: f"field {field!r} holds a {kind} value, not text",
            NOT_UTF8: f"field {field!r} holds bytes that are not UTF-8"}[code]
    fix = ("missing_field='empty' reads it as empty text, on_bad_record='skip' skips the record"
           if code in (MISSING, NULL) else
           "convert it with a map() before tokenize, or on_bad_record='skip' skips the record")
    more = f"; {len(bad) - 1} more bad records in this block" if len(bad) > 1 else ""
    name, shard, row = record_location(block, i, datasets)
    sample = block.ids()[i]
    message = f"tokenize: {what} (sample {sample}; {fix}){more}"
    cls = MissingFieldError if code in (MISSING, NULL) else DataError
    return cls(message, dataset=name, shard=shard, row=row)
