"""JSONL line indexes: int64 byte offsets of every record line, built once per shard.

An index is ``offsets`` with n + 1 entries; record i is ``bytes[offsets[i]:offsets[i+1]]``.
Whitespace-only lines are not records: they stay attached to the record before them (leading
ones to the first), so spans tile the file and JSON parsers skip the extra whitespace.

Scanning runs the ``lineindex`` kernel over 16 MiB chunks of a stream, so a shard is indexed in
the same pass that downloads or decompresses it; indexes are stored as ``.npy`` files in the
node cache keyed by the shard's identity and version, so no process rescans a shard it has seen.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import threading
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from zephon._ext import kernel
from zephon.io.errors import DataError
from zephon.io.storage.durable import write_durably

__all__ = ["CHUNK", "compression_of", "decoded_reader", "scan_stream", "load_or_build"]

CHUNK = 16 << 20
_GZIP = (".gz", ".gzip")
_ZSTD = (".zst", ".zstd")


def compression_of(name: str) -> str | None:
    lower = name.lower()
    if lower.endswith(_GZIP):
        return "gzip"
    if lower.endswith(_ZSTD):
        return "zstd"
    return None


class _ZstdReader:
    """Streaming zstd decoder that notices truncation (a frame that never ends)."""

    def __init__(self, raw: BinaryIO) -> None:
        import zstandard

        self._raw = raw
        self._dctx = zstandard.ZstdDecompressor()
        self._dobj = self._dctx.decompressobj()
        self._in_frame = False
        self._error = zstandard.ZstdError

    def read(self, n: int) -> bytes:
        out: list[bytes] = []
        size = 0
        while size < n:
            data = self._raw.read(CHUNK)
            if not data:
                if self._in_frame:
                    raise EOFError("zstd stream ended inside a frame (truncated file)")
                break
            while data:
                self._in_frame = True
                piece = self._dobj.decompress(data)
                if piece:
                    out.append(piece)
                    size += len(piece)
                if self._dobj.eof:
                    data = self._dobj.unused_data
                    self._dobj = self._dctx.decompressobj()
                    self._in_frame = False
                else:
                    data = b""
        return b"".join(out)


def decoded_reader(raw: BinaryIO, name: str) -> Any:
    """A ``read(n)`` view of a shard's records, decompressing ``.gz`` / ``.zst`` on the fly."""
    kind = compression_of(name)
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if kind == "zstd":
        return _ZstdReader(raw)
    return raw


def scan_stream(read: Callable[[int], bytes], sink: Callable[[bytes], Any] | None = None,
                *, dataset: str | None = None, shard: str | None = None) -> np.ndarray:
    """Offsets of the records in a stream, feeding each chunk to ``sink`` (e.g. a cache file).

    Decompression failures become DataError naming the shard.
    """
    k = kernel("lineindex")
    starts: list[np.ndarray] = []
    line_start, has_content = 0, False
    total = 0
    while True:
        try:
            chunk = read(CHUNK)
        except (EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise DataError(f"truncated or corrupt compressed data after {total} decoded "
                            f"bytes: {e}", dataset=dataset, shard=shard) from e
        except Exception as e:
            if type(e).__name__ == "ZstdError":
                raise DataError(f"corrupt zstd data after {total} decoded bytes: {e}",
                                dataset=dataset, shard=shard) from e
            raise
        if not chunk:
            break
        if sink is not None:
            sink(chunk)
        s, line_start, has_content = k.scan_line_starts(
            np.frombuffer(chunk, dtype=np.uint8), total, line_start, has_content)
        if len(s):
            starts.append(s)
        total += len(chunk)
    return finish_offsets(starts, total)


def finish_offsets(starts: list[np.ndarray], total: int) -> np.ndarray:
    if not starts:
        return np.zeros(1, dtype=np.int64)
    offsets = np.concatenate(starts + [np.array([total], dtype=np.int64)])
    offsets[0] = 0  # leading blank lines belong to the first record
    return offsets


def scan_file(path: str | os.PathLike, *, dataset: str | None = None,
              shard: str | None = None) -> np.ndarray:
    with open(path, "rb") as f:
        return scan_stream(f.read, dataset=dataset, shard=shard)


def save_index(path: Path, offsets: np.ndarray) -> None:
    """Write atomically and durably, with its integrity record (``<name>.sum``: the file's
    size, mtime and a checksum of the index); a failure to persist (read-only cache, full
    disk) only costs a rescan."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        sum_path(path).unlink(missing_ok=True)  # no record vouches for a half-replaced index
        write_durably(path, lambda f: np.save(f, offsets))
        st = os.stat(path)
        record = f"{st.st_size} {st.st_mtime_ns} {_checksum(offsets)}\n".encode()
        write_durably(sum_path(path), lambda f: f.write(record))
    except OSError:
        pass


def sum_path(path: Path) -> Path:
    """Where the integrity record of the index at ``path`` is kept."""
    return path.with_name(path.name + ".sum")


def _checksum(offsets: np.ndarray) -> str:
    return hashlib.sha1(memoryview(np.ascontiguousarray(offsets, dtype=np.int64))).hexdigest()


# np.load parses the .npy header with ast.literal_eval, which CPython 3.11.7 cannot run from
# two threads at once ("AST constructor recursion depth mismatch"); discovery loads indexes
# from a thread pool, so headers are parsed one at a time.
_NPY_LOCK = threading.Lock()


def load_index(path: Path) -> tuple[np.ndarray | None, str | None]:
    """(offsets, None), or (None, why it cannot be used); (None, None) when there is none.
    An index is believed only when its integrity record (``save_index``) matches it: an
    edited, truncated or replaced index is rebuilt instead of blaming the data."""
    try:
        with _NPY_LOCK:
            offsets = np.load(path, mmap_mode="r", allow_pickle=False)
        st = os.stat(path)
    except FileNotFoundError:
        return None, None
    except (ValueError, OSError, EOFError) as e:
        return None, f"cannot be read ({e})"
    if offsets.dtype != np.int64 or offsets.ndim != 1 or len(offsets) == 0:
        return None, f"is not a line index (dtype {offsets.dtype}, shape {offsets.shape})"
    try:
        record = sum_path(path).read_text().split()
    except (OSError, UnicodeDecodeError):
        record = []
    if len(record) != 3:
        return None, "has no integrity record"
    if record[:2] != [str(st.st_size), str(st.st_mtime_ns)] or record[2] != _checksum(offsets):
        return None, "does not match its integrity record (size, mtime, checksum): altered"
    return offsets, None


def index_problem(offsets: np.ndarray, data_bytes: int | None) -> str | None:
    """Why ``offsets`` cannot be the line index of a file of ``data_bytes`` bytes, or None.
    Spans past the end would read outside the file ("span ... outside a buffer")."""
    if int(offsets[0]) != 0:
        return f"starts at offset {int(offsets[0])}, not 0"
    if data_bytes is not None and len(offsets) > 1 and int(offsets[-1]) != data_bytes:
        return f"ends at offset {int(offsets[-1])} of a file of {data_bytes} bytes"
    if len(offsets) > 2 and not bool((offsets[1:] >= offsets[:-1]).all()):
        return "has offsets that go backwards"
    return None


def load_or_build(index_path: Path | None, build: Callable[[], np.ndarray], *,
                  data_bytes: int | None = None, label: str | None = None) -> np.ndarray:
    """The stored index if it fits the data (``data_bytes``: the size of the file it
    indexes), else ``build()`` it and store it; a stored index that does not fit is replaced
    with a warning naming it (``label``: dataset and shard)."""
    if index_path is not None:
        found, problem = load_index(index_path)
        if found is not None:
            problem = index_problem(found, data_bytes)
            if problem is None:
                return found
        if problem is not None:
            warnings.warn(f"{label or 'JSONL shard'}: cached line index {index_path} {problem}; "
                          "rebuilding it", RuntimeWarning, stacklevel=3)
            index_path.unlink(missing_ok=True)
            sum_path(index_path).unlink(missing_ok=True)
    offsets = build()
    if index_path is not None:
        save_index(index_path, offsets)
    return offsets
