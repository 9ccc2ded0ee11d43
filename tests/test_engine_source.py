"""How a lane's pointers are cut into micro-batches (zephon/engine/lanes/pointer_blocks.py)."""

from __future__ import annotations

import numpy as np

from zephon.engine.lanes.pointer_blocks import lane_pointer_blocks


class _Chunk:
    def __init__(self, dataset_id, shard_id, sample_idx) -> None:
        self.dataset_id = np.asarray(dataset_id, dtype=np.int64)
        self.shard_id = np.asarray(shard_id, dtype=np.int64)
        self.sample_idx = np.asarray(sample_idx, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.sample_idx)


class _Source:
    """One lane whose chunks are given whole."""

    def __init__(self, chunks: list[_Chunk]) -> None:
        self.chunks = chunks

    def lane_chunk(self, lane_id: int, lanes: int, chunk_id: int):
        return self.chunks[chunk_id] if chunk_id < len(self.chunks) else None


def _in_order(shard_rows: list[tuple[int, int]]) -> _Chunk:
    """Shards read one after the other, every row in order: [(shard, rows), ...]."""
    shard = np.concatenate([np.full(n, s) for s, n in shard_rows])
    rows = np.concatenate([np.arange(n) for _, n in shard_rows])
    return _Chunk(np.zeros(len(rows)), shard, rows)


def _pointers(blocks) -> list[tuple]:
    return [sid for b in blocks for sid in b.ids()]


def test_blocks_of_shards_read_in_order_end_at_each_shard_boundary():
    chunk = _in_order([(3, 2500), (5, 2500), (7, 1000)])
    blocks = list(lane_pointer_blocks(_Source([chunk]), 0, 1, 1024))
    for b in blocks:  # no block reads two shards: its row groups are decoded in one process
        assert len(set(b.meta["shard_id"].tolist())) == 1
    # after each boundary the blocks start at the shard's first row again: 0, 1024, 2048
    starts = [(int(b.meta["shard_id"][0]), int(b.meta["sample_idx"][0])) for b in blocks]
    assert starts == [(3, 0), (3, 1024), (3, 2048), (5, 0), (5, 1024), (5, 2048), (7, 0)]
    assert max(len(b) for b in blocks) == 1024
    assert _pointers(blocks) == list(zip(chunk.dataset_id.tolist(), chunk.shard_id.tolist(),
                                         chunk.sample_idx.tolist()))
    offsets = np.concatenate([b.meta["chunk_offset"] for b in blocks])
    assert offsets.tolist() == list(range(len(chunk)))


def test_interleaved_mixtures_are_cut_by_size_alone():
    n = 5000
    # the first block starts and ends in shard 1 with shard 0 between, rows numbered 7, 8, 9
    # whatever the shard: no run of one shard to keep in step
    i = np.arange(n)
    chunk = _Chunk(np.zeros(n), (i % 3 == 0).astype(np.int64), i + 7)
    blocks = list(lane_pointer_blocks(_Source([chunk]), 0, 1, 1000))
    assert [len(b) for b in blocks] == [1000] * 5
    assert _pointers(blocks) == list(zip(chunk.dataset_id.tolist(), chunk.shard_id.tolist(),
                                         chunk.sample_idx.tolist()))


def test_a_change_of_dataset_is_a_boundary_too_and_chunks_are_never_crossed():
    first = _Chunk([0] * 700 + [1] * 700, [4] * 1400, list(range(700)) * 2)
    second = _in_order([(4, 300)])
    blocks = list(lane_pointer_blocks(_Source([first, second]), 0, 1, 1000))
    assert [(int(b.meta["dataset_id"][0]), int(b.meta["chunk_id"][0]), len(b))
            for b in blocks] == [(0, 0, 700), (1, 0, 700), (0, 1, 300)]


def test_resumed_lane_keeps_its_small_first_blocks_and_falls_back_into_step():
    chunk = _in_order([(1, 100), (2, 200)])
    blocks = list(lane_pointer_blocks(_Source([chunk]), 0, 1, 64, start_offset=40,
                                      first_micro=16))
    # 16 rows first (40..55), then up to row 64 of shard 1, then to its end, then shard 2
    assert [len(b) for b in blocks] == [16, 8, 36, 64, 64, 64, 8]
    assert [int(b.meta["sample_idx"][0]) for b in blocks] == [40, 56, 64, 0, 64, 128, 192]
    assert int(blocks[3].meta["shard_id"][0]) == 2


def test_a_chunk_that_starts_mid_shard_falls_back_into_step_with_the_rows():
    first = _in_order([(4, 1000), (6, 1384)])
    rest = _Chunk(np.zeros(3616), np.full(3616, 6), np.arange(1384, 5000))
    blocks = list(lane_pointer_blocks(_Source([first, rest]), 0, 1, 1024))
    starts = [(int(b.meta["chunk_id"][0]), int(b.meta["sample_idx"][0]), len(b)) for b in blocks]
    assert starts == [(0, 0, 1000), (0, 0, 1024), (0, 1024, 360),
                      (1, 1384, 664), (1, 2048, 1024), (1, 3072, 1024), (1, 4096, 904)]


def test_rows_in_shuffled_order_are_cut_by_size_alone():
    rows = np.random.default_rng(1).permutation(3000)
    chunk = _Chunk(np.zeros(3000), np.full(3000, 2), rows)
    blocks = list(lane_pointer_blocks(_Source([chunk]), 0, 1, 1000))
    assert [len(b) for b in blocks] == [1000, 1000, 1000]
