"""``DatasetShards``: the catalog half of a ``Dataset`` -- which shards, of which format, how many rows.

Everything here answers from the descriptor alone: shard ids, row counts, byte sizes and formats
found once when the dataset was built (discovery or index.json), so these accessors open no file
and cost the same in every process. The reads, which open shards per process, are ``Dataset``'s
(dataset.py); keeping the two apart leaves each under one job.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zephon.io.catalog.discovery import Catalog
from zephon.io.catalog.index_file import read_index
from zephon.io.formats import registry
from zephon.io.formats.base import ShardFormat
from zephon.io.formats.memory import MEMORY, InMemoryShard, MemoryShardRef
from zephon.io.storage.location import Location
from zephon.io.storage.shard_ref import ShardRef

__all__ = ["DatasetShards"]


class DatasetShards:
    """Shard ids (sorted ints), row counts and formats of named records, from a catalog of
    files or from in-memory shards; shards without records are left out.

    Args:
        name: The dataset's name (mixture weights and metrics refer to it).
        fmt: The shards' format name, ``"mixed"`` or ``"memory"``.
        location: Where the shards are (None in memory).
        catalog: Shard names, row counts and sizes (None in memory).
        memory: The in-memory shards (None for files).
    """

    def __init__(self, name: str, fmt: str, location: Location | None,
                 catalog: Catalog | None, memory: dict[int, InMemoryShard] | None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"dataset name must be a non-empty string, got {name!r}")
        self._name = name
        self._fmt = fmt
        self._location = location
        self._catalog = catalog
        self._memory = memory
        if memory is not None:
            ids = sorted(memory)
            self._ids = _frozen(ids)
            self._counts = _frozen([len(memory[i]) for i in ids])
            used = [MEMORY.name]
        else:
            assert catalog is not None
            self._ids, self._counts = catalog.ids, catalog.counts
            used = sorted(set(catalog.formats))
        # the format objects travel with the dataset: a format registered in this process only
        # (not by an entry point) is still known in worker processes
        self._formats: dict[str, ShardFormat] = {
            f: MEMORY if f == MEMORY.name else registry.get(f) for f in used}
        self._pos = {int(s): i for i, s in enumerate(self._ids.tolist())}

    @property
    def name(self) -> str:
        """The dataset's name."""
        return self._name

    @property
    def fmt(self) -> str:
        """The shards' format: a registered format's name (``"jsonl"``, ``"parquet"``...),
        ``"mixed"`` when shards differ, or ``"memory"``."""
        return self._fmt

    def shard_format(self, shard_id: int) -> str:
        """The name of the format one shard is read in (``"jsonl"``, ``"parquet"``, ...,
        ``"memory"``); in a ``"mixed"`` dataset each shard has its own.

        Args:
            shard_id: The shard's id (one of ``ids()``); another raises ``KeyError``.

        Returns:
            The format's registered name.
        """
        i = self._index(shard_id)
        return MEMORY.name if self._catalog is None else self._catalog.formats[i]

    def format_of(self, shard_id: int) -> ShardFormat:
        """The format object that reads the shard (``zephon/io/formats/base.py``).

        Args:
            shard_id: The shard's id (one of ``ids()``); another raises ``KeyError``.

        Returns:
            The ``ShardFormat`` registered under ``shard_format(shard_id)``.
        """
        return self._formats[self.shard_format(shard_id)]

    def formats(self) -> dict[str, int]:
        """Shards per format, e.g. ``{"jsonl": 1, "parquet": 1}``."""
        if self._catalog is None:
            return {MEMORY.name: self.shard_count()}
        return self._catalog.format_counts()

    @property
    def url(self) -> str | None:
        """The root URL or path; None for in-memory datasets."""
        return None if self._location is None else self._location.url

    def shard_count(self) -> int:
        """Number of shards (with records)."""
        return len(self._ids)

    def total(self) -> int:
        """Number of records in all shards (also ``len(dataset)``)."""
        return int(self._counts.sum())

    def __len__(self) -> int:
        return self.total()

    def ids(self) -> np.ndarray:
        """Shard ids, sorted (int64, read-only)."""
        return self._ids

    def counts(self) -> np.ndarray:
        """Row counts aligned with ``ids()``."""
        return self._counts

    def max_count(self) -> int:
        """Rows of the largest shard."""
        return int(self._counts.max())

    def raw_bytes(self) -> np.ndarray | None:
        """Per-shard byte sizes aligned with ``ids()`` (decoded sizes for compressed JSONL);
        None for in-memory datasets."""
        return None if self._catalog is None else self._catalog.raw_bytes

    def identity(self) -> dict[str, Any]:
        """What the records are, for caches keyed by content (token estimates): format,
        location, and per shard its name, rows, bytes and version. An index's own digest is
        left out, so that adding figures to index.json does not change the dataset's identity."""
        cat = self._catalog
        if cat is None:
            return {"memory": self._name, "rows": self._counts.tolist()}
        versions = ["index" if str(v).startswith("index:") else v for v in cat.versions]
        return {"fmt": self._fmt, "url": self.url, "names": list(cat.names),
                "rows": cat.counts.tolist(), "bytes": cat.sizes.tolist(), "versions": versions}

    def token_estimates(self) -> dict[str, Any]:
        """Token figures that ``build-index --tokenizer`` stored in index.json, by key (see
        ``zephon/engine/priming/token_ratios.py``); empty for a dataset without an index."""
        if self._location is None or self._catalog is None or not self._catalog.from_index:
            return {}
        doc = read_index(self._location, self._name)
        found = doc.get("token_estimates") if isinstance(doc, dict) else None
        return found if isinstance(found, dict) else {}

    def count(self, shard_id: int) -> int:
        """Rows of one shard.

        Args:
            shard_id: The shard's id.

        Returns:
            Its row count.
        """
        return int(self._counts[self._index(shard_id)])

    def shard_name(self, shard_id: int) -> str:
        """The shard's file path or URL (for messages), or ``memory:<id>``.

        Args:
            shard_id: The shard's id (one of ``ids()``); another raises ``KeyError``.

        Returns:
            The name to show.
        """
        return self._source(shard_id).display

    def __repr__(self) -> str:
        where = f", url={self.url!r}" if self.url else ""
        return (f"Dataset(name={self._name!r}, fmt={self._fmt!r}{where}, "
                f"shards={self.shard_count()}, rows={self.total()})")

    def _index(self, shard_id: int) -> int:
        try:
            return self._pos[int(shard_id)]
        except (KeyError, TypeError, ValueError):
            raise KeyError(f"dataset {self._name!r} has no shard {shard_id!r} "
                           f"(ids {self._ids[:5].tolist()}...)") from None

    def _source(self, shard_id: int) -> ShardRef | MemoryShardRef:
        """What the shard's format opens: a file reference, or the in-memory shard."""
        if self._memory is not None:
            self._index(shard_id)
            return MemoryShardRef(self._name, int(shard_id), self._memory[int(shard_id)])
        return self._ref(shard_id)

    def _ref(self, shard_id: int) -> ShardRef:
        i = self._index(shard_id)
        cat = self._catalog
        assert cat is not None and self._location is not None
        return ShardRef(self._name, self._location, cat.names[i], int(cat.sizes[i]),
                        cat.versions[i], int(cat.counts[i]),
                        None if cat.facts is None else cat.facts[i])


def _frozen(values: list[int]) -> np.ndarray:
    a = np.asarray(values, dtype=np.int64)
    a.setflags(write=False)
    return a
