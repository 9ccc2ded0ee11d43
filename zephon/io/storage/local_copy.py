"""Local copies of shards: read in place when local, else prepared once in the node cache.

A local uncompressed file is read where it lies (its line index goes to the cache). Compressed
JSONL and remote shards are copied into the cache in one streaming pass that downloads,
decompresses and line-indexes together; every other process on the machine then reuses the
copy (see cache.py for the locking and the check records).

What is fetched is checked before the cache keeps it, and refusals that retrying cannot cure are
raised at once, named (fetch_checks.py). A cached line index is used only if it fits the file it
indexes (formats/jsonl_lines.py).
"""

from __future__ import annotations

import gzip
import io
import os
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from zephon.io import fetch_timing
from zephon.io.errors import DataError, ShardMissingError
from zephon.io.formats.jsonl_lines import (
    compression_of,
    decoded_reader,
    load_or_build,
    save_index,
    scan_file,
    scan_stream,
)
from zephon.io.options import ResolvedStore
from zephon.io.storage.cache import ShardCache, cache_for, entry_key
from zephon.io.storage.fetch_checks import Part, Source, refusals, store_md5
from zephon.io.storage.location import with_retries
from zephon.io.storage.shard_ref import ShardRef

__all__ = ["Resources", "cached_copy", "decoded_local_copy", "local_jsonl",
           "remote_jsonl_index", "whole_local_copy"]


class Resources:
    """Per-process handles shared by a dataset's readers: resolved options and the cache."""

    def __init__(self, store: ResolvedStore) -> None:
        self.store = store
        self._cache: ShardCache | None = None
        self._lock = threading.Lock()

    @property
    def cache(self) -> ShardCache:
        if self._cache is None:
            with self._lock:
                if self._cache is None:
                    s = self.store  # an unwritable root falls back to a private cache
                    self._cache = cache_for(s.cache_root, s.cache_limit, s.min_slack_bytes,
                                            s.max_slack_bytes)
        return self._cache

    def retry(self, fn: Any, what: str, *, download: bool = False) -> Any:
        s = self.store
        return with_retries(fn, attempts=s.download_retry if download else s.open_retry_attempts,
                            initial_backoff=s.open_retry_initial_backoff,
                            max_backoff=s.open_retry_max_backoff, what=what)


def decoded_name(name: str) -> str:
    """``a.jsonl.gz`` -> ``a.jsonl``: the name of the decompressed copy."""
    base = os.path.basename(name)
    return base.rsplit(".", 1)[0] if compression_of(base) else base


def _stat(ref: ShardRef, path: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError as e:
        raise ref.missing(e) from e


class _Deadline:
    def __init__(self, seconds: float | None, what: str) -> None:
        self.end = None if seconds is None else time.monotonic() + seconds
        self.seconds, self.what = seconds, what

    def check(self) -> None:
        if self.end is not None and time.monotonic() > self.end:
            raise TimeoutError(f"{self.what} took longer than {self.seconds}s")


@contextmanager
def missing_as_shard_error(ref: ShardRef) -> Iterator[None]:
    """An object that vanishes between open and read (listing caches) is still named."""
    try:
        yield
    except ShardMissingError:
        raise
    except FileNotFoundError as e:
        raise ref.missing(e) from e


# Remote shards up to this size are fetched with one whole-object GET (``cat_file``) and then
# written and indexed from memory: fsspec's buffered file, read block by block, spent about as
# much CPU again as the same GET (its read-ahead cache, range bookkeeping and more requests).
WHOLE_GET_BYTES = 64 << 20


def _open_source(ref: ShardRef) -> Any:
    try:
        with refusals(ref, ref.display, local=False):
            if not ref.location.is_local and 0 < (ref.size or 0) <= WHOLE_GET_BYTES:
                return io.BytesIO(ref.location.read_bytes(ref.name, ref.size))
            return ref.location.open(ref.name, "rb")
    except FileNotFoundError as e:
        raise ref.missing(e) from e


def _source(ref: ShardRef, res: Resources) -> Source:
    """The object opened for one pass, counted and (unless ``validate_hash=False``) hashed."""
    return Source(ref, _open_source(ref), store_md5(ref) if res.store.validate_hash else None)


def _download(ref: ShardRef, res: Resources, part: Path, what: str, consume: Any) -> Any:
    """Fetch the object into ``part`` with retries and a deadline: ``consume(source, sink)``
    reads the source and hands the bytes to keep to ``sink``. Returns (consume's result, the
    check facts)."""
    earlier: list[str] = []  # digests of attempts whose MD5 did not match

    def attempt() -> Any:
        deadline = _Deadline(res.store.download_timeout, f"download of {ref.display}")
        with _source(ref, res) as src, Part(ref, part) as out:
            def sink(chunk: bytes) -> None:
                out.write(chunk)
                deadline.check()
            with missing_as_shard_error(ref):
                result = consume(src, sink)
        return result, src.verified(earlier)

    return res.retry(attempt, f"{what} {ref.display}", download=True)


def local_jsonl(ref: ShardRef, res: Resources) -> tuple[str, np.ndarray]:
    """(local path of the decoded shard, its line offsets)."""
    loc = ref.location
    if loc.is_local and compression_of(ref.name) is None:
        path = loc.path(ref.name)
        st = _stat(ref, path)
        key = entry_key("jsonl-local", os.path.abspath(path), str(st.st_size), str(st.st_mtime_ns))
        idx = res.cache.lineidx / f"{key}.npy"
        return path, load_or_build(idx, lambda: scan_file(path, dataset=ref.dataset,
                                                          shard=ref.display),
                                   data_bytes=st.st_size, label=ref.label)
    if loc.is_local:  # compressed local file: key on its current identity
        st = _stat(ref, loc.path(ref.name))
        key = entry_key("jsonl-decoded", os.path.abspath(loc.path(ref.name)), str(st.st_size),
                        str(st.st_mtime_ns))
        expected = None
    else:
        key = ref.remote_key
        expected = None if compression_of(ref.name) else ref.size
    cache = res.cache
    idx = cache.lineidx / f"{key}.npy"
    produced: list[np.ndarray] = []  # the offsets, when this call downloads the shard

    def produce(part: Path) -> dict[str, Any]:
        def consume(src: Source, sink: Any) -> np.ndarray:
            return scan_stream(decoded_reader(src, ref.name).read, sink,
                               dataset=ref.dataset, shard=ref.display)

        offsets, facts = _download(ref, res, part, "reading", consume)
        save_index(idx, offsets)
        produced[:] = [offsets]
        return facts

    t0 = fetch_timing.timed_ns()
    with refusals(ref, cache.root, local=True):
        path = cache.get_or_create(key, decoded_name(ref.name), produce, expected,
                                   size=expected or None, label=ref.label)
    fetch_timing.note("resolve_ns", fetch_timing.timed_ns() - t0)
    if produced:  # just written: no need to read the index back
        return str(path), produced[0]
    return str(path), load_or_build(idx, lambda: scan_file(path, dataset=ref.dataset,
                                                           shard=ref.display),
                                    data_bytes=os.path.getsize(path), label=ref.label)


def remote_jsonl_index(ref: ShardRef, res: Resources) -> np.ndarray:
    """Line offsets of an uncompressed remote shard, streamed once without keeping the bytes
    (``remote_reads="ranges"``); later reads fetch byte ranges."""
    idx = res.cache.lineidx / f"{ref.remote_key}.npy"

    def build() -> np.ndarray:
        earlier: list[str] = []  # an MD5 mismatch is retried like a broken transfer

        def attempt() -> np.ndarray:
            with _source(ref, res) as src, missing_as_shard_error(ref):
                offsets = scan_stream(src.read, dataset=ref.dataset, shard=ref.display)
            src.verified(earlier)
            return offsets
        return res.retry(attempt, f"indexing {ref.display}", download=True)

    return load_or_build(idx, build, data_bytes=ref.size or None, label=ref.label)


def cached_copy(ref: ShardRef, res: Resources) -> str | None:
    """The whole local copy of a remote shard if this machine already has one (a bad copy is
    evicted, with a warning: None)."""
    found = res.cache.lookup(ref.remote_key, ref.name, size=ref.size or None, label=ref.label)
    return None if found is None else str(found)


def whole_local_copy(ref: ShardRef, res: Resources) -> str:
    """A local path holding the whole shard (downloaded as it is into the cache if remote)."""
    loc = ref.location
    if loc.is_local:
        path = loc.path(ref.name)
        _stat(ref, path)
        return path

    def produce(part: Path) -> dict[str, Any]:
        def consume(src: Source, sink: Any) -> None:
            while True:
                chunk = src.read(8 << 20)
                if not chunk:
                    break
                sink(chunk)

        return _download(ref, res, part, "downloading", consume)[1]

    t0 = fetch_timing.timed_ns()
    with refusals(ref, res.cache.root, local=True):
        path = res.cache.get_or_create(ref.remote_key, ref.name, produce, ref.size or None,
                                       size=ref.size or None, label=ref.label)
    fetch_timing.note("resolve_ns", fetch_timing.timed_ns() - t0)
    return str(path)


def decoded_local_copy(ref: ShardRef, res: Resources, decoder: Any = None,
                       decoded_as: str | None = None) -> str:
    """A local path holding the whole shard decompressed (``.gz``/``.zst`` names, decoded once
    into the node cache, also for a local file); an uncompressed shard as ``whole_local_copy``.

    ``decoder`` decompresses a shard whose name does not say its compression (an MDS
    ``.mds.zstd``, a litData chunk): a function of the raw stream returning a ``read(n)`` view
    of the decoded bytes; ``decoded_as`` names the copy."""
    if decoder is None and compression_of(ref.name) is None:
        return whole_local_copy(ref, res)
    loc = ref.location
    if loc.is_local:  # key on the file's current identity
        st = _stat(ref, loc.path(ref.name))
        key = entry_key("decoded", os.path.abspath(loc.path(ref.name)), str(st.st_size),
                        str(st.st_mtime_ns))
    else:
        key = ref.remote_key

    def produce(part: Path) -> dict[str, Any]:
        def consume(src: Source, sink: Any) -> None:
            try:
                reader = decoded_reader(src, ref.name) if decoder is None else decoder(src)
                while chunk := reader.read(8 << 20):
                    sink(chunk)
            except (gzip.BadGzipFile, EOFError, zlib.error) as e:
                raise _undecodable(ref, e) from e
            except (OSError, DataError):
                raise  # the store's or the disk's trouble: retried or named as such
            except Exception as e:  # zstandard.ZstdError
                raise _undecodable(ref, e) from e

        return _download(ref, res, part, "decompressing", consume)[1]

    t0 = fetch_timing.timed_ns()
    with refusals(ref, res.cache.root, local=True):
        path = res.cache.get_or_create(key, decoded_as or decoded_name(ref.name), produce, None,
                                       label=ref.label)
    fetch_timing.note("resolve_ns", fetch_timing.timed_ns() - t0)
    return str(path)


def _undecodable(ref: ShardRef, e: BaseException) -> DataError:
    return DataError(f"cannot decompress ({type(e).__name__}: {e}); the file is truncated or "
                     "not what its name says", dataset=ref.dataset, shard=ref.display)
