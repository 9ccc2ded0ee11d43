"""Parquet as a registry entry: ``*.parquet`` files. Rows and row groups come from the footer;
the reader (``parquet_reader.py``) decodes row groups into a per-process cache, ahead of the
reads where it can. Remote shards are read by byte ranges until half a shard was fetched, then
copied whole (``remote_reads``), and ``prefetch`` copies them whole.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from zephon.io.errors import DataError
from zephon.io.formats.base import Capabilities, Resources, ShardFormat, ShardRef, ShardStats
from zephon.io.formats.parquet_reader import ParquetShardReader, group_starts
from zephon.io.storage.local_copy import cached_copy, whole_local_copy

__all__ = ["PARQUET", "ParquetFormat"]


class ParquetFormat(ShardFormat):
    name = "parquet"
    suffixes = (".parquet",)
    capabilities = Capabilities(row_groups=True, read_ahead=True, byte_ranges=True,
                                index_file=True)

    def claims_index(self, doc: dict[str, Any]) -> bool:
        """An untagged index whose first shard lists row groups (spec §3.3)."""
        shards = doc.get("shards")
        first = shards[0] if isinstance(shards, list) and shards else None
        extra = first.get("extra") if isinstance(first, dict) else None
        return isinstance(extra, dict) and "row_groups" in extra

    def count(self, ref: ShardRef, res: Resources, *, keep: bool) -> ShardStats:
        """Rows and row-group sizes from the footer only."""
        def attempt() -> Any:
            if ref.location.is_local:
                return pq.read_metadata(ref.location.path(ref.name))
            with ref.location.open(ref.name, "rb") as f:
                return pq.read_metadata(f)

        try:
            meta = res.retry(attempt, f"reading the footer of {ref.display}")
        except FileNotFoundError as e:
            raise ref.missing(e) from e
        except pa.ArrowInvalid as e:
            raise DataError(f"not a readable Parquet file (corrupt or truncated footer?): {e}",
                            dataset=ref.dataset, shard=ref.display) from e
        groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        return ShardStats(int(meta.num_rows), ref.size, {"row_groups": groups})

    def open(self, ref: ShardRef, res: Resources) -> ParquetShardReader:
        return ParquetShardReader(ref, res)

    def warm(self, ref: ShardRef, res: Resources) -> None:
        if not ref.location.is_local:  # whole: a prefetched shard is read without requests
            whole_local_copy(ref, res)

    def row_group_starts(self, ref: ShardRef, res: Resources) -> tuple[bool, np.ndarray | None]:
        """Read from the footer of a copy on this machine. Not settled for a remote shard not in
        the node cache yet (learning its footer would cost a request). None for a file that
        cannot be read, and for one whose rows differ from the catalog's (an index.json that
        miscounts it): its reader reports either, naming it."""
        path = ref.location.path(ref.name) if ref.location.is_local else cached_copy(ref, res)
        if path is None:
            return False, None
        try:
            starts = group_starts(pq.read_metadata(path))
        except (OSError, pa.ArrowException):
            return True, None
        if ref.rows is not None and int(starts[-1]) != ref.rows:
            return True, None
        return True, starts


PARQUET = ParquetFormat()
