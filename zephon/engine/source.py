"""Pointer blocks of one lane: chunk k of the lane, cut into micro-batches."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from zephon.block import Block


def lane_pointer_blocks(ws, lane_id: int, lanes: int, micro: int, *, start_chunk: int = 0,
                        start_offset: int = 0, first_micro: int | None = None) -> Iterator[Block]:
    """Yield the lane's pointers as blocks of at most ``micro``, never crossing a chunk.

    ``first_micro`` makes the first few blocks smaller (a resumed lane whose buffers are already
    full needs only a little new input for its first batch); operators emit the same stream
    however their input is cut, so this changes latency only.
    """
    chunk_id = start_chunk
    offset = start_offset
    size = first_micro or micro
    while True:
        chunk = ws.lane_chunk(lane_id, lanes, chunk_id)
        if chunk is None:
            return
        n = len(chunk)
        a = offset
        while a < n:
            b = min(a + size, n)
            yield Block.from_pointers(
                chunk.dataset_id[a:b], chunk.shard_id[a:b], chunk.sample_idx[a:b],
                lane_id=lane_id, chunk_id=chunk_id,
                chunk_offset=np.arange(a, b, dtype=np.int64),
            )
            a = b
            size = min(micro, size * 2)
        chunk_id += 1
        offset = 0
