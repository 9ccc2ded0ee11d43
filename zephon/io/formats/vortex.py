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

from zephon.block import take_table
from zephon.io.errors import DataError
from zephon.io.formats.base import Capabilities, Resources, ShardFormat, ShardRef, ShardStats
from zephon.io.storage.local_copy import whole_local_copy
from zephon.payload_values import mark

__all__ = ["VORTEX", "VortexFormat", "VortexShardReader"]

_NAME_KEYS = ("name", "path", "basename", "file", "filename")


def _vortex() -> Any:
    try:
        import vortex
    except ImportError as e:
        raise ImportError("reading Vortex files needs the vortex-data package: "
                          "pip install 'zephon[vortex]'") from e
    return vortex


def _plain_types(table: pa.Table) -> pa.Table:
    """String and binary views as plain strings and bytes (what the rest of Zephon reads)."""
    fields = []
    for f in table.schema:
        t = f.type
        if t == pa.string_view():
            t = pa.large_string()
        elif t == pa.binary_view():
            t = pa.large_binary()
        fields.append(f.with_type(t))
    schema = pa.schema(fields, table.schema.metadata)
    return table if schema == table.schema else table.cast(schema)


def _open(ref: ShardRef, path: str) -> Any:
    try:
        return _vortex().open(path)
    except (RuntimeError, ValueError, OSError) as e:
        raise DataError(f"not a readable Vortex file: {str(e).splitlines()[0]}",
                        dataset=ref.dataset, shard=ref.display) from e


class VortexShardReader:
    """One Vortex file opened in this process; any rows, any order."""

    def __init__(self, ref: ShardRef, res: Resources) -> None:
        self.ref = ref
        self._file = _open(ref, whole_local_copy(ref, res))
        self.rows = len(self._file)
        if ref.rows is not None and self.rows != ref.rows:
            raise DataError(f"file holds {self.rows} rows but {ref.rows} were counted at "
                            "discovery: it changed since (rebuild index.json or recreate the "
                            "Dataset)", dataset=ref.dataset, shard=ref.display)
        self._names = [f.name for f in self._file.to_arrow(limit=0).schema]

    def read_table(self, rows: np.ndarray, columns: list[str] | None = None) -> pa.Table:
        rows = np.ascontiguousarray(rows, dtype=np.int64).ravel()
        if len(rows) and (rows.min() < 0 or rows.max() >= self.rows):
            bad = int(rows[(rows < 0) | (rows >= self.rows)][0])
            raise IndexError(f"{self.ref.label}: row index {bad} out of range for a file of "
                             f"{self.rows} rows")
        if columns is not None and (missing := [c for c in columns if c not in self._names]):
            raise ValueError(f"{self.ref.label}: no column(s) {missing}; the file has "
                             f"{self._names}")
        unique, where = np.unique(rows, return_inverse=True)
        vx = _vortex()
        try:
            found = self._file.to_arrow(
                columns, indices=vx.array(pa.array(unique.astype(np.uint64)))).read_all()
        except (RuntimeError, ValueError, OSError) as e:
            first, last = (int(unique[0]), int(unique[-1])) if len(unique) else (0, 0)
            raise DataError(f"cannot read rows {first + 1}..{last + 1}: "
                            f"{str(e).splitlines()[0]}", dataset=self.ref.dataset,
                            shard=self.ref.display) from e
        found = _plain_types(found)
        if len(unique) != len(rows) or (unique != rows).any():
            found = take_table(found, where.astype(np.int64))
        return mark(found)

    def read_payloads(self, rows: np.ndarray) -> list[dict]:
        from zephon.payload_values import payload_rows

        table = self.read_table(rows)
        return payload_rows(table, table.column_names)

    def close(self) -> None:
        self._file = None


class VortexFormat(ShardFormat):
    name = "vortex"
    suffixes = (".vortex",)
    capabilities = Capabilities(index_file=True)
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
