"""Records that cannot be decoded, and the dataset's policy for them (``on_bad_record``).

A record is *bad* when its bytes cannot become a payload at all: a JSONL line that is not valid
UTF-8, not valid JSON, or not a JSON object. Whether a line is bad depends on that line alone,
never on the lines read with it, so every reader (the flat-records kernel, Arrow's JSON reader,
the line-by-line parser), every grouping of pointers into reads and every runner agree on it.

``"raise"`` (the default): the read fails with ``BadRecordError``, a ``DataError`` naming the
dataset, the shard and the 1-based line. ``"skip"``: ``read_skipping`` leaves the bad rows out
and says which; fetch (``zephon/ops/fetch.py``) drops their pointers and counts them with
``accounting.count("fetch", "bad_record", ...)``. A skipped pointer is never delivered, so it is
never held by an operator either: checkpoints name delivered records only, and a restore
re-reads good lines, which stay good.

Reads of clean data pay nothing for this: the bad rows are looked for only after a read failed
on one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zephon.io.errors import DataError

__all__ = ["BAD_RECORD_POLICIES", "BadRecordError", "read_skipping"]

BAD_RECORD_POLICIES = ("raise", "skip")


class BadRecordError(DataError):
    """A record whose bytes cannot be decoded (bad UTF-8, invalid JSON, not an object)."""


def read_skipping(dataset: Any, shard_id: int, rows: np.ndarray, *, columnar: bool,
                  columns: list[str] | None = None) -> tuple[Any, np.ndarray | None]:
    """``(part, keep)``: the rows of one shard as ``dataset.read_table`` (``columnar``) or
    ``read_payloads`` give them, less the bad ones. ``keep`` is None when every row was read,
    else a bool mask over ``rows`` of those in ``part``. ``NotColumnar`` passes through, as from
    ``read_table``."""
    rows = np.asarray(rows, dtype=np.int64)

    def read(sel: np.ndarray) -> Any:
        if columnar:
            return dataset.read_table(shard_id, sel, columns=columns)
        return dataset.read_payloads(shard_id, sel)

    try:
        return read(rows), None
    except BadRecordError:
        keep = ~dataset.bad_rows(shard_id, rows)
        if keep.all():  # the error came from elsewhere: let it be seen
            raise
    try:
        return read(rows[keep]), keep
    except BadRecordError as e:  # a row judged good that a read rejects: a reader defect
        raise DataError(f"a record judged decodable failed to decode: {e.detail}",
                        dataset=e.dataset, shard=e.shard, line=e.line, row=e.row) from e
