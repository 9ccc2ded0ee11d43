"""Discovery: a dataset root -> its catalog (formats, shard names, row counts, sizes).

Runs once, when the ``Dataset`` is created; the catalog travels with the pickled dataset, so
workers never list or count again. In the order of spec §3.3:

1. Zephon's ``index.json`` (it has a ``format`` tag): the catalog comes from the index alone
   (one small read, no shard opened).
2. A format's own index files (``ShardFormat.own_index``: an ``index.json`` its writer made, a
   ``state.json``...): the shards it lists, counted by the format where the index lacks rows.
3. The listing: each file in the format its name says (formats/classify.py), so a root holding
   JSONL and Parquet shards is read whole, counted in parallel by each format's ``count``
   (JSONL line-indexes every shard and keeps the indexes and decoded copies for the first
   reads; Parquet reads the footers).

Every name, listed or from an index, must resolve inside the root (catalog/confine.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from zephon.io.catalog.confine import check_local_link, confined_name
from zephon.io.catalog.index_file import INDEX_NAME, IndexEntry, index_entries, read_index
from zephon.io.catalog.splits import select_split
from zephon.io.formats import registry
from zephon.io.formats.base import RootView, ShardEntry, ShardFormat
from zephon.io.formats.classify import (
    MIXED,
    check_format,
    classify,
    detect_from_index,
    format_of,
    supported,
)
from zephon.io.storage.local_copy import Resources
from zephon.io.storage.location import Location, ObjectInfo, version_of
from zephon.io.storage.shard_ref import ShardRef

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
    facts: list[Any] | None = None  # each shard's ShardEntry.facts, when its format has any

    def format_counts(self) -> dict[str, int]:
        """Shards per format, formats in a fixed order."""
        return {f: self.formats.count(f) for f in registry.names() if f in self.formats}


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


def _catalog(names, ids, counts, sizes, raw, versions, from_index, kinds,
             facts=None) -> Catalog:
    order = np.argsort(np.asarray(ids, dtype=np.int64), kind="stable")

    def arr(values):
        a = np.asarray(values, dtype=np.int64)[order] if len(values) else np.zeros(0, np.int64)
        a.setflags(write=False)
        return a

    formats = [kinds[i] for i in order]
    fmt = formats[0] if len(set(formats)) == 1 else MIXED
    return Catalog(fmt, [names[i] for i in order], arr(ids), arr(counts), arr(sizes), arr(raw),
                   [versions[i] for i in order], from_index, formats,
                   None if facts is None else [facts[i] for i in order])


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
             max_workers: int = 8, split: str | None = None) -> Catalog:
    where = f"dataset {dataset!r} at {location.display()}"
    doc = read_index(location, dataset)
    if doc is None:  # an index proves the root exists; on object stores this saves round trips
        location.check_root()
    wanted = None if fmt is None else check_format(fmt.lower(), where)
    tagged = doc is not None and isinstance(doc.get("format"), str) and bool(doc["format"])
    if not tagged:  # Zephon's own index comes first; then the formats' own indexes
        catalog = _catalog_from_own_index(dataset, where, location, doc, wanted, res,
                                          max_workers, split)
        if catalog is not None:
            return catalog
    if doc is not None:
        catalog = _catalog_from_index(dataset, where, location, doc, wanted, split)
        if catalog is not None:
            return catalog
    listing = root_files(location, dataset)
    found = classify([f.name for f in listing], wanted)
    if not found.shards:
        names = [f.name for f in listing]
        kinds = {format_of(n) for n in names} - {None}
        for kind in sorted(kinds - set(supported())):  # e.g. vortex: says it is not supported
            check_format(kind, where)
        what = f"no {wanted} shards" if wanted else ("no recognised shards (" + ", ".join(
            f"*{s}" for f in registry.formats() if f.stored for s in f.suffixes) + ")")
        raise ValueError(f"{where}: {what} found; saw {_describe(names)}")
    _warn_unread(where, found.data_unread, "look like data but are no shards of " +
                 (f"format {wanted!r} (fmt=)" if wanted else "a format zephon reads"))
    kind_of = {n: k for k, names in found.shards.items() for n in names}
    kind_of = {n: kind_of[n] for n in select_split(list(kind_of), split, where)}
    files = [f for f in listing if f.name in kind_of]
    refs = [ShardRef(dataset, location, f.name, f.size, f.version) for f in files]
    stats = _count([registry.get(kind_of[r.name]) for r in refs], refs, res, max_workers)
    kept = [i for i, s in enumerate(stats) if s.rows > 0]
    if not kept:
        raise ValueError(f"{where}: dataset is empty ({len(files)} shard(s), no records)")
    return _catalog([files[i].name for i in kept], kept, [stats[i].rows for i in kept],
                    [files[i].size for i in kept], [stats[i].raw_bytes for i in kept],
                    [files[i].version for i in kept], False,
                    [kind_of[files[i].name] for i in kept])


def _count(fmts: list[ShardFormat], refs: list[ShardRef], res: Resources, max_workers: int):
    """Each shard counted by its format, in parallel; what counting fetched is kept."""
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(refs)))) as pool:
        return list(pool.map(lambda fr: fr[0].count(fr[1], res, keep=True), zip(fmts, refs)))


def _catalog_from_own_index(dataset: str, where: str, location: Location, doc: dict | None,
                            wanted: str | None, res: Resources, max_workers: int,
                            split: str | None) -> Catalog | None:
    """The catalog of the first format (``wanted`` only, when given) whose own index files
    the root holds, or None. Rows the index lacks are counted by the format."""
    root = RootView(location, dataset, doc, split)
    candidates = [registry.get(wanted)] if wanted else [f for f in registry.formats() if f.stored]
    for fmt in candidates:
        entries = fmt.own_index(root)
        if entries is not None:
            if not fmt.own_splits:
                keep = set(select_split([e.name for e in entries], split, where))
                entries = [e for e in entries if e.name in keep]
            return _own_catalog(dataset, where, location, fmt, entries, res, max_workers)
    return None


def _own_catalog(dataset: str, where: str, location: Location, fmt: ShardFormat,
                 entries: list[ShardEntry], res: Resources, max_workers: int) -> Catalog:
    source = f"{location.display()} ({fmt.name} index)"
    names = [confined_name(location, e.name, dataset=dataset, source=source) for e in entries]
    listed: dict[str, ObjectInfo] = {}
    if any(e.nbytes is None or e.version is None for e in entries):
        listed = {f.name: f for f in location.list_files()}  # one listing, not a HEAD each
    sizes, versions = [], []
    for e, n in zip(entries, names):
        info = listed.get(n)
        if info is None and (e.nbytes is None or e.version is None):
            raise ValueError(f"{where}: the {fmt.name} index lists {n!r}, which does not exist")
        sizes.append(e.nbytes if e.nbytes is not None else info.size)
        versions.append(e.version if e.version is not None else info.version)
    refs = [ShardRef(dataset, location, n, b, v, facts=e.facts)
            for n, b, v, e in zip(names, sizes, versions, entries)]
    todo = [i for i, e in enumerate(entries) if e.rows is None]
    counted = dict(zip(todo, _count([fmt] * len(todo), [refs[i] for i in todo], res,
                                    max_workers))) if todo else {}
    rows, raw = [], []
    for i, e in enumerate(entries):
        st = counted.get(i)
        rows.append(st.rows if st is not None else int(e.rows))
        raw.append(e.raw_bytes if e.raw_bytes is not None else
                   st.raw_bytes if st is not None else sizes[i])
    kept = [i for i in range(len(entries)) if rows[i] > 0]
    if not kept:
        raise ValueError(f"{where}: dataset is empty ({len(entries)} shard(s) in its "
                         f"{fmt.name} index, none with records)")
    facts = [entries[i].facts for i in kept]
    return _catalog([names[i] for i in kept], kept, [rows[i] for i in kept],
                    [sizes[i] for i in kept], [raw[i] for i in kept],
                    [versions[i] for i in kept], True, [fmt.name] * len(kept),
                    facts if any(f is not None for f in facts) else None)


def _catalog_from_index(dataset: str, where: str, location: Location, doc: dict,
                        wanted: str | None, split: str | None) -> Catalog | None:
    """The catalog an index gives, or None (with a warning) when it lists no shards this build
    reads, of ``wanted`` when given: the listing decides then."""
    tag = detect_from_index(doc)
    if wanted is None and tag is not None and tag != MIXED:
        check_format(tag, where)  # mds, litdata, ...: not supported, say so
    entries = index_entries(doc, location, dataset)
    kinds = [format_of(e.name) for e in entries]
    readable = bool(entries) and all(k in supported() for k in kinds)
    if readable and wanted is not None and wanted not in kinds:
        readable = False
    if not readable:
        warnings.warn(f"{where}: ignoring {INDEX_NAME}, which does not list "
                      f"{wanted or ' or '.join(supported())} shards", stacklevel=4)
        return None
    if wanted is not None:
        _warn_unread(where, [e.name for e, k in zip(entries, kinds) if k != wanted],
                     f"{INDEX_NAME} lists but are no shards of format {wanted!r} (fmt=)")
    in_it = set(select_split([e.name for e in entries], split, where))
    kinds = [k if e.name in in_it else None for e, k in zip(entries, kinds)]  # not of split
    digest = hashlib.sha1(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
    # ids stay positions in the index, so a shard keeps its id whatever fmt= selects
    catalog = _from_index([e if k is not None and (wanted is None or k == wanted)
                           else e._replace(rows=0) for e, k in zip(entries, kinds)], kinds,
                          digest)
    if not len(catalog.ids):
        raise ValueError(f"{where}: dataset is empty ({len(entries)} shard(s) in "
                         f"{INDEX_NAME}, none with records)")
    return catalog
