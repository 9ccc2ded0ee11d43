"""What a fetched shard is checked against, and how refusals of the disk or the store are named.

The bytes read from the store must number what the listing or index.json says, and their MD5
must equal the store's (an S3 ETag of a single-part upload, a GCS ``md5Hash``); the cache keeps
what was checked in the entry's check record (cache.py). Some S3 ETags are not MD5s of the
content (SSE-KMS and SSE-C objects): a second download with the same digest shows that, and the
ETags of that location are not compared again in this process, so such a dataset pays for one
extra download per process, not one per shard. A mismatch first asks the store for the object's
current version: one that changed since the listing is an error, not a reason to download again.
The MD5 costs about 1.5 ms of CPU per MB downloaded; ``CacheOptions(validate_hash=False)``
leaves it out (sizes are still checked).

Errors that retrying cannot cure (``storage.is_transient``: a full or read-only disk, no
permission, an object that changed) become a ``StorageError`` at once, naming the dataset, the
shard and the path, and for a full disk the space left on its filesystem. Before, a full disk was
retried like a dropped connection: 12 attempts and 15 s, then an error naming neither.
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from zephon.io.errors import DataError, StorageError
from zephon.io.storage.location import is_transient
from zephon.io.storage.shard_ref import ShardRef

__all__ = ["DigestMismatch", "Part", "Source", "refusals", "store_md5"]

_HEX_MD5 = re.compile(r"^[0-9a-fA-F]{32}$")
_etag_not_md5: set[str] = set()  # locations whose ETags proved not to be MD5s of the content


def store_md5(ref: ShardRef) -> str | None:
    """The MD5 the store gives for the object (an S3 ETag of a single-part upload, a GCS
    md5Hash), as hex, or None."""
    kind, _, value = ref.version.partition(":")
    if kind.lower() == "etag" and _HEX_MD5.match(value):
        return None if ref.location.url in _etag_not_md5 else value.lower()
    if kind == "md5Hash":
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
        return raw.hex() if len(raw) == 16 else None
    return None


class DigestMismatch(OSError):
    """The bytes fetched do not have the store's MD5: fetched again (transient)."""


class Source:
    """The object's bytes as read: counts them and hashes them when the store has an MD5, and
    names refusals of the store (``refusals``)."""

    def __init__(self, ref: ShardRef, raw: Any, md5: str | None) -> None:
        self.ref, self.raw, self.want_md5 = ref, raw, md5
        self.nbytes = 0
        self._hash = hashlib.md5(usedforsecurity=False) if md5 else None

    def read(self, n: int = -1) -> bytes:
        with refusals(self.ref, self.ref.display, local=False):
            data = self.raw.read(n)
        self.nbytes += len(data)
        if self._hash is not None:
            self._hash.update(data)
        return data

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.raw.close()

    def verified(self, earlier: list[str]) -> dict[str, Any]:
        """What the bytes read were checked against (for the cache's check record); raises
        when they are not the object the catalog describes. ``earlier``: the digests of the
        attempts before this one (this one's is added)."""
        ref, facts = self.ref, {"bytes": self.nbytes}
        if ref.size > 0:  # 0: index.json did not say (a shard with records is never empty)
            if self.nbytes != ref.size:
                raise _changed(ref, f"read {self.nbytes} bytes where the listing or index.json "
                                    f"gives {ref.size}")
            facts["size"] = "listing"
        if self._hash is not None:
            got = self._hash.hexdigest()
            if got == self.want_md5:
                facts["md5"] = got
            elif got in earlier:  # the same bytes twice, the object unchanged: not an MD5
                _etag_not_md5.add(ref.location.url)
                facts["md5"] = f"{got} (the store's ETag {self.want_md5} is not an MD5)"
            else:
                try:
                    now = ref.location.current_version(ref.name)
                except OSError:
                    now = ref.version
                if now != ref.version:
                    raise _changed(ref, f"its version is {now}, {ref.version} when listed")
                earlier.append(got)
                raise DigestMismatch(f"{ref.label}: MD5 {got} of the bytes read differs from "
                                     f"the store's {self.want_md5}")
        return facts


def _changed(ref: ShardRef, how: str) -> StorageError:
    return StorageError(f"{how}: the object changed since the dataset was opened (rebuild "
                        "index.json or recreate the Dataset)", dataset=ref.dataset,
                        shard=ref.display)


@contextmanager
def refusals(ref: ShardRef, where: str | Path, *, local: bool) -> Iterator[None]:
    """An OS error that retrying cannot cure (``storage.is_transient``) becomes a
    ``StorageError`` naming dataset, shard and path (``local``: a path of this machine, whose
    filesystem's free space a full disk reports). Missing files and transient errors pass."""
    try:
        yield
    except (DataError, FileNotFoundError):
        raise
    except OSError as e:
        if is_transient(e):
            raise
        raise _refusal(ref, e, where, local) from e


def _refusal(ref: ShardRef, e: OSError, where: str | Path, local: bool) -> StorageError:
    path = e.filename if local and e.filename else where
    reason = f"{os.strerror(e.errno)} [{errno.errorcode.get(e.errno, e.errno)}]" \
        if e.errno else str(e)
    if not local:
        msg = f"cannot read {path}: {reason}"
    else:
        msg = f"cannot write {path}: {reason}"
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            msg += (f"; {_free_bytes(Path(path)) / 2**20:.1f} MiB free on its filesystem. "
                    "Free some space, lower ZEPHON_CACHE_LIMIT or point ZEPHON_CACHE_DIR at a "
                    "larger disk")
        else:
            msg += "; point ZEPHON_CACHE_DIR at a directory this process can write"
    err = StorageError(msg, dataset=ref.dataset, shard=ref.display)
    err.errno = e.errno
    return err


def _free_bytes(path: Path) -> int:
    for p in (path, *path.parents):
        try:
            return shutil.disk_usage(p).free
        except OSError:
            continue
    return 0


class Part:
    """The cache's ``.part`` file being written, its refusals named."""

    def __init__(self, ref: ShardRef, path: Path) -> None:
        self.ref, self.path = ref, path
        with refusals(ref, path, local=True):
            self.file = open(path, "wb")

    def write(self, data: bytes) -> None:
        with refusals(self.ref, self.path, local=True):
            self.file.write(data)

    def __enter__(self) -> Part:
        return self

    def __exit__(self, *exc: Any) -> None:
        with refusals(self.ref, self.path, local=True):
            self.file.close()
