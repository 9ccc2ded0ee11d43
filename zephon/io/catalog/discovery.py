"""Discovery: a dataset root -> its catalog (formats, shard names, row counts, sizes).

Runs once, when the ``Dataset`` is created; the catalog travels with the pickled dataset, so
workers never list or count again. With an ``index.json`` the catalog comes from the index alone
(one small read, no shard opened). Without one, shards are listed and counted in parallel: JSONL
by line-indexing every shard (the indexes and decoded copies are kept for the first reads),
Parquet from the footers.

Each shard has its own format (formats/classify.py): a root holding JSONL and Parquet shards is read
whole. Every name, listed or from the index, must resolve inside the root (catalog/confine.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from zephon.io.catalog.confine import check_local_link, confined_name
from zephon.io.catalog.index_file import INDEX_NAME, IndexEntry, index_entries, read_index
from zephon.io.catalog.shard_stats import shard_stats
from zephon.io.formats.classify import (
    MIXED,
    SUPPORTED,
    check_format,
    classify,
    detect_from_index,
    format_of,
)
from zephon.io.storage.local_copy import Resources, ShardRef
from zephon.io.storage.location import Location, ObjectInfo, version_of

__all__ = ["Catalog", "discover", "root_files"]


@dataclass
class Catalog:
    """Shards of one dataset that hold records, aligned with ``ids`` (sorted)."""

    fmt: str  # the shards' format, or "mixed"
    names: list[str]
    ids: np.ndarray
    counts: np.ndarray
    sizes: np.ndarray
    raw_bytes: np.ndarray
    versions: list[str]
    from_index: bool
    formats: list[str]  # each shard's format

    def format_counts(self) -> dict[str, int]:
        """Shards per format, formats in a fixed order."""
        return {f: self.formats.count(f) for f in SUPPORTED if f in self.formats}


def _describe(names: list[str]) -> str:
    if not names:
        return "no files at all"
    shown = ", ".join(names[:8])
    more = f" and {len(names) - 8} more" if len(names) > 8 else ""
    return f"{len(names)} file(s): {shown}{more}"


def _from_index(entries: list[IndexEntry], fmts: list[str], digest: str) -> Catalog:
    names, ids, counts, sizes, raw, versions, kinds = [], [], [], [], [], [], []
    for i, (e, f) in enumerate(zip(entries, fmts)):
        if e.rows == 0:
            continue
        names.append(e.name)
        ids.append(i)
        counts.append(e.rows)
        sizes.append(e.nbytes)
        raw.append(int(e.extra.get("uncompressed_bytes") or e.nbytes))
        versions.append(e.version or f"index:{digest}:{e.nbytes}")
        kinds.append(f)
    return _catalog(names, ids, counts, sizes, raw, versions, True, kinds)


def _catalog(names, ids, counts, sizes, raw, versions, from_index, kinds) -> Catalog:
    order = np.argsort(np.asarray(ids, dtype=np.int64), kind="stable")

    def arr(values):
        a = np.asarray(values, dtype=np.int64)[order] if len(values) else np.zeros(0, np.int64)
        a.setflags(write=False)
        return a

    formats = [kinds[i] for i in order]
    fmt = formats[0] if len(set(formats)) == 1 else MIXED
    return Catalog(fmt, [names[i] for i in order], arr(ids), arr(counts), arr(sizes), arr(raw),
                   [versions[i] for i in order], from_index, formats)


def _warn_unread(where: str, names: list[str], why: str) -> None:
    if names:
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        warnings.warn(f"{where}: not reading {len(names)} file(s) that {why}: {shown}",
                      UserWarning, stacklevel=4)


def root_files(location: Location, dataset: str | None = None) -> list[ObjectInfo]:
    """The root's listing, every name confined to the root, the index file left out. In a
    local root, links to files are listed too (the filesystem listing leaves them out): those
    inside the root like files, those leading out of it refused (catalog/confine.py)."""
    out = [f for f in location.list_files() if f.name != INDEX_NAME]
    if location.is_local:  # plain files found without following links: inside the root
        return sorted(out + _local_links(location, dataset), key=lambda f: f.name)
    for f in out:
        confined_name(location, f.name, dataset=dataset, source=location.display(f.name))
    return out


def _local_links(location: Location, dataset: str | None) -> list[ObjectInfo]:
    """Links under a local root, hidden ones left out like the listing does. A link to a
    directory inside the root is not followed: its files are listed where they are."""
    found = []
    root = location.root
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        for entry in dirs + files:
            path = os.path.join(top, entry)
            if entry.startswith((".", "_")) or not os.path.islink(path):
                continue
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            check_local_link(location, rel, dataset=dataset)
            if entry in files and os.path.isfile(path):
                st = os.stat(path)
                found.append(ObjectInfo(rel, st.st_size,
                                        version_of({"size": st.st_size, "mtime": st.st_mtime})))
    return found


def discover(dataset: str, location: Location, fmt: str | None, res: Resources,
             max_workers: int = 8) -> Catalog:
    where = f"dataset {dataset!r} at {location.display()}"
    doc = read_index(location, dataset)
    if doc is None:  # an index proves the root exists; on object stores this saves round trips
        location.check_root()
    wanted = None if fmt is None else check_format(fmt.lower(), where)
    if doc is not None:
        catalog = _catalog_from_index(dataset, where, location, doc, wanted)
        if catalog is not None:
            return catalog
    listing = root_files(location, dataset)
    found = classify([f.name for f in listing], wanted)
    if not found.shards:
        names = [f.name for f in listing]
        kinds = {format_of(n) for n in names} - {None}
        for kind in sorted(kinds - set(SUPPORTED)):  # e.g. vortex: says it is not supported
            check_format(kind, where)
        what = f"no {wanted} shards" if wanted else ("no recognised shards (*.jsonl, "
                                                      "*.jsonl.gz, *.jsonl.zst, *.parquet)")
        raise ValueError(f"{where}: {what} found; saw {_describe(names)}")
    _warn_unread(where, found.data_unread, "look like data but are no shards of " +
                 (f"format {wanted!r} (fmt=)" if wanted else "a format zephon reads"))
    kind_of = {n: k for k, names in found.shards.items() for n in names}
    files = [f for f in listing if f.name in kind_of]
    refs = [ShardRef(dataset, location, f.name, f.size, f.version) for f in files]
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(refs)))) as pool:
        stats = list(pool.map(lambda r: shard_stats(kind_of[r.name], r, res, keep=True), refs))
    kept = [i for i, s in enumerate(stats) if s.rows > 0]
    if not kept:
        raise ValueError(f"{where}: dataset is empty ({len(files)} shard(s), no records)")
    return _catalog([files[i].name for i in kept], kept, [stats[i].rows for i in kept],
                    [files[i].size for i in kept], [stats[i].raw_bytes for i in kept],
                    [files[i].version for i in kept], False,
                    [kind_of[files[i].name] for i in kept])


def _catalog_from_index(dataset: str, where: str, location: Location, doc: dict,
                        wanted: str | None) -> Catalog | None:
    """The catalog an index gives, or None (with a warning) when it lists no shards this build
    reads, of ``wanted`` when given: the listing decides then."""
    tag = detect_from_index(doc)
    if wanted is None and tag is not None and tag != MIXED:
        check_format(tag, where)  # mds, litdata, ...: not supported, say so
    entries = index_entries(doc, location, dataset)
    kinds = [format_of(e.name) for e in entries]
    readable = bool(entries) and all(k in SUPPORTED for k in kinds)
    if readable and wanted is not None and wanted not in kinds:
        readable = False
    if not readable:
        warnings.warn(f"{where}: ignoring {INDEX_NAME}, which does not list "
                      f"{wanted or 'jsonl or parquet'} shards", stacklevel=4)
        return None
    if wanted is not None:
        _warn_unread(where, [e.name for e, k in zip(entries, kinds) if k != wanted],
                     f"{INDEX_NAME} lists but are no shards of format {wanted!r} (fmt=)")
    digest = hashlib.sha1(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
    # ids stay positions in the index, so a shard keeps its id whatever fmt= selects
    catalog = _from_index([e if wanted is None or k == wanted else e._replace(rows=0)
                           for e, k in zip(entries, kinds)], kinds, digest)
    if not len(catalog.ids):
        raise ValueError(f"{where}: dataset is empty ({len(entries)} shard(s) in "
                         f"{INDEX_NAME}, none with records)")
    return catalog
