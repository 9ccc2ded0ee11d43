"""Calling user code: what goes in, what may come out, and errors that say where.

Every user callback (``process_many``, ``push``, ``flush``, ``transform``) goes through here, so
all user operators refuse the same wrong outputs with the same message and name the operator
and the record when they fail.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from zephon.block import Block
from zephon.ops.errors import SAYS_WHERE
from zephon.ops.map_transform import UserFunctionError
from zephon.types import SampleBatch, SampleRecord, block_from_records, records_from_block

__all__ = ["call_user", "elements_of", "sample_of", "to_blocks", "user_outputs"]

_RETURN_HINT = ("return SampleRecord objects: keep record.meta and replace record.payload "
                "(r.payload = {...}; return [r]); build new records with "
                "SampleRecord(spawn_child(r.meta, i), payload) or pack_meta(...)")


def sample_of(elem: Any) -> Any:
    if isinstance(elem, SampleRecord):
        return elem.meta.sample_id
    if isinstance(elem, SampleBatch):
        ids = elem.ids
        return ids[0] if ids else None
    return None


def elements_of(block: Block) -> list:
    """What user code sees for a block: its records, or one SampleBatch after ``batch``."""
    if block.is_batch:
        return [SampleBatch._from_block(block)]
    return records_from_block(block)


def call_user(op_name: str, fn: Callable[..., Any], args: tuple, elems: Sequence[Any],
              single: Callable[[int], tuple] | None = None) -> Any:
    """``fn(*args)``, turning an exception into a ``UserFunctionError`` that names the operator
    and the record. For a group, ``single(i)`` gives the arguments for element ``i`` alone on
    fresh copies: the group is re-run one element at a time to find the record at fault."""
    try:
        return fn(*args)
    except (*SAYS_WHERE, KeyboardInterrupt, GeneratorExit):
        raise
    except Exception as e:
        if single is not None and len(elems) > 1:
            for i in range(len(elems)):
                one = single(i)
                try:
                    fn(*one)
                except Exception as e1:  # this element fails on its own: it is the culprit
                    raise UserFunctionError(op_name, sample_of(elems[i]), e1) from e1
        raise UserFunctionError(op_name, sample_of(elems[0]) if elems else None, e) from e


def user_outputs(op_name: str, out: Any, what: str = "process_many") -> list:
    """Check a callback's result; tombstones are left out (Zephon does not need them)."""
    if isinstance(out, tuple):
        out = list(out)
    if not isinstance(out, list):
        raise TypeError(f"operator {op_name}: {what} must return a list, got "
                        f"{type(out).__name__}; {_RETURN_HINT}")
    for e in out:
        if not isinstance(e, (SampleRecord, SampleBatch)):
            raise TypeError(f"operator {op_name}: {what} returned an element of type "
                            f"{type(e).__name__} (Unsupported element type "
                            f"{type(e).__name__}); {_RETURN_HINT}")
    return [e for e in out if not (isinstance(e, SampleRecord) and e.meta.tombstone)]


def to_blocks(op_name: str, elems: list, lane_id: int | None = None) -> list[Block]:
    """Lay checked outputs back out: one block of records, or one block per batch."""
    if not elems:
        return []
    if all(isinstance(e, SampleRecord) for e in elems):
        if lane_id is not None and any(r.meta.lane_id != lane_id for r in elems):
            raise ValueError(f"operator {op_name}: an output record moved to another lane; "
                             "keep each record's meta.lane_id")
        return [block_from_records(elems)]
    if all(isinstance(e, SampleBatch) for e in elems):
        out = []
        for b in elems:
            blk = b.block
            out.append(Block(blk.meta, blk.payload, blk.lineage, blk.sparse, is_batch=True))
        return out
    raise TypeError(f"operator {op_name}: return either records or batches, not a mix")
