"""Arrow IPC files as a registry entry, chiefly Hugging Face ``datasets``' ``save_to_disk``.

A ``save_to_disk`` directory holds ``data-0000K-of-0000N.arrow`` files (Arrow IPC streams)
listed by its own index, ``state.json``; a ``DatasetDict`` adds ``dataset_dict.json`` and one
such folder per split, chosen with ``Dataset.from_path(..., split=)``. Plain ``*.arrow`` files
(IPC stream or file format) are read too, found by their suffix.

Shards are read in place, memory-mapped (a remote shard is copied whole into the node cache
first): opening maps the record batches without copying them, and rows are counted at
discovery from the IPC message headers, the bodies left untouched. Records are what
``datasets`` gives for its plain features (``ds[i]``): Python ints, floats, strings, bytes,
lists and dicts (``Image``/``Audio`` features come as their stored dicts, not decoded).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from zephon.io.errors import DataError
from zephon.io.formats.base import (
    Capabilities,
    Resources,
    RootView,
    ShardEntry,
    ShardFormat,
    ShardRef,
    ShardStats,
)
from zephon.io.formats.reader_checks import check_columns, check_row_count, check_rows
from zephon.io.storage.local_copy import whole_local_copy
from zephon.ragged_columns import take_table

__all__ = ["ARROW", "ArrowFormat", "ArrowShardReader"]

_FILE_MAGIC = b"ARROW1"


def _open_ipc(path: str, ref: ShardRef) -> tuple[Any, bool]:
    """(reader, is_file_format) over the memory-mapped file; DataError for no IPC data."""
    source = pa.memory_map(path)
    try:
        if source.read(6) == _FILE_MAGIC:
            return pa.ipc.open_file(source), True
        source.seek(0)
        return pa.ipc.open_stream(source), False
    except (pa.ArrowInvalid, OSError) as e:
        raise DataError(f"not an Arrow IPC file: {e}", dataset=ref.dataset,
                        shard=ref.display) from e


def _batches(path: str, ref: ShardRef) -> tuple[list[pa.RecordBatch], pa.Schema]:
    """The record batches, zero-copy views of the mapping; a batch that cannot be read is a
    DataError naming the first row it would hold."""
    reader, is_file = _open_ipc(path, ref)
    out: list[pa.RecordBatch] = []
    rows = 0
    try:
        if is_file:
            for i in range(reader.num_record_batches):
                out.append(reader.get_batch(i))
                rows += out[-1].num_rows
        else:
            while True:
                try:
                    out.append(reader.read_next_batch())
                except StopIteration:
                    break
                rows += out[-1].num_rows
    except (pa.ArrowInvalid, OSError) as e:
        raise DataError(f"cannot read the record batch after row {rows} (truncated or corrupt "
                        f"Arrow file?): {e}", dataset=ref.dataset, shard=ref.display,
                        row=rows + 1) from e
    return out, reader.schema


class ArrowShardReader:
    """One Arrow file, memory-mapped; any rows, any order."""

    def __init__(self, ref: ShardRef, res: Resources) -> None:
        self.ref = ref
        batches, schema = _batches(whole_local_copy(ref, res), ref)
        self._table = pa.Table.from_batches(batches, schema=schema)
        self.rows = self._table.num_rows
        check_row_count(ref, self.rows)

    def read_table(self, rows: np.ndarray, columns: list[str] | None = None) -> pa.Table:
        rows = np.asarray(rows, dtype=np.int64).ravel()
        check_rows(rows, self.rows, self.ref.label)
        table = self._table
        if columns is not None:
            check_columns(columns, table.column_names, self.ref.label)
            table = table.select(columns)
        table = table.replace_schema_metadata(None)  # datasets' features: not record data
        if len(rows) and (np.diff(rows) == 1).all():  # a run in order: a zero-copy slice
            return table.slice(int(rows[0]), len(rows))
        return take_table(table, rows)

    def read_payloads(self, rows: np.ndarray) -> list[dict]:
        return self.read_table(rows).to_pylist()

    def close(self) -> None:
        self._table = None


def _json(raw: bytes | None, where: str, root: RootView) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError as e:
        raise DataError(f"{where} is not valid JSON: {e}", dataset=root.dataset,
                        shard=root.location.display(where)) from e


class ArrowFormat(ShardFormat):
    name = "arrow"
    suffixes = (".arrow",)
    capabilities = Capabilities(index_file=True)
    own_splits = True

    def own_index(self, root: RootView) -> list[ShardEntry] | None:
        """``state.json`` of a ``save_to_disk`` folder; of the ``split=`` folder when the root
        is a ``DatasetDict`` (``dataset_dict.json``)."""
        where = f"dataset {root.dataset!r} at {root.location.display()}"
        prefix = ""
        splits_doc = _json(root.read_bytes("dataset_dict.json"), "dataset_dict.json", root)
        splits = splits_doc.get("splits") if isinstance(splits_doc, dict) else None
        if isinstance(splits, list):
            if root.split is None:
                raise ValueError(f"{where}: a DatasetDict of splits {splits}: pass split=")
            if root.split not in splits:
                raise ValueError(f"{where}: no split {root.split!r}; splits: {splits}")
            prefix = f"{root.split}/"
        state = _json(root.read_bytes(f"{prefix}state.json"), f"{prefix}state.json", root)
        files = state.get("_data_files") if isinstance(state, dict) else None
        if not isinstance(files, list):
            if prefix:
                raise ValueError(f"{where}: split {root.split!r} has no state.json")
            return None
        if not prefix and root.split is not None and state.get("_split") not in (None,
                                                                                  root.split):
            raise ValueError(f"{where}: holds split {state.get('_split')!r}, not {root.split!r}")
        names = [f.get("filename") if isinstance(f, dict) else None for f in files]
        if not all(isinstance(n, str) and n for n in names):
            raise DataError("state.json: _data_files entries need a filename",
                            dataset=root.dataset,
                            shard=root.location.display(f"{prefix}state.json"))
        return [ShardEntry(prefix + n) for n in names]

    def count(self, ref: ShardRef, res: Resources, *, keep: bool) -> ShardStats:
        """Rows from the IPC message headers of the mapped file (bodies are not touched)."""
        batches, _ = _batches(whole_local_copy(ref, res), ref)
        return ShardStats(sum(b.num_rows for b in batches), ref.size)

    def open(self, ref: ShardRef, res: Resources) -> ArrowShardReader:
        return ArrowShardReader(ref, res)


ARROW = ArrowFormat()
