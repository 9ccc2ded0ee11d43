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

from zephon.io import fetch_timing
from zephon.io.ahead import download_ahead, read_ahead
from zephon.io.catalog.confine import check_local_link
from zephon.io.catalog.discovery import Catalog, discover
from zephon.io.catalog.index_file import read_index
from zephon.io.formats import registry
from zephon.io.formats.bad_records import BAD_RECORD_POLICIES
from zephon.io.formats.base import ShardFormat, ShardReader
from zephon.io.formats.memory import MEMORY, InMemoryShard, MemoryShardRef, memory_shards
from zephon.io.options import StoreOptions, resolve_store
from zephon.io.storage.local_copy import Resources, ShardRef
from zephon.io.storage.location import Location

__all__ = ["Dataset"]

MAX_OPEN_SHARDS = 64


class _Runtime:
    """Per-process state of a dataset: resources and open shard readers."""

    def __init__(self, store_options: StoreOptions | None) -> None:
        self.pid = os.getpid()
        self.res = Resources(resolve_store(store_options))
        self.readers: OrderedDict[int, ShardReader] = OrderedDict()
        self.lock = threading.Lock()
        self.opening: dict[int, threading.Lock] = {}
        self.last_opened: int | None = None  # catalog position of the shard opened last
        self.row_groups: dict[int, np.ndarray | None] = {}  # shard -> row_group_starts()
        self.opened: set[int] = set()  # shards opened before (a second open is a reopen)


class Dataset:
    """Named records split into shards of any registered format (``zephon/io/formats/``; one
    root may mix formats, each shard read by its own) or in memory.

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
                 store_options: StoreOptions | None = None,
                 on_bad_record: str = "raise") -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"dataset name must be a non-empty string, got {name!r}")
        if on_bad_record not in BAD_RECORD_POLICIES:
            raise ValueError(f"dataset {name!r}: on_bad_record must be one of "
                             f"{BAD_RECORD_POLICIES}, got {on_bad_record!r}")
        self._on_bad_record = on_bad_record
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

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def from_path(cls, name: str, path: str | os.PathLike, *, fmt: str | None = None,
                  split: str | None = None, storage_options: dict[str, Any] | None = None,
                  on_bad_record: str = "raise") -> Dataset:
        """A dataset under a local directory or URL (``s3://``, ``gs://``, ``memory://`` ...).

        Discovery reads the dataset's own index files when it has them (no shard is opened),
        else lists the shards and counts their rows.

        Args:
            name: The dataset's name.
            path: A local directory or any fsspec URL.
            fmt: A registered format's name (``"jsonl"``, ``"parquet"``, ...): read only the
                shards of that format. None detects (the formats' own index files first, then
                each file in the format its name says, so a root may hold several; ``fmt`` is
                then ``"mixed"``).
            split: One split of a Hugging Face layout (a ``DatasetDict`` saved with
                ``save_to_disk``, or the Hub's ``data/<split>-00000-of-0000N`` files).
            storage_options: Passed to the fsspec filesystem (``endpoint_url``, ``key``, ...) in
                this process and in every worker.
            on_bad_record: ``"raise"`` (default) or ``"skip"`` an undecodable record (a JSONL
                line that is not UTF-8 JSON of an object); skipped records are counted in
                ``metrics_snapshot()["losses"]``.

        Returns:
            The dataset.

        Raises:
            FileNotFoundError: The path does not exist.
            ValueError: No recognised shards, an unsupported format, or no records.
            DataError: A shard name that resolves outside the root.
        """
        location = Location(os.fspath(path), dict(storage_options or {}))
        runtime = _Runtime(None)
        catalog = discover(name, location, fmt, runtime.res, split=split)
        out = cls(name, catalog.fmt, location=location, catalog=catalog,
                  on_bad_record=on_bad_record)
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
        memory = memory_shards(name, shards)
        return cls(name, MEMORY.name, memory=memory)

    def with_store_options(self, options: StoreOptions | dict | None) -> Dataset:
        """The same dataset read with other storage options (cache root, limits, ...).

        Args:
            options: A ``StoreOptions``, a dict of its fields, or None for the defaults.

        Returns:
            A new dataset; this one is unchanged.
        """
        opts = None if options is None else StoreOptions.coerce(options)
        return Dataset(self._name, self._fmt, location=self._location, catalog=self._catalog,
                       memory=self._memory, store_options=opts,
                       on_bad_record=self._on_bad_record)

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
        """The shards' format: a registered format's name (``"jsonl"``, ``"parquet"``...),
        ``"mixed"`` when shards differ, or ``"memory"``."""
        return self._fmt

    @property
    def on_bad_record(self) -> str:
        return self._on_bad_record

    def shard_format(self, shard_id: int) -> str:
        i = self._index(shard_id)
        return MEMORY.name if self._catalog is None else self._catalog.formats[i]

    def format_of(self, shard_id: int) -> ShardFormat:
        """The format object that reads the shard (``zephon/io/formats/base.py``)."""
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
        """The shard's file path or URL (for messages), or ``memory:<id>``."""
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

    # -- per-process readers ------------------------------------------------------------------

    def _rt(self) -> _Runtime:
        rt = self._runtime
        if rt is None or rt.pid != os.getpid():
            with self._runtime_lock:
                rt = self._runtime
                if rt is None or rt.pid != os.getpid():  # first use, or a forked child
                    rt = self._runtime = _Runtime(self._store_options)
        return rt

    def _reader(self, shard_id: int) -> Any:  # a ShardReader, with its format's capabilities
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
        ``download_ahead.SHARDS`` while this one is read (ahead/download_ahead.py). One open alone
        is no pattern: a look at the first shard (the inspector) must not fetch the next."""
        pos = self._pos[sid]
        prev, rt.last_opened = rt.last_opened, pos
        if prev == pos - 1:
            for nxt in range(pos + 1, min(pos + 1 + download_ahead.SHARDS, len(self._ids))):
                self._download_ahead(rt, int(self._ids[nxt]))

    def _downloads_whole(self, res: Resources, sid: int) -> bool:
        """Whether opening the shard downloads it whole into the node cache."""
        loc = self._location
        if loc is None or loc.is_local:
            return False
        return self.format_of(sid).downloads_whole(self._ref(sid), res)

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

    def _open(self, shard_id: int, res: Resources) -> ShardReader:
        source = self._source(shard_id)
        if source.location is not None and source.location.is_local:
            # a link swapped since discovery must not lead out either
            check_local_link(source.location, source.name, dataset=self._name)
        return self.format_of(shard_id).open(source, res)

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
        """A hint that ``rows`` (any order) of a shard are read next: a remote shard that
        opening would download whole starts downloading (``zephon/io/ahead/download_ahead.py``);
        a local shard of a format with the ``read_ahead`` capability (Parquet) starts decoding
        them on the read-ahead thread (``zephon/io/ahead/read_ahead.py``); anything else
        ignores it. Never changes what a read returns."""
        caps = self.format_of(shard_id).capabilities
        if self._location is None and not caps.read_ahead:
            return
        rt = self._rt()
        if self._downloads_whole(rt.res, shard_id):
            self._download_ahead(rt, int(shard_id))
            return
        if not read_ahead.enabled or not caps.read_ahead:
            return
        self._reader(shard_id).read_ahead_rows(np.asarray(rows, dtype=np.int64))

    def decode_ahead(self, shard_id: int, group: int) -> None:
        """Decode row group ``group`` of a shard (a format with the ``row_groups`` capability)
        on this machine now, on the read-ahead thread, for a read that will want it: a worker
        process is told so by the coordinator for the row groups it owns. Other formats and
        remote shards ignore it."""
        if not self.format_of(shard_id).capabilities.row_groups:
            return
        self._reader(int(shard_id)).decode_ahead(int(group))

    def row_group_starts(self, shard_id: int) -> np.ndarray | None:
        """The first row of each row group of a shard whose format has row groups (Parquet),
        then its row count, from the footer of a file on this machine (once per process); None
        for other formats, for a remote shard not in the node cache yet (learning it would cost
        a request; asked again, it looks again) and for a file that cannot be read or whose rows
        differ from the catalog's (its reader reports that, naming it)."""
        fmt = self.format_of(shard_id)
        if not fmt.capabilities.row_groups:
            return None
        rt = self._rt()
        sid = int(shard_id)
        if sid in rt.row_groups:
            return rt.row_groups[sid]
        settled, starts = fmt.row_group_starts(self._ref(sid), rt.res)
        if settled:
            rt.row_groups[sid] = starts
        return starts

    def record_bytes(self, shard_id: int, rows: np.ndarray | Sequence[int]) -> np.ndarray | None:
        """Stored bytes of each of ``rows`` where the format keeps records apart (the
        ``record_sizes`` capability: a JSONL record's line), None where it does not."""
        if not self.format_of(shard_id).capabilities.record_sizes:
            return None
        return self._reader(shard_id).record_bytes(np.asarray(rows, dtype=np.int64))

    def bad_rows(self, shard_id: int, rows: np.ndarray | Sequence[int]) -> np.ndarray:
        """Which of ``rows`` (bool mask) cannot be decoded at all (formats/bad_records.py); only
        formats with the ``bad_rows`` capability (JSONL lines) have such rows."""
        rows = np.asarray(rows, dtype=np.int64)
        if not self.format_of(shard_id).capabilities.bad_rows:
            return np.zeros(len(rows), dtype=bool)
        return self._reader(shard_id).bad_rows(rows)

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
        """Make shards ready for fast reads, as their format says (``ShardFormat.warm``):
        download remote shards (and decode compressed JSONL) into the node cache, line-index
        JSONL. Thread-safe; a no-op for memory."""
        res = self._rt().res
        for sid in shard_ids:
            self.format_of(sid).warm(self._source(sid), res)

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
