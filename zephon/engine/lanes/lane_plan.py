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
        source = self.work_source
        if any(getattr(op, "per_chunk", False) for op in self.plan.serial_ops):
            source = _TargetRecorder(source, self.__dict__.setdefault("_targets", {}))
        blocks = lane_pointer_blocks(source, lane_id, self.canonical_replicas,
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
        state.pop("_targets", None)  # targets are noted where the pointer blocks are read
        return state

    def runner(self, lane_id: int, prepared: Iterator[Block | None], ctx: OpContext) -> LaneRunner:
        """The lane's serial part, fed by ``prepared`` (worker-stage output in lane order)."""
        state = self.restore.get(lane_id) if self.restore else None
        ops = self.plan.worker_ops
        datasets = getattr(ops[0], "datasets", None) if ops else None
        if datasets is not None:  # the components end-of-data hooks are called for
            ctx = ctx.with_services(component_ids=tuple(range(len(datasets))))
        targets = self.__dict__.setdefault("_targets", {})
        ctx = ctx.with_services(  # ensure_mixture: the target of each chunk the lane reads
            chunk_target=lambda chunk_id: targets.pop((lane_id, int(chunk_id)), None))
        return LaneRunner(self.plan, lane_id, prepared, ctx, restore=state, lane_plan=self)


class _TargetRecorder:
    """The engine's chunk source, noting each chunk's target mixture as the lane's pointer
    blocks read it (``target_mixture``, else the chunk's composition) for ``ensure_mixture``
    operators that follow each chunk's target; the lane takes them out as it reaches them."""

    def __init__(self, source: Any, targets: dict) -> None:
        self.source = source
        self.targets = targets

    def lane_chunk(self, lane_id: int, canonical_replicas: int, chunk_id: int) -> Any:
        chunk = self.source.lane_chunk(lane_id, canonical_replicas, chunk_id)
        if chunk is not None:
            target = chunk.target_mixture
            if not target:
                counts = chunk.counts()
                target = {k: v for k, v in counts.items() if v} or None
            self.targets[(int(lane_id), int(chunk_id))] = target
        return chunk
