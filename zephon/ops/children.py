"""Metadata helpers for user operators that split, combine or drop records.

Zephon's checkpoints name records by cursor (chunk, offset, lineage), so what matters to the
engine is that every record a lane emits has its own cursor: children of a split get one
lineage level more (``spawn_child``), a record built from several inputs takes a cursor derived
from one of them (``pack_meta``). Contributor references and tombstones are kept in the tags for
code written against the reference library; Zephon's own bookkeeping does not need them, and a
tombstone returned by an operator is simply left out of the stream.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from zephon.types import ContributorRef, SampleCursor, SampleMeta, SampleRecord

__all__ = ["pack_meta", "spawn_child", "tombstone_meta"]


def _meta_of(parent: SampleMeta | SampleRecord) -> SampleMeta:
    if isinstance(parent, SampleRecord):
        return parent.meta
    if isinstance(parent, SampleMeta):
        return parent
    raise TypeError(f"expected a SampleMeta or SampleRecord, got {type(parent).__name__}")


def spawn_child(parent: SampleMeta | SampleRecord, child_idx: int, is_last_child: bool = False,
                tags: Mapping[str, Any] | None = None) -> SampleMeta:
    """Metadata of child ``child_idx`` of a record split into several.

    Number the children 0, 1, 2, ... in emission order and pass ``is_last_child=True`` for the
    last one: it closes the parent's contributions. The child keeps the parent's sample id and
    lane, and its lineage gains ``child_idx``, which gives it a cursor of its own.

    Args:
        parent: The record being split (or its metadata).
        child_idx: The child's number, from 0.
        is_last_child: True for the last child.
        tags: Tags to set on the child's metadata.

    Returns:
        The child's ``SampleMeta``.

    Raises:
        ValueError: A negative ``child_idx``.
    """
    meta = _meta_of(parent)
    if int(child_idx) < 0:
        raise ValueError(f"child_idx must be >= 0, got {child_idx}")
    refs = tuple(ContributorRef(r.cursor, r.is_last_child and bool(is_last_child))
                 for r in meta.contribution_refs())
    child = meta.child(int(child_idx)).with_contributors(refs)
    if tags:
        reserved = {k for k in tags if k.startswith("_")}
        if reserved:
            raise ValueError(f"tags {sorted(reserved)} are reserved for Zephon")
        child = replace(child, tags={**child.tags, **tags})
    return child


def _as_ref(c: ContributorRef | SampleCursor | SampleMeta | SampleRecord) -> ContributorRef:
    if isinstance(c, ContributorRef):
        return c
    if isinstance(c, SampleCursor):
        return ContributorRef(c, True)
    return ContributorRef(_meta_of(c).cursor, True)


def pack_meta(primary_cursor: SampleCursor, contributors: Iterable[Any], lane_id: int,
              tags: Mapping[str, Any] | None = None, *,
              component_sample_counts: Mapping[int, int] | None = None,
              component_token_counts: Mapping[int, int] | None = None) -> SampleMeta:
    """Metadata of a record built from several inputs (a pair, a packed row, a merged group).

    Args:
        primary_cursor: The record's identity: take one derived from an input that no other
            output uses, e.g. ``first.meta.cursor.child(0)``, so it is unique within the lane.
        contributors: The inputs (``ContributorRef``, cursors, metas or records), at most one
            per base offset.
        lane_id: The lane of the inputs.
        tags: Tags to set on the metadata.
        component_sample_counts: Samples per component (dataset id) in the record; default one
            per distinct input.
        component_token_counts: Tokens per component in the record.

    Returns:
        The record's ``SampleMeta``.

    Raises:
        TypeError: ``primary_cursor`` is not a ``SampleCursor``.
    """
    if not isinstance(primary_cursor, SampleCursor):
        raise TypeError("primary_cursor must be a SampleCursor (e.g. record.meta.cursor.child(0))")
    refs = tuple(_as_ref(c) for c in contributors)
    bases = [r.cursor.base_offset for r in refs]
    if len(set(bases)) != len(bases):
        raise ValueError("pack_meta: at most one contributor per base offset (chunk, offset)")
    if component_sample_counts is None:
        component_sample_counts = dict(Counter(r.cursor.sample_id[0] for r in refs))
    all_tags = {**(tags or {}), "_contributors": refs}
    return SampleMeta(
        sample_id=primary_cursor.sample_id, lane_id=int(lane_id),
        chunk_id=primary_cursor.chunk_id, chunk_offset=primary_cursor.chunk_offset,
        component_sample_counts=dict(component_sample_counts),
        component_token_counts=(dict(component_token_counts)
                                if component_token_counts is not None else None),
        lineage=primary_cursor.lineage, tags=all_tags)


def tombstone_meta(ref: ContributorRef | SampleCursor | SampleMeta | SampleRecord,
                   lane_id: int) -> SampleMeta:
    """Metadata of a tombstone: closes a dropped record's base offset, carries no data.

    Zephon's checkpoints do not count closures (they resume from pointer positions), so an
    operator may emit tombstones or not; they never reach the training loop either way.

    Args:
        ref: The dropped record (or its metadata, cursor or ``ContributorRef``).
        lane_id: Its lane.

    Returns:
        The tombstone's ``SampleMeta``.
    """
    r = _as_ref(ref)
    c = r.cursor
    return SampleMeta(sample_id=c.sample_id, lane_id=int(lane_id), chunk_id=c.chunk_id,
                      chunk_offset=c.chunk_offset, lineage=c.lineage,
                      tags={"_contributors": (r,), "_tombstone": True})
