"""Finished units on their way to the training process, many to a frame.

Consecutive batches of one layout become one merged block, so a frame costs one Arrow stream
whatever the number of batches in it, and the reader hands out zero-copy slices of it; records
and lane ends travel as one pickled list. The tags say which unit is which, with its lane state.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from zephon.block import Block, RowsOf
from zephon.types import SampleBatch


def _layout(block) -> tuple:
    """What must agree for batches to travel as one merged block and come back unchanged."""
    p = block.payload
    # field metadata too: it says how record payloads show a column (payload_values.py)
    payload = ((p.schema, p.schema.metadata, tuple(f.metadata for f in p.schema))
               if isinstance(p, pa.Table) else type(p))
    return (block.is_batch, block.sparse, block.lineage.shape[1:],
            tuple((k, v.dtype, v.shape[1:]) for k, v in block.meta.items()), payload)


def _follows(prev, block) -> bool:
    """``block`` is the rows of the same parent right after ``prev`` (see ``Block.origin``)."""
    a, b = prev.origin, block.origin
    return a is not None and b is not None and a[0] is b[0] and b[1] == a[1] + len(prev)


def _merge(blocks: list, rows: list[int], contiguous: bool):
    """One block of ``blocks`` (``rows`` long each); ``contiguous``: each follows the one
    before it in a common parent."""
    if len(blocks) == 1:
        return blocks[0]
    b0 = blocks[0]
    if contiguous:
        # consecutive batches cut from one block: that block's rows, no concatenation (and
        # one record batch in the frame's Arrow stream instead of one per batch)
        parent, start = b0.origin
        part = parent.slice(start, start + sum(rows))
        return Block(part.meta, part.payload, part.lineage, b0.sparse, b0.is_batch)
    meta = {k: np.concatenate([b.meta[k] for b in blocks]) for k in b0.meta}
    if isinstance(b0.payload, pa.Table):
        payload = pa.concat_tables([b.payload for b in blocks])
    elif isinstance(b0.payload, list):
        payload = [x for b in blocks for x in b.payload]
    else:
        payload = None
    lineage = np.concatenate([b.lineage for b in blocks])
    return Block(meta, payload, lineage, b0.sparse, b0.is_batch)


def unit_parts(units: list) -> list[tuple[str, object, list]]:
    """Frame parts for a run of (lane, unit, state): consecutive batches of one layout merged
    into one block (one Arrow stream, however many batches), records and lane ends (None) as
    one pickled list; the tags say which unit is which."""
    parts: list[tuple[str, object, list]] = []
    run: list = []  # (lane, block, state, rows) of the batches to merge
    contiguous = True  # every batch of ``run`` follows the one before it in a common parent

    def close_run() -> None:
        if run:
            parts.append(("block", _merge([b for _, b, _, _ in run], [n for *_, n in run],
                                          contiguous),
                          [(lane, state, n) for lane, _, state, n in run]))
            run.clear()

    layout = None
    for lane, unit, state in units:
        if isinstance(unit, SampleBatch):
            block = unit.block
            if run and _follows(run[-1][1], block):  # same parent: same layout
                run.append((lane, block, state, len(block)))
                continue
            this = _layout(block)
            if this != layout:
                close_run()
                layout = this
            contiguous = not run
            run.append((lane, block, state, len(block)))
            continue
        layout = None
        close_run()
        if not parts or parts[-1][0] != "pickle":
            parts.append(("pickle", [], []))
        parts[-1][1].append(unit)
        parts[-1][2].append((lane, state))
    close_run()
    return parts


def units_from_parts(parts: list) -> list[tuple[int, object, object]]:
    """The (lane, unit, state) that ``unit_parts`` packed; batches are views of the frame."""
    units = []
    for kind, obj, tags in parts:
        if kind == "pickle":
            units.extend((lane, unit, state) for unit, (lane, state) in zip(obj, tags))
            continue
        at = 0
        for lane, state, rows in tags:
            units.append((lane, SampleBatch._from_block(RowsOf(obj, at, at + rows, True)), state))
            at += rows
    return units


