"""Restore: rebuild the records each accumulator held, from their cursors.

For an accumulator at serial position i, its held records are re-derived as they entered it:
fetch the pointers (random access into the work source), run the worker stage, keep the
children the cursors name, then the stateless serial operators before i. Reorder-only
accumulators (shuffle, mixture, batch) do not change records and are skipped; a combining one
(packing) rebuilds its rows from their recipes. Which is which is declared in each operator's
``OpTraits`` (``combines_records``, ``restores_lazily``).

The lane's pointers and its worker stage come in as a ``Rederive`` (built by the engine), so
this module needs nothing above it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from zephon.block import Block
from zephon.errors import CheckpointError
from zephon.state.refs import LazyRecords, refs_len


@dataclass(frozen=True)
class Rederive:
    """How one lane's records are made again.

    Args:
        lane_id: The lane.
        chunk: ``chunk_id -> WorkChunk`` of the lane (None past its end), by random access.
        worker_stage: The plan's stateless prefix on a pointer block (fetch first; None when
            it drops every record).
    """

    lane_id: int
    chunk: Callable[[int], Any]
    worker_stage: Callable[[Block], Block | None]


def restore_chain(chain, op_states: list, source: Rederive) -> None:
    """Rebuild each accumulator's held records and state. ``Pipeline.restore`` checked all that
    can be checked from pointers; what needs the records (a split child that exists, a token
    range inside its document) fails here, or when a lazily restored record is rebuilt, with a
    ``CheckpointError`` naming the operator's state."""
    lane_id = source.lane_id
    if len(op_states) != len(chain.stages):
        raise CheckpointError(
            f"lanes[{lane_id}].base.ops", f"{len(op_states)} serial operators, this pipeline "
            f"has {len(chain.stages)}: restore needs the same operators")
    for i, (stage, state) in enumerate(zip(chain.stages, op_states)):
        if stage is None or state is None:
            continue
        where = f"lanes[{lane_id}].base.ops[{i}]"
        if chain.ops[i].traits().restores_lazily and refs_len(state.get("held")):
            held = LazyRecords(state["held"], lambda refs, i=i, where=where: _rebuild(
                chain, i, refs, source, where))
        else:
            held = _rebuild(chain, i, state.get("held"), source, where)
        try:
            stage.set_state(state, held)
        except CheckpointError as e:
            raise CheckpointError(f"{where}.{e.field}", e.message) from None


def _rebuild(chain, i: int, refs: dict | None, source: Rederive, where: str):
    try:
        return rebuild_inputs(chain, i, refs, source)
    except CheckpointError as e:
        raise CheckpointError(f"{where}.held", e.message) from None


def rebuild_inputs(chain, i: int, refs: dict | None, source: Rederive) -> Block | None:
    """The records named by ``refs`` as they entered serial operator ``i``."""
    if refs_len(refs) == 0:
        return None
    combiner = next((j for j in range(i - 1, -1, -1)
                     if chain.ops[j].traits().combines_records), None)
    if combiner is not None and "recipe" not in refs:
        raise RuntimeError(f"cannot checkpoint rows of {chain.ops[combiner].op_name} held "
                           "downstream: their payloads are not columnar (use keep_list)")
    if combiner is not None:
        op = chain.ops[combiner]
        seg_refs = op.recipe_inputs(refs)
        seg_block = rebuild_inputs(chain, combiner, seg_refs, source)
        block = op.rebuild_rows(refs, seg_block)
        start = combiner + 1
    else:
        block = fetch_refs(refs, source)
        start = 0
    reran = False
    for j in range(start, i):
        if chain.stages[j] is None:
            block = chain.ops[j].process_block(block)
            reran = True
            if block is None:
                raise CheckpointError("", f"names records operator {chain.ops[j].op_name} "
                                      "drops (is it deterministic?)")
    if reran:  # a split or filter on the way must not shift which row is which
        block = select(block, np.asarray(refs["chunk_id"], dtype=np.int64),
                       np.asarray(refs["chunk_offset"], dtype=np.int64),
                       np.asarray(refs["lineage"], dtype=np.int32).reshape(refs_len(refs), -1))
    return block


def fetch_refs(refs: dict, source: Rederive) -> Block:
    """Fetch + worker stage for the cursors in ``refs``; rows in the cursors' order."""
    chunk_ids = np.asarray(refs["chunk_id"], dtype=np.int64)
    offsets = np.asarray(refs["chunk_offset"], dtype=np.int64)
    lineage = np.asarray(refs["lineage"], dtype=np.int32).reshape(len(chunk_ids), -1)
    pairs = np.unique(np.stack([chunk_ids, offsets], axis=1), axis=0)
    lane_id = source.lane_id
    ds, sh, ix = [], [], []
    for c in np.unique(pairs[:, 0]).tolist():
        chunk = source.chunk(int(c))
        if chunk is None:
            raise CheckpointError("", f"names chunk {c} of lane {lane_id}, which the work "
                                  "source does not have: was it built with other settings?")
        offs = pairs[pairs[:, 0] == c, 1]
        ds.append(chunk.dataset_id[offs])
        sh.append(chunk.shard_id[offs])
        ix.append(chunk.sample_idx[offs])
    n = len(pairs)
    meta = {"dataset_id": np.concatenate(ds), "shard_id": np.concatenate(sh),
            "sample_idx": np.concatenate(ix), "lane_id": np.full(n, lane_id, dtype=np.int64),
            "chunk_id": pairs[:, 0].copy(), "chunk_offset": pairs[:, 1].copy()}
    block = source.worker_stage(Block(meta, None))
    if block is None:
        raise CheckpointError("", "names records the worker stage drops (are its operators "
                              "deterministic?)")
    return select(block, chunk_ids, offsets, lineage)


def select(block: Block, chunk_ids: np.ndarray, offsets: np.ndarray,
           lineage: np.ndarray) -> Block:
    """Rows of ``block`` matching each cursor (chunk, offset, lineage), in cursor order."""
    index: dict[Any, int] = {}
    bl = block.lineage_tuples()
    for row, (c, o) in enumerate(zip(block.meta["chunk_id"].tolist(),
                                     block.meta["chunk_offset"].tolist())):
        index[(c, o, bl[row])] = row
    want = []
    for c, o, lin in zip(chunk_ids.tolist(), offsets.tolist(), lineage.tolist()):
        key = (c, o, tuple(x for x in lin if x >= 0))
        if key not in index:
            raise CheckpointError("", f"names record {key} (chunk, offset, lineage), which "
                                  "was not produced again: a split child that does not exist, "
                                  "or operators that are not deterministic")
        want.append(index[key])
    return block.take(np.asarray(want, dtype=np.int64))
