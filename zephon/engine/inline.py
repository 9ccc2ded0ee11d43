"""The inline engine: the whole plan in the calling process (tests, debuggers, num_workers=0).

It is the reference semantics: the multiprocess engine must yield exactly the same stream.
"""

from __future__ import annotations

from collections.abc import Iterator

from zephon.engine.lane import held_by_op, prepare, round_robin
from zephon.engine.lane_plan import LanePlan
from zephon.ops.base import OpContext, StageInfo


class InlineEngine:
    def __init__(self, lane_plan: LanePlan) -> None:
        self.lane_plan = lane_plan
        ctx = OpContext(StageInfo(0, "inline", 0), worker_id=0, runner="inline")
        for op in lane_plan.plan.ops:
            op.setup(ctx)
        self.runners = [lane_plan.runner(lane, self._prepared(lane), ctx)
                        for lane in lane_plan.lanes]

    def _prepared(self, lane: int) -> Iterator:
        ops = self.lane_plan.plan.worker_ops
        for block in self.lane_plan.pointer_blocks(lane):
            yield prepare(ops, block)

    def __iter__(self) -> Iterator:
        return round_robin(self.runners)

    def held_by_op(self) -> dict[str, int]:
        return held_by_op(self.runners)

    def lane_states(self) -> dict[int, dict | None]:
        return {r.lane_id: r.snapshot() for r in self.runners}

    def close(self) -> None:
        self.runners = []
