"""Shard formats: the ``ShardFormat`` protocol (base.py), the registry of formats (registry.py)
and one module per format with its reader.

Adding a format: one module here defining a ``ShardFormat`` subclass and an instance of it, and
one line in ``registry.BUILT_IN`` (or an entry point in the ``zephon.formats`` group). See
``docs/INTERNALS.md`` ("Adding a format").
"""

_PROTOCOL = ("BadRowReader", "Capabilities", "ReadAheadReader", "RecordSizeReader", "Resources",
             "RootView", "RowGroupReader", "ShardEntry", "ShardFormat", "ShardReader", "ShardRef",
             "ShardStats")

__all__ = [*_PROTOCOL, "register", "get"]


def __getattr__(name: str):
    # lazy: modules of this package (jsonl_lines) are imported by the storage layer that
    # base.py itself imports
    if name in _PROTOCOL:
        from zephon.io.formats import base

        return getattr(base, name)
    if name in ("register", "get"):
        from zephon.io.formats import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'zephon.io.formats' has no attribute {name!r}")
