"""One lane's stream: pointer blocks -> worker-stage ops -> serial chain -> output units."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import NamedTuple

from zephon import accounting
from zephon.block import Block
from zephon.engine.lanes.chain import LaneChain
from zephon.engine.observe import metrics
from zephon.engine.plan.stages import Plan
from zephon.ops.base import OpContext
from zephon.ops.errors import wrap_op_error
from zephon.state.restore import Rederive, restore_chain
from zephon.types import SampleBatch, records_from_block


def apply_ops(ops, block: Block, count: bool = True) -> Block | None:
    """The worker stage: stateless operators, block in, block out (None: all dropped).

    An operator that does not keep its own count (``OpTraits.keeps_count``) and returns fewer
    records than it was given has the missing ones counted, by dataset, under ``"filtered"``.
    ``count=False``: a replay of records already drawn (priming's calibration, a restore
    re-deriving held records), whose removals were counted when they were drawn, or never
    will be."""
    for op in ops:
        t0 = metrics.now()
        with wrap_op_error(op.op_name, [block]):
            out = op.process_block(block)
        metrics.LOCAL.record(op.op_name, block, out, metrics.now() - t0)
        if count and (out is None or len(out) != len(block)) \
                and not op.traits().keeps_count:
            accounting.count_removed(op.op_name, block, out)
        block = out
        if block is None or not len(block):
            return None
    return block


def rederive(lane_plan, lane_id: int) -> Rederive:
    """What restore needs to make a lane's held records again: its chunks, the worker stage."""
    ws, L = lane_plan.work_source, lane_plan.canonical_replicas
    worker_ops = lane_plan.plan.worker_ops
    return Rederive(lane_id, lambda chunk_id: ws.lane_chunk(lane_id, L, chunk_id),
                    lambda block: apply_ops(worker_ops, block, count=False))


class Prepared(NamedTuple):
    """A worker-stage result in lane order: where the lane's pointers stand after it, and the
    block (None when every record was dropped). ``end`` is what a checkpoint resumes from."""

    end: tuple[int, int]
    block: Block | None


def pointer_end(pointer_block: Block) -> tuple[int, int]:
    return int(pointer_block.meta["chunk_id"][-1]), int(pointer_block.meta["chunk_offset"][-1]) + 1


def prepare(ops, pointer_block: Block) -> Prepared:
    return Prepared(pointer_end(pointer_block), apply_ops(ops, pointer_block))


def units_of(block: Block, has_batch: bool) -> list:
    if block.is_batch:
        return [SampleBatch._from_block(block)]
    return records_from_block(block)


class LaneRunner:
    """Pull-based lane: ``next_unit()`` returns the lane's next batch (or record), None at end.

    ``prepared`` yields the lane's worker-stage output (``Prepared``) in order; inline it is
    computed on demand, the multiprocess engine hands in blocks that workers prepared ahead.

    Checkpoints: whenever the lane has nothing ready it takes a *base* snapshot (pointer
    position + each accumulator's held-record cursors) before pulling the next block, then
    counts the units it delivers. A lane state is (base, units delivered since base): restoring
    rebuilds the accumulators from their cursors, re-pulls from the base position and skips
    that many units. Operators emit the same unit sequence however their input is split into
    blocks, so this holds for any micro-batch size or worker count.
    """

    def __init__(self, plan: Plan, lane_id: int, prepared: Iterator[Prepared],
                 ctx: OpContext, restore: dict | None = None, lane_plan=None) -> None:
        self.plan = plan
        self.lane_plan = lane_plan
        self.lane_id = lane_id
        self.prepared = prepared
        self.chain = LaneChain(plan, lane_id, ctx)
        self.ready: deque = deque()
        self.done = False
        self.position: tuple[int, int] = (0, 0)
        self.base: dict | None = None
        self.since = 0
        self.delivered = 0
        self._skip = 0
        self._restored = restore
        if restore is not None:
            base = restore["base"]
            self.position = tuple(base["position"])
            restore_chain(self.chain, base["ops"], rederive(lane_plan, lane_id))
            self._skip = int(restore["skip"])
            self.delivered = int(restore.get("delivered", 0))

    def next_unit(self):
        while self._skip:  # replaying the units already delivered before the checkpoint
            self._skip -= 1
            if self._next() is None:
                self._skip = 0
            else:
                self.delivered -= 1
        return self._next()

    def _next(self):
        while not self.ready:
            if self.done:
                return None
            self.base = {"position": list(self.position), "ops": self.chain.get_state()}
            point = getattr(self.lane_plan and self.lane_plan.work_source, "resume_point", None)
            if point is not None:  # a streaming user source: where its restore starts
                source = point(self.lane_id, self.base)
                if source is not None:
                    self.base["source"] = source
            self.since = 0
            t0 = metrics.now()
            item = next(self.prepared, None)
            metrics.LOCAL.wait_ns += metrics.now() - t0
            if item is None:
                outs = self.chain.finish()
                self.done = True
            else:
                self.position = item.end
                if item.block is None:  # the worker stage dropped every record of this block
                    continue
                outs = self.chain.push(item.block)
            for o in outs:
                self.ready.extend(units_of(o, self.plan.has_batch))
        self.since += 1
        self.delivered += 1
        return self.ready.popleft()

    def next_unit_with_state(self):
        """(unit, lane state after delivering it) — the state is what a checkpoint records."""
        unit = self.next_unit()
        return unit, self.snapshot()

    def snapshot(self) -> dict | None:
        """The lane's state after the last unit it returned (JSON-able once encoded)."""
        if self.base is None:
            return self._restored
        return {"base": self.base, "skip": self.since, "delivered": self.delivered}


def held_by_op(runners: list[LaneRunner]) -> dict[str, int]:
    """Records each stateful operator holds, summed over lanes (for metrics_snapshot)."""
    held: dict[str, int] = {}
    for r in runners:
        for k, v in r.chain.held_by_op().items():
            held[k] = held.get(k, 0) + v
    return held


def round_robin_states(runners: list[LaneRunner]) -> Iterator[tuple[int, object, dict | None]]:
    """(lane, unit, lane state after it) in ``round_robin`` order: what an engine that hands
    units to another process ships, so the receiver knows each lane's state per unit. A lane
    that ends yields (lane, None, its final state) where ``round_robin`` drops it."""
    live = sorted(runners, key=lambda r: r.lane_id)
    if len(live) == 1:  # one lane (one rank's default): no rotation to keep
        r = live[0]
        while True:
            u, state = r.next_unit_with_state()
            yield r.lane_id, u, state
            if u is None:
                return
    while live:
        r = min(live, key=lambda x: (x.delivered, x.lane_id))
        u, state = r.next_unit_with_state()
        if u is None:
            live.remove(r)
        yield r.lane_id, u, state


def round_robin(runners: list[LaneRunner]) -> Iterator:
    """Deliver one unit per lane in turn; finished lanes drop out of the rotation.

    The next lane is the live lane with the fewest units delivered (lowest lane id on ties):
    the same order as a plain rotation, and derivable from per-lane counts alone, so a resumed
    run (also on another number of ranks) continues the rotation without storing a pointer.
    """
    for _, unit, _ in round_robin_states(runners):
        if unit is not None:
            yield unit


def delivered_units(items: Iterator[tuple[int, object, dict | None]],
                    states: dict[int, dict | None]) -> Iterator:
    """The units of ``round_robin_states``-style items, noting in ``states`` each lane's state
    as its unit is delivered (what a checkpoint taken then must record); a lane's final state
    comes with no unit."""
    for lane, unit, state in items:
        states[lane] = state
        if unit is not None:
            yield unit
