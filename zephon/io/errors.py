"""Exceptions raised by the dataset layer.

Every data problem names the dataset, the shard file and, where it applies, the 1-based line
(JSONL) or row (Parquet), so a bad record in a 2,000-shard corpus can be found with one ``sed``.
"""

from __future__ import annotations

from zephon.block import NotColumnar

__all__ = ["DataError", "NotColumnar", "ShardMissingError", "StorageError"]


class DataError(ValueError):
    """Bad or unreadable data. ``dataset``, ``shard`` (file path or URL), ``line`` / ``row``
    (1-based, or None) say where; the message starts with them.

    Args:
        message: What is wrong.
        dataset: The dataset's name.
        shard: The shard's file path or URL.
        line: The 1-based line (JSONL).
        row: The 1-based row (Parquet, memory), when there is no line.
    """

    def __init__(
        self,
        message: str,
        *,
        dataset: str | None = None,
        shard: str | None = None,
        line: int | None = None,
        row: int | None = None,
    ) -> None:
        self.dataset = dataset
        self.shard = shard
        self.line = line
        self.row = row
        self.detail = message
        super().__init__(_format(message, dataset, shard, line, row))

    def __reduce__(self):  # keep the attributes when the error crosses a process boundary
        return (_rebuild, (type(self), self.detail, self.dataset, self.shard, self.line, self.row))


class ShardMissingError(DataError, FileNotFoundError):
    """A shard that was listed at discovery is gone (deleted or moved) when it is read."""


class StorageError(DataError, OSError):
    """Preparing a shard failed for a reason that waiting does not cure: a full disk, no
    permission, a read-only filesystem, an object that differs from its listing. ``errno`` is
    the operating system's code when there is one."""

    def __reduce__(self):
        return (_rebuild_storage, (self.detail, self.dataset, self.shard, self.errno))


def _rebuild(cls, message, dataset, shard, line, row):
    return cls(message, dataset=dataset, shard=shard, line=line, row=row)


def _rebuild_storage(message, dataset, shard, code):
    err = StorageError(message, dataset=dataset, shard=shard)
    err.errno = code
    return err


def _format(message: str, dataset, shard, line, row) -> str:
    where = []
    if dataset is not None:
        where.append(f"dataset {dataset!r}")
    if shard is not None:
        where.append(f"shard {shard}")
    if line is not None:
        where.append(f"line {line}")
    elif row is not None:
        where.append(f"row {row}")
    return f"{', '.join(where)}: {message}" if where else message
