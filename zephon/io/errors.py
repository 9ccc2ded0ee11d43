"""Exceptions raised by the dataset layer.

Every data problem names the dataset, the shard file and, where it applies, the 1-based line
(JSONL) or row (Parquet), so a bad record in a 2,000-shard corpus can be found with one ``sed``.
"""

from __future__ import annotations

from zephon.block import NotColumnar
from zephon.errors import DataError

__all__ = ["DataError", "NotColumnar", "ShardMissingError", "StorageError"]


class ShardMissingError(DataError, FileNotFoundError):
    """A shard that was listed at discovery is gone (deleted or moved) when it is read."""


class StorageError(DataError, OSError):
    """Preparing a shard failed for a reason that waiting does not cure: a full disk, no
    permission, a read-only filesystem, an object that differs from its listing. ``errno`` is
    the operating system's code when there is one."""

    def __reduce__(self):
        return (_rebuild_storage, (self.detail, self.dataset, self.shard, self.errno))


def _rebuild_storage(message, dataset, shard, code):
    err = StorageError(message, dataset=dataset, shard=shard)
    err.errno = code
    return err
