"""Node-local shard cache: each remote (or compressed) shard is prepared once per machine.

Layout under the cache root::

    shards/<key>-<name>        finished entries (whole shards, decompressed JSONL)
    shards/<key>-<name>.part-* entries being written (never read; removed when stale)
    checks/<key>.json          an entry's check record: its size and mtime when written, and
                               what its producer verified against the store
    lineidx/<key>.npy          JSONL line-start offsets (see formats/jsonl_lines.py); .npy.sum
                               its integrity record (size, mtime, checksum)
    locks/<key>.lock           one lock per entry; locks/.evict.lock for eviction

Concurrency: the process that takes an entry's file lock produces it into a ``.part`` file and
renames it into place (atomic on POSIX), so a half-written file is never visible; every other
process or thread waits on the lock (flock.py: woken by the kernel when it is released) and then
finds the finished entry. A crash releases the lock (the kernel drops flock locks with the
process) and leaves only a ``.part`` file, which the next producer deletes before redoing the
work. Recency is the mtime of the entry's check record, refreshed on every use; eviction removes
least recently used entries until the new one fits under the limit.

Integrity: files we did not just write are not believed. The ``.part`` file is fsynced, its
check record written (itself through a fsynced temporary file) before the rename, and the
directory fsynced after it, so a power cut leaves either no entry or a whole one. The producer
verifies what it fetched against the store (size from the listing or index.json; MD5 against an
S3 ETag; fetch_checks.py) and says so in the record. A lookup trusts an entry only while the file
has the recorded size and mtime (and the size the caller expects): an entry cut short, emptied
or written over in place (writes move the mtime; recency lives in the record so that the
entry's own mtime never changes) is evicted under its lock with a warning naming it, and
produced again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zephon.io.storage import private_cache
from zephon.io.storage.durable import fsync_path, write_durably
from zephon.io.storage.flock import exclusive_lock

__all__ = ["ShardCache", "cache_for", "entry_key"]


def entry_key(*parts: str) -> str:
    """A stable key for a cache entry from the object's identity (URL + version)."""
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()[:32]


class ShardCache:
    """One cache directory. Thread-safe and multi-process safe; cheap to create.

    Args:
        root: The cache directory; its ``shards``, ``checks``, ``lineidx`` and ``locks``
            subdirectories are created if missing.
        limit_bytes: Most bytes the finished entries may hold together, or None (default) for
            no limit (nothing is ever evicted).
        min_slack_bytes: Least extra room (bytes; default 512 KiB) an eviction frees beyond
            what the incoming entry needs, so the next one does not evict again at once.
        max_slack_bytes: Most such extra room (bytes; default 64 MiB); between the two the
            slack is 1% of ``limit_bytes``.
    """

    def __init__(self, root: Path, limit_bytes: int | None = None, *,
                 min_slack_bytes: int = 512 << 10, max_slack_bytes: int = 64 << 20) -> None:
        self.root = Path(root)
        self.limit_bytes = limit_bytes
        self.min_slack = min_slack_bytes
        self.max_slack = max_slack_bytes
        self.shards = self.root / "shards"
        self.checks = self.root / "checks"
        self.lineidx = self.root / "lineidx"
        self.locks = self.root / "locks"
        for d in (self.shards, self.checks, self.lineidx, self.locks):
            d.mkdir(parents=True, exist_ok=True)
        self._mutex = threading.Lock()
        self._produced: set[str] = set()
        self.stats = {"downloads": 0, "hits": 0, "evictions": 0, "redownloads": 0, "corrupt": 0}

    # -- entries ------------------------------------------------------------------------------

    def entry_path(self, key: str, name: str) -> Path:
        """Where the finished entry lives, whether or not it exists yet.

        Args:
            key: The entry's key (``entry_key`` of the object's URL and version).
            name: The shard's name; its base name, with characters other than letters, digits
                and ``._-`` replaced by ``_`` and cut to its last 80, follows the key.

        Returns:
            ``<root>/shards/<key>-<name>``.
        """
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in os.path.basename(name))
        return self.shards / f"{key}-{safe[-80:]}"

    def record_path(self, key: str) -> Path:
        """The entry's check record (its mtime is the entry's recency).

        Args:
            key: The entry's key.

        Returns:
            ``<root>/checks/<key>.json``.
        """
        return self.checks / f"{key}.json"

    def _inspect(self, key: str, name: str, size: int | None) -> tuple[Path, str | None] | None:
        """None: no entry; (path, None): a trustworthy entry; (path, reason): a bad one."""
        path = self.entry_path(key, name)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        try:
            record = json.loads(self.record_path(key).read_bytes())
            recorded = (int(record["size"]), int(record["mtime_ns"]))
        except (OSError, ValueError, KeyError, TypeError):
            return path, ("has no readable check record (cut short, evicted meanwhile or "
                          "written by an older zephon)")
        if st.st_size != recorded[0]:
            return path, f"holds {st.st_size} bytes, {recorded[0]} when it was written"
        if st.st_mtime_ns != recorded[1]:
            return path, "was written to after it was made (its mtime changed)"
        if size is not None and st.st_size != size:
            return path, f"holds {st.st_size} bytes where the shard has {size}"
        return path, None

    def _used(self, key: str) -> None:
        try:
            os.utime(self.record_path(key))
        except FileNotFoundError:  # evicted meanwhile: the caller's open fails or succeeds
            pass
        with self._mutex:
            self.stats["hits"] += 1

    def lookup(self, key: str, name: str, *, size: int | None = None,
               label: str | None = None) -> Path | None:
        """The finished entry, marked as just used, or None. A bad entry (see the module
        docstring) is evicted with a warning: None.

        Args:
            key: The entry's key.
            name: The shard's name (as given to ``get_or_create``).
            size: The bytes the entry must hold, or None (default) when not known: an entry of
                another size is bad.
            label: Names the entry in warnings (dataset and shard); None: the cache root.

        Returns:
            The entry's path, or None.
        """
        found = self._inspect(key, name, size)
        if found is None:
            return None
        if found[1] is not None:
            with exclusive_lock(self.locks / f"{key}.lock"):
                found = self._inspect(key, name, size)  # another process may have redone it
                if found is not None and found[1] is not None:
                    self._evict_bad(key, found[0], found[1], label)
                    return None
            if found is None:
                return None
        self._used(key)
        return found[0]

    def get_or_create(self, key: str, name: str, produce: Callable[[Path], Any],
                      expected_bytes: int | None = None, *, size: int | None = None,
                      label: str | None = None) -> Path:
        """The entry's path, produced by ``produce(part_path)`` if no process has done so yet.

        Exceptions from ``produce`` propagate and leave no entry behind.

        Args:
            key: The entry's key (``entry_key`` of the object's URL and version).
            name: The shard's name (the entry's file name ends with it).
            produce: ``produce(part_path)`` writes the complete file at that path and may
                return a dict saying what it verified (kept in the check record); the cache
                syncs it and renames it into place.
            expected_bytes: Estimated size in bytes to make room for before producing; None
                (default): ``size``, else nothing.
            size: The bytes the entry must hold, when known (None, the default: any size); an
                entry or a production of another size is refused.
            label: Names the entry in warnings and errors (dataset and shard); None: the cache
                root.

        Returns:
            The finished entry's path.

        Raises:
            ValueError: ``produce`` wrote other than ``size`` bytes, or the entry cannot fit
                under ``limit_bytes`` at all.
        """
        found = self._inspect(key, name, size)
        if found is not None and found[1] is None:
            self._used(key)
            return found[0]
        final = self.entry_path(key, name)
        with exclusive_lock(self.locks / f"{key}.lock"):
            found = self._inspect(key, name, size)
            if found is not None:
                if found[1] is None:
                    self._used(key)
                    return found[0]
                self._evict_bad(key, found[0], found[1], label)
            for stale in self.shards.glob(final.name + ".part-*"):
                stale.unlink(missing_ok=True)  # left by a crashed producer: redo the work
            self.make_room(expected_bytes or size or 0, keep=key)
            part = final.with_name(f"{final.name}.part-{os.getpid()}-{threading.get_ident()}")
            try:
                verified = produce(part)
                fsync_path(part)
                st = os.stat(part)
                if size is not None and st.st_size != size:
                    raise ValueError(f"{label or self.root}: produced {st.st_size} bytes for "
                                     f"an entry of {size}")
                record = {"name": final.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                          "verified": verified or {}}
                write_durably(self.record_path(key), lambda f: f.write(json.dumps(record).encode()))
                os.replace(part, final)
                fsync_path(self.shards)
            except BaseException:
                part.unlink(missing_ok=True)
                raise
            self._count_production(key)
        self.make_room(0, keep=key)  # the real size may exceed the estimate
        return final

    def _evict_bad(self, key: str, path: Path, reason: str, label: str | None) -> None:
        """Remove a bad entry and what was derived from it; the caller holds its lock."""
        path.unlink(missing_ok=True)
        self.record_path(key).unlink(missing_ok=True)
        (self.lineidx / f"{key}.npy").unlink(missing_ok=True)
        (self.lineidx / f"{key}.npy.sum").unlink(missing_ok=True)
        with self._mutex:
            self.stats["corrupt"] += 1
            self._produced.discard(key)  # producing it again is repair, not thrashing
        warnings.warn(f"{label or f'shard cache {self.root}'}: cache entry {path} {reason}; "
                      "removed it, the shard is fetched again", RuntimeWarning, stacklevel=4)

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
            True when there is no limit or usage plus ``incoming`` is within it.
        """
        return self.limit_bytes is None or self.usage() + incoming <= self.limit_bytes

    def usage(self) -> int:
        """Bytes held by the finished entries (entries being written are not counted)."""
        return sum(size for _, size, _ in self._entries())

    def _entries(self) -> list[tuple[float, int, Path]]:
        """(last use, size, path) of every finished entry."""
        out = []
        for p in self.shards.iterdir():
            if ".part-" in p.name:
                continue
            try:
                st = p.stat()
            except FileNotFoundError:
                continue
            try:
                used = self.record_path(p.name.split("-", 1)[0]).stat().st_mtime
            except FileNotFoundError:
                used = st.st_mtime
            out.append((used, st.st_size, p))
        return out

    def make_room(self, incoming: int, keep: str | None = None) -> None:
        """Evict least recently used entries so usage + ``incoming`` fits under the limit.

        When it must evict, it goes down to the limit less ``incoming`` less the slack (see the
        class), so that the next entry need not evict again. No limit: nothing happens.

        Args:
            incoming: Bytes about to be added.
            keep: The key of an entry never to evict (the one being produced); None: any.

        Raises:
            ValueError: ``incoming`` alone exceeds ``limit_bytes``.
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
                self.record_path(key).unlink(missing_ok=True)
                (self.lineidx / f"{key}.npy").unlink(missing_ok=True)
                (self.lineidx / f"{key}.npy.sum").unlink(missing_ok=True)
                total -= size
                with self._mutex:
                    self.stats["evictions"] += 1

    def clear(self) -> None:
        """Remove every entry, check record and line index (locks stay). Not for use while
        other processes read from the cache."""
        for d in (self.shards, self.checks, self.lineidx):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True, exist_ok=True)


_caches: dict[tuple, ShardCache] = {}
_caches_lock = threading.Lock()
_warned_unwritable: set[tuple[str, int]] = set()


def _writable(cache: ShardCache) -> None:
    """OSError unless this process can create files in the cache (as root, or on a read-only
    mount, ``mkdir(exist_ok=True)`` of existing directories says nothing)."""
    fd, probe = tempfile.mkstemp(prefix=".probe-", dir=cache.locks)
    os.close(fd)
    os.unlink(probe)


def cache_for(root: Path | None, limit_bytes: int | None, min_slack: int = 512 << 10,
              max_slack: int = 64 << 20) -> ShardCache:
    """The process-wide cache object for a root. None: a private temporary directory of this
    process (``CacheOptions(enabled=False)``; removed when the process ends, private_cache.py).
    A root this process cannot write falls back to a private one, with a warning (once per root
    and process)."""
    with _caches_lock:
        if root is not None:
            key = (str(root), limit_bytes, min_slack, max_slack, os.getpid())
            cache = _caches.get(key)
            if cache is not None:
                return cache
            try:
                cache = ShardCache(root, limit_bytes, min_slack_bytes=min_slack,
                                   max_slack_bytes=max_slack)
                _writable(cache)
                _caches[key] = cache
                return cache
            except OSError as e:
                problem = e
        else:
            problem = None
        private = private_cache.private_root()
        key = (str(private), limit_bytes, min_slack, max_slack, os.getpid())
        cache = _caches.get(key)
        if cache is None:
            cache = _caches[key] = ShardCache(private, limit_bytes, min_slack_bytes=min_slack,
                                              max_slack_bytes=max_slack)
        if problem is not None and (str(root), os.getpid()) not in _warned_unwritable:
            _warned_unwritable.add((str(root), os.getpid()))
            warnings.warn(f"zephon: the shard cache directory {root} cannot be written "
                          f"({problem}); this process uses a private temporary cache {private} "
                          "instead, removed when it ends, so every process downloads shards "
                          "again. Set ZEPHON_CACHE_DIR (or CacheOptions(root=...)) to a "
                          "writable directory", RuntimeWarning, stacklevel=3)
        return cache
