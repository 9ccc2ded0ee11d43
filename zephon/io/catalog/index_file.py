"""``index.json``: shard names, sizes and row counts, so start-up opens no shard.

Written by ``build_index`` / ``python -m zephon build-index {FORMAT|auto} DIR_OR_URL`` for the
formats with the ``index_file`` capability (JSONL, Parquet, ...)::

    {"format": "parquet", "version": 1,
     "shards": [{"name": "part-0.parquet", "bytes": 1234, "rows": 1000,
                 "version": "ETag:...", "extra": {"row_groups": [500, 500]}}, ...]}

``"auto"`` indexes every shard of the root, each in the format its name says; the tag is then
that format, or ``"mixed"``. An index of one format is refused for a root that also holds
shards of another: discovery trusts an index without listing the root, so those would never
be read. Every name read from an index must lie inside the root (catalog/confine.py).

Reading also accepts third-party indexes (Spark/Ray writers) with the usual field spellings
(``path``/``basename``, ``num_rows``/``samples``, ``size``/``num_bytes``).
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from zephon.io.catalog.confine import confined_name
from zephon.io.errors import DataError
from zephon.io.formats import registry
from zephon.io.formats.base import ShardStats
from zephon.io.formats.classify import MIXED, classify
from zephon.io.options import resolve_store
from zephon.io.storage.local_copy import Resources
from zephon.io.storage.location import Location
from zephon.io.storage.shard_ref import ShardRef

__all__ = ["INDEX_NAME", "IndexEntry", "build_index", "main", "read_index", "index_entries"]

INDEX_NAME = "index.json"
_NAME_KEYS = ("name", "path", "basename", "file", "filename")
_ROW_KEYS = ("rows", "num_rows", "samples", "num_samples", "count", "row_count")
_BYTE_KEYS = ("bytes", "size", "num_bytes", "raw_bytes", "size_bytes")


class IndexEntry(NamedTuple):
    """One shard listed in an index."""

    name: str
    rows: int
    nbytes: int
    version: str | None
    extra: dict[str, Any]


def read_index(location: Location, dataset: str | None = None) -> dict[str, Any] | None:
    """The parsed index.json at the root, or None when there is none."""
    try:
        raw = location.read_bytes(INDEX_NAME)
    except (FileNotFoundError, NotADirectoryError):  # no root, or a root that is a file
        return None
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise DataError(f"index.json is not valid JSON: {e}", dataset=dataset,
                        shard=location.display(INDEX_NAME)) from e
    if not isinstance(doc, dict):
        raise DataError("index.json must hold a JSON object", dataset=dataset,
                        shard=location.display(INDEX_NAME))
    return doc


def index_entries(doc: dict[str, Any], location: Location,
                  dataset: str | None = None) -> list[IndexEntry]:
    """Normalised shard entries of an index document, in the index's order."""
    where = location.display(INDEX_NAME)
    shards = doc.get("shards")
    if not isinstance(shards, list):
        raise DataError("index.json has no 'shards' list", dataset=dataset, shard=where)
    out = []
    for i, entry in enumerate(shards):
        if not isinstance(entry, dict):
            raise DataError(f"shard entry #{i} is not an object", dataset=dataset, shard=where)
        extra = entry.get("extra") if isinstance(entry.get("extra"), dict) else {}
        name = next((entry[k] for k in _NAME_KEYS if isinstance(entry.get(k), str)), None)
        rows = next((entry[k] for k in _ROW_KEYS if isinstance(entry.get(k), int)), None)
        if rows is None and isinstance(extra.get("row_groups"), list):
            rows = sum(int(x) for x in extra["row_groups"])
        nbytes = next((entry[k] for k in _BYTE_KEYS if isinstance(entry.get(k), int)), 0)
        if name is None or rows is None or rows < 0:
            raise DataError(f"shard entry #{i} lacks a file name or a row count: {entry!r}",
                            dataset=dataset, shard=where)
        version = entry.get("version") if isinstance(entry.get("version"), str) else None
        try:
            name = confined_name(location, name, dataset=dataset, source=where)
        except DataError as e:
            raise DataError(f"shard entry #{i}: {e.detail}", dataset=dataset,
                            shard=e.shard) from None
        out.append(IndexEntry(name, int(rows), int(nbytes), version, extra))
    return out


def index_document(fmt: str, names: list[str], sizes: list[int], versions: list[str],
                   stats: list[ShardStats]) -> dict[str, Any]:
    return {
        "format": fmt,
        "version": 1,
        "shards": [
            {"name": n, "bytes": b, "rows": s.rows, "version": v, "extra": s.extra}
            for n, b, v, s in zip(names, sizes, versions, stats)
        ],
    }


def _progress(total: int, enabled: bool, desc: str) -> Any:
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return _PlainProgress(total, desc)
    return tqdm(total=total, desc=desc, unit="shard", file=sys.stderr)


class _PlainProgress:
    """A progress line on stderr when tqdm is not installed."""

    def __init__(self, total: int, desc: str) -> None:
        self.total, self.desc, self.n = total, desc, 0

    def update(self, k: int = 1) -> None:
        self.n += k
        if self.n == self.total or self.n % max(1, self.total // 20) == 0:
            print(f"\r{self.desc}: {self.n}/{self.total} shards", end="", file=sys.stderr)

    def close(self) -> None:
        print(file=sys.stderr)


def build_index(format_name: str, dataset_dir: str | os.PathLike, *,
                output_path: str | os.PathLike | None = None, progress: bool = True,
                max_workers: int = 8, storage_options: dict[str, Any] | None = None) -> Path | str:
    """Write ``index.json`` for a dataset of one format with the ``index_file`` capability
    (JSONL, Parquet, ...) or (``"auto"``) of several (local directory or URL). A root that also
    holds shards of a format other than ``format_name`` is refused (ValueError naming them):
    use ``"auto"``.

    Args:
        format_name: A format with the ``index_file`` capability (``"jsonl"``, ``"parquet"``,
            ...), or ``"auto"`` for a root of several.
        dataset_dir: The dataset's directory or URL.
        output_path: Where to write (default: ``index.json`` in the dataset's root).
        progress: Show a progress bar (needs tqdm).
        max_workers: Shards inspected at a time.
        storage_options: Passed to the fsspec filesystem.

    Returns:
        The local ``Path`` written, or the URL for a remote destination.

    Raises:
        ValueError: An unsupported format, ``max_workers`` below 1, or no shards.
    """
    indexable = _indexable()
    if format_name not in indexable and format_name != "auto":
        raise ValueError(f"build_index: unsupported format {format_name!r}; use one of "
                         f"{indexable + ('auto',)}")
    if max_workers < 1:
        raise ValueError(f"max_workers must be >= 1, got {max_workers}")
    location = Location(os.fspath(dataset_dir), dict(storage_options or {}))
    location.check_root()
    listing = [f for f in location.list_files() if f.name != INDEX_NAME]
    found = {k: v for k, v in classify([f.name for f in listing]).shards.items()
             if k in indexable}
    if format_name not in found and (format_name != "auto" or not found):
        what = " or ".join(indexable) if format_name == "auto" else format_name
        raise ValueError(f"no {what} shards under {location.display()}")
    others = sorted(n for k, names in found.items() if k != format_name for n in names)
    if format_name != "auto" and others:
        raise ValueError(f"{location.display()} also holds {len(others)} shard(s) of another "
                         f"format ({', '.join(others[:5])}): an index of the {format_name} "
                         "shards alone would leave them unread; build it with 'auto'")
    kind_of = {n: k for k, names in found.items() for n in names}
    files = [f for f in listing if f.name in kind_of]
    kinds = sorted(set(kind_of.values()))
    doc_format = kinds[0] if len(kinds) == 1 else MIXED
    res = Resources(resolve_store(None))
    refs = [ShardRef(location.display(), location, f.name, f.size, f.version) for f in files]
    bar = _progress(len(refs), progress, f"indexing {location.display()}")

    def one(ref: ShardRef) -> ShardStats:
        stats = registry.get(kind_of[ref.name]).count(ref, res, keep=False)
        if bar is not None:
            bar.update(1)
        return stats

    try:
        with ThreadPoolExecutor(max_workers=max_workers) as pool:
            stats = list(pool.map(one, refs))
    finally:
        if bar is not None:
            bar.close()
    doc = index_document(doc_format, [f.name for f in files], [f.size for f in files],
                         [f.version for f in files], stats)
    data = json.dumps(doc, indent=1).encode()
    if output_path is not None:
        return _write(Location(os.fspath(output_path), dict(storage_options or {})), "", data)
    return _write(location, INDEX_NAME, data)


def _indexable() -> tuple[str, ...]:
    """Formats whose shards Zephon's index.json lists (the ``index_file`` capability)."""
    return tuple(f.name for f in registry.formats() if f.stored and f.capabilities.index_file)


def _write(location: Location, name: str, data: bytes) -> Path | str:
    """Local files are replaced atomically (a reader never sees half an index)."""
    path = location.path(name)
    if location.is_local:
        tmp = f"{path}.part-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return Path(path)
    location.fs.pipe_file(path, data)
    return location.display(name)


_USAGE = """usage: python -m zephon build-index {{FORMAT|auto}} DIR_OR_URL [--output PATH]
                                          [--workers N] [--no-progress]
FORMAT: a format whose shards index.json lists ({formats})"""


def main(argv: list[str] | None = None) -> int:
    """Command line of build_index. Wrong arguments print usage and return 1; failures print
    the error and return 1."""
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(_USAGE.format(formats=", ".join(_indexable())))
        return 0
    opts: dict[str, Any] = {"output_path": None, "max_workers": 8, "progress": True}
    positional = []
    it = iter(args)
    try:
        for a in it:
            if a == "--output":
                opts["output_path"] = next(it)
            elif a == "--workers":
                opts["max_workers"] = int(next(it))
            elif a == "--no-progress":
                opts["progress"] = False
            elif a.startswith("--"):
                raise ValueError(a)
            else:
                positional.append(a)
    except (StopIteration, ValueError):
        positional = []
    if len(positional) != 2:
        print(_USAGE.format(formats=", ".join(_indexable())), file=sys.stderr)
        return 1
    fmt, root = positional
    try:
        written = build_index(fmt, root, **opts)
    except Exception as e:  # the command line reports, it does not trace back
        print(f"build-index failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {written}")
    return 0
