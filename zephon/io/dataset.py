"""``Dataset``: a picklable descriptor of sharded records and the reads behind it.

The descriptor holds the catalog (shard ids, row counts, sizes) found once at construction.
Everything that touches files is per process and lazy: the first read of a shard in a process
opens it (downloading into the node cache and line-indexing if needed) and keeps the reader in a
small LRU; pickling drops all of that, so a worker process starts clean.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from zephon.io import download_ahead, fetch_timing, read_ahead
from zephon.io.discovery import Catalog, discover
from zephon.io.index_file import read_index
from zephon.io.jsonl import JsonlShardReader
from zephon.io.lines import compression_of
from zephon.io.local_copy import (
    Resources,
    ShardRef,
    cached_parquet,
    local_jsonl,
    local_parquet,
    remote_jsonl_index,
)
from zephon.io.memory import InMemoryShard, MemoryShardReader
from zephon.io.options import StoreOptions, resolve_store
from zephon.io.parquet import ParquetShardReader, group_starts
from zephon.io.storage import Location

__all__ = ["Dataset"]

MAX_OPEN_SHARDS = 64


class _Runtime:
    """Per-process state of a dataset: resources and open shard readers."""

    def __init__(self, store_options: StoreOptions | None) -> None:
        self.pid = os.getpid()
        self.res = Resources(resolve_store(store_options))
        self.readers: OrderedDict[int, Any] = OrderedDict()
        self.lock = threading.Lock()
        self.opening: dict[int, threading.Lock] = {}
        self.last_opened: int | None = None  # catalog position of the shard opened last
        self.row_groups: dict[int, np.ndarray | None] = {}  # shard -> row_group_starts()
        self.opened: set[int] = set()  # shards opened before (a second open is a reopen)


class Dataset:
    """Named records split into shards: JSONL, Parquet or in-memory.

    Build with :meth:`from_path` or :meth:`from_dict`. Shard ids are sorted ints (positions in
    the sorted listing or the index for files, the given keys for memory); shards without
    records are left out. A dataset is a picklable descriptor: files are opened lazily, per
    process.

    Args:
        name: The dataset's name (mixture weights and metrics refer to it).
        fmt: ``"jsonl"``, ``"parquet"`` or ``"memory"``.
        location: Where the shards are (``from_path`` finds it).
        catalog: Shard names, row counts and sizes (``from_path`` finds it).
        memory: The in-memory shards (``from_dict`` builds them).
        store_options: Storage settings (cache, remote reads); see ``with_store_options``.
    """

    def __init__(self, name: str, fmt: str, *, location: Location | None = None,
                 catalog: Catalog | None = None, memory: dict[int, InMemoryShard] | None = None,
                 store_options: StoreOptions | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"dataset name must be a non-empty string, got {name!r}")
        self._name = name
        self._fmt = fmt
        self._location = location
        self._catalog = catalog
        self._memory = memory
        self._store_options = store_options
        self._runtime: _Runtime | None = None
        self._runtime_lock = threading.Lock()
        if memory is not None:
            ids = sorted(memory)
            self._ids = _frozen(ids)
            self._counts = _frozen([len(memory[i]) for i in ids])
        else:
            assert catalog is not None
            self._ids, self._counts = catalog.ids, catalog.counts
        self._pos = {int(s): i for i, s in enumerate(self._ids.tolist())}

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_path(cls, name: str, path: str | os.PathLike, *, fmt: str | None = None,
                  storage_options: dict[str, Any] | None = None) -> Dataset:
        """A dataset under a local directory or URL (``s3://``, ``gs://``, ``memory://`` ...).

        Discovery reads ``index.json`` when the dataset has one (no shard is opened), else lists
        the shards and counts their rows.

        Args:
            name: The dataset's name.
            path: A local directory or any fsspec URL.
            fmt: ``"jsonl"`` or ``"parquet"``; None detects it (index.json, then file names).
            storage_options: Passed to the fsspec filesystem (``endpoint_url``, ``key``, ...) in
                this process and in every worker.

        Returns:
            The dataset.

        Raises:
            FileNotFoundError: The path does not exist.
            ValueError: No recognised shards, an unsupported format, or no records.
        """
        location = Location(os.fspath(path), dict(storage_options or {}))
        runtime = _Runtime(None)
        catalog = discover(name, location, fmt, runtime.res)
        out = cls(name, catalog.fmt, location=location, catalog=catalog)
        out._runtime = runtime  # keep the resources discovery used in this process
        return out

    @classmethod
    def from_dict(cls, name: str, shards: Mapping[Any, InMemoryShard | Sequence[Any]]) -> Dataset:
        """An in-memory dataset. Payloads are copied on every read, never mutated.

        Args:
            name: The dataset's name.
            shards: ``{shard_id: InMemoryShard([...]) or list of payloads}``; shard ids are
                normalised to int and sorted.

        Returns:
            The dataset.

        Raises:
            ValueError: No shards or no records, or a shard id that is not an integer or is given
                twice.
            TypeError: A shard that is not a list of payloads.
        """
        if not isinstance(shards, Mapping) or not shards:
            raise ValueError(f"dataset {name!r}: from_dict needs a non-empty dict of shards")
        memory: dict[int, InMemoryShard] = {}
        for key, shard in shards.items():
            try:
                sid = int(key)
            except (TypeError, ValueError):
                raise ValueError(f"dataset {name!r}: shard id {key!r} is not an integer") from None
            if sid in memory:
                raise ValueError(f"dataset {name!r}: shard id {sid} given twice")
            if isinstance(shard, (str, bytes)) or not isinstance(shard, Iterable):
                raise TypeError(f"dataset {name!r}: shard {key!r} must be an InMemoryShard or "
                                f"a list of payloads, got {type(shard).__name__}")
            items = InMemoryShard(list(shard))
            if len(items):
                memory[sid] = items
        if not memory:
            raise ValueError(f"dataset {name!r} is empty: {len(shards)} shard(s), no records")
        return cls(name, "memory", memory=memory)

    def with_store_options(self, options: StoreOptions | dict | None) -> Dataset:
        """The same dataset read with other storage options (cache root, limits, ...).

        Args:
            options: A ``StoreOptions``, a dict of its fields, or None for the defaults.

        Returns:
            A new dataset; this one is unchanged.
        """
        opts = None if options is None else StoreOptions.coerce(options)
        return Dataset(self._name, self._fmt, location=self._location, catalog=self._catalog,
                       memory=self._memory, store_options=opts)

    # -- pickling: descriptor only ------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_runtime"] = None
        state.pop("_runtime_lock")
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._runtime_lock = threading.Lock()

    # -- catalog accessors --------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The dataset's name."""
        return self._name

    @property
    def fmt(self) -> str:
        """``"jsonl"``, ``"parquet"`` or ``"memory"``."""
        return self._fmt

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
        ``zephon/engine/priming.py``); empty for a dataset without an index."""
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
            shard_id: The shard's id.

        Returns:
            The name.
        """
        if self._memory is not None:
            self._index(shard_id)
            return f"memory:{shard_id}"
        return self._ref(shard_id).display

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

    def _ref(self, shard_id: int) -> ShardRef:
        i = self._index(shard_id)
        cat = self._catalog
        assert cat is not None and self._location is not None
        return ShardRef(self._name, self._location, cat.names[i], int(cat.sizes[i]),
                        cat.versions[i], int(cat.counts[i]))

    # -- per-process readers ------------------------------------------------------------------

    def _rt(self) -> _Runtime:
        rt = self._runtime
        if rt is None or rt.pid != os.getpid():
            with self._runtime_lock:
                rt = self._runtime
                if rt is None or rt.pid != os.getpid():  # first use, or a forked child
                    rt = self._runtime = _Runtime(self._store_options)
        return rt

    def _reader(self, shard_id: int) -> Any:
        rt = self._rt()
        sid = int(shard_id)
        with rt.lock:
            reader = rt.readers.get(sid)
            if reader is not None:
                rt.readers.move_to_end(sid)
                fetch_timing.note("cache_hits")
                return reader
            opening = rt.opening.setdefault(sid, threading.Lock())
        with opening:  # one thread opens a shard; other shards open in parallel
            with rt.lock:
                reader = rt.readers.get(sid)
            if reader is not None:
                fetch_timing.note("cache_hits")  # another thread opened it meanwhile
            else:
                t0 = fetch_timing.timed_ns()
                reader = self._open(sid, rt.res)
                fetch_timing.note("open_ns", fetch_timing.timed_ns() - t0)
                fetch_timing.note("cache_misses")
                with rt.lock:
                    if sid in rt.opened:
                        fetch_timing.note("shard_reopens")
                    rt.opened.add(sid)
                    rt.readers[sid] = reader
                    evicted = [rt.readers.popitem(last=False)[1]
                               for _ in range(len(rt.readers) - MAX_OPEN_SHARDS)]
                t0 = fetch_timing.timed_ns()
                for old in evicted:
                    old.close()
                if evicted:
                    fetch_timing.note("close_ns", fetch_timing.timed_ns() - t0)
                self._after_open(rt, sid)
        return reader

    def _after_open(self, rt: _Runtime, sid: int) -> None:
        """Two shards opened one after the other in catalog order: download the next
        ``download_ahead.SHARDS`` while this one is read (download_ahead.py). One open alone
        is no pattern: a look at the first shard (the inspector) must not fetch the next."""
        pos = self._pos[sid]
        prev, rt.last_opened = rt.last_opened, pos
        if prev == pos - 1:
            for nxt in range(pos + 1, min(pos + 1 + download_ahead.SHARDS, len(self._ids))):
                self._download_ahead(rt, int(self._ids[nxt]))

    def _downloads_whole(self, res: Resources, sid: int) -> bool:
        """Whether opening the shard downloads it whole into the node cache."""
        loc, cat = self._location, self._catalog
        if loc is None or cat is None or loc.is_local:
            return False
        if self._fmt == "parquet":
            return res.store.remote_reads == "whole"
        # JSONL is downloaded unless uncompressed shards are read by byte ranges
        return (res.store.remote_reads != "ranges"
                or compression_of(cat.names[self._index(sid)]) is not None)

    def _download_ahead(self, rt: _Runtime, sid: int) -> None:
        if sid in rt.readers or not self._downloads_whole(rt.res, sid):
            return
        download_ahead.submit((id(rt), sid), lambda: self._warm_if_room(rt.res, sid))

    def _warm_if_room(self, res: Resources, sid: int) -> None:
        """A guess never evicts: under a tight cache limit it could push out the shard being
        read, or one fetched ahead a moment ago, and both would be downloaded twice."""
        assert self._catalog is not None  # raw_bytes: decoded sizes, what the cache will hold
        if res.cache.fits(int(self._catalog.raw_bytes[self._index(sid)])):
            self.warm([sid])

    def _open(self, shard_id: int, res: Resources) -> Any:
        if self._memory is not None:
            self._index(shard_id)
            return MemoryShardReader(self._name, shard_id, self._memory[shard_id])
        ref = self._ref(shard_id)
        if self._fmt == "jsonl":
            return JsonlShardReader(ref, res)
        return ParquetShardReader(ref, res)

    def read_table(self, shard_id: int, rows: np.ndarray | Sequence[int], *,
                   columns: Sequence[str] | None = None) -> pa.Table:
        """Rows of one shard as an Arrow table, in the order given (repeats allowed).

        Schema metadata ``b"zephon.sparse"`` lists columns in which a null stands for a key the
        record does not have.

        Args:
            shard_id: The shard's id.
            rows: Row numbers within the shard.
            columns: Only these columns (default: all).

        Returns:
            The rows.

        Raises:
            NotColumnar: Arrow cannot hold the records exactly (use :meth:`read_payloads`).
            DataError: A malformed record (the message names dataset, shard and line or row).
        """
        cols = None if columns is None else list(columns)
        return self._reader(shard_id).read_table(np.asarray(rows, dtype=np.int64), cols)

    def read_ahead(self, shard_id: int, rows: np.ndarray) -> None:
        """A hint that ``rows`` of a shard are read next: a remote shard that opening would
        download whole starts downloading; a local Parquet shard starts decoding its first row
        groups on the read-ahead thread; anything else ignores it. Never changes what a read
        returns.

        Args:
            shard_id: The shard's id.
            rows: The rows to be read, any order.
        """
        if self._memory is not None:
            return
        rt = self._rt()
        if self._downloads_whole(rt.res, shard_id):
            self._download_ahead(rt, int(shard_id))
            return
        if self._fmt != "parquet" or not read_ahead.enabled:
            return
        self._reader(shard_id).read_ahead_rows(np.asarray(rows, dtype=np.int64))

    def decode_ahead(self, shard_id: int, group: int) -> None:
        """Decode a row group of a Parquet shard on this machine now, on the read-ahead thread,
        for a read that will want it (the engine tells a worker so for the row groups it owns).
        Other formats and remote shards ignore it.

        Args:
            shard_id: The shard's id.
            group: The row group's index.
        """
        if self._fmt != "parquet" or self._memory is not None:
            return
        self._reader(int(shard_id)).decode_ahead(int(group))

    def row_group_starts(self, shard_id: int) -> np.ndarray | None:
        """The first row of each row group of a Parquet shard, then its row count, read from the
        footer of a file on this machine (once per process).

        Args:
            shard_id: The shard's id.

        Returns:
            The starts, or None for other formats, for a remote shard not in the node cache yet
            (learning it would cost a request; asked again, it looks again) and for a file that
            cannot be read (its reader reports that, naming it).
        """
        if self._fmt != "parquet" or self._memory is not None:
            return None
        rt = self._rt()
        sid = int(shard_id)
        if sid in rt.row_groups:
            return rt.row_groups[sid]
        ref = self._ref(sid)
        path = ref.location.path(ref.name) if ref.location.is_local else cached_parquet(ref, rt.res)
        if path is None:
            return None
        try:
            starts = group_starts(pq.read_metadata(path))
        except (OSError, pa.ArrowException):
            starts = None
        rt.row_groups[sid] = starts
        return starts

    def record_bytes(self, shard_id: int, rows: np.ndarray | Sequence[int]) -> np.ndarray | None:
        """Stored bytes of each row where the format keeps records apart (a JSONL record's line).

        Args:
            shard_id: The shard's id.
            rows: Row numbers within the shard.

        Returns:
            The sizes, or None where the format does not keep records apart (Parquet, memory).
        """
        if self._fmt != "jsonl" or self._memory is not None:
            return None
        return self._reader(shard_id).record_bytes(np.asarray(rows, dtype=np.int64))

    def read_payloads(self, shard_id: int, rows: np.ndarray | Sequence[int]) -> list:
        """Rows of one shard as fresh Python payloads (exact dicts for JSONL and Parquet).

        Args:
            shard_id: The shard's id.
            rows: Row numbers within the shard, any order, repeats allowed.

        Returns:
            The payloads, in the order of ``rows``.
        """
        return self._reader(shard_id).read_payloads(np.asarray(rows, dtype=np.int64))

    def warm(self, shard_ids: Iterable[int]) -> None:
        """Make shards ready for fast reads: download remote shards (and decode compressed JSONL)
        into the node cache, line-index JSONL. Thread-safe; a no-op for memory.

        Args:
            shard_ids: The shards to prepare.
        """
        if self._memory is not None:
            for sid in shard_ids:
                self._index(sid)
            return
        res = self._rt().res
        for sid in shard_ids:
            ref = self._ref(sid)
            if self._fmt == "jsonl":
                ranged = (not ref.location.is_local and res.store.remote_reads == "ranges"
                          and compression_of(ref.name) is None)
                if ranged:
                    remote_jsonl_index(ref, res)
                else:
                    local_jsonl(ref, res)
            elif not ref.location.is_local:
                local_parquet(ref, res)

    def close(self) -> None:
        """Close this process's open shard readers (they reopen on the next read)."""
        rt = self._runtime
        if rt is None or rt.pid != os.getpid():
            return
        with rt.lock:
            readers = list(rt.readers.values())
            rt.readers.clear()
        for r in readers:
            r.close()


def _frozen(values: list[int]) -> np.ndarray:
    a = np.asarray(values, dtype=np.int64)
    a.setflags(write=False)
    return a
