"""A third-party shard format for the registry tests: ``*.tsv`` files of ``id<TAB>text`` lines.

It is what a plug-in author writes: one module, a ``ShardFormat`` subclass and an instance."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from zephon.io.errors import DataError
from zephon.io.formats.base import Capabilities, Resources, ShardFormat, ShardRef, ShardStats
from zephon.io.storage.local_copy import whole_local_copy


def _lines(ref: ShardRef, res: Resources) -> list[bytes]:
    with open(whole_local_copy(ref, res), "rb") as f:
        return [line for line in f.read().split(b"\n") if line]


class TsvReader:
    def __init__(self, ref: ShardRef, res: Resources) -> None:
        self.ref = ref
        self._lines = _lines(ref, res)
        self.rows = len(self._lines)

    def _record(self, row: int) -> dict:
        key, sep, text = self._lines[row].partition(b"\t")
        if not sep:
            raise DataError("no tab", dataset=self.ref.dataset, shard=self.ref.display,
                            row=row + 1)
        return {"id": int(key), "text": text.decode()}

    def read_payloads(self, rows: np.ndarray) -> list[dict]:
        return [self._record(int(r)) for r in rows]

    def read_table(self, rows: np.ndarray, columns: list[str] | None = None) -> pa.Table:
        table = pa.Table.from_pylist(self.read_payloads(rows),
                                     schema=pa.schema([("id", pa.int64()), ("text", pa.string())]))
        return table if columns is None else table.select(columns)

    def record_bytes(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray([len(self._lines[int(r)]) + 1 for r in rows], dtype=np.int64)

    def close(self) -> None:
        self._lines = []


class TsvFormat(ShardFormat):
    name = "tsv"
    suffixes = (".tsv",)
    capabilities = Capabilities(record_sizes=True, index_file=True)

    def count(self, ref: ShardRef, res: Resources, *, keep: bool) -> ShardStats:
        lines = _lines(ref, res)
        return ShardStats(len(lines), sum(len(x) + 1 for x in lines))

    def open(self, ref: ShardRef, res: Resources) -> TsvReader:
        return TsvReader(ref, res)


TSV = TsvFormat()
