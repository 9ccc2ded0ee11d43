"""Datasets and storage: shard formats (formats/: JSONL, Parquet, Arrow, WebDataset,
in-memory), the catalog of a root (catalog/), fsspec storage and the node-local shard cache
(storage/), look-ahead (ahead/).

See ``docs/INTERNALS.md`` for the contract the engine relies on.
"""

from zephon.block import NotColumnar
from zephon.io.ahead.prefetch import ShardPrefetcher
from zephon.io.catalog.index_file import build_index
from zephon.io.dataset import Dataset
from zephon.io.errors import DataError, ShardMissingError
from zephon.io.formats.memory import InMemoryShard
from zephon.io.formats.records import payloads_from_table, sparse_columns
from zephon.io.options import CacheOptions, ParquetRGCacheOptions, StoreOptions, parse_size_bytes
from zephon.io.storage.cache import ShardCache

__all__ = [
    "CacheOptions",
    "DataError",
    "Dataset",
    "DatasetInspector",
    "InMemoryShard",
    "NotColumnar",
    "ParquetRGCacheOptions",
    "ShardCache",
    "ShardMissingError",
    "ShardPrefetcher",
    "StoreOptions",
    "build_index",
    "parse_size_bytes",
    "payloads_from_table",
    "sparse_columns",
]


def __getattr__(name: str):
    if name == "DatasetInspector":  # lives with the debug helpers; imported on demand
        from zephon.io.inspector import DatasetInspector

        return DatasetInspector
    raise AttributeError(f"module 'zephon.io' has no attribute {name!r}")
