"""Where shards live: fsspec filesystem resolution, listing and object metadata.

Any fsspec protocol works (local paths, ``file://``, ``memory://``, ``s3://`` through s3fs,
``gs://``/``gcs://`` through gcsfs, ...). Filesystem objects are not pickled: a ``Location`` keeps
the URL and ``storage_options`` and resolves the filesystem once per process, so fsspec's own
configuration (``FSSPEC_S3_ENDPOINT_URL`` and friends) applies in every worker.
"""

from __future__ import annotations

import errno
import inspect
import os
import posixpath
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import fsspec
from fsspec.implementations.local import LocalFileSystem

from zephon.io import fetch_timing
from zephon.io.errors import DataError

__all__ = ["Location", "ObjectInfo", "is_transient", "with_retries"]

T = TypeVar("T")


@dataclass(frozen=True)
class ObjectInfo:
    """One listed file: path relative to the dataset root, size and a version tag (ETag,
    generation or mtime) that changes when the object is rewritten."""

    name: str
    size: int
    version: str


@dataclass
class Location:
    """A dataset root (local directory or object-store prefix) plus its storage options."""

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if "://" not in self.url and "::" not in self.url:
            # plain local paths become absolute: workers may run in another directory
            self.url = os.path.abspath(os.path.expanduser(self.url))
        self._state: tuple[int, Any, str] | None = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "storage_options": self.storage_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.url = state["url"]
        self.storage_options = state["storage_options"]
        self.__post_init__()

    def _resolve(self) -> tuple[Any, str]:
        pid = os.getpid()
        state = self._state
        if state is None or state[0] != pid:
            with self._lock:
                state = self._state
                if state is None or state[0] != pid:
                    fs, root = fsspec.core.url_to_fs(self.url, **(self.storage_options or {}))
                    state = (pid, fs, root.rstrip("/") or root)
                    self._state = state
        return state[1], state[2]

    @property
    def fs(self) -> Any:
        return self._resolve()[0]

    @property
    def root(self) -> str:
        """The root path in the filesystem's own notation (no protocol)."""
        return self._resolve()[1]

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, LocalFileSystem)

    def path(self, name: str) -> str:
        """Filesystem path of a file named relative to the root."""
        return posixpath.join(self.root, name) if name else self.root

    def display(self, name: str = "") -> str:
        """A user-facing URL or path of a file, for messages."""
        if self.is_local:
            return self.path(name)
        base = self.url.rstrip("/")
        return f"{base}/{name}" if name else base

    def check_root(self) -> None:
        """FileNotFoundError naming the root when it does not exist; ValueError when a local
        root is a file."""
        fs, root = self._resolve()
        if not fs.exists(root):
            raise FileNotFoundError(f"dataset path not found: {self.display()}")
        if self.is_local and not os.path.isdir(root):
            raise ValueError(f"dataset path is not a directory: {self.display()}")

    def exists(self, name: str) -> bool:
        return self.fs.exists(self.path(name))

    def list_files(self) -> list[ObjectInfo]:
        """All files under the root, recursively, sorted by relative name. Hidden entries
        (a path component starting with '.' or '_', e.g. ``_SUCCESS``) are skipped."""
        fs, root = self._resolve()
        found = fs.find(root, detail=True, withdirs=False)
        out = []
        prefix = root.rstrip("/") + "/"
        for path, info in found.items():
            rel = path[len(prefix):] if path.startswith(prefix) else posixpath.basename(path)
            if not rel or any(part.startswith((".", "_")) for part in rel.split("/")):
                continue
            if info.get("type", "file") != "file":
                continue
            out.append(ObjectInfo(rel, int(info.get("size") or 0), version_of(info)))
        out.sort(key=lambda o: o.name)
        return out

    def info(self, name: str) -> ObjectInfo:
        return ObjectInfo(name, *_size_version(self.fs.info(self.path(name))))

    def current_version(self, name: str) -> str:
        """The object's version tag as the store says now, not as a listing cached it."""
        path = self.path(name)
        self.fs.invalidate_cache(path)
        return version_of(self.fs.info(path))

    def read_bytes(self, name: str, size: int | None = None) -> bytes:
        """The whole object. Given its ``size`` (from the listing or index.json), one request:
        s3fs otherwise asks the store for the size first (a HEAD) to choose between one GET
        and ranged GETs, and on moto's server that HEAD cost the client a third of a 4 MB
        shard's GET and the server half of its work (benchmarks/bench_io.py)."""
        fs, path = self.fs, self.path(name)
        if size is not None and 0 < size <= _one_get_limit(fs):
            return fs.cat_file(path, max_concurrency=1)
        return fs.cat_file(path)

    def open(self, name: str, mode: str = "rb", **kwargs: Any) -> Any:
        return self.fs.open(self.path(name), mode, **kwargs)

    def read_ranges(self, name: str, starts: Iterable[int], ends: Iterable[int]) -> list[bytes]:
        path = self.path(name)
        starts, ends = list(starts), list(ends)
        return self.fs.cat_ranges([path] * len(starts), starts, ends)


_HAS_ONE_GET: dict[type, bool] = {}


def _one_get_limit(fs: Any) -> int:
    """The largest object ``fs.cat_file(path, max_concurrency=1)`` fetches exactly as the plain
    call would, minus the size lookup: s3fs makes one GET up to its block size and ranged GETs
    in parallel above it (which stay its choice). 0 for filesystems without that option."""
    cls = type(fs)
    known = _HAS_ONE_GET.get(cls)
    if known is None:
        try:
            params = inspect.signature(cls._cat_file).parameters  # async filesystems only
        except (AttributeError, TypeError, ValueError):
            params = {}
        known = _HAS_ONE_GET[cls] = ("max_concurrency" in params
                                        and hasattr(fs, "max_concurrency"))
    return int(getattr(fs, "default_block_size", 0) or 0) if known else 0


def _size_version(info: dict[str, Any]) -> tuple[int, str]:
    return int(info.get("size") or 0), version_of(info)


def version_of(info: dict[str, Any]) -> str:
    """A tag that changes when the object changes: ETag / generation / md5, else size + mtime."""
    for key in ("ETag", "etag", "generation", "md5Hash", "version_id", "VersionId"):
        value = info.get(key)
        if value:
            return f"{key}:{str(value).strip(chr(34))}"
    mtime = info.get("mtime") or info.get("LastModified") or info.get("last_modified")
    if hasattr(mtime, "timestamp"):
        mtime = mtime.timestamp()
    return f"size:{info.get('size')}:mtime:{mtime}"


# OS errors that retrying cannot cure: the disk is full, the path is not ours to write, the
# filesystem is read-only, the name is wrong. Retried, a full disk cost 12 attempts and 15 s
# before it was reported.
PERMANENT_ERRNOS = frozenset({
    errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM, errno.EROFS,
    errno.ENAMETOOLONG, errno.ENOENT, errno.EISDIR, errno.ENOTDIR,
})


def is_transient(e: BaseException) -> bool:
    """Whether an error may go away if the operation is tried again (network trouble, a
    timeout, a store that throttles), as opposed to bad data or a refusing local disk."""
    if isinstance(e, DataError):
        return False
    if isinstance(e, (FileNotFoundError, PermissionError, IsADirectoryError,
                      NotADirectoryError)):
        return False
    if isinstance(e, OSError) and e.errno in PERMANENT_ERRNOS:
        return False
    return isinstance(e, (OSError, TimeoutError))


def with_retries(
    fn: Callable[[], T],
    *,
    attempts: int,
    initial_backoff: float,
    max_backoff: float,
    what: str,
) -> T:
    """Call ``fn`` until it succeeds, backing off on transient errors (``is_transient``).
    Anything else (missing files, permissions, a full or read-only disk, bad data) is raised
    at once, as it is."""
    delay = initial_backoff
    for attempt in range(1, max(1, attempts) + 1):
        try:
            return fn()
        except (OSError, TimeoutError) as e:
            if not is_transient(e):
                raise
            if attempt >= attempts:
                raise OSError(f"{what} failed after {attempts} attempts: {e}") from e
            fetch_timing.note("retries")
            time.sleep(delay)
            delay = min(max_backoff, delay * 2)
    raise AssertionError("unreachable")
