"""WebDataset as a registry entry: ``*.tar`` shards (``*.tar.gz`` decompressed once into the
node cache) whose members are grouped by key into records.

Records are what ``webdataset``'s own reader gives without decoders: ``__key__``, ``__url__``
(the shard's path or URL), ``__local_path__`` for a shard on this machine's filesystem, and one
``bytes`` field per member extension (``"jpg"``, ``"txt"``,
``"json"``, ``"seg.png"``...); a record without some extension simply lacks that key. A member
index built once per shard (tar_members.py, cached in the node cache) gives the row count at
discovery and random access by row: a read gathers the members' bytes straight from the
memory-mapped file, one Arrow binary column per extension, with no per-record Python loop.
Remote shards are copied whole into the node cache first (tar has no index to range-read by).
"""

from __future__ import annotations

import mmap
import os

import numpy as np
import pyarrow as pa

from zephon._ext import kernel
from zephon.io.formats.base import Capabilities, Resources, ShardFormat, ShardRef, ShardStats
from zephon.io.formats.reader_checks import check_row_count, check_rows
from zephon.io.formats.records import payloads_from_table, with_sparse
from zephon.io.formats.tar_members import member_index
from zephon.io.storage.local_copy import decoded_local_copy

__all__ = ["WEBDATASET", "WebDatasetFormat", "WebDatasetShardReader"]


def _map(path: str) -> np.ndarray:
    with open(path, "rb") as f:
        if not f.seek(0, 2):
            return np.empty(0, dtype=np.uint8)
        return np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), dtype=np.uint8)


class WebDatasetShardReader:
    """One tar shard opened in this process: its member index and the mapped file."""

    def __init__(self, ref: ShardRef, res: Resources) -> None:
        self.ref = ref
        path = decoded_local_copy(ref, res)
        ix = member_index(ref, path, res)
        self.rows = ix.rows
        check_row_count(ref, self.rows, "records")
        self._bytes = _map(path)
        # webdataset names the file it read when that is a local one
        self._constants = {"__local_path__": ref.display} if ref.location.is_local else {}
        self._fields = ix.fields
        self._keys = pa.array(ix.keys, pa.string())
        # member of (record, field), -1 where the record lacks the field
        self._member = np.full((self.rows, len(ix.fields)), -1, dtype=np.int64)
        self._member[ix.record_of, ix.field_of] = np.arange(len(ix.offsets), dtype=np.int64)
        self._offsets, self._sizes = np.asarray(ix.offsets), np.asarray(ix.sizes)
        self._record_bytes = np.bincount(ix.record_of, weights=ix.sizes,
                                         minlength=self.rows).astype(np.int64)

    def _field(self, j: int, rows: np.ndarray) -> pa.Array:
        member = self._member[rows, j]
        present = member >= 0
        starts = np.where(present, self._offsets[member], 0)
        ends = starts + np.where(present, self._sizes[member], 0)
        total = int((ends - starts).sum())
        data = pa.allocate_buffer(total)
        _, offsets = kernel("lineindex").gather_spans(self._bytes, starts, ends,
                                                      np.frombuffer(data, dtype=np.uint8))
        nulls = len(rows) - int(np.count_nonzero(present))
        validity = None if not nulls else pa.py_buffer(np.packbits(present, bitorder="little"))
        if total > np.iinfo(np.int32).max:
            return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(rows), [
                validity, pa.py_buffer(offsets.astype(np.int64)), data], nulls)
        return pa.BinaryArray.from_buffers(pa.binary(), len(rows), [
            validity, pa.py_buffer(offsets.astype(np.int32)), data], nulls)

    def read_table(self, rows: np.ndarray, columns: list[str] | None = None) -> pa.Table:
        rows = np.ascontiguousarray(rows, dtype=np.int64).ravel()
        check_rows(rows, self.rows, self.ref.label, "records")
        names = ["__key__", "__url__", *self._constants, *self._fields]
        wanted = names if columns is None else [c for c in columns if c in names]
        arrays, sparse = [], []
        for name in wanted:
            if name == "__key__":
                arrays.append(self._keys.take(pa.array(rows)))
            elif name == "__url__" or name in self._constants:
                value = self.ref.display if name == "__url__" else self._constants[name]
                arrays.append(pa.array([value], pa.string()).take(
                    pa.array(np.zeros(len(rows), dtype=np.int64))))
            else:
                arr = self._field(self._fields.index(name), rows)
                arrays.append(arr)
                if arr.null_count:
                    sparse.append(name)  # a null is a member the record does not have
        return with_sparse(pa.Table.from_arrays(arrays, names=wanted), sparse)

    def read_payloads(self, rows: np.ndarray) -> list[dict]:
        return payloads_from_table(self.read_table(rows))

    def record_bytes(self, rows: np.ndarray) -> np.ndarray:
        """The bytes of each record's members (tar headers and padding left out)."""
        rows = np.asarray(rows, dtype=np.int64)
        check_rows(rows, self.rows, self.ref.label, "records")
        return self._record_bytes[rows]

    def close(self) -> None:
        self._bytes = None  # the map closes when the last view of it is gone


class WebDatasetFormat(ShardFormat):
    name = "webdataset"
    suffixes = (".tar", ".tar.gz")
    capabilities = Capabilities(record_sizes=True, index_file=True)

    def count(self, ref: ShardRef, res: Resources, *, keep: bool) -> ShardStats:
        """Records from the member index (kept in the node cache: the first open reuses it)."""
        path = decoded_local_copy(ref, res)
        ix = member_index(ref, path, res)
        size = os.path.getsize(path)
        extra = {"uncompressed_bytes": size} if size != ref.size else {}
        return ShardStats(ix.rows, size, extra)

    def open(self, ref: ShardRef, res: Resources) -> WebDatasetShardReader:
        return WebDatasetShardReader(ref, res)

    def warm(self, ref: ShardRef, res: Resources) -> None:
        """The (decoded) local copy and its member index."""
        member_index(ref, decoded_local_copy(ref, res), res)


WEBDATASET = WebDatasetFormat()
