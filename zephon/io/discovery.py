"""Discovery: a dataset root -> its catalog (format, shard names, row counts, sizes).

Runs once, when the ``Dataset`` is created; the catalog travels with the pickled dataset, so
workers never list or count again. With an ``index.json`` the catalog comes from the index alone
(one small read, no shard opened). Without one, shards are listed and counted in parallel: JSONL
by line-indexing every shard (the indexes and decoded copies are kept for the first reads),
Parquet from the footers.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from zephon.io.formats import check_format, detect_from_index, detect_from_names, shard_names
from zephon.io.index_file import INDEX_NAME, IndexEntry, index_entries, read_index
from zephon.io.local_copy import Resources, ShardRef
from zephon.io.shard_stats import shard_stats
from zephon.io.storage import Location, ObjectInfo

__all__ = ["Catalog", "discover"]


@dataclass
class Catalog:
    """Shards of one dataset that hold records, aligned with ``ids`` (sorted)."""

    fmt: str
    names: list[str]
    ids: np.ndarray
    counts: np.ndarray
    sizes: np.ndarray
    raw_bytes: np.ndarray
    versions: list[str]
    from_index: bool


def _describe(listing: list[ObjectInfo]) -> str:
    if not listing:
        return "no files at all"
    shown = ", ".join(f.name for f in listing[:8])
    more = f" and {len(listing) - 8} more" if len(listing) > 8 else ""
    return f"{len(listing)} file(s): {shown}{more}"


def _from_index(fmt: str, entries: list[IndexEntry], digest: str) -> Catalog:
    names, ids, counts, sizes, raw, versions = [], [], [], [], [], []
    for i, e in enumerate(entries):
        if e.rows == 0:
            continue
        names.append(e.name)
        ids.append(i)
        counts.append(e.rows)
        sizes.append(e.nbytes)
        raw.append(int(e.extra.get("uncompressed_bytes") or e.nbytes))
        versions.append(e.version or f"index:{digest}:{e.nbytes}")
    return _catalog(fmt, names, ids, counts, sizes, raw, versions, True)


def _catalog(fmt, names, ids, counts, sizes, raw, versions, from_index) -> Catalog:
    order = np.argsort(np.asarray(ids, dtype=np.int64), kind="stable")

    def arr(values):
        a = np.asarray(values, dtype=np.int64)[order] if len(values) else np.zeros(0, np.int64)
        a.setflags(write=False)
        return a

    return Catalog(fmt, [names[i] for i in order], arr(ids), arr(counts), arr(sizes), arr(raw),
                   [versions[i] for i in order], from_index)


def discover(dataset: str, location: Location, fmt: str | None, res: Resources,
             max_workers: int = 8) -> Catalog:
    where = f"dataset {dataset!r} at {location.display()}"
    doc = read_index(location, dataset)
    if doc is None:  # an index proves the root exists; on object stores this saves round trips
        location.check_root()
    listing: list[ObjectInfo] | None = None
    if fmt is None:
        detected = detect_from_index(doc) if doc is not None else None
        if detected is None:
            listing = location.list_files()
            detected = detect_from_names([f.name for f in listing])
            if detected is None:
                raise ValueError(f"{where}: no recognised shards (*.jsonl, *.jsonl.gz, "
                                 f"*.jsonl.zst, *.parquet); saw {_describe(listing)}")
    else:
        detected = fmt.lower()
    fmt = check_format(detected, where)
    if doc is not None:
        entries = index_entries(doc, location, dataset)
        names = [e.name for e in entries]
        if entries and len(shard_names(fmt, names)) == len(names):
            digest = hashlib.sha1(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
            catalog = _from_index(fmt, entries, digest)
            if not len(catalog.ids):
                raise ValueError(f"{where}: dataset is empty ({len(entries)} shard(s) in "
                                 f"{INDEX_NAME}, none with records)")
            return catalog
        warnings.warn(f"{where}: ignoring {INDEX_NAME}, which does not list {fmt} shards",
                      stacklevel=3)
    if listing is None:
        listing = location.list_files()
    files = [f for f in listing if shard_names(fmt, [f.name])]
    if not files:
        raise ValueError(f"{where}: no {fmt} shards found; saw {_describe(listing)}")
    refs = [ShardRef(dataset, location, f.name, f.size, f.version) for f in files]
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(refs)))) as pool:
        stats = list(pool.map(lambda r: shard_stats(fmt, r, res, keep=True), refs))
    kept = [i for i, s in enumerate(stats) if s.rows > 0]
    if not kept:
        raise ValueError(f"{where}: dataset is empty ({len(files)} {fmt} shard(s), no records)")
    return _catalog(fmt, [files[i].name for i in kept], kept, [stats[i].rows for i in kept],
                    [files[i].size for i in kept], [stats[i].raw_bytes for i in kept],
                    [files[i].version for i in kept], False)
