"""Vortex files (``*.vortex``) as a registry entry, read in place through ``vortex-data``.

Vortex is columnar and compressed inside the format, with random access by row: a read asks
the file for the requested rows (sorted, each once: what Vortex's ``indices`` scan takes) and
puts them in the requested order with a ``take``. Local files are read where they lie; a
remote file is copied whole into the node cache first (a row count at discovery reads only the
footer, through ranged reads, when the shard is not about to be read). Row counts come from
the footer. Records are Arrow rows with the values of spec addendum A.10, as for Parquet:
numbers as NumPy scalars, numeric lists as read-only arrays; Vortex's string and binary views
arrive as plain strings and bytes.

An ``index.json`` at the root written by ``build-index vortex`` is tagged with the format; an
untagged one (the reference's) whose shards are all ``*.vortex`` files is claimed here, so
that it is not taken for an MDS index (spec §13 item 7).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from zephon.io.errors import DataError
from zephon.io.formats.base import Capabilities, Resources, ShardFormat, ShardRef, ShardStats
from zephon.io.formats.rows_ahead import RowsAhead, RowsAheadReader
from zephon.io.storage.local_copy import whole_local_copy
from zephon.payload_values import mark

__all__ = ["VORTEX", "VortexFormat", "VortexShardReader"]

_NAME_KEYS = ("name", "path", "basename", "file", "filename")
# rows spread over at most this many times their count are read as the range that covers them
# (a range scan costs a third of an ``indices`` scan per row, on ~2 KB text records)
DENSE = 3


def _vortex() -> Any:
    try:
        import vortex
    except ImportError as e:
        raise ImportError("reading Vortex files needs the vortex-data package: "
                          "pip install 'zephon[vortex]'") from e
    return vortex


def _plain_schema(schema: pa.Schema) -> pa.Schema:
    """String and binary views as plain strings and bytes (what the rest of Zephon reads), every
    column marked for A.10 values (``payload_values.mark``): the schema reads are cast to."""
    fields = []
    for f in schema:
        t = f.type
        if t == pa.string_view():
            t = pa.large_string()
        elif t == pa.binary_view():
            t = pa.large_binary()
        fields.append(f.with_type(t))
    return mark(pa.schema(fields, schema.metadata).empty_table()).schema


def _open(ref: ShardRef, path: str) -> Any:
    try:
        return _vortex().open(path)
    except (RuntimeError, ValueError, OSError) as e:
        raise DataError(f"not a readable Vortex file: {str(e).splitlines()[0]}",
                        dataset=ref.dataset, shard=ref.display) from e


class VortexShardReader(RowsAheadReader):
    """One Vortex file opened in this process; any rows, any order.

    A read of rows that follow one another is one range scan (what the pointer stream gives
    within a shard when shuffles are off, and in runs even with them); rows spread over not
    much more than their count are read as the range that covers them and picked in Vortex;
    others through an ``indices`` scan of the sorted distinct rows. Reads the engine announces
    run ahead on the read-ahead threads (``rows_ahead.py``)."""

    def __init__(self, ref: ShardRef, res: Resources) -> None:
        self.ref = ref
        self._vx = _vortex()
        self._file = _open(ref, whole_local_copy(ref, res))
        self.rows = len(self._file)
        if ref.rows is not None and self.rows != ref.rows:
            raise DataError(f"file holds {self.rows} rows but {ref.rows} were counted at "
                            "discovery: it changed since (rebuild index.json or recreate the "
                            "Dataset)", dataset=ref.dataset, shard=ref.display)
        self._schema = _plain_schema(self._file.to_arrow(limit=0).schema)
        self._names = self._schema.names
        self._ahead = RowsAhead(self._read)

    def read_table(self, rows: np.ndarray, columns: list[str] | None = None) -> pa.Table:
        rows = np.ascontiguousarray(rows, dtype=np.int64).ravel()
        if columns is None and (started := self._ahead.take(rows)) is not None:
            return started.result()
        return self._read(rows, columns)

    def _read(self, rows: np.ndarray, columns: list[str] | None = None) -> pa.Table:
        if len(rows) and (rows.min() < 0 or rows.max() >= self.rows):
            bad = int(rows[(rows < 0) | (rows >= self.rows)][0])
            raise IndexError(f"{self.ref.label}: row index {bad} out of range for a file of "
                             f"{self.rows} rows")
        if columns is not None and (missing := [c for c in columns if c not in self._names]):
            raise ValueError(f"{self.ref.label}: no column(s) {missing}; the file has "
                             f"{self._names}")
        schema = self._schema if columns is None else \
            pa.schema([self._schema.field(c) for c in columns], self._schema.metadata)
        if not len(rows):
            return schema.empty_table()
        try:
            found = self._scan(rows, columns).to_arrow_table()
        except (RuntimeError, ValueError, OSError) as e:
            first, last = int(rows.min()), int(rows.max())
            raise DataError(f"cannot read rows {first + 1}..{last + 1}: "
                            f"{str(e).splitlines()[0]}", dataset=self.ref.dataset,
                            shard=self.ref.display) from e
        return found.cast(schema)

    def _scan(self, rows: np.ndarray, columns: list[str] | None) -> Any:
        """The rows, in their order, as a Vortex array (of the file's own types)."""
        vx, lo, hi = self._vx, int(rows.min()), int(rows.max()) + 1
        if hi - lo <= DENSE * len(rows):
            found = self._file.to_repeated_scan(columns).execute(row_range=(lo, hi)).read_all()
            if hi - lo == len(rows) and rows[0] == lo and (np.diff(rows) == 1).all():
                return found
            return found.take(vx.array(pa.array((rows - lo).astype(np.uint64))))
        unique, where = np.unique(rows, return_inverse=True)
        found = self._file.scan(columns, indices=vx.array(pa.array(unique.astype(np.uint64))))
        found = found.read_all()
        if len(unique) == len(rows) and (unique == rows).all():
            return found
        return found.take(vx.array(pa.array(where.ravel().astype(np.uint64))))


class VortexFormat(ShardFormat):
    name = "vortex"
    suffixes = (".vortex",)
    capabilities = Capabilities(read_ahead=True, index_file=True)
    extra = "vortex"

    def claims_index(self, doc: dict[str, Any]) -> bool:
        """An untagged index whose shards are all ``.vortex`` files (the reference's)."""
        shards = doc.get("shards")
        if not isinstance(shards, list) or not shards:
            return False
        names = [next((s.get(k) for k in _NAME_KEYS if isinstance(s.get(k), str)), None)
                 if isinstance(s, dict) else None for s in shards]
        return all(isinstance(n, str) and n.lower().endswith(".vortex") for n in names)

    def count(self, ref: ShardRef, res: Resources, *, keep: bool) -> ShardStats:
        """Rows from the footer: of the local file, of the copy in the node cache when the
        shard is read soon (``keep``), else through ranged reads of the remote file."""
        if ref.location.is_local or keep:
            f = _open(ref, whole_local_copy(ref, res))
        else:
            with ref.location.open(ref.name, "rb") as raw:
                try:
                    f = _vortex().open_readable(raw)
                except (RuntimeError, ValueError, OSError) as e:
                    raise DataError(f"not a readable Vortex file: {str(e).splitlines()[0]}",
                                    dataset=ref.dataset, shard=ref.display) from e
                return ShardStats(len(f), ref.size)
        return ShardStats(len(f), ref.size)

    def open(self, ref: ShardRef, res: Resources) -> VortexShardReader:
        return VortexShardReader(ref, res)


VORTEX = VortexFormat()
