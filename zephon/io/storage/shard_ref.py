"""``ShardRef``: what a reader is told about one shard, taken from the dataset's catalog.

The catalog (discovery, index.json) makes these; the formats' readers, the node cache's copies
and the fetch checks read them. Keeping the record apart from the code that copies shards lets
the checks (fetch_checks.py) and the copies (local_copy.py) both use it without importing each
other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zephon.io.errors import ShardMissingError
from zephon.io.storage.cache import entry_key
from zephon.io.storage.location import Location

__all__ = ["ShardRef"]


@dataclass(frozen=True)
class ShardRef:
    """What a reader needs to know about one shard (taken from the dataset's catalog)."""

    dataset: str
    location: Location
    name: str
    size: int
    version: str
    rows: int | None = None
    # the format's own facts of this shard (``ShardEntry.facts``), not part of its identity
    facts: Any = field(default=None, compare=False)

    @property
    def display(self) -> str:
        return self.location.display(self.name)

    @property
    def label(self) -> str:
        """Dataset and shard, for messages."""
        return f"dataset {self.dataset!r}, shard {self.display}"

    @property
    def remote_key(self) -> str:
        return entry_key(self.location.url.rstrip("/"), self.name, self.version)

    def missing(self, cause: BaseException | None = None) -> ShardMissingError:
        err = ShardMissingError("shard listed at discovery no longer exists",
                                dataset=self.dataset, shard=self.display)
        err.__cause__ = cause
        return err
