"""Pointer blocks of one lane: chunk k of the lane, cut into micro-batches."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from zephon.block import Block


def lane_pointer_blocks(ws, lane_id: int, lanes: int, micro: int, *, start_chunk: int = 0,
                        start_offset: int = 0, first_micro: int | None = None) -> Iterator[Block]:
    """Yield the lane's pointers as blocks of at most ``micro``, never crossing a chunk.

    A block that would run from the end of one shard into the next (a lane reading shards in
    order) ends at the shard boundary instead, so the blocks after it start at the shard's
    first row again, aligned with its row groups. Otherwise every later block straddles two
    row groups, and with several workers each such row group is decoded in two processes.
    Blocks that mix shards more often (an interleaved mixture) are cut by size alone.

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
            b = _shard_cut(chunk, a, min(a + size, n))
            yield Block.from_pointers(
                chunk.dataset_id[a:b], chunk.shard_id[a:b], chunk.sample_idx[a:b],
                lane_id=lane_id, chunk_id=chunk_id,
                chunk_offset=np.arange(a, b, dtype=np.int64),
            )
            a = b
            size = min(micro, size * 2)
        chunk_id += 1
        offset = 0


def _shard_cut(chunk, a: int, b: int) -> int:
    """``b``, or the one shard boundary inside ``[a, b)`` when there is exactly one."""
    ds, sh = chunk.dataset_id, chunk.shard_id
    if b - a < 2 or (ds[a] == ds[b - 1] and sh[a] == sh[b - 1]):
        return b  # one shard throughout, or two runs of one shard split by others: no cut
    change = np.flatnonzero((ds[a + 1:b] != ds[a:b - 1]) | (sh[a + 1:b] != sh[a:b - 1]))
    return a + 1 + int(change[0]) if len(change) == 1 else b
