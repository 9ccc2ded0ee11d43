"""Everything an engine needs to run a set of lanes; picklable, so a coordinator process can
receive it whole. Both engines build their lanes through it, so resume logic lives in one place.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from zephon.block import Block
from zephon.engine.lanes.lane import LaneRunner
from zephon.engine.lanes.pointer_blocks import lane_pointer_blocks
from zephon.engine.plan.stages import Plan
from zephon.ops.base import OpContext


@dataclass
class LanePlan:
    plan: Plan
    work_source: Any
    lanes: tuple[int, ...]
    canonical_replicas: int
    micro: int
    restore: dict[int, dict] | None = None  # per-lane checkpoint states to resume from
    extra: dict[str, Any] = field(default_factory=dict)

    def pointer_blocks(self, lane_id: int) -> Iterator[Block]:
        """The lane's pointer blocks, from its resume position (or the start)."""
        start_chunk, start_offset, first = 0, 0, None
        if self.restore and lane_id in self.restore:
            start_chunk, start_offset = self.restore[lane_id]["base"]["position"]
            first = max(16, self.micro // 32)  # buffers are full: a little input yields a batch
        blocks = lane_pointer_blocks(self.work_source, lane_id, self.canonical_replicas,
                                     self.micro, start_chunk=start_chunk, start_offset=start_offset,
                                     first_micro=first)
        prefetch = self.extra.get("prefetch")
        if prefetch:
            from zephon.engine.lanes.prefetch import warm_ahead

            blocks = warm_ahead(blocks, prefetch["buffer_size"], self._prefetcher(prefetch))
        return blocks

    def _prefetcher(self, conf: dict):
        """One shard prefetcher per process (thread pools do not travel between processes)."""
        import os

        mine = self.__dict__.get("_prefetch_pool")
        if mine is None or mine[0] != os.getpid():
            from zephon.io import ShardPrefetcher

            datasets = self.plan.worker_ops[0].datasets
            mine = (os.getpid(), ShardPrefetcher(datasets, conf["parallelism"]))
            self.__dict__["_prefetch_pool"] = mine
        return mine[1]

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_prefetch_pool", None)
        return state

    def runner(self, lane_id: int, prepared: Iterator[Block | None], ctx: OpContext) -> LaneRunner:
        """The lane's serial part, fed by ``prepared`` (worker-stage output in lane order)."""
        state = self.restore.get(lane_id) if self.restore else None
        ops = self.plan.worker_ops
        datasets = getattr(ops[0], "datasets", None) if ops else None
        if datasets is not None:  # the components end-of-data hooks are called for
            ctx = ctx.with_services(component_ids=tuple(range(len(datasets))))
        return LaneRunner(self.plan, lane_id, prepared, ctx, restore=state, lane_plan=self)
