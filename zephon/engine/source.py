"""Pointer blocks of one lane: chunk k of the lane, cut into micro-batches."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from zephon.block import Block


def lane_pointer_blocks(ws, lane_id: int, lanes: int, micro: int, *, start_chunk: int = 0,
                        start_offset: int = 0) -> Iterator[Block]:
    """Yield the lane's pointers as blocks of at most ``micro``, never crossing a chunk."""
    chunk_id = start_chunk
    offset = start_offset
    while True:
        chunk = ws.lane_chunk(lane_id, lanes, chunk_id)
        if chunk is None:
            return
        n = len(chunk)
        for a in range(offset, n, micro):
            b = min(a + micro, n)
            yield Block.from_pointers(
                chunk.dataset_id[a:b], chunk.shard_id[a:b], chunk.sample_idx[a:b],
                lane_id=lane_id, chunk_id=chunk_id,
                chunk_offset=np.arange(a, b, dtype=np.int64),
            )
        chunk_id += 1
        offset = 0
