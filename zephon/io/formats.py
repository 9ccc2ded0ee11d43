"""Shard formats: which files belong to a format, and auto-detection (spec §3.3).

Detection, when ``fmt`` is not given: an ``index.json`` at the root decides first (its
``format`` tag if it has one - our indexes do, as spec §13.7 recommends; else ``config`` +
``chunks`` -> litdata, ``shards`` -> parquet when the first entry's ``extra`` has ``row_groups``,
otherwise mds); without an index the listing decides: any ``*.jsonl[.gz|.zst]`` -> jsonl, else
any ``*.vortex`` -> vortex, else any ``*.parquet`` -> parquet.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["SUPPORTED", "KNOWN", "detect_from_index", "detect_from_names", "shard_names",
           "check_format"]

SUPPORTED = ("jsonl", "parquet")
KNOWN = ("jsonl", "parquet", "mds", "litdata", "vortex")
_SUFFIXES = {
    "jsonl": (".jsonl", ".jsonl.gz", ".jsonl.gzip", ".jsonl.zst", ".jsonl.zstd"),
    "parquet": (".parquet",),
    "vortex": (".vortex",),
}


def check_format(fmt: str, where: str) -> str:
    """``fmt`` itself when this build reads it, else ValueError saying so."""
    if fmt in SUPPORTED:
        return fmt
    if fmt in KNOWN:
        raise ValueError(f"{where}: format {fmt!r} is not supported by this build of zephon "
                         f"(supported: {', '.join(SUPPORTED)})")
    raise ValueError(f"{where}: unknown format {fmt!r}; expected one of {', '.join(SUPPORTED)}")


def shard_names(fmt: str, names: Iterable[str]) -> list[str]:
    """The names that are shards of ``fmt`` (by suffix, case-insensitive)."""
    suffixes = _SUFFIXES.get(fmt, ())
    return [n for n in names if n.lower().endswith(suffixes)]


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


def detect_from_names(names: list[str]) -> str | None:
    for fmt in ("jsonl", "vortex", "parquet"):
        if shard_names(fmt, names):
            return fmt
    return None
