"""JSONL as a registry entry: ``*.jsonl`` files, plain or gzip/zstd compressed, one JSON object
per line. The reader is ``jsonl_reader.py``; line indexes ``jsonl_lines.py``.

Counting needs every byte (a line index), so discovery keeps what it read: the decoded copy of
a remote or compressed shard in the node cache and the line index of a local one, and the first
read costs nothing more; ``build-index`` only streams. Uncompressed remote shards can be read
by byte ranges (``remote_reads="ranges"``); everything else remote is copied whole first.
"""

from __future__ import annotations

import os
from typing import Any

from zephon.io.formats.base import Capabilities, Resources, ShardFormat, ShardRef, ShardStats
from zephon.io.formats.jsonl_lines import compression_of, decoded_reader, scan_stream
from zephon.io.formats.jsonl_reader import JsonlShardReader
from zephon.io.storage.local_copy import local_jsonl, missing_as_shard_error, remote_jsonl_index

__all__ = ["JSONL", "JsonlFormat"]


class JsonlFormat(ShardFormat):
    name = "jsonl"
    suffixes = (".jsonl", ".jsonl.gz", ".jsonl.gzip", ".jsonl.zst", ".jsonl.zstd")
    capabilities = Capabilities(record_sizes=True, bad_rows=True, byte_ranges=True,
                                index_file=True, mapped_source=True)

    def count(self, ref: ShardRef, res: Resources, *, keep: bool) -> ShardStats:
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

    def open(self, ref: ShardRef, res: Resources) -> JsonlShardReader:
        return JsonlShardReader(ref, res)

    def _ranged(self, ref: ShardRef, res: Resources) -> bool:
        return (not ref.location.is_local and res.store.remote_reads == "ranges"
                and compression_of(ref.name) is None)

    def downloads_whole(self, ref: ShardRef, res: Resources) -> bool:
        # unlike Parquet, "auto" downloads: a JSONL read wants whole lines, scattered
        return res.store.remote_reads != "ranges" or compression_of(ref.name) is not None

    def warm(self, ref: ShardRef, res: Resources) -> None:
        """The line index (and the decoded copy of a remote or compressed shard)."""
        if self._ranged(ref, res):
            remote_jsonl_index(ref, res)
        else:
            local_jsonl(ref, res)


JSONL = JsonlFormat()
