"""Parquet shards: row-group aware reads over a per-process LRU of decoded row groups.

A read maps rows to row groups, decodes only the row groups (and columns) it needs that are not
cached yet (row_group_cache.py), and gathers the rows with ``take``. Random access inside a shard
(``shuffle_within_shard``) therefore decodes each row group once while it stays in the LRU,
instead of once per sample.

Remote shards: a local copy in the node cache is used when present. Otherwise (``auto``) row
groups are fetched as byte ranges (footer + column chunks) until this process has fetched half
the shard's bytes; then the whole shard is downloaded once into the cache, since a pass that
wants most of a shard is cheaper as one sequential download shared by every process.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from zephon.io.ahead import read_ahead
from zephon.io.errors import DataError
from zephon.io.formats.reader_checks import check_columns, check_row_count, check_rows
from zephon.io.formats.row_group_cache import row_group_cache
from zephon.io.storage.local_copy import Resources, cached_copy, whole_local_copy
from zephon.io.storage.shard_ref import ShardRef
from zephon.payload_values import mark, payload_rows
from zephon.ragged_columns import take_table

__all__ = ["ParquetShardReader", "group_starts"]

READ_AHEAD = 2  # row groups decoded ahead of a forward-moving reader (see ahead/read_ahead.py)


class ParquetShardReader:
    """One Parquet shard opened in this process."""

    def __init__(self, ref: ShardRef, res: Resources) -> None:
        self.ref = ref
        self.res = res
        self._lock = threading.Lock()
        limit = res.store.rg_cache_bytes
        self._cache = row_group_cache(limit) if limit > 0 else None
        self._remote_file: Any = None
        self._fetched = 0
        self._thread_files = threading.local()  # each thread's own handle (_thread_file)
        self._path: str | None = None  # the local file, when there is one
        # cache key -> its decode in flight (on a read-ahead thread or a reading thread)
        self._ahead: dict[tuple, Future] = {}
        self._ahead_lock = threading.Lock()
        # row groups read to the end (and dropped) in this pass: no guess decodes them again.
        # Readers on several threads (the threads runner) finish row groups out of order, and
        # a forward guess after the slower one's read re-decoded the row group the faster one
        # had just passed (21 of 120 decodes wasted, fetch + batch over one dataset)
        self._passed: set[int] = set()
        # the row after the previous read's last one: a read starting there moves forward (a
        # first read from row 0 too)
        self._next_row = 0
        self._open()
        self.rg_starts = group_starts(self._file.metadata)
        self.rows = int(self.rg_starts[-1])
        self.columns = list(self._file.schema_arrow.names)
        check_row_count(ref, self.rows)

    def _open(self) -> None:
        ref, mode = self.ref, self.res.store.remote_reads
        path = None
        if ref.location.is_local or mode == "whole":
            path = whole_local_copy(ref, self.res)
        else:
            path = cached_copy(ref, self.res)
        try:
            if path is not None:
                self._file = _open_local(path)
                self._local = True
                self._path = path
                return
            try:
                self._remote_file = ref.location.open(ref.name, "rb", cache_type="none")
            except TypeError:  # filesystems without block caches
                self._remote_file = ref.location.open(ref.name, "rb")
            self._file = pq.ParquetFile(self._remote_file)
            self._local = False
        except FileNotFoundError as e:
            raise ref.missing(e) from e
        except pa.ArrowInvalid as e:
            raise DataError(f"not a readable Parquet file (corrupt or truncated footer?): {e}",
                            dataset=ref.dataset, shard=ref.display) from e

    def close(self) -> None:
        if self._remote_file is not None:
            self._remote_file.close()
            self._remote_file = None

    def _decode(self, groups: list[int], columns: list[str] | None,
                file: pq.ParquetFile | None = None) -> list[pa.Table]:
        out = []
        for g in groups:  # one call per group: read_row_groups([...]) is several times slower
            try:
                # marked: record payloads hold NumPy values (payload_values.py)
                out.append(mark((file or self._file).read_row_group(g, columns=columns,
                                                                    use_threads=False)))
            except FileNotFoundError as e:
                raise self.ref.missing(e) from e
            except (pa.ArrowInvalid, pa.ArrowIOError) as e:
                first = int(self.rg_starts[g]) + 1
                raise DataError(f"cannot decode row group {g}: {e}", dataset=self.ref.dataset,
                                shard=self.ref.display, row=first) from e
        if not self._local:
            self._account(groups, columns)
        return out

    def _account(self, groups: list[int], columns: list[str] | None) -> None:
        """Count fetched bytes; past half the shard, switch to a whole local copy."""
        meta = self._file.metadata
        wanted = None if columns is None else set(columns)
        for g in groups:
            rg = meta.row_group(g)
            for c in range(rg.num_columns):
                col = rg.column(c)
                if wanted is None or col.path_in_schema.split(".")[0] in wanted:
                    self._fetched += col.total_compressed_size
        if self.res.store.remote_reads == "auto" and self._fetched * 2 >= max(self.ref.size, 1):
            path = whole_local_copy(self.ref, self.res)
            self.close()
            self._file = _open_local(path)
            self._local = True
            self._path = path

    def _groups(self, groups: np.ndarray, columns: list[str] | None,
                per_group: list[np.ndarray] | None = None,
                forward: bool = False) -> list[pa.Table]:
        """The decoded row groups ``groups``. ``per_group`` (the rows read from each) lets the
        cache drop a row group once every row of it has been read; ``forward`` (the read
        continues the previous one) starts decoding the row groups after ``groups``."""
        key_cols = None if columns is None else tuple(columns)
        found: dict[int, pa.Table] = {}
        if self._cache is None:
            if self._local:
                return self._decode(groups.tolist(), columns, self._thread_file())
            with self._lock:
                return self._decode(groups.tolist(), columns)
        url, name = self.ref.location.url, self.ref.name
        if self._passed:  # a passed row group read again: a new pass begins
            self._new_pass_if_passed(groups.tolist())
        keys: dict[int, tuple] = {}  # the cache entry each row group was served from
        for g in groups.tolist():
            keys[g] = key = (url, name, g, key_cols)
            t = self._cache.get(key)
            if t is None and key_cols is not None:  # a full decode serves any projection
                full = self._cache.get((url, name, g, None))
                if full is not None:
                    t, keys[g] = full.select(list(key_cols)), (url, name, g, None)
            if t is not None:
                found[g] = t
        missing = [g for g in groups.tolist() if g not in found]
        if missing:
            found.update(self._decode_missing(missing, columns, key_cols))
        if per_group is not None:
            with self._ahead_lock:  # dropped and marked passed at once, as a guess sees them
                for g, sel in zip(groups.tolist(), per_group):
                    if self._cache.note_reads(keys[g], sel):
                        self._passed.add(g)
        self._read_ahead(int(groups[-1]), columns, key_cols, forward)
        return [found[g] for g in groups.tolist()]

    def _decode_missing(self, missing: list[int], columns: list[str] | None,
                        key_cols) -> dict[int, pa.Table]:
        """Decode row groups the cache lacks, once per process: one that another thread (a
        read-ahead thread, another thread reading this shard) is decoding is waited for, not
        decoded a second time. Each thread decodes through its own handle, in parallel."""
        url, name = self.ref.location.url, self.ref.name
        out: dict[int, pa.Table] = {}
        if not self._local:  # one remote handle: reads of it take turns
            with self._lock:
                decoded = self._decode(missing, columns)
            for g, t in zip(missing, decoded):
                self._cache.put((url, name, g, key_cols), t)
                out[g] = t
            return out
        mine: list[tuple[int, tuple, Future]] = []
        theirs: dict[int, Future] = {}
        with self._ahead_lock:
            for g in missing:
                key = (url, name, g, key_cols)
                fut = self._ahead.get(key)
                if fut is not None:
                    theirs[g] = fut
                elif (t := self._cache.get(key)) is not None:  # finished since the first look
                    out[g] = t
                else:
                    self._ahead[key] = fut = Future()
                    mine.append((g, key, fut))
        if mine:
            try:
                decoded = self._decode([g for g, _, _ in mine], columns, self._thread_file())
            except BaseException as e:
                self._settle(mine, None, e if isinstance(e, Exception) else
                             RuntimeError("decode interrupted"))
                raise
            for (g, key, _), t in zip(mine, decoded):
                self._cache.put(key, t)  # before the future goes: a late look finds one of them
                out[g] = t
            self._settle(mine, decoded, None)
        for g, fut in theirs.items():
            try:
                out[g] = fut.result()
            except Exception:  # decoded again here, which reports the error with the shard's name
                out[g] = self._decode([g], columns, self._thread_file())[0]
        return out

    def _settle(self, mine: list, decoded: list | None, error: Exception | None) -> None:
        with self._ahead_lock:
            for _, key, _ in mine:
                self._ahead.pop(key, None)
        for i, (_, _, fut) in enumerate(mine):
            if error is None:
                fut.set_result(decoded[i])
            else:
                fut.set_exception(error)

    def _read_ahead(self, last: int, columns: list[str] | None, key_cols,
                    forward: bool) -> None:
        """Keep the next ``READ_AHEAD`` row groups decoding while reads move forward through a
        local shard (remote reads fetch only what is asked)."""
        if forward:
            self._schedule(last + 1, columns, key_cols)
        # finished decodes the reader has passed by are in the cache already; a running one
        # stays listed, so a read that wants its row group waits for it instead of decoding again
        with self._ahead_lock:
            for key in [k for k, f in self._ahead.items() if k[2] <= last and f.done()]:
                del self._ahead[key]

    def read_ahead_rows(self, rows: np.ndarray) -> None:
        """A hint from the pointer stream: the next reads of this shard start at the smallest
        of ``rows``. Start decoding the row groups from there, so that a read which moves to
        this shard (or jumps inside it) finds them decoded too."""
        if len(rows):
            first = int(np.searchsorted(self.rg_starts, int(rows.min()), side="right")) - 1
            self._new_pass_if_passed([first])  # the pointer stream says it is read again
            self._schedule(first, None, None)

    def decode_ahead(self, group: int) -> None:
        """Decode row group ``group`` (all columns: that serves any projection) into the
        cache on the read-ahead thread, unless it is there or on its way. Not a guess: asked
        for where guesses are off (``engine/process/ownership.py``); a row group of this pass already
        passed by means a new pass."""
        if not self._local or self._cache is None or not 0 <= group < len(self.rg_starts) - 1:
            return
        self._new_pass_if_passed([group])
        self._submit_ahead(group, None, None)

    def _new_pass_if_passed(self, groups: list[int]) -> None:
        with self._ahead_lock:
            if not self._passed.isdisjoint(groups):
                self._passed.clear()

    def _submit_ahead(self, group: int, columns: list[str] | None, key_cols) -> None:
        """Decode ``group`` on the read-ahead thread unless it is cached, on its way or passed."""
        key = (self.ref.location.url, self.ref.name, group, key_cols)
        with self._ahead_lock:
            if key not in self._ahead and key not in self._cache and group not in self._passed:
                self._ahead[key] = read_ahead.submit(self._decode_into_cache, group, columns,
                                                     key)

    def _schedule(self, first: int, columns: list[str] | None, key_cols) -> None:
        if not self._local or not read_ahead.enabled or self._cache is None:
            return
        for nxt in range(max(first, 0), min(first + READ_AHEAD, len(self.rg_starts) - 1)):
            self._submit_ahead(nxt, columns, key_cols)

    def _thread_file(self) -> pq.ParquetFile:
        """This thread's handle on the local file: a ``ParquetFile`` is not safe to share
        between threads, and one shared handle behind a lock let a shard decode on only one
        thread at a time (read-ahead threads, the threads runner's workers, a user's own)."""
        handles = self._thread_files.__dict__
        if handles.get("path") != self._path:
            handles["file"] = _open_local(self._path, self._file.metadata)
            handles["path"] = self._path
        return handles["file"]

    def _decode_into_cache(self, group: int, columns: list[str] | None, key: tuple) -> pa.Table:
        """On a read-ahead thread, through its own file handle."""
        table = self._decode([group], columns, self._thread_file())[0]
        self._cache.put(key, table)
        return table

    def read_table(self, rows: np.ndarray, columns: list[str] | None = None) -> pa.Table:
        rows = np.asarray(rows, dtype=np.int64).ravel()
        check_rows(rows, self.rows, self.ref.label)
        check_columns(columns, self.columns, self.ref.label)
        if len(rows) == 0:
            empty = mark(self._file.schema_arrow.empty_table())
            return empty if columns is None else empty.select(columns)
        rg_of = np.searchsorted(self.rg_starts, rows, side="right") - 1
        groups = np.unique(rg_of)
        local = rows - self.rg_starts[rg_of]
        if len(groups) == 1:
            order, per_group = None, [local]
        else:  # each row group's rows, in the order asked
            order = np.argsort(rg_of, kind="stable")
            cuts = np.searchsorted(rg_of[order], groups, side="left").tolist() + [len(rows)]
            per_group = [local[order[a:b]] for a, b in zip(cuts[:-1], cuts[1:])]
        # only a reader that continues where it stopped gets the next row groups decoded
        # ahead: a guess after a random read would decode again row groups it has used up
        forward = int(rows.min()) == self._next_row
        self._next_row = int(rows.max()) + 1
        tables = self._groups(groups, columns, per_group, forward)
        if order is None:
            return _rows_of(tables[0], local)
        # take inside each row group, then reorder the small result: a take over the
        # concatenation would first copy every row group involved
        pieces = [_rows_of(t, sel) for t, sel in zip(tables, per_group)]
        if (np.diff(rows) > 0).all():  # ascending (the usual sequential read): no reorder
            return pa.concat_tables(pieces)
        inverse = np.empty(len(rows), dtype=np.int64)
        inverse[order] = np.arange(len(rows), dtype=np.int64)
        return take_table(pa.concat_tables(pieces), inverse)

    def read_payloads(self, rows: np.ndarray) -> list[dict]:
        table = self.read_table(rows)
        return payload_rows(table, table.column_names)


def group_starts(meta: pq.FileMetaData) -> np.ndarray:
    """The first row of each row group, then the file's row count (int64)."""
    counts = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    return np.concatenate(([0], np.cumsum(counts, dtype=np.int64))).astype(np.int64)


def _open_local(path: str, metadata: Any = None) -> pq.ParquetFile:
    """A local shard, memory-mapped. Without pre-buffering: that coalesces column-chunk reads
    into buffers of its own, which pays off for remote files; over a mapping it is one more
    pass over the bytes (decoding a row group of 2 KB documents took ~5% more CPU with it)."""
    return pq.ParquetFile(path, memory_map=True, pre_buffer=False, metadata=metadata)


def _rows_of(table: pa.Table, local: np.ndarray) -> pa.Table:
    """Rows of one decoded row group: a zero-copy slice for a contiguous run."""
    if len(local) and (np.diff(local) == 1).all():
        return table.slice(int(local[0]), len(local))
    return take_table(table, local)
