"""The registry of shard formats: name -> ``ShardFormat`` (base.py).

Built-in formats are one line each in ``BUILT_IN`` (module and instance, imported on first
use); third-party packages add theirs through the ``zephon.formats`` entry-point group::

    [project.entry-points."zephon.formats"]
    myformat = "my_package.zephon_format:MY_FORMAT"   # a ShardFormat instance (or class)

and code can call ``register`` (a format registered that way reaches worker processes with the
``Dataset`` that reads it: formats are picklable). Order matters where two formats could claim
a root: built-ins first, in ``BUILT_IN`` order, then entry points by name.
"""

from __future__ import annotations

import importlib
import threading
import warnings
from importlib.metadata import entry_points

from zephon.io.formats.base import ShardFormat

__all__ = ["BUILT_IN", "ENTRY_POINT_GROUP", "MIXED", "formats", "format_of", "get", "names",
           "register"]

ENTRY_POINT_GROUP = "zephon.formats"
MIXED = "mixed"  # a dataset whose shards have different formats

# name -> "module:instance". Adding a format: one module in this folder, one line here.
BUILT_IN: dict[str, str] = {
    "jsonl": "zephon.io.formats.jsonl:JSONL",
    "parquet": "zephon.io.formats.parquet:PARQUET",
    "memory": "zephon.io.formats.memory:MEMORY",
    "arrow": "zephon.io.formats.arrow:ARROW",
    "webdataset": "zephon.io.formats.webdataset:WEBDATASET",
    "mds": "zephon.io.formats.mds:MDS",
    "mds-pickle": "zephon.io.formats.mds:MDS_PICKLE",
    "litdata": "zephon.io.formats.litdata:LITDATA",
    "litdata-pickle": "zephon.io.formats.litdata:LITDATA_PICKLE",
    "vortex": "zephon.io.formats.vortex:VORTEX",
    "lance": "zephon.io.formats.lance:LANCE",
}

_lock = threading.RLock()
_formats: dict[str, ShardFormat] = {}
_loaded = False


def _load(spec: str) -> ShardFormat:
    module, _, attr = spec.partition(":")
    found = getattr(importlib.import_module(module), attr)
    fmt = found() if isinstance(found, type) else found
    if not isinstance(fmt, ShardFormat):
        raise TypeError(f"{spec} is not a zephon ShardFormat (got {type(fmt).__name__})")
    return fmt


def _ensure_loaded() -> None:
    global _loaded
    if _loaded:
        return
    with _lock:
        if _loaded:
            return
        for name, spec in BUILT_IN.items():
            _formats.setdefault(name, _load(spec))
        for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            if ep.name in _formats:
                continue  # a built-in or an earlier registration keeps its name
            try:
                _formats[ep.name] = _load(ep.value)
            except Exception as e:  # a broken plug-in must not stop the formats that work
                warnings.warn(f"zephon: shard format {ep.name!r} from entry point {ep.value} "
                              f"could not be loaded: {type(e).__name__}: {e}", stacklevel=3)
        _loaded = True


def register(fmt: ShardFormat, *, replace: bool = False) -> ShardFormat:
    """Add a format (returns it). A name already taken is a ValueError unless ``replace``."""
    if not isinstance(fmt, ShardFormat) or not fmt.name or fmt.name == MIXED:
        raise ValueError(f"not a named ShardFormat: {fmt!r}")
    _ensure_loaded()
    with _lock:
        if fmt.name in _formats and not replace and _formats[fmt.name] is not fmt:
            raise ValueError(f"shard format {fmt.name!r} is registered already")
        _formats[fmt.name] = fmt
    return fmt


def get(name: str) -> ShardFormat:
    """The format called ``name`` (case-insensitive); ValueError naming the known ones."""
    _ensure_loaded()
    fmt = _formats.get(name.lower()) if isinstance(name, str) else None
    if fmt is None:
        raise ValueError(f"unknown shard format {name!r}; known: {', '.join(names())}")
    return fmt


def names() -> tuple[str, ...]:
    _ensure_loaded()
    return tuple(_formats)


def formats() -> tuple[ShardFormat, ...]:
    """Every registered format, in precedence order."""
    _ensure_loaded()
    return tuple(_formats.values())


def format_of(name: str) -> ShardFormat | None:
    """The format a file's name says it holds: the one with the longest matching suffix (so
    ``x.tar.gz`` may belong to a format of ``.tar.gz`` files and not to one of ``.gz``)."""
    best, best_len = None, 0
    lower = name.lower()
    for fmt in formats():
        for suffix in fmt.suffixes:
            if len(suffix) > best_len and lower.endswith(suffix):
                best, best_len = fmt, len(suffix)
    return best
