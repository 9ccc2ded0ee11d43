"""Which worker gets a lane's next pointer block (``WorkerPool._pick``)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from zephon.block import Block
from zephon.engine.worker import WorkerPool


def _pool(workers: int, slots: int) -> WorkerPool:
    pool = WorkerPool.__new__(WorkerPool)  # the choosing logic only: no processes
    pool.spec = {"slots": slots}
    pool.issued = {}
    pool.workers = [SimpleNamespace(index=i, ready=True, free=list(range(slots)))
                    for i in range(workers)]
    return pool


def _block(lane: int, n: int = 4) -> Block:
    idx = np.arange(n)
    return Block.from_pointers(np.zeros(n), np.zeros(n), idx, lane_id=lane, chunk_id=0,
                               chunk_offset=idx)


def _take(pool: WorkerPool, lane: int) -> int:
    w = pool._pick(_block(lane))
    w.free.pop()
    return w.index


def test_a_lane_goes_out_in_runs_of_a_workers_slots():
    pool = _pool(workers=2, slots=4)
    assert [_take(pool, 0) for _ in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    pool.workers[0].free.extend([0, 1])  # worker 0 handed two slots back
    assert [_take(pool, 0) for _ in range(2)] == [0, 0]


def test_a_full_worker_is_passed_over_for_the_least_loaded():
    pool = _pool(workers=3, slots=2)
    pool.workers[0].free.clear()
    pool.workers[2].free.pop()
    assert _take(pool, 0) == 1  # run 0 belongs to worker 0, which has no free slot


def test_lanes_keep_runs_of_their_own():
    pool = _pool(workers=2, slots=2)
    got = [(lane, _take(pool, lane)) for lane in (0, 1, 0, 1)]
    assert got == [(0, 0), (1, 0), (0, 1), (1, 1)]
