"""The ``ShardFormat`` protocol: what the dataset layer asks of a shard format.

A format is one module that defines a ``ShardFormat`` subclass and one instance of it, plus one
line in ``registry.py`` (or an entry point in the ``zephon.formats`` group for a third-party
package). Nothing else in Zephon names a format: ``Dataset``, discovery, ``build-index``,
``inspect`` and the engine ask the format object (its methods and its ``capabilities``).

What a format provides (the methods below say the details):

- **name and files**: ``name`` (what ``fmt=`` and ``index.json`` call it), ``suffixes`` (the
  file names of its shards, matched case-insensitively).
- **detection** (spec §3.3, the format's own index files first): ``claims_index`` recognises an
  untagged ``index.json`` written by the format's own writer; ``own_index`` reads the format's
  own index files (``index.json``, ``state.json``, a manifest...) into shard entries. Without
  either, the root's listing decides by suffix.
- **row counts at discovery**: ``count`` reads a shard's rows from the format's own footer or
  index without decoding the data where the format allows it.
- **reading**: ``open`` returns a ``ShardReader`` (``read_table``, ``read_payloads``, ``close``)
  that serves any rows in any order, repeats allowed: what shuffles and checkpoint cursors need.
- **storage**: ``downloads_whole`` says whether reading a remote shard first copies it whole
  into the node cache (``warm`` makes that copy for ``prefetch``).
- **optional capabilities**, declared in ``capabilities`` (never probed): row groups with
  decode-ahead, read-ahead hints, record sizes, undecodable-row detection, byte-range reads,
  ``index.json`` entries written by ``build-index``.

Rules every format keeps:

- Rows are 0-based positions in the shard; a reader raises ``IndexError`` for a row outside it
  and ``DataError`` (``zephon.io.errors``) naming dataset, shard and 1-based row for bad data.
- A reader never hands out objects it keeps: payloads are fresh (arrays may be read-only views).
- ``read_table`` raises ``NotColumnar`` when Arrow cannot hold the records exactly; callers then
  use ``read_payloads``.
- Format modules import optional libraries inside ``open``/``count``, not at import time, so the
  registry can name every format even where its extra is not installed.
- Instances are picklable (a ``Dataset`` carries the formats it reads to worker processes) and
  stateless: per-shard state lives in readers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

from zephon.io.storage.local_copy import Resources, whole_local_copy
from zephon.io.storage.shard_ref import ShardRef

if TYPE_CHECKING:
    from zephon.io.storage.location import Location

__all__ = [
    "Capabilities",
    "ReadAheadReader",
    "RecordSizeReader",
    "BadRowReader",
    "Resources",
    "RootView",
    "MappedSourceReader",
    "RowGroupReader",
    "ShardEntry",
    "ShardFormat",
    "ShardReader",
    "ShardRef",
    "ShardStats",
]


@dataclass(frozen=True)
class Capabilities:
    """Optional abilities of a format, declared once. Each one that is True is a promise that
    the named methods exist and work; Zephon calls nothing that is not declared.

    - ``row_groups``: the shard decodes in row groups. ``ShardFormat.row_group_starts`` gives
      their first rows (the engine makes one worker own each row group), and readers are
      ``RowGroupReader`` (``decode_ahead``).
    - ``read_ahead``: readers are ``ReadAheadReader`` (``read_ahead_rows``: a hint from the
      pointer stream, decoded on the read-ahead threads of ``zephon/io/ahead/read_ahead.py``).
    - ``record_sizes``: readers are ``RecordSizeReader`` (``record_bytes``: stored bytes of each
      record, known without decoding; token estimation uses them).
    - ``bad_rows``: readers are ``BadRowReader`` (``bad_rows``: which rows cannot be decoded at
      all, for ``on_bad_record="skip"``).
    - ``byte_ranges``: a remote shard can be read in place by byte ranges; without it
      ``downloads_whole`` is True for every remote shard.
    - ``index_file``: ``build-index`` may list the format's shards in Zephon's ``index.json``
      (``count`` gives rows and ``extra``); formats with an index of their own leave it False.
    - ``mapped_source``: readers are ``MappedSourceReader`` (``source_changed``: whether the
      file they map was altered since they opened it). A read that fails to decode is then
      retried once on a freshly opened reader when the file changed under the first one: a
      cache entry truncated in place reads as zeros up to the end of its last page, which must
      not be reported as bad data.
    """

    row_groups: bool = False
    read_ahead: bool = False
    record_sizes: bool = False
    bad_rows: bool = False
    byte_ranges: bool = False
    index_file: bool = False
    mapped_source: bool = False


@dataclass
class ShardStats:
    """What counting one shard found: rows, decoded bytes (for token estimation and the cache),
    and format facts kept in ``index.json`` (``extra``, e.g. Parquet row-group sizes)."""

    rows: int
    raw_bytes: int
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ShardEntry:
    """One shard as a format's own index lists it. Missing facts are found by Zephon: ``rows``
    by ``ShardFormat.count``, ``nbytes`` and ``version`` from the store."""

    name: str  # relative to the dataset root (a name leading out of it is refused)
    rows: int | None = None
    nbytes: int | None = None
    version: str | None = None
    raw_bytes: int | None = None  # decoded size when it differs from ``nbytes``
    # what the format's own index says of this shard that its reader needs (an MDS shard's
    # columns): kept in the catalog, handed to readers in every process as ``ShardRef.facts``
    facts: Any = field(default=None, compare=False)


class RootView:
    """A dataset root as ``ShardFormat.own_index`` sees it: its ``index.json`` (already read),
    small files by name, its listing (fetched once, on first use: a listing of an object store
    costs requests that an index spares) and the ``split=`` asked for (None: not given)."""

    def __init__(self, location: Location, dataset: str, index: dict[str, Any] | None,
                 split: str | None = None) -> None:
        self.location = location
        self.dataset = dataset
        self.index = index
        self.split = split
        self._names: list[str] | None = None

    def names(self) -> list[str]:
        """Relative names of every file under the root (hidden ones left out), sorted."""
        if self._names is None:
            self._names = [f.name for f in self.location.list_files()]
        return self._names

    def read_bytes(self, name: str) -> bytes | None:
        """A file of the root, or None when there is none."""
        try:
            return self.location.read_bytes(name)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None


@runtime_checkable
class ShardReader(Protocol):
    """One shard opened in one process. ``rows`` is its row count."""

    rows: int

    def read_table(self, rows: np.ndarray, columns: list[str] | None = None) -> pa.Table:
        """The rows (int64 positions, any order, repeats allowed) as an Arrow table in that
        order; ``columns`` selects columns (None: all). NotColumnar when Arrow cannot hold the
        records exactly."""
        ...

    def read_payloads(self, rows: np.ndarray) -> list:
        """The rows as fresh Python payloads (dicts for records with fields)."""
        ...

    def close(self) -> None:
        """Release handles; the reader is not used afterwards."""
        ...


class MappedSourceReader(ShardReader, Protocol):
    def source_changed(self) -> bool:
        """Whether the file this reader maps is no longer the one it opened (size, mtime or
        inode differ, or it is gone)."""
        ...


class RowGroupReader(ShardReader, Protocol):
    def decode_ahead(self, group: int) -> None:
        """Decode row group ``group`` now on a read-ahead thread (a hint; never raises for a
        row group that cannot be decoded: the read that wants it does)."""
        ...


class ReadAheadReader(ShardReader, Protocol):
    def read_ahead_rows(self, rows: np.ndarray) -> None:
        """A hint: ``rows`` (any order) are read next."""
        ...


class RecordSizeReader(ShardReader, Protocol):
    def record_bytes(self, rows: np.ndarray) -> np.ndarray:
        """Stored bytes of each of ``rows`` (int64), without decoding them."""
        ...


class BadRowReader(ShardReader, Protocol):
    def bad_rows(self, rows: np.ndarray) -> np.ndarray:
        """Which of ``rows`` cannot be decoded at all (bool mask)."""
        ...


class ShardFormat(ABC):
    """Base class of shard formats. Subclasses set ``name``, ``suffixes`` and ``capabilities``
    and define ``count`` and ``open``; the rest has defaults that fit a format of self-contained
    files read whole."""

    name: ClassVar[str] = ""
    suffixes: ClassVar[tuple[str, ...]] = ()
    capabilities: ClassVar[Capabilities] = Capabilities()
    extra: ClassVar[str | None] = None  # the pip extra holding its reader library, if any
    stored: ClassVar[bool] = True  # shards are files under a root (False: in-memory shards)
    # own_index picks the shards of ``root.split`` itself (else discovery keeps the entries
    # that catalog/splits.py places in the split)
    own_splits: ClassVar[bool] = False

    # -- detection ----------------------------------------------------------------------------

    def matches(self, name: str) -> bool:
        """Whether a file of this name is a shard of this format (by suffix)."""
        return bool(self.suffixes) and name.lower().endswith(self.suffixes)

    def claims_index(self, doc: dict[str, Any]) -> bool:
        """Whether an ``index.json`` without Zephon's ``format`` tag was written by this format's
        own writer (spec §3.3 step 1)."""
        return False

    def own_index(self, root: RootView) -> list[ShardEntry] | None:
        """The shards the format's own index files list, in their order, or None when the root
        has none (the listing then decides by suffix). Called when ``claims_index`` holds for
        the root's ``index.json``, and for every root without a Zephon index."""
        return None

    # -- discovery ----------------------------------------------------------------------------

    @abstractmethod
    def count(self, ref: ShardRef, res: Resources, *, keep: bool) -> ShardStats:
        """Rows of one shard from its footer or index, not its data, where the format allows.
        ``keep``: the shard will be read soon, so what counting had to fetch (a decoded copy, an
        index of the records) may stay in the node cache; ``build-index`` passes False."""

    # -- reading ------------------------------------------------------------------------------

    @abstractmethod
    def open(self, ref: ShardRef, res: Resources) -> ShardReader:
        """A reader of one shard in this process. ``ref.rows`` is the count found at discovery:
        a shard that holds another number is a DataError naming it (it changed since)."""

    def downloads_whole(self, ref: ShardRef, res: Resources) -> bool:
        """Whether opening the remote shard ``ref`` first copies it whole into the node cache
        (then downloads may start ahead of the reads). Local shards never ask."""
        return not self.capabilities.byte_ranges or res.store.remote_reads == "whole"

    def warm(self, ref: ShardRef, res: Resources) -> None:
        """Make the shard quick to open (``prefetch``): by default a remote shard that is
        downloaded whole is copied into the node cache now."""
        if not ref.location.is_local and self.downloads_whole(ref, res):
            whole_local_copy(ref, res)

    def row_group_starts(self, ref: ShardRef, res: Resources) -> tuple[bool, np.ndarray | None]:
        """(``row_groups`` capability) ``(settled, starts)``: the first row of each row group,
        then the row count, from a copy on this machine. ``settled`` False: not known without a
        request yet, ask again later; ``starts`` None: no row groups to own."""
        return True, None

    def __repr__(self) -> str:
        return f"<shard format {self.name!r}>"
