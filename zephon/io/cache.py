"""Node-local shard cache: each remote (or compressed) shard is prepared once per machine.

Layout under the cache root::

    shards/<key>-<name>        finished entries (whole shards, decompressed JSONL)
    shards/<key>-<name>.part-* entries being written (never read; removed when stale)
    lineidx/<key>.npy          JSONL line-start offsets (see lines.py)
    locks/<key>.lock           one lock per entry; locks/.evict.lock for eviction

Concurrency: the process that takes an entry's file lock produces it into a ``.part`` file and
renames it into place (atomic on POSIX), so a half-written file is never visible; every other
process or thread waits on the lock (flock.py: woken by the kernel when it is released) and then
finds the finished entry. A crash releases the lock (the kernel drops flock locks with the
process) and leaves only a ``.part`` file, which the next producer deletes before redoing the
work. Recency is the entry's mtime, refreshed on every use; eviction removes least recently used
entries until the new one fits under the limit.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path

from zephon.io.flock import exclusive_lock

__all__ = ["ShardCache", "cache_for", "entry_key"]


def entry_key(*parts: str) -> str:
    """A stable key for a cache entry from the object's identity (URL + version)."""
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()[:32]


class ShardCache:
    """One cache directory. Thread-safe and multi-process safe; cheap to create.

    Args:
        root: The cache directory (created if missing).
        limit_bytes: Size limit of the entries; least recently used ones are evicted to stay
            under it. None: unlimited.
        min_slack_bytes: Least room an eviction frees beyond what is needed.
        max_slack_bytes: Most room an eviction frees beyond what is needed (between the two:
            1% of the limit).
    """

    def __init__(self, root: Path, limit_bytes: int | None = None, *,
                 min_slack_bytes: int = 512 << 10, max_slack_bytes: int = 64 << 20) -> None:
        self.root = Path(root)
        self.limit_bytes = limit_bytes
        self.min_slack = min_slack_bytes
        self.max_slack = max_slack_bytes
        self.shards = self.root / "shards"
        self.lineidx = self.root / "lineidx"
        self.locks = self.root / "locks"
        for d in (self.shards, self.lineidx, self.locks):
            d.mkdir(parents=True, exist_ok=True)
        self._mutex = threading.Lock()
        self._produced: set[str] = set()
        self.stats = {"downloads": 0, "hits": 0, "evictions": 0, "redownloads": 0}

    # -- entries ------------------------------------------------------------------------------

    def entry_path(self, key: str, name: str) -> Path:
        """Where the entry of ``key`` lives, whether or not it exists.

        Args:
            key: The entry's key (``entry_key`` of the object's identity).
            name: The object's name (its last part ends the file name, for people).

        Returns:
            The path.
        """
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in os.path.basename(name))
        return self.shards / f"{key}-{safe[-80:]}"

    def lookup(self, key: str, name: str) -> Path | None:
        """The finished entry, marked as just used, or None.

        Args:
            key: The entry's key.
            name: The object's name.

        Returns:
            The entry's path, or None when there is none.
        """
        path = self.entry_path(key, name)
        try:
            os.utime(path)
        except FileNotFoundError:
            return None
        with self._mutex:
            self.stats["hits"] += 1
        return path

    def get_or_create(self, key: str, name: str, produce: Callable[[Path], None],
                      expected_bytes: int | None = None) -> Path:
        """The entry's path, produced by ``produce(part_path)`` if no process has done so yet.

        ``produce`` writes the complete file at the given path; the cache renames it into
        place. Exceptions from ``produce`` propagate and leave no entry behind.

        Args:
            key: The entry's key.
            name: The object's name.
            produce: Writes the entry's content to the path it is given.
            expected_bytes: The entry's size if known, to make room first.

        Returns:
            The entry's path.
        """
        found = self.lookup(key, name)
        if found is not None:
            return found
        final = self.entry_path(key, name)
        with exclusive_lock(self.locks / f"{key}.lock"):
            found = self.lookup(key, name)
            if found is not None:
                return found
            for stale in self.shards.glob(final.name + ".part-*"):
                stale.unlink(missing_ok=True)  # left by a crashed producer: redo the work
            self.make_room(expected_bytes or 0, keep=key)
            part = final.with_name(f"{final.name}.part-{os.getpid()}-{threading.get_ident()}")
            try:
                produce(part)
                os.replace(part, final)
            except BaseException:
                part.unlink(missing_ok=True)
                raise
            self._count_production(key)
        self.make_room(0, keep=key)  # the real size may exceed the estimate
        return final

    def _count_production(self, key: str) -> None:
        with self._mutex:
            self.stats["downloads"] += 1
            if key in self._produced:
                self.stats["redownloads"] += 1
                if self.stats["redownloads"] == 1:
                    warnings.warn(
                        f"shard cache {self.root} is thrashing: an evicted shard was needed "
                        f"again (limit {self.limit_bytes} bytes); raise ZEPHON_CACHE_LIMIT or "
                        "lower the look-ahead of prefetch", RuntimeWarning, stacklevel=3)
            self._produced.add(key)

    # -- eviction -----------------------------------------------------------------------------

    def fits(self, incoming: int) -> bool:
        """Whether ``incoming`` more bytes fit under the limit without evicting anything.

        Args:
            incoming: Bytes about to be added.

        Returns:
            True when they fit (always, without a limit).
        """
        return self.limit_bytes is None or self.usage() + incoming <= self.limit_bytes

    def usage(self) -> int:
        """Bytes held by finished entries."""
        return sum(size for _, size, _ in self._entries())

    def _entries(self) -> list[tuple[float, int, Path]]:
        out = []
        for p in self.shards.iterdir():
            if ".part-" in p.name:
                continue
            try:
                st = p.stat()
            except FileNotFoundError:
                continue
            out.append((st.st_mtime, st.st_size, p))
        return out

    def make_room(self, incoming: int, keep: str | None = None) -> None:
        """Evict least recently used entries so usage + ``incoming`` fits under the limit.

        Args:
            incoming: Bytes about to be added.
            keep: The key of an entry never to evict (the one being produced).

        Raises:
            ValueError: ``incoming`` alone exceeds the limit.
        """
        if self.limit_bytes is None:
            return
        if incoming > self.limit_bytes:
            raise ValueError(f"shard cache limit {self.limit_bytes} bytes at {self.root} cannot "
                             f"hold one shard of {incoming} bytes; raise ZEPHON_CACHE_LIMIT")
        with exclusive_lock(self.locks / ".evict.lock"):
            entries = sorted(self._entries())
            total = sum(size for _, size, _ in entries)
            if total + incoming <= self.limit_bytes:
                return
            slack = min(self.max_slack, max(self.min_slack, self.limit_bytes // 100))
            target = max(0, self.limit_bytes - incoming - slack)
            for _, size, path in entries:
                if total <= target:
                    break
                key = path.name.split("-", 1)[0]
                if key == keep:
                    continue
                path.unlink(missing_ok=True)
                (self.lineidx / f"{key}.npy").unlink(missing_ok=True)
                total -= size
                with self._mutex:
                    self.stats["evictions"] += 1

    def clear(self) -> None:
        """Remove every entry and line index."""
        shutil.rmtree(self.shards, ignore_errors=True)
        shutil.rmtree(self.lineidx, ignore_errors=True)
        self.shards.mkdir(parents=True, exist_ok=True)
        self.lineidx.mkdir(parents=True, exist_ok=True)


_caches: dict[tuple, ShardCache] = {}
_caches_lock = threading.Lock()
_private_root: list[Path] = []


def cache_for(root: Path | None, limit_bytes: int | None, min_slack: int = 512 << 10,
              max_slack: int = 64 << 20) -> ShardCache:
    """The process-wide cache object for a root (None: a private temporary directory removed
    at exit, for ``CacheOptions(enabled=False)``)."""
    with _caches_lock:
        if root is None:
            if not _private_root:
                _private_root.append(Path(tempfile.mkdtemp(prefix="zephon-cache-")))
                atexit.register(shutil.rmtree, str(_private_root[0]), True)
            root = _private_root[0]
        key = (str(root), limit_bytes, min_slack, max_slack, os.getpid())
        cache = _caches.get(key)
        if cache is None:
            cache = ShardCache(root, limit_bytes, min_slack_bytes=min_slack,
                               max_slack_bytes=max_slack)
            _caches[key] = cache
        return cache
