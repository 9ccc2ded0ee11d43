"""The inline engine: the whole plan in the calling process (tests, debuggers, num_workers=0).

It is the reference semantics: the multiprocess engine must yield exactly the same stream.
"""

from __future__ import annotations

from collections.abc import Iterator

from zephon.engine.lanes.lane import held_by_op, prepare, round_robin
from zephon.engine.lanes.lane_plan import LanePlan
from zephon.errors import EngineError
from zephon.io.ahead import read_ahead
from zephon.ops.base import OpContext, StageInfo
from zephon.ops.fetch import FetchOp


class InlineEngine:
    kind = "inline"  # what the session reports as running

    def __init__(self, lane_plan: LanePlan) -> None:
        self.lane_plan = lane_plan
        ctx = OpContext(StageInfo(0, "inline", 0), worker_id=0, runner="inline")
        for op in lane_plan.plan.ops:
            op.setup(ctx)
        self.closed = False
        self.runners = [lane_plan.runner(lane, self._prepared(lane), ctx)
                        for lane in lane_plan.lanes]

    def _prepared(self, lane: int) -> Iterator:
        ops = self.lane_plan.plan.worker_ops
        blocks = iter(self.lane_plan.pointer_blocks(lane))
        # one pointer block of look-ahead: fetch tells the datasets what the next block reads,
        # so Parquet row groups decode on the read-ahead thread while this block is processed
        hint = ops[0].read_ahead if ops and isinstance(ops[0], FetchOp) and read_ahead.enabled \
            else None
        block = next(blocks, None)
        while block is not None:
            if self.closed:  # never a flush: the stream did not end, it was abandoned
                raise EngineError("this inline engine was closed")
            following = next(blocks, None)
            if hint is not None and following is not None:
                hint(following)
            yield prepare(ops, block)
            block = following

    def __iter__(self) -> Iterator:
        return round_robin(self.runners)

    def held_by_op(self) -> dict[str, int]:
        return held_by_op(self.runners)

    def lane_states(self) -> dict[int, dict | None]:
        return {r.lane_id: r.snapshot() for r in self.runners}

    def close(self) -> None:
        self.closed = True  # a generator still iterated elsewhere (a dropped race) ends
        self.runners = []
