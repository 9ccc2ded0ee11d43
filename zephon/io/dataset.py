"""``Dataset``: a picklable descriptor of sharded records and the reads behind it.

The descriptor holds the catalog (shard ids, row counts, sizes) found once at construction; its
accessors are ``DatasetShards``'s (dataset_shards.py). Everything that touches files is per
process and lazy: the first read of a shard in a process opens it (downloading into the node
cache and line-indexing if needed) and keeps the reader in a small LRU (shard_readers.py);
pickling drops all of that, so a worker process starts clean.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from zephon.io.ahead import download_ahead, read_ahead
from zephon.io.catalog.confine import check_local_link
from zephon.io.catalog.discovery import Catalog, discover
from zephon.io.dataset_shards import DatasetShards
from zephon.io.formats.bad_records import BAD_RECORD_POLICIES
from zephon.io.formats.base import ShardReader
from zephon.io.formats.memory import MEMORY, InMemoryShard, memory_shards
from zephon.io.options import StoreOptions, resolve_store
from zephon.io.shard_readers import ShardReaders
from zephon.io.storage.local_copy import Resources
from zephon.io.storage.location import Location

__all__ = ["Dataset"]


class Dataset(DatasetShards):
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
        on_bad_record: What a read does with a record that cannot be decoded at all (a JSONL
            line that is not UTF-8 JSON of an object): ``"raise"`` (default) a ``DataError``
            naming dataset, shard and line, or ``"skip"`` it, counted in
            ``metrics_snapshot()["losses"]``.
    """

    # -- construction -------------------------------------------------------------------------

    def __init__(self, name: str, fmt: str, *, location: Location | None = None,
                 catalog: Catalog | None = None, memory: dict[int, InMemoryShard] | None = None,
                 store_options: StoreOptions | None = None,
                 on_bad_record: str = "raise") -> None:
        super().__init__(name, fmt, location, catalog, memory)
        if on_bad_record not in BAD_RECORD_POLICIES:
            raise ValueError(f"dataset {name!r}: on_bad_record must be one of "
                             f"{BAD_RECORD_POLICIES}, got {on_bad_record!r}")
        self._on_bad_record = on_bad_record
        self._store_options = store_options
        self._runtime: ShardReaders | None = None
        self._runtime_lock = threading.Lock()

    @classmethod
    def from_path(cls, name: str, path: str | os.PathLike, *, fmt: str | None = None,
                  split: str | None = None, storage_options: dict[str, Any] | None = None,
                  on_bad_record: str = "raise") -> Dataset:
        """A dataset under a local directory or URL (``s3://``, ``gs://``, ``memory://`` ...).

        Discovery reads the dataset's own index files when it has them (no shard is opened),
        else lists the shards and counts their rows.

        Args:
            name: The dataset's name.
            path: A local directory or any fsspec URL; for Lance also a version's
                ``_versions/N.manifest`` file (read that older version).
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
        from zephon.io.formats.lance import pinned_manifest

        path, fmt, pin = pinned_manifest(name, os.fspath(path), fmt)  # a Lance version's file
        location = Location(path, dict(storage_options or {}))
        runtime = ShardReaders(Resources(resolve_store(None)))
        with pin:
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

    @property
    def path(self) -> str | None:
        """Where the dataset is read from: its root (a local path or URL), for Lance the
        manifest of the version discovery pinned; None for an in-memory dataset."""
        facts = (self._catalog.facts if self._catalog is not None else None) or ()
        pinned = [f["manifest"] for f in facts if isinstance(f, dict) and f.get("manifest")]
        return None if self._location is None else self._location.display(*pinned[:1])

    @property
    def on_bad_record(self) -> str:
        """``"raise"`` or ``"skip"``: what a read does with an undecodable record."""
        return self._on_bad_record

    # -- per-process readers ------------------------------------------------------------------

    def _rt(self) -> ShardReaders:
        rt = self._runtime
        if rt is None or rt.pid != os.getpid():
            with self._runtime_lock:
                rt = self._runtime
                if rt is None or rt.pid != os.getpid():  # first use, or a forked child
                    rt = self._runtime = ShardReaders(Resources(resolve_store(
                        self._store_options)))
        return rt

    def _reader(self, shard_id: int) -> Any:  # a ShardReader, with its format's capabilities
        rt = self._rt()
        return rt.get(int(shard_id), lambda sid: self._open(sid, rt.res),
                      lambda sid: self._after_open(rt, sid))

    def _after_open(self, rt: ShardReaders, sid: int) -> None:
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

    def _download_ahead(self, rt: ShardReaders, sid: int) -> None:
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

    # -- reads --------------------------------------------------------------------------------

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
        rows = np.asarray(rows, dtype=np.int64)
        return self._read(shard_id, lambda reader: reader.read_table(rows, cols))

    def _read(self, shard_id: int, read: Any) -> Any:
        """``read(reader)`` on the shard's open reader. A read that fails on a reader whose
        mapped file changed under it (``mapped_source``: a cache entry cut in place reads as
        zeros to the end of its last page, or as spans past the map) is retried once on a fresh
        reader, which checks the cache entry again and fetches the shard anew if it is
        damaged; any other failure is the data's and is raised."""
        reader = self._reader(shard_id)
        try:
            return read(reader)
        except Exception:  # bad data, or what a file cut under the map makes of it
            if not (self.format_of(shard_id).capabilities.mapped_source
                    and reader.source_changed()):
                raise
        self._rt().drop(int(shard_id), reader)
        return read(self._reader(shard_id))

    def read_ahead(self, shard_id: int, rows: np.ndarray) -> None:
        """A hint that ``rows`` (any order) of a shard are read next: a remote shard that
        opening would download whole starts downloading (``zephon/io/ahead/download_ahead.py``);
        a local shard of a format with the ``read_ahead`` capability (Parquet) starts decoding
        them on the read-ahead thread (``zephon/io/ahead/read_ahead.py``); anything else
        ignores it. Never changes what a read returns.

        Args:
            shard_id: The shard's id.
            rows: Row numbers within the shard (int64 array, any order).
        """
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
        remote shards ignore it.

        Args:
            shard_id: The shard's id.
            group: The row group's number in the shard's file, from 0 (``row_group_starts``
                gives their first rows).
        """
        if not self.format_of(shard_id).capabilities.row_groups:
            return
        self._reader(int(shard_id)).decode_ahead(int(group))

    def row_group_starts(self, shard_id: int) -> np.ndarray | None:
        """The first row of each row group of a shard whose format has row groups (Parquet),
        then its row count, from the footer of a file on this machine (once per process); None
        for other formats, for a remote shard not in the node cache yet (learning it would cost
        a request; asked again, it looks again) and for a file that cannot be read or whose rows
        differ from the catalog's (its reader reports that, naming it).

        Args:
            shard_id: The shard's id.

        Returns:
            int64 row numbers, one per row group plus the row count at the end, or None.
        """
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
        ``record_sizes`` capability: a JSONL record's line), None where it does not.

        Args:
            shard_id: The shard's id.
            rows: Row numbers within the shard, any order, repeats allowed.

        Returns:
            int64 byte counts aligned with ``rows`` (a JSONL line with its line break; of
            the decoded text for compressed JSONL), or None.
        """
        if not self.format_of(shard_id).capabilities.record_sizes:
            return None
        return self._reader(shard_id).record_bytes(np.asarray(rows, dtype=np.int64))

    def bad_rows(self, shard_id: int, rows: np.ndarray | Sequence[int]) -> np.ndarray:
        """Which of ``rows`` (bool mask) cannot be decoded at all (formats/bad_records.py); only
        formats with the ``bad_rows`` capability (JSONL lines) have such rows.

        Args:
            shard_id: The shard's id.
            rows: Row numbers within the shard, any order, repeats allowed.

        Returns:
            A bool mask aligned with ``rows``, True where the record is bad (all False for
            formats without bad rows).
        """
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
        rows = np.asarray(rows, dtype=np.int64)
        return self._read(shard_id, lambda reader: reader.read_payloads(rows))

    def warm(self, shard_ids: Iterable[int]) -> None:
        """Make shards ready for fast reads, as their format says (``ShardFormat.warm``):
        download remote shards (and decode compressed JSONL) into the node cache, line-index
        JSONL. Thread-safe; a no-op for memory.

        Args:
            shard_ids: The shards to warm (ids from ``ids()``), each in turn, in this thread.
        """
        res = self._rt().res
        for sid in shard_ids:
            self.format_of(sid).warm(self._source(sid), res)

    def close(self) -> None:
        """Close this process's open shard readers (they reopen on the next read)."""
        rt = self._runtime
        if rt is not None and rt.pid == os.getpid():
            rt.close()
