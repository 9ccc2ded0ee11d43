"""JSONL shards: random access through a line index, parsed by a kernel or Arrow's JSON reader.

Flat records of scalar values (the usual ``{"id": 17, "text": ..., "score": 0.53}``) are
decoded by the ``lineindex_records`` kernel straight from the memory map, in the requested
order, with no copy of the lines, and typed by ``flat_record_table`` as Arrow would. Any other
read, or one they decline, gathers the requested lines' byte spans (the ``lineindex`` kernel copies them out of a
memory map; remote ``ranges`` mode fetches each run of consecutive lines with one ranged GET),
parses them with ``pyarrow.json`` in one call and reorders with ``take``. When Arrow rejects
the lines (types that change between records, a line that is not an object, broken JSON) the
reader parses line by line with orjson, which also pinpoints the bad line. Arrow's reader takes
strings that are not UTF-8 as they are, so its tables are validated before they are believed:
such a line is reported like any other bad line (``BadRecordError``, bad_records.py), never
left for a later ``UnicodeDecodeError``. Absent keys versus explicit nulls: see records.py.
"""

from __future__ import annotations

import json
import mmap
import os

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.json as pj

from zephon._ext import kernel
from zephon.block import NotColumnar
from zephon.io.formats import records
from zephon.io.formats.bad_records import BadRecordError
from zephon.io.formats.jsonl_lines import compression_of
from zephon.io.formats.reader_checks import check_row_count, check_rows
from zephon.io.formats.records import (
    arrow_member_counts,
    flat_record_table,
    has_nested_objects,
    has_nulls,
    table_from_dicts,
    with_sparse,
)
from zephon.io.storage.local_copy import Resources, local_jsonl, remote_jsonl_index
from zephon.io.storage.shard_ref import ShardRef

__all__ = ["JsonlShardReader"]

_BOM = b"\xef\xbb\xbf"


class JsonlShardReader:
    """One JSONL shard opened in this process: its line index plus a byte source."""

    def __init__(self, ref: ShardRef, res: Resources) -> None:
        self.ref = ref
        self._arrow_wins = 0  # reads Arrow parsed / reads it rejected: when rejections
        self._arrow_losses = 0  # dominate, the shard's records are heterogeneous
        self._flat_wins = 0  # the same for the flat records kernel: when it keeps rejecting,
        self._flat_losses = 0  # the shard's records have other values
        remote = not ref.location.is_local
        self._ranges = (remote and res.store.remote_reads == "ranges"
                        and compression_of(ref.name) is None)
        self._bytes: np.ndarray | None = None
        self._mm: mmap.mmap | None = None  # the map behind ``_bytes``: its pages are released
        self._parsed = (1 << 62, 0, 0)  # (first, end, bytes) read since the last release
        self._path: str | None = None
        if self._ranges:
            self._offsets = remote_jsonl_index(ref, res)
        else:
            path, self._offsets = local_jsonl(ref, res)
            self._path, self._opened = path, _identity(path)
            self._bytes, self._mm = _map(path)
        self.rows = len(self._offsets) - 1
        check_row_count(ref, self.rows, "records")

    def close(self) -> None:
        self._bytes = self._mm = None  # the map closes when the last view of it is gone

    def _release(self, rows: np.ndarray) -> None:
        """Unmap the pages of the file that reads have parsed, once they add up to
        ``RELEASE_BYTES``. They are the page cache's (the kernel keeps them as long as it can),
        but while mapped they count in this process's memory (PSS): a worker reading shards
        forward held 40+ MiB of them. Values are copied out while parsing, so nothing refers to
        them; a later read maps them again from the cache. Only in worker processes
        (``release_parsed_pages``), where every worker maps the shards it reads: inline, a
        corpus read again and again is faster mapped (W1 over the bench corpus: 12% slower
        inline with releases, unchanged with 2 workers)."""
        if self._mm is None or not len(rows) or not _release_pages:
            return
        lo, hi = int(self._offsets[rows].min()), int(self._offsets[rows + 1].max())
        self._parsed = (min(lo, self._parsed[0]), max(hi, self._parsed[1]),
                        self._parsed[2] + int(self._offsets[rows + 1].sum()
                                              - self._offsets[rows].sum()))
        lo, hi, parsed = self._parsed
        if parsed >= RELEASE_BYTES:
            lo &= ~(mmap.PAGESIZE - 1)
            self._mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
            self._parsed = (1 << 62, 0, 0)

    def source_changed(self) -> bool:
        """Whether the mapped file was altered since it was opened (a cache entry truncated in
        place reads as zeros to the end of its page: not bad data, a changed file)."""
        if self._path is None:
            return False
        now = _identity(self._path)
        # also a file cut after it was checked and before it was mapped: its index ends at
        # the size the file had when it was decoded
        return now != self._opened or now is None or now[1] != int(self._offsets[-1])

    # -- byte spans ---------------------------------------------------------------------------

    def record_bytes(self, rows: np.ndarray) -> np.ndarray:
        """Bytes of each record's line (with its line break), from the line index."""
        check_rows(rows, self.rows, self.ref.label, "records")
        return self._offsets[rows + 1] - self._offsets[rows]

    def _gather(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The lines of ``rows`` laid end to end (in the given order) and their offsets."""
        starts = np.ascontiguousarray(self._offsets[rows], dtype=np.int64)
        ends = np.ascontiguousarray(self._offsets[rows + 1], dtype=np.int64)
        if not self._ranges:
            out = pa.allocate_buffer(int((ends - starts).sum()))  # see _read_flat
            return kernel("lineindex").gather_spans(self._bytes, starts, ends,
                                                    np.frombuffer(out, dtype=np.uint8))
        uniq = np.unique(rows)
        cut = np.flatnonzero(np.diff(uniq) != 1) + 1
        first = uniq[np.concatenate(([0], cut))]
        last = uniq[np.concatenate((cut - 1, [len(uniq) - 1]))]
        try:
            pieces = self.ref.location.read_ranges(self.ref.name, self._offsets[first].tolist(),
                                                   self._offsets[last + 1].tolist())
        except FileNotFoundError as e:
            raise self.ref.missing(e) from e
        run_bytes = np.frombuffer(b"".join(pieces), dtype=np.uint8)
        run_base = np.concatenate(([0], np.cumsum([len(p) for p in pieces])))
        run_of = np.searchsorted(first, rows, side="right") - 1
        local = starts - self._offsets[first][run_of] + run_base[run_of]
        return kernel("lineindex").gather_spans(run_bytes, local, local + (ends - starts))

    def _line_number(self, row: int) -> int | None:
        """1-based physical line of a record (blank lines count), when the bytes are local."""
        if self._bytes is None:
            return None
        start, end = int(self._offsets[row]), int(self._offsets[row + 1])
        span = self._bytes[start:end]
        lead = np.flatnonzero((span != 32) & (span != 9) & (span != 13) & (span != 10))
        first = start + (int(lead[0]) if len(lead) else 0)
        return int(np.count_nonzero(self._bytes[:first] == 10)) + 1

    def _error(self, message: str, row: int) -> BadRecordError:
        line = self._line_number(row)
        return BadRecordError(message, dataset=self.ref.dataset, shard=self.ref.display,
                              line=line, row=None if line is not None else row + 1)

    # -- parsing ------------------------------------------------------------------------------

    def _decode(self, line: bytes, row: int) -> dict:
        """One record line as a dict, or BadRecordError naming it."""
        if row == 0 and line.lstrip().startswith(_BOM):
            line = line.lstrip()[len(_BOM):]
        try:
            obj = orjson.loads(line)
            if records.LONG_DIGITS.search(line):  # orjson makes an integer past 64 bits a float
                obj = json.loads(line)
        except orjson.JSONDecodeError as e:
            try:  # the stdlib also takes NaN / Infinity and integers beyond 64 bits
                obj = json.loads(line)
            except ValueError:
                raise self._error(_utf8_problem(line) or f"malformed JSON: {e}", row) from None
            if (bad := records.lone_surrogate(obj)) is not None:  # json takes "\\ud800"; UTF-8 not
                raise self._error(f"a string holds the lone surrogate {bad}: no text", row) from e
        if type(obj) is not dict:
            raise self._error(f"record is not a JSON object (found {type(obj).__name__})", row)
        return obj

    def _parse_python(self, buf: np.ndarray, offs: np.ndarray, rows: np.ndarray) -> list[dict]:
        raw = buf.tobytes()
        return [self._decode(raw[a:b], int(r))
                for a, b, r in zip(offs[:-1].tolist(), offs[1:].tolist(), rows.tolist())]

    def bad_rows(self, rows: np.ndarray) -> np.ndarray:
        """Which of ``rows`` cannot be decoded (bool mask): each line judged on its own."""
        rows = np.asarray(rows, dtype=np.int64)
        check_rows(rows, self.rows, self.ref.label, "records")
        bad = np.zeros(len(rows), dtype=bool)
        if not len(rows):
            return bad
        buf, offs = self._gather(rows)
        raw = buf.tobytes()
        for i, (a, b, r) in enumerate(zip(offs[:-1].tolist(), offs[1:].tolist(), rows.tolist())):
            try:
                self._decode(raw[a:b], r)
            except BadRecordError:
                bad[i] = True
        return bad

    def _parse_arrow(self, buf: np.ndarray, n: int) -> pa.Table | None:
        source = pa.py_buffer(buf)
        # 1 MiB blocks parse in parallel; Arrow unifies the blocks' inferred types
        opts = pj.ReadOptions(use_threads=True, block_size=1 << 20)
        try:
            table = pj.read_json(pa.BufferReader(source), read_options=opts)
            if table.num_rows != n:  # two objects on one line: let the line parser say where
                return None
            if any(_has_timestamp(f.type) for f in table.schema):
                # Arrow turns ISO-8601 strings into timestamps; records hold strings
                schema = pa.schema([f.with_type(_no_timestamps(f.type)) for f in table.schema])
                table = pj.read_json(pa.BufferReader(source), read_options=opts,
                                     parse_options=pj.ParseOptions(explicit_schema=schema))
            table.validate(full=True)  # strings and keys are not checked for UTF-8 while parsing
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError,
                UnicodeDecodeError):
            return None
        return table

    def _sparse(self, table: pa.Table, buf: np.ndarray, offs: np.ndarray,
                rows: np.ndarray) -> list[str]:
        """Columns whose nulls are absent keys; NotColumnar when that cannot be exact."""
        if not has_nulls(table):
            return []
        k = kernel("lineindex")
        starts, ends = offs[:-1], offs[1:]
        sparse = []
        absent_top = np.zeros(table.num_rows, dtype=np.int64)
        for name in table.column_names:
            col = table.column(name)
            if not col.null_count:
                continue
            null_rows = np.flatnonzero(np.asarray(col.is_null().to_numpy(zero_copy_only=False)))
            key = np.frombuffer(orjson.dumps(name)[1:-1], dtype=np.uint8)
            found = k.key_presence(buf, np.ascontiguousarray(starts[null_rows]),
                                   np.ascontiguousarray(ends[null_rows]), key)
            for j in np.flatnonzero(found == 2).tolist():  # key written with escapes: parse
                i = int(null_rows[j])
                obj = self._parse_python(buf[starts[i]:ends[i]], np.array([0, ends[i] - starts[i]]),
                                         rows[i:i + 1])[0]
                found[j] = 1 if name in obj else 0
            absent = found == 0
            if absent.any():
                if not absent.all():
                    raise NotColumnar(f"column {name!r} holds both absent keys and nulls")
                sparse.append(name)
                absent_top[null_rows] += 1
        if has_nested_objects(table.schema):
            members = k.count_members(buf, offs)
            if (arrow_member_counts(table) - members - absent_top).any():
                raise NotColumnar("nested objects differ in their keys; Arrow would add nulls")
        return sparse

    def _read_flat(self, rows: np.ndarray) -> pa.Table | None:
        """The rows (any order, repeats allowed) when all are flat objects of scalar values
        that ``flat_record_table`` can type exactly as the general path would."""
        if self._flat_losses >= 2 and self._flat_wins < self._flat_losses:
            return None
        if self._ranges:
            src, offs = self._gather(rows)
            starts, ends = offs[:-1], offs[1:]
        else:
            src, starts, ends = self._bytes, self._offsets[rows], self._offsets[rows + 1]
        # decoded values fit in the spans' size; Arrow's pool, unlike malloc, keeps such
        # megabyte buffers mapped between reads instead of faulting fresh pages every time
        scratch = pa.allocate_buffer(int((ends - starts).sum()))
        parsed = kernel("lineindex_records").flat_records(
            src, starts, ends, np.frombuffer(scratch, dtype=np.uint8))
        table = None
        if parsed is not None:
            keys, values, vstart, vend, kinds, ints = parsed
            order = _column_order(rows, vstart, vend)
            if order is not None:
                table = flat_record_table([keys[j] for j in order], values, vstart[order],
                                          vend[order], kinds[order], ints[order])
        if table is None:
            self._flat_losses += 1
        else:
            self._flat_wins += 1
        return table

    # -- reads --------------------------------------------------------------------------------

    def read_table(self, rows: np.ndarray, columns: list[str] | None = None) -> pa.Table:
        rows = np.asarray(rows, dtype=np.int64)
        check_rows(rows, self.rows, self.ref.label, "records")
        if len(rows) == 0:
            return pa.table({})
        table = self._read_flat(rows)
        if table is None:
            table = self._read_general(rows)
        self._release(rows)
        if columns is not None:
            table = table.select([c for c in columns if c in table.column_names])
        return table

    def _read_general(self, rows: np.ndarray) -> pa.Table:
        """Arrow's reader (or orjson when Arrow rejects the lines) over the unique rows."""
        if len(rows) > 1 and not (np.diff(rows) > 0).all():
            uniq, inverse = np.unique(rows, return_inverse=True)
        else:
            uniq, inverse = rows, None
        buf, offs = self._gather(uniq)
        try_arrow = self._arrow_losses < 2 or self._arrow_wins >= self._arrow_losses
        table = self._parse_arrow(buf, len(uniq)) if try_arrow else None
        if table is not None and records.beyond_int64(table):
            table = None  # Arrow read ints past int64 as doubles (5 as 5.0): json's are exact
        if table is not None:
            self._arrow_wins += 1
            table = with_sparse(table, self._sparse(table, buf, offs, uniq))
        else:
            payloads = self._parse_python(buf, offs, uniq)  # raises DataError on bad lines
            self._arrow_losses += try_arrow
            table = table_from_dicts(payloads)
        if inverse is not None:
            table = table.take(pa.array(inverse.ravel()))
        return table

    def read_payloads(self, rows: np.ndarray) -> list[dict]:
        rows = np.asarray(rows, dtype=np.int64)
        check_rows(rows, self.rows, self.ref.label, "records")
        if len(rows) == 0:
            return []
        buf, offs = self._gather(rows)
        self._release(rows)  # the lines were copied out (``_gather``)
        return self._parse_python(buf, offs, rows)


RELEASE_BYTES = 1 << 20  # parsed bytes of a shard between two releases of its mapped pages
_release_pages = False


def release_parsed_pages() -> None:
    """From now on, JSONL readers of this process unmap the pages they have parsed (worker
    processes and Ray actors call this when they start; see ``JsonlShardReader._release``)."""
    global _release_pages
    _release_pages = True


def _utf8_problem(line: bytes) -> str | None:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"not valid UTF-8 (byte 0x{line[e.start]:02x} at byte {e.start + 1} of the line)"
    return None


def _column_order(rows: np.ndarray, vstart: np.ndarray, vend: np.ndarray) -> np.ndarray | None:
    """Key order of the general path, which parses the unique rows ascending: by the first row
    holding the key, then by member position in that record. Values are laid out in member
    order (numbers and literals as written, so never empty), so (start, end) gives it, except
    between empty strings side by side: None."""
    k = len(vstart)
    if k < 2 or len(rows) < 2 or (np.diff(rows) > 0).all():
        return np.arange(k)  # the kernel's first-appearance order already is that
    first_row = np.where(vstart >= 0, rows, np.iinfo(np.int64).max).min(axis=1)
    span = np.argmax(rows == first_row[:, None], axis=1)  # one span of that row for all keys
    start, end = vstart[np.arange(k), span], vend[np.arange(k), span]
    order = np.lexsort((end, start, first_row))
    key = np.stack((first_row[order], start[order], end[order]))
    if (key[:, 1:] == key[:, :-1]).all(axis=0).any():
        return None
    return order


def _identity(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _map(path: str) -> tuple[np.ndarray, mmap.mmap | None]:
    """The file's bytes, memory-mapped read-only, and the map (None for an empty file)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return np.empty(0, dtype=np.uint8), None
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return np.frombuffer(mm, dtype=np.uint8), mm


def _has_timestamp(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_timestamp(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_timestamp(t.value_type)
    return False


def _no_timestamps(t: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(t):
        return pa.string()
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_no_timestamps(t.field(i).type))
                          for i in range(t.num_fields)])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_no_timestamps(t.value_type)))
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_no_timestamps(t.value_type)))
    return t
