"""Per-shard statistics: row counts, decoded sizes, Parquet row groups.

Used by discovery (no index.json) and by build_index. For JSONL, counting needs every byte, so
discovery keeps what it read (the decoded copy of a remote or compressed shard in the node cache,
the line index of a local one) and the first read costs nothing more; build_index only streams.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from zephon.io.errors import DataError
from zephon.io.formats.jsonl_lines import compression_of, decoded_reader, scan_stream
from zephon.io.formats.parquet_reader import group_starts
from zephon.io.storage.local_copy import (
    Resources,
    ShardRef,
    cached_parquet,
    local_jsonl,
    missing_as_shard_error,
)

__all__ = ["ShardStats", "jsonl_stats", "parquet_group_starts", "parquet_stats", "shard_stats"]


@dataclass
class ShardStats:
    rows: int
    raw_bytes: int  # decoded size (JSONL) or file size (Parquet)
    extra: dict[str, Any] = field(default_factory=dict)


def jsonl_stats(ref: ShardRef, res: Resources, *, keep: bool) -> ShardStats:
    """Count the records of a JSONL shard; ``keep`` leaves the decoded copy / index cached."""
    compressed = compression_of(ref.name) is not None
    if keep or (ref.location.is_local and not compressed):
        path, offsets = local_jsonl(ref, res)
        raw = int(offsets[-1]) if len(offsets) > 1 else os.path.getsize(path)
        extra = {"uncompressed_bytes": raw} if compressed else {}
        return ShardStats(len(offsets) - 1, raw, extra)

    def attempt() -> Any:
        try:
            raw_file = ref.location.open(ref.name, "rb")
        except FileNotFoundError as e:
            raise ref.missing(e) from e
        with raw_file, missing_as_shard_error(ref):
            return scan_stream(decoded_reader(raw_file, ref.name).read, dataset=ref.dataset,
                               shard=ref.display)

    offsets = res.retry(attempt, f"reading {ref.display}", download=True)
    raw = int(offsets[-1]) if len(offsets) > 1 else 0
    return ShardStats(len(offsets) - 1, raw, {"uncompressed_bytes": raw} if compressed else {})


def parquet_stats(ref: ShardRef, res: Resources) -> ShardStats:
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


def shard_stats(fmt: str, ref: ShardRef, res: Resources, *, keep: bool) -> ShardStats:
    if fmt == "jsonl":
        return jsonl_stats(ref, res, keep=keep)
    if fmt == "parquet":
        return parquet_stats(ref, res)
    raise ValueError(f"unsupported format {fmt!r}")


def parquet_group_starts(ref: ShardRef, res: Resources) -> tuple[bool, np.ndarray | None]:
    """``(settled, starts)``: the first row of each row group of a Parquet shard on this
    machine, then its row count. ``settled`` is False for a remote shard not in the node cache
    yet (learning its footer would cost a request: ask again later). ``starts`` is None for a
    file that cannot be read, and for one whose rows differ from the catalog's (an index.json
    that miscounts it): its reader reports either, naming it."""
    path = ref.location.path(ref.name) if ref.location.is_local else cached_parquet(ref, res)
    if path is None:
        return False, None
    try:
        starts = group_starts(pq.read_metadata(path))
    except (OSError, pa.ArrowException):
        return True, None
    if ref.rows is not None and int(starts[-1]) != ref.rows:
        return True, None
    return True, starts
