"""Local copies of shards: read in place when local, else prepared once in the node cache.

A local uncompressed file is read where it lies (its line index goes to the cache). Compressed
JSONL and remote shards are copied into the cache in one streaming pass that downloads,
decompresses and line-indexes together; every other process on the machine then reuses the
copy (see cache.py for the locking).
"""

from __future__ import annotations

import io
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zephon.io import fetch_timing
from zephon.io.cache import ShardCache, cache_for, entry_key
from zephon.io.errors import ShardMissingError
from zephon.io.lines import (
    compression_of,
    decoded_reader,
    load_or_build,
    save_index,
    scan_file,
    scan_stream,
)
from zephon.io.options import ResolvedStore
from zephon.io.storage import Location, with_retries

__all__ = ["Resources", "ShardRef", "local_jsonl", "local_parquet", "remote_jsonl_index"]


@dataclass(frozen=True)
class ShardRef:
    """What a reader needs to know about one shard (taken from the dataset's catalog)."""

    dataset: str
    location: Location
    name: str
    size: int
    version: str
    rows: int | None = None

    @property
    def display(self) -> str:
        return self.location.display(self.name)

    @property
    def remote_key(self) -> str:
        return entry_key(self.location.url.rstrip("/"), self.name, self.version)

    def missing(self, cause: BaseException | None = None) -> ShardMissingError:
        err = ShardMissingError("shard listed at discovery no longer exists",
                                dataset=self.dataset, shard=self.display)
        err.__cause__ = cause
        return err


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
                    s = self.store
                    try:
                        self._cache = cache_for(s.cache_root, s.cache_limit, s.min_slack_bytes,
                                                s.max_slack_bytes)
                    except OSError:  # unwritable cache root: fall back to a private one
                        self._cache = cache_for(None, s.cache_limit, s.min_slack_bytes,
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
        if not ref.location.is_local and 0 < (ref.size or 0) <= WHOLE_GET_BYTES:
            return io.BytesIO(ref.location.read_bytes(ref.name, ref.size))
        return ref.location.open(ref.name, "rb")
    except FileNotFoundError as e:
        raise ref.missing(e) from e


def local_jsonl(ref: ShardRef, res: Resources) -> tuple[str, np.ndarray]:
    """(local path of the decoded shard, its line offsets)."""
    loc = ref.location
    if loc.is_local and compression_of(ref.name) is None:
        path = loc.path(ref.name)
        st = _stat(ref, path)
        key = entry_key("jsonl-local", os.path.abspath(path), str(st.st_size), str(st.st_mtime_ns))
        idx = res.cache.lineidx / f"{key}.npy"
        return path, load_or_build(idx, lambda: scan_file(path, dataset=ref.dataset,
                                                          shard=ref.display))
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

    def produce(part: Path) -> None:
        deadline = _Deadline(res.store.download_timeout, f"download of {ref.display}")

        def attempt() -> None:
            with _open_source(ref) as raw, open(part, "wb") as out:
                def sink(chunk: bytes) -> None:
                    out.write(chunk)
                    deadline.check()
                with missing_as_shard_error(ref):
                    offsets = scan_stream(decoded_reader(raw, ref.name).read, sink,
                                          dataset=ref.dataset, shard=ref.display)
            save_index(idx, offsets)
            produced[:] = [offsets]

        res.retry(attempt, f"reading {ref.display}", download=True)

    t0 = fetch_timing.timed_ns()
    path = cache.get_or_create(key, decoded_name(ref.name), produce, expected)
    fetch_timing.note("resolve_ns", fetch_timing.timed_ns() - t0)
    if produced:  # just written: no need to read the index back
        return str(path), produced[0]
    return str(path), load_or_build(idx, lambda: scan_file(path, dataset=ref.dataset,
                                                           shard=ref.display))


def remote_jsonl_index(ref: ShardRef, res: Resources) -> np.ndarray:
    """Line offsets of an uncompressed remote shard, streamed once without keeping the bytes
    (``remote_reads="ranges"``); later reads fetch byte ranges."""
    idx = res.cache.lineidx / f"{ref.remote_key}.npy"

    def build() -> np.ndarray:
        def attempt() -> np.ndarray:
            with _open_source(ref) as raw, missing_as_shard_error(ref):
                return scan_stream(raw.read, dataset=ref.dataset, shard=ref.display)
        return res.retry(attempt, f"indexing {ref.display}", download=True)

    return load_or_build(idx, build)


def cached_parquet(ref: ShardRef, res: Resources) -> str | None:
    """The local copy of a remote Parquet shard if this machine already has one."""
    found = res.cache.lookup(ref.remote_key, ref.name)
    return None if found is None else str(found)


def local_parquet(ref: ShardRef, res: Resources) -> str:
    """A local path holding the whole Parquet shard (downloaded into the cache if remote)."""
    loc = ref.location
    if loc.is_local:
        path = loc.path(ref.name)
        _stat(ref, path)
        return path

    def produce(part: Path) -> None:
        deadline = _Deadline(res.store.download_timeout, f"download of {ref.display}")

        def attempt() -> None:
            with _open_source(ref) as raw, open(part, "wb") as out, missing_as_shard_error(ref):
                while True:
                    chunk = raw.read(8 << 20)
                    if not chunk:
                        break
                    out.write(chunk)
                    deadline.check()

        res.retry(attempt, f"downloading {ref.display}", download=True)

    t0 = fetch_timing.timed_ns()
    path = res.cache.get_or_create(ref.remote_key, ref.name, produce, ref.size or None)
    fetch_timing.note("resolve_ns", fetch_timing.timed_ns() - t0)
    return str(path)
