"""Which files of a root are shards of which format (by name), and which index is which.

Every shard is read by its own format, told by its name through the registry (``*.jsonl[.gz|
.zst]`` -> jsonl, ``*.parquet`` -> parquet, ...), so one dataset root may hold several: such a
dataset reports the format ``"mixed"``. ``fmt=`` given to ``Dataset.from_path`` keeps the shards
of that format only (the others are named in a warning).

An ``index.json`` at the root is read first: its ``format`` tag (our indexes have one, as spec
§13.7 recommends; ``"mixed"`` when its shards differ) decides what kind of index it is; without
a tag, a registered format may claim it as its own writer's (``ShardFormat.claims_index``), and
the reference's rules name the rest (``config`` + ``chunks`` -> litdata, ``shards`` -> mds) so
that the error can say which format this build lacks.

Files that are no shard of a registered format are sorted in two (``classify``): those that
look like data (a known data suffix: ``.vortex``, ``.csv``, ``.json``, ``.jsonl.bz2`` ...) are
named in a warning at discovery, since leaving them unread could lose records without a word;
the rest (``README.txt``, ``LICENSE``, ``.crc``) are left alone, and ``python -m zephon inspect``
lists both. Hidden files (a path component starting with ``.`` or ``_``, e.g. ``.DS_Store``,
``_SUCCESS``) are not listed at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from zephon.io.formats import registry
from zephon.io.formats.registry import MIXED

__all__ = ["KNOWN", "MIXED", "detect_from_index", "format_of", "shard_names", "check_format",
           "classify", "Classified", "supported"]

# formats the reference reads; while one is not registered, messages say this build lacks it
KNOWN = ("jsonl", "parquet", "mds", "litdata", "vortex")
_KNOWN_SUFFIXES = {".vortex": "vortex"}
# suffixes of files that hold records in a way this build does not read
_DATA_LIKE = (".json", ".json.gz", ".json.zst", ".ndjson", ".csv", ".tsv", ".arrow", ".feather",
              ".ipc", ".avro", ".orc", ".mds", ".lance", ".tfrecord", ".npy", ".npz", ".pt",
              ".bin", ".idx")
_DATA_INFIXES = (".jsonl.", ".parquet.", ".ndjson.", ".csv.")  # e.g. .jsonl.bz2, .parquet.lz4
_NOT_DATA = (".crc", ".md5", ".sha256", ".lock", ".txt", ".md")


def supported() -> tuple[str, ...]:
    """Formats a dataset root can hold in this build (registered, stored in files)."""
    return tuple(f.name for f in registry.formats() if f.stored)


def check_format(fmt: str, where: str) -> str:
    """``fmt`` itself when this build reads it, else ValueError saying so."""
    names = supported()
    if fmt in names:
        return fmt
    if fmt in KNOWN:
        raise ValueError(f"{where}: format {fmt!r} is not supported by this build of zephon "
                         f"(supported: {', '.join(names)})")
    raise ValueError(f"{where}: unknown format {fmt!r}; expected one of {', '.join(names)}")


def format_of(name: str) -> str | None:
    """The format a file's name says it holds (case-insensitive), or None. A format this build
    lacks is named too (``.vortex`` -> vortex), for its error."""
    found = registry.format_of(name)
    if found is not None and found.stored:
        return found.name
    lower = name.lower()
    return next((f for s, f in _KNOWN_SUFFIXES.items() if lower.endswith(s)), None)


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
    readable = set(supported())
    shards: dict[str, list[str]] = {}
    unread, other = [], []
    for n in names:
        kind = format_of(n)
        if kind in readable and (fmt is None or kind == fmt):
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
    """Whose index ``doc`` is: Zephon's ``format`` tag, a registered format that claims it, or
    the reference's rules (which may name a format this build lacks); None for neither."""
    tag = doc.get("format")
    if isinstance(tag, str) and tag:
        return tag.lower()
    for fmt in registry.formats():
        if fmt.stored and fmt.claims_index(doc):
            return fmt.name
    if "config" in doc and "chunks" in doc:
        return "litdata"
    if isinstance(doc.get("shards"), list):
        return "mds"
    return None
