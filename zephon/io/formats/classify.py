"""Shard formats: which files belong to a format, and auto-detection (spec §3.3).

Every shard is read by its own format, told by its name (``*.jsonl[.gz|.zst]`` -> jsonl,
``*.parquet`` -> parquet), so one dataset root may hold both: such a dataset reports the format
``"mixed"``. ``fmt=`` given to ``Dataset.from_path`` keeps the shards of that format only (the
others are named in a warning).

An ``index.json`` at the root is read first: its ``format`` tag (our indexes have one, as spec
§13.7 recommends; ``"mixed"`` when its shards differ) decides what kind of index it is; without
a tag, ``config`` + ``chunks`` -> litdata, ``shards`` -> parquet when the first entry's
``extra`` has ``row_groups``, otherwise mds. The shards it lists then get their formats from
their names like listed files do.

Files that are no shard of a readable format are sorted in two (``classify``): those that
look like data (a known data suffix: ``.vortex``, ``.csv``, ``.json``, ``.jsonl.bz2`` ...) are
named in a warning at discovery, since leaving them unread could lose records without a word;
the rest (``README.txt``, ``LICENSE``, ``.crc``) are left alone, and ``python -m zephon inspect``
lists both. Hidden files (a path component starting with ``.`` or ``_``, e.g. ``.DS_Store``,
``_SUCCESS``) are not listed at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

__all__ = ["SUPPORTED", "KNOWN", "MIXED", "detect_from_index", "format_of", "shard_names",
           "check_format", "classify", "Classified"]

SUPPORTED = ("jsonl", "parquet")
KNOWN = ("jsonl", "parquet", "mds", "litdata", "vortex")
MIXED = "mixed"
_SUFFIXES = {
    "jsonl": (".jsonl", ".jsonl.gz", ".jsonl.gzip", ".jsonl.zst", ".jsonl.zstd"),
    "parquet": (".parquet",),
    "vortex": (".vortex",),
}
# suffixes of files that hold records in a way this build does not read
_DATA_LIKE = (".json", ".json.gz", ".json.zst", ".ndjson", ".csv", ".tsv", ".arrow", ".feather",
              ".ipc", ".avro", ".orc", ".mds", ".lance", ".tfrecord", ".npy", ".npz", ".pt",
              ".bin", ".idx")
_DATA_INFIXES = (".jsonl.", ".parquet.", ".ndjson.", ".csv.")  # e.g. .jsonl.bz2, .parquet.lz4
_NOT_DATA = (".crc", ".md5", ".sha256", ".lock", ".txt", ".md")


def check_format(fmt: str, where: str) -> str:
    """``fmt`` itself when this build reads it, else ValueError saying so."""
    if fmt in SUPPORTED:
        return fmt
    if fmt in KNOWN:
        raise ValueError(f"{where}: format {fmt!r} is not supported by this build of zephon "
                         f"(supported: {', '.join(SUPPORTED)})")
    raise ValueError(f"{where}: unknown format {fmt!r}; expected one of {', '.join(SUPPORTED)}")


def format_of(name: str) -> str | None:
    """The format a file's name says it holds (case-insensitive), or None."""
    lower = name.lower()
    for fmt, suffixes in _SUFFIXES.items():
        if lower.endswith(suffixes):
            return fmt
    return None


def shard_names(fmt: str, names: Iterable[str]) -> list[str]:
    """The names that are shards of ``fmt`` (by suffix, case-insensitive)."""
    return [n for n in names if format_of(n) == fmt]


class Classified(NamedTuple):
    """A root's files, sorted by what reading the dataset does with them."""

    shards: dict[str, list[str]]  # readable format -> names, in the order given
    data_unread: list[str]  # look like records, are not read (other formats, fmt= left out)
    other: list[str]  # no data: left alone


def classify(names: Iterable[str], fmt: str | None = None) -> Classified:
    """``names`` sorted into shards to read (of ``fmt`` only, when given), files that look like
    data but are not read, and other files."""
    shards: dict[str, list[str]] = {}
    unread, other = [], []
    for n in names:
        kind = format_of(n)
        if kind in SUPPORTED and (fmt is None or kind == fmt):
            shards.setdefault(kind, []).append(n)
        elif kind is not None or _looks_like_data(n):
            unread.append(n)
        else:
            other.append(n)
    return Classified(shards, unread, other)


def _looks_like_data(name: str) -> bool:
    lower = name.lower()
    if lower.endswith(_NOT_DATA):
        return False
    return lower.endswith(_DATA_LIKE) or any(x in lower for x in _DATA_INFIXES)


def detect_from_index(doc: dict[str, Any]) -> str | None:
    tag = doc.get("format")
    if isinstance(tag, str) and tag:
        return tag.lower()
    if "config" in doc and "chunks" in doc:
        return "litdata"
    shards = doc.get("shards")
    if isinstance(shards, list):
        first = shards[0] if shards else {}
        extra = first.get("extra") if isinstance(first, dict) else None
        if isinstance(extra, dict) and "row_groups" in extra:
            return "parquet"
        return "mds"
    return None
