"""Pointer blocks of one lane: chunk k of the lane, cut into micro-batches."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from zephon.block import Block


def lane_pointer_blocks(ws, lane_id: int, lanes: int, micro: int, *, start_chunk: int = 0,
                        start_offset: int = 0, first_micro: int | None = None) -> Iterator[Block]:
    """Yield the lane's pointers as blocks of at most ``micro``, never crossing a chunk.

    A lane reading shards in order gets blocks in step with the shards' rows: a block that
    would run from the end of one shard into the next ends at the shard boundary, and a run
    that starts mid-shard (at a chunk boundary, on resume) first ends at a row that is a
    multiple of ``micro``. Blocks out of step would each straddle two row groups, and with
    several workers each such row group would be decoded in two processes. Blocks that mix
    shards more often (an interleaved mixture) or rows in shuffled order are cut by size alone.

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
            b = _shard_cut(chunk, a, min(a + size, n), micro)
            yield Block.from_pointers(
                chunk.dataset_id[a:b], chunk.shard_id[a:b], chunk.sample_idx[a:b],
                lane_id=lane_id, chunk_id=chunk_id,
                chunk_offset=np.arange(a, b, dtype=np.int64),
            )
            a = b
            size = min(micro, size * 2)
        chunk_id += 1
        offset = 0


def _shard_cut(chunk, a: int, b: int, micro: int) -> int:
    """Where the block ``[a, b)`` should end: at the one shard boundary inside it, if it
    crosses exactly one; within a run of consecutive rows of one shard, at the next row that is
    a multiple of ``micro`` (a run that starts mid-shard, at a chunk boundary or on resume,
    falls back into step with the shard's row groups); else at ``b``."""
    ds, sh, rows = chunk.dataset_id, chunk.shard_id, chunk.sample_idx
    if b - a < 2:
        return b
    if ((ds[a:b] == ds[a]) & (sh[a:b] == sh[a])).all():  # one shard throughout
        first = int(rows[a])
        if first % micro == 0 or not (np.diff(rows[a:b]) == 1).all():
            return b  # already in step, or not one consecutive run: cut by size
        return min(b, a + micro - first % micro)
    change = np.flatnonzero((ds[a + 1:b] != ds[a:b - 1]) | (sh[a + 1:b] != sh[a:b - 1]))
    return a + 1 + int(change[0]) if len(change) == 1 else b
