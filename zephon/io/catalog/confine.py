"""Confinement: every shard a dataset reads lies inside its root.

Shard names come from files Zephon does not write: an ``index.json`` (ours, or any other
writer's, or a tampered one) and a directory listing that may hold symbolic links. A name is
accepted when it resolves inside the root, and is then used in one normal form: relative,
``/``-separated, without ``.`` or ``..`` components. Accepted:

- a relative name (``part-0.jsonl``, ``a/../b.jsonl``) that stays inside the root;
- an absolute path or URL naming a file inside the root (third-party indexes write those);
- for local roots, a symbolic link whose target lies inside the root too.

Anything else (``../../private/secrets.jsonl``, ``/etc/x.parquet``, another bucket or another
scheme, a link out of the root) is a ``DataError`` naming the entry.
"""

from __future__ import annotations

import os
import posixpath

import fsspec.core

from zephon.io.errors import DataError
from zephon.io.storage.location import Location

__all__ = ["confined_name", "check_local_link"]


def confined_name(location: Location, name: str, *, dataset: str | None,
                  source: str) -> str:
    """``name`` as a clean relative name under ``location``, or DataError. ``source`` says
    where the name came from (the index file's path, or "listing"), for the message."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise DataError(f"shard name {name!r} is not a file name", dataset=dataset, shard=source)
    rel = _relative(location, name)
    if rel is None:
        raise DataError(f"shard {name!r} lies outside the dataset root {location.display()}: "
                        "refused", dataset=dataset, shard=source)
    if location.is_local:
        check_local_link(location, rel, dataset=dataset, entry=name)
    return rel


def _relative(location: Location, name: str) -> str | None:
    protocol, path = fsspec.core.split_protocol(name)
    if protocol is not None or "::" in name:
        fs = location.fs
        known = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
        if protocol not in known or "::" in name:  # another scheme, or a chained URL
            return None
        path = type(fs)._strip_protocol(name)
    if path.startswith("/") or protocol is not None:
        root = location.root.rstrip("/")
        clean = posixpath.normpath(path)
        if not clean.startswith(root + "/"):
            return None
        path = clean[len(root) + 1:]
    clean = posixpath.normpath(path)
    if clean in (".", "..") or clean.startswith(("../", "/")):
        return None
    return clean


def check_local_link(location: Location, rel: str, *, dataset: str | None,
                     entry: str | None = None) -> None:
    """DataError when ``rel`` under a local root resolves (through symbolic links) outside
    the root's own resolved path. A file that does not exist yet passes: reading it reports
    it missing."""
    root = os.path.realpath(location.root)
    target = os.path.realpath(os.path.join(location.root, rel))
    if target != root and not target.startswith(root.rstrip(os.sep) + os.sep):
        raise DataError(f"{entry or rel!r} is a link to {target}, outside the dataset "
                        f"root {root}: refused", dataset=dataset, shard=location.display(rel))
