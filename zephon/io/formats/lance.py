"""Lance datasets (``fmt="lance"``) as a registry entry, read through ``pylance``.

A Lance dataset is a directory: ``_versions/*.manifest`` (one per committed version),
``data/*.lance`` files and ``_deletions/`` files. Discovery pins the newest committed version
(spec addendum A.11): it lists ``_versions/``, reads that manifest alone (a copy in a temporary
directory is opened with ``pylance``, which reads no data file to list fragments) and makes one
shard per fragment, in manifest order, of ``physical rows - deleted rows`` rows. Later
versions written while the dataset is read are not seen: the catalog names the data and
deletion files of the pinned version, and Lance never rewrites a file.

A shard is its fragment's data file, read with ``lance.file.LanceFileReader`` (in place when
local, copied whole into the node cache when remote) at the physical rows that the logical
rows map to once the fragment's deleted rows (its deletion file, read once) are skipped.
Records are Arrow rows with the values of spec addendum A.10, as for Parquet.

Refused at discovery (``ValueError``): fragments of several data files (added columns),
overlays, Lance v1 data files, and deletion bitmaps (``.bin``; Lance writes them for large
deletions, zephon reads the ``.arrow`` lists). There is no ``build-index`` mode: the manifest
is the index.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np
import pyarrow as pa

from zephon.block import take_table
from zephon.io.errors import DataError
from zephon.io.formats.base import (
    Capabilities,
    Resources,
    RootView,
    ShardEntry,
    ShardFormat,
    ShardRef,
    ShardStats,
)
from zephon.io.formats.rows_ahead import RowsAhead, RowsAheadReader
from zephon.io.storage.local_copy import whole_local_copy
from zephon.payload_values import mark

__all__ = ["LANCE", "LanceFormat", "LanceShardReader", "newest_manifest"]

_U64 = (1 << 64) - 1
# rows spread over at most this many times their count are read as the range that covers them
# (``read_range`` skips ``take_rows``' per-row checks in Python and its scattered page reads)
DENSE = 3


def _lance() -> Any:
    try:
        import lance
        import lance.file  # noqa: F401
    except ImportError as e:
        raise ImportError("reading Lance datasets needs pylance: pip install 'zephon[lance]'") \
            from e
    return lance


# the manifest a ``Dataset.from_path(name, ".../_versions/N.manifest")`` pins (None: newest)
PINNED_MANIFEST: ContextVar[str | None] = ContextVar("zephon_lance_manifest", default=None)


def split_manifest_path(path: str) -> tuple[str, str] | None:
    """``(dataset root, manifest file name)`` when ``path`` names a ``_versions/*.manifest``
    file of a Lance dataset, else None."""
    head, name = posixpath.split(path.rstrip("/"))
    parent, versions = posixpath.split(head)
    if versions != "_versions" or newest_manifest([name]) is None:
        return None
    return parent, name


@contextmanager
def _pinning(name: str | None) -> Iterator[None]:
    token = PINNED_MANIFEST.set(name)
    try:
        yield
    finally:
        PINNED_MANIFEST.reset(token)


def pinned_manifest(dataset: str, path: str, fmt: str | None) -> tuple[str, str | None, Any]:
    """``(root, fmt, context)`` for ``Dataset.from_path``: a ``_versions/N.manifest`` path
    reads that version of the Lance dataset at its root (discover inside ``context``)."""
    manifest = split_manifest_path(path)
    if manifest is None:
        return path, fmt, _pinning(None)
    if fmt not in (None, "lance"):
        raise ValueError(f"dataset {dataset!r}: {path} is a Lance manifest, not fmt={fmt!r}")
    return manifest[0], "lance", _pinning(manifest[1])


def newest_manifest(names: list[str]) -> tuple[int, str] | None:
    """(version, file name) of the newest ``N.manifest`` among ``names``: Lance names
    manifests by version, or (its V2 scheme) by ``2**64 - 1 - version``."""
    best = None
    for name in names:
        stem, dot, ext = posixpath.basename(name).partition(".")
        if ext != "manifest" or not stem.isdigit():
            continue
        n = int(stem)
        version = _U64 - n if n > (1 << 63) else n
        if best is None or version > best[0]:
            best = (version, posixpath.basename(name))
    return best


def _fragments(manifest: bytes, name: str) -> list[Any]:
    """The fragments of one manifest, read by pylance from a copy of it alone."""
    tmp = tempfile.mkdtemp(prefix="zephon-lance-")
    try:
        os.makedirs(os.path.join(tmp, "_versions"))
        with open(os.path.join(tmp, "_versions", name), "wb") as f:
            f.write(manifest)
        return [fr.metadata for fr in _lance().dataset(tmp).get_fragments()]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _check(meta: Any, where: str) -> tuple[str, str | None]:
    """(data file, deletion file or None) of a fragment; ValueError for what zephon refuses."""
    fid = meta.id
    if len(meta.files) != 1:
        raise ValueError(f"{where}: fragment {fid} has {len(meta.files)} data files (columns "
                         "added later); zephon reads fragments of one file")
    if getattr(meta, "overlays", None):
        raise ValueError(f"{where}: fragment {fid} has overlays, which zephon does not read")
    data = meta.files[0]
    if data.file_major_version < 2:
        raise ValueError(f"{where}: fragment {fid} is a Lance v1 file; zephon reads v2 files")
    deletion = meta.deletion_file
    if deletion is None:
        return data.path, None
    if deletion.file_type != "array":
        raise ValueError(f"{where}: fragment {fid} has a deletion bitmap ({deletion.file_type}"
                         "); zephon reads deletion lists (.arrow)")
    return data.path, f"_deletions/{fid}-{deletion.read_version}-{deletion.id}.arrow"


class LanceShardReader(RowsAheadReader):
    """One fragment's data file opened in this process; any rows, any order.

    Rows that lie within ``DENSE`` times their count (a run of the pointer stream, a shuffled
    block of a shard) are read as the range that covers them and picked; others with
    ``take_rows`` of the sorted distinct rows. Reads the engine announces run ahead on the
    read-ahead threads (``rows_ahead.py``)."""

    def __init__(self, ref: ShardRef, res: Resources) -> None:
        self.ref = ref
        facts = ref.facts
        lance = _lance()
        try:
            self._file = lance.file.LanceFileReader(whole_local_copy(ref, res))
            physical = int(self._file.num_rows())
            # the schema reads are laid out in (a read of no rows), marked for A.10 values
            self._schema = mark(self._file.take_rows([]).to_table()
                                .replace_schema_metadata(None)).schema
        except (OSError, ValueError, RuntimeError) as e:
            raise DataError(f"not a readable Lance data file: {str(e).splitlines()[0]}",
                            dataset=ref.dataset, shard=ref.display) from e
        if physical != facts["physical_rows"]:
            raise DataError(f"holds {physical} rows, the manifest says "
                            f"{facts['physical_rows']}", dataset=ref.dataset, shard=ref.display)
        self._kept = None
        if facts["deletion"]:
            deleted = self._deleted(res, facts["deletion"], physical)
            self._kept = np.setdiff1d(np.arange(physical, dtype=np.int64), deleted)
        self.rows = physical if self._kept is None else len(self._kept)
        if ref.rows is not None and self.rows != ref.rows:
            raise DataError(f"holds {self.rows} rows, {ref.rows} were counted at discovery",
                            dataset=ref.dataset, shard=ref.display)
        # pylance's file reader takes itself mutably for a read ("Already borrowed" from a
        # second thread): the read-ahead thread and the caller's take turns
        self._lock = threading.Lock()
        self._ahead = RowsAhead(self._read)

    def _deleted(self, res: Resources, name: str, physical: int) -> np.ndarray:
        ref = ShardRef(self.ref.dataset, self.ref.location, name, 0, name)
        try:
            table = pa.ipc.open_file(pa.memory_map(whole_local_copy(ref, res))).read_all()
            deleted = np.asarray(table.column(0).to_numpy(), dtype=np.int64)
        except (pa.ArrowInvalid, OSError, KeyError, IndexError) as e:
            raise DataError(f"deletion file cannot be read: {e}", dataset=ref.dataset,
                            shard=ref.display) from e
        if len(deleted) and (deleted.min() < 0 or deleted.max() >= physical):
            raise DataError(f"deletes rows outside the fragment's {physical}",
                            dataset=ref.dataset, shard=ref.display)
        return deleted

    def read_table(self, rows: np.ndarray, columns: list[str] | None = None) -> pa.Table:
        rows = np.ascontiguousarray(rows, dtype=np.int64).ravel()
        started = self._ahead.take(rows)
        found = self._read(rows) if started is None else started.result()
        return found if columns is None else found.select(columns)

    def _read(self, rows: np.ndarray) -> pa.Table:
        """All columns of ``rows``, in their order."""
        if len(rows) and (rows.min() < 0 or rows.max() >= self.rows):
            bad = int(rows[(rows < 0) | (rows >= self.rows)][0])
            raise IndexError(f"{self.ref.label}: row index {bad} out of range for a fragment "
                             f"of {self.rows} rows")
        if not len(rows):
            return self._schema.empty_table()
        physical = rows if self._kept is None else self._kept[rows]
        lo, hi = int(physical.min()), int(physical.max()) + 1
        try:
            if hi - lo <= DENSE * len(rows):
                pick = physical - lo
                with self._lock:
                    found = self._file.read_range(lo, hi - lo, batch_size=hi - lo).to_table()
            else:
                unique, pick = np.unique(physical, return_inverse=True)
                with self._lock:
                    found = self._file.take_rows(unique.tolist(),
                                                 batch_size=len(unique)).to_table()
        except (OSError, ValueError, RuntimeError) as e:
            raise DataError(f"cannot read rows from row {int(rows[0]) + 1}: "
                            f"{str(e).splitlines()[0]}", dataset=self.ref.dataset,
                            shard=self.ref.display) from e
        if len(pick) != found.num_rows or (pick != np.arange(len(pick))).any():
            found = take_table(found, pick.astype(np.int64))
        return pa.Table.from_arrays(found.columns, schema=self._schema)


class LanceFormat(ShardFormat):
    name = "lance"
    suffixes = ()  # a Lance dataset is found by its _versions/ manifests, not by file names
    capabilities = Capabilities(read_ahead=True)
    extra = "lance"

    def own_index(self, root: RootView) -> list[ShardEntry] | None:
        if root.index is not None:
            return None  # another format's index
        loc = root.location
        try:
            listed = loc.fs.ls(loc.path("_versions"), detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        pinned = PINNED_MANIFEST.get()
        names = [posixpath.basename(str(n)) for n in listed]
        if pinned is not None and pinned not in names:
            raise FileNotFoundError(f"dataset {root.dataset!r}: no Lance manifest "
                                    f"{loc.display('_versions/' + pinned)}")
        newest = newest_manifest([pinned] if pinned is not None else names)
        if newest is None:
            return None
        version, name = newest
        where = f"dataset {root.dataset!r} at {loc.display()} (Lance version {version})"
        try:
            metas = _fragments(loc.read_bytes(f"_versions/{name}"), name)
        except (OSError, ValueError, RuntimeError) as e:
            raise DataError(f"the Lance manifest cannot be read: {str(e).splitlines()[0]}",
                            dataset=root.dataset, shard=loc.display(f"_versions/{name}")) from e
        out = []
        for meta in metas:
            data, deletion = _check(meta, where)
            deleted = meta.deletion_file.num_deleted_rows if deletion else 0
            size = meta.files[0].file_size_bytes
            out.append(ShardEntry(
                f"data/{data}", int(meta.physical_rows) - int(deleted),
                nbytes=int(size) if size else None,
                version=f"lance:v{version}" if size else None,
                facts={"physical_rows": int(meta.physical_rows), "deletion": deletion,
                       "manifest": f"_versions/{name}", "version": version}))
        return out

    def count(self, ref: ShardRef, res: Resources, *, keep: bool) -> ShardStats:
        reader = LanceShardReader(ref, res)
        try:
            return ShardStats(reader.rows, ref.size)
        finally:
            reader.close()

    def open(self, ref: ShardRef, res: Resources) -> LanceShardReader:
        return LanceShardReader(ref, res)


LANCE = LanceFormat()
